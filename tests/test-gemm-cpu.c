/* test-gemm-cpu.c: the CPU backend (OpenBLAS) against the reference, with
 * all cores and with one thread. */
#define _GNU_SOURCE /* pthread_getaffinity_np, CPU_EQUAL */
#include "gemm-cases.h"
#include "devices/device.h"

#include <cblas.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Every cblas_sgemm the library makes comes through here (the program's
 * definition is the one the library links to), which notes on the calling
 * thread the OpenBLAS thread count the call began with. */
static _Thread_local int sgemm_threads = -1;

void cblas_sgemm(OPENBLAS_CONST enum CBLAS_ORDER order, OPENBLAS_CONST enum CBLAS_TRANSPOSE ta,
                 OPENBLAS_CONST enum CBLAS_TRANSPOSE tb, OPENBLAS_CONST blasint m,
                 OPENBLAS_CONST blasint n, OPENBLAS_CONST blasint k, OPENBLAS_CONST float alpha,
                 OPENBLAS_CONST float *a, OPENBLAS_CONST blasint lda, OPENBLAS_CONST float *b,
                 OPENBLAS_CONST blasint ldb, OPENBLAS_CONST float beta, float *c,
                 OPENBLAS_CONST blasint ldc) {
  typedef void (*sgemm_fn)(OPENBLAS_CONST enum CBLAS_ORDER, OPENBLAS_CONST enum CBLAS_TRANSPOSE,
                           OPENBLAS_CONST enum CBLAS_TRANSPOSE, OPENBLAS_CONST blasint,
                           OPENBLAS_CONST blasint, OPENBLAS_CONST blasint, OPENBLAS_CONST float,
                           OPENBLAS_CONST float *, OPENBLAS_CONST blasint, OPENBLAS_CONST float *,
                           OPENBLAS_CONST blasint, OPENBLAS_CONST float, float *,
                           OPENBLAS_CONST blasint);
  static _Atomic(sgemm_fn) real;
  sgemm_fn f = atomic_load(&real);
  if (!f) {
    f = (sgemm_fn)(uintptr_t)dlsym(RTLD_NEXT, "cblas_sgemm");
    atomic_store(&real, f);
  }
  sgemm_threads = openblas_get_num_threads();
  f(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* Two contexts whose cpu devices run on different thread counts (1 and
 * all), each calling from its own thread at once: each call runs on its
 * own device's count. OpenBLAS's count is the process's, and a call once
 * ran on the one the other context had just set (3 to 5 of 40-60 square
 * calls of cpu:threads=1 ran on two threads). A context of one cpu device
 * runs a GEMM on the caller's thread, whose calls the interposer tells. */
enum { LEASE_CALLS = 60, LEASE_N = 160 };

typedef struct lease_run {
  const char *devices;
  int want, rc, off_count, seen;
  pthread_barrier_t *start;
} lease_run;

static void *lease_calls(void *arg) {
  lease_run *r = arg;
  static float a[LEASE_N * LEASE_N], b[LEASE_N * LEASE_N];
  float *c = malloc(sizeof *c * LEASE_N * LEASE_N);
  poas_context *ctx = test_open(r->devices);
  pthread_barrier_wait(r->start);
  if (!ctx || !c) {
    r->rc = -1;
    free(c);
    poas_finalize(ctx);
    return NULL;
  }
  for (int i = 0; i < LEASE_CALLS && !r->rc; i++) {
    sgemm_threads = -1;
    r->rc = poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, LEASE_N, LEASE_N,
                       LEASE_N, 1, a, LEASE_N, b, LEASE_N, 0, c, LEASE_N);
    r->seen += sgemm_threads >= 0;
    r->off_count += sgemm_threads >= 0 && sgemm_threads != r->want;
  }
  free(c);
  poas_finalize(ctx);
  return NULL;
}

TEST(contexts_on_different_thread_counts_keep_their_own) {
  int all = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (all < 2)
    SKIP("one CPU: every context runs on one thread");
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, 2);
  lease_run runs[2] = {{.devices = "cpu:threads=1", .want = 1, .start = &start},
                       {.devices = "cpu", .want = all, .start = &start}};
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    CHECK(pthread_create(&t[i], NULL, lease_calls, &runs[i]) == 0);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  pthread_barrier_destroy(&start);
  for (int i = 0; i < 2; i++) {
    CHECK_MSG(runs[i].rc == 0, "%s: %s", runs[i].devices, poas_error_detail());
    /* The calls were seen: else the test proves nothing. */
    CHECK_MSG(runs[i].seen == LEASE_CALLS, "%s: %d of %d calls seen", runs[i].devices,
              runs[i].seen, LEASE_CALLS);
    CHECK_MSG(runs[i].off_count == 0, "%s: %d of %d calls ran on another thread count",
              runs[i].devices, runs[i].off_count, LEASE_CALLS);
  }
  return 0;
}

