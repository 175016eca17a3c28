/* runtime.c: a host-memory model of the part of the CUDA runtime that
 * POAS's CUDA backend and its tests call, built as libcudart with the real
 * soname (tests/fakecuda/local.am), so that the backend runs unchanged
 * where no GPU is (tests/test-cuda-fake.sh). It checks that the API is
 * used correctly and that the right bytes move; it says nothing of speed.
 *
 * What it models, because real bugs hide there: each stream is an
 * in-order queue run by a worker thread of its own, so work that was not
 * ordered by an event wait runs in any order (FAKECUDA_DELAY_US sleeps
 * before each operation to widen the races); an event completes when its
 * stream reaches it, and a stream waits for the record current when it was
 * told to wait; copies from pageable memory are staged at the call and
 * copies to it finish before the call returns, while page-locked memory is
 * read and written when the stream gets there; cudaFree and cudaFreeHost
 * wait for the device. Device memory is a registry of cudaMalloc'd blocks,
 * filled with NaN at allocation, limited to FAKECUDA_MEMORY per device
 * (default 2G; suffixes K, M, G), on FAKECUDA_DEVICES devices (default 1).
 * Every device pointer a copy or memset is given must lie, with its whole
 * strided extent, in one live block of the stream's device, and a host
 * pointer in none; a violation aborts with a message naming the call.
 * FAKECUDA_FAIL=name:N[:code] fails the Nth call of `name` (a sticky error
 * loses the device's context for good, as on a GPU). */
#include "fakecuda.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_DEVICES 16
#define MAX_BLOCKS 4096
#define MAX_FAILS 8
/* cudaMalloc's alignment. */
#define ALIGN 256

/* ------------------------------------------------------------ settings */

typedef struct fail_rule {
  char name[64];
  long nth;
  int code; /* -1: the caller's default */
  atomic_long calls;
} fail_rule;

static struct {
  int devices;
  size_t memory;
  long delay_us;
  fail_rule fail[MAX_FAILS];
  int nfail;
} cfg;

static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;

static size_t parse_size(const char *s) {
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  int shift = *end == 'K' || *end == 'k' ? 10 : *end == 'M' || *end == 'm' ? 20
              : *end == 'G' || *end == 'g'  ? 30
                                            : 0;
  if (end == s || (shift && end[1] && end[1] != 'i' && end[1] != 'B') || (!shift && *end))
    fakecuda_misuse("FAKECUDA_MEMORY", "'%s' is no size (bytes, or with K, M or G)", s);
  return (size_t)v << shift;
}

static void parse_fail(const char *spec) {
  char copy[512];
  snprintf(copy, sizeof copy, "%s", spec);
  char *save = NULL;
  for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (cfg.nfail == MAX_FAILS)
      fakecuda_misuse("FAKECUDA_FAIL", "more than %d entries", MAX_FAILS);
    fail_rule *r = &cfg.fail[cfg.nfail++];
    char *colon = strchr(tok, ':');
    if (!colon || colon - tok >= (long)sizeof r->name)
      fakecuda_misuse("FAKECUDA_FAIL", "'%s' is not name:N[:code]", tok);
    memcpy(r->name, tok, (size_t)(colon - tok));
    char *end;
    r->nth = strtol(colon + 1, &end, 10);
    r->code = *end == ':' ? (int)strtol(end + 1, &end, 10) : -1;
    if (r->nth < 1 || *end)
      fakecuda_misuse("FAKECUDA_FAIL", "'%s' is not name:N[:code] with N >= 1", tok);
  }
}

static void read_settings(void) {
  const char *s = getenv("FAKECUDA_DEVICES");
  cfg.devices = s ? atoi(s) : 1;
  if (cfg.devices < 0 || cfg.devices > MAX_DEVICES)
    fakecuda_misuse("FAKECUDA_DEVICES", "'%s': 0 to %d", s, MAX_DEVICES);
  s = getenv("FAKECUDA_MEMORY");
  cfg.memory = s ? parse_size(s) : (size_t)2 << 30;
  s = getenv("FAKECUDA_DELAY_US");
  cfg.delay_us = s ? atol(s) : 0;
  s = getenv("FAKECUDA_FAIL");
  if (s && *s)
    parse_fail(s);
}

static void settings(void) { pthread_once(&cfg_once, read_settings); }

/* ------------------------------------------------------- shared state */

