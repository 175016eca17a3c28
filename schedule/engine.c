/* engine.c: the DAG runtime's core (see engine.h): dependency inference
 * over buffer regions, per-device workers that issue instructions on lanes
 * and watch their events, injected faults, and the bookkeeping of chunks
 * the runner reads. */
#include "schedule/engine.h"
#include "schedule/schedule.h"

#include "devices/sim/sim.h"

#include <stdlib.h>
#include <string.h>

/* --------------------------------------------------------------- helpers */

static int grow(void **arr, int *cap, int need, size_t elem) {
  if (need <= *cap)
    return 0;
  int ncap = *cap ? *cap : 8;
  while (ncap < need)
    ncap *= 2;
  void *p = realloc(*arr, (size_t)ncap * elem);
  if (!p)
    return poas__fail(POAS_ENOMEM, "schedule: out of memory for the task graph");
  *arr = p;
  *cap = ncap;
  return 0;
}

/* Whether region a contains region b. */
static int region_covers(const poas__region *a, const poas__region *b) {
  return a->buf == b->buf && a->line0 <= b->line0 && b->line1 <= a->line1 &&
         a->byte0 <= b->byte0 && b->byte1 <= a->byte1;
}

static poas__worker *worker_of(poas__engine *e, int device) {
  return &e->w[device < 0 ? e->ndev : device];
}

static int is_lane_op(poas__ins_kind k) {
  return k == POAS__INS_H2D || k == POAS__INS_D2H || k == POAS__INS_GEMM ||
         k == POAS__INS_TRANSPOSE;
}

static int lane_of(const poas__worker *w, const poas__ins *in) {
  int n = w->dev ? POAS__MIN(w->dev->nlanes, POAS__ENGINE_LANES) : 1;
  return (in->lane < 0 ? 0 : in->lane) % n;
}

double poas__engine_clock(const poas__engine *e, int device) {
  const poas__device *d = e->set->dev[device];
  if (!d->virtual_time)
    return poas__now();
  double t = 0;
  for (int l = 0; l < d->nlanes; l++)
    t = POAS__MAX(t, poas__sim_lane_clock(d, l));
  return t;
}

/* ------------------------------------------------------------------ faults */

int poas__fault_parse(const char *spec, const poas__devset *set, int64_t after[]) {
  for (int i = 0; after && i < POAS_MAX_DEVICES; i++)
    after[i] = -1;
  if (!spec || !*spec)
    return 0;
  char buf[POAS__FAULT_SPEC_MAX];
  if (strlen(spec) >= sizeof buf)
    return poas__fail(POAS_EINVAL, "POAS_FAULT too long (at most %zu characters)",
                      sizeof buf - 1);
  poas__strlcpy(buf, spec, sizeof buf);
  char *save = NULL;
  for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    char *colon = strchr(tok, ':');
    int64_t n;
    if (!colon || colon == tok || strncmp(colon + 1, "after=", 6) != 0 ||
        poas__parse_int64(colon + 7, 0, &n) || n < 0)
      return poas__fail(POAS_EINVAL,
                        "POAS_FAULT: bad entry '%s' (expected ID:after=N, N an operation "
                        "number from 0)",
                        tok);
    *colon = '\0';
    if (!set)
      continue;
    int found = 0;
    for (int i = 0; i < set->ndev; i++)
      if (strcmp(set->dev[i]->info.id, tok) == 0)
        after[i] = n, found = 1;
    if (!found)
      poas__warn("POAS_FAULT names %s, which is not in use", tok);
  }
  return 0;
}

/* ----------------------------------------------------------- queues */

static int ring_push(int **ring, int *head, int *count, int *cap, int v) {
  if (*count == *cap) {
    int ncap = *cap ? 2 * *cap : 64;
    int *p = malloc((size_t)ncap * sizeof *p);
    if (!p)
      return poas__fail(POAS_ENOMEM, "schedule: out of memory for a device's queue");
    for (int i = 0; i < *count; i++)
      p[i] = (*ring)[(*head + i) % *cap];
    free(*ring);
    *ring = p, *head = 0, *cap = ncap;
  }
  (*ring)[(*head + *count) % *cap] = v;
  (*count)++;
  return 0;
}

static int ring_pop(int *ring, int *head, int *count, int cap) {
  int v = ring[*head];
  *head = (*head + 1) % cap;
  (*count)--;
  return v;
}

