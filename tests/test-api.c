/* test-api.c: poas_init's selection errors and GEMM argument validation:
 * every bad argument returns its own code, a detail that names it as the
 * caller passed it, and leaves C unchanged, byte for byte; GEMMs on blocks
 * of one array; the details of the other entry points. */
#include "harness.h"
#include "tools/fit-text.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TEST(init_rejects_bad_selections_with_detail) {
  static const struct {
    const char *devices;
    int rc;
    const char *token;
  } bad[] = {
      {"cpu:threads=0", POAS_ESPEC, "threads"},
      {"cpu:speed=3", POAS_ESPEC, "speed"},
      {"sim:rate=fast", POAS_ESPEC, "fast"},
      {"quantum", POAS_ESPEC, "quantum"},
      {"cpu7", POAS_ENODEV, "cpu7"},
      {"sim:memory=-1", POAS_ESPEC, "-1"},
      {"sim:jitter=1", POAS_ESPEC, "jitter (a number in [0, 1))"},
      {"cpu:", POAS_ESPEC, "empty setting in 'cpu:'"},
      {"cpu::threads=1", POAS_ESPEC, "empty setting"},
      {"cpu:threads=1:", POAS_ESPEC, "empty setting"},
      {"sim3", POAS_ESPEC, "this one is sim0"},
      {"sim,sim2", POAS_ESPEC, "this one is sim1"},
      {"cpu0,cpu:threads=1", POAS_ESPEC, "the settings of 'cpu:threads=1' apply to no device"},
      {"sim:profile=#cpu0", POAS_ESPEC, "names no file"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    poas_options o;
    poas_options_init(&o);
    o.devices = bad[i].devices;
    poas_context *ctx = (poas_context *)&o; /* must stay untouched on error */
    CHECK_RC(poas_init(&ctx, &o), bad[i].rc);
    CHECK(ctx == (poas_context *)&o);
    CHECK_MSG(strstr(poas_error_detail(), bad[i].token) != NULL, "'%s' gave '%s'",
              bad[i].devices, poas_error_detail());
  }
  CHECK_RC(poas_init(NULL, NULL), POAS_ENULL);
  return 0;
}

TEST(device_queries) {
  poas_context *ctx = test_open("cpu,sim:rate=2e11");
  CHECK(ctx);
  CHECK(poas_device_count(ctx) == 2);
  poas_device_info info;
  CHECK_OK(poas_device_get(ctx, 0, &info));
  CHECK(strcmp(info.id, "cpu0") == 0 && info.kind == POAS_DEVICE_CPU && info.host_memory);
  CHECK(info.cores >= 1 && info.memory_bytes > 0);
  CHECK_OK(poas_device_get(ctx, 1, &info));
  CHECK(strcmp(info.id, "sim0") == 0 && info.kind == POAS_DEVICE_SIM);
  CHECK_RC(poas_device_get(ctx, 2, &info), POAS_ERANGE);
  CHECK_RC(poas_device_get(ctx, -1, &info), POAS_ERANGE);
  CHECK_RC(poas_device_get(ctx, 0, NULL), POAS_ENULL);
  CHECK_RC(poas_device_count(NULL), POAS_ENULL);
  poas_report r;
  CHECK_RC(poas_last_report(ctx, &r), POAS_ESTATE);
  poas_finalize(ctx);
  poas_finalize(NULL);
  return 0;
}

/* Calls sgemm with one argument spoiled and checks the code and that C is
 * unchanged. */
#define M 8
#define N 6
#define K 5
static float A[M * K], B[K * N], C[M * N], C_saved[M * N];

static int expect(poas_context *ctx, int want, poas_layout lay, poas_op ta, poas_op tb,
                  int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                  int64_t ldb, float *c, int64_t ldc, const char *what) {
  memcpy(C_saved, C, sizeof C);
  int rc = poas_sgemm(ctx, lay, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.5f, c, ldc);
  CHECK_MSG(rc == want, "%s: got %s, expected %s", what, poas_err_name(rc), poas_err_name(want));
  CHECK_MSG(memcmp(C, C_saved, sizeof C) == 0, "%s: C was written", what);
  return 0;
}

TEST(gemm_validation) {
  poas_context *ctx = test_open("cpu");
  CHECK(ctx);
  test_fill(A, POAS_FLOAT32, M * K, 1);
  test_fill(B, POAS_FLOAT32, K * N, 2);
  test_fill(C, POAS_FLOAT32, M * N, 3);
  const poas_layout CM = POAS_COL_MAJOR;
  const poas_op NT = POAS_NO_TRANS;
  int bad = 0;
  bad |= expect(NULL, POAS_ENULL, CM, NT, NT, M, N, K, A, M, B, K, C, M, "null ctx");
  bad |= expect(ctx, POAS_ENULL, CM, NT, NT, M, N, K, NULL, M, B, K, C, M, "null A");
  bad |= expect(ctx, POAS_ENULL, CM, NT, NT, M, N, K, A, M, NULL, K, C, M, "null B");
  bad |= expect(ctx, POAS_ENULL, CM, NT, NT, M, N, K, A, M, B, K, NULL, M, "null C");
  bad |= expect(ctx, POAS_ESIZE, CM, NT, NT, -1, N, K, A, M, B, K, C, M, "m < 0");
  bad |= expect(ctx, POAS_ESIZE, CM, NT, NT, M, -1, K, A, M, B, K, C, M, "n < 0");
  bad |= expect(ctx, POAS_ESIZE, CM, NT, NT, M, N, -1, A, M, B, K, C, M, "k < 0");
  bad |= expect(ctx, POAS_ELD, CM, NT, NT, M, N, K, A, M - 1, B, K, C, M, "lda small");
  bad |= expect(ctx, POAS_ELD, CM, NT, NT, M, N, K, A, M, B, K - 1, C, M, "ldb small");
  bad |= expect(ctx, POAS_ELD, CM, NT, NT, M, N, K, A, M, B, K, C, M - 1, "ldc small");
  bad |= expect(ctx, POAS_ELD, CM, POAS_TRANS, NT, M, N, K, A, K - 1, B, K, C, M, "lda small T");
  bad |= expect(ctx, POAS_ELD, POAS_ROW_MAJOR, NT, NT, M, N, K, A, K - 1, B, N, C, N,
                "lda small row-major");
  bad |= expect(ctx, POAS_ELD, POAS_ROW_MAJOR, NT, NT, M, N, K, A, K, B, N, C, N - 1,
                "ldc small row-major");
  bad |= expect(ctx, POAS_ELAYOUT, (poas_layout)7, NT, NT, M, N, K, A, M, B, K, C, M, "layout");
  bad |= expect(ctx, POAS_EOP, CM, (poas_op)0, NT, M, N, K, A, M, B, K, C, M, "transa");
  bad |= expect(ctx, POAS_EOP, CM, NT, (poas_op)113, M, N, K, A, M, B, K, C, M, "transb");
  bad |= expect(ctx, POAS_EOVERLAP, CM, NT, NT, M, N, K, C, M, B, K, C, M, "C is A");
  bad |= expect(ctx, POAS_EOVERLAP, CM, NT, NT, 2, 2, 2, A, 2, C + 2, 2, C, 2, "C overlaps B");
  poas_finalize(ctx);
  return bad;
}