/* OpenBLAS's thread count is the process's: a context's calls set it, and
 * closing the last cpu device gives back the count the program had, which
 * its own cblas calls go on with. After a context of cpu:threads=1 it
 * once stayed 1. */
TEST(closing_gives_back_openblas_thread_count) {
  openblas_set_num_threads(2);
  int before = openblas_get_num_threads();
  if (before < 2)
    SKIP("OpenBLAS runs on one thread here");
  for (int nested = 0; nested < 2; nested++) {
    poas_context *ctx = test_open("cpu:threads=1");
    poas_context *other = nested ? test_open("cpu") : NULL;
    CHECK(ctx && (other || !nested));
    static float a[64 * 64], b[64 * 64], c[64 * 64];
    CHECK_OK(poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 64, 64, 64, 1, a, 64, b,
                        64, 0, c, 64));
    CHECK(openblas_get_num_threads() == 1);
    poas_finalize(ctx);
    CHECK_MSG(!nested || openblas_get_num_threads() == 1, "a cpu device still open: %d",
              openblas_get_num_threads());
    poas_finalize(other);
    CHECK_MSG(openblas_get_num_threads() == before, "%d threads after poas_finalize, not %d",
              openblas_get_num_threads(), before);
  }
  return 0;
}

TEST(cpu_all_threads) { return gemm_cases_run("cpu", 1); }
TEST(cpu_one_thread) { return gemm_cases_run("cpu:threads=1", 0); }
TEST(cpu_unpinned) { return gemm_cases_run("cpu:pin=0", 0); }

/* A CPU-only GEMM runs on the caller's thread (schedule/run.c), and the CPU
 * device binds the thread that calls BLAS to its cores: the caller's own
 * binding must come back, here with the device on one core. */
TEST(caller_keeps_its_cpu_binding) {
  cpu_set_t before, after;
  CPU_ZERO(&before);
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  for (long i = 0; i < ncpu && i < CPU_SETSIZE; i++)
    CPU_SET((int)i, &before);
  if (ncpu < 2 || pthread_setaffinity_np(pthread_self(), sizeof before, &before) != 0)
    SKIP("one CPU, or no binding to every CPU: a binding to one core changes nothing");
  poas_context *ctx = test_open("cpu:threads=1");
  CHECK(ctx);
  float a[64 * 64], b[64 * 64], c[64 * 64];
  for (int i = 0; i < 64 * 64; i++)
    a[i] = b[i] = 1.0f, c[i] = NAN;
  CHECK_OK(poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 64, 64, 64, 1, a, 64, b,
                      64, 0, c, 64));
  CHECK(c[0] == 64 && c[64 * 64 - 1] == 64);
  CHECK(pthread_getaffinity_np(pthread_self(), sizeof after, &after) == 0);
  CHECK_MSG(CPU_EQUAL(&before, &after), "the caller's binding went from %d CPUs to %d",
            CPU_COUNT(&before), CPU_COUNT(&after));
  poas_finalize(ctx);
  return 0;
}

/* A process bound to some cores (an MPI rank, by mpirun; taskset) keeps
 * the cpu device on them: on the last core, the device has one core, and
 * it is that one (its threads need no binding beyond the caller's), where
 * it used to take the machine's first core and two such processes shared
 * core 0 at half speed each. A second thread is refused: there is no
 * second core to run it on. */
TEST(cpu_device_stays_on_the_cores_the_process_may_use) {
  void *saved = test_bind_last_cpu();
  if (!saved)
    SKIP("one CPU, or the last one not ours to bind to");
  poas__devset set;
  char err[256];
  int rc = poas__devset_open("cpu", &set, err, sizeof err);
  int cores = rc ? -1 : set.dev[0]->info.cores, binds = rc ? -1 : set.dev[0]->binds_caller;
  if (!rc)
    poas__devset_close(&set);
  int rc2 = poas__devset_open("cpu:threads=2", &set, err, sizeof err);
  if (!rc2)
    poas__devset_close(&set);
  CHECK(test_restore_cpus(saved) == 0);
  CHECK_MSG(rc == 0, "%s", err);
  CHECK_MSG(cores == 1, "the device took %d cores of the one it may use", cores);
  CHECK_MSG(binds == 0, "the device binds its threads away from the one core it may use");
  CHECK_MSG(rc2 == POAS_ESPEC, "threads=2 on one core: %s", rc2 ? poas_strerror(rc2) : "accepted");
  return 0;
}

