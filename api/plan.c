/* plan.c: poas_plan_gemm and poas_plan_gemm_call: the plan a GEMM would
 * run, from the same path poas_sgemm / poas_dgemm take up to the solve,
 * told in the caller's layout (a row-major caller's rows are the
 * normalised problem's columns). */
#include "api/context.h"

#include <stdlib.h>
#include <string.h>

/* The public plan from the solver's result. */
static void describe(const poas_context *ctx, const poas__gemm_problem *p,
                     const poas__gemm_plan *plan, poas_plan *out) {
  const poas__opt_result *r = &plan->res;
  memset(out, 0, sizeof *out);
  out->dtype = p->dtype;
  out->m = p->row_major ? p->n : p->m;
  out->n = p->row_major ? p->m : p->n;
  out->k = p->k;
  int cols = (r->split == POAS__SPLIT_COLS) != p->row_major;
  out->split = cols ? POAS_SPLIT_COLS : POAS_SPLIT_ROWS;
  out->granule = r->granule;
  out->makespan_s = plan->makespan_s;
  for (int i = 0; i < r->ndev; i++) {
    const poas__opt_share *sh = &r->dev[i];
    const char *id = ctx->devices.dev[i]->info.id;
    if (sh->excluded) {
      poas_plan_excluded *e = &out->excluded[out->nexcluded++];
      poas__strlcpy(e->id, id, sizeof e->id);
      poas__strlcpy(e->reason, sh->reason, sizeof e->reason);
      continue;
    }
    if (sh->u1 <= sh->u0)
      continue;
    poas_plan_device *d = &out->dev[out->ndevices++];
    poas__strlcpy(d->id, id, sizeof d->id);
    d->first = sh->u0;
    d->count = sh->u1 - sh->u0;
    d->share = (double)d->count / (double)r->total_units;
    d->tile = POAS__MIN(sh->tile, d->count);
    d->tiles = sh->time.tiles;
    d->bytes_h2d = sh->time.bytes_h2d;
    d->bytes_d2h = sh->time.bytes_d2h;
    d->compute_s = sh->time.compute_s;
    d->transfer_s = sh->time.transfer_s;
    d->predicted_s = sh->time.total_s;
    /* A built-in estimate from a device's peak is as rough as the
     * solver's stand-in for an unusable model (a sim's own is exact, in
     * a dtype its calibration left out too). A device calibrated in the
     * other dtype only (poas-calibrate --dtype s) plans this one on its
     * estimate, and was once called calibrated. */
    d->estimated = sh->estimated || !(poas__model_fitted(&ctx->models[i], p->dtype) ||
                                      ctx->devices.dev[i]->info.kind == POAS_DEVICE_SIM);
    d->corun = sh->corun;
    d->learned = plan->learned[i];
  }
}

int poas_plan_gemm_call(poas_context *ctx, poas_dtype dtype, poas_layout layout, poas_op transa,
                        poas_op transb, int64_t m, int64_t n, int64_t k, double alpha, double beta,
                        poas_plan *out) {
  poas__clear_detail();
  if (!ctx || !out)
    return poas__fail(POAS_ENULL, "plan: %s is NULL", ctx ? "out" : "ctx");
  /* The layout first, as the GEMM calls check it, and in the plan's words
   * (poas__gemm_shape's below say "gemm"). */
  if (layout != POAS_COL_MAJOR && layout != POAS_ROW_MAJOR)
    return poas__fail(POAS_ELAYOUT, "plan: unknown layout value %d", (int)layout);
  int rc = poas__gemm_shape_check("plan", dtype, transa, transb, m, n, k);
  if (rc)
    return rc;
  /* Only whether each is 0 matters to a plan (api/run.c, reads_c and
   * reads_ab), as to the call. */
  poas__gemm_problem p = {.dtype = dtype, .alpha = alpha, .beta = beta};
  if ((rc = poas__gemm_shape(&p, layout, transa, transb, m, n, k)) != 0)
    return rc;
  poas__gemm_plan *plan = malloc(sizeof *plan);
  if (!plan)
    return poas__fail(POAS_ENOMEM, "plan: no memory for a plan");
  rc = poas__gemm_plan_make(ctx, &p, plan);
  if (!rc)
    describe(ctx, &p, plan, out);
  free(plan);
  return rc;
}

int poas_plan_gemm(poas_context *ctx, poas_dtype dtype, poas_layout layout, poas_op transa,
                   poas_op transb, int64_t m, int64_t n, int64_t k, poas_plan *out) {
  return poas_plan_gemm_call(ctx, dtype, layout, transa, transb, m, n, k, 1, 1, out);
}