/* One lock and one condition for every queue, event and block: a test
 * model, where simplicity is worth more than concurrency. Operations run
 * outside it. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;

enum block_kind { DEVICE_MEM, HOST_ALLOC, HOST_REGISTERED };

typedef struct block {
  char *base;
  size_t size;
  int dev;
  enum block_kind kind;
} block;

static block blocks[MAX_BLOCKS];
static int nblocks;
static size_t used[MAX_DEVICES];
static atomic_int lost[MAX_DEVICES];

/* A context per device: the driver's handle for "device d is current". */
static struct fake_context {
  int dev;
} contexts[MAX_DEVICES];

static _Thread_local int current = -1;
static _Thread_local cudaError_t last_error;

typedef struct op {
  void (*fn)(void *);
  void *arg;
  struct op *next;
} op;

struct CUstream_st {
  int dev;
  op *head, *tail;
  unsigned long long queued, done;
  int stop;
  pthread_t worker;
  struct CUstream_st *next; /* the live list */
};

struct CUevent_st {
  int dev;
  unsigned long long recorded, completed;
  int refs; /* the handle, and each queued record or wait */
  struct CUevent_st *next;
};

static struct CUstream_st *streams;
static struct CUevent_st *events;
static struct CUstream_st *default_stream[MAX_DEVICES];

_Noreturn void fakecuda_misuse(const char *call, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "fakecuda: %s: ", call);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  abort();
}

/* ------------------------------------------------------------- errors */

#define FAKE_ERRORS(X)                                                                            \
  X(cudaSuccess, "no error")                                                                      \
  X(cudaErrorInvalidValue, "invalid argument")                                                    \
  X(cudaErrorMemoryAllocation, "out of memory")                                                   \
  X(cudaErrorInitializationError, "initialization error")                                        \
  X(cudaErrorInvalidPitchValue, "invalid pitch argument")                                         \
  X(cudaErrorInvalidDevice, "invalid device ordinal")                                             \
  X(cudaErrorNoDevice, "no CUDA-capable device is detected")                                      \
  X(cudaErrorInvalidResourceHandle, "invalid resource handle")                                    \
  X(cudaErrorNotReady, "device not ready")                                                        \
  X(cudaErrorIllegalAddress, "an illegal memory access was encountered")                          \
  X(cudaErrorLaunchTimeout, "the launch timed out and was terminated")                            \
  X(cudaErrorHostMemoryAlreadyRegistered, "part or all of the requested memory range is already " \
                                          "mapped")                                               \
  X(cudaErrorHostMemoryNotRegistered, "pointer does not correspond to a registered memory region") \
  X(cudaErrorLaunchFailure, "unspecified launch failure")                                         \
  X(cudaErrorUnknown, "unknown error")

const char *cudaGetErrorName(cudaError_t e) {
#define FAKE_NAME(name, text)                                                                     \
  if (e == name)                                                                                  \
    return #name;
  FAKE_ERRORS(FAKE_NAME)
#undef FAKE_NAME
  return "cudaErrorUnmodelledByFakecuda";
}

const char *cudaGetErrorString(cudaError_t e) {
#define FAKE_TEXT(name, text)                                                                     \
  if (e == name)                                                                                  \
    return text " (fake CUDA)";
  FAKE_ERRORS(FAKE_TEXT)
#undef FAKE_TEXT
  return "an error the fake CUDA runtime has no text for";
}

/* The runtime's sticky errors: the context is unusable after them. */
static int sticky(int e) {
  return e == cudaErrorIllegalAddress || e == cudaErrorLaunchTimeout ||
         e == cudaErrorLaunchFailure || e == cudaErrorAssert ||
         e == cudaErrorHardwareStackError || e == cudaErrorIllegalInstruction ||
         e == cudaErrorMisalignedAddress;
}

/* Returns e, kept as the thread's last error; a sticky one loses dev. */
static cudaError_t failed(cudaError_t e, int dev) {
  last_error = e;
  if (sticky(e) && dev >= 0 && dev < MAX_DEVICES) {
    int none = cudaSuccess;
    atomic_compare_exchange_strong(&lost[dev], &none, (int)e);
  }
  return e;
}

cudaError_t fakecuda_lost(int dev) {
  return dev >= 0 && dev < MAX_DEVICES ? (cudaError_t)atomic_load(&lost[dev]) : cudaSuccess;
}

int fakecuda_injected(const char *name, int *code) {
  settings();
  for (int i = 0; i < cfg.nfail; i++) {
    fail_rule *r = &cfg.fail[i];
    if (strcmp(r->name, name) != 0 || atomic_fetch_add(&r->calls, 1) + 1 != r->nth)
      continue;
    if (r->code >= 0)
      *code = r->code;
    fprintf(stderr, "fakecuda: %s: call %ld fails with %d, as FAKECUDA_FAIL asks\n", name,
            r->nth, *code);
    return 1;
  }
  return 0;
}