/* A call that fails with `want`, its detail saying `says`. */
#define CHECK_FAILS(call, want, says)                                                        \
  do {                                                                                      \
    int rc_ = (call);                                                                       \
    CHECK_MSG(rc_ == (want) && strstr(poas_error_detail(), says), "%s: %s '%s', not %s '%s'", \
              #call, poas_err_name(rc_), poas_error_detail(), poas_err_name(want), says);   \
  } while (0)

/* Errors of a row-major call name the arguments the caller passed, though
 * it runs as the column-major C^T = op(B)^T op(A)^T, with A and B, m and n
 * and the transposes swapped. */
TEST(row_major_errors_name_the_callers_arguments) {
  poas_context *ctx = test_open("cpu");
  CHECK(ctx);
  const poas_layout RM = POAS_ROW_MAJOR;
  const poas_op NT = POAS_NO_TRANS, T = POAS_TRANS;
  /* op(A) is 6 x 4 and op(B) 4 x 5: lda >= 4, ldb >= 5, ldc >= 5. */
  CHECK_FAILS(poas_sgemm(ctx, RM, NT, NT, 6, 5, 4, 1, A, 3, B, 5, 0, C, 5), POAS_ELD,
              "gemm: lda=3 is smaller than 4");
  CHECK_FAILS(poas_sgemm(ctx, RM, NT, NT, 6, 5, 4, 1, A, 4, B, 3, 0, C, 5), POAS_ELD,
              "gemm: ldb=3 is smaller than 5");
  CHECK_FAILS(poas_sgemm(ctx, RM, NT, NT, 6, 5, 4, 1, A, 4, B, 5, 0, C, 4), POAS_ELD,
              "gemm: ldc=4 is smaller than 5");
  CHECK_FAILS(poas_sgemm(ctx, RM, T, NT, 6, 5, 4, 1, A, 5, B, 5, 0, C, 5), POAS_ELD,
              "gemm: lda=5 is smaller than 6");
  CHECK_FAILS(poas_sgemm(ctx, RM, NT, NT, 6, 5, 4, 1, NULL, 4, B, 5, 0, C, 5), POAS_ENULL,
              "gemm: A is NULL");
  CHECK_FAILS(poas_sgemm(ctx, RM, NT, NT, 6, 5, 4, 1, A, 4, NULL, 5, 0, C, 5), POAS_ENULL,
              "gemm: B is NULL");
  CHECK_FAILS(poas_sgemm(ctx, RM, NT, NT, 6, 5, 4, 1, C, 4, B, 5, 0, C, 5), POAS_EOVERLAP,
              "gemm: C overlaps A");
  CHECK_FAILS(poas_sgemm(ctx, RM, NT, NT, 6, 5, 4, 1, A, 4, C, 5, 0, C, 5), POAS_EOVERLAP,
              "gemm: C overlaps B");
  CHECK_FAILS(poas_sgemm(ctx, RM, (poas_op)5, NT, 6, 5, 4, 1, A, 4, B, 5, 0, C, 5), POAS_EOP,
              "gemm: unknown transa value 5");
  CHECK_FAILS(poas_sgemm(ctx, RM, NT, (poas_op)6, 6, 5, 4, 1, A, 4, B, 5, 0, C, 5), POAS_EOP,
              "gemm: unknown transb value 6");
  CHECK_FAILS(poas_sgemm(ctx, RM, NT, NT, -1, 5, 4, 1, A, 4, B, 5, 0, C, 5), POAS_ESIZE,
              "(m=-1 n=5 k=4)");
  poas_finalize(ctx);
  return 0;
}

/* Element (i, j) of a matrix whose (0, 0) is element `at` of an array of
 * leading dimension ld, in `layout`. */
static int64_t element(poas_layout layout, int64_t ld, int64_t at, int64_t i, int64_t j) {
  return at + (layout == POAS_COL_MAJOR ? i + j * ld : i * ld + j);
}

/* One array holding A, B and C, and where each starts in it. */
typedef struct in_place {
  const char *what;
  poas_layout layout;
  int64_t ld, size;        /* the array's leading dimension and elements */
  int64_t m, n, k;
  int64_t a, b, c;         /* the matrices' first elements */
  double beta;
} in_place;

/* Runs C = -A B + beta C (dgemm, no transposes) on blocks of one array,
 * through the synchronous call or as a task, and checks C against a
 * reference computed from a copy of the array, every element outside C
 * unchanged, bit for bit. With beta = 0, C is poisoned first. */
static int run_in_place(poas_context *ctx, const in_place *t, int async) {
  double *x = malloc((size_t)t->size * sizeof *x), *x0 = malloc((size_t)t->size * sizeof *x);
  double *ref = calloc((size_t)t->size, sizeof *ref);
  char *in_c = calloc((size_t)t->size, 1);
  CHECK(x && x0 && ref && in_c);
  test_fill(x, POAS_FLOAT64, (size_t)t->size, 7);
  for (int64_t i = 0; i < t->m; i++)
    for (int64_t j = 0; j < t->n; j++) {
      int64_t e = element(t->layout, t->ld, t->c, i, j);
      in_c[e] = 1;
      if (t->beta == 0)
        test_poison(&x[e], POAS_FLOAT64, 1);
    }
  memcpy(x0, x, (size_t)t->size * sizeof *x);
  for (int64_t i = 0; i < t->m; i++)
    for (int64_t j = 0; j < t->n; j++) {
      double sum = 0;
      for (int64_t p = 0; p < t->k; p++)
        sum += x0[element(t->layout, t->ld, t->a, i, p)] *
               x0[element(t->layout, t->ld, t->b, p, j)];
      int64_t e = element(t->layout, t->ld, t->c, i, j);
      ref[e] = -sum + (t->beta != 0 ? t->beta * x0[e] : 0);
    }
  const poas_op NT = POAS_NO_TRANS;
  if (async) {
    poas_task *task;
    CHECK_OK(poas_dgemm_async(ctx, t->layout, NT, NT, t->m, t->n, t->k, -1, x + t->a, t->ld,
                              x + t->b, t->ld, t->beta, x + t->c, t->ld, &task));
    CHECK_OK(poas_task_wait(task));
  } else {
    CHECK_MSG(poas_dgemm(ctx, t->layout, NT, NT, t->m, t->n, t->k, -1, x + t->a, t->ld,
                         x + t->b, t->ld, t->beta, x + t->c, t->ld) == 0,
              "%s: %s", t->what, poas_error_detail());
  }
  int bad = 0;
  for (int64_t e = 0; e < t->size && !bad; e++) {
    if (in_c[e])
      bad = !(fabs(x[e] - ref[e]) <= 1e-12 * (double)(t->k + 1));
    else
      bad = memcmp(&x[e], &x0[e], sizeof *x) != 0;
    if (bad)
      fprintf(stderr, "  %s%s: element %lld is %g, expected %g\n", t->what,
              async ? " (task)" : "", (long long)e, x[e], in_c[e] ? ref[e] : x0[e]);
  }
  free(x);
  free(x0);
  free(ref);
  free(in_c);
  return bad;
}

/* Blocks of one array whose address ranges meet but whose elements do not
 * are accepted and computed right: LAPACK's trailing update (A22 -= A21
 * A12 in an 8 x 8 array) and matrices of interleaved rows (or columns,
 * row-major), in both layouts and both orders. */
TEST(gemm_takes_blocks_of_one_array) {
  poas_context *ctx = test_open("cpu");
  CHECK(ctx);
  const poas_layout CM = POAS_COL_MAJOR, RM = POAS_ROW_MAJOR;
  /* Offsets from block origins: (i, j) of the array is element(layout, ld, 0, i, j). */
  const in_place cases[] = {
      {"LU trailing update", CM, 8, 64, 6, 6, 2, element(CM, 8, 0, 2, 0),
       element(CM, 8, 0, 0, 2), element(CM, 8, 0, 2, 2), 1},
      {"LU trailing update, row-major", RM, 8, 64, 6, 6, 2, element(RM, 8, 0, 2, 0),
       element(RM, 8, 0, 0, 2), element(RM, 8, 0, 2, 2), 1},
      /* A 4 x 8 array: C its rows 0-1, A rows 2-3, B rows 0-2 of columns 4-7. */
      {"C rows 0-1, A rows 2-3", CM, 4, 32, 2, 4, 3, 2, 16, 0, 0},
      {"C rows 2-3, A rows 0-1", CM, 4, 32, 2, 4, 3, 0, 16, 2, 0.5},
      /* An 8 x 4 row-major array: C its columns 0-1, A columns 2-3, B rows 4-5. */
      {"C columns 0-1, A columns 2-3, row-major", RM, 4, 32, 4, 2, 2, 2, 16, 0, 0},
      {"C columns 2-3, A columns 0-1, row-major", RM, 4, 32, 4, 2, 2, 0, 16, 2, 0.5},
      /* B interleaved with C instead: C rows 0-1 of a 4 x 8 array, B rows 2-3. */
      {"C rows 0-1, B rows 2-3", CM, 4, 32, 2, 4, 2, 16, 2, 0, 0},
  };
  int bad = 0;
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    bad |= run_in_place(ctx, &cases[i], 0) | run_in_place(ctx, &cases[i], 1);
  poas_finalize(ctx);
  return bad;
}

/* Overlaps that are real are still refused, in both layouts, including
 * the one the element test must catch past the end of C's column: a
 * matrix whose rows run over into C's next column. */
TEST(gemm_refuses_matrices_that_share_elements) {
  poas_context *ctx = test_open("cpu");
  CHECK(ctx);
  test_fill(C, POAS_FLOAT32, M * N, 3);
  const poas_layout CM = POAS_COL_MAJOR, RM = POAS_ROW_MAJOR;
  const poas_op NT = POAS_NO_TRANS;
  int bad = 0;
  /* C is 2 x 3 in ld 4: elements 0, 1, 4, 5, 8, 9. */
  bad |= expect(ctx, POAS_EOVERLAP, CM, NT, NT, 2, 3, 2, C + 1, 4, B, 2, C, 4,
                "A one row below C");
  bad |= expect(ctx, POAS_EOVERLAP, CM, NT, NT, 2, 3, 2, C + 3, 4, B, 2, C, 4,
                "A's second row is C's next column's first");
  bad |= expect(ctx, POAS_EOVERLAP, CM, NT, NT, 2, 3, 2, A, 2, C + 9, 4, C, 4,
                "B starts at C's last element");
  bad |= expect(ctx, POAS_EOVERLAP, CM, NT, NT, 2, 3, 2, C, 4, B, 2, C + 1, 4,
                "A one row above C");
  /* The same, row-major: C is 3 x 2 in ld 4. */
  bad |= expect(ctx, POAS_EOVERLAP, RM, NT, NT, 3, 2, 2, C + 1, 4, B, 2, C, 4,
                "row-major: A one column right of C");
  bad |= expect(ctx, POAS_EOVERLAP, RM, NT, NT, 3, 2, 2, C + 3, 4, B, 2, C, 4,
                "row-major: A's rows run over into C's next row");
  bad |= expect(ctx, POAS_EOVERLAP, RM, NT, NT, 3, 2, 2, A, 2, C + 8, 4, C, 4,
                "row-major: B starts in C's last row");
  /* Different leading dimensions keep the span test: disjoint elements
   * (C rows 0-1 of ld 4, A every other element from 2 on) are refused. */
  bad |= expect(ctx, POAS_EOVERLAP, CM, NT, NT, 2, 3, 2, C + 2, 8, B, 2, C, 4,
                "different leading dimensions, spans meet");
  poas_finalize(ctx);
  return bad;
}

/* The element test against brute force: random small matrices in one
 * array, in both layouts and with transposes, are refused exactly when C
 * shares an element with A or B (with the same leading dimension), or
 * when their address ranges meet (with different ones). */
TEST(gemm_overlap_matches_brute_force) {
  poas_context *ctx = test_open("cpu");
  CHECK(ctx);
  static double x[64];
  test_fill(x, POAS_FLOAT64, 64, 11);
  uint64_t seed = 12345;
#define NEXT(n) (seed = seed * 6364136223846793005ull + 1442695040888963407ull, (int64_t)((seed >> 33) % (n)))
  int refused = 0, accepted = 0;
  for (int trial = 0; trial < 600; trial++) {
    test_fill(x, POAS_FLOAT64, 64, (uint64_t)trial); /* what earlier trials wrote, afresh */
    poas_layout lay = NEXT(2) ? POAS_COL_MAJOR : POAS_ROW_MAJOR;
    poas_op ta = NEXT(2) ? POAS_TRANS : POAS_NO_TRANS, tb = NEXT(2) ? POAS_TRANS : POAS_NO_TRANS;
    int64_t m = 1 + NEXT(3), n = 1 + NEXT(3), k = 1 + NEXT(3);
    /* As stored: runs of `run` elements, `lines` of them, ld apart. */
    int64_t dims[3][2] = {{ta == POAS_NO_TRANS ? m : k, ta == POAS_NO_TRANS ? k : m},
                          {tb == POAS_NO_TRANS ? k : n, tb == POAS_NO_TRANS ? n : k},
                          {m, n}};
    int64_t run[3], lines[3], ld[3], at[3];
    for (int i = 0; i < 3; i++) {
      int col = lay == POAS_COL_MAJOR;
      run[i] = dims[i][!col], lines[i] = dims[i][col];
      at[i] = NEXT(24);
    }
    ld[2] = run[2] + NEXT(3);
    for (int i = 0; i < 2; i++)
      ld[i] = NEXT(3) && ld[2] >= run[i] ? ld[2] : run[i] + NEXT(3);
    int shares = 0;
    for (int i = 0; i < 2; i++) {
      if (ld[i] != ld[2]) {
        int64_t lo = at[i], hi = at[i] + (lines[i] - 1) * ld[i] + run[i];
        int64_t clo = at[2], chi = at[2] + (lines[2] - 1) * ld[2] + run[2];
        shares |= lo < chi && clo < hi;
        continue;
      }
      for (int64_t r = 0; r < run[i]; r++)
        for (int64_t l = 0; l < lines[i]; l++)
          for (int64_t rc = 0; rc < run[2]; rc++)
            for (int64_t lc = 0; lc < lines[2]; lc++)
              shares |= at[i] + r + l * ld[i] == at[2] + rc + lc * ld[2];
    }
    int rc = poas_dgemm(ctx, lay, ta, tb, m, n, k, 1, x + at[0], ld[0], x + at[1], ld[1], 0,
                        x + at[2], ld[2]);
    CHECK_MSG(rc == (shares ? POAS_EOVERLAP : 0),
              "trial %d: %s %c%c m=%lld n=%lld k=%lld at %lld, %lld, %lld ld %lld, %lld, %lld: "
              "%s (%s)",
              trial, lay == POAS_COL_MAJOR ? "col" : "row", ta == POAS_TRANS ? 'T' : 'N',
              tb == POAS_TRANS ? 'T' : 'N', (long long)m, (long long)n, (long long)k,
              (long long)at[0], (long long)at[1], (long long)at[2], (long long)ld[0],
              (long long)ld[1], (long long)ld[2], poas_err_name(rc), poas_error_detail());
    refused += shares, accepted += !shares;
  }
#undef NEXT
  CHECK_MSG(refused > 50 && accepted > 50, "refused %d, accepted %d", refused, accepted);
  poas_finalize(ctx);
  return 0;
}

/* Every entry point that fails says why in its own words, never with an
 * earlier call's detail. */
TEST(errors_leave_no_stale_detail) {
  poas_context *ctx = test_open("cpu");
  CHECK(ctx);
  const poas_layout CM = POAS_COL_MAJOR;
  const poas_op NT = POAS_NO_TRANS;
  /* Each call below comes after an overlap error. */
#define AFTER_OVERLAP(call, want, says)                                                  \
  CHECK_RC(poas_sgemm(ctx, CM, NT, NT, 2, 2, 2, 1, C, 2, B, 2, 0, C, 2), POAS_EOVERLAP); \
  CHECK_FAILS(call, want, says)
  AFTER_OVERLAP(poas_device_count(NULL), POAS_ENULL, "poas_device_count: ctx is NULL");
  poas_device_info info;
  AFTER_OVERLAP(poas_device_get(ctx, 1, &info), POAS_ERANGE, "device 1 out of range (0 to 0)");
  AFTER_OVERLAP(poas_device_get(ctx, 0, NULL), POAS_ENULL, "poas_device_get: out is NULL");
  poas_report report;
  AFTER_OVERLAP(poas_last_report(ctx, &report), POAS_ESTATE, "no GEMM has run");
  AFTER_OVERLAP(poas_last_report(NULL, &report), POAS_ENULL, "poas_last_report: ctx is NULL");
  AFTER_OVERLAP(poas_profile_get(ctx, NULL), POAS_ENULL, "poas_profile_get: out is NULL");
  AFTER_OVERLAP(poas_default_profile_path(NULL, 10), POAS_ENULL,
                "poas_default_profile_path: buf is NULL");
#undef AFTER_OVERLAP
  /* A call that succeeds leaves no detail either. */
  CHECK(poas_device_count(ctx) == 1 && poas_error_detail()[0] == '\0');
  poas_finalize(ctx);
  return 0;
}

/* What a failing call prints to stderr: the text, in buf. */
static void stderr_of_failing_call(poas_context *ctx, char *buf, size_t cap) {
  test_stderr_capture c = test_stderr_begin();
  float x = 0;
  poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 1, 1, 1, 1, &x, 0, &x, 1, 0, &x,
             1); /* lda 0: refused, which warns where warnings print */
  test_stderr_end(c, buf, cap);
}

