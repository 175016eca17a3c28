/* tasks.c: the public task API (poas.h, "tasks"): argument checks and the
 * context's plumbing; the runtime itself is schedule/tasks.c. A task's
 * host implementation runs through a small trampoline that hands it the
 * addresses of its accesses; a device implementation through one that
 * copies its accesses to the device and back (device_trampoline). */
#include "api/context.h"
#include "schedule/tasks.h"

#include <stdlib.h>
#include <string.h>

/* A registration names the memory that tasks' accesses are offsets into;
 * tasks are ordered by the bytes they touch, so the runtime keeps nothing
 * of it. The context lists the records (ctx->buffers); the caller holds a
 * handle to one (schedule/tasks.h), never its address. */
struct poas_buffer {
  poas_context *ctx;
  char *ptr;
  size_t bytes;
  uintptr_t handle;
  poas_buffer *next;
};

static poas_buffer *registration_of(const poas_buffer *handle) {
  return poas__handle_get((uintptr_t)handle, POAS__HANDLE_BUFFER);
}

int poas__context_tasks(poas_context *ctx, poas__tasks **out) {
  if (!ctx->tasks) {
    int rc = poas__tasks_create(&ctx->devices, &ctx->tasks);
    if (rc)
      return rc;
  }
  *out = ctx->tasks;
  return 0;
}

void poas__context_tasks_close(poas_context *ctx) {
  poas__tasks_destroy(ctx->tasks);
  ctx->tasks = NULL;
  while (ctx->buffers) {
    poas_buffer *b = ctx->buffers;
    ctx->buffers = b->next;
    poas__handle_take(b->handle, POAS__HANDLE_BUFFER);
    free(b);
  }
}

int poas_buffer_register(poas_context *ctx, void *ptr, size_t bytes, poas_buffer **out) {
  poas__clear_detail();
  if (!ctx || !ptr || !out)
    return poas__fail(POAS_ENULL, "poas_buffer_register: %s is NULL",
                      !ctx ? "ctx" : !ptr ? "ptr" : "out");
  if (bytes == 0)
    return poas__fail(POAS_EINVAL, "poas_buffer_register: empty buffer");
  /* Ranges are compared by their ends: one past the address space would
   * wrap to an empty range that conflicts with nothing. */
  if (bytes > UINTPTR_MAX - (uintptr_t)ptr)
    return poas__fail(POAS_EINVAL,
                      "poas_buffer_register: %zu bytes from %p run past the end "
                      "of the address space",
                      bytes, ptr);
  poas_buffer *b = calloc(1, sizeof *b);
  if (!b || !(b->handle = poas__handle_new(b, POAS__HANDLE_BUFFER))) {
    free(b);
    return poas__fail(POAS_ENOMEM, "poas_buffer_register: out of memory");
  }
  b->ctx = ctx, b->ptr = ptr, b->bytes = bytes;
  pthread_mutex_lock(&ctx->buffers_lock);
  b->next = ctx->buffers;
  ctx->buffers = b;
  pthread_mutex_unlock(&ctx->buffers_lock);
  *out = (poas_buffer *)b->handle;
  return 0;
}

int poas_buffer_unregister(poas_buffer *handle) {
  poas__clear_detail();
  if (!handle)
    return poas__fail(POAS_ENULL, "poas_buffer_unregister: buf is NULL");
  poas_buffer *buf = registration_of(handle);
  if (!buf)
    return poas__fail(POAS_EINVAL, "poas_buffer_unregister: not a registered buffer "
                      "(unregistered already, or its context finalized)");
  poas_context *ctx = buf->ctx;
  int rc = ctx->tasks ? poas__tasks_wait_all(ctx->tasks) : 0;
  if (rc)
    return rc;
  if (poas__handle_take((uintptr_t)handle, POAS__HANDLE_BUFFER) != buf)
    return poas__fail(POAS_EINVAL, "poas_buffer_unregister: unregistered meanwhile");
  pthread_mutex_lock(&ctx->buffers_lock);
  for (poas_buffer **p = &ctx->buffers; *p; p = &(*p)->next)
    if (*p == buf) {
      *p = buf->next;
      break;
    }
  pthread_mutex_unlock(&ctx->buffers_lock);
  free(buf);
  return 0;
}

_Static_assert(POAS_TASK_MAX_ACCESS <= POAS__MAX_ACCESS, "a task's accesses fit an instruction");

/* What a task carries by value: its implementations, and each access's
 * host bytes and mode. */