/* The start of every call that works on device dev's context: an
 * injected failure, or the error that lost the context. */
static cudaError_t enter_call(const char *name, int dev) {
  int code = cudaErrorIllegalAddress;
  if (fakecuda_injected(name, &code))
    return failed((cudaError_t)code, dev);
  cudaError_t e = fakecuda_lost(dev);
  return e == cudaSuccess ? e : failed(e, dev);
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = last_error;
  last_error = cudaSuccess;
  /* A lost context keeps answering with its error. */
  if (current >= 0 && fakecuda_lost(current) != cudaSuccess)
    last_error = fakecuda_lost(current);
  return e;
}

/* ------------------------------------------------------------ devices */

cudaError_t cudaGetDeviceCount(int *count) {
  settings();
  int code = cudaErrorNoDevice;
  if (fakecuda_injected("cudaGetDeviceCount", &code))
    return failed((cudaError_t)code, -1);
  if (cfg.devices == 0) {
    *count = 0;
    return failed(cudaErrorNoDevice, -1);
  }
  *count = cfg.devices;
  return cudaSuccess;
}

static int valid_device(int dev) {
  settings();
  return dev >= 0 && dev < cfg.devices;
}

cudaError_t cudaSetDevice(int dev) {
  if (!valid_device(dev))
    return failed(cudaErrorInvalidDevice, -1);
  int code = cudaErrorInvalidDevice;
  if (fakecuda_injected("cudaSetDevice", &code))
    return failed((cudaError_t)code, dev);
  current = dev;
  return cudaSuccess;
}

/* Device 0 for a thread with no current context, as the runtime says. */
cudaError_t cudaGetDevice(int *dev) {
  settings();
  if (cfg.devices == 0)
    return failed(cudaErrorNoDevice, -1);
  *dev = current < 0 ? 0 : current;
  return cudaSuccess;
}

int fakecuda_device_here(void) {
  settings();
  if (current < 0) {
    if (cfg.devices == 0)
      fakecuda_misuse("a CUDA call", "no device (FAKECUDA_DEVICES=0) to make current");
    current = 0;
  }
  return current;
}

void *fakecuda_context(void) { return current < 0 ? NULL : &contexts[current]; }

int fakecuda_set_context(void *context) {
  settings();
  if (!context) {
    current = -1;
    return 0;
  }
  for (int d = 0; d < cfg.devices; d++)
    if (context == &contexts[d]) {
      current = d;
      return 0;
    }
  return -1;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int dev) {
  if (!valid_device(dev))
    return failed(cudaErrorInvalidDevice, -1);
  memset(prop, 0, sizeof *prop);
  snprintf(prop->name, sizeof prop->name, "POAS fake CUDA device (host memory)");
  prop->totalGlobalMem = cfg.memory;
  prop->multiProcessorCount = 1;
  prop->warpSize = 32;
  prop->major = 0, prop->minor = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int dev) {
  if (!valid_device(dev))
    return failed(cudaErrorInvalidDevice, -1);
  if (attr != cudaDevAttrClockRate)
    fakecuda_misuse("cudaDeviceGetAttribute", "attribute %d is not modelled", (int)attr);
  *value = 1000000; /* kHz: round numbers, for a first guess only */
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}

/* ------------------------------------------------------ memory registry */

/* The block holding p, or NULL; the lock is held. */
static block *block_at(const void *p) {
  const char *c = p;
  for (int i = 0; i < nblocks; i++)
    if (c >= blocks[i].base && c < blocks[i].base + blocks[i].size)
      return &blocks[i];
  return NULL;
}

/* Whether [p, p + extent) overlaps a block of `kind`; the lock is held. */
static int overlaps(const void *p, size_t extent, enum block_kind kind) {
  const char *c = p;
  for (int i = 0; i < nblocks; i++)
    if (blocks[i].kind == kind && c < blocks[i].base + blocks[i].size &&
        blocks[i].base < c + (extent ? extent : 1))
      return 1;
  return 0;
}

static void add_block(char *base, size_t size, int dev, enum block_kind kind) {
  if (nblocks == MAX_BLOCKS)
    fakecuda_misuse("the block registry", "more than %d blocks live", MAX_BLOCKS);
  blocks[nblocks++] = (block){base, size, dev, kind};
}

static void drop_block(block *b) { *b = blocks[--nblocks]; }

