/* accuracy: how well the loaded profile predicts GEMM shapes that
 * calibration never measured (thin row blocks, thin column blocks,
 * squares, every transpose pair, both dtypes) on one device. Stands on
 * poas.h alone: the context holds that one device, each shape runs through
 * poas_sgemm / poas_dgemm (column-major), and the time kept is the median
 * of its timed calls. As calibration times its sweep, the shapes are
 * visited in passes, each in a new shuffled order, each visit a warm-up
 * call and then timed ones: a burst of load from a neighbour then spoils
 * one visit of many shapes, not every call of a few. The table ends with
 * the timing noise of the run, measured as calibration measures its own
 * (poas__timing_noise of each shape's timings, the median over shapes),
 * and the median signed error, which tells a model that is off one way
 * from one that scatters. The prediction is the run's own predicted
 * makespan (poas_last_report): for a device with its own memory that is
 * the whole pipeline, copies in and out included, as the user sees it; the
 * "kernel ms" column is the GEMM model alone (poas_predict_gemm), the same
 * as the makespan on the CPU. Prints a markdown table of |predicted -
 * measured| / measured per shape and the median.
 *
 * On a host of several cores it also probes the host's hand-off state
 * (bench_handoff_now, ~2.5 ms) between visits, tags each timing with it,
 * and gives the error over the timings of each state apart. On the CI VM
 * a call on two threads runs up to 3x slower while its host holds a vCPU
 * back, a state entered and left within seconds, which no model fitted
 * beforehand can know of: the split tells the models' error in the state
 * they were fitted in from the error the state's changes add. The library
 * probes the state for each plan (api/run.c handoff_probe), so a shape's
 * calls are predicted apart: the table takes the median of its timed
 * calls' predictions against the median of their times. (It took the
 * last visit's prediction alone, once the state could move between
 * visits: one run read 6.83% so, where the calls' own predictions read
 * 4.60%, a prediction made in the slow state set against timings that met
 * the quick one most.) A second figure sets each timed call's own
 * prediction against that call's time, which is what poas_last_report
 * tells a user of each call.
 *
 * With --adapt the context learns from its runs, as the library does by
 * default (POAS_ADAPT): the models are scaled by what the device's recent
 * runs implied. A VM whose speed drifts by more than the models' error
 * between calibration and use (the CI machine class: 5-20% within
 * minutes) is then predicted from how it runs now. Each shape's
 * prediction is its first call's, planned before any run of that shape,
 * so it learned from the other shapes' runs only. A second figure then
 * compares each visit's own prediction (its warm-up call's plan, made
 * just before its timed calls) with those calls: what a user who asks
 * before each call is told, while the host's state moves between passes.
 *
 * On a device with its own memory it also times the GEMM alone, on
 * operands already in device memory (through the backend, as calibration
 * times it, and like calibration in the sustained regime: every kernel
 * first, each after the GPU has been kept computing), against the GEMM
 * model: the "kernel" columns, which tell the model's error from the
 * pipeline's.
 *
 *   bench/accuracy [--devices LIST] [--reps N] [--passes P] [--quick] [--adapt]
 *     -d, --devices LIST  the device to measure, as POAS_DEVICES would name it
 *                         (default cpu; POAS_DEVICES itself is not read)
 *     -r, --reps N        timed calls of each shape, 1 to 64 (default 6)
 *     -p, --passes P      passes the calls are spread over, 1 to N (default 3)
 *     -q, --quick         half the square shapes
 *     -a, --adapt         the library's default predictions (below)
 *     -t, --timings FILE  every timed call into a CSV: shape, measured and
 *                         predicted seconds, the hand-off probe's ratio
 *     -h, --help          the usage text
 *     -V, --version       the version
 * The profile comes from POAS_PROFILE or the default path. Exit status: 0,
 * 1 when the device is simulated or has no calibrated model, --timings
 * cannot be written or a run failed, 2 on a usage error (a malformed
 * --devices, or one that selects more than one device, among them). */
#include "bench/bench.h"
#include "bench/cli.h"
#include "bench/timing.h"
#include "devices/device.h"
#include "poas.h"
#include "predict/predict.h"
#include "tools/context-open.h"
#include "tools/shared-options.h"
#include "tools/stdout-check.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_REPS 64

typedef struct shape {
  poas_dtype dtype;
  poas_op ta, tb;
  int64_t m, n, k;
} shape;

/* A square's side off calibration's grid: its sweep rounds every scaled
 * size to a multiple of 8, where the squares it times can land on ours
 * (its sweep reaches 200^3 for a device of 14-16 GFLOP/s, one PoCL core
 * here). */
static int64_t off_grid(int64_t side) { return side % 8 ? side : side + 4; }