/* A cpu context without a profile whose own log level is warnings, its
 * options in *o (which later checks change and open again); NULL if
 * poas_init failed. */
static poas_context *open_warning_cpu(poas_options *o) {
  o->devices = "cpu";
  o->no_profile = 1;
  o->log_level = 1;
  poas_context *ctx = NULL;
  return poas_init(&ctx, o) == 0 ? ctx : NULL;
}

/* A context's log level prints messages while it lives, and gives its
 * level up at poas_finalize (it once stayed, and a failed poas_init left
 * it too): the library is silent again unless asked. */
TEST(a_contexts_log_level_ends_with_it) {
  const char *env = getenv("POAS_LOG");
  if (env && *env && strcmp(env, "0") != 0)
    SKIP("POAS_LOG is set: the library prints anyway");
  char text[1024];
  poas_context *quiet = test_open("cpu");
  CHECK(quiet);
  stderr_of_failing_call(quiet, text, sizeof text);
  CHECK_MSG(text[0] == '\0', "printed '%s'", text);

  poas_options o;
  poas_options_init(&o);
  poas_context *loud = open_warning_cpu(&o);
  CHECK(loud);
  stderr_of_failing_call(loud, text, sizeof text);
  CHECK_MSG(strstr(text, "poas: warning: ") && strstr(text, "lda"), "printed '%s'", text);
  poas_finalize(loud);
  stderr_of_failing_call(quiet, text, sizeof text);
  CHECK_MSG(text[0] == '\0', "after finalize: printed '%s'", text);

  o.devices = "nosuchkind"; /* init fails, and holds no level after */
  test_stderr_capture sink = test_stderr_begin(); /* what the failed init says */
  int rc = poas_init(&loud, &o);
  test_stderr_end(sink, text, sizeof text);
  CHECK(rc == POAS_ESPEC);
  stderr_of_failing_call(quiet, text, sizeof text);
  CHECK_MSG(text[0] == '\0', "after a failed init: printed '%s'", text);
  /* POAS_LOG is read again by each poas_init, not once per process. */
  setenv("POAS_LOG", "1", 1);
  poas_context *heard = test_open("cpu");
  unsetenv("POAS_LOG");
  CHECK(heard);
  stderr_of_failing_call(heard, text, sizeof text);
  CHECK_MSG(strstr(text, "poas: warning: "), "with POAS_LOG=1: printed '%s'", text);
  poas_finalize(heard);
  heard = test_open("cpu");
  CHECK(heard);
  stderr_of_failing_call(heard, text, sizeof text);
  CHECK_MSG(text[0] == '\0', "with POAS_LOG unset again: printed '%s'", text);
  CHECK(poas_log_level() == 0);
  poas_finalize(heard);
  /* poas_log_level says what the library does, by the library's rule for
   * POAS_LOG (a tool that read it with atoi once disagreed), and with the
   * contexts' own levels. */
  static const struct {
    const char *env;
    int level, named; /* named: poas_init says it is no level */
  } levels[] = {{"2", 2, 0}, {" 1", 0, 1}, {"1x", 0, 1}, {".9e1", 3, 0}, {"0", 0, 0}};
  for (size_t i = 0; i < sizeof levels / sizeof *levels; i++) {
    setenv("POAS_LOG", levels[i].env, 1);
    test_stderr_capture c = test_stderr_begin();
    heard = test_open("cpu");
    test_stderr_end(c, text, sizeof text);
    unsetenv("POAS_LOG");
    CHECK(heard);
    CHECK_MSG(!!strstr(text, "is not a level") == levels[i].named,
              "POAS_LOG='%s': init printed '%s'", levels[i].env, text);
    CHECK_MSG(poas_log_level() == levels[i].level, "POAS_LOG='%s': level %d", levels[i].env,
              poas_log_level());
    stderr_of_failing_call(heard, text, sizeof text);
    CHECK_MSG((text[0] != '\0') == (levels[i].level >= 1), "POAS_LOG='%s': printed '%s'",
              levels[i].env, text);
    poas_finalize(heard);
  }
  o.devices = "cpu";
  o.log_level = 2;
  CHECK_OK(poas_init(&loud, &o));
  CHECK(poas_log_level() == 2);
  poas_finalize(loud);
  CHECK(poas_log_level() == 0);
  /* Past 3 is 3, as in POAS_LOG; any negative takes POAS_LOG, as -1 does
   * (poas.h says both). */
  o.log_level = 7;
  CHECK_OK(poas_init(&loud, &o));
  CHECK(poas_log_level() == 3);
  poas_finalize(loud);
  o.log_level = -5;
  CHECK_OK(poas_init(&loud, &o));
  CHECK(poas_log_level() == 0);
  poas_finalize(loud);
  CHECK(poas_log_level() == 0);
  poas_finalize(quiet);
  return 0;
}