void fakecuda_check_device(const char *call, const char *what, const void *p, size_t extent,
                           int dev) {
  pthread_mutex_lock(&lock);
  block *b = block_at(p);
  int ok = b && b->kind == DEVICE_MEM && b->dev == dev &&
           extent <= (size_t)(b->base + b->size - (const char *)p);
  block copy = b ? *b : (block){0};
  pthread_mutex_unlock(&lock);
  if (ok)
    return;
  if (!b || copy.kind != DEVICE_MEM)
    fakecuda_misuse(call, "%s %p (%zu bytes) is not device memory", what, p, extent);
  if (copy.dev != dev)
    fakecuda_misuse(call, "%s %p is memory of device %d, used on device %d", what, p, copy.dev,
                    dev);
  fakecuda_misuse(call, "%s %p + %zu bytes runs past its block %p of %zu bytes by %zu", what, p,
                  extent, (void *)copy.base, copy.size,
                  extent - (size_t)(copy.base + copy.size - (const char *)p));
}

static void check_host(const char *call, const char *what, const void *p, size_t extent) {
  pthread_mutex_lock(&lock);
  int bad = overlaps(p, extent, DEVICE_MEM);
  pthread_mutex_unlock(&lock);
  if (bad)
    fakecuda_misuse(call, "%s %p (%zu bytes) is host memory by the call, but device memory", what,
                    p, extent);
}

/* Whether host memory is page-locked where it starts. */
static int pinned(const void *p) {
  pthread_mutex_lock(&lock);
  block *b = block_at(p);
  int yes = b && b->kind != DEVICE_MEM;
  pthread_mutex_unlock(&lock);
  return yes;
}

static int is_device(const void *p) {
  pthread_mutex_lock(&lock);
  block *b = block_at(p);
  int yes = b && b->kind == DEVICE_MEM;
  pthread_mutex_unlock(&lock);
  return yes;
}

/* --------------------------------------------------------------- streams */

static void *worker_main(void *arg) {
  struct CUstream_st *s = arg;
  pthread_mutex_lock(&lock);
  for (;;) {
    while (!s->head && !s->stop)
      pthread_cond_wait(&changed, &lock);
    if (!s->head)
      break;
    op *o = s->head;
    pthread_mutex_unlock(&lock);
    if (cfg.delay_us > 0)
      nanosleep(&(struct timespec){cfg.delay_us / 1000000, cfg.delay_us % 1000000 * 1000}, NULL);
    o->fn(o->arg);
    pthread_mutex_lock(&lock);
    s->head = o->next;
    if (!s->head)
      s->tail = NULL;
    s->done++;
    free(o);
    pthread_cond_broadcast(&changed);
  }
  pthread_mutex_unlock(&lock);
  return NULL;
}

static struct CUstream_st *stream_new(int dev) {
  struct CUstream_st *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  s->dev = dev;
  if (pthread_create(&s->worker, NULL, worker_main, s) != 0) {
    free(s);
    return NULL;
  }
  return s;
}

/* The live stream behind a handle (NULL and cudaStreamLegacy: the current
 * device's default stream, made on first use); the lock is held. */
static struct CUstream_st *stream_of(const char *call, cudaStream_t h) {
  if (h == cudaStreamPerThread)
    fakecuda_misuse(call, "cudaStreamPerThread is not modelled");
  if (!h || h == cudaStreamLegacy) {
    int dev = fakecuda_device_here();
    if (!default_stream[dev] && !(default_stream[dev] = stream_new(dev)))
      fakecuda_misuse(call, "no memory or thread for the default stream");
    return default_stream[dev];
  }
  for (struct CUstream_st *s = streams; s; s = s->next)
    if (s == h)
      return s;
  fakecuda_misuse(call, "stream %p is not a live stream", (void *)h);
}

int fakecuda_stream_device(const char *call, cudaStream_t h) {
  pthread_mutex_lock(&lock);
  int dev = stream_of(call, h)->dev;
  pthread_mutex_unlock(&lock);
  return dev;
}

/* Queues fn(arg) and returns its ticket: the stream's `done` count once
 * it has run. The lock is held. */
static unsigned long long enqueue_locked(const char *call, struct CUstream_st *s,
                                         void (*fn)(void *), void *arg) {
  op *o = malloc(sizeof *o);
  if (!o)
    fakecuda_misuse(call, "out of host memory");
  *o = (op){fn, arg, NULL};
  if (s->tail)
    s->tail->next = o;
  else
    s->head = o;
  s->tail = o;
  pthread_cond_broadcast(&changed);
  return ++s->queued;
}

