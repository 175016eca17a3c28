/* resident.c: matrices an asynchronous GEMM leaves on a device, so that
 * the next GEMM of a chain (C = A B, then E = C D) on that device reads C
 * there instead of copying it in from the host again.
 *
 * When a GEMM task's plan puts all of it on one device with its own
 * memory, C is computed whole into device memory that outlives the run
 * (and copied out to the host as always, so the host copy is right when
 * the task finishes). A later GEMM task planned on the same device whose A
 * or B is that matrix (same address, leading dimension, shape and type)
 * uses the device copy.
 *
 * A device copy stays valid only while the host copy cannot have changed:
 * - a task that writes over it drops it: a GEMM whose C overlaps it, or a
 *   host task with a write access;
 * - so does any wait the caller returns from (the tasks' epoch), since the
 *   caller may then write the memory itself. A copy serves only tasks
 *   submitted in the epoch in which it was made.
 * GEMM tasks run one at a time (they all write the devices' region), in
 * submission order, which is what makes "dead" well defined: when a GEMM
 * of epoch e starts, copies from earlier epochs can serve nobody.
 *
 * The dead are freed before the plan of the GEMM that finds them dead
 * (poas__resident_drop_stale): a GEMM task's, or a synchronous GEMM's
 * once its wait has left no task.
 *
 * Room: C is kept only when A, B and C together fit in half the device's
 * memory and C whole is within its limits on one buffer (what its GEMM can
 * index, its largest allocation), and the copies on a device hold at most
 * a quarter of it (older ones not used by the run make room first); a
 * GEMM task's plan counts what copies hold as taken (poas__resident_bytes),
 * and a synchronous call's nothing, since it frees them all first. At most
 * POAS__MAX_RESIDENT copies. */
#include "api/context.h"

#include <stdlib.h>
#include <string.h>

void poas__resident_init(poas_context *ctx) {
  pthread_mutex_init(&ctx->resident_lock, NULL);
  for (int i = 0; i < POAS__MAX_RESIDENT; i++)
    ctx->resident[i].device = -1;
}

/* The device memory a copy holds: the matrix, dense. */
static size_t held_bytes(const poas__resident *r) {
  return (size_t)r->rows * (size_t)r->cols * poas__dtype_size(r->dtype);
}

static void drop(poas_context *ctx, poas__resident *r) {
  poas__dev_free(ctx->devices.dev[r->device], r->mem, held_bytes(r));
  r->device = -1;
}

void poas__resident_release_all(poas_context *ctx) {
  pthread_mutex_lock(&ctx->resident_lock);
  for (int i = 0; i < POAS__MAX_RESIDENT; i++)
    if (ctx->resident[i].device >= 0)
      drop(ctx, &ctx->resident[i]);
  pthread_mutex_unlock(&ctx->resident_lock);
  pthread_mutex_destroy(&ctx->resident_lock);
}

static int overlaps(const poas__resident *r, uintptr_t lo, uintptr_t hi) {
  uintptr_t rlo, rhi;
  poas__matrix_span(r->host, r->rows, r->cols, r->ld, poas__dtype_size(r->dtype), &rlo, &rhi);
  return poas__spans_overlap(rlo, rhi, lo, hi);
}

void poas__resident_invalidate(poas_context *ctx, uintptr_t lo, uintptr_t hi) {
  pthread_mutex_lock(&ctx->resident_lock);
  for (int i = 0; i < POAS__MAX_RESIDENT; i++)
    if (ctx->resident[i].device >= 0 && overlaps(&ctx->resident[i], lo, hi))
      drop(ctx, &ctx->resident[i]);
  pthread_mutex_unlock(&ctx->resident_lock);
}

/* The one device the plan gives all the work, when it has its own memory;
 * -1 otherwise. */
