/* poas-demo: the README's main job in one program: the plan for one
 * single-precision GEMM, the GEMM itself through the public API on the
 * selected devices (a first call with its one-time costs, then a few warm
 * ones; each checked exactly, unless a sim device, which computes nothing,
 * took part), and what the runs measured beside what was
 * predicted. The warm calls are reported by their median: one call's time
 * on a shared machine says as much about the machine's moment as about
 * the prediction (on the CI VM, 2048^3 calls minutes apart have taken
 * 0.086 to 0.166 s), and their spread is printed beside it. */
#include "poas.h"
#include "tools/args.h"
#include "tools/context-open.h"
#include "tools/host-memory.h"
#include "tools/profile-note.h"
#include "tools/shared-options.h"
#include "tools/stdout-check.h"

#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static void usage(FILE *f) {
  fprintf(f, "Usage: poas-demo [--devices LIST] [--profile FILE] [--n N] [--calls N]\n"
             "Run an n x n x n sgemm through POAS: a first call, with its one-time costs,\n"
             "then warm ones; check each, and print the plan and the predicted against the\n"
             "measured times (the warm calls' median, and their spread).\n\n"
             "  -d, --devices LIST  device selection, as POAS_DEVICES\n"
             "  -p, --profile FILE  profile to predict with, as POAS_PROFILE\n"
             "  -n, --n N           matrix size (default 1024, at most 65536, and A, B and C\n"
             "                      must fit in the machine's memory: 3 x 4n^2 bytes)\n"
             "  -c, --calls N       warm calls (default 5, 1 to 100)\n"
             "  -h, --help          show this help\n"
             "  -V, --version       show the version\n\n"
             "Exit status: 0, 1 when A, B and C do not fit in memory, a call fails or\n"
             "computes a wrong element, a profile named by --profile or POAS_PROFILE cannot\n"
             "be read or the output cannot be written, 2 on a usage error (a malformed\n"
             "--devices or POAS_DEVICES among them).\n");
}

#define MAX_WARM 100

/* (predicted - measured) / measured, in percent. */
static double relative_error(double predicted, double measured) {
  double e = measured > 0 ? 100.0 * (predicted - measured) / measured : 0.0;
  return fabs(e) < 0.05 ? 0.0 : e; /* printed to 0.1%: not "-0.0%" */
}

/* Whether a simulated device computed part of the run `rep` reports: its
 * part of C is then left as it was, and checking C means nothing. */
static int took_part_simulated(const poas_context *ctx, const poas_report *rep) {
  for (int d = 0; d < rep->ndevices; d++) {
    poas_device_info info;
    if ((rep->dev[d].chunks > 0 || rep->dev[d].share > 0) &&
        poas_device_get(ctx, d, &info) == 0 && info.kind == POAS_DEVICE_SIM)
      return 1;
  }
  return 0;
}

/* Whether A, B and C, n x n floats each, fit in the machine's memory
 * (tool_host_memory); says why on stderr when not. Not a usage error: the
 * same n runs on a larger machine. */
static int operands_fit(long n) {
  char why[128];
  if (tool_memory_holds(3.0 * sizeof(float) * (double)n * (double)n, why, sizeof why))
    return 1;
  fprintf(stderr, "poas-demo: n=%ld: A, B and C need %s\n", n, why);
  return 0;
}

/* The plan of the calls below (alpha 1, beta 0: C is not copied in). */
static void print_plan(poas_context *ctx, long n) {
  poas_plan plan;
  int rc = poas_plan_gemm_call(ctx, POAS_FLOAT32, POAS_ROW_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, n,
                               n, n, 1, 0, &plan);
  if (rc) {
    printf("plan: %s: %s\n", poas_strerror(rc), poas_error_detail());
    return;
  }
  printf("plan for sgemm %ld x %ld x %ld: split by %s, predicted makespan %.4g s\n", n, n, n,
         plan.split == POAS_SPLIT_ROWS ? "rows" : "columns", plan.makespan_s);
  for (int d = 0; d < plan.ndevices; d++) {
    const poas_plan_device *p = &plan.dev[d];
    printf("  %-10s %6.1f%%  %lld-%lld in %lld tile%s  predicted %.4g s%s\n", p->id, 100 * p->share,
           (long long)p->first, (long long)(p->first + p->count - 1), (long long)p->tiles,
           p->tiles == 1 ? "" : "s", p->predicted_s,
           p->estimated ? "  (no calibrated model: estimate)" : "");
  }
  for (int e = 0; e < plan.nexcluded; e++)
    printf("  %-10s left out: %s\n", plan.excluded[e].id, plan.excluded[e].reason);
}

