/* baseline-absent.c: the tables of the baselines this build leaves out.
 * bench/local.am defines BENCH_HAVE_CLBLAST and BENCH_HAVE_CUBLAS from the
 * same conditionals that choose the real files, so exactly one definition
 * of each table is linked. An absent baseline opens as unsupported, which
 * the benchmark reports as a note. */
#include "bench/bench.h"

#include <stdio.h>

#if !BENCH_HAVE_CLBLAST || !BENCH_HAVE_CUBLAS
static int absent_open(void **state, char *desc, size_t cap) {
  (void)state;
  snprintf(desc, cap, "not built into this POAS");
  return BENCH_UNSUPPORTED;
}

static int absent_gemm(void *state, const bench_problem *p, char *why, size_t cap) {
  (void)state, (void)p;
  snprintf(why, cap, "not built into this POAS");
  return BENCH_UNSUPPORTED;
}

static void absent_close(void *state) { (void)state; }

#define BENCH_ABSENT_BASELINE(var, label)                                                       \
  const bench_baseline var = {                                                                \
      .name = label, .open = absent_open, .gemm = absent_gemm, .close = absent_close}
#endif

#if !BENCH_HAVE_CLBLAST
BENCH_ABSENT_BASELINE(bench_baseline_clblast, "clblast");
#endif
#if !BENCH_HAVE_CUBLAS
BENCH_ABSENT_BASELINE(bench_baseline_cublas, "cublas");
#endif