static void *worker_main(void *arg);
static void finish_node(poas__engine *e, int id, int rc);

/* Starts the worker's threads. Those that started serve it, and are
 * joined at the end, even when fewer start than it asked for: left
 * uncounted, they ran on past poas__engine_destroy into the freed engine,
 * and a retry after none started made the worker "started" with no
 * thread at all, so that its nodes waited for ever. */
static int start_worker(poas__worker *w) {
  if (!w->threads && !(w->threads = calloc((size_t)w->nthreads, sizeof *w->threads)))
    return poas__fail(POAS_ENOMEM, "schedule: out of memory starting a worker");
  int n = 0;
  while (n < w->nthreads && pthread_create(&w->threads[n], NULL, worker_main, w) == 0)
    n++;
  if (n == 0)
    return poas__fail(POAS_ENOMEM, "could not start a scheduler thread");
  if (n < w->nthreads)
    poas__warn("the scheduler started %d of the %d threads it asked for", n, w->nthreads);
  w->nthreads = n;
  w->started = 1;
  return 0;
}

/* A worker's ready nodes run in the order they were added, not in the
 * order they became ready: a lane runs what is submitted to it in order,
 * so a node submitted early whose own predecessor ends late holds back
 * the nodes behind it. Ready in turn, a tiled GEMM's copies went onto the
 * copy-in lane as B2, B3, C2, C3 (C2 waiting on a copy out, B3 on a GEMM
 * that ended later), and C2, whose predecessor had ended 1.4 ms before,
 * waited behind B3: a 10-tile sgemm on a sim ran 13% over the pipeline's
 * prediction, which assumes each tile's copies in, in order. A binary
 * heap on poas__node.order. Locked. */
static int ready_before(const poas__engine *e, int a, int b) {
  return e->nodes[a].order < e->nodes[b].order;
}

static int ready_push(poas__engine *e, poas__worker *w, int id) {
  if (grow((void **)&w->ready, &w->rcap, w->rcount + 1, sizeof *w->ready))
    return POAS_ENOMEM;
  int i = w->rcount++;
  for (; i > 0 && ready_before(e, id, w->ready[(i - 1) / 2]); i = (i - 1) / 2)
    w->ready[i] = w->ready[(i - 1) / 2];
  w->ready[i] = id;
  return 0;
}

static int ready_pop(poas__engine *e, poas__worker *w) {
  int top = w->ready[0], last = w->ready[--w->rcount], i = 0;
  for (;;) {
    int c = 2 * i + 1;
    if (c >= w->rcount)
      break;
    if (c + 1 < w->rcount && ready_before(e, w->ready[c + 1], w->ready[c]))
      c++;
    if (!ready_before(e, w->ready[c], last))
      break;
    w->ready[i] = w->ready[c];
    i = c;
  }
  if (w->rcount > 0)
    w->ready[i] = last;
  return top;
}

/* Cancels node id, when its turn comes, for want of memory (`rc`); with
 * cancel_after_doom, every node not started yet but releases too. Locked. */
static void doom(poas__engine *e, int id, int rc) {
  e->nodes[id].doomed = rc;
  if (e->cancel_after_doom && !e->doomed)
    e->doomed = rc;
}

/* Queues a node whose predecessors are resolved. Locked. */
static void make_ready(poas__engine *e, int id) {
  poas__node *n = &e->nodes[id];
  poas__worker *w = worker_of(e, n->ins.device);
  n->state = POAS__NODE_READY;
  /* Without a thread or room in the queue the node is cancelled, not
   * lost. */
  if ((!w->started && start_worker(w) != 0) || ready_push(e, w, id) != 0) {
    doom(e, id, POAS_ENOMEM);
    finish_node(e, id, POAS_ENOMEM);
    return;
  }
  if (w->sleeping)
    pthread_cond_signal(&w->cond);
}

static void notify_coord(poas__engine *e) {
  if (e->coord_waiters)
    pthread_cond_broadcast(&e->coord);
}

/* Records that `pred` (on the successor's device, submitted on its lane)
 * must be waited for by the successor's lane. */
static void note_lane_wait(poas__engine *e, int pred, poas__node *s) {
  poas__node *p = &e->nodes[pred];
  poas__worker *w = worker_of(e, p->ins.device);
  int l = lane_of(w, &p->ins);
  if (l == lane_of(w, &s->ins))
    return; /* same lane: in order already */
  if (s->wait[l] < 0 || p->seq > s->wait_seq[l])
    s->wait[l] = pred, s->wait_seq[l] = p->seq;
}

