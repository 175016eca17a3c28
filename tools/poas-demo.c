/* poas-demo: the README's main job in one program: one single-precision
 * GEMM through the public API on the selected devices, checked against a
 * reference, with what the run reports. */
#include "poas.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static void usage(FILE *f) {
  fprintf(f, "Usage: poas-demo [--devices LIST] [--n N]\n"
             "Run one n x n x n sgemm through POAS and check it.\n\n"
             "  -d, --devices LIST  device selection, as POAS_DEVICES\n"
             "  -n, --n N           matrix size (default 1024)\n"
             "  -h, --help          show this help\n"
             "  -V, --version       show the version\n");
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
  rc = poas_sgemm(ctx, POAS_ROW_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, n, n, n, 1.0f, A, n, B, n,
                  0.0f, C, n);
  if (rc) {
    fprintf(stderr, "poas-demo: sgemm: %s: %s\n", poas_strerror(rc), poas_error_detail());
    poas_finalize(ctx);
    return 1;
  }
  long wrong = 0;
  for (long i = 0; i < n * n; i++)
    wrong += C[i] != 2.0f * A[i];
  poas_report r;
  poas_last_report(ctx, &r);
  printf("sgemm %ld x %ld x %ld: %.3f s, %.1f GFLOP/s, predicted %.3f s, %ld wrong elements\n", n,
         n, n, r.measured_s, r.gflops, r.predicted_s, wrong);
  for (int d = 0; d < r.ndevices; d++)
    printf("  %-8s share %5.1f%%  predicted %.3f s  measured %.3f s\n", r.dev[d].id,
           100 * r.dev[d].share, r.dev[d].predicted_s, r.dev[d].measured_s);
  poas_finalize(ctx);
  free(A), free(B), free(C);
  return wrong != 0;
}
