/* poas-demo: the README's main job in one program: the plan for one
 * single-precision GEMM, the GEMM itself through the public API on the
 * selected devices, twice (the first call with its one-time costs, then a
 * warm one; both checked exactly), and what the runs measured beside what
 * was predicted. */
#include "poas.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static void usage(FILE *f) {
  fprintf(f, "Usage: poas-demo [--devices LIST] [--n N]\n"
             "Run an n x n x n sgemm through POAS twice (a first call, with its one-time\n"
             "costs, then a warm one), check both, and print the plan and the predicted\n"
             "against the measured times.\n\n"
             "  -d, --devices LIST  device selection, as POAS_DEVICES\n"
             "  -n, --n N           matrix size (default 1024)\n"
             "  -h, --help          show this help\n"
             "  -V, --version       show the version\n");
}

/* (predicted - measured) / measured, in percent. */
static double relative_error(double predicted, double measured) {
  return measured > 0 ? 100.0 * (predicted - measured) / measured : 0.0;
}

static void print_plan(poas_context *ctx, long n) {
  poas_plan plan;
  int rc = poas_plan_gemm(ctx, POAS_FLOAT32, POAS_ROW_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, n, n,
                          n, &plan);
  if (rc) {
    printf("plan: %s: %s\n", poas_strerror(rc), poas_error_detail());
    return;
  }
  printf("plan for sgemm %ld x %ld x %ld: split by %s, predicted makespan %.4f s\n", n, n, n,
         plan.split == POAS_SPLIT_ROWS ? "rows" : "columns", plan.makespan_s);
  for (int d = 0; d < plan.ndevices; d++) {
    const poas_plan_device *p = &plan.dev[d];
    printf("  %-10s %6.1f%%  %lld-%lld in %lld tile%s  predicted %.4f s%s\n", p->id,
           100 * p->share, (long long)p->first, (long long)(p->first + p->count - 1),
           (long long)p->tiles, p->tiles == 1 ? "" : "s", p->predicted_s,
           p->estimated ? "  (no calibrated model: estimate)" : "");
  }
  for (int e = 0; e < plan.nexcluded; e++)
    printf("  %-10s left out: %s\n", plan.excluded[e].id, plan.excluded[e].reason);
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {{"devices", required_argument, NULL, 'd'},
                                           {"n", required_argument, NULL, 'n'},
                                           {"help", no_argument, NULL, 'h'},
                                           {"version", no_argument, NULL, 'V'},
                                           {NULL, 0, NULL, 0}};
  poas_options opts;
  poas_options_init(&opts);
  long n = 1024;
  int c;
  while ((c = getopt_long(argc, argv, "d:n:hV", longopts, NULL)) != -1) {
    switch (c) {
    case 'd':
      opts.devices = optarg;
      break;
    case 'n': {
      char *end;
      n = strtol(optarg, &end, 10);
      if (*end || n < 1 || n > 65536) {
        fprintf(stderr, "poas-demo: bad --n '%s' (1 to 65536)\n", optarg);
        return 2;
      }
      break;
    }
    case 'h':
      usage(stdout);
      return 0;
    case 'V':
      printf("poas-demo (POAS) %s\n", poas_version());
      return 0;
    default:
      usage(stderr);
      return 2;
    }
  }
  float *A = malloc(sizeof(float) * (size_t)(n * n)), *B = malloc(sizeof(float) * (size_t)(n * n)),
        *C = malloc(sizeof(float) * (size_t)(n * n));
  if (!A || !B || !C) {
    fprintf(stderr, "poas-demo: out of memory for n=%ld\n", n);
    return 1;
  }
  /* A(i,p) = (i+p) % 7 - 3, B = identity scaled by 2: C = 2A exactly. */
  for (long i = 0; i < n; i++)
    for (long p = 0; p < n; p++) {
      A[i * n + p] = (float)((i + p) % 7 - 3);
      B[i * n + p] = i == p ? 2.0f : 0.0f;
    }
  poas_context *ctx;
  int rc = poas_init(&ctx, &opts);
  if (rc) {
    fprintf(stderr, "poas-demo: %s: %s\n", poas_strerror(rc), poas_error_detail());
    return 1;
  }
  print_plan(ctx, n);
  /* Twice, each result checked on a poisoned C: the first call also pays
   * what only a first call pays (threads started, C's pages first touched,
   * device buffers allocated), which the models do not predict; the
   * second is what every later call costs. */
  long wrong = 0;
  poas_report first, r;
  for (int call = 0; call < 2; call++) {
    for (long i = 0; i < n * n; i++)
      C[i] = NAN;
    rc = poas_sgemm(ctx, POAS_ROW_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, n, n, n, 1.0f, A, n, B, n,
                    0.0f, C, n);
    if (rc) {
      fprintf(stderr, "poas-demo: sgemm: %s: %s\n", poas_strerror(rc), poas_error_detail());
      poas_finalize(ctx);
      return 1;
    }
    for (long i = 0; i < n * n; i++)
      wrong += C[i] != 2.0f * A[i];
    poas_last_report(ctx, call == 0 ? &first : &r);
  }
  printf("\nfirst call: %.3f s, predicted %.3f s (error %+.1f%%; one-time costs included)\n",
         first.measured_s, first.predicted_s,
         relative_error(first.predicted_s, first.measured_s));
  printf("second call: %.3f s, %.1f GFLOP/s, predicted %.3f s (error %+.1f%%), policy %s, "
         "%ld wrong elements in both\n",
         r.measured_s, r.gflops, r.predicted_s, relative_error(r.predicted_s, r.measured_s),
         r.policy, wrong);
  printf("%-10s %7s %12s %12s %8s %8s\n", "device", "share", "predicted s", "measured s", "error",
         "idle s");
  for (int d = 0; d < r.ndevices; d++) {
    if (r.dev[d].share <= 0 && r.dev[d].chunks == 0)
      continue;
    printf("%-10s %6.1f%% %12.4f %12.4f %+7.1f%% %8.4f%s\n", r.dev[d].id, 100 * r.dev[d].share,
           r.dev[d].predicted_s, r.dev[d].measured_s,
           relative_error(r.dev[d].predicted_s, r.dev[d].measured_s), r.dev[d].idle_s,
           r.dev[d].failed ? "  (failed; its work moved)" : "");
  }
  poas_finalize(ctx);
  free(A), free(B), free(C);
  return wrong != 0;
}