typedef struct task_call {
  poas_context *ctx;
  int device;                       /* where it runs; -1: on the host */
  poas_cpu_fn cpu;
  poas_cuda_fn cuda;
  poas_opencl_fn opencl;
  void *arg;
  int naccess;
  void *host[POAS_TASK_MAX_ACCESS]; /* each access's first byte */
  size_t len[POAS_TASK_MAX_ACCESS];
  int mode[POAS_TASK_MAX_ACCESS];
} task_call;
_Static_assert(sizeof(task_call) <= POAS__TASK_PAYLOAD, "a task's call fits its payload");

/* What the task writes makes device copies of those bytes stale
 * (api/resident.c). */
static void drop_stale_copies(const task_call *c) {
  for (int i = 0; i < c->naccess; i++)
    if (c->mode[i] & POAS_W)
      poas__resident_invalidate(c->ctx, (uintptr_t)c->host[i],
                                (uintptr_t)c->host[i] + c->len[i]);
}

static int cpu_trampoline(void *payload) {
  task_call *c = payload;
  drop_stale_copies(c);
  c->cpu(c->host, c->arg);
  return 0;
}

/* The device a task runs on: the first GPU when it has a CUDA
 * implementation, else the first OpenCL device when it has an OpenCL one
 * (device code is what its author meant to run), else the host; -1 for the
 * host, or an error when no device can run any of its implementations. */
static int task_device(const poas_context *ctx, const poas_task_desc *d, int *device) {
  for (int pass = 0; pass < 2; pass++) {
    poas_device_kind want = pass == 0 ? POAS_DEVICE_CUDA : POAS_DEVICE_OPENCL;
    if (pass == 0 ? !d->cuda : !d->opencl)
      continue;
    for (int i = 0; i < ctx->devices.ndev; i++)
      if (ctx->devices.dev[i]->info.kind == want && ctx->devices.dev[i]->be->native_lane) {
        *device = i;
        return 0;
      }
  }
  *device = -1;
  if (d->cpu)
    return 0;
  if (!d->cuda && !d->opencl)
    return poas__fail(POAS_EINVAL, "task: no implementation given");
  return poas__fail(POAS_ENOTSUP, "task: it has only %s%s%s implementations, and the context "
                    "has no such device",
                    d->cuda ? "CUDA" : "", d->cuda && d->opencl ? " and " : "",
                    d->opencl ? "OpenCL" : "");
}

/* Checks a task and finds the registrations its accesses name (reg[i] for
 * access i). */
static int task_check(const poas_context *ctx, const poas_task_desc *d, int *device,
                      const poas_buffer *reg[]) {
  int rc = task_device(ctx, d, device);
  if (rc)
    return rc;
  if (d->naccess < 0 || d->naccess > POAS_TASK_MAX_ACCESS)
    return poas__fail(POAS_EINVAL, "task: naccess=%d (0 to %d)", d->naccess,
                      POAS_TASK_MAX_ACCESS);
  for (int i = 0; i < d->naccess; i++) {
    const poas_task_access *a = &d->access[i];
    if (!a->buffer)
      return poas__fail(POAS_ENULL, "task: access %d has no buffer", i);
    const poas_buffer *b = reg[i] = registration_of(a->buffer);
    if (!b)
      return poas__fail(POAS_EINVAL, "task: access %d names a buffer that is not registered", i);
    if (b->ctx != ctx)
      return poas__fail(POAS_EINVAL, "task: access %d names another context's buffer", i);
    if (a->mode != POAS_R && a->mode != POAS_W && a->mode != POAS_RW)
      return poas__fail(POAS_EINVAL, "task: access %d has mode %d", i, (int)a->mode);
    if (a->offset >= b->bytes || a->length > b->bytes - a->offset)
      return poas__fail(POAS_ERANGE, "task: access %d [%zu, +%zu) outside its %zu-byte buffer",
                        i, a->offset, a->length, b->bytes);
  }
  return 0;
}

/* A device task runs on a host thread of the task runtime and drives its
 * device synchronously: each access is copied into a buffer of its own on
 * the device (W-only ones too, so that bytes the implementation leaves
 * alone come back unchanged), the implementation enqueues its work on the
 * compute lane, and the W and RW accesses are copied back once the lane is
 * done. */