/* Settings from the environment that are not what they may be fail
 * poas_init, naming the variable, as an unknown POAS_SCHED does:
 * POAS_ADAPT=off once left learning on, and a malformed POAS_FAULT failed
 * only the first GEMM. A POAS_LOG that is no level cannot fail a program
 * over its messages: the library stays silent and says so, once. */
TEST(malformed_settings_are_named_at_init) {
  static const struct {
    const char *var, *value, *says;
  } bad[] = {{"POAS_ADAPT", "off", "POAS_ADAPT='off'"},
             {"POAS_ADAPT", " 0", "POAS_ADAPT=' 0'"},
             {"POAS_FAULT", "sim0", "bad entry 'sim0'"},
             {"POAS_FAULT", "sim0:after=x", "bad entry 'sim0:after=x'"},
             {"POAS_FAULT", "sim0:after=-1", "bad entry 'sim0:after=-1'"},
             {"POAS_FAULT", ":after=1", "bad entry ':after=1'"},
             {"POAS_FAULT", "sim0:after=1,sim1", "bad entry 'sim1'"},
             {"POAS_SCHED", "fastest", "'fastest' in POAS_SCHED"}};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    setenv(bad[i].var, bad[i].value, 1);
    poas_context *ctx = NULL;
    poas_options o;
    poas_options_init(&o);
    o.devices = "sim";
    int rc = poas_init(&ctx, &o);
    unsetenv(bad[i].var);
    CHECK_MSG(rc == POAS_EINVAL && !ctx && strstr(poas_error_detail(), bad[i].says),
              "%s='%s': %s (%s)", bad[i].var, bad[i].value, poas_err_name(rc),
              poas_error_detail());
  }
  /* The same policy passed in the options is named as the program's. */
  {
    poas_context *ctx = NULL;
    poas_options o;
    poas_options_init(&o);
    o.devices = "sim";
    o.sched = "fastest";
    CHECK_FAILS(poas_init(&ctx, &o), POAS_EINVAL, "'fastest' in poas_options.sched");
    CHECK(!ctx);
  }
  /* What they may be. */
  static const char *const good[][2] = {{"POAS_ADAPT", "0"}, {"POAS_ADAPT", "1"},
                                        {"POAS_ADAPT", ""},  {"POAS_FAULT", "sim0:after=3"},
                                        {"POAS_FAULT", "sim7:after=0,sim0:after=2"}};
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
    setenv(good[i][0], good[i][1], 1);
    poas_context *ctx = test_open("sim");
    unsetenv(good[i][0]);
    CHECK_MSG(ctx, "%s='%s': %s", good[i][0], good[i][1], poas_error_detail());
    poas_finalize(ctx);
  }
  const char *env = getenv("POAS_LOG");
  char *saved = env ? strdup(env) : NULL;
  char text[1024];
  for (int round = 0; round < 2; round++) {
    setenv("POAS_LOG", "debug", 1);
    test_stderr_capture c = test_stderr_begin();
    poas_context *ctx = test_open("sim");
    test_stderr_end(c, text, sizeof text);
    CHECK(ctx);
    CHECK(poas_log_level() == 0);
    poas_finalize(ctx);
    if (round == 0)
      CHECK_MSG(strstr(text, "POAS_LOG='debug' is not a level") && strstr(text, "stays off"),
                "POAS_LOG=debug: printed '%s'", text);
    else /* once per value */
      CHECK_MSG(!strstr(text, "POAS_LOG"), "POAS_LOG=debug again: printed '%s'", text);
  }
  if (saved)
    setenv("POAS_LOG", saved, 1);
  else
    unsetenv("POAS_LOG");
  free(saved);
  return 0;
}

