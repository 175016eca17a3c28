/* gemm.c: poas_sgemm and poas_dgemm. Checks every argument before touching
 * anything (BLIS-style, in gemm_check), in the caller's terms so that an
 * error names the argument the caller passed, then turns row-major calls
 * into column-major ones and hands the problem to the pipeline: now, or
 * (the _async variants) as a task ordered by the matrices it touches. */
#include "api/context.h"
#include "schedule/tasks.h"

#include <stdlib.h>
#include <string.h>

/* A GEMM's arguments as the caller passed them. */
typedef struct gemm_args {
  poas_dtype dtype;
  poas_layout layout;
  poas_op transa, transb;
  int64_t m, n, k;
  double alpha, beta;
  const void *a, *b;
  void *c;
  int64_t lda, ldb, ldc;
} gemm_args;

/* One matrix as the caller stored it: `lines` runs of `run` elements,
 * `ld` elements apart (a column-major matrix's columns, a row-major one's
 * rows). Leading dimensions and overlaps are checked on this alone, the
 * same way in both layouts. */
typedef struct stored {
  const char *name;        /* "A", "B" or "C" */
  const char *ld_name;     /* "lda", "ldb" or "ldc" */
  const void *p;
  int64_t run, lines, ld;
} stored;

/* Matrix `name`, which is rows x cols before `op`, as stored in `layout`. */
static stored stored_as(const char *name, const char *ld_name, const void *p,
                        poas_layout layout, poas_op op, int64_t rows, int64_t cols, int64_t ld) {
  if (op == POAS_TRANS) {
    int64_t t = rows;
    rows = cols, cols = t;
  }
  int col = layout == POAS_COL_MAJOR;
  return (stored){name, ld_name, p, col ? rows : cols, col ? cols : rows, ld};
}

static int intervals_meet(int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
  return a0 < b1 && b0 < a1;
}

/* Whether C and x share an element. Their address spans are compared
 * first; when the spans meet and both have the same leading dimension,
 * with x a whole number of elements from C, the elements themselves are:
 * LAPACK's trailing update (C = A22 -= A21 A12, all blocks of one array)
 * and matrices of interleaved rows meet in their spans and nowhere else.
 * Counting in elements from C's first, C's (r, c) is at r + c ld with
 * r < run <= ld. With x at d = q ld + s (0 <= s < ld), x's (r', c') is at
 * (r' + s) + (c' + q) ld, where r' + s < 2 ld: row r' + s of C's column
 * c' + q when below ld, else row r' + s - ld of column c' + q + 1. So
 * they meet exactly when C's rectangle meets x's moved by (s, q) or by
 * (s - ld, q + 1). Other leading dimensions, and x between elements, keep
 * the span test, which refuses more than it must but never too little.
 * gemm_check has bounded every extent by INT64_MAX / 8 elements, so none
 * of this wraps. */
static int shares_elements(const stored *c, const stored *x, size_t elem) {
  uintptr_t clo, chi, xlo, xhi;
  poas__matrix_span(c->p, c->run, c->lines, c->ld, elem, &clo, &chi);
  poas__matrix_span(x->p, x->run, x->lines, x->ld, elem, &xlo, &xhi);
  if (!poas__spans_overlap(clo, chi, xlo, xhi))
    return 0;
  uintptr_t bytes = xlo >= clo ? xlo - clo : clo - xlo;
  if (c->ld != x->ld || bytes % elem != 0)
    return 1;
  int64_t ld = c->ld, d = (int64_t)(bytes / elem);
  if (xlo < clo)
    d = -d;
  int64_t q = d / ld, s = d % ld;
  if (s < 0) /* C's division truncates; q is the floor */
    s += ld, q--;
  return (intervals_meet(0, c->run, s, s + x->run) &&
          intervals_meet(0, c->lines, q, q + x->lines)) ||
         (intervals_meet(0, c->run, s - ld, s - ld + x->run) &&
          intervals_meet(0, c->lines, q + 1, q + 1 + x->lines));
}

/* Validates a call in the caller's terms: the layout, the operations, the
 * sizes, then each matrix's leading dimension, extent, pointer and
 * overlap with C. */
