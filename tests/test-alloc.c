/* test-alloc.c: running out of memory. The program is linked with
 * -Wl,--wrap for every allocator our code calls (tests/local.am), so that
 * the allocations made from POAS's own objects, and only those (OpenBLAS,
 * jansson, hwloc and libc allocate through their own references), go
 * through the wrappers below. Each scenario is a short sequence of public
 * calls; the sweep runs it again and again, failing its first allocation,
 * then its second, and so on, until a run reaches no injected failure.
 * Every run must either succeed or fail with POAS_ENOMEM and a detail that
 * says what, leave the context fit to be used again and finalized, and
 * (in the sanitizer build) leak nothing.
 *
 * Each scenario is swept twice. First one allocation fails per run, the
 * rest succeed: a call that failed is retried once, and the retry must
 * succeed. Then every allocation from the Nth on fails: the calls must
 * fail properly, and poas_finalize must still release everything without
 * allocating. A run that crashes, hangs (alarm) or leaks fails the test,
 * whichever N it was. Allocations that fill a process-wide cache (the
 * interned thin-block tables) are made in the counting run, before the
 * sweep, and are not failed. POAS_TEST_ALLOC_VERBOSE=1
 * prints every run's outcome, POAS_TEST_ALLOC_KEEP_GOING=1 goes on past a
 * wrong one to report them all, and POAS_TEST_ALLOC_STACKS=1 (sanitizer
 * build) prints where each injected failure struck. */
#include "harness.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------ the failing allocator */

/* While armed, allocations are counted (from every thread: the engine's
 * workers allocate too), and the one numbered fail_at fails; with
 * `persistent`, every one from it on. */
static atomic_int armed, persistent;
static atomic_long counted, fail_at, injected_at;

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
char *__real_strdup(const char *s);
int __real_posix_memalign(void **p, size_t align, size_t size);
void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);
char *__wrap_strdup(const char *s);
int __wrap_posix_memalign(void **p, size_t align, size_t size);

static int show_stacks;
void __sanitizer_print_stack_trace(void) __attribute__((weak));

/* Counts one allocation and says whether it is the one to fail. */
static int fail_this(void) {
  if (!atomic_load(&armed))
    return 0;
  long n = atomic_fetch_add(&counted, 1) + 1, at = atomic_load(&fail_at);
  if (!at || n < at || (n > at && !atomic_load(&persistent)))
    return 0;
  long none = 0;
  if (!atomic_compare_exchange_strong(&injected_at, &none, n))
    return 1; /* a later one in the persistent mode: no stack for each */
  if (show_stacks && __sanitizer_print_stack_trace)
    __sanitizer_print_stack_trace();
  return 1;
}

void *__wrap_malloc(size_t size) {
  if (fail_this()) {
    errno = ENOMEM;
    return NULL;
  }
  return __real_malloc(size);
}

void *__wrap_calloc(size_t n, size_t size) {
  if (fail_this()) {
    errno = ENOMEM;
    return NULL;
  }
  return __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t size) {
  if (fail_this()) {
    errno = ENOMEM;
    return NULL;
  }
  return __real_realloc(p, size);
}

char *__wrap_strdup(const char *s) {
  if (fail_this()) {
    errno = ENOMEM;
    return NULL;
  }
  return __real_strdup(s);
}

int __wrap_posix_memalign(void **p, size_t align, size_t size) {
  if (fail_this())
    return ENOMEM;
  return __real_posix_memalign(p, align, size);
}

static void arm(long n) {
  atomic_store(&counted, 0);
  atomic_store(&injected_at, 0);
  atomic_store(&fail_at, n);
  atomic_store(&armed, 1);
}

/* Stops counting; returns the allocations counted. */
static long disarm(void) {
  atomic_store(&armed, 0);
  return atomic_load(&counted);
}

/* ----------------------------------------------------------- scenario steps */

/* A scenario returns 0 when its calls did what they must (succeeded, or
 * failed properly and succeeded on the retry), 1 when one did not, after
 * printing which and why. */