/* What a log handler was given. */
typedef struct heard_log {
  int calls, level;
  char last[512];
} heard_log;

static void hear_log(void *user, int level, const char *message) {
  heard_log *h = user;
  h->calls++;
  h->level = level;
  snprintf(h->last, sizeof h->last, "%s", message);
}

/* A program's log handler takes the messages stderr would have had, bare
 * (no "poas: " or tag), the "is not a level" note among them; the level
 * still decides which are made; NULL gives them back to stderr. An MPI
 * program gathers its ranks' messages through one (poas-mpi-bench). */
TEST(a_log_handler_takes_the_messages) {
  const char *env = getenv("POAS_LOG");
  if (env && *env && strcmp(env, "0") != 0)
    SKIP("POAS_LOG is set: the library prints anyway");
  heard_log h = {0};
  char text[1024];
  poas_set_log_handler(hear_log, &h);
  poas_context *quiet = test_open("cpu");
  CHECK(quiet);
  stderr_of_failing_call(quiet, text, sizeof text);
  CHECK_MSG(h.calls == 0 && text[0] == '\0', "silent level: %d calls, printed '%s'", h.calls,
            text);
  poas_options o;
  poas_options_init(&o);
  poas_context *loud = open_warning_cpu(&o);
  CHECK(loud);
  int before = h.calls;
  stderr_of_failing_call(loud, text, sizeof text);
  CHECK_MSG(text[0] == '\0', "with a handler: printed '%s'", text);
  CHECK_MSG(h.calls == before + 1 && h.level == 1 && strstr(h.last, "lda") &&
                strcmp(h.last, poas_error_detail()) == 0 && !strstr(h.last, "poas:") &&
                !strchr(h.last, '\n'),
            "heard %d calls, level %d: '%s'", h.calls - before, h.level, h.last);
  setenv("POAS_LOG", "loud", 1);
  poas_context *told = test_open("sim");
  unsetenv("POAS_LOG");
  CHECK(told);
  CHECK_MSG(h.level == 1 && strstr(h.last, "POAS_LOG='loud' is not a level"), "heard '%s'",
            h.last);
  poas_finalize(told);
  poas_set_log_handler(NULL, &h);
  before = h.calls;
  stderr_of_failing_call(loud, text, sizeof text);
  CHECK_MSG(h.calls == before && strstr(text, "poas: warning: ") && strstr(text, "lda"),
            "handler gone: %d calls, printed '%s'", h.calls - before, text);
  poas_finalize(loud);
  poas_finalize(quiet);
  return 0;
}

/* An empty string in an option is no value, as an empty environment
 * variable is: the environment's is taken, else the default. "" once
 * refused the devices and failed poas_init for its trace. */
TEST(empty_options_take_the_environment) {
  setenv("POAS_DEVICES", "sim:rate=2e11", 1);
  setenv("POAS_PROFILE", test_src_path("tests/profiles/good-sim.json"), 1);
  setenv("POAS_SCHED", "static", 1);
  unsetenv("POAS_TRACE");
  poas_options o;
  poas_options_init(&o);
  o.devices = o.profile = o.sched = o.trace = "";
  poas_context *ctx = NULL;
  int rc = poas_init(&ctx, &o);
  unsetenv("POAS_DEVICES");
  unsetenv("POAS_PROFILE");
  unsetenv("POAS_SCHED");
  CHECK_MSG(rc == 0, "%s: %s", poas_err_name(rc), poas_error_detail());
  poas_device_info info;
  CHECK(poas_device_count(ctx) == 1 && poas_device_get(ctx, 0, &info) == 0);
  CHECK(strcmp(info.id, "sim0") == 0);
  poas_profile_info *pi = malloc(sizeof *pi);
  CHECK(pi && poas_profile_get(ctx, pi) == 0);
  CHECK_MSG(strstr(pi->path, "good-sim.json"), "profile '%s'", pi->path);
  free(pi);
  static float a[16], b[16], c[16];
  CHECK_OK(poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 4, 4, 4, 1, a, 4, b, 4, 0,
                      c, 4));
  poas_report r;
  CHECK_OK(poas_last_report(ctx, &r));
  CHECK_MSG(strcmp(r.policy, "static") == 0, "policy %s", r.policy);
  poas_finalize(ctx);
  return 0;
}

/* A GEMM that fails leaves no report, where the one before it, kept, was
 * once taken for its own (an audit read a 64^3 report after a failed
 * 32 x 16 x 8). */
TEST(a_failed_gemm_leaves_no_report) {
  poas_context *ctx = test_open("sim");
  CHECK(ctx);
  static float a[64 * 64], b[64 * 64], c[64 * 64];
  poas_report r;
  CHECK_OK(poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 64, 64, 64, 1, a, 64, b,
                      64, 0, c, 64));
  CHECK_OK(poas_last_report(ctx, &r));
  CHECK(r.m == 64 && r.faults == 0);
  setenv("POAS_FAULT", "sim0:after=0", 1);
  int rc = poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 32, 16, 8, 1, a, 32, b, 8,
                      0, c, 32);
  unsetenv("POAS_FAULT");
  CHECK_MSG(rc < 0, "the only device failed, and the GEMM returned %d", rc);
  CHECK_FAILS(poas_last_report(ctx, &r), POAS_ESTATE, "the last one failed");
  /* Nor does one whose arguments were refused. */
  CHECK_OK(poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 64, 64, 64, 1, a, 64, b,
                      64, 0, c, 64));
  CHECK_RC(poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 64, 64, 64, 1, a, 63, b,
                      64, 0, c, 64),
           POAS_ELD);
  CHECK_RC(poas_last_report(ctx, &r), POAS_ESTATE);
  /* An asynchronous call refused never runs, and leaves the report as it
   * was: that of the GEMM before it, whether that one's task had ended
   * then or not. It was once cleared, then set again or not by a task
   * still running, so that the same calls gave 0 or POAS_ESTATE by how
   * fast the task went. */
  CHECK_OK(poas_sgemm_async(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 48, 64, 64, 1, a,
                            48, b, 64, 0, c, 48, NULL));
  CHECK_RC(poas_sgemm_async(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 64, 64, 64, 1, a,
                            63, b, 64, 0, c, 64, NULL),
           POAS_ELD);
  CHECK_OK(poas_wait_all(ctx));
  CHECK_OK(poas_last_report(ctx, &r));
  CHECK(r.m == 48);
  CHECK_RC(poas_sgemm_async(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 64, 64, 64, 1, a,
                            63, b, 64, 0, c, 64, NULL),
           POAS_ELD);
  CHECK_OK(poas_last_report(ctx, &r));
  CHECK(r.m == 48);
  poas_finalize(ctx);
  return 0;
}

