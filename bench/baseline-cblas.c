/* baseline-cblas.c: OpenBLAS alone through cblas, with every core the
 * process may run on. POAS's cpu device binds OpenBLAS's threads (and the
 * calling thread) to its own cores, and those settings are process-wide, so
 * each run first gives the caller and every worker back the whole mask the
 * process started with. */
#include "config.h"

#include "bench/bench.h"

#include <cblas.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct cblas_state {
  cpu_set_t mask;
  int threads;
} cblas_state;

static int cblas_open(void **state, char *desc, size_t cap) {
  cblas_state *s = malloc(sizeof *s);
  if (!s) {
    snprintf(desc, cap, "out of memory");
    return BENCH_FAILED;
  }
  if (sched_getaffinity(0, sizeof s->mask, &s->mask) != 0) {
    snprintf(desc, cap, "cannot read the process's CPU mask");
    free(s);
    return BENCH_UNSUPPORTED;
  }
  s->threads = CPU_COUNT(&s->mask);
  snprintf(desc, cap, "OpenBLAS %s, %d threads", openblas_get_config(), s->threads);
  *state = s;
  return 0;
}

static void use_all_cores(cblas_state *s) {
  sched_setaffinity(0, sizeof s->mask, &s->mask);
  openblas_set_num_threads(s->threads);
  for (int i = 0; i + 1 < s->threads; i++)
    openblas_setaffinity(i, sizeof s->mask, &s->mask);
}

static int cblas_gemm(void *state, const bench_problem *p, char *why, size_t cap) {
  (void)why, (void)cap;
  use_all_cores(state);
  blasint m = (blasint)p->m, n = (blasint)p->n, k = (blasint)p->k;
  if (p->dtype == POAS_FLOAT64)
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0, p->a, k, p->b, n, 0.0,
                p->c, n);
  else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, p->a, k, p->b, n, 0.0f,
                p->c, n);
  return 0;
}

static void cblas_close(void *state) { free(state); }

const bench_baseline bench_baseline_cblas = {
    .name = "cblas", .open = cblas_open, .gemm = cblas_gemm, .close = cblas_close};
