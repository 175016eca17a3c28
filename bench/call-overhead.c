/* call-overhead: where the fixed cost of one small GEMM call goes on a
 * device. Times, each as the median of many calls after warm-ups:
 *
 *   poas_sgemm       the whole public call, end to end (what an application
 *                    sees, and what calibration's dispatch_s measures)
 *   plan             poas_plan_gemm alone: predicting and optimising
 *   engine           creating and destroying the DAG engine (its threads
 *                    start with the first work)
 *   N threads        starting and joining as many threads as the engine may
 *                    issue to the device from, each making one device call
 *   events           creating, recording, waiting for and destroying one
 *                    device event, as the engine does per instruction
 *   direct           the same GEMM through the backend with no runtime
 *                    around it: copies in, the GEMM, the copy out, on the
 *                    lanes the pipeline uses, and one wait (the floor)
 *
 *   bench/call-overhead [--devices ID] [-n N] [--calls C]
 * Defaults: the device POAS_DEVICES names first, else cuda0 when there is
 * one, else the first device; n = 64; 200 calls. A selection named but
 * malformed is a usage error (exit 2), not passed over for the default.
 * Prints one line per measurement in microseconds. */
#include "bench/cli.h"
#include "bench/timing.h"
#include "devices/device.h"
#include "poas.h"
#include "schedule/engine.h"
#include "tools/context-open.h"
#include "tools/shared-options.h"
#include "tools/stdout-check.h"

#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_CALLS 10000

static void print_median(const char *what, double *t, int n) {
  qsort(t, (size_t)n, sizeof *t, bench_cmp_double);
  printf("%-12s median %9.1f us   min %9.1f us   (%d calls)\n", what, 1e6 * t[n / 2], 1e6 * t[0],
         n);
}

static void usage(FILE *f) {
  fprintf(f,
          "Usage: call-overhead [OPTIONS]\n"
          "Break the fixed cost of one small n x n x n sgemm on a device into the public\n"
          "call, planning, the engine, thread starts, events and the same work issued\n"
          "directly; print each as the median of many calls, in microseconds.\n\n"
          "  -d, --devices ID  the device (default: the first POAS_DEVICES names, else\n"
          "                    cuda0 when there is one, else the first device)\n"
          "  -n, --n N         matrix size, 1 to 4096 (default 64)\n"
          "  -c, --calls C     calls per measurement, 1 to %d (default 200)\n"
          "  -h, --help        show this help\n"
          "  -V, --version     show the version\n",
          MAX_CALLS);
}

static void die(const char *what) {
  fprintf(stderr, "call-overhead: %s: %s\n", what, poas_error_detail());
  exit(1);
}