static int sole_device(const poas__gemm_plan *plan) {
  int found = -1;
  for (int i = 0; i < plan->res.ndev; i++) {
    if (plan->res.dev[i].u1 <= plan->res.dev[i].u0)
      continue;
    if (found >= 0)
      return -1;
    found = i;
  }
  return found >= 0 && !plan->dev[found].host_memory ? found : -1;
}

static poas__resident *find(poas_context *ctx, int device, const void *host, int64_t ld,
                            int64_t rows, int64_t cols, poas_dtype dtype) {
  for (int i = 0; i < POAS__MAX_RESIDENT; i++) {
    poas__resident *r = &ctx->resident[i];
    if (r->device == device && r->host == host && r->ld == ld && r->rows == rows &&
        r->cols == cols && r->dtype == dtype)
      return r;
  }
  return NULL;
}

void poas__resident_drop_stale(poas_context *ctx, unsigned epoch) {
  pthread_mutex_lock(&ctx->resident_lock);
  for (int i = 0; i < POAS__MAX_RESIDENT; i++)
    if (ctx->resident[i].device >= 0 && ctx->resident[i].epoch != epoch)
      drop(ctx, &ctx->resident[i]);
  pthread_mutex_unlock(&ctx->resident_lock);
}

uint64_t poas__resident_bytes(poas_context *ctx, int device) {
  uint64_t held = 0;
  pthread_mutex_lock(&ctx->resident_lock);
  for (int i = 0; i < POAS__MAX_RESIDENT; i++)
    if (ctx->resident[i].device == device)
      held += held_bytes(&ctx->resident[i]);
  pthread_mutex_unlock(&ctx->resident_lock);
  return held;
}

/* Whether C whole fits the device's limits on one buffer: its GEMMs index
 * C from the start of that buffer (each tile's C lies at its place there),
 * so all m x n of it, each side padded as the device pads operands, must
 * stay within what they can index (gemm_max_elems), and the buffer within
 * the largest the device allocates (max_buffer_bytes). The plan kept
 * every tile within both, not C whole: past them the tiles' GEMMs were
 * refused mid-run, or the allocation failed after older copies had made
 * room for it. A copy within them also serves later GEMMs as a whole A or
 * B within them. */
static int whole_c_within_limits(const poas__device *d, const poas__gemm_problem *p) {
  size_t es = poas__dtype_size(p->dtype);
  if (d->gemm_max_elems > 0 &&
      poas__padded_elems(p->m, p->n, d->gemm_index_pad) > (double)d->gemm_max_elems)
    return 0;
  return d->max_buffer_bytes == 0 ||
         (double)p->m * (double)p->n * (double)es <= (double)d->max_buffer_bytes;
}

/* Makes room for `bytes` more on `device` within `cap`, dropping the oldest
 * copies other than `keep_a` and `keep_b`; whether it fits. Locked. */
static int make_room(poas_context *ctx, int device, size_t bytes, uint64_t cap,
                     const poas__resident *keep_a, const poas__resident *keep_b) {
  for (;;) {
    uint64_t held = 0;
    poas__resident *oldest = NULL;
    for (int i = 0; i < POAS__MAX_RESIDENT; i++) {
      poas__resident *r = &ctx->resident[i];
      if (r->device != device)
        continue;
      held += held_bytes(r);
      if (r != keep_a && r != keep_b && (!oldest || r->seq < oldest->seq))
        oldest = r;
    }
    if (held + bytes <= cap)
      return 1;
    if (!oldest)
      return 0;
    drop(ctx, oldest);
  }
}