/* Shapes off the calibration grid: sizes none of its lists contain. The
 * full and square sizes are multiplied by `scale`, as calibration scales
 * its own for a fast device (a GPU would otherwise be asked only about
 * calls of tens of microseconds, mostly launch cost); thin row counts are
 * what a split hands a device and stay. */
static int build_shapes(shape *out, int quick, int64_t scale) {
  static const int64_t thin[] = {12, 48, 100, 300};
  int64_t full[] = {900 * scale, 1400 * scale, 2200 * scale};
  int64_t squares[] = {off_grid(200 * scale), off_grid(700 * scale), off_grid(1300 * scale),
                       off_grid(1900 * scale)};
  int n = 0;
  for (int dt = 0; dt < 2; dt++)
    for (int pair = 0; pair < 4; pair++) {
      poas_op ta = pair & 1 ? POAS_TRANS : POAS_NO_TRANS;
      poas_op tb = pair & 2 ? POAS_TRANS : POAS_NO_TRANS;
      for (int i = 0; i < 4; i++) {
        int64_t f = full[(i + pair) % 3], g = full[(i + pair + 1) % 3];
        out[n++] = (shape){(poas_dtype)dt, ta, tb, thin[i], f, g};
        out[n++] = (shape){(poas_dtype)dt, ta, tb, g, thin[(i + 1) % 4], f};
        if (!quick || i % 2 == 0)
          out[n++] = (shape){(poas_dtype)dt, ta, tb, squares[(i + pair) % 4],
                             squares[(i + pair) % 4], squares[(i + pair) % 4]};
      }
    }
  return n;
}

/* One call of a shape, through the public API (device NULL) or through the
 * backend on operands already in device memory, followed by a wait. */
typedef struct timed_call {
  poas_context *ctx;
  const shape *s;
  void *A, *B, *C;
  poas__device *device;
  poas__mem a, b, c;
} timed_call;

/* The lane kernels are timed on: the pipeline's GEMM lane. */
static int kernel_lane(const poas__device *d) { return d->nlanes > 1 ? 1 : 0; }

static int run_call(const timed_call *t) {
  const shape *s = t->s;
  int64_t lda = s->ta == POAS_NO_TRANS ? s->m : s->k;
  int64_t ldb = s->tb == POAS_NO_TRANS ? s->k : s->n;
  if (t->device) {
    poas__device *d = t->device;
    poas__gemm_call g = {s->dtype, s->ta, s->tb, s->m, s->n, s->k, 1.0, 0.0,
                         {t->a, 0, lda}, {t->b, 0, ldb}, {t->c, 0, s->m}};
    int lane = kernel_lane(d);
    int rc = d->be->gemm(d, lane, &g);
    return rc ? rc : d->be->lane_sync(d, lane);
  }
  return s->dtype == POAS_FLOAT32
             ? poas_sgemm(t->ctx, POAS_COL_MAJOR, s->ta, s->tb, s->m, s->n, s->k, 1, t->A, lda,
                          t->B, ldb, 0, t->C, s->m)
             : poas_dgemm(t->ctx, POAS_COL_MAJOR, s->ta, s->tb, s->m, s->n, s->k, 1, t->A, lda,
                          t->B, ldb, 0, t->C, s->m);
}

/* The predicted makespan of the context's last run; exits when there is
 * none. */
static double last_predicted(poas_context *ctx) {
  poas_report rep;
  if (poas_last_report(ctx, &rep)) {
    fprintf(stderr, "accuracy: no report: %s\n", poas_error_detail());
    exit(1);
  }
  return rep.predicted_s;
}

/* The median seconds of `reps` calls after a warm-up, whose times go to
 * t_rep[reps] when it is not NULL, each timed call's own predicted
 * makespan (its plan's, made just before it) to pred_rep[reps] when that
 * is not NULL, and the warm-up run's to *warm_pred when that is not NULL;
 * exits on a failure. */
static double median_time(const timed_call *t, int reps, double *t_rep, double *pred_rep,
                          double *warm_pred) {
  double own[MAX_REPS];
  reps = reps < MAX_REPS ? reps : MAX_REPS;
  t_rep = t_rep ? t_rep : own;
  for (int r = 0; r <= reps; r++) {
    double t0 = bench_now();
    int rc = run_call(t);
    double dt = bench_now() - t0;
    if (rc) {
      fprintf(stderr, "accuracy: %s failed: %s: %s\n", t->device ? "kernel" : "gemm",
              poas_strerror(rc), poas_error_detail());
      exit(1);
    }
    if (r > 0) { /* the first call is a warm-up */
      t_rep[r - 1] = dt;
      if (pred_rep)
        pred_rep[r - 1] = last_predicted(t->ctx);
    } else if (warm_pred)
      *warm_pred = last_predicted(t->ctx);
  }
  double sorted[MAX_REPS];
  memcpy(sorted, t_rep, (size_t)reps * sizeof *sorted);
  return bench_median(sorted, reps);
}