/* A plan that gives everything to one device, which then fails: the CPU,
 * left out of the plan, takes the work over and C is right. The failing
 * device is a fast simulated one (it computes nothing, so every element of
 * C that is right was computed by the CPU). */
TEST(cpu_takes_over_when_the_plans_only_device_fails) {
  const char *devices = "cpu,sim:rate=1e13:drate=1e13:bandwidth=1e13:latency=0";
  enum { N = 384 };
  poas_context *ctx = test_open(devices);
  CHECK(ctx);
  poas_plan plan;
  CHECK_OK(poas_plan_gemm(ctx, POAS_FLOAT64, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, N, N,
                          N, &plan));
  if (plan.ndevices != 1 || strcmp(plan.dev[0].id, "sim0") != 0) {
    poas_finalize(ctx);
    SKIP("the plan does not give sim0 all the work here");
  }
  static double a[N * N], b[N * N], c[N * N], ref[N * N];
  for (int i = 0; i < N * N; i++) {
    a[i] = (double)(i % 7) - 3, b[i] = (double)(i % 5) - 2;
    c[i] = NAN;
  }
  cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1, a, N, b, N, 0, ref, N);
  setenv("POAS_FAULT", "sim0:after=0", 1);
  int rc = poas_dgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, N, N, N, 1, a, N, b, N,
                      0, c, N);
  unsetenv("POAS_FAULT");
  CHECK_MSG(rc == 0, "%s: %s", poas_strerror(rc), poas_error_detail());
  poas_report rep;
  CHECK_OK(poas_last_report(ctx, &rep));
  CHECK(rep.faults == 1 && rep.dev[1].failed && rep.dev[0].share == 1);
  /* Integer-valued operands: the products and sums are exact in double. */
  for (int i = 0; i < N * N; i++)
    CHECK_MSG(c[i] == ref[i], "c[%d] = %g, expected %g", i, c[i], ref[i]);
  poas_finalize(ctx);
  return 0;
}

/* A device that fails after some of its tiles were copied back into C: the
 * tiles it finished are kept, and the CPU computes the rest of its part,
 * whatever beta. The simulated device has room for B and a few of A's rows
 * at a time, so its part runs as several tiles; its operation number
 * `after` fails, for each `after` until one falls past its last operation:
 * synchronous calls under static and guided, and asynchronous ones (a
 * task's worker runs them) under static. The sim computes and copies
 * nothing, so its finished tiles keep C's poison,
 * and every element of C is either the CPU's exact result or untouched:
 * as many of the first as the CPU's share says. Returns 0 when checked,
 * PAST_THE_END when sim0 had no operation `after`, 1 when a check failed. */
enum { PAST_THE_END = 2 };
static int check_failing_after(poas_context *ctx, int after, double beta, int async, int *kept) {
  enum { N = 384 };
  static double a[N * N], b[N * N], c[N * N], ref[N * N];
  if (!*kept) {
    for (int i = 0; i < N * N; i++)
      a[i] = (double)(i % 7) + 1, b[i] = (double)(i % 5) + 1;
    cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1, a, N, b, N, 0, ref, N);
  }
  /* Every element of A B is a whole number of at least N, so no result
   * with beta 0 or 1 is the poison. */
  const double poison = 0.5;
  for (int i = 0; i < N * N; i++)
    c[i] = poison;
  char fault[64];
  snprintf(fault, sizeof fault, "sim0:after=%d", after);
  setenv("POAS_FAULT", fault, 1);
  int rc;
  if (async) { /* the same through a task, whose worker runs it */
    poas_task *t = NULL;
    rc = poas_dgemm_async(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, N, N, N, 1, a, N, b, N,
                          beta, c, N, &t);
    if (!rc)
      rc = poas_task_wait(t);
  } else {
    rc = poas_dgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, N, N, N, 1, a, N, b, N, beta,
                    c, N);
  }
  unsetenv("POAS_FAULT");
  CHECK_MSG(rc == 0, "beta %g, %s: %s: %s", beta, fault, poas_strerror(rc), poas_error_detail());
  poas_report rep;
  CHECK_OK(poas_last_report(ctx, &rep));
  if (rep.faults == 0)
    return PAST_THE_END;
  CHECK(rep.faults == 1 && rep.dev[1].failed && !rep.dev[0].failed);
  int64_t right = 0;
  /* Integer-valued operands: the products and sums are exact in double. */
  for (int i = 0; i < N * N; i++) {
    int cpu = c[i] == ref[i] + beta * poison;
    CHECK_MSG(cpu || c[i] == poison, "beta %g, %s: c[%d] = %g, expected %g or untouched", beta,
              fault, i, c[i], ref[i] + beta * poison);
    right += cpu;
  }
  CHECK_MSG(fabs((double)right - rep.dev[0].share * N * N) < 0.5,
            "beta %g, %s: %lld elements computed, the CPU's share %g", beta, fault,
            (long long)right, rep.dev[0].share);
  *kept += rep.dev[1].share > 0 && rep.dev[1].share < 1;
  return 0;
}