int main(int argc, char **argv) {
  tool_std_ready();
  static const struct option longopts[] = {TOOL_LONGOPT_DEVICES, TOOL_LONGOPT_PROFILE,
                                           {"n", required_argument, NULL, 'n'},
                                           {"calls", required_argument, NULL, 'c'},
                                           TOOL_LONGOPTS_END};
  poas_options opts;
  poas_options_init(&opts);
  long n = 1024, warm = 5;
  int64_t v;
  int c, status;
  const tool_cli cli = {
      .prog = "poas-demo", .usage = usage, .argc = argc, .argv = argv, .longopts = longopts,
      .devices = &opts.devices, .profile = &opts.profile};
  while ((c = tool_getopt(&cli, "d:p:n:c:hV")) != -1) {
    switch (c) {
    case 'n':
      if (tool_parse_int64(optarg, 1, 65536, &v)) {
        fprintf(stderr, "poas-demo: bad --n '%s' (1 to 65536)\n", optarg);
        return 2;
      }
      n = (long)v;
      break;
    case 'c':
      if (tool_parse_int64(optarg, 1, MAX_WARM, &v)) {
        fprintf(stderr, "poas-demo: bad --calls '%s' (1 to %d)\n", optarg, MAX_WARM);
        return 2;
      }
      warm = (long)v;
      break;
    default:
      if ((status = tool_shared_option(&cli, c, optarg)) != TOOL_GO_ON)
        return status;
    }
  }
  if ((status = tool_no_operands(&cli)) != TOOL_GO_ON)
    return status;
  if (!operands_fit(n))
    return 1;
  float *A = malloc(sizeof(float) * (size_t)(n * n)), *B = malloc(sizeof(float) * (size_t)(n * n)),
        *C = malloc(sizeof(float) * (size_t)(n * n));
  if (!A || !B || !C) {
    fprintf(stderr, "poas-demo: out of memory for n=%ld\n", n);
    free(A), free(B), free(C);
    return 1;
  }
  /* A holds small integers with no symmetry or period (a hash of i and
   * p, -8 to 7), B is 2 on its diagonal and 1 below it: C(i,j) = 2 A(i,j)
   * + A(i,j+1), exactly. A symmetric A of period 7 with B = 2I gave
   * AB = BA = 2A^T, so swapped operands, a transposed A or a block off by
   * 7 rows passed the check. */
  for (long i = 0; i < n; i++)
    for (long p = 0; p < n; p++) {
      A[i * n + p] = (float)((((uint32_t)i * 2654435761u) ^ ((uint32_t)p * 40503u)) >> 28) - 8.0f;
      B[i * n + p] = i == p ? 2.0f : i == p + 1 ? 1.0f : 0.0f;
    }
  poas_context *ctx;
  int rc = tool_context_open("poas-demo", &opts, &ctx);
  if (rc) {
    free(A), free(B), free(C);
    return rc;
  }
  if (tool_profile_check("poas-demo", ctx, opts.profile)) {
    poas_finalize(ctx);
    free(A), free(B), free(C);
    return 1;
  }
  print_plan(ctx, n);
  /* Each result is checked on a poisoned C. The first call also pays what
   * only a first call pays (threads started, C's pages first touched,
   * device buffers allocated), which the models do not predict; the warm
   * ones are what every later call costs. */
  long wrong = 0;
  int simulated = 0; /* a sim device took part, computing nothing */
  status = 1;
  poas_report first, *r = malloc(sizeof *r * (size_t)warm);
  int *order = malloc(sizeof *order * (size_t)warm);
  if (!r || !order) {
    fprintf(stderr, "poas-demo: out of memory for %ld calls\n", warm);
    goto done;
  }
  for (long call = 0; call <= warm; call++) {
    for (long i = 0; i < n * n; i++)
      C[i] = NAN;
    rc = poas_sgemm(ctx, POAS_ROW_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, n, n, n, 1.0f, A, n, B, n,
                    0.0f, C, n);
    if (rc) {
      fprintf(stderr, "poas-demo: sgemm: %s: %s\n", poas_strerror(rc), poas_error_detail());
      goto done;
    }
    for (long i = 0; i < n * n; i++)
      wrong += C[i] != 2.0f * A[i] + (i % n + 1 < n ? A[i + 1] : 0.0f);
    poas_report *done = call == 0 ? &first : &r[call - 1];
    poas_last_report(ctx, done);
    simulated |= took_part_simulated(ctx, done);
  }
  /* The warm calls by measured time. Their median is the middle call's
   * time and prediction, the mean of the middle two's for an even count,
   * as poas-bench and bench/accuracy take it; its plan, policy and
   * devices are the faster middle call's, whose report poas-bench keeps.
   * That call's time alone was once the median: four calls of a jittery
   * sim read 0.3823 ms, +18.8% off a constant prediction, beside the
   * calls' own errors' median of +3.2%. */
  for (int i = 0; i < (int)warm; i++) {
    int j = i;
    for (; j > 0 && r[order[j - 1]].measured_s > r[i].measured_s; j--)
      order[j] = order[j - 1];
    order[j] = i;
  }
  const poas_report *med = &r[order[(warm - 1) / 2]], *upper = &r[order[warm / 2]];
  double med_s = (med->measured_s + upper->measured_s) / 2,
         med_pred = (med->predicted_s + upper->predicted_s) / 2,
         med_gflops = 2.0 * (double)n * (double)n * (double)n / med_s / 1e9;
  /* Each call's own error, and their median: the median call by time was
   * once the first warm one, planned before its runs had taught the
   * context (a calibration in another state of the host, +15-17%), and its
   * error stood for all the calls. */
  double *errs = malloc(sizeof *errs * (size_t)warm);
  if (!errs) {
    fprintf(stderr, "poas-demo: out of memory for %ld calls\n", warm);
    goto done;
  }
  for (int i = 0; i < (int)warm; i++) {
    double e = relative_error(r[i].predicted_s, r[i].measured_s);
    int j = i;
    for (; j > 0 && errs[j - 1] > e; j--)
      errs[j] = errs[j - 1];
    errs[j] = e;
  }
  double lo_err = errs[0], hi_err = errs[warm - 1],
         mid_err = warm % 2 ? errs[warm / 2] : (errs[warm / 2 - 1] + errs[warm / 2]) / 2;
  free(errs);
  double fastest = r[order[0]].measured_s, slowest = r[order[warm - 1]].measured_s;
  printf("\nfirst call: %.4g s, predicted %.4g s (error %+.1f%%; one-time costs included)\n",
         first.measured_s, first.predicted_s,
         relative_error(first.predicted_s, first.measured_s));
  if (warm == 1)
    printf("warm call: %.4g s, %.1f GFLOP/s, predicted %.4g s (error %+.1f%%), policy %s\n",
           med->measured_s, med->gflops, med->predicted_s,
           relative_error(med->predicted_s, med->measured_s), med->policy);
  else
    printf("warm calls: %ld, median %.4g s (%.4g-%.4g s), %.1f GFLOP/s, predicted %.4g s (error "
           "%+.1f%%; the calls' errors %+.1f%% to %+.1f%%, median %+.1f%%), policy %s\n",
           warm, med_s, fastest, slowest, med_gflops, med_pred, relative_error(med_pred, med_s),
           lo_err, hi_err, mid_err, med->policy);
  if (simulated)
    printf("results not checked (sim devices compute nothing)\n");
  else
    printf("%ld wrong elements in all %ld calls\n", wrong, warm + 1);
  if (warm > 1) /* the table is one call's, which the median above is not */
    printf("the devices in the faster middle warm call (%.4g s):\n", med->measured_s);
  printf("%-10s %7s %12s %12s %8s %8s\n", "device", "share", "predicted s", "measured s", "error",
         "idle s");
  for (int d = 0; d < med->ndevices; d++) {
    const poas_device_report *dr = &med->dev[d];
    /* A device that failed at its first operation computed nothing and
     * is still the row to read: it was left out with the idle ones. */
    if (dr->share <= 0 && dr->chunks == 0 && !dr->failed)
      continue;
    /* No error where nothing was predicted (a device that took over a
     * failed one's work) or nothing done (the failed one): it read
     * -100% and +2079463.6%. */
    char error[16] = "-";
    if (dr->predicted_s > 0 && !dr->failed)
      snprintf(error, sizeof error, "%+.1f%%", relative_error(dr->predicted_s, dr->measured_s));
    printf("%-10s %6.1f%% %12.4g %12.4g %8s %8.3g%s\n", dr->id, 100 * dr->share,
           dr->predicted_s, dr->measured_s, error, dr->idle_s,
           dr->failed ? "  (failed; its work moved)" : "");
  }
  /* Past a tenth, the spread is the machine's and not the model's: say so
   * rather than let one figure stand for the prediction. */
  if (warm > 1 && slowest > 1.1 * fastest)
    printf("note: the warm calls took %.4g to %.4g s, %.0f%% apart: the machine was busy, and a "
           "prediction can be no closer than that\n",
           fastest, slowest, 100 * (slowest / fastest - 1));
  status = wrong != 0 && !simulated;
done:
  free(r), free(order);
  poas_finalize(ctx);
  free(A), free(B), free(C);
  return tool_stdout_status("poas-demo", status);
}