static void release(poas__engine *e, int id) {
  if (--e->nodes[id].npred == 0)
    make_ready(e, id);
}

/* Releases the successors kept by the device (lane events) once `id` is
 * on its lane. */
static void release_submitted(poas__engine *e, int id) {
  poas__node *n = &e->nodes[id];
  n->released_submit = 1;
  for (int i = 0; i < n->nsucc; i++)
    if (n->succ[i] & 1) {
      int s = n->succ[i] >> 1;
      note_lane_wait(e, id, &e->nodes[s]);
      release(e, s);
      n = &e->nodes[id];
    }
}

static void recycle_node(poas__engine *e, int id) {
  poas__node *n = &e->nodes[id];
  if (n->has_ev)
    n->ev.dev->be->event_destroy(n->ev.dev, &n->ev);
  n->has_ev = 0;
  n->state = POAS__NODE_FREE;
  n->gen++;
  n->next_free = e->free_node;
  e->free_node = id;
}

/* A node is done or cancelled: successors, chunk, counters, callback. */
static void finish_node(poas__engine *e, int id, int rc) {
  poas__node *n = &e->nodes[id];
  n->state = rc ? POAS__NODE_CANCELLED : POAS__NODE_DONE;
  int chunk = n->ins.chunk, submit_released = n->released_submit;
  poas__node_done_fn fn = n->done_fn;
  void *arg = n->done_arg;
  for (int i = 0; i < n->nsucc; i++) {
    int s = e->nodes[id].succ[i];
    if (!(s & 1) || !submit_released)
      release(e, s >> 1);
  }
  n = &e->nodes[id];
  n->nsucc = 0;
  if (chunk >= 0 && chunk < e->nchunks) {
    poas__chunk *c = &e->chunks[chunk];
    c->cancelled |= rc != 0;
    if (--c->remaining == 0) {
      c->state = POAS__CHUNK_COMPLETE;
      notify_coord(e);
    }
  }
  if (fn)
    fn(arg, rc);
  if (--e->pending == 0)
    notify_coord(e);
  if (e->recycle)
    recycle_node(e, id);
}

/* ----------------------------------------------------------- execution */

/* What a worker needs to issue one node, copied under the lock. */
typedef struct issue {
  poas__ins in;
  int lane;
  int nwait;
  poas__event wait[POAS__ENGINE_LANES];
  size_t alloc_bytes;
  poas__mem mem;            /* the device buffer of a copy, free or alloc */
  double t0;                /* lane clock once the waits are in place */
  uint64_t seq;             /* the number of its event's record (lane ops) */
  int issued;               /* its lane waits were in place: the operation itself was tried */
} issue;

static double lane_clock(const poas__worker *w, int lane) {
  if (w->dev && w->dev->virtual_time)
    return poas__sim_lane_clock(w->dev, lane);
  return poas__now();
}

static poas__mem buffer_mem(const poas__engine *e, int buf) {
  const poas__gbuf *b = &e->bufs[buf].desc;
  return b->device < 0 ? poas__mem_host(b->host) : b->mem;
}

int poas__engine_writes_host(const poas__engine *e, const poas__ins *in) {
  for (int i = 0; i < in->naccess; i++)
    if ((in->access[i].mode & POAS__WRITE) && e->bufs[in->access[i].region.buf].desc.device < 0)
      return 1;
  return 0;
}

