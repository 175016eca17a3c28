/* tasks.c: the task runtime (see tasks.h), and the handles of the task
 * API. A task is a record holding its call and arguments, recycled once
 * poas_task_wait has released it (or once it finished, when nobody holds
 * it) and freed with the runtime; its node runs on the engine's host pool.
 * A task's error detail is set on the worker thread that ran it; the
 * record carries it to the thread that waits. */
#include "schedule/tasks.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------------- handles */

/* A handle is a slot's index in its low bits and the slot's generation in
 * the others; the generation moves on when the handle is released, so an
 * old handle never matches again (until it wraps, 2^40 releases of one
 * slot on 64-bit machines). Generations start at 1: no handle is 0. */
#define HANDLE_SLOT_BITS (UINTPTR_MAX > 0xffffffffu ? 24 : 16)
#define HANDLE_MAX_SLOTS ((int)1 << HANDLE_SLOT_BITS)
#define HANDLE_MAX_GEN (UINTPTR_MAX >> HANDLE_SLOT_BITS)

typedef struct handle_slot {
  void *obj;               /* NULL: free */
  uintptr_t gen;
  poas__handle_kind kind;
  int next_free;
} handle_slot;

static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;
static handle_slot *slots;
static int nslots, cap_slots, free_slot = -1;

uintptr_t poas__handle_new(void *obj, poas__handle_kind kind) {
  pthread_mutex_lock(&handles_lock);
  int i = free_slot;
  if (i >= 0) {
    free_slot = slots[i].next_free;
  } else if (nslots < HANDLE_MAX_SLOTS) {
    if (nslots == cap_slots) {
      int ncap = cap_slots ? 2 * cap_slots : 64;
      handle_slot *p = realloc(slots, (size_t)ncap * sizeof *p);
      if (p)
        slots = p, cap_slots = ncap;
    }
    if (nslots < cap_slots) {
      i = nslots++;
      slots[i].gen = 1;
    }
  }
  uintptr_t h = 0;
  if (i >= 0) {
    slots[i].obj = obj, slots[i].kind = kind;
    h = slots[i].gen << HANDLE_SLOT_BITS | (uintptr_t)i;
  }
  pthread_mutex_unlock(&handles_lock);
  return h;
}

/* The live slot h names, or NULL. Locked. */
static handle_slot *handle_slot_of(uintptr_t h, poas__handle_kind kind) {
  uintptr_t i = h & ((uintptr_t)HANDLE_MAX_SLOTS - 1);
  if (i >= (uintptr_t)nslots)
    return NULL;
  handle_slot *s = &slots[i];
  return s->obj && s->kind == kind && s->gen == h >> HANDLE_SLOT_BITS ? s : NULL;
}

void *poas__handle_get(uintptr_t h, poas__handle_kind kind) {
  pthread_mutex_lock(&handles_lock);
  handle_slot *s = handle_slot_of(h, kind);
  void *obj = s ? s->obj : NULL;
  pthread_mutex_unlock(&handles_lock);
  return obj;
}

void *poas__handle_take(uintptr_t h, poas__handle_kind kind) {
  pthread_mutex_lock(&handles_lock);
  handle_slot *s = handle_slot_of(h, kind);
  void *obj = NULL;
  if (s) {
    obj = s->obj;
    s->obj = NULL;
    s->gen = s->gen == HANDLE_MAX_GEN ? 1 : s->gen + 1;
    s->next_free = free_slot;
    free_slot = (int)(s - slots);
  }
  pthread_mutex_unlock(&handles_lock);
  return obj;
}

/* ------------------------------------------------------------------ tasks */

typedef struct task task;
struct task {
  poas__tasks *rt;
  int (*fn)(void *payload);
  int done, rc, held;
  int quiet;               /* its submit failed: its cancellation is reported to nobody */
  uintptr_t handle;        /* what poas_task_wait is given; 0 when not held */
  char *detail;            /* the failed task's poas_error_detail(), or NULL */
  task *next_free;
  task *next_all;          /* every record of the runtime, for destroy */
  _Alignas(16) unsigned char payload[POAS__TASK_PAYLOAD];
};

struct poas__tasks {
  poas__engine *e;
  pthread_cond_t done;     /* a task that someone waits for finished */
  int waiters;
  /* Every host access is a byte range of space_buf: the engine compares a
   * new access with every unfinished one, a cost linear in the accesses in
   * flight that buys ordering by bytes, whatever registration (if any)
   * named them. */
  int space_buf, devices_buf;
  task *free_tasks;
  task *all_tasks;
  unsigned epoch;          /* waits the caller has returned from */
  /* The first failure, since poas__tasks_take_error last took one, of a
   * task nobody holds a handle to: its code and detail (or NULL), for
   * poas_wait_all to report. */
  int unheld_rc;
  char *unheld_detail;
};

