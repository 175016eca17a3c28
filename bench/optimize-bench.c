/* optimize-bench: how long the split solver takes for eight devices (two
 * on host memory, six behind copies, varied speeds), with and without two
 * of them competing for the host's cores. Prints the median and best time
 * of one solve over many repetitions. Not installed; it measures an
 * internal function, so it links the internal library. Takes no arguments
 * but --help (or -h), which prints the usage text, and --version (-V). */
#include "bench/cli.h"
#include "bench/timing.h"
#include "optimize/optimize.h"
#include "poas.h"
#include "tools/stdout-check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REPS 2000

static void rate_model(poas__device_model *dm, double flops, double overhead, double latency,
                       double bandwidth) {
  const double rates[2] = {flops, flops};
  poas__device_model_from_rates(dm, POAS__MODEL_CALIBRATED, rates, overhead, latency, bandwidth);
  for (int dt = 0; dt < 2; dt++)
    for (int pair = 0; pair < 4; pair++)
      dm->gemm[dt][pair].coef[4] = 2e-12; /* packing B costs something */
}

static double bench(const poas__opt_device *d, const poas__opt_problem *p, double *best) {
  static double t[REPS];
  static poas__opt_result r;
  for (int i = 0; i < REPS; i++) {
    double t0 = poas__now();
    if (poas__optimize(d, 8, p, &r) != 0) {
      fprintf(stderr, "optimize-bench: solve failed: %s\n", poas_error_detail());
      exit(1);
    }
    t[i] = poas__now() - t0;
  }
  qsort(t, REPS, sizeof *t, bench_cmp_double);
  *best = t[0];
  return t[REPS / 2];
}

static void usage(FILE *f) {
  fprintf(f,
          "Usage: optimize-bench\n"
          "Time the split solver on eight devices, alone and as the library plans\n"
          "(min_gain 3%%), with and without two devices competing for the host's cores;\n"
          "print the median and best of %d solves.\n\n"
          "  -h, --help     show this help\n"
          "  -V, --version  show the version\n",
          REPS);
}

int main(int argc, char **argv) {
  tool_std_ready();
  if (argc > 1) {
    if (bench_is_help(argv[1])) {
      usage(stdout);
      return tool_stdout_status("optimize-bench", 0);
    }
    if (bench_is_version(argv[1])) {
      printf("optimize-bench (POAS) %s\n", poas_version());
      return tool_stdout_status("optimize-bench", 0);
    }
    return bench_bad_arg("optimize-bench", argv[1][0] == '-' ? "option" : "argument", argv[1]);
  }
  static const double rates[8] = {1.5e12, 3e11, 2e13, 1.8e13, 7e12, 4e12, 9e11, 2e11};
  static const char *const ids[8] = {"cpu0", "opencl0", "cuda0", "cuda1",
                                     "opencl1", "opencl2", "opencl3", "sim0"};
  poas__device_model dm[8];
  poas__opt_device d[8];
  for (int i = 0; i < 8; i++) {
    int host = i < 2;
    rate_model(&dm[i], rates[i], 2e-5, host ? 0 : 1e-5, 1e10 + 2e9 * i);
    d[i] = (poas__opt_device){.id = ids[i], .model = &dm[i], .memory_bytes = (uint64_t)16 << 30,
                              .host_memory = host, .cores = host ? 8 : 1, .supports_dtype = 1};
  }
  poas__opt_problem p = {.dtype = POAS_FLOAT32, .transa = POAS_NO_TRANS,
                         .transb = POAS_NO_TRANS, .m = 30000, .n = 20000, .k = 10000,
                         .reads_c = 1, .reads_ab = 1, .host_cores = 16};
  /* The solver alone, then as the library plans, leaving out the smallest
   * devices while together they are worth under 3%. */
  for (int lib = 0; lib < 2; lib++) {
    p.min_gain = lib ? 0.03 : 0;
    for (int competing = 0; competing < 2; competing++) {
      d[0].shares_host_cores = d[1].shares_host_cores = competing;
      d[0].cores = competing ? 16 : 8;
      double best, med = bench(d, &p, &best);
      printf("8 devices, %-22s %-18s median %.2f us, best %.2f us per solve\n",
             competing ? "2 competing for cores," : "none competing,",
             lib ? "min_gain 3%:" : "min_gain 0:", med * 1e6, best * 1e6);
    }
  }
  return tool_stdout_status("optimize-bench", 0);
}
