/* gemm.c: poas_sgemm and poas_dgemm. Checks every argument before touching
 * anything (BLIS-style, in gemm_check), turns row-major calls into
 * column-major ones, and hands the problem to the pipeline: now, or (the
 * _async variants) as a task ordered by the matrices it touches. */
#include "api/context.h"
#include "schedule/tasks.h"

#include <string.h>

/* Validates a column-major problem; the caller has already normalised the
 * layout, so lda/ldb/ldc are checked against stored rows. */
static int gemm_check(const poas__gemm_problem *p) {
  if (p->transa != POAS_NO_TRANS && p->transa != POAS_TRANS)
    return poas__fail(POAS_EOP, "gemm: unknown transa value %d", (int)p->transa);
  if (p->transb != POAS_NO_TRANS && p->transb != POAS_TRANS)
    return poas__fail(POAS_EOP, "gemm: unknown transb value %d", (int)p->transb);
  if (p->m < 0 || p->n < 0 || p->k < 0)
    return poas__fail(POAS_ESIZE, "gemm: negative size (m=%lld n=%lld k=%lld)",
                      (long long)p->m, (long long)p->n, (long long)p->k);
  if (p->row_major ? poas__gemm_sizes_overflow("gemm", p->dtype, p->n, p->m, p->k)
                   : poas__gemm_sizes_overflow("gemm", p->dtype, p->m, p->n, p->k))
    return POAS_EINVAL;
  int64_t a_rows, a_cols, b_rows, b_cols;
  poas__operand_dims(p, 'a', &a_rows, &a_cols);
  poas__operand_dims(p, 'b', &b_rows, &b_cols);
  if (p->lda < POAS__MAX(1, a_rows))
    return poas__fail(POAS_ELD, "gemm: lda=%lld is smaller than %lld", (long long)p->lda,
                      (long long)POAS__MAX(1, a_rows));
  if (p->ldb < POAS__MAX(1, b_rows))
    return poas__fail(POAS_ELD, "gemm: ldb=%lld is smaller than %lld", (long long)p->ldb,
                      (long long)POAS__MAX(1, b_rows));
  if (p->ldc < POAS__MAX(1, p->m))
    return poas__fail(POAS_ELD, "gemm: ldc=%lld is smaller than %lld", (long long)p->ldc,
                      (long long)POAS__MAX(1, p->m));
  int64_t tmp;
  if (poas__mul_overflow(POAS__MAX(a_cols, 1), p->lda, &tmp) ||
      poas__mul_overflow(POAS__MAX(b_cols, 1), p->ldb, &tmp) ||
      poas__mul_overflow(POAS__MAX(p->n, 1), p->ldc, &tmp) || tmp > INT64_MAX / 8)
    return poas__fail(POAS_ETOOBIG, "gemm: matrix extent overflows 64-bit indexing");
  int c_used = p->m > 0 && p->n > 0;
  int ab_used = c_used && p->k > 0 && p->alpha != 0;
  if (c_used && !p->c)
    return poas__fail(POAS_ENULL, "gemm: C is NULL");
  if (ab_used && (!p->a || !p->b))
    return poas__fail(POAS_ENULL, "gemm: %s is NULL", p->a ? "B" : "A");
  if (ab_used) {
    size_t elem = poas__dtype_size(p->dtype);
    uintptr_t clo, chi, lo, hi;
    poas__matrix_span(p->c, p->m, p->n, p->ldc, elem, &clo, &chi);
    poas__matrix_span(p->a, a_rows, a_cols, p->lda, elem, &lo, &hi);
    if (poas__spans_overlap(clo, chi, lo, hi))
      return poas__fail(POAS_EOVERLAP, "gemm: C overlaps A");
    poas__matrix_span(p->b, b_rows, b_cols, p->ldb, elem, &lo, &hi);
    if (poas__spans_overlap(clo, chi, lo, hi))
      return poas__fail(POAS_EOVERLAP, "gemm: C overlaps B");
  }
  return 0;
}

int poas__gemm_shape(poas__gemm_problem *p, poas_layout layout, poas_op transa, poas_op transb,
                     int64_t m, int64_t n, int64_t k) {
  if (layout == POAS_COL_MAJOR) {
    p->transa = transa, p->transb = transb, p->m = m, p->n = n, p->k = k, p->row_major = 0;
  } else if (layout == POAS_ROW_MAJOR) {
    p->transa = transb, p->transb = transa, p->m = n, p->n = m, p->k = k, p->row_major = 1;
  } else {
    return poas__fail(POAS_ELAYOUT, "gemm: unknown layout value %d", (int)layout);
  }
  return 0;
}

/* Builds and checks the column-major problem for a call in either layout. */
static int gemm_build(poas_context *ctx, poas_dtype dtype, poas_layout layout, poas_op transa,
                      poas_op transb, int64_t m, int64_t n, int64_t k, double alpha,
                      const void *A, int64_t lda, const void *B, int64_t ldb, double beta,
                      void *C, int64_t ldc, poas__gemm_problem *out) {
  poas__clear_detail();
  if (!ctx)
    return poas__fail(POAS_ENULL, "gemm: ctx is NULL");
  poas__gemm_problem p = {.dtype = dtype, .alpha = alpha, .beta = beta, .c = C, .ldc = ldc};
  int rc = poas__gemm_shape(&p, layout, transa, transb, m, n, k);
  if (rc)
    return rc;
  if (p.row_major) {
    /* Row-major C (m x n) is column-major C^T (n x m) = op(B)^T op(A)^T. */
    p.a = B, p.lda = ldb, p.b = A, p.ldb = lda;
  } else {
    p.a = A, p.lda = lda, p.b = B, p.ldb = ldb;
  }
  rc = gemm_check(&p);
  if (rc)
    return rc;
  *out = p;
  return 0;
}