int poas__resident_prepare(poas_context *ctx, const poas__gemm_problem *p,
                           const poas__gemm_plan *plan, poas__gemm_source *src,
                           poas__resident *kept) {
  kept->device = -1;
  size_t es = poas__dtype_size(p->dtype);
  uintptr_t clo, chi;
  poas__matrix_span(p->c, p->m, p->n, p->ldc, es, &clo, &chi);
  int dev = sole_device(plan), rc = 0;
  pthread_mutex_lock(&ctx->resident_lock);
  for (int i = 0; i < POAS__MAX_RESIDENT; i++) { /* the dead went before the plan */
    poas__resident *r = &ctx->resident[i];
    if (r->device >= 0 && overlaps(r, clo, chi))
      drop(ctx, r);
  }
  const poas__resident *a = NULL, *b = NULL;
  int64_t ar, ac, br, bc;
  poas__operand_dims(p, 'a', &ar, &ac);
  poas__operand_dims(p, 'b', &br, &bc);
  if (dev >= 0 && p->k > 0 && p->alpha != 0) {
    a = find(ctx, dev, p->a, p->lda, ar, ac, p->dtype);
    b = find(ctx, dev, p->b, p->ldb, br, bc, p->dtype);
    if (a)
      rc = poas__gemm_source_resident(src, dev, 'a', a->mem);
    if (!rc && b)
      rc = poas__gemm_source_resident(src, dev, 'b', b->mem);
  }
  size_t bytes = (size_t)p->m * (size_t)p->n * es;
  size_t problem = bytes + ((size_t)ar * (size_t)ac + (size_t)br * (size_t)bc) * es;
  uint64_t memory = dev >= 0 ? ctx->devices.dev[dev]->info.memory_bytes : 0;
  /* C whole replaces the run's C tiles, two buffers of a tile each: in
   * a plan of more than two tiles it is larger than they are, and where
   * memory is short (held elsewhere, or by other copies) it took room the
   * plan counted on for its other buffers, and the run failed for memory.
   * Such a plan keeps C only where the device could hold the whole
   * problem now, its buffers and C whole both fitting then: a GPU's plan
   * cuts squares into tiles for speed, not room, and its chains keep C. A
   * device that cannot tell what it could allocate keeps the rule of its
   * total memory alone. */
  uint64_t now = 0;
  int fits = dev < 0 || plan->res.dev[dev].time.tiles <= 2 ||
             poas__dev_available(ctx->devices.dev[dev], &now) != 0 || now >= problem;
  int keep = !rc && dev >= 0 && problem <= memory / 2 && fits &&
             whole_c_within_limits(ctx->devices.dev[dev], p) &&
             make_room(ctx, dev, bytes, memory / 4, a, b);
  pthread_mutex_unlock(&ctx->resident_lock);
  if (!keep)
    return rc;
  poas__device *d = ctx->devices.dev[dev];
  poas__mem mem;
  if (poas__dev_alloc(d, bytes, &mem) != 0) {
    poas__clear_detail();
    return 0; /* no room to keep it: C goes through tiles as usual */
  }
  rc = poas__gemm_source_keep_c(src, dev, mem);
  if (rc) {
    poas__dev_free(d, mem, bytes);
    return rc;
  }
  *kept = (poas__resident){.device = dev, .host = p->c, .ld = p->ldc, .rows = p->m,
                           .cols = p->n, .dtype = p->dtype, .mem = mem,
                           .epoch = p->epoch};
  return 0;
}

void poas__resident_finish(poas_context *ctx, poas__resident *kept, int failed) {
  if (kept->device < 0)
    return;
  if (failed) {
    poas__dev_free(ctx->devices.dev[kept->device], kept->mem, held_bytes(kept));
    return;
  }
  pthread_mutex_lock(&ctx->resident_lock);
  poas__resident *slot = NULL;
  for (int i = 0; i < POAS__MAX_RESIDENT && !slot; i++)
    if (ctx->resident[i].device < 0)
      slot = &ctx->resident[i];
  if (!slot) { /* the oldest goes */
    slot = &ctx->resident[0];
    for (int i = 1; i < POAS__MAX_RESIDENT; i++)
      if (ctx->resident[i].seq < slot->seq)
        slot = &ctx->resident[i];
    drop(ctx, slot);
  }
  *slot = *kept;
  slot->seq = ++ctx->resident_seq;
  pthread_mutex_unlock(&ctx->resident_lock);
}