/* Fills the node's run-time operands. Locked. */
static void prepare(poas__engine *e, poas__worker *w, int id, issue *is) {
  poas__node *n = &e->nodes[id];
  is->in = n->ins;
  is->lane = lane_of(w, &n->ins);
  is->nwait = 0;
  for (int l = 0; l < POAS__ENGINE_LANES; l++)
    if (n->wait[l] >= 0)
      is->wait[is->nwait++] = e->nodes[n->wait[l]].ev;
  poas__ins *in = &is->in;
  switch (in->kind) {
  case POAS__INS_ALLOC: {
    const poas__gbuf *b = &e->bufs[in->u.alloc.buf].desc;
    is->alloc_bytes = b->pitch * b->lines;
    break;
  }
  case POAS__INS_FREE: {
    const poas__gbuf *b = &e->bufs[in->u.free.buf].desc;
    is->mem = b->mem;
    is->alloc_bytes = b->pitch * b->lines;
    break;
  }
  case POAS__INS_H2D:
    is->mem = e->bufs[in->u.h2d.dst_buf].desc.mem;
    break;
  case POAS__INS_D2H:
    is->mem = e->bufs[in->u.d2h.src_buf].desc.mem;
    break;
  case POAS__INS_GEMM:
    in->u.gemm.call.a.mem = buffer_mem(e, in->u.gemm.a_buf);
    in->u.gemm.call.b.mem = buffer_mem(e, in->u.gemm.b_buf);
    in->u.gemm.call.c.mem = buffer_mem(e, in->u.gemm.c_buf);
    break;
  case POAS__INS_TRANSPOSE:
    in->u.transpose.call.src.mem = buffer_mem(e, in->u.transpose.src_buf);
    in->u.transpose.call.dst.mem = buffer_mem(e, in->u.transpose.dst_buf);
    break;
  case POAS__INS_HOST:
    break;
  }
}

/* Issues one node on its device. Not locked. */
static int execute(poas__worker *w, issue *is, poas__event *ev) {
  poas__device *d = w->dev;
  poas__ins *in = &is->in;
  int rc = 0;
  for (int i = 0; i < is->nwait && rc == 0; i++)
    rc = d->be->lane_wait(d, is->lane, &is->wait[i]);
  if (rc)
    return rc;
  is->issued = 1;
  is->t0 = lane_clock(w, is->lane);
  switch (in->kind) {
  case POAS__INS_ALLOC:
    return poas__dev_alloc(d, is->alloc_bytes, &is->mem);
  case POAS__INS_FREE:
    poas__dev_free(d, is->mem, is->alloc_bytes);
    return 0;
  case POAS__INS_H2D:
    rc = d->be->copy_h2d(d, is->lane, is->mem, in->u.h2d.src, &in->u.h2d.shape);
    break;
  case POAS__INS_D2H:
    rc = d->be->copy_d2h(d, is->lane, in->u.d2h.dst, is->mem, &in->u.d2h.shape);
    break;
  case POAS__INS_GEMM:
    rc = d->be->gemm(d, is->lane, &in->u.gemm.call);
    break;
  case POAS__INS_TRANSPOSE:
    rc = d->be->transpose ? d->be->transpose(d, is->lane, &in->u.transpose.call)
                          : poas__fail(POAS_ENOTSUP, "%s: no transpose", d->info.id);
    break;
  case POAS__INS_HOST:
    return in->u.host.fn(in->u.host.arg);
  }
  if (rc == 0 && w->async) {
    rc = d->be->event_create(d, ev);
    if (rc == 0) {
      /* Another thread of the worker may be issuing on the same lane: the
       * record and its number go together (see record_lock). */
      pthread_mutex_lock(&w->record_lock);
      rc = d->be->event_record(d, is->lane, ev);
      is->seq = ++w->seq;
      pthread_mutex_unlock(&w->record_lock);
      if (rc)
        d->be->event_destroy(d, ev);
    }
  }
  /* A lane operation that failed may have left work on its lane: all of
   * it where only its event could not be made or recorded, the pieces
   * queued before the one that failed otherwise. Its node retires failed,
   * and its chunk's units may go to another device at once: a copy out
   * still queued would land in host memory after that device wrote there.
   * So the lane drains first. Where that fails too, the device is past
   * running anything (a sticky CUDA error), and there is nothing more to
   * wait for. */
  if (rc && w->async)
    d->be->lane_sync(d, is->lane);
  return rc;
}

/* Retires a worker's device after an error; its queued nodes are cancelled
 * as they are popped. Only device workers are retired: the host pool runs
 * the task API's calls, whose errors are their own (see run_node). Locked. */
static void fail_device(poas__engine *e, poas__worker *w, int rc) {
  if (w->failed)
    return;
  w->failed = rc;
  e->failures++;
  poas__warn("%s failed (%s): its unfinished work moves to the other devices",
             w->dev->info.id, poas_strerror(rc));
  notify_coord(e);
}

/* Waits for a submitted node's event `ev`, unlocked; returns the wait's
 * status and sets *t to when it was seen complete. Entered and left
 * locked. */
static int wait_event(poas__engine *e, poas__worker *w, poas__event ev, double *t) {
  poas__engine_unlock(e);
  int rc = w->dev->be->event_sync(w->dev, &ev);
  *t = w->dev->virtual_time ? ev.u.vtime : poas__now();
  poas__engine_lock(e);
  return rc;
}