void fakecuda_enqueue(const char *call, cudaStream_t h, void (*fn)(void *), void *arg) {
  pthread_mutex_lock(&lock);
  enqueue_locked(call, stream_of(call, h), fn, arg);
  pthread_mutex_unlock(&lock);
}

static void wait_done_locked(struct CUstream_st *s, unsigned long long ticket) {
  while (s->done < ticket)
    pthread_cond_wait(&changed, &lock);
}

/* Every stream of dev has run what was queued on it; the lock is held. */
static void device_sync_locked(int dev) {
  for (struct CUstream_st *s = streams; s; s = s->next)
    if (s->dev == dev)
      wait_done_locked(s, s->queued);
  if (default_stream[dev])
    wait_done_locked(default_stream[dev], default_stream[dev]->queued);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *out, unsigned flags) {
  int dev = fakecuda_device_here();
  cudaError_t e = enter_call("cudaStreamCreateWithFlags", dev);
  if (e != cudaSuccess)
    return e;
  struct CUstream_st *s = stream_new(dev);
  if (!s)
    return failed(cudaErrorMemoryAllocation, dev);
  pthread_mutex_lock(&lock);
  s->next = streams;
  streams = s;
  pthread_mutex_unlock(&lock);
  *out = s;
  return cudaSuccess;
}

/* Waits for the stream's work, then ends its worker. */
cudaError_t cudaStreamDestroy(cudaStream_t h) {
  pthread_mutex_lock(&lock);
  struct CUstream_st *s = stream_of("cudaStreamDestroy", h);
  if (s == default_stream[s->dev])
    fakecuda_misuse("cudaStreamDestroy", "the default stream cannot be destroyed");
  cudaError_t e = enter_call("cudaStreamDestroy", s->dev);
  if (e != cudaSuccess) {
    pthread_mutex_unlock(&lock);
    return e;
  }
  wait_done_locked(s, s->queued);
  for (struct CUstream_st **p = &streams; *p; p = &(*p)->next)
    if (*p == s) {
      *p = s->next;
      break;
    }
  s->stop = 1;
  pthread_cond_broadcast(&changed);
  pthread_mutex_unlock(&lock);
  pthread_join(s->worker, NULL);
  free(s);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t h) {
  pthread_mutex_lock(&lock);
  struct CUstream_st *s = stream_of("cudaStreamSynchronize", h);
  cudaError_t e = enter_call("cudaStreamSynchronize", s->dev);
  if (e == cudaSuccess)
    wait_done_locked(s, s->queued);
  pthread_mutex_unlock(&lock);
  return e;
}

/* ---------------------------------------------------------------- events */

static struct CUevent_st *event_of(const char *call, cudaEvent_t h) {
  for (struct CUevent_st *ev = events; ev; ev = ev->next)
    if (ev == h)
      return ev;
  fakecuda_misuse(call, "event %p is not a live event", (void *)h);
}

/* Drops a reference; the last one frees the event. The lock is held. */
static void event_unref(struct CUevent_st *ev) {
  if (--ev->refs == 0)
    free(ev);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *out, unsigned flags) {
  int dev = fakecuda_device_here();
  cudaError_t e = enter_call("cudaEventCreateWithFlags", dev);
  if (e != cudaSuccess)
    return e;
  struct CUevent_st *ev = calloc(1, sizeof *ev);
  if (!ev)
    return failed(cudaErrorMemoryAllocation, dev);
  ev->dev = dev;
  ev->refs = 1;
  pthread_mutex_lock(&lock);
  ev->next = events;
  events = ev;
  pthread_mutex_unlock(&lock);
  *out = ev;
  return cudaSuccess;
}

/* The release is deferred, as the runtime's is, until queued records and
 * waits that name the event have run. */
cudaError_t cudaEventDestroy(cudaEvent_t h) {
  pthread_mutex_lock(&lock);
  struct CUevent_st *ev = event_of("cudaEventDestroy", h);
  for (struct CUevent_st **p = &events; *p; p = &(*p)->next)
    if (*p == ev) {
      *p = ev->next;
      break;
    }
  event_unref(ev);
  pthread_mutex_unlock(&lock);
  return cudaSuccess;
}

typedef struct event_op {
  struct CUevent_st *ev;
  unsigned long long gen;
} event_op;

static void run_record(void *arg) {
  event_op *o = arg;
  pthread_mutex_lock(&lock);
  if (o->gen > o->ev->completed)
    o->ev->completed = o->gen;
  pthread_cond_broadcast(&changed);
  event_unref(o->ev);
  pthread_mutex_unlock(&lock);
  free(o);
}

