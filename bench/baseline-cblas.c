/* baseline-cblas.c: OpenBLAS alone through cblas, with every core the
 * process may run on. POAS's cpu device binds OpenBLAS's threads (and the
 * calling thread) to its own cores, and those settings are process-wide, so
 * each run first gives the caller and every worker back the whole mask the
 * process started with. Also the probe of how quickly the host hands work
 * between OpenBLAS's threads (bench_handoff_probe). */
#include "config.h"

#include "bench/bench.h"

#include "bench/timing.h"

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

/* --------------------------------------------------- the hand-off probe */

/* The same probe as calibration's (predict/calibrate.c, handoff_probe),
 * on OpenBLAS directly: poas-bench stands on poas.h, which gives the
 * shape and the threshold (POAS_HANDOFF_*) but not the probe. */

#define HANDOFF_BLOCK 5  /* calls on one thread count before switching */
#define HANDOFF_BLOCKS 3 /* blocks of each, alternated */

static double handoff_call(const float *a, const float *b, float *c) {
  double t0 = bench_now();
  cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, POAS_HANDOFF_M, POAS_HANDOFF_N,
              POAS_HANDOFF_K, 1.0f, a, POAS_HANDOFF_M, b, POAS_HANDOFF_K, 0.0f, c, POAS_HANDOFF_M);
  return bench_now() - t0;
}

/* The probe's operands and the process's cores, set up on first use and
 * kept: bench_handoff_now runs before every visit of a run. NULL when
 * they could not be had. */
typedef struct handoff_setup {
  cblas_state s;
  float *a, *b, *c;
} handoff_setup;

static handoff_setup *handoff_setup_get(void) {
  static handoff_setup h;
  if (h.a)
    return &h;
  if (sched_getaffinity(0, sizeof h.s.mask, &h.s.mask) != 0)
    return NULL;
  h.s.threads = CPU_COUNT(&h.s.mask);
  size_t na = (size_t)POAS_HANDOFF_M * POAS_HANDOFF_K;
  size_t nb = (size_t)POAS_HANDOFF_K * POAS_HANDOFF_N;
  float *a = malloc(sizeof *a * (na + nb + (size_t)POAS_HANDOFF_M * POAS_HANDOFF_N));
  if (!a)
    return NULL;
  bench_fill(a, POAS_FLOAT32, na + nb, 21);
  h.b = a + na, h.c = h.b + nb, h.a = a;
  return &h;
}

/* The probe's calls in `blocks` blocks of `block` on every core and on
 * one, alternated, after a warm-up block of each: their medians into
 * *all and *one. 0, or -1 when it could not run. */
static int handoff_times(int block, int blocks, double *all, double *one, int *threads) {
  handoff_setup *h = handoff_setup_get();
  if (!h)
    return -1;
  double t[2][HANDOFF_BLOCK * HANDOFF_BLOCKS];
  for (int blk = -1; blk < blocks; blk++) /* block -1: a warm-up of each */
    for (int on_one = 0; on_one < 2; on_one++) {
      if (on_one)
        openblas_set_num_threads(1);
      else
        use_all_cores(&h->s);
      for (int i = 0; i < block; i++) {
        double d = handoff_call(h->a, h->b, h->c);
        if (blk >= 0)
          t[on_one][blk * block + i] = d;
      }
    }
  use_all_cores(&h->s);
  *all = bench_median(t[0], block * blocks);
  *one = bench_median(t[1], block * blocks);
  *threads = h->s.threads;
  return 0;
}

void bench_handoff_probe(bench_handoff *out) {
  *out = (bench_handoff){0};
  if (handoff_times(HANDOFF_BLOCK, HANDOFF_BLOCKS, &out->all_s, &out->one_s, &out->threads))
    *out = (bench_handoff){0};
}

double bench_handoff_now(void) {
  handoff_setup *h = handoff_setup_get();
  double all, one;
  int threads;
  if (!h || h->s.threads < 2 || handoff_times(1, 1, &all, &one, &threads))
    return 0;
  return one > 0 ? all / one : 0;
}

void bench_handoff_print(FILE *f, const char *tool, const char *when, const bench_handoff *h) {
  if (h->threads < 2)
    return;
  int slow = h->all_s > POAS_HANDOFF_SLOW * h->one_s;
  fprintf(f,
          "%s: hand-off probe %s: sgemm %d x %d x %d took %.3f ms on %d OpenBLAS threads, %.3f "
          "ms on one: %s\n",
          tool, when, POAS_HANDOFF_M, POAS_HANDOFF_N, POAS_HANDOFF_K, 1e3 * h->all_s, h->threads,
          1e3 * h->one_s,
          slow ? "hand-offs slow (calls on several threads, thin ones most, run slower than "
                 "while they are quick; a VM's host taking a vCPU away for short spells)"
               : "hand-offs quick");
}