static int sweep_failures(const char *policy, int async) {
  const char *devices = "cpu,sim:rate=1e13:drate=1e13:bandwidth=1e13:latency=0:memory=2Mi";
  enum { N = 384 };
  setenv("POAS_SCHED", policy, 1);
  poas_context *ctx = test_open(devices);
  unsetenv("POAS_SCHED");
  CHECK(ctx);
  poas_plan plan;
  CHECK_OK(poas_plan_gemm(ctx, POAS_FLOAT64, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, N, N, N,
                          &plan));
  if (plan.ndevices != 1 || strcmp(plan.dev[0].id, "sim0") != 0 || plan.dev[0].tiles < 3) {
    poas_finalize(ctx);
    SKIP("the plan does not give sim0 all the work in several tiles here");
  }
  int kept = 0, after, rc = 0;
  for (after = 0; after < 200 && !rc; after++) {
    rc = check_failing_after(ctx, after, 0, async, &kept);
    if (!rc)
      rc = check_failing_after(ctx, after, 1, async, &kept);
  }
  CHECK_MSG(rc == PAST_THE_END, "%s%s: sim0 still failed at operation %d, or a check failed",
            policy, async ? " (async)" : "", after);
  /* Some fault fell between two tiles' copies back, so some run above kept
   * what sim0 had finished and ran only the rest on the CPU. */
  CHECK_MSG(kept > 0, "%s%s: no fault of %d fell after a tile was written back", policy,
            async ? " (async)" : "", after);
  poas_finalize(ctx);
  return 0;
}

TEST(failure_after_partial_write_back) {
  int rc = sweep_failures("static", 0);
  if (!rc)
    rc = sweep_failures("guided", 0);
  return rc ? rc : sweep_failures("static", 1);
}

/* A C of few rows or columns runs on as many threads as the device's
 * table says (calibration fills it, a profile carries it; 0: all):
 * OpenBLAS's thread count after a call is the one the call ran on, and C
 * is right either way. Integer-valued operands: every sum is exact in
 * float. */
static int few_side_call(poas__device *d, poas_dtype dt, int64_t m, int64_t n, int *threads) {
  enum { MAXS = 64, K = 48 };
  static double a[MAXS * K], b[K * MAXS], c[MAXS * MAXS];
  float *fa = (float *)a, *fb = (float *)b, *fc = (float *)c;
  for (int i = 0; i < m * K; i++)
    dt ? (void)(a[i] = (double)(i % 7) - 3) : (void)(fa[i] = (float)(i % 7) - 3);
  for (int i = 0; i < K * n; i++)
    dt ? (void)(b[i] = (double)(i % 5) - 2) : (void)(fb[i] = (float)(i % 5) - 2);
  for (int i = 0; i < m * n; i++)
    dt ? (void)(c[i] = NAN) : (void)(fc[i] = NAN);
  poas__gemm_call g = {.dtype = dt, .transa = POAS_NO_TRANS, .transb = POAS_NO_TRANS,
                       .m = m, .n = n, .k = K, .alpha = 1, .beta = 0,
                       .a = {poas__mem_host(a), 0, m}, .b = {poas__mem_host(b), 0, K},
                       .c = {poas__mem_host(c), 0, m}};
  int rc = d->be->gemm(d, 0, &g);
  *threads = openblas_get_num_threads();
  for (int64_t j = 0; !rc && j < n; j++)
    for (int64_t i = 0; i < m; i++) {
      double want = 0;
      for (int l = 0; l < K; l++)
        want += (double)((i + l * m) % 7 - 3) * (double)((l + j * K) % 5 - 2);
      double got = dt ? c[i + j * m] : (double)fc[i + j * m];
      if (got != want) {
        fprintf(stderr, "  %sgemm %lld x %lld: c[%lld,%lld] = %g, expected %g\n", dt ? "d" : "s",
                (long long)m, (long long)n, (long long)i, (long long)j, got, want);
        return -1;
      }
    }
  return rc;
}