static long run_n; /* the allocation failed in this run, for messages */
/* A code a step may fail with besides POAS_ENOMEM; 0 for none. */
static int also_ok;

/* A call's status: 0, or POAS_ENOMEM with a detail after an injected
 * failure. Anything else is wrong. Returns 1 when it failed properly. */
static int failed_properly(int rc, const char *what, int *broken) {
  if (rc == 0)
    return 0;
  const char *detail = poas_error_detail();
  if ((rc != POAS_ENOMEM && rc != also_ok) || !atomic_load(&injected_at) || !detail[0]) {
    fprintf(stderr, "  allocation %ld failed: %s returned %s (%s), detail '%s'%s\n", run_n, what,
            poas_err_name(rc), poas_strerror(rc), detail,
            atomic_load(&injected_at) ? "" : " (no failure was injected)");
    *broken = 1;
  }
  return 1;
}

/* Runs `expr`; a proper failure is retried once, and the retry must
 * succeed where one allocation fails per run. In the persistent mode the
 * retry must fail properly too, and the scenario ends there; anything
 * else ends it at `out`, wrong. */
#define STEP(expr)                                                                \
  do {                                                                            \
    int broken_ = 0;                                                              \
    if (failed_properly((expr), #expr, &broken_)) {                               \
      if (!broken_ && atomic_load(&persistent)) {                                 \
        failed_properly((expr), #expr, &broken_);                                 \
        bad = broken_;                                                            \
        goto out;                                                                 \
      }                                                                           \
      int rc2_ = broken_ ? 0 : (expr);                                            \
      if (broken_ || rc2_) {                                                      \
        if (!broken_)                                                             \
          fprintf(stderr, "  allocation %ld failed: %s failed, then its retry: %s '%s'\n", \
                  run_n, #expr, poas_err_name(rc2_), poas_error_detail());        \
        bad = 1;                                                                  \
        goto out;                                                                 \
      }                                                                           \
    }                                                                             \
  } while (0)

#define EXPECT(cond)                                                              \
  do {                                                                            \
    if (!(cond)) {                                                                \
      fprintf(stderr, "  allocation %ld failed: %s:%d: %s\n", run_n, __FILE__,     \
              __LINE__, #cond);                                                   \
      bad = 1;                                                                    \
      goto out;                                                                   \
    }                                                                             \
  } while (0)

static int open_ctx(poas_context **ctx, const char *devices, const char *profile,
                    const char *trace) {
  poas_options o;
  poas_options_init(&o);
  o.devices = devices;
  o.profile = profile;
  o.no_profile = profile == NULL;
  o.trace = trace;
  return poas_init(ctx, &o);
}

/* Small enough that a run is quick, large enough to be split between two
 * devices. */
enum { M = 48, N = 40, K = 32 };
static float A[M * K], B[K * N], C[M * N], R[M * N];

static void fill_inputs(void) {
  test_fill(A, POAS_FLOAT32, M * K, 1);
  test_fill(B, POAS_FLOAT32, K * N, 2);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, A, K, B, N, 0.0f, R, N);
}

static int sgemm(poas_context *ctx) {
  return poas_sgemm(ctx, POAS_ROW_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, M, N, K, 1.0f, A, K, B, N,
                    0.0f, C, N);
}

static int matches_reference(void) {
  for (int i = 0; i < M * N; i++)
    if (!(fabsf(C[i] - R[i]) <= 1e-4f * (1 + fabsf(R[i]))))
      return 0;
  return 1;
}

static int plan(poas_context *ctx) {
  poas_plan p;
  return poas_plan_gemm(ctx, POAS_FLOAT32, POAS_ROW_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 512, 384,
                        256, &p);
}

/* A GEMM, its report and a plan on `devices`; C is checked against
 * OpenBLAS where every device computes (sims compute nothing). */
static int gemm_scenario(const char *devices, int computes, const char *trace) {
  int bad = 0;
  poas_context *ctx = NULL;
  STEP(open_ctx(&ctx, devices, NULL, trace));
  test_poison(C, POAS_FLOAT32, M * N);
  STEP(sgemm(ctx));
  EXPECT(!computes || matches_reference());
  poas_report rep;
  EXPECT(poas_last_report(ctx, &rep) == 0 && rep.m == M && rep.n == N && rep.k == K);
  STEP(plan(ctx));
out:
  poas_finalize(ctx);
  return bad;
}

/* Paths in the test's folder, made before any allocation is counted (the
 * harness's objects are wrapped too). */
static char trace_path[512], profile_path[512], replay_devices[1200];

static int sims(void) { return gemm_scenario("sim:rate=1e11,sim:rate=2e11", 0, trace_path); }

/* Replays of the EPYC pair's reference profile: loading it, each sim's
 * copy of its models, the CPU's replay on host memory and PoCL's
 * transposed B. */
static int replays(void) { return gemm_scenario(replay_devices, 0, trace_path); }

/* A run on one device takes the calling thread, unless it is traced:
 * then it goes through the engine, as every run on several devices
 * does. Both, here. */
static int cpu(void) {
  return gemm_scenario("cpu", 1, NULL) || gemm_scenario("cpu", 1, trace_path);
}

/* A GPU, where there is one (the fake CUDA of test-cuda-fake.sh runs this
 * test): traced, the run goes through the engine, whose copy pipeline
 * (allocate, copy in, GEMM, copy out, release) is where a node cancelled
 * for want of memory left the others to run on what it never produced.
 * Its allocation was cancelled, and the copy into its buffer that had no
 * edge to it went to address 0 (the fake aborted); a copy out whose watch
 * could not be recorded failed its device, and the run failed with
 * "every device failed" instead of POAS_ENOMEM. */
/* PoCL's CPU device, where there is one, alone and beside cpu:threads=1
 * on a core of its own (a sub-device): its discovery, when it had no
 * memory for its lists of platforms and devices, said "0 opencl devices
 * present" or "no such device" (POAS_ENODEV); a traced run goes through
 * the engine, as on the GPU. */
static int ocl(void) {
  return gemm_scenario("opencl0", 1, NULL) || gemm_scenario("opencl0", 1, trace_path) ||
         gemm_scenario("cpu:threads=1,opencl0:cores=1", 1, NULL);
}

static int gpu(void) {
  return gemm_scenario("cuda0", 1, NULL) || gemm_scenario("cuda0", 1, trace_path);
}

/* x[i] += 1 over the access. */
static void bump(void **buffers, void *arg) {
  float *x = buffers[0];
  for (size_t i = 0; i < *(size_t *)arg; i++)
    x[i] += 1;
}

/* C = A B and E = C D submitted asynchronously, a task of our own that
 * writes E after them, and waits. A failure inside a GEMM task, once it
 * runs, is reported by the wait for it (by poas_wait_all for the one
 * without a handle); there is no retrying that, and the scenario goes on
 * to finalize. */
static int tasks(void) {
  static float D[N * N], E[M * N];
  test_fill(D, POAS_FLOAT32, N * N, 3);
  int bad = 0;
  poas_context *ctx = NULL;
  poas_buffer *eb = NULL;
  poas_task *t1 = NULL, *t3 = NULL;
  size_t count = M * N;
  STEP(open_ctx(&ctx, "sim:rate=1e11,sim:rate=2e11", NULL, NULL));
  STEP(poas_buffer_register(ctx, E, sizeof E, &eb));
  STEP(poas_sgemm_async(ctx, POAS_ROW_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, M, N, K, 1.0f, A, K,
                        B, N, 0.0f, C, N, &t1));
  STEP(poas_sgemm_async(ctx, POAS_ROW_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, M, N, N, 1.0f, C, N,
                        D, N, 0.0f, E, N, NULL));
  poas_task_desc d = {.cpu = bump, .arg = &count, .naccess = 1};
  d.access[0] = (poas_task_access){eb, POAS_RW, 0, 0};
  STEP(poas_task_submit(ctx, &d, &t3));
  int broken = 0;
  int rc = poas_task_wait(t3);
  t3 = NULL;
  failed_properly(rc, "poas_task_wait(t3)", &broken);
  rc = poas_task_wait(t1);
  t1 = NULL;
  failed_properly(rc, "poas_task_wait(t1)", &broken);
  rc = poas_wait_all(ctx);
  failed_properly(rc, "poas_wait_all(ctx)", &broken);
  EXPECT(!broken);
  STEP(poas_buffer_unregister(eb));
out:
  poas_finalize(ctx);
  return bad;
}

/* A quick calibration of a sim written to a profile, a context of a sim
 * that takes its model from it, and one that names it as the machine's
 * profile (read, and unused: sims take no model from it). */
static int profile(void) {
  int bad = 0;
  poas_context *ctx = NULL;
  const char *path = profile_path;
  unlink(path);
  /* A sim of little memory calibrates in a few ms (one of the default
   * 16 GiB, in 45). */
  STEP(open_ctx(&ctx, "sim:rate=1e11:memory=16Mi", NULL, NULL));
  poas_calibrate_options o;
  poas_calibrate_options_init(&o);
  o.quick = 1;
  o.dtypes = 1 << POAS_FLOAT32;
  o.output = path;
  /* Calibration measures a device's memory by allocating until an
   * allocation fails: a sim's buffer record that cannot be allocated is a
   * device out of memory there, and the sweep finds too little of it. */
  also_ok = POAS_ETOOBIG;
  STEP(poas_calibrate(ctx, &o, NULL));
  also_ok = 0;
  poas_finalize(ctx);
  ctx = NULL;
  char devices[600];
  snprintf(devices, sizeof devices, "sim:profile=%s", path);
  STEP(open_ctx(&ctx, devices, NULL, NULL));
  poas_device_info info;
  EXPECT(poas_device_get(ctx, 0, &info) == 0 && info.has_model);
  STEP(plan(ctx));
  poas_finalize(ctx);
  ctx = NULL;
  STEP(open_ctx(&ctx, "sim", path, NULL));
  poas_profile_info pi;
  EXPECT(poas_profile_get(ctx, &pi) == 0 && pi.created[0] && !pi.loaded);
out:
  also_ok = 0;
  poas_finalize(ctx);
  return bad;
}

/* ------------------------------------------------------------------ the sweep */

/* No scenario here reaches this many allocations; a sweep that does has
 * found one that allocates without end (or a failure that never ends). */
#define MAX_SITES 5000

/* The order of three tasks on one buffer X when the submit of the middle
 * one runs out of memory: T1 reads X into Y, T2 doubles X, T3 adds 1 to
 * it. T3 must start after T1 has finished, whether T2 was submitted or
 * not; T1 holds X until T3 starts (or for 200 ms), so that a T3 left
 * unordered shows. T2's write covers T1's read, whose entry the engine
 * dropped before it recorded T2's: when that record could not grow, T2
 * was doomed (its submit still returned 0) and T3 found nothing to wait
 * for and ran beside T1. Only T2's submit is failed, one allocation per
 * run (or, with `persist`, every one from the Nth), which keeps the
 * sweep to a few runs. */
enum { XN = 64 };
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static int gate_open, t1_done, t3_early;

static void order_read(void **buffers, void *arg) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_nsec += 200000000;
  if (until.tv_nsec >= 1000000000)
    until.tv_sec++, until.tv_nsec -= 1000000000;
  pthread_mutex_lock(&gate_lock);
  while (!gate_open && pthread_cond_timedwait(&gate_cond, &gate_lock, &until) == 0)
    ;
  memcpy(arg, buffers[0], XN * sizeof(float));
  t1_done = 1;
  pthread_mutex_unlock(&gate_lock);
}

static void order_double(void **buffers, void *arg) {
  (void)arg;
  float *x = buffers[0];
  for (int i = 0; i < XN; i++)
    x[i] *= 2;
}

static void order_bump(void **buffers, void *arg) {
  (void)arg;
  pthread_mutex_lock(&gate_lock);
  t3_early = !t1_done;
  gate_open = 1;
  pthread_cond_broadcast(&gate_cond);
  pthread_mutex_unlock(&gate_lock);
  float *x = buffers[0];
  for (int i = 0; i < XN; i++)
    x[i] += 1;
}

static int task_order(int persist) {
  static float X[XN], Y[XN];
  const char *mode = persist ? "from it on" : "alone";
  atomic_store(&persistent, persist);
  long n;
  int bad = 0;
  for (n = 1; n <= MAX_SITES; n++) {
    run_n = n;
    for (int i = 0; i < XN; i++)
      X[i] = (float)i, Y[i] = -1;
    gate_open = t1_done = t3_early = 0;
    poas_context *ctx = NULL;
    poas_buffer *xb = NULL;
    poas_task *t2 = NULL;
    if (open_ctx(&ctx, "sim", NULL, NULL) || poas_buffer_register(ctx, X, sizeof X, &xb)) {
      fprintf(stderr, "  no context: %s\n", poas_error_detail());
      poas_finalize(ctx);
      return 1;
    }
    poas_task_desc d = {.cpu = order_read, .arg = Y, .naccess = 1};
    d.access[0] = (poas_task_access){xb, POAS_R, 0, 0};
    int rc1 = poas_task_submit(ctx, &d, NULL);
    d.cpu = order_double, d.arg = NULL, d.access[0].mode = POAS_RW;
    arm(n);
    int rc2 = poas_task_submit(ctx, &d, &t2);
    disarm();
    int injected = atomic_load(&injected_at) != 0, broken = 0;
    failed_properly(rc2, "poas_task_submit(T2)", &broken);
    d.cpu = order_bump;
    int rc3 = poas_task_submit(ctx, &d, NULL);
    int rcw = poas_wait_all(ctx);
    /* A task whose submit succeeded runs. */
    int rc2w = rc2 ? 0 : poas_task_wait(t2);
    int wrong = 0;
    for (int i = 0; i < XN; i++)
      wrong += Y[i] != (float)i || X[i] != (float)(rc2 ? i : 2 * i) + 1;
    if (broken || rc1 || rc3 || rcw || rc2w || t3_early || wrong) {
      fprintf(stderr,
              "  allocation %ld failed %s: T2 submit %s, T1/T3 submits %s/%s, wait_all %s, "
              "T2 wait %s; T3 %s T1 finished; %d of %d values wrong\n",
              n, mode, poas_err_name(rc2), poas_err_name(rc1), poas_err_name(rc3),
              poas_err_name(rcw), poas_err_name(rc2w), t3_early ? "started before" : "after",
              wrong, 2 * XN);
      bad = 1;
    }
    poas_buffer_unregister(xb);
    poas_finalize(ctx);
    if (!injected)
      break;
  }
  fprintf(stderr, "  task order: each of T2's first %ld allocations failed in turn, %s\n", n - 1,
          mode);
  return bad;
}

static int verbose(void) {
  const char *v = getenv("POAS_TEST_ALLOC_VERBOSE");
  return v && *v && strcmp(v, "0") != 0;
}

/* Runs the scenario with no failure, to count its allocations (which
 * shows the wrapping took effect), then once per allocation failing it
 * (with `persist`, it and every one after it), until a run reaches no
 * injected failure. */
static int sweep(const char *name, int (*scenario)(void), int persist) {
  const char *mode = persist ? "from it on" : "alone";
  atomic_store(&persistent, persist);
  run_n = 0;
  arm(0);
  int bad = scenario();
  long total = disarm();
  if (bad)
    return 1;
  if (total == 0) {
    fprintf(stderr, "  %s counted no allocation: the --wrap flags did not take effect\n", name);
    return 1;
  }
  const char *go_on = getenv("POAS_TEST_ALLOC_KEEP_GOING");
  int keep_going = go_on && *go_on && strcmp(go_on, "0") != 0, wrong = 0;
  long n;
  for (n = 1; n <= MAX_SITES; n++) {
    run_n = n;
    arm(n);
    bad = scenario();
    long reached = disarm();
    if (verbose())
      fprintf(stderr, "  %s: allocation %ld of %ld failed %s: %s\n", name, n, reached, mode,
              bad ? "wrong" : "ok");
    wrong += bad;
    if (bad && !keep_going)
      return 1;
    if (!atomic_load(&injected_at))
      break;
  }
  if (wrong)
    return 1;
  if (n > MAX_SITES) {
    fprintf(stderr, "  %s still allocating after %d runs\n", name, MAX_SITES);
    return 1;
  }
  fprintf(stderr,
          "  %s: %ld allocations with none failed; each of the first %ld failed in turn, %s\n",
          name, total, n - 1, mode);
  return 0;
}

TEST(init_gemm_report_plan_on_sims) { return sweep("sims", sims, 0) || sweep("sims", sims, 1); }
TEST(init_gemm_report_plan_on_replays) {
  return sweep("replays", replays, 0) || sweep("replays", replays, 1);
}
/* Whether a context of `devices` opens (before any allocation is counted). */
static int opens(const char *devices) {
  poas_context *ctx = NULL;
  int rc = open_ctx(&ctx, devices, NULL, NULL);
  poas_finalize(ctx);
  return rc == 0;
}

TEST(init_gemm_report_plan_on_opencl) {
  if (!opens("opencl0"))
    SKIP("no opencl0");
  return sweep("opencl", ocl, 0) || sweep("opencl", ocl, 1);
}
TEST(init_gemm_report_plan_on_the_cpu) { return sweep("cpu", cpu, 0) || sweep("cpu", cpu, 1); }
TEST(gemm_on_a_gpu) {
  if (!opens("cuda0"))
    SKIP("no cuda0 (test-cuda-fake.sh runs this test on the fake CUDA)");
  return sweep("gpu", gpu, 0) || sweep("gpu", gpu, 1);
}
TEST(async_gemms_and_a_task) { return sweep("tasks", tasks, 0) || sweep("tasks", tasks, 1); }
TEST(task_order_when_a_submit_runs_out) { return task_order(0) || task_order(1); }
TEST(calibrate_write_and_load_a_profile) {
  return sweep("profile", profile, 0) || sweep("profile", profile, 1);
}

int main(int argc, char **argv) {
  static const test_entry tests[] = {
      TEST_ENTRY(init_gemm_report_plan_on_sims),
      TEST_ENTRY(init_gemm_report_plan_on_the_cpu),
      TEST_ENTRY(init_gemm_report_plan_on_replays),
      TEST_ENTRY(init_gemm_report_plan_on_opencl),
      TEST_ENTRY(gemm_on_a_gpu),
      TEST_ENTRY(async_gemms_and_a_task),
      TEST_ENTRY(task_order_when_a_submit_runs_out),
      TEST_ENTRY(calibrate_write_and_load_a_profile),
  };
  fill_inputs();
  const char *stacks = getenv("POAS_TEST_ALLOC_STACKS");
  show_stacks = stacks && *stacks && strcmp(stacks, "0") != 0;
  snprintf(trace_path, sizeof trace_path, "%s", test_tmp_path("trace.json"));
  snprintf(profile_path, sizeof profile_path, "%s", test_tmp_path("sim.json"));
  const char *pair = test_src_path("models/profiles/amd-epyc-2c-cpu1-opencl1.json");
  snprintf(replay_devices, sizeof replay_devices, "sim:profile=%s#cpu0,sim:profile=%s#opencl0",
           pair, pair);
  /* A hang shows as the test's failure, not as CI's timeout. */
  alarm(300);
  return test_run_all(tests, sizeof tests / sizeof tests[0], argc, argv);
}