static int gemm_entry(poas_context *ctx, poas_dtype dtype, poas_layout layout, poas_op transa,
                      poas_op transb, int64_t m, int64_t n, int64_t k, double alpha,
                      const void *A, int64_t lda, const void *B, int64_t ldb, double beta,
                      void *C, int64_t ldc) {
  poas__gemm_problem p;
  int rc = gemm_build(ctx, dtype, layout, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta,
                      C, ldc, &p);
  if (rc)
    return rc;
  /* Outstanding tasks may touch these matrices: the synchronous call
   * comes after them. */
  if (ctx->tasks)
    poas__tasks_wait_all(ctx->tasks);
  return poas__gemm_run(ctx, &p);
}

/* ------------------------------------------------------------ async */

typedef struct gemm_task {
  poas_context *ctx;
  poas__gemm_problem p;
} gemm_task;

static int gemm_task_run(void *payload) {
  gemm_task *g = payload;
  return poas__gemm_run(g->ctx, &g->p);
}

/* Submits a checked problem as a task: it reads A and B, reads and writes
 * C (by address range), and takes the devices for itself, so GEMM runs
 * are ordered with the tasks that touch their matrices and with each
 * other. */
static int gemm_submit(poas_context *ctx, const poas__gemm_problem *p, poas_task **out) {
  poas__tasks *t;
  int rc = poas__context_tasks(ctx, &t);
  if (rc)
    return rc;
  size_t elem = poas__dtype_size(p->dtype);
  poas__access acc[4];
  int n = 0;
  acc[n++] = (poas__access){poas__tasks_devices_region(t), POAS__RW};
  uintptr_t lo, hi;
  if (p->m > 0 && p->n > 0) {
    poas__matrix_span(p->c, p->m, p->n, p->ldc, elem, &lo, &hi);
    acc[n++] = (poas__access){poas__tasks_host_region(t, lo, hi), POAS__RW};
    if (p->k > 0 && p->alpha != 0) {
      int64_t rows, cols;
      poas__operand_dims(p, 'a', &rows, &cols);
      poas__matrix_span(p->a, rows, cols, p->lda, elem, &lo, &hi);
      acc[n++] = (poas__access){poas__tasks_host_region(t, lo, hi), POAS__READ};
      poas__operand_dims(p, 'b', &rows, &cols);
      poas__matrix_span(p->b, rows, cols, p->ldb, elem, &lo, &hi);
      acc[n++] = (poas__access){poas__tasks_host_region(t, lo, hi), POAS__READ};
    }
  }
  gemm_task g = {ctx, *p};
  g.p.async = 1;
  g.p.epoch = poas__tasks_epoch(t);
  return poas__tasks_submit(t, gemm_task_run, &g, sizeof g, acc, n, out);
}

static int gemm_async(poas_context *ctx, poas_dtype dtype, poas_layout layout, poas_op transa,
                      poas_op transb, int64_t m, int64_t n, int64_t k, double alpha,
                      const void *A, int64_t lda, const void *B, int64_t ldb, double beta,
                      void *C, int64_t ldc, poas_task **out) {
  poas__gemm_problem p;
  int rc = gemm_build(ctx, dtype, layout, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta,
                      C, ldc, &p);
  return rc ? rc : gemm_submit(ctx, &p, out);
}

int poas_sgemm(poas_context *ctx, poas_layout layout, poas_op transa, poas_op transb, int64_t m,
               int64_t n, int64_t k, float alpha, const float *A, int64_t lda, const float *B,
               int64_t ldb, float beta, float *C, int64_t ldc) {
  return gemm_entry(ctx, POAS_FLOAT32, layout, transa, transb, m, n, k, alpha, A, lda, B, ldb,
                    beta, C, ldc);
}

int poas_dgemm(poas_context *ctx, poas_layout layout, poas_op transa, poas_op transb, int64_t m,
               int64_t n, int64_t k, double alpha, const double *A, int64_t lda, const double *B,
               int64_t ldb, double beta, double *C, int64_t ldc) {
  return gemm_entry(ctx, POAS_FLOAT64, layout, transa, transb, m, n, k, alpha, A, lda, B, ldb,
                    beta, C, ldc);
}

int poas_sgemm_async(poas_context *ctx, poas_layout layout, poas_op transa, poas_op transb,
                     int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                     const float *B, int64_t ldb, float beta, float *C, int64_t ldc,
                     poas_task **out) {
  return gemm_async(ctx, POAS_FLOAT32, layout, transa, transb, m, n, k, alpha, A, lda, B, ldb,
                    beta, C, ldc, out);
}

int poas_dgemm_async(poas_context *ctx, poas_layout layout, poas_op transa, poas_op transb,
                     int64_t m, int64_t n, int64_t k, double alpha, const double *A,
                     int64_t lda, const double *B, int64_t ldb, double beta, double *C,
                     int64_t ldc, poas_task **out) {
  return gemm_async(ctx, POAS_FLOAT64, layout, transa, transb, m, n, k, alpha, A, lda, B, ldb,
                    beta, C, ldc, out);
}