static int gemm_check(const gemm_args *g) {
  if (g->layout != POAS_COL_MAJOR && g->layout != POAS_ROW_MAJOR)
    return poas__fail(POAS_ELAYOUT, "gemm: unknown layout value %d", (int)g->layout);
  int rc = poas__gemm_shape_check("gemm", g->dtype, g->transa, g->transb, g->m, g->n, g->k);
  if (rc)
    return rc;
  const stored mat[3] = {
      stored_as("A", "lda", g->a, g->layout, g->transa, g->m, g->k, g->lda),
      stored_as("B", "ldb", g->b, g->layout, g->transb, g->k, g->n, g->ldb),
      stored_as("C", "ldc", g->c, g->layout, POAS_NO_TRANS, g->m, g->n, g->ldc),
  };
  for (int i = 0; i < 3; i++) {
    const stored *x = &mat[i];
    if (x->ld < POAS__MAX(1, x->run))
      return poas__fail(POAS_ELD, "gemm: %s=%lld is smaller than %lld", x->ld_name,
                        (long long)x->ld, (long long)POAS__MAX(1, x->run));
  }
  /* Bounded as a whole number of lines, the last one's ld included, so
   * that every byte offset and pitch the devices derive (ld * elem among
   * them, for one column too) fits 64 bits. An argument no memory could
   * hold: POAS_EINVAL, as for sizes whose bytes overflow. */
  for (int i = 0; i < 3; i++) {
    const stored *x = &mat[i];
    int64_t elems;
    if (poas__mul_overflow(POAS__MAX(x->lines, 1), x->ld, &elems) || elems > INT64_MAX / 8)
      return poas__fail(POAS_EINVAL,
                        "gemm: %s's extent (%s=%lld times %lld) overflows "
                        "64-bit indexing",
                        x->name, x->ld_name, (long long)x->ld, (long long)x->lines);
  }
  int c_used = g->m > 0 && g->n > 0;
  int ab_used = c_used && g->k > 0 && g->alpha != 0;
  if (c_used && !g->c)
    return poas__fail(POAS_ENULL, "gemm: C is NULL");
  for (int i = 0; ab_used && i < 2; i++)
    if (!mat[i].p)
      return poas__fail(POAS_ENULL, "gemm: %s is NULL", mat[i].name);
  /* A and B are only read: they may overlap each other. */
  size_t elem = poas__dtype_size(g->dtype);
  for (int i = 0; ab_used && i < 2; i++)
    if (shares_elements(&mat[2], &mat[i], elem))
      return poas__fail(POAS_EOVERLAP, "gemm: C overlaps %s", mat[i].name);
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

/* Checks a call and builds its column-major problem. */
static int gemm_build(poas_context *ctx, const gemm_args *g, poas__gemm_problem *out) {
  poas__clear_detail();
  if (!ctx)
    return poas__fail(POAS_ENULL, "gemm: ctx is NULL");
  int rc = gemm_check(g);
  if (rc || (rc = poas__refuse_while_calibrating(ctx, "a GEMM")) != 0)
    return rc;
  /* With k = 0, alpha multiplies an empty sum: BLAS leaves it out (C =
   * beta C), where a device that computes alpha times 0 makes an infinite
   * or NaN alpha a C of NaNs (OpenBLAS 0.3.21 and CLBlast both did). */
  poas__gemm_problem p = {.dtype = g->dtype, .alpha = g->k > 0 ? g->alpha : 0, .beta = g->beta,
                          .c = g->c, .ldc = g->ldc};
  /* Cannot fail: gemm_check has checked the layout. */
  poas__gemm_shape(&p, g->layout, g->transa, g->transb, g->m, g->n, g->k);
  if (p.row_major) {
    /* Row-major C (m x n) is column-major C^T (n x m) = op(B)^T op(A)^T. */
    p.a = g->b, p.lda = g->ldb, p.b = g->a, p.ldb = g->lda;
  } else {
    p.a = g->a, p.lda = g->lda, p.b = g->b, p.ldb = g->ldb;
  }
  *out = p;
  return 0;
}

static int gemm_entry(poas_context *ctx, const gemm_args *g) {
  poas__gemm_problem p;
  int rc = gemm_build(ctx, g, &p);
  /* Outstanding tasks may touch these matrices: the synchronous call
   * comes after them. From one of those tasks it would wait for itself:
   * POAS_ESTATE, a call refused. With every task done, the device copies
   * asynchronous GEMMs left serve nobody any more: freed, they leave the
   * plan the room the synchronous call's plan, poas_plan_gemm_call's,
   * counts on. */
  if (!rc)
    rc = poas__wait_tasks(ctx);
  if (rc) {
    /* A call refused is a GEMM that failed: the report of the one before
     * is not this one's. (An asynchronous call refused leaves the report
     * alone: tasks still running set it when they end, so clearing it
     * there would hold only until then.) */
    if (ctx)
      poas__report_set(ctx, NULL);
    return rc;
  }
  return poas__gemm_run(ctx, &p);
}

/* ------------------------------------------------------------ async */

typedef struct gemm_task {
  poas_context *ctx;
  poas__gemm_problem p;
  /* POAS_FAULT when the call was submitted: read on the caller's thread,
   * not the task worker's, where a program's setenv meanwhile raced the
   * read, and which faults a queued call met depended on when it ran. */
  char fault[POAS__FAULT_SPEC_MAX];
} gemm_task;
_Static_assert(sizeof(gemm_task) <= POAS__TASK_PAYLOAD, "a GEMM task fits a task's payload");

static int gemm_task_run(void *payload) {
  gemm_task *g = payload;
  g->p.fault = g->fault; /* the payload was copied: point into this copy */
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
  gemm_task g = {ctx, *p, ""};
  g.p.async = 1;
  g.p.epoch = poas__tasks_epoch(t);
  const char *fault = getenv("POAS_FAULT");
  if (fault && strlen(fault) >= sizeof g.fault)
    return poas__fail(POAS_EINVAL, "POAS_FAULT is %zu bytes, past the %zu an asynchronous GEMM "
                      "keeps", strlen(fault), sizeof g.fault - 1);
  poas__strlcpy(g.fault, fault, sizeof g.fault);
  return poas__tasks_submit(t, gemm_task_run, &g, sizeof g, acc, n, out);
}

static int gemm_async(poas_context *ctx, const gemm_args *g, poas_task **out) {
  poas__gemm_problem p;
  int rc = gemm_build(ctx, g, &p);
  return rc ? rc : gemm_submit(ctx, &p, out);
}

int poas_sgemm(poas_context *ctx, poas_layout layout, poas_op transa, poas_op transb, int64_t m,
               int64_t n, int64_t k, float alpha, const float *A, int64_t lda, const float *B,
               int64_t ldb, float beta, float *C, int64_t ldc) {
  gemm_args g = {POAS_FLOAT32, layout, transa, transb, m, n, k, alpha, beta, A, B, C,
                 lda, ldb, ldc};
  return gemm_entry(ctx, &g);
}

int poas_dgemm(poas_context *ctx, poas_layout layout, poas_op transa, poas_op transb, int64_t m,
               int64_t n, int64_t k, double alpha, const double *A, int64_t lda, const double *B,
               int64_t ldb, double beta, double *C, int64_t ldc) {
  gemm_args g = {POAS_FLOAT64, layout, transa, transb, m, n, k, alpha, beta, A, B, C,
                 lda, ldb, ldc};
  return gemm_entry(ctx, &g);
}

int poas_sgemm_async(poas_context *ctx, poas_layout layout, poas_op transa, poas_op transb,
                     int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                     const float *B, int64_t ldb, float beta, float *C, int64_t ldc,
                     poas_task **out) {
  gemm_args g = {POAS_FLOAT32, layout, transa, transb, m, n, k, alpha, beta, A, B, C,
                 lda, ldb, ldc};
  return gemm_async(ctx, &g, out);
}

int poas_dgemm_async(poas_context *ctx, poas_layout layout, poas_op transa, poas_op transb,
                     int64_t m, int64_t n, int64_t k, double alpha, const double *A,
                     int64_t lda, const double *B, int64_t ldb, double beta, double *C,
                     int64_t ldc, poas_task **out) {
  gemm_args g = {POAS_FLOAT64, layout, transa, transb, m, n, k, alpha, beta, A, B, C,
                 lda, ldb, ldc};
  return gemm_async(ctx, &g, out);
}