/* Finishes a submitted node once its event was waited for: rc the wait's
 * status, t when it was seen complete. Locked. */
static void settle(poas__engine *e, poas__worker *w, int id, int rc, double t) {
  poas__node *n = &e->nodes[id];
  if (rc) {
    n->failed_here = 1;
    fail_device(e, w, rc);
    finish_node(e, id, rc);
    return;
  }
  if (!w->dev->virtual_time) {
    /* Seen complete at t (an upper bound); it cannot have started before
     * the previous operation on its lane ended. */
    int lane = lane_of(w, &n->ins);
    n->t1 = t;
    n->t0 = POAS__MAX(n->t0, w->lane_end[lane]);
    w->lane_end[lane] = t;
  }
  w->t_last = POAS__MAX(w->t_last, n->t1);
  finish_node(e, id, 0);
}

/* Runs one ready node; entered and left locked. */
static void run_node(poas__engine *e, poas__worker *w, int id) {
  poas__node *n = &e->nodes[id];
  int cancel = w->failed ? w->failed : n->doomed;
  /* Releases run after a doom elsewhere (cancel_after_doom): nothing leaks. */
  if (!cancel && n->ins.kind != POAS__INS_FREE)
    cancel = e->doomed;
  if (cancel) {
    finish_node(e, id, cancel);
    return;
  }
  issue is;
  prepare(e, w, id, &is);
  n->state = POAS__NODE_RUNNING;
  int injected = 0;
  if (w->dev && is.in.kind != POAS__INS_FREE && w->ops++ == w->fault_after)
    injected = 1;
  if (!injected && is.in.chunk >= 0 && is.in.chunk < e->nchunks &&
      poas__engine_writes_host(e, &is.in))
    e->chunks[is.in.chunk].host_written = 1;
  poas__engine_unlock(e);

  poas__event ev;
  memset(&ev, 0, sizeof ev);
  is.seq = 0;
  is.issued = 0;
  is.t0 = lane_clock(w, is.lane);
  int rc;
  if (injected)
    rc = poas__fail(POAS_EDEVICE, "%s: injected fault (POAS_FAULT)", w->dev->info.id);
  else if (!w->dev)
    rc = is.in.u.host.fn(is.in.u.host.arg);
  else
    rc = execute(w, &is, &ev);
  double t0 = is.t0, t1 = lane_clock(w, is.lane);

  poas__engine_lock(e);
  n = &e->nodes[id];
  /* A device operation whose lane waits failed was never tried: it wrote
   * nothing (salvage then runs its chunk's units again, beta or not). */
  n->ran = !injected && (!w->dev || is.issued);
  n->t0 = t0, n->t1 = t1;
  if (rc) {
    n->failed_here = 1;
    /* A host call that fails (a task, an asynchronous GEMM) says nothing
     * about the threads that ran it: the next one runs as usual. */
    if (w->dev)
      fail_device(e, w, rc);
    finish_node(e, id, rc);
    return;
  }
  if (is.in.kind == POAS__INS_ALLOC)
    e->bufs[is.in.u.alloc.buf].desc.mem = is.mem;
  else if (is.in.kind == POAS__INS_FREE)
    e->bufs[is.in.u.free.buf].desc.mem.ptr = NULL;
  if (is.in.kind == POAS__INS_H2D)
    w->bytes_h2d += is.in.bytes;
  else if (is.in.kind == POAS__INS_D2H)
    w->bytes_d2h += is.in.bytes;
  if (w->async && is_lane_op(is.in.kind)) {
    n->ev = ev, n->has_ev = 1, n->seq = is.seq;
    n->state = POAS__NODE_SUBMITTED;
    release_submitted(e, id);
    if (ring_push(&w->inflight, &w->ihead, &w->icount, &w->icap, id) == 0)
      return;
    /* No room to watch it with the others (out of host memory): it is
     * waited for here. Failed at once, it ran on on its lane after its
     * chunk's units had gone to another device, and its device, short of
     * nothing but host memory, was retired: on one GPU the run failed with
     * "every device failed". */
    rc = wait_event(e, w, ev, &t1);
    settle(e, w, id, rc, t1);
    return;
  }
  w->t_last = POAS__MAX(w->t_last, t1);
  finish_node(e, id, 0);
}