/* poas_predict_gemm refuses the sizes the GEMM calls and poas_plan_gemm
 * refuse, with the same detail, where it once timed them (1.4e46 s). */
TEST(predict_refuses_sizes_that_overflow) {
  poas_context *ctx = test_open("cpu");
  CHECK(ctx);
  const poas_op NT = POAS_NO_TRANS;
  double s = -1;
  CHECK_FAILS(poas_predict_gemm(ctx, 0, POAS_FLOAT32, NT, NT, INT64_MAX, INT64_MAX, INT64_MAX, &s),
              POAS_EINVAL, "poas_predict_gemm: sizes too large");
  CHECK_FAILS(poas_predict_gemm(ctx, 0, POAS_FLOAT64, NT, NT, INT64_MAX / 2, 2, 0, &s),
              POAS_EINVAL, "C (m x n)");
  CHECK(s == -1);
  CHECK_OK(poas_predict_gemm(ctx, 0, POAS_FLOAT64, NT, NT, 1 << 20, 1 << 20, 1 << 20, &s));
  CHECK(s > 0);
  /* A plan names a bad layout before bad sizes, in its own words. */
  poas_plan plan;
  CHECK_FAILS(poas_plan_gemm(ctx, POAS_FLOAT32, (poas_layout)7, NT, NT, -1, 2, 2, &plan),
              POAS_ELAYOUT, "plan: unknown layout value 7");
  poas_finalize(ctx);
  return 0;
}

/* poas_calibrate refuses a device named twice, and an empty entry, as
 * poas_init does, before measuring anything. */
TEST(calibrate_refuses_a_device_list_poas_init_would) {
  poas_context *ctx = test_open("sim,sim");
  CHECK(ctx);
  poas_calibrate_options o;
  poas_calibrate_options_init(&o);
  o.quick = 1;
  o.devices = "sim0,sim1,sim0";
  CHECK_FAILS(poas_calibrate(ctx, &o, NULL), POAS_ESPEC, "device 'sim0' selected twice");
  o.devices = "sim1, sim1";
  CHECK_FAILS(poas_calibrate(ctx, &o, NULL), POAS_ESPEC, "device 'sim1' selected twice");
  /* Empty entries, as poas_init refuses them; "sim0 sim1" is no id. */
  const char *empty[] = {"sim0,", ",sim0", "sim0,,sim1", " , ", ""};
  for (size_t i = 0; i < sizeof empty / sizeof *empty; i++) {
    o.devices = empty[i];
    CHECK_FAILS(poas_calibrate(ctx, &o, NULL), POAS_ESPEC, "an empty entry in the device list");
  }
  o.devices = "sim0 sim1";
  CHECK_FAILS(poas_calibrate(ctx, &o, NULL), POAS_EINVAL, "no device 'sim0 sim1'");
  poas_finalize(ctx);
  return 0;
}

/* A trace file that cannot be written fails poas_init, naming it and why;
 * one that fails later (a full disk: /dev/full) does not fail the run,
 * whose result is in C. */
TEST(trace_that_cannot_be_written) {
  poas_options o;
  poas_options_init(&o);
  o.devices = "cpu";
  o.no_profile = 1;
  o.trace = "/nonexistent-poas-folder/trace.json";
  poas_context *ctx = NULL;
  CHECK_FAILS(poas_init(&ctx, &o), POAS_EIO,
              "trace /nonexistent-poas-folder/trace.json: No such file or directory");
  CHECK(ctx == NULL);
  const char *dir = test_tmp_path("");
  CHECK(dir);
  o.trace = dir;
  CHECK_FAILS(poas_init(&ctx, &o), POAS_EIO, "Is a directory");
  /* A file that may be created is not left behind by the check. */
  const char *fresh = test_tmp_path("fresh-trace.json");
  CHECK(fresh);
  o.trace = fresh;
  CHECK_OK(poas_init(&ctx, &o));
  FILE *f = fopen(fresh, "r");
  CHECK_MSG(f == NULL, "%s was left behind", fresh);
  poas_finalize(ctx);
  ctx = NULL;
  f = fopen("/dev/full", "w");
  if (!f)
    SKIP("no /dev/full");
  fclose(f);
  o.trace = "/dev/full";
  CHECK_OK(poas_init(&ctx, &o));
  test_fill(A, POAS_FLOAT32, M * K, 1);
  test_fill(B, POAS_FLOAT32, K * N, 2);
  for (int run = 0; run < 2; run++) {
    test_poison(C, POAS_FLOAT32, M * N);
    CHECK_MSG(poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, M, N, K, 1, A, M, B, K,
                         0, C, M) == 0,
              "run %d: %s", run, poas_error_detail());
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        double want = 0;
        for (int p = 0; p < K; p++)
          want += (double)A[i + p * M] * (double)B[p + j * K];
        CHECK_MSG(fabs(C[i + j * M] - want) <= 1e-5, "run %d: C(%d, %d) = %g, expected %g", run,
                  i, j, C[i + j * M], want);
      }
  }
  poas_report r;
  CHECK_OK(poas_last_report(ctx, &r));
  CHECK(r.m == M && r.n == N && r.k == K);
  poas_finalize(ctx);
  return 0;
}

/* Sizes whose matrices hold more bytes than int64 counts are refused
 * before anything is planned or touched, by every GEMM entry, with the
 * sizes in the detail. */
TEST(gemm_refuses_sizes_that_overflow) {
  poas_context *ctx = test_open("cpu");
  CHECK(ctx);
  test_fill(C, POAS_FLOAT32, M * N, 3);
  const poas_layout CM = POAS_COL_MAJOR, RM = POAS_ROW_MAJOR;
  const poas_op NT = POAS_NO_TRANS;
  const int64_t big = INT64_MAX, half = INT64_MAX / 2;
  int bad = 0;
  bad |= expect(ctx, POAS_EINVAL, CM, NT, NT, big, 1, 1, A, big, B, 1, C, big, "m huge");
  bad |= expect(ctx, POAS_EINVAL, RM, NT, NT, 1, big, 1, A, 1, B, big, C, big, "n huge, RM");
  bad |= expect(ctx, POAS_EINVAL, CM, NT, NT, 1, 1, big, A, 1, B, big, C, 1, "k huge");
  bad |= expect(ctx, POAS_EINVAL, CM, NT, NT, half, 2, 0, A, half, B, 1, C, half,
                "C's bytes overflow, A and B empty");
  if (bad)
    return bad;
  CHECK_MSG(strstr(poas_error_detail(), "m=4611686018427387903 n=2 k=0") &&
                strstr(poas_error_detail(), "C (m x n)"),
            "'%s'", poas_error_detail());
  CHECK_RC(poas_dgemm(ctx, CM, NT, NT, big / 4, 1, 1, 1, (const double *)A, big / 4,
                      (const double *)B, 1, 0, (double *)C, big / 4),
           POAS_EINVAL);
  poas_task *task = NULL;
  CHECK_RC(poas_sgemm_async(ctx, RM, NT, NT, big, 1, 1, 1, A, 1, B, 1, 0, C, 1, &task),
           POAS_EINVAL);
  CHECK(task == NULL);
  /* A leading dimension whose lines' bytes overflow, in either layout and
   * for each matrix: the same code, with the one named. */
  CHECK_FAILS(poas_sgemm(ctx, CM, NT, NT, 1, 2, 1, 1, A, 1, B, 1, 0, C, big / 4), POAS_EINVAL,
              "C's extent (ldc=");
  CHECK_FAILS(poas_sgemm(ctx, RM, NT, NT, 2, 1, 1, 1, A, big / 8, B, 1, 0, C, 1), POAS_EINVAL,
              "A's extent (lda=");
  poas_finalize(ctx);
  return 0;
}

/* A call that a device's memory would cut into more tiles than a run can
 * hold is refused before it runs. Found by fuzz-gemm: a row-major 3 x
 * 2.2e17 dgemm with k = 0 on a sim (16 GiB, and no host memory touched)
 * was planned in 3e8 tiles, and its run's graph grew past 3.6 GB; a
 * 15 x 1e12 one spent 30 s ordering its thousands of tiles. */