static int device_trampoline(void *payload) {
  task_call *c = payload;
  poas__device *d = c->ctx->devices.dev[c->device];
  const poas__backend *be = d->be;
  poas__mem mem[POAS_TASK_MAX_ACCESS] = {{NULL}};
  void *bufs[POAS_TASK_MAX_ACCESS] = {NULL};
  int rc = 0, n = 0;
  for (; n < c->naccess && !rc; n++) {
    rc = poas__dev_alloc(d, c->len[n], &mem[n]);
    if (rc)
      break;
    bufs[n] = mem[n].ptr;
    poas__copy2d shape = {c->len[n], 1, c->len[n], c->len[n], 0, 0};
    rc = be->copy_h2d(d, POAS__LANE_H2D, mem[n], c->host[n], &shape);
  }
  if (!rc)
    rc = be->lane_sync(d, POAS__LANE_H2D);
  if (!rc) {
    drop_stale_copies(c);
    void *lane = be->native_lane(d, POAS__LANE_COMPUTE);
    if (d->info.kind == POAS_DEVICE_CUDA)
      c->cuda(bufs, c->arg, lane);
    else
      c->opencl(bufs, c->arg, lane);
    rc = be->lane_sync(d, POAS__LANE_COMPUTE);
  }
  for (int i = 0; i < c->naccess && !rc; i++)
    if (c->mode[i] & POAS_W) {
      poas__copy2d shape = {c->len[i], 1, c->len[i], c->len[i], 0, 0};
      rc = be->copy_d2h(d, POAS__LANE_D2H, c->host[i], mem[i], &shape);
    }
  /* After an error, copies in may still be running on their lane: every
   * lane is waited for, and the buffers go back to the device, not to its
   * cache (as run_serial does). */
  int failed = rc != 0;
  int sync = failed ? poas__dev_sync_all(d) : be->lane_sync(d, POAS__LANE_D2H);
  if (!rc)
    rc = sync;
  for (int i = 0; i < n; i++)
    if (mem[i].ptr)
      poas__dev_release(d, mem[i], c->len[i], failed || sync);
  return rc;
}

int poas_task_submit(poas_context *ctx, const poas_task_desc *desc, poas_task **out) {
  poas__clear_detail();
  if (!ctx || !desc)
    return poas__fail(POAS_ENULL, "poas_task_submit: %s is NULL", ctx ? "desc" : "ctx");
  int device;
  const poas_buffer *reg[POAS_TASK_MAX_ACCESS];
  int rc = task_check(ctx, desc, &device, reg);
  poas__tasks *t;
  if (rc || (rc = poas__refuse_while_calibrating(ctx, "poas_task_submit")) ||
      (rc = poas__context_tasks(ctx, &t)))
    return rc;
  task_call call = {ctx, device, desc->cpu, desc->cuda, desc->opencl, desc->arg, desc->naccess,
                    {NULL}, {0}, {0}};
  poas__access acc[POAS_TASK_MAX_ACCESS + 1];
  for (int i = 0; i < desc->naccess; i++) {
    const poas_task_access *a = &desc->access[i];
    size_t len = a->length ? a->length : reg[i]->bytes - a->offset;
    call.host[i] = reg[i]->ptr + a->offset, call.len[i] = len, call.mode[i] = (int)a->mode;
    uintptr_t lo = (uintptr_t)call.host[i];
    acc[i] = (poas__access){poas__tasks_host_region(t, lo, lo + len), (poas__access_mode)a->mode};
  }
  if (device < 0)
    return poas__tasks_submit(t, cpu_trampoline, &call, sizeof call, acc, desc->naccess, out);
  /* Device tasks take the devices in turn with GEMM runs, as those do. */
  acc[desc->naccess] = (poas__access){poas__tasks_devices_region(t), POAS__RW};
  return poas__tasks_submit(t, device_trampoline, &call, sizeof call, acc, desc->naccess + 1,
                            out);
}

int poas_wait_all(poas_context *ctx) {
  poas__clear_detail();
  if (!ctx)
    return poas__fail(POAS_ENULL, "poas_wait_all: ctx is NULL");
  if (!ctx->tasks)
    return 0;
  int rc = poas__wait_tasks(ctx);
  return rc ? rc : poas__tasks_take_error(ctx->tasks);
}

int poas__wait_tasks(poas_context *ctx) {
  if (!ctx->tasks)
    return 0;
  int rc = poas__tasks_wait_all(ctx->tasks);
  /* With every task done, the device copies asynchronous GEMMs left serve
   * nobody: freed here rather than by the next GEMM, they no longer hold
   * a quarter of a device from what comes next (a device task, a
   * synchronous GEMM's plan, calibration's memory probe). */
  if (!rc)
    poas__resident_drop_stale(ctx, poas__tasks_epoch(ctx->tasks));
  return rc;
}