static int host_threads(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 2 ? 2 : n > 16 ? 16 : (int)n;
}

int poas__tasks_create(const poas__devset *set, poas__tasks **out) {
  poas__tasks *t = calloc(1, sizeof *t);
  if (!t)
    return poas__fail(POAS_ENOMEM, "task: no memory for the task runtime");
  poas__engine_config cfg = {.host_threads = host_threads(), .recycle = 1};
  int rc = poas__engine_create(set, &cfg, &t->e);
  if (rc) {
    free(t);
    return rc;
  }
  pthread_cond_init(&t->done, NULL);
  poas__gbuf space = {.device = -1, .pitch = SIZE_MAX, .lines = 1};
  poas__engine_lock(t->e);
  t->space_buf = poas__engine_add_buffer(t->e, &space);
  t->devices_buf = poas__engine_add_buffer(t->e, &space);
  poas__engine_unlock(t->e);
  if (t->space_buf < 0 || t->devices_buf < 0) {
    poas__tasks_destroy(t);
    return poas__fail(POAS_ENOMEM, "task: no memory for the task runtime's buffers");
  }
  *out = t;
  return 0;
}

void poas__tasks_destroy(poas__tasks *t) {
  if (!t)
    return;
  poas__engine_destroy(t->e);
  /* Every task has finished; those never waited for still hold handles. */
  while (t->all_tasks) {
    task *k = t->all_tasks;
    t->all_tasks = k->next_all;
    if (k->handle)
      poas__handle_take(k->handle, POAS__HANDLE_TASK);
    free(k->detail);
    free(k);
  }
  free(t->unheld_detail);
  pthread_cond_destroy(&t->done);
  free(t);
}

poas__region poas__tasks_host_region(const poas__tasks *t, uintptr_t lo, uintptr_t hi) {
  return (poas__region){t->space_buf, 0, 1, lo, hi};
}

poas__region poas__tasks_devices_region(const poas__tasks *t) {
  return (poas__region){t->devices_buf, 0, 1, 0, 1};
}

/* The runtime whose task this thread is running, if any: such a task
 * must not wait for that runtime's tasks, since it is one of them. */
static _Thread_local const poas__tasks *running_in;

int poas__tasks_in_task(const poas__tasks *t) { return t && running_in == t; }

/* Runs on a worker thread, unlocked; the record is the task's until
 * task_done. */
static int task_run(void *arg) {
  task *k = arg;
  poas__clear_detail();
  running_in = k->rt;
  int rc = k->fn(k->payload);
  running_in = NULL;
  if (rc && poas_error_detail()[0])
    k->detail = strdup(poas_error_detail());
  return rc;
}

static void task_release(poas__tasks *t, task *k) {
  free(k->detail);
  k->detail = NULL;
  k->handle = 0;
  k->next_free = t->free_tasks;
  t->free_tasks = k;
}

/* The node finished (engine locked). */
static void task_done(void *arg, int rc) {
  task *k = arg;
  poas__tasks *t = k->rt;
  k->done = 1;
  k->rc = rc;
  if (!k->held && !k->quiet && rc && !t->unheld_rc) { /* kept for poas_wait_all */
    t->unheld_rc = rc;
    t->unheld_detail = k->detail;
    k->detail = NULL;
  }
  if (!k->held)
    task_release(t, k);
  else if (t->waiters)
    pthread_cond_broadcast(&t->done);
}