static void run_wait(void *arg) {
  event_op *o = arg;
  pthread_mutex_lock(&lock);
  while (o->ev->completed < o->gen)
    pthread_cond_wait(&changed, &lock);
  event_unref(o->ev);
  pthread_mutex_unlock(&lock);
  free(o);
}

static cudaError_t queue_event_op(const char *call, cudaStream_t h, cudaEvent_t evh, int record) {
  event_op *o = malloc(sizeof *o);
  if (!o)
    fakecuda_misuse(call, "out of host memory");
  pthread_mutex_lock(&lock);
  struct CUstream_st *s = stream_of(call, h);
  struct CUevent_st *ev = event_of(call, evh);
  cudaError_t e = enter_call(call, s->dev);
  if (e == cudaSuccess && record && ev->dev != s->dev)
    e = failed(cudaErrorInvalidResourceHandle, -1);
  if (e != cudaSuccess) {
    pthread_mutex_unlock(&lock);
    free(o);
    return e;
  }
  /* A wait is for the record current now; later records do not count. */
  *o = (event_op){ev, record ? ++ev->recorded : ev->recorded};
  ev->refs++;
  enqueue_locked(call, s, record ? run_record : run_wait, o);
  pthread_mutex_unlock(&lock);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s) {
  return queue_event_op("cudaEventRecord", s, ev, 1);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t ev, unsigned flags) {
  return queue_event_op("cudaStreamWaitEvent", s, ev, 0);
}

/* Waits for the event's last record; at once for one never recorded. */
cudaError_t cudaEventSynchronize(cudaEvent_t h) {
  pthread_mutex_lock(&lock);
  struct CUevent_st *ev = event_of("cudaEventSynchronize", h);
  cudaError_t e = enter_call("cudaEventSynchronize", ev->dev);
  unsigned long long target = ev->recorded;
  while (e == cudaSuccess && ev->completed < target)
    pthread_cond_wait(&changed, &lock);
  pthread_mutex_unlock(&lock);
  return e;
}

/* ---------------------------------------------------------------- memory */

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b) {
  int dev = fakecuda_device_here();
  cudaError_t e = enter_call("cudaMemGetInfo", dev);
  if (e != cudaSuccess)
    return e;
  pthread_mutex_lock(&lock);
  *free_b = cfg.memory - used[dev];
  *total_b = cfg.memory;
  pthread_mutex_unlock(&lock);
  return cudaSuccess;
}

/* Device memory is NaN in both precisions (all bits set) until written,
 * so that reading what was never copied in shows in the result. */
cudaError_t cudaMalloc(void **out, size_t bytes) {
  int dev = fakecuda_device_here();
  cudaError_t e = enter_call("cudaMalloc", dev);
  if (e != cudaSuccess)
    return e;
  if (bytes == 0) {
    *out = NULL;
    return cudaSuccess;
  }
  pthread_mutex_lock(&lock);
  int fits = bytes <= cfg.memory - used[dev];
  if (fits)
    used[dev] += bytes;
  pthread_mutex_unlock(&lock);
  void *p = NULL;
  if (!fits || posix_memalign(&p, ALIGN, bytes) != 0) {
    if (fits) {
      pthread_mutex_lock(&lock);
      used[dev] -= bytes;
      pthread_mutex_unlock(&lock);
    }
    return failed(cudaErrorMemoryAllocation, dev);
  }
  memset(p, 0xFF, bytes);
  pthread_mutex_lock(&lock);
  add_block(p, bytes, dev, DEVICE_MEM);
  pthread_mutex_unlock(&lock);
  *out = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
  if (!p)
    return cudaSuccess;
  pthread_mutex_lock(&lock);
  block *b = block_at(p);
  if (!b || b->kind != DEVICE_MEM || b->base != p)
    fakecuda_misuse("cudaFree", "%p is not the start of a live cudaMalloc block", p);
  int dev = b->dev;
  cudaError_t e = enter_call("cudaFree", dev);
  if (e == cudaSuccess) {
    device_sync_locked(dev);
    b = block_at(p);
    used[dev] -= b->size;
    drop_block(b);
  }
  pthread_mutex_unlock(&lock);
  if (e == cudaSuccess)
    free(p);
  return e;
}

cudaError_t cudaMallocHost(void **out, size_t bytes) {
  int dev = fakecuda_device_here();
  cudaError_t e = enter_call("cudaMallocHost", dev);
  if (e != cudaSuccess)
    return e;
  void *p = NULL;
  if (posix_memalign(&p, ALIGN, bytes ? bytes : 1) != 0)
    return failed(cudaErrorMemoryAllocation, dev);
  /* Poisoned as device memory is: the runtime's page-locked memory holds
   * whatever was there, and a staging slot's byte that the backend never
   * packed must not pass for data that happened to be zero. */
  memset(p, 0xFF, bytes);
  pthread_mutex_lock(&lock);
  add_block(p, bytes ? bytes : 1, dev, HOST_ALLOC);
  pthread_mutex_unlock(&lock);
  *out = p;
  return cudaSuccess;
}

