/* run.c: runs a normalised GEMM. For now on one device, the one with the
 * highest peak estimate, through the device interface: directly on host
 * memory for host_memory devices, else through device buffers. The
 * predict -> optimize -> adapt -> schedule pipeline replaces this. */
#include "api/context.h"

#include <string.h>

static poas__device *pick_device(const poas_context *ctx, poas_dtype dtype) {
  poas__device *best = NULL;
  for (int i = 0; i < ctx->devices.ndev; i++) {
    poas__device *d = ctx->devices.dev[i];
    if (!best || d->info.peak_gflops[dtype] > best->info.peak_gflops[dtype])
      best = d;
  }
  return best;
}

/* Stored rows and columns of an operand (column-major). */
static void stored_shape(poas_op op, int64_t rows, int64_t cols, int64_t *r, int64_t *c) {
  *r = op == POAS_NO_TRANS ? rows : cols;
  *c = op == POAS_NO_TRANS ? cols : rows;
}

static int run_on_buffers(poas__device *d, const poas__gemm_problem *p) {
  size_t es = poas__dtype_size(p->dtype);
  int64_t ar, ac, br, bc;
  stored_shape(p->transa, p->m, p->k, &ar, &ac);
  stored_shape(p->transb, p->k, p->n, &br, &bc);
  poas__mem a = {0}, b = {0}, c = {0};
  int rc = d->be->mem_alloc(d, (size_t)POAS__MAX(ar * ac, 1) * es, &a);
  if (!rc)
    rc = d->be->mem_alloc(d, (size_t)POAS__MAX(br * bc, 1) * es, &b);
  if (!rc)
    rc = d->be->mem_alloc(d, (size_t)(p->m * p->n) * es, &c);
  poas__copy2d ca = {(size_t)ar * es, (size_t)ac, (size_t)p->lda * es, (size_t)ar * es, 0};
  poas__copy2d cb = {(size_t)br * es, (size_t)bc, (size_t)p->ldb * es, (size_t)br * es, 0};
  poas__copy2d cc = {(size_t)p->m * es, (size_t)p->n, (size_t)p->ldc * es, (size_t)p->m * es, 0};
  /* BLAS does not read A and B when alpha is 0: neither do we. */
  int ab_used = p->k > 0 && p->alpha != 0;
  if (!rc && ab_used && ar * ac > 0)
    rc = d->be->copy_h2d(d, 0, a, p->a, &ca);
  if (!rc && ab_used && br * bc > 0)
    rc = d->be->copy_h2d(d, 0, b, p->b, &cb);
  if (!rc && p->beta != 0)
    rc = d->be->copy_h2d(d, 0, c, p->c, &cc);
  poas__gemm_call g = {p->dtype, p->transa, p->transb, p->m, p->n, ab_used ? p->k : 0, p->alpha, p->beta,
                       {a, 0, POAS__MAX(ar, 1)}, {b, 0, POAS__MAX(br, 1)}, {c, 0, p->m}};
  if (!rc)
    rc = d->be->gemm(d, 0, &g);
  if (!rc)
    rc = d->be->copy_d2h(d, 0, p->c, c, &cc);
  if (!rc)
    rc = d->be->lane_sync(d, 0);
  if (c.ptr)
    d->be->mem_free(d, c);
  if (b.ptr)
    d->be->mem_free(d, b);
  if (a.ptr)
    d->be->mem_free(d, a);
  return rc;
}

int poas__gemm_run(poas_context *ctx, const poas__gemm_problem *p) {
  if (p->m == 0 || p->n == 0)
    return 0;
  poas__device *d = pick_device(ctx, p->dtype);
  if (!d)
    return poas__fail(POAS_ENODEV, "gemm: no device");
  double t0 = poas__now();
  int rc;
  if (d->info.host_memory) {
    poas__gemm_call g = {p->dtype,
                         p->transa,
                         p->transb,
                         p->m,
                         p->n,
                         p->alpha != 0 ? p->k : 0,
                         p->alpha,
                         p->beta,
                         {poas__mem_host(p->a), 0, p->lda},
                         {poas__mem_host(p->b), 0, p->ldb},
                         {poas__mem_host(p->c), 0, p->ldc}};
    rc = d->be->gemm(d, 0, &g);
  } else {
    rc = run_on_buffers(d, p);
  }
  if (rc)
    return poas__fail(rc, "gemm on %s failed: %s", d->info.id, poas_strerror(rc));
  double t = poas__now() - t0;
  poas_report *r = &ctx->report;
  memset(r, 0, sizeof *r);
  r->dtype = p->dtype, r->m = p->m, r->n = p->n, r->k = p->k;
  r->ndevices = 1;
  poas__strlcpy(r->dev[0].id, d->info.id, sizeof r->dev[0].id);
  r->dev[0].share = 1;
  r->dev[0].chunks = 1;
  r->dev[0].measured_s = r->dev[0].busy_s = r->measured_s = t;
  r->gflops = t > 0 ? 2.0 * (double)p->m * (double)p->n * (double)p->k / t / 1e9 : 0;
  poas__strlcpy(r->policy, ctx->sched, sizeof r->policy);
  ctx->has_report = 1;
  return 0;
}