/* Times every shape end to end through the public API: `passes` visits of
 * all of them, each pass in a new shuffled order, each visit a warm-up
 * call and `per_pass` timed ones, into t[i * MAX_REPS + j]; pred[i] is the
 * median of the shape's timed calls' predicted makespans, from their
 * runs' reports. With `adapting` (a
 * context that learns from its runs), pred[i] is the prediction of the
 * shape's first call, planned before any run of it: learned from the
 * other shapes' runs alone; and visit_pred[i * MAX_REPS + p] the
 * prediction of each visit's warm-up call, planned just before the
 * visit's timed calls; call_pred[i * MAX_REPS + j] the prediction of
 * timing j's own call, planned just before it. Exits on a failure. */
static void time_in_passes(poas_context *ctx, const shape *shapes, int ns, void *const op[2][3],
                           int passes, int per_pass, int adapting, double *t, double *pred,
                           double *visit_pred, double *call_pred, double *state) {
  int order[128];
  for (int i = 0; i < ns; i++)
    order[i] = i;
  uint64_t seed = 1;
  double before = state ? bench_handoff_now() : 0;
  for (int p = 0; p < passes; p++) {
    bench_shuffle(order, ns, &seed);
    for (int o = 0; o < ns; o++) {
      int i = order[o];
      const shape *s = &shapes[i];
      void *const *m = op[s->dtype == POAS_FLOAT64];
      timed_call call = {ctx, s, m[0], m[1], m[2], NULL, {NULL}, {NULL}, {NULL}};
      median_time(&call, per_pass, &t[i * MAX_REPS + p * per_pass],
                  &call_pred[i * MAX_REPS + p * per_pass],
                  adapting ? &visit_pred[i * MAX_REPS + p] : NULL);
      if (adapting && p == 0)
        pred[i] = visit_pred[i * MAX_REPS];
      if (state) {
        /* A visit met slow hand-offs when the probe before it or the one
         * after it saw them: the state lasts seconds, a visit milliseconds
         * to a fraction of a second. */
        double after = bench_handoff_now();
        for (int j = 0; j < per_pass; j++)
          state[i * MAX_REPS + p * per_pass + j] = before > after ? before : after;
        before = after;
      }
    }
  }
  for (int i = 0; !adapting && i < ns; i++) {
    double own[MAX_REPS];
    memcpy(own, &call_pred[i * MAX_REPS], (size_t)(passes * per_pass) * sizeof *own);
    pred[i] = bench_median(own, passes * per_pass);
  }
}

/* With --adapt, how far each visit's own prediction (its warm-up call's,
 * planned just before its timed calls) was from the median of those
 * calls: what a user who asks before each call is told. The host's state
 * moves between passes, and the shape's first prediction (the table's)
 * cannot know of the passes after it. The median |error| and signed
 * error over the visits, all of them (slow < 0) or those that met one
 * hand-off state; returns how many. */
static int visit_errors(int ns, int passes, int per_pass, const double *t, const double *state,
                        const double *visit_pred, int slow, double *median,
                        double *signed_median) {
  static double err[128 * MAX_REPS], sgn[128 * MAX_REPS];
  int n = 0;
  for (int i = 0; i < ns; i++)
    for (int p = 0; p < passes; p++) {
      const double *tv = &t[i * MAX_REPS + p * per_pass];
      if (slow >= 0 && (state[i * MAX_REPS + p * per_pass] > POAS_HANDOFF_SLOW) != slow)
        continue;
      double v[MAX_REPS];
      memcpy(v, tv, (size_t)per_pass * sizeof *v);
      double meas = bench_median(v, per_pass);
      sgn[n] = (visit_pred[i * MAX_REPS + p] - meas) / meas;
      err[n] = fabs(sgn[n]);
      n++;
    }
  *median = n ? bench_median(err, n) : 0;
  *signed_median = n ? bench_median(sgn, n) : 0;
  return n;
}

/* The models' error over the timings that met one hand-off state (slow:
 * state[] above POAS_HANDOFF_SLOW), for the shapes with at least two such
 * timings: how many shapes, the median |error| and the median signed one.
 * The prediction set against them is the median of those same calls'
 * predictions (call_pred), as the table pairs a shape's; with `adapting`
 * the shape's first (pred), as the table's is. The median of all the
 * shape's calls set slow-state timings against predictions made mostly in
 * the quick state, where the host moved between passes. */