TEST(few_row_and_column_calls_run_on_the_threads_the_table_gives) {
  poas__devset set;
  char err[256];
  CHECK_OK(poas__devset_open("cpu", &set, err, sizeof err));
  poas__device *d = set.dev[0];
  int all = d->max_threads, threads = 0;
  if (all < 2) {
    poas__devset_close(&set);
    SKIP("one core: the device has no thread count to choose");
  }
  d->threads_by_side[POAS_FLOAT32][1][12] = 1; /* sgemm of 12 columns */
  d->threads_by_side[POAS_FLOAT64][0][6] = 1;  /* dgemm of 6 rows */
  /* The shorter side decides, columns on a tie: 12 x 6 is a call of 6
   * columns (all threads), 6 x 12 one of 6 rows, 6 x 6 one of 6 columns. */
  static const struct {
    poas_dtype dt;
    int64_t m, n;
    int on_one;
  } calls[] = {
      {POAS_FLOAT32, 64, 12, 1}, {POAS_FLOAT32, 64, 13, 0}, {POAS_FLOAT64, 64, 12, 0},
      {POAS_FLOAT64, 6, 64, 1},  {POAS_FLOAT32, 6, 64, 0},  {POAS_FLOAT64, 12, 6, 0},
      {POAS_FLOAT64, 6, 12, 1},  {POAS_FLOAT64, 6, 6, 0},
  };
  for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
    int want = calls[i].on_one ? 1 : all;
    CHECK_OK(few_side_call(d, calls[i].dt, calls[i].m, calls[i].n, &threads));
    CHECK_MSG(threads == want, "%sgemm %lld x %lld ran on %d threads, not %d",
              calls[i].dt == POAS_FLOAT64 ? "d" : "s", (long long)calls[i].m,
              (long long)calls[i].n, threads, want);
  }
  /* While the host is slow (handoff_slow), the slow state's table decides;
   * results are the same either way. */
  memcpy(d->threads_slow_by_side, d->threads_by_side, sizeof d->threads_slow_by_side);
  d->threads_slow_by_side[POAS_FLOAT32][0][16] = 1; /* sgemm of 16 rows */
  for (int slow = 0; slow < 2; slow++) {
    atomic_store(&d->handoff_slow, slow);
    CHECK_OK(few_side_call(d, POAS_FLOAT32, 16, 64, &threads));
    CHECK_MSG(threads == (slow ? 1 : all), "sgemm 16 x 64 %s ran on %d threads",
              slow ? "while slow" : "while quick", threads);
    CHECK_OK(few_side_call(d, POAS_FLOAT32, 64, 12, &threads));
    CHECK_MSG(threads == 1, "sgemm 64 x 12 ran on %d threads", threads);
  }
  poas__devset_close(&set);
  return 0;
}

/* The cpu device binds the caller's thread to its cores only where that
 * changes something: on every core this thread may use it binds nothing
 * (a binding is a system call, and the four a call made were a third of a
 * 16^3 sgemm's cost), on one core of several it does, and unpinned never.
 * Where pin=0 leaves a device of fewer cores unbound, its driver string
 * says so: a profile tells devices apart by it. */