/* Waits for the oldest submitted node of an asynchronous device; entered
 * and left locked. */
static void complete_oldest(poas__engine *e, poas__worker *w) {
  int id = w->inflight[w->ihead];
  double t;
  w->syncing = 1;
  int rc = wait_event(e, w, e->nodes[id].ev, &t);
  w->syncing = 0;
  ring_pop(w->inflight, &w->ihead, &w->icount, w->icap);
  settle(e, w, id, rc, t);
}

static void *worker_main(void *arg) {
  poas__worker *w = arg;
  poas__engine *e = w->e;
  /* Its thread serves w's device alone, for its whole life: the device's
   * backend may leave it current here (poas__thread_mark_worker). */
  poas__thread_mark_worker();
  poas__engine_lock(e);
  for (;;) {
    if (w->rcount) {
      int id = ready_pop(e, w);
      run_node(e, w, id);
    } else if (w->icount && !w->syncing) {
      complete_oldest(e, w);
    } else if (e->stop) {
      break;
    } else {
      w->sleeping++;
      pthread_cond_wait(&w->cond, &e->lock);
      w->sleeping--;
    }
  }
  poas__engine_unlock(e);
  return NULL;
}

/* ------------------------------------------------------------ inference */

static int same_device_lane_ops(const poas__engine *e, const poas__node *p, const poas__ins *s) {
  const poas__worker *w = &e->w[p->ins.device < 0 ? e->ndev : p->ins.device];
  return p->ins.device == s->device && w->async && is_lane_op(p->ins.kind) &&
         is_lane_op(s->kind);
}

/* Makes node s depend on node p. Locked. */
static int add_dep(poas__engine *e, int p, int s) {
  poas__node *pn = &e->nodes[p], *sn = &e->nodes[s];
  int submit_edge = same_device_lane_ops(e, pn, &sn->ins);
  if (submit_edge && pn->state == POAS__NODE_SUBMITTED) {
    note_lane_wait(e, p, sn);
    return 0;
  }
  if (pn->nsucc && (pn->succ[pn->nsucc - 1] >> 1) == s)
    return 0;
  if (grow((void **)&pn->succ, &pn->cap_succ, pn->nsucc + 1, sizeof *pn->succ))
    return POAS_ENOMEM;
  pn->succ[pn->nsucc++] = s << 1 | submit_edge;
  sn->npred++;
  return 0;
}

static int finished(const poas__engine *e, const poas__acc_entry *x) {
  const poas__node *p = &e->nodes[x->node];
  return p->gen != x->gen || p->state == POAS__NODE_DONE || p->state == POAS__NODE_CANCELLED ||
         p->state == POAS__NODE_FREE;
}

/* Orders node id after the entries of list l that access `a` conflicts
 * with; a write that covers an earlier access replaces it (later accesses
 * reach it through the write). Finished entries are dropped on the way. */
static int scan(poas__engine *e, int id, poas__acc_list *l, const poas__access *a) {
  for (int j = 0; j < l->n;) {
    poas__acc_entry *x = &l->e[j];
    if (finished(e, x)) {
      *x = l->e[--l->n];
      continue;
    }
    if (x->node != id && poas__region_overlap(&x->region, &a->region)) {
      int rc = add_dep(e, x->node, id);
      if (rc)
        return rc;
      if ((a->mode & POAS__WRITE) && region_covers(&a->region, &x->region)) {
        *x = l->e[--l->n];
        continue;
      }
    }
    j++;
  }
  return 0;
}

/* Drops the finished entries of a list (before it would grow). */
static void compact(poas__engine *e, poas__acc_list *l) {
  for (int j = 0; j < l->n;)
    if (finished(e, &l->e[j]))
      l->e[j] = l->e[--l->n];
    else
      j++;
}

/* Orders node id after the unfinished accesses `a` conflicts with (reads
 * do not conflict with reads), then records `a`. The entry's room is made
 * before scan drops the entries a write covers, which later accesses then
 * reach only through it: appended after them, a failed grow lost them,
 * and a task submitted next ran alongside a writer still running. An edge
 * that cannot be recorded dooms the node, which still finishes (cancelled)
 * only after the entries scan dropped: it is recorded all the same. */