/* Synchronizes every device first, as the runtime does. */
cudaError_t cudaFreeHost(void *p) {
  if (!p)
    return cudaSuccess;
  pthread_mutex_lock(&lock);
  block *b = block_at(p);
  if (!b || b->kind != HOST_ALLOC || b->base != p)
    fakecuda_misuse("cudaFreeHost", "%p is not the start of a live cudaMallocHost block", p);
  cudaError_t e = enter_call("cudaFreeHost", b->dev);
  if (e == cudaSuccess) {
    for (int d = 0; d < cfg.devices; d++)
      device_sync_locked(d);
    drop_block(block_at(p));
  }
  pthread_mutex_unlock(&lock);
  if (e == cudaSuccess)
    free(p);
  return e;
}

cudaError_t cudaHostRegister(void *p, size_t bytes, unsigned flags) {
  int dev = fakecuda_device_here();
  cudaError_t e = enter_call("cudaHostRegister", dev);
  if (e != cudaSuccess)
    return e;
  if (!p || !bytes)
    return failed(cudaErrorInvalidValue, dev);
  check_host("cudaHostRegister", "the range", p, bytes);
  pthread_mutex_lock(&lock);
  int taken = overlaps(p, bytes, HOST_ALLOC) || overlaps(p, bytes, HOST_REGISTERED);
  if (!taken)
    add_block(p, bytes, dev, HOST_REGISTERED);
  pthread_mutex_unlock(&lock);
  return taken ? failed(cudaErrorHostMemoryAlreadyRegistered, dev) : cudaSuccess;
}

cudaError_t cudaHostUnregister(void *p) {
  int dev = fakecuda_device_here();
  cudaError_t e = enter_call("cudaHostUnregister", dev);
  if (e != cudaSuccess)
    return e;
  pthread_mutex_lock(&lock);
  block *b = block_at(p);
  int ok = b && b->kind == HOST_REGISTERED && b->base == p;
  if (ok)
    drop_block(b);
  pthread_mutex_unlock(&lock);
  return ok ? cudaSuccess : failed(cudaErrorHostMemoryNotRegistered, dev);
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p) {
  memset(a, 0, sizeof *a);
  pthread_mutex_lock(&lock);
  block *b = block_at(p);
  if (b) {
    a->type = b->kind == DEVICE_MEM ? cudaMemoryTypeDevice : cudaMemoryTypeHost;
    a->device = b->dev;
    a->devicePointer = (void *)(uintptr_t)p;
    a->hostPointer = b->kind == DEVICE_MEM ? NULL : (void *)(uintptr_t)p;
  } else {
    a->type = cudaMemoryTypeUnregistered;
    a->device = -2;
  }
  pthread_mutex_unlock(&lock);
  return cudaSuccess;
}

/* ---------------------------------------------------------------- copies */

typedef struct copy_op {
  char *dst;
  size_t dpitch;
  const char *src;
  size_t spitch, width, rows;
  char *staged; /* owned: a pageable source, copied at the call */
} copy_op;

static void run_copy(void *arg) {
  copy_op *c = arg;
  for (size_t r = 0; r < c->rows; r++)
    memcpy(c->dst + r * c->dpitch, c->src + r * c->spitch, c->width);
  free(c->staged);
  free(c);
}

static size_t extent(size_t pitch, size_t width, size_t rows) {
  return rows ? (rows - 1) * pitch + width : 0;
}

/* cudaMemcpyDefault's direction, from where the pointers lie. */
static enum cudaMemcpyKind infer(const void *dst, const void *src) {
  int d = is_device(dst), s = is_device(src);
  return d && s ? cudaMemcpyDeviceToDevice
         : d    ? cudaMemcpyHostToDevice
         : s    ? cudaMemcpyDeviceToHost
                : cudaMemcpyHostToHost;
}

/* Checks both sides against the kind, on the stream's device. */
static void check_sides(const char *call, enum cudaMemcpyKind kind, int dev, const void *dst,
                        size_t dext, const void *src, size_t sext) {
  int dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  int src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (dst_dev)
    fakecuda_check_device(call, "the destination", dst, dext, dev);
  else
    check_host(call, "the destination", dst, dext);
  if (src_dev)
    fakecuda_check_device(call, "the source", src, sext, dev);
  else
    check_host(call, "the source", src, sext);
}

