/* gemm-cases.c: see gemm-cases.h. */
#include "gemm-cases.h"

#include <string.h>

typedef struct shape {
  int64_t m, n, k;
} shape;

static const shape small_shapes[] = {
    {17, 13, 11}, {64, 64, 64}, {1, 37, 29},  {41, 1, 23}, {33, 29, 1},
    {3, 200, 5},  {200, 3, 7},  {0, 5, 7},    {5, 0, 7},   {6, 5, 0},
};
static const shape big_shapes[] = {{300, 260, 120}, {513, 97, 64}};
static const double alphas[] = {1.0, 0.0, -1.5};
static const double betas[] = {0.0, 1.0, 0.5};

static int run_case(poas_context *ctx, poas_dtype dt, poas_layout lay, poas_op ta, poas_op tb,
                    shape s, double alpha, double beta, int64_t pad, uint64_t seed) {
  test_gemm g;
  if (test_gemm_alloc(&g, dt, lay, ta, tb, s.m, s.n, s.k, pad, alpha, beta, seed) != 0) {
    test_gemm_free(&g);
    return 1;
  }
  /* With beta = 0, C must not be read: poison it so that a read shows. */
  if (beta == 0) {
    int64_t outer = lay == POAS_COL_MAJOR ? s.n : s.m;
    int64_t inner = lay == POAS_COL_MAJOR ? s.m : s.n;
    for (int64_t o = 0; o < outer; o++) {
      size_t es = dt == POAS_FLOAT32 ? 4 : 8;
      test_poison((char *)g.C + (size_t)(o * g.ldc) * es, dt, (size_t)inner);
      test_poison((char *)g.C0 + (size_t)(o * g.ldc) * es, dt, (size_t)inner);
    }
  }
  char what[160];
  snprintf(what, sizeof what, "%sgemm %s %c%c m=%lld n=%lld k=%lld alpha=%g beta=%g pad=%lld",
           dt == POAS_FLOAT32 ? "s" : "d", lay == POAS_COL_MAJOR ? "col" : "row",
           ta == POAS_TRANS ? 'T' : 'N', tb == POAS_TRANS ? 'T' : 'N', (long long)s.m,
           (long long)s.n, (long long)s.k, alpha, beta, (long long)pad);
  int rc = test_gemm_run(ctx, &g);
  int bad = 0;
  if (rc != 0) {
    fprintf(stderr, "  %s: returned %s (%s)\n", what, poas_err_name(rc), poas_error_detail());
    bad = 1;
  } else {
    bad = test_gemm_verify(&g, what);
  }
  test_gemm_free(&g);
  return bad;
}

int gemm_cases_run(const char *devices, int big) {
  poas_options o;
  poas_options_init(&o);
  o.devices = devices;
  o.no_profile = 1;
  poas_context *ctx = NULL;
  int rc = poas_init(&ctx, &o);
  if (rc == POAS_ENODEV) {
    fprintf(stderr, "  skip: no device for '%s': %s\n", devices, poas_error_detail());
    return TEST_SKIP;
  }
  if (rc) {
    fprintf(stderr, "  poas_init(%s): %s: %s\n", devices, poas_err_name(rc), poas_error_detail());
    return 1;
  }
  int failures = 0, cases = 0;
  uint64_t seed = 1;
  for (int dt = 0; dt < 2; dt++)
    for (int lay = 0; lay < 2; lay++)
      for (int t = 0; t < 4; t++) {
        poas_layout L = lay ? POAS_ROW_MAJOR : POAS_COL_MAJOR;
        poas_op ta = (t & 1) ? POAS_TRANS : POAS_NO_TRANS, tb = (t & 2) ? POAS_TRANS : POAS_NO_TRANS;
        for (size_t si = 0; si < sizeof small_shapes / sizeof *small_shapes; si++)
          for (size_t ai = 0; ai < 3; ai++)
            for (size_t bi = 0; bi < 3; bi++) {
              /* Padding on every other case keeps the matrix affordable. */
              int64_t pad = (int64_t)((si + ai + bi) % 2) * 3;
              failures += run_case(ctx, (poas_dtype)dt, L, ta, tb, small_shapes[si], alphas[ai],
                                   betas[bi], pad, seed++);
              cases++;
            }
        if (big)
          for (size_t si = 0; si < sizeof big_shapes / sizeof *big_shapes; si++) {
            failures += run_case(ctx, (poas_dtype)dt, L, ta, tb, big_shapes[si], 1.0, 0.5, 5,
                                 seed++);
            cases++;
          }
      }
  poas_finalize(ctx);
  fprintf(stderr, "  %s: %d cases, %d wrong\n", devices, cases, failures);
  return failures ? 1 : 0;
}