static int infer(poas__engine *e, int id, const poas__access *a) {
  poas__ebuf *b = &e->bufs[a->region.buf];
  poas__acc_list *l = (a->mode & POAS__WRITE) ? &b->writers : &b->readers;
  if (l->n == l->cap)
    compact(e, l);
  if (grow((void **)&l->e, &l->cap, l->n + 1, sizeof *l->e))
    return POAS_ENOMEM;
  int rc = scan(e, id, &b->writers, a);
  if (!rc && (a->mode & POAS__WRITE))
    rc = scan(e, id, &b->readers, a);
  l->e[l->n++] = (poas__acc_entry){id, e->nodes[id].gen, a->mode, a->region};
  return rc;
}

static int alloc_node(poas__engine *e) {
  if (e->free_node >= 0) {
    int id = e->free_node;
    e->free_node = e->nodes[id].next_free;
    return id;
  }
  if (grow((void **)&e->nodes, &e->cap_nodes, e->nnodes + 1, sizeof *e->nodes))
    return POAS_ENOMEM;
  memset(&e->nodes[e->nnodes], 0, sizeof *e->nodes);
  return e->nnodes++;
}

int poas__engine_add(poas__engine *e, const poas__ins *ins, poas__node_done_fn done_fn,
                     void *done_arg) {
  if (ins->device >= e->ndev || (ins->device < 0 && ins->kind != POAS__INS_HOST) ||
      ins->naccess < 0 || ins->naccess > POAS__MAX_ACCESS)
    return poas__fail(POAS_EINVAL, "instruction on device %d of %d", ins->device, e->ndev);
  for (int i = 0; i < ins->naccess; i++)
    if (ins->access[i].region.buf < 0 || ins->access[i].region.buf >= e->nbufs)
      return poas__fail(POAS_EINVAL, "instruction names buffer %d of %d",
                        ins->access[i].region.buf, e->nbufs);
  int id = alloc_node(e);
  if (id < 0)
    return id;
  poas__node *n = &e->nodes[id];
  int *succ = n->succ, cap = n->cap_succ;
  unsigned gen = n->gen;
  memset(n, 0, sizeof *n);
  n->succ = succ, n->cap_succ = cap, n->gen = gen;
  n->ins = *ins;
  n->order = e->added++;
  n->state = POAS__NODE_WAIT;
  n->npred = 1; /* held until every access is inferred */
  n->done_fn = done_fn, n->done_arg = done_arg;
  for (int l = 0; l < POAS__ENGINE_LANES; l++)
    n->wait[l] = -1;
  e->pending++;
  if (ins->chunk >= 0 && ins->chunk < e->nchunks)
    e->chunks[ins->chunk].remaining++;
  int rc = 0;
  for (int i = 0; i < ins->naccess && rc == 0; i++)
    rc = infer(e, id, &ins->access[i]);
  /* Out of memory part-way: the slot stays alive for the edges already
   * recorded, and the node is cancelled instead of run. */
  if (rc)
    doom(e, id, rc);
  release(e, id);
  return id;
}

int poas__engine_add_buffer(poas__engine *e, const poas__gbuf *b) {
  if (grow((void **)&e->bufs, &e->cap_bufs, e->nbufs + 1, sizeof *e->bufs))
    return POAS_ENOMEM;
  poas__ebuf *eb = &e->bufs[e->nbufs];
  memset(eb, 0, sizeof *eb);
  eb->desc = *b;
  return e->nbufs++;
}

int poas__engine_chunk_open(poas__engine *e, int device, int64_t u0, int64_t u1) {
  if (grow((void **)&e->chunks, &e->cap_chunks, e->nchunks + 1, sizeof *e->chunks))
    return POAS_ENOMEM;
  e->chunks[e->nchunks] = (poas__chunk){
      .device = device, .u0 = u0, .u1 = u1, .remaining = 1, .state = POAS__CHUNK_OPEN};
  return e->nchunks++;
}

void poas__engine_chunk_seal(poas__engine *e, int chunk) {
  poas__chunk *c = &e->chunks[chunk];
  if (--c->remaining == 0) {
    c->state = POAS__CHUNK_COMPLETE;
    notify_coord(e);
  }
}

/* ------------------------------------------------------------ lifetime */

void poas__engine_lock(poas__engine *e) { pthread_mutex_lock(&e->lock); }
void poas__engine_unlock(poas__engine *e) { pthread_mutex_unlock(&e->lock); }

void poas__engine_wait(poas__engine *e) {
  e->coord_waiters++;
  pthread_cond_wait(&e->coord, &e->lock);
  e->coord_waiters--;
}