/* A 2-D copy on a stream: the work of both copy calls. */
static cudaError_t copy2d(const char *call, void *dst, size_t dpitch, const void *src,
                          size_t spitch, size_t width, size_t rows, enum cudaMemcpyKind kind,
                          cudaStream_t h) {
  int dev = fakecuda_stream_device(call, h);
  cudaError_t e = enter_call(call, dev);
  if (e != cudaSuccess)
    return e;
  if (rows > 1 && (width > dpitch || width > spitch || dpitch > INT_MAX || spitch > INT_MAX))
    return failed(cudaErrorInvalidPitchValue, dev);
  if (kind == cudaMemcpyDefault)
    kind = infer(dst, src);
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDeviceToDevice)
    fakecuda_misuse(call, "copy kind %d", (int)kind);
  if (!width || !rows)
    return cudaSuccess;
  check_sides(call, kind, dev, dst, extent(dpitch, width, rows), src, extent(spitch, width, rows));
  copy_op *c = calloc(1, sizeof *c);
  if (!c)
    fakecuda_misuse(call, "out of host memory");
  *c = (copy_op){dst, dpitch, src, spitch, width, rows, NULL};
  int h2d = kind == cudaMemcpyHostToDevice, d2h = kind == cudaMemcpyDeviceToHost;
  /* Pageable memory is read at the call (staged, as the runtime does) and
   * written before the call returns: only page-locked memory is
   * touched later, by the stream. */
  if (h2d && !pinned(src)) {
    c->staged = malloc(width * rows);
    if (!c->staged)
      fakecuda_misuse(call, "out of host memory");
    for (size_t r = 0; r < rows; r++)
      memcpy(c->staged + r * width, (const char *)src + r * spitch, width);
    c->src = c->staged, c->spitch = width;
  }
  int wait = d2h && !pinned(dst);
  pthread_mutex_lock(&lock);
  struct CUstream_st *s = stream_of(call, h);
  unsigned long long ticket = enqueue_locked(call, s, run_copy, c);
  if (wait)
    wait_done_locked(s, ticket);
  pthread_mutex_unlock(&lock);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t s) {
  return copy2d("cudaMemcpyAsync", dst, bytes, src, bytes, bytes, 1, kind, s);
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t rows, enum cudaMemcpyKind kind,
                              cudaStream_t s) {
  return copy2d("cudaMemcpy2DAsync", dst, dpitch, src, spitch, width, rows, kind, s);
}

/* The legacy synchronous copy: after all of the device's work, and done
 * when it returns. */
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
  int dev = fakecuda_device_here();
  pthread_mutex_lock(&lock);
  device_sync_locked(dev);
  pthread_mutex_unlock(&lock);
  cudaError_t e = copy2d("cudaMemcpy", dst, bytes, src, bytes, bytes, 1, kind, NULL);
  if (e == cudaSuccess) {
    pthread_mutex_lock(&lock);
    device_sync_locked(dev);
    pthread_mutex_unlock(&lock);
  }
  return e;
}

typedef struct memset_op {
  char *dst;
  size_t pitch, width, rows;
  int value;
} memset_op;

static void run_memset(void *arg) {
  memset_op *m = arg;
  for (size_t r = 0; r < m->rows; r++)
    memset(m->dst + r * m->pitch, m->value, m->width);
  free(m);
}

static cudaError_t memset2d(const char *call, void *dst, size_t pitch, int value, size_t width,
                            size_t rows, cudaStream_t h) {
  int dev = fakecuda_stream_device(call, h);
  cudaError_t e = enter_call(call, dev);
  if (e != cudaSuccess)
    return e;
  if (rows > 1 && width > pitch)
    return failed(cudaErrorInvalidPitchValue, dev);
  if (!width || !rows)
    return cudaSuccess;
  fakecuda_check_device(call, "the destination", dst, extent(pitch, width, rows), dev);
  memset_op *m = malloc(sizeof *m);
  if (!m)
    fakecuda_misuse(call, "out of host memory");
  *m = (memset_op){dst, pitch, width, rows, value};
  fakecuda_enqueue(call, h, run_memset, m);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t s) {
  return memset2d("cudaMemsetAsync", dst, bytes, value, bytes, 1, s);
}

cudaError_t cudaMemset2DAsync(void *dst, size_t pitch, int value, size_t width, size_t rows,
                              cudaStream_t s) {
  return memset2d("cudaMemset2DAsync", dst, pitch, value, width, rows, s);
}