static int error_in_state(int ns, const double *t, const double *state, int timed,
                          const double *pred, const double *call_pred, int adapting, int slow,
                          double *median, double *signed_median) {
  double err[128], sgn[128];
  int n = 0;
  for (int i = 0; i < ns; i++) {
    double v[MAX_REPS], pv[MAX_REPS];
    int nv = 0;
    for (int j = 0; j < timed; j++)
      if ((state[i * MAX_REPS + j] > POAS_HANDOFF_SLOW) == slow)
        pv[nv] = call_pred[i * MAX_REPS + j], v[nv++] = t[i * MAX_REPS + j];
    if (nv < 2)
      continue;
    double meas = bench_median(v, nv), p = adapting ? pred[i] : bench_median(pv, nv);
    sgn[n] = (p - meas) / meas;
    err[n] = fabs(sgn[n]);
    n++;
  }
  *median = n ? bench_median(err, n) : 0;
  *signed_median = n ? bench_median(sgn, n) : 0;
  return n;
}

/* Each call's own prediction (its plan, made just before it, the host's
 * hand-off state probed for it as the library does) against that call's
 * time: per shape, the median over its timings (all of them with slow < 0,
 * else those in one state, shapes with two or more) of predicted /
 * measured, and that median's distance from 1; the median |error| and
 * signed error over shapes, and how many shapes. The table's figure sets
 * the median of a shape's predictions against the median of its times
 * (of both states, where the host moved between passes); this one sets
 * what the library told each call against what that call took. */
static int call_errors(int ns, const double *t, const double *call_pred, const double *state,
                       int timed, int slow, double *median, double *signed_median) {
  double err[128], sgn[128];
  int n = 0;
  for (int i = 0; i < ns; i++) {
    double ratio[MAX_REPS];
    int nr = 0;
    for (int j = 0; j < timed; j++) {
      int at = i * MAX_REPS + j;
      if (slow < 0 || (state[at] > POAS_HANDOFF_SLOW) == slow)
        ratio[nr++] = call_pred[at] / t[at];
    }
    if (nr < (slow < 0 ? 1 : 2))
      continue;
    sgn[n] = bench_median(ratio, nr) - 1;
    err[n] = fabs(sgn[n]);
    n++;
  }
  *median = n ? bench_median(err, n) : 0;
  *signed_median = n ? bench_median(sgn, n) : 0;
  return n;
}

/* Opens the new file of the timings at `path` into bf: 0, or nonzero
 * having said why not. */
static int timings_open(bench_file *bf, const char *path) {
  char why[256];
  if (bench_file_open(bf, path, BENCH_OUTPUT_TIMINGS, why, sizeof why) == 0)
    return 0;
  fprintf(stderr, "accuracy: cannot write the timings %s: %s\n", path, why);
  return 1;
}

/* Whether a timings file could be written at `path`: 0, or nonzero having
 * said why not. The new file that tells is removed again. */
static int timings_check(const char *path) {
  bench_file bf;
  if (timings_open(&bf, path))
    return 1;
  bench_file_close(&bf, ECANCELED);
  return 0;
}

/* Every timed call as a CSV row into the file at `path`, which replaces
 * an earlier one only once written whole (bench_file_open): the shape,
 * the timing's number (pass by pass), measured and predicted seconds, and
 * the hand-off probe's ratio around it (state, or 0). Returns nonzero,
 * having said so, when the file could not be written. */
static int write_timings(const char *path, const shape *shapes, int ns, int timed,
                         const double *t, const double *call_pred, const double *state) {
  bench_file bf;
  if (timings_open(&bf, path))
    return 1;
  FILE *f = bf.f;
  fprintf(f, "dtype,op,m,n,k,timing,measured_s,predicted_s,handoff_ratio\n");
  for (int i = 0; i < ns; i++)
    for (int j = 0; j < timed; j++) {
      const shape *s = &shapes[i];
      int at = i * MAX_REPS + j;
      fprintf(f, "%s,%c%c,%lld,%lld,%lld,%d,%.9g,%.9g,%.4g\n", s->dtype ? "d" : "s",
              s->ta == POAS_TRANS ? 'T' : 'N', s->tb == POAS_TRANS ? 'T' : 'N',
              (long long)s->m, (long long)s->n, (long long)s->k, j, t[at], call_pred[at],
              state ? state[at] : 0.0);
    }
  int err = tool_flush_errno(f);
  if ((err = bench_file_close(&bf, err)) != 0) {
    fprintf(stderr, "accuracy: cannot write the timings %s: %s\n", path, strerror(err));
    return 1;
  }
  return 0;
}