void poas__engine_drain(poas__engine *e) {
  while (e->pending > 0)
    poas__engine_wait(e);
}

/* Brings a simulated device's lanes to one clock, so that a run starts
 * from a common point in virtual time. */
static void align_lanes(poas__device *d) {
  int top = 0;
  for (int l = 1; l < d->nlanes; l++)
    if (poas__sim_lane_clock(d, l) > poas__sim_lane_clock(d, top))
      top = l;
  poas__event ev;
  if (d->be->event_create(d, &ev) != 0)
    return;
  if (d->be->event_record(d, top, &ev) == 0)
    for (int l = 0; l < d->nlanes; l++)
      d->be->lane_wait(d, l, &ev);
  d->be->event_destroy(d, &ev);
}

int poas__engine_create(const poas__devset *set, const poas__engine_config *cfg,
                        poas__engine **out) {
  int64_t after[POAS_MAX_DEVICES];
  int rc = poas__fault_parse(cfg->fault_spec, set, after);
  if (rc)
    return rc;
  poas__engine *e = calloc(1, sizeof *e);
  if (!e)
    return poas__fail(POAS_ENOMEM, "schedule: out of memory for the runtime");
  pthread_mutex_init(&e->lock, NULL);
  pthread_cond_init(&e->coord, NULL);
  e->set = set;
  e->ndev = set->ndev;
  e->recycle = cfg->recycle;
  e->cancel_after_doom = cfg->cancel_after_doom;
  e->free_node = -1;
  e->virtual_time = set->ndev > 0;
  e->wall_start = poas__now();
  for (int i = 0; i <= set->ndev; i++) {
    poas__worker *w = &e->w[i];
    w->e = e;
    w->index = i;
    w->dev = i < set->ndev ? set->dev[i] : NULL;
    w->async = w->dev && !w->dev->info.host_memory;
    w->nthreads = w->dev ? POAS__MAX(w->dev->issue_threads, 1) : POAS__MAX(cfg->host_threads, 1);
    w->fault_after = i < set->ndev ? after[i] : -1;
    pthread_cond_init(&w->cond, NULL);
    pthread_mutex_init(&w->record_lock, NULL);
    if (w->dev) {
      e->virtual_time &= w->dev->virtual_time;
      if (w->dev->virtual_time)
        align_lanes(w->dev);
      w->t_start = w->t_last = poas__engine_clock(e, i);
    }
  }
  *out = e;
  return 0;
}

void poas__engine_destroy(poas__engine *e) {
  if (!e)
    return;
  poas__engine_lock(e);
  poas__engine_drain(e);
  e->stop = 1;
  for (int i = 0; i <= e->ndev; i++)
    pthread_cond_broadcast(&e->w[i].cond);
  poas__engine_unlock(e);
  for (int i = 0; i <= e->ndev; i++) {
    poas__worker *w = &e->w[i];
    for (int t = 0; t < (w->started ? w->nthreads : 0); t++)
      pthread_join(w->threads[t], NULL);
    /* A failed device too: an operation whose event could not be made or
     * watched is on its lanes still, reading or writing a buffer below. */
    if (w->dev)
      poas__dev_sync_all(w->dev);
  }
  for (int b = 0; b < e->nbufs; b++) {
    poas__gbuf *g = &e->bufs[b].desc;
    if (g->device >= 0 && g->mem.ptr && !g->external)
      poas__dev_release(e->set->dev[g->device], g->mem, g->pitch * g->lines,
                        e->w[g->device].failed != 0);
    free(e->bufs[b].writers.e);
    free(e->bufs[b].readers.e);
  }
  for (int i = 0; i < e->nnodes; i++) {
    poas__node *n = &e->nodes[i];
    if (n->has_ev)
      n->ev.dev->be->event_destroy(n->ev.dev, &n->ev);
    free(n->succ);
  }
  for (int i = 0; i <= e->ndev; i++) {
    pthread_cond_destroy(&e->w[i].cond);
    pthread_mutex_destroy(&e->w[i].record_lock);
    free(e->w[i].threads);
    free(e->w[i].ready);
    free(e->w[i].inflight);
  }
  free(e->nodes);
  free(e->bufs);
  free(e->chunks);
  pthread_cond_destroy(&e->coord);
  pthread_mutex_destroy(&e->lock);
  free(e);
}