int poas__tasks_submit(poas__tasks *t, int (*fn)(void *payload), const void *payload,
                       size_t payload_bytes, const poas__access *acc, int nacc,
                       poas_task **out) {
  if (payload_bytes > POAS__TASK_PAYLOAD || nacc < 0 || nacc > POAS__MAX_ACCESS)
    return poas__fail(POAS_EINVAL, "task: too many accesses or arguments");
  poas__engine_lock(t->e);
  task *k = t->free_tasks;
  if (k) {
    t->free_tasks = k->next_free;
  } else if ((k = malloc(sizeof *k)) != NULL) {
    k->next_all = t->all_tasks;
    t->all_tasks = k;
  } else {
    poas__engine_unlock(t->e);
    return poas__fail(POAS_ENOMEM, "task: no memory for its record");
  }
  /* Held through the add: a node that cannot be queued finishes inside it
   * (doomed), and its record must outlive that until it is seen. */
  k->rt = t, k->fn = fn, k->done = 0, k->rc = 0, k->held = 1, k->quiet = 0, k->detail = NULL;
  k->handle = out ? poas__handle_new(k, POAS__HANDLE_TASK) : 0;
  if (out && !k->handle) {
    task_release(t, k);
    poas__engine_unlock(t->e);
    return poas__fail(POAS_ENOMEM, "task: no handle left for it");
  }
  memcpy(k->payload, payload, payload_bytes);
  poas__ins in = {.kind = POAS__INS_HOST, .device = POAS__HOST_ANY, .chunk = -1,
                  .naccess = nacc};
  memcpy(in.access, acc, (size_t)nacc * sizeof *acc);
  in.u.host.fn = task_run;
  in.u.host.arg = k;
  int id = poas__engine_add(t->e, &in, task_done, k);
  k->held = out != NULL;
  if (id < 0) { /* not added: nothing will finish it */
    if (k->handle)
      poas__handle_take(k->handle, POAS__HANDLE_TASK);
    task_release(t, k);
    poas__engine_unlock(t->e);
    return id;
  }
  /* Added but doomed, out of memory for its ordering: the node stays in
   * the graph, ordered after what it could be, and is cancelled in its
   * turn; fn never runs. The caller hears it here, as from a task never
   * submitted, and holds no handle to it: the record goes back when the
   * node finishes (already, if it could not be queued), reported to
   * nobody. The lock is held since the add: the node is not reused (a
   * node finishes within the add only when doomed). */
  if (t->e->nodes[id].doomed) {
    if (k->handle)
      poas__handle_take(k->handle, POAS__HANDLE_TASK);
    k->handle = 0, k->held = 0, k->quiet = 1;
    if (k->done)
      task_release(t, k);
    poas__engine_unlock(t->e);
    return poas__fail(POAS_ENOMEM, "task: out of memory recording its dependencies");
  }
  if (out)
    *out = (poas_task *)k->handle;
  poas__engine_unlock(t->e);
  return 0;
}

static int waiting_in_task(void) {
  return poas__fail(POAS_ESTATE, "called from a task: a task cannot wait for its context's "
                    "tasks (it would wait for itself)");
}

int poas__tasks_wait_all(poas__tasks *t) {
  if (poas__tasks_in_task(t))
    return waiting_in_task();
  poas__engine_lock(t->e);
  poas__engine_drain(t->e);
  t->epoch++;
  poas__engine_unlock(t->e);
  return 0;
}

int poas__tasks_take_error(poas__tasks *t) {
  poas__engine_lock(t->e);
  int rc = t->unheld_rc;
  char *detail = t->unheld_detail;
  t->unheld_rc = 0;
  t->unheld_detail = NULL;
  poas__engine_unlock(t->e);
  if (rc) {
    if (detail)
      poas__fail(rc, "a task submitted without a handle failed: %s", detail);
    else
      poas__fail(rc, "a task submitted without a handle failed: %s", poas_strerror(rc));
  }
  free(detail);
  return rc;
}

unsigned poas__tasks_epoch(poas__tasks *t) {
  poas__engine_lock(t->e);
  unsigned e = t->epoch;
  poas__engine_unlock(t->e);
  return e;
}

int poas_task_wait(poas_task *handle) {
  poas__clear_detail();
  if (!handle)
    return poas__fail(POAS_ENULL, "poas_task_wait: task is NULL");
  task *k = poas__handle_get((uintptr_t)handle, POAS__HANDLE_TASK);
  if (k && poas__tasks_in_task(k->rt))
    return waiting_in_task();
  if (k)
    k = poas__handle_take((uintptr_t)handle, POAS__HANDLE_TASK);
  if (!k)
    return poas__fail(POAS_EINVAL, "poas_task_wait: not a task to wait for (waited for "
                      "already, or its context finalized)");
  poas__tasks *t = k->rt;
  poas__engine_lock(t->e);
  while (!k->done) {
    t->waiters++;
    pthread_cond_wait(&t->done, &t->e->lock);
    t->waiters--;
  }
  int rc = k->rc;
  char *detail = k->detail;
  k->detail = NULL;
  task_release(t, k);
  t->epoch++;
  poas__engine_unlock(t->e);
  if (rc) {
    /* The worker logged it when the task failed: here it is only set. */
    poas__failures_expected(1);
    if (detail)
      poas__fail(rc, "%s", detail);
    else
      poas__fail(rc, "the task failed: %s", poas_strerror(rc));
    poas__failures_expected(0);
  }
  free(detail);
  return rc;
}