TEST(cpu_binds_the_caller_only_on_fewer_cores) {
  cpu_set_t mine;
  CHECK(sched_getaffinity(0, sizeof mine, &mine) == 0);
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  if (CPU_COUNT(&mine) != ncpu)
    SKIP("this thread may not use every CPU");
  static const struct {
    const char *sel;
    int binds;    /* -1: only with two CPUs or more */
    int unpinned; /* its driver string ends in "pin=0"; -1 as binds */
  } cases[] = {{"cpu", 0, 0}, {"cpu:pin=0", 0, 0}, {"cpu:threads=1:pin=0", 0, -1},
               {"cpu:threads=1", -1, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    poas__devset set;
    char err[256];
    CHECK_MSG(poas__devset_open(cases[i].sel, &set, err, sizeof err) == 0, "%s: %s", cases[i].sel,
              err);
    int want = cases[i].binds >= 0 ? cases[i].binds : ncpu > 1;
    CHECK_MSG(set.dev[0]->binds_caller == want, "%s: binds_caller %d", cases[i].sel,
              set.dev[0]->binds_caller);
    const char *drv = set.dev[0]->info.driver;
    size_t len = strlen(drv);
    int unpinned = len >= 6 && strcmp(drv + len - 6, " pin=0") == 0;
    want = cases[i].unpinned >= 0 ? cases[i].unpinned : ncpu > 1;
    CHECK_MSG(unpinned == want, "%s: driver '%s'", cases[i].sel, drv);
    poas__devset_close(&set);
  }
  return 0;
}

/* OpenBLAS takes sizes and leading dimensions as 32-bit ints here: the
 * cpu device runs a call past them as blocks within them. With the limit
 * lowered to 7, every case of more than 7 rows, columns or depth, or of
 * a leading dimension over 7, runs that way, compact copies included. */
TEST(calls_past_the_blas_int_run_as_blocks) {
  int64_t saved = poas__cpu_blas_int_max;
  poas__cpu_blas_int_max = 7;
  int rc = gemm_cases_run("cpu", 0);
  poas__cpu_blas_int_max = saved;
  return rc;
}

/* The same at the real limit: 2 x 2 operands whose columns lie 2^32 + 2
 * elements apart (a sparse mapping: only the pages touched are memory),
 * which OpenBLAS alone takes as 2 apart, computing on the wrong elements. */
TEST(leading_dimensions_past_32_bits) {
  const int64_t ld = ((int64_t)1 << 32) + 2;
  size_t bytes = (size_t)(ld + 2) * sizeof(float);
  float *a =
      mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  float *c = a == MAP_FAILED ? MAP_FAILED
                             : mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (c == MAP_FAILED) {
    if (a != MAP_FAILED)
      munmap(a, bytes);
    SKIP("no sparse mapping of %zu bytes here", bytes);
  }
  poas_context *ctx = test_open("cpu");
  CHECK(ctx);
  const float b[4] = {5, 6, 7, 8}; /* column-major, ld 2 */
  a[0] = 1, a[1] = 2, a[ld] = 3, a[ld + 1] = 4;
  for (int t = 0; t < 2; t++) {
    poas_op ta = t ? POAS_TRANS : POAS_NO_TRANS;
    c[0] = c[1] = c[ld] = c[ld + 1] = NAN;
    c[2] = c[ld - 1] = -1; /* what the leading dimension skips: left alone */
    CHECK_OK(poas_sgemm(ctx, POAS_COL_MAJOR, ta, POAS_NO_TRANS, 2, 2, 2, 1, a, ld, b, 2, 0, c, ld));
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 2; j++) {
        float want = 0;
        for (int l = 0; l < 2; l++)
          want += (t ? a[l + i * ld] : a[i + l * ld]) * b[l + 2 * j];
        CHECK_MSG(c[i + j * ld] == want, "op(A) %c: c(%d,%d) = %g, expected %g", t ? 'T' : 'N', i,
                  j, c[i + j * ld], want);
      }
    CHECK(c[2] == -1 && c[ld - 1] == -1);
  }
  poas_finalize(ctx);
  munmap(a, bytes);
  munmap(c, bytes);
  return 0;
}

TEST_MAIN(TEST_ENTRY(closing_gives_back_openblas_thread_count),
          TEST_ENTRY(contexts_on_different_thread_counts_keep_their_own), TEST_ENTRY(cpu_all_threads), TEST_ENTRY(cpu_one_thread), TEST_ENTRY(cpu_unpinned),
          TEST_ENTRY(caller_keeps_its_cpu_binding),
          TEST_ENTRY(cpu_binds_the_caller_only_on_fewer_cores),
          TEST_ENTRY(cpu_takes_over_when_the_plans_only_device_fails),
          TEST_ENTRY(cpu_device_stays_on_the_cores_the_process_may_use),
          TEST_ENTRY(failure_after_partial_write_back),
          TEST_ENTRY(few_row_and_column_calls_run_on_the_threads_the_table_gives),
          TEST_ENTRY(calls_past_the_blas_int_run_as_blocks),
          TEST_ENTRY(leading_dimensions_past_32_bits))