TEST(gemm_refuses_runs_of_too_many_tiles) {
  poas_context *ctx = test_open("sim");
  CHECK(ctx);
  const int64_t n = 217939697299555337;
  test_fill(C, POAS_FLOAT32, M * N, 3);
  memcpy(C_saved, C, sizeof C);
  CHECK_FAILS(poas_dgemm(ctx, POAS_ROW_MAJOR, POAS_TRANS, POAS_TRANS, 3, n, 0, -0.0,
                         (const double *)A, 3, (const double *)B, 1, 1e-30, (double *)C, n),
              POAS_ETOOBIG, "tiles, past the 1024 a run holds");
  CHECK(memcmp(C, C_saved, sizeof C) == 0);
  CHECK_FAILS(poas_dgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 15, 1043442171904, 0,
                         1, (const double *)A, 15, (const double *)B, 1, 1, (double *)C, 15),
              POAS_ETOOBIG, "tiles, past the 1024 a run holds");
  poas_report r;
  CHECK_RC(poas_last_report(ctx, &r), POAS_ESTATE);
  poas_finalize(ctx);
  return 0;
}

/* BLAS quick returns: with alpha = 0 A and B are not read and may be NULL;
 * with m = 0 nothing is touched. */
TEST(gemm_quick_returns) {
  poas_context *ctx = test_open("cpu");
  CHECK(ctx);
  test_fill(C, POAS_FLOAT32, M * N, 3);
  memcpy(C_saved, C, sizeof C);
  CHECK_OK(poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 0, N, K, 1, NULL, 1,
                      NULL, K, 0, NULL, 1));
  CHECK_OK(poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, M, N, K, 0, NULL, M,
                      NULL, K, 2, C, M));
  for (int i = 0; i < M * N; i++)
    CHECK(C[i] == 2 * C_saved[i]);
  /* The report is the last call's: an empty one reports itself, with no
   * devices and no time, not the call before it. */
  poas_report r;
  CHECK_OK(poas_last_report(ctx, &r));
  CHECK(r.dtype == POAS_FLOAT32 && r.m == M && r.ndevices > 0);
  CHECK_OK(poas_dgemm(ctx, POAS_ROW_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 5, 0, 3, 1, NULL, 3, NULL,
                      1, 0, NULL, 1));
  CHECK_OK(poas_last_report(ctx, &r));
  CHECK(r.dtype == POAS_FLOAT64 && r.m == 5 && r.n == 0 && r.k == 3 && r.ndevices == 0 &&
        r.measured_s == 0 && r.gflops == 0);
  poas_finalize(ctx);
  return 0;
}

/* With k = 0, C = beta C whatever alpha, as in BLAS: an infinite or NaN
 * alpha times the empty sum made every element NaN, on the cpu device
 * (OpenBLAS) as on opencl0 (CLBlast). A and B are not read. */
TEST(gemm_with_no_depth_leaves_alpha_out) {
  poas_context *ctx = test_open("cpu");
  CHECK(ctx);
  static const double alphas[] = {INFINITY, -INFINITY, NAN};
  static const double betas[] = {0, 0.5};
  static double d[M * N];
  for (int ai = 0; ai < 3; ai++)
    for (int bi = 0; bi < 2; bi++) {
      double alpha = alphas[ai], beta = betas[bi];
      for (int i = 0; i < M * N; i++)
        C[i] = beta == 0 ? NAN : (float)(i % 7), d[i] = beta == 0 ? NAN : (double)(i % 7);
      CHECK_OK(poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, M, N, 0,
                          (float)alpha, NULL, M, NULL, 1, (float)beta, C, M));
      CHECK_OK(poas_dgemm(ctx, POAS_ROW_MAJOR, POAS_TRANS, POAS_NO_TRANS, M, N, 0, alpha, NULL,
                          M, NULL, N, beta, d, N));
      for (int i = 0; i < M * N; i++) {
        double want = beta * (i % 7);
        CHECK_MSG(C[i] == (float)want && d[i] == want,
                  "alpha %g beta %g: C[%d] = %g (s), %g (d), expected %g", alpha, beta, i, C[i],
                  d[i], want);
      }
    }
  poas_finalize(ctx);
  return 0;
}

/* Simulated devices in virtual time run a plan as it was planned: a split
 * through the engine is charged the engine's cost of a run, as the plan
 * charges it (without it, a 512^3 sgemm on two sims ran 30% under its
 * prediction, every time). Virtual time is deterministic: no timing. */
TEST(simulated_split_runs_as_planned) {
  poas_context *ctx = test_open("sim,sim");
  CHECK(ctx);
  enum { S = 512 };
  float *a = calloc((size_t)S * S, sizeof *a), *b = calloc((size_t)S * S, sizeof *b),
        *c = calloc((size_t)S * S, sizeof *c);
  CHECK(a && b && c);
  CHECK_OK(poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, S, S, S, 1, a, S, b, S,
                      0, c, S));
  poas_report r;
  CHECK_OK(poas_last_report(ctx, &r));
  CHECK(r.virtual_time);
  int working = 0;
  for (int i = 0; i < r.ndevices; i++)
    if (r.dev[i].share > 0) {
      working++;
      double err = (r.dev[i].predicted_s - r.dev[i].measured_s) / r.dev[i].measured_s;
      CHECK_MSG(fabs(err) < 0.05, "%s: predicted %g s, ran %g s", r.dev[i].id,
                r.dev[i].predicted_s, r.dev[i].measured_s);
    }
  CHECK_MSG(working == 2, "%d sims given work", working);
  free(a);
  free(b);
  free(c);
  poas_finalize(ctx);
  return 0;
}

/* What one of poas-calibrate's warnings writes for `fit`; the caller
 * frees it. */
static char *warning_text(void (*warn)(FILE *, const char *, const poas_device_fit *),
                          const poas_device_fit *fit) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f)
    return NULL;
  warn(f, "poas-calibrate: ", fit);
  fclose(f);
  return buf;
}

/* What tool_handoff_warning writes for a device fit with these readings. */
static char *handoff_text(double start, double end, int timings, int slow) {
  poas_device_fit fit = {.id = "cpu0", .calibrated = 1, .handoff_start = start,
                         .handoff_end = end, .handoff_timings = timings,
                         .handoff_slow_timings = slow,
                         .handoff_extra = {timings == 400 && slow >= 250 ? 1e-9 : 0,
                                           timings == 400 && slow == 400 ? 1.5e-9 : 0}};
  return warning_text(tool_handoff_warning, &fit);
}

/* poas-calibrate says when the host handed work between a device's
 * threads slowly during its calibration, which way it changed, and what
 * to do; nothing when hand-offs were quick or not measured. */