/* A fresh thread's first device call: an event made and dropped. */
static void *first_call(void *arg) {
  poas__device *d = arg;
  poas__event ev;
  if (d->be->event_create && d->be->event_create(d, &ev) == 0)
    d->be->event_destroy(d, &ev);
  return NULL;
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {TOOL_LONGOPT_DEVICES,
                                           {"n", required_argument, NULL, 'n'},
                                           {"calls", required_argument, NULL, 'c'},
                                           TOOL_LONGOPTS_END};
  const char *id = NULL;
  long n_arg = 64, calls_arg = 200;
  int c, status;
  const tool_cli cli = {.prog = "call-overhead",
                        .usage = usage,
                        .argc = argc,
                        .argv = argv,
                        .longopts = longopts,
                        .devices = &id};
  tool_std_ready();
  while ((c = tool_getopt(&cli, "d:n:c:hV")) != -1) {
    if (c == 'n') {
      if (bench_parse_long(optarg, 1, 4096, &n_arg))
        return bench_bad_arg("call-overhead", "-n (1 to 4096)", optarg);
    } else if (c == 'c') {
      if (bench_parse_long(optarg, 1, MAX_CALLS, &calls_arg))
        return bench_bad_arg("call-overhead", "--calls (1 to " BENCH_XSTR(MAX_CALLS) ")", optarg);
    } else if ((status = tool_shared_option(&cli, c, optarg)) != TOOL_GO_ON)
      return status;
  }
  if (optind < argc)
    return bench_bad_arg("call-overhead", "argument", argv[optind]);
  int n = (int)n_arg, calls = (int)calls_arg;
  poas_options o;
  poas_options_init(&o);
  o.devices = id;
  poas_context *ctx = NULL;
  if (!tool_devices_selection(id, NULL)) {
    o.devices = "cuda0";
    if (poas_init(&ctx, &o) != 0)
      ctx = NULL, o.devices = NULL; /* no cuda0 here: the first device */
  }
  /* A selection the user named is kept to: a malformed one was passed
   * over for the first device, which was then timed, exit 0. */
  status = ctx ? 0 : tool_context_open("call-overhead", &o, &ctx);
  if (status)
    return status;
  poas_device_info info;
  poas_device_get(ctx, 0, &info);
  /* --devices says which device to time: a list of several is a mistake,
   * not a choice of its first (POAS_DEVICES, which sets the default, may
   * name several). */
  if (id && poas_device_count(ctx) > 1) {
    fprintf(stderr, "call-overhead: --devices '%s' selects %d devices; name one\n", id,
            poas_device_count(ctx));
    poas_finalize(ctx);
    return 2;
  }
  if (poas_device_count(ctx) > 1) {
    poas_finalize(ctx);
    o.devices = info.id;
    if (poas_init(&ctx, &o) != 0)
      die("poas_init");
  }
  printf("device %s (%s), sgemm %d^3, %s profile\n", info.id, info.name, n,
         info.has_model ? "calibrated" : "no");
  size_t elems = (size_t)n * (size_t)n;
  float *A = calloc(elems, 4), *B = calloc(elems, 4), *C = calloc(elems, 4);
  static double t[MAX_CALLS];
  if (!A || !B || !C)
    return 1;

  for (int i = -10; i < calls; i++) {
    double t0 = bench_now();
    if (poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, n, n, n, 1, A, n, B, n, 0,
                   C, n))
      die("poas_sgemm");
    if (i >= 0)
      t[i] = bench_now() - t0;
  }
  print_median("poas_sgemm", t, calls);

  for (int i = -10; i < calls; i++) {
    poas_plan plan;
    double t0 = bench_now();
    if (poas_plan_gemm(ctx, POAS_FLOAT32, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, n, n, n,
                       &plan))
      die("poas_plan_gemm");
    if (i >= 0)
      t[i] = bench_now() - t0;
  }
  print_median("plan", t, calls);
  poas_finalize(ctx);

  /* The same device opened again, for what lies under the runtime. */
  poas__devset set = {0};
  char err[256];
  if (poas__devset_open(info.id, &set, err, sizeof err) != 0) {
    fprintf(stderr, "call-overhead: %s\n", err);
    return 1;
  }
  poas__device *d = set.dev[0];
  poas__engine_config ecfg = {.host_threads = 1};
  for (int i = -3; i < calls; i++) {
    poas__engine *e;
    double t0 = bench_now();
    if (poas__engine_create(&set, &ecfg, &e))
      die("engine");
    poas__engine_destroy(e);
    if (i >= 0)
      t[i] = bench_now() - t0;
  }
  print_median("engine", t, calls);

  /* What a run pays to start the engine's threads for the device: as many
   * fresh threads as it may issue from, each making one device call (a
   * CUDA runtime sets up per-thread state on a thread's first call). */
  int nthreads = d->issue_threads > 0 ? d->issue_threads : 1;
  for (int i = -3; i < calls; i++) {
    pthread_t th[16];
    int nt = nthreads < 16 ? nthreads : 16;
    double t0 = bench_now();
    for (int j = 0; j < nt; j++)
      if (pthread_create(&th[j], NULL, first_call, d))
        die("pthread_create");
    for (int j = 0; j < nt; j++)
      pthread_join(th[j], NULL);
    if (i >= 0)
      t[i] = bench_now() - t0;
  }
  char what[32];
  snprintf(what, sizeof what, "%d threads", nthreads < 16 ? nthreads : 16);
  print_median(what, t, calls);

  int lanes = d->nlanes;
  for (int i = -3; i < calls && d->be->event_create; i++) {
    poas__event ev;
    double t0 = bench_now();
    if (d->be->event_create(d, &ev) || d->be->event_record(d, lanes > 1 ? 1 : 0, &ev) ||
        d->be->event_sync(d, &ev))
      die("events");
    d->be->event_destroy(d, &ev);
    if (i >= 0)
      t[i] = bench_now() - t0;
  }
  print_median("events", t, calls);

  if (!info.host_memory) {
    poas__mem m[3];
    for (int i = 0; i < 3; i++)
      if (d->be->mem_alloc(d, elems * 4, &m[i]))
        die("mem_alloc");
    poas__copy2d whole = {elems * 4, 1, elems * 4, elems * 4, 0, 0};
    poas__gemm_call g = {POAS_FLOAT32, POAS_NO_TRANS, POAS_NO_TRANS, n, n, n, 1.0, 0.0,
                         {m[0], 0, n}, {m[1], 0, n}, {m[2], 0, n}};
    int in = 0, gl = lanes > 1 ? 1 : 0, out = lanes > 2 ? 2 : 0;
    for (int i = -10; i < calls; i++) {
      poas__event e1, e2;
      double t0 = bench_now();
      int rc = d->be->copy_h2d(d, in, m[0], A, &whole) || d->be->copy_h2d(d, in, m[1], B, &whole) ||
               d->be->event_create(d, &e1) || d->be->event_record(d, in, &e1) ||
               d->be->lane_wait(d, gl, &e1) || d->be->gemm(d, gl, &g) ||
               d->be->event_create(d, &e2) || d->be->event_record(d, gl, &e2) ||
               d->be->lane_wait(d, out, &e2) || d->be->copy_d2h(d, out, C, m[2], &whole) ||
               d->be->lane_sync(d, out);
      if (rc)
        die("direct");
      d->be->event_destroy(d, &e1);
      d->be->event_destroy(d, &e2);
      if (i >= 0)
        t[i] = bench_now() - t0;
    }
    print_median("direct", t, calls);
    for (int i = 0; i < 3; i++)
      d->be->mem_free(d, m[i]);
  }
  poas__devset_close(&set);
  free(A), free(B), free(C);
  return tool_stdout_status("call-overhead", 0);
}