static void usage(FILE *f) {
  fprintf(f,
          "Usage: accuracy [OPTIONS]\n"
          "Compare the profile's predicted GEMM times with measured ones on shapes\n"
          "calibration never measured, on one device; print a markdown table.\n\n"
          "  -d, --devices LIST  the device, as POAS_DEVICES would name it (default cpu:\n"
          "                      POAS_DEVICES itself is not read)\n"
          "  -r, --reps N        timed calls of each shape; the median is kept\n"
          "                      (1 to %d, default 6)\n"
          "  -p, --passes P      visit the shapes P times, each time in a new order,\n"
          "                      with a warm-up call and N/P timed ones, rounded\n"
          "                      down (1 to N, default 3)\n"
          "  -q, --quick         half the square shapes\n"
          "  -a, --adapt         predict as the library does by default: with the\n"
          "                      models scaled by what the context learned from its\n"
          "                      runs (POAS_ADAPT), each shape's prediction taken\n"
          "                      before its own first run\n"
          "  -t, --timings FILE  write every timed call to FILE as CSV: dtype, op, m,\n"
          "                      n, k, timing, measured and predicted seconds (the\n"
          "                      call's own plan), and the hand-off probe's ratio\n"
          "                      (sgemm on 2 threads over 1; 0 where not probed)\n"
          "  -h, --help          show this help\n"
          "  -V, --version       show the version\n\n"
          "The profile comes from POAS_PROFILE or the default path.\n"
          "Exit status: 0, 1 when the device is simulated or has no calibrated model,\n"
          "--timings cannot be written or a run failed, 2 on a usage error (a malformed\n"
          "--devices, or one that selects more than one device, among them).\n",
          MAX_REPS);
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {TOOL_LONGOPT_DEVICES,
                                           {"reps", required_argument, NULL, 'r'},
                                           {"passes", required_argument, NULL, 'p'},
                                           {"quick", no_argument, NULL, 'q'},
                                           {"adapt", no_argument, NULL, 'a'},
                                           {"timings", required_argument, NULL, 't'},
                                           TOOL_LONGOPTS_END};
  poas_options opts;
  poas_options_init(&opts);
  opts.devices = "cpu";
  /* The calibrated models are what is measured here unless --adapt: a
   * context that learned from one shape's run would carry it into the
   * next's prediction. */
  opts.no_adapt = 1;
  int reps = 6, passes = 3, quick = 0, adapting = 0, c, status;
  const tool_cli cli = {.prog = "accuracy",
                        .usage = usage,
                        .argc = argc,
                        .argv = argv,
                        .longopts = longopts,
                        .devices = &opts.devices};
  const char *passes_arg = NULL, *timings_path = NULL;
  tool_std_ready();
  while ((c = tool_getopt(&cli, "d:r:p:qat:hV")) != -1) {
    if (c == 'r') {
      long v;
      if (bench_parse_long(optarg, 1, MAX_REPS, &v))
        return bench_bad_arg("accuracy", "--reps (1 to " BENCH_XSTR(MAX_REPS) ")", optarg);
      reps = (int)v;
    } else if (c == 'p')
      passes_arg = optarg;
    else if (c == 'q')
      quick = 1;
    else if (c == 'a')
      adapting = 1, opts.no_adapt = 0;
    else if (c == 't') {
      if (!tool_file_named("accuracy", "timings", optarg))
        return 2;
      timings_path = optarg;
    } else if ((status = tool_shared_option(&cli, c, optarg)) != TOOL_GO_ON)
      return status;
  }
  if (optind < argc)
    return bench_bad_arg("accuracy", "argument", argv[optind]);
  if (passes_arg) { /* checked against --reps, wherever that came */
    long v;
    if (bench_parse_long(passes_arg, 1, reps, &v))
      return bench_bad_arg("accuracy", "--passes (1 to --reps)", passes_arg);
    passes = (int)v;
  } else
    passes = POAS__MIN(passes, reps);
  /* --timings is checked before the minutes of timing, as poas-bench
   * checks --csv: a file that could not be written failed only at the
   * end, and one whose writing failed was left cut short. */
  if (timings_path && timings_check(timings_path))
    return 1;
  poas_context *ctx;
  status = tool_context_open("accuracy", &opts, &ctx);
  if (status)
    return status;
  int ndev = poas_device_count(ctx);
  if (ndev > 1) { /* measuring the first alone would say nothing of the others */
    char ids[256] = "";
    for (int i = 0; i < ndev; i++) {
      poas_device_info d;
      size_t len = strlen(ids);
      if (poas_device_get(ctx, i, &d) == 0)
        snprintf(ids + len, sizeof ids - len, "%s%s", len ? ", " : "", d.id);
    }
    fprintf(stderr,
            "accuracy: --devices '%s' selects %d devices (%s); accuracy measures one: give one "
            "of them\n",
            opts.devices, ndev, ids);
    poas_finalize(ctx);
    return 2;
  }
  poas_profile_info pi;
  poas_profile_get(ctx, &pi);
  poas_device_info info;
  poas_device_get(ctx, 0, &info);
  if (info.kind == POAS_DEVICE_SIM) { /* alone, it runs in virtual time */
    fprintf(stderr,
            "accuracy: %s is simulated: alone, its calls take virtual time and there is nothing "
            "to measure; give a real device with --devices\n",
            info.id);
    poas_finalize(ctx);
    return 1;
  }
  if (!info.has_model) {
    fprintf(stderr, "accuracy: %s has no calibrated model (%s)\n", info.id, pi.problem);
    poas_finalize(ctx);
    return 1;
  }
  /* The scale: the cube root of the device's predicted 512^3 sgemm rate
   * over 1e11 flop/s (calibration's reference), rounded, from 1 to 4; 1
   * for the CPUs and PoCL devices of the CI machine class. */
  double t512 = 0;
  poas_predict_gemm(ctx, 0, POAS_FLOAT32, POAS_NO_TRANS, POAS_NO_TRANS, 512, 512, 512, &t512);
  double f = t512 > 0 ? round(cbrt(2.0 * 512 * 512 * 512 / t512 / 1e11)) : 1;
  int64_t scale = f < 1 ? 1 : f > 4 ? 4 : (int64_t)f;
  shape shapes[128];
  int ns = build_shapes(shapes, quick, scale);
  size_t elems = (size_t)(2200 * scale) * (size_t)(2200 * scale);
  float *sA = malloc(elems * 4), *sB = malloc(elems * 4), *sC = malloc(elems * 4);
  double *dA = malloc(elems * 8), *dB = malloc(elems * 8), *dC = malloc(elems * 8);
  if (!sA || !sB || !sC || !dA || !dB || !dC)
    return 1;
  /* Random values in [-1, 1), as calibration and poas-bench use: a GPU
   * near its power limit clocks higher on patterned data (fewer bits
   * toggle), and the kernels timed here ran 5-10% faster than calibration
   * predicted while the operands repeated a period of 5 and 7. */
  bench_fill(sA, POAS_FLOAT32, elems, 1);
  bench_fill(sB, POAS_FLOAT32, elems, 2);
  bench_fill(dA, POAS_FLOAT64, elems, 1);
  bench_fill(dB, POAS_FLOAT64, elems, 2);
  /* The same device opened again, for the kernel timings. */
  poas__devset set = {0};
  poas__device *kd = NULL;
  poas__mem kmem[3] = {{NULL}};
  if (!info.host_memory) {
    char err_text[256];
    if (poas__devset_open(info.id, &set, err_text, sizeof err_text) != 0) {
      fprintf(stderr, "accuracy: %s\n", err_text);
      return 1;
    }
    kd = set.dev[0];
    for (int i = 0; i < 3; i++)
      if (kd->be->mem_alloc(kd, elems * 8, &kmem[i])) {
        fprintf(stderr, "accuracy: device buffers on %s: %s\n", info.id, poas_error_detail());
        return 1;
      }
  }
  printf("device: %s (%s), profile: %s (written %s), sizes scaled by %lld\n", info.id,
         info.name, pi.path, pi.created, (long long)scale);
  printf("predictions: %s\n\n",
         adapting ? "the context's (--adapt): the models scaled by what it learned from the runs "
                    "of the shapes before, taken before each shape's first run"
                  : "the calibrated models alone");
  /* On the CPU, the host's state before and after the passes: thin calls
   * on several threads run up to 3x slower while it holds a core back. */
  if (info.host_memory) {
    bench_handoff before;
    bench_handoff_probe(&before);
    bench_handoff_print(stdout, "accuracy", "before the passes", &before);
    printf("\n");
  }
  if (kd) {
    printf("| dtype | op | m | n | k | kernel ms | kernel measured ms | kernel error | "
           "predicted ms | measured ms | error |\n");
    printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  } else {
    printf("| dtype | op | m | n | k | kernel ms | predicted ms | measured ms | error |\n");
    printf("|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
  }
  double err[128], kerr[128], kmeas[128];
  /* The kernels first, all of them, in the sustained regime calibration
   * timed them in (poas__gemm_sustain): seconds of work before each dtype's
   * first shape and a little before each shape. Timed between the
   * end-to-end runs, which leave the GPU mostly waiting on copies, they
   * ran in a cooler regime, up to 1.19x faster than calibration saw the
   * same GEMMs. */
  for (int i = 0; kd && i < ns; i++) {
    const shape *s = &shapes[i];
    int first = i == 0 || s->dtype != shapes[i - 1].dtype;
    /* The kernel's operands, of the dtype about to be timed. */
    if (first) {
      size_t bytes = elems * (s->dtype == POAS_FLOAT64 ? 8 : 4);
      poas__copy2d whole = {bytes, 1, bytes, bytes, 0, 0};
      const void *src[3] = {s->dtype == POAS_FLOAT64 ? (void *)dA : (void *)sA,
                            s->dtype == POAS_FLOAT64 ? (void *)dB : (void *)sB,
                            s->dtype == POAS_FLOAT64 ? (void *)dA : (void *)sA};
      for (int j = 0; j < 3; j++)
        if (kd->be->copy_h2d(kd, 0, kmem[j], src[j], &whole) || kd->be->lane_sync(kd, 0)) {
          fprintf(stderr, "accuracy: copy to %s: %s\n", info.id, poas_error_detail());
          return 1;
        }
    }
    if (poas__gemm_sustain(kd, kernel_lane(kd), s->dtype, kmem[0], kmem[1], kmem[2], elems * 4,
                           first ? 2.0 : 0.002)) {
      fprintf(stderr, "accuracy: GEMM on %s: %s\n", info.id, poas_error_detail());
      return 1;
    }
    timed_call on_device = {ctx, s, NULL, NULL, NULL, kd, kmem[0], kmem[1], kmem[2]};
    kmeas[i] = median_time(&on_device, reps, NULL, NULL, NULL);
  }
  int per_pass = reps / passes, timed = per_pass * passes; /* timed <= reps */
  void *const op[2][3] = {{sA, sB, sC}, {dA, dB, dC}};
  static double t[128 * MAX_REPS];
  double pred_s[128], noise[128], signed_err[128];
  /* The hand-off state of every timing, on a host whose calls run on
   * several threads (bench_handoff_now; 0 elsewhere). */
  static double state[128 * MAX_REPS], visit_pred[128 * MAX_REPS], call_pred[128 * MAX_REPS];
  int tag_state = info.host_memory && bench_handoff_now() > 0;
  time_in_passes(ctx, shapes, ns, op, passes, per_pass, adapting, t, pred_s, visit_pred,
                 call_pred, tag_state ? state : NULL);
  if (timings_path && write_timings(timings_path, shapes, ns, timed, t, call_pred,
                                    tag_state ? state : NULL))
    return 1;
  /* Each call's own prediction against it, before the table's medians
   * reorder t: over all calls, then by state. */
  int calls[3] = {0, 0, 0};
  double call_err[3][2];
  for (int v = 0; v < (tag_state ? 3 : 1); v++)
    calls[v] = call_errors(ns, t, call_pred, state, timed, v - 1, &call_err[v][0],
                           &call_err[v][1]);
  /* Each visit's own prediction against its timings, before the table's
   * medians reorder t: over all visits, then by state. */
  int visits[3] = {0, 0, 0};
  double visit_err[3][2];
  for (int v = 0; adapting && v < (tag_state ? 3 : 1); v++)
    visits[v] = visit_errors(ns, passes, per_pass, t, state, visit_pred, v - 1, &visit_err[v][0],
                             &visit_err[v][1]);
  bench_handoff after = {0};
  if (info.host_memory)
    bench_handoff_probe(&after);
  /* The error in each state, before the table's medians reorder t. */
  int slow_timings = 0, in_state[2] = {0, 0};
  double state_err[2][2];
  for (int i = 0; tag_state && i < ns; i++)
    for (int j = 0; j < timed; j++)
      slow_timings += state[i * MAX_REPS + j] > POAS_HANDOFF_SLOW;
  for (int slow = 0; tag_state && slow < 2; slow++)
    in_state[slow] = error_in_state(ns, t, state, timed, pred_s, call_pred, adapting, slow,
                                    &state_err[slow][0], &state_err[slow][1]);
  for (int i = 0; i < ns; i++) {
    const shape *s = &shapes[i];
    double kernel = 0, *ti = &t[i * MAX_REPS];
    double meas = bench_median(ti, timed), pred = pred_s[i];
    noise[i] = poas__timing_noise(ti, timed);
    poas_predict_gemm(ctx, 0, s->dtype, s->ta, s->tb, s->m, s->n, s->k, &kernel);
    signed_err[i] = (pred - meas) / meas;
    err[i] = fabs(signed_err[i]);
    printf("| %s | %c%c | %lld | %lld | %lld | %.4g | ", s->dtype ? "d" : "s",
           s->ta == POAS_TRANS ? 'T' : 'N', s->tb == POAS_TRANS ? 'T' : 'N', (long long)s->m,
           (long long)s->n, (long long)s->k, 1e3 * kernel);
    if (kd) {
      kerr[i] = fabs(kernel - kmeas[i]) / kmeas[i];
      printf("%.4g | %.1f%% | ", 1e3 * kmeas[i], 100 * kerr[i]);
    }
    printf("%.4g | %.4g | %.1f%% |\n", 1e3 * pred, 1e3 * meas, 100 * err[i]);
    fflush(stdout);
  }
  if (kd) {
    double km = bench_median(kerr, ns);
    printf("\nkernel alone (operands in device memory): median |model - measured| / measured: "
           "%.2f%%, max: %.2f%%",
           100 * km, 100 * kerr[ns - 1]);
    for (int i = 0; i < 3; i++)
      kd->be->mem_free(kd, kmem[i]);
    poas__devset_close(&set);
  }
  /* By kind of shape, before the medians below reorder err and signed_err:
   * a machine whose speed has moved since calibration shows in every kind
   * alike, while a model that misses a kind shows in that kind alone (on
   * the Intel CI VM, squares read 3-15% quicker than predicted in a run
   * whose 12-row sgemm read 17-23% slower). */
  static const char *const kinds[3] = {"squares", "thin (48 rows or columns at most)",
                                       "the rest"};
  double kind_err[3][128], kind_signed[3][128];
  int in_kind[3] = {0, 0, 0};
  for (int i = 0; i < ns; i++) {
    const shape *s = &shapes[i];
    int kind = s->m == s->n && s->n == s->k ? 0 : (s->m <= 48 || s->n <= 48) ? 1 : 2;
    kind_err[kind][in_kind[kind]] = err[i];
    kind_signed[kind][in_kind[kind]++] = signed_err[i];
  }
  double median = bench_median(err, ns);
  /* The 90th percentile by nearest rank: the smallest error that 90% of
   * the shapes are within, the ceil(0.9 ns)-th. err[ns * 9 / 10] is that
   * for the 96 shapes, but the 73rd of --quick's 80, where 72 are 90%. */
  int p90 = (ns * 9 + 9) / 10 - 1;
  printf("\nshapes: %d, median |predicted - measured| / measured: %.2f%%, 90th percentile: "
         "%.2f%%, max: %.2f%%\n",
         ns, 100 * median, 100 * err[p90], 100 * err[ns - 1]);
  /* Noise is not measured from fewer than three timings: "-", where 0.00%
   * claimed a quiet machine. */
  char noise_text[32] = "-";
  if (timed >= 3)
    snprintf(noise_text, sizeof noise_text, "%.2f%%", 100 * bench_median(noise, ns));
  printf("median (predicted - measured) / measured: %+.2f%%; timing noise (median over shapes "
         "of the median |one timing - the shape's median| / median, %d timings in %d passes): "
         "%s\n",
         100 * bench_median(signed_err, ns), timed, passes, noise_text);
  printf("by kind of shape:");
  for (int k = 0, said = 0; k < 3; k++)
    if (in_kind[k])
      printf("%s %s, %d shapes: median |error| %.2f%%, signed %+.2f%%", said++ ? ";" : "",
             kinds[k], in_kind[k], 100 * bench_median(kind_err[k], in_kind[k]),
             100 * bench_median(kind_signed[k], in_kind[k]));
  printf("\n");
  if (info.host_memory)
    bench_handoff_print(stdout, "accuracy", "after the passes", &after);
  if (tag_state) {
    printf("hand-off state, probed between visits: %d of %d timings met slow hand-offs\n",
           slow_timings, ns * timed);
    for (int slow = 0; slow < 2; slow++)
      if (in_state[slow])
        printf("  the timings in the %s state alone (%d shapes with two or more): median "
               "|predicted - measured| / measured %.2f%%, signed %+.2f%%\n",
               slow ? "slow" : "quick", in_state[slow], 100 * state_err[slow][0],
               100 * state_err[slow][1]);
  }
  printf("each call's own prediction (its plan, made just before it) against that call: "
         "median over shapes of |median(predicted / measured) - 1| %.2f%%, signed %+.2f%% "
         "(%d shapes)\n",
         100 * call_err[0][0], 100 * call_err[0][1], calls[0]);
  for (int v = 1; v < 3; v++)
    if (calls[v])
      printf("  the calls in the %s state (shapes with two or more): %.2f%%, signed %+.2f%% "
             "(%d shapes)\n",
             v == 2 ? "slow" : "quick", 100 * call_err[v][0], 100 * call_err[v][1], calls[v]);
  if (visits[0]) {
    printf("each visit's own prediction (its warm-up call's plan) against its %d timed calls: "
           "median |predicted - measured| / measured %.2f%%, signed %+.2f%% (%d visits)\n",
           per_pass, 100 * visit_err[0][0], 100 * visit_err[0][1], visits[0]);
    for (int v = 1; v < 3; v++)
      if (visits[v])
        printf("  the visits in the %s state: %.2f%%, signed %+.2f%% (%d visits)\n",
               v == 2 ? "slow" : "quick", 100 * visit_err[v][0], 100 * visit_err[v][1],
               visits[v]);
  }
  free(sA);
  free(sB);
  free(sC);
  free(dA);
  free(dB);
  free(dC);
  poas_finalize(ctx);
  return tool_stdout_status("accuracy", 0);
}