TEST(calibration_says_when_thread_handoffs_were_slow) {
  static const struct {
    double start, end;
    int timings, slow; /* the GEMM sweep's probed timings (0: not probed) */
    const char *says;  /* NULL: nothing */
    const char *fits;
  } cases[] = {
      {0, 0, 0, 0, NULL, NULL},
      {0.85, 0.9, 0, 0, NULL, NULL},
      {0.85, 2.9, 0, 0, "quick at the start of its calibration and slow at the end",
       "mix the two states"},
      {2.8, 0.9, 0, 0, "slow at the start of its calibration and quick at the end",
       "mix the two states"},
      {2.8, 2.9, 0, 0, "slow throughout its calibration", "fit that slow state"},
      {0.9, 0, 0, 0, NULL, NULL},
      /* Profiles since the sweep probes the state and fits one. */
      {0.85, 0.9, 400, 0, NULL, NULL},
      {0.85, 0.9, 400, 48,
       "quick at the start of its calibration and at the end, and slow in 48 of its GEMM "
       "sweep's 400 timings",
       "fit the quick state, which most of them met"},
      {0.85, 2.9, 400, 250,
       "slow in 250 of its GEMM sweep's 400 timings (a thin sgemm on all of them took 0.85x its "
       "time on one at the start, 2.90x at the end: another process or a VM's host held a core "
       "back); its models fit the slow state, which most of them met, and calls on several "
       "threads, thin ones most, run off them when that changes (the slow state adds 1 ns per "
       "element of B to sgemm; plans that learn from runs follow the host into the other "
       "state, at the strength the runs show)",
       "fit the slow state, which most of them met"},
      {2.8, 2.9, 400, 400,
       "slow throughout its calibration, in all 400 of its GEMM sweep's timings (a thin sgemm on "
       "all of them took 2.80x its time on one at the start, 2.90x at the end: another process "
       "or a VM's host held a core back); its models fit the slow state, which most of them met, "
       "and calls on several threads, thin ones most, run off them when that changes (the slow "
       "state adds 1 ns per element of B to sgemm and 1.5 to dgemm; plans",
       "fit the slow state, which most of them met"},
      {2.8, 2.9, 400, 100, "slow at the start of its calibration and at the end",
       "fit the quick state, which most of them met"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *text = handoff_text(cases[i].start, cases[i].end, cases[i].timings, cases[i].slow);
    CHECK(text);
    if (cases[i].says) {
      CHECK_MSG(strstr(text, cases[i].says) && strstr(text, "poas-calibrate: cpu0: ") == text &&
                    strstr(text, "cpu:threads=1") && strstr(text, cases[i].fits),
                "%g, %g, %d of %d: %s", cases[i].start, cases[i].end, cases[i].slow,
                cases[i].timings, text);
    } else {
      CHECK_MSG(text[0] == '\0', "%g, %g: %s", cases[i].start, cases[i].end, text);
    }
    free(text);
  }
  return 0;
}

/* What tool_noise_warnings writes for a device fit timed in `passes` of 5
 * passes, with its thin-block probes skipped or not. */
static char *time_text(int passes, int thin_skipped) {
  poas_device_fit fit = {.id = "opencl0", .calibrated = 1, .sweep_passes = passes,
                         .sweep_planned = 5, .thin_skipped = thin_skipped};
  return warning_text(tool_noise_warnings, &fit);
}

/* poas-calibrate says what a calibration short of its time left out: sweep
 * passes, the thin-block probes, or both; nothing when it left out none. */
TEST(calibration_says_what_it_cut_for_time) {
  static const struct {
    int passes, thin_skipped;
    const char *says; /* NULL: nothing */
  } cases[] = {
      {5, 0, NULL},
      {0, 0, NULL},
      {3, 0, "opencl0: its GEMM samples were timed in 3 passes, not 5, to keep"},
      {5, 1, "opencl0: its thin-block probes were left out to keep"},
      {3, 1, "timed in 3 passes, not 5, and its thin-block probes were left out, to keep"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *text = time_text(cases[i].passes, cases[i].thin_skipped);
    CHECK(text);
    if (cases[i].says)
      CHECK_MSG(strstr(text, cases[i].says) && strstr(text, "poas-calibrate: ") == text &&
                    strstr(text, "calibrate again when it is quiet"),
                "%d, %d: %s", cases[i].passes, cases[i].thin_skipped, text);
    else
      CHECK_MSG(text[0] == '\0', "%d, %d: %s", cases[i].passes, cases[i].thin_skipped, text);
    free(text);
  }
  return 0;
}

/* poas-calibrate says when the runs that timed a device's fixed cost were
 * spread as on a loaded machine (cpu0 on the 2-core CI VM with a core
 * spinning: 1.8 ms), with the costs it kept; nothing at a quiet VM's
 * spread (PoCL's 25 us), or where they were not measured. */
TEST(calibration_says_when_its_runs_saw_a_busy_machine) {
  static const struct {
    double spread;
    const char *says; /* NULL: nothing */
  } cases[] = {
      {0, NULL},
      {25e-6, NULL},
      {1.825e-3, "cpu0: half the runs that timed its fixed cost took 1.82 ms or more longer "
                 "than its quicker ones, whose cost the profile keeps (8 us a run, 210 us more "
                 "through the engine): the machine was busy, and its other figures are a loaded "
                 "machine's; calibrate again when it is quiet\n"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    poas_device_fit fit = {.id = "cpu0", .calibrated = 1, .dispatch_s = 8e-6, .engine_s = 210e-6,
                           .run_cost_spread_s = cases[i].spread};
    char *text = warning_text(tool_noise_warnings, &fit);
    CHECK(text);
    if (cases[i].says)
      CHECK_MSG(strstr(text, "poas-calibrate: ") == text && strstr(text, cases[i].says),
                "%g: %s", cases[i].spread, text);
    else
      CHECK_MSG(text[0] == '\0', "%g: %s", cases[i].spread, text);
    free(text);
  }
  return 0;
}

/* poas-calibrate's "took" line names the seconds spent building kernels
 * and the devices that spent them, when they reach a second. */
TEST(calibration_says_how_long_building_kernels_took) {
  poas_calibration_result *r = calloc(1, sizeof *r);
  CHECK(r);
  r->ndevices = 2;
  snprintf(r->dev[0].id, sizeof r->dev[0].id, "cpu0");
  snprintf(r->dev[1].id, sizeof r->dev[1].id, "opencl0");
  r->seconds = 52.74;
  r->dev[0].build_s = 0.02;
  char text[512];
  tool_took_text(r, text, sizeof text);
  CHECK_MSG(strcmp(text, "took 52.7 s") == 0, "%s", text);
  r->dev[1].build_s = 26.08;
  tool_took_text(r, text, sizeof text);
  static const char want[] =
      "took 52.7 s (26.1 s of it building kernels: opencl0 26.1 s; a first run";
  CHECK_MSG(strncmp(text, want, sizeof want - 1) == 0 && text[strlen(text) - 1] == ')', "%s", text);
  r->dev[0].build_s = 3.0;
  tool_took_text(r, text, sizeof text);
  CHECK_MSG(strstr(text, "(29.1 s of it building kernels: cpu0 3.0 s, opencl0 26.1 s; "), "%s",
            text);
  char tiny[20];
  tool_took_text(r, tiny, sizeof tiny); /* truncated, still a string */
  CHECK_MSG(strlen(tiny) < sizeof tiny && strncmp(tiny, "took 52.7 s", 11) == 0, "%s", tiny);
  free(r);
  return 0;
}

TEST_MAIN(TEST_ENTRY(init_rejects_bad_selections_with_detail),
          TEST_ENTRY(malformed_settings_are_named_at_init),
          TEST_ENTRY(empty_options_take_the_environment),
          TEST_ENTRY(a_failed_gemm_leaves_no_report), TEST_ENTRY(a_contexts_log_level_ends_with_it),
          TEST_ENTRY(a_log_handler_takes_the_messages),
          TEST_ENTRY(device_queries), TEST_ENTRY(simulated_split_runs_as_planned),
          TEST_ENTRY(gemm_validation), TEST_ENTRY(row_major_errors_name_the_callers_arguments),
          TEST_ENTRY(gemm_takes_blocks_of_one_array),
          TEST_ENTRY(gemm_refuses_matrices_that_share_elements),
          TEST_ENTRY(gemm_overlap_matches_brute_force), TEST_ENTRY(errors_leave_no_stale_detail),
          TEST_ENTRY(predict_refuses_sizes_that_overflow),
          TEST_ENTRY(calibrate_refuses_a_device_list_poas_init_would),
          TEST_ENTRY(trace_that_cannot_be_written), TEST_ENTRY(gemm_refuses_sizes_that_overflow),
          TEST_ENTRY(gemm_refuses_runs_of_too_many_tiles),
          TEST_ENTRY(gemm_quick_returns), TEST_ENTRY(gemm_with_no_depth_leaves_alpha_out),
          TEST_ENTRY(calibration_says_when_thread_handoffs_were_slow),
          TEST_ENTRY(calibration_says_what_it_cut_for_time),
          TEST_ENTRY(calibration_says_when_its_runs_saw_a_busy_machine),
          TEST_ENTRY(calibration_says_how_long_building_kernels_took))
