/* test-tasks.c: the public task API: ordering by declared accesses,
 * concurrency of independent tasks, waiting, argument checks, and
 * asynchronous GEMMs chained through their matrices. Runs on the host CPU;
 * sleeps only make a wrong order likely to show, nothing asserts a time. */
#include "api/context.h"
#include "core/core.h"
#include "devices/device.h"
#include "harness.h"

#include <cblas.h>
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* step: out[i] = in[i] * 2 + 1 after a pause, over the whole access. */
typedef struct step_arg {
  size_t n;
  int pause_us;
} step_arg;

static void step(void **buffers, void *arg) {
  step_arg *a = arg;
  usleep((useconds_t)a->pause_us);
  int *x = buffers[0];
  for (size_t i = 0; i < a->n; i++)
    x[i] = x[i] * 2 + 1;
}

static poas_task_desc rw_task(poas_buffer *b, size_t off, size_t len, void (*fn)(void **, void *),
                              void *arg, poas_access mode) {
  poas_task_desc d = {.cpu = fn, .arg = arg, .naccess = 1};
  d.access[0] = (poas_task_access){b, mode, off, len};
  return d;
}

/* A chain of read-write tasks on one buffer applies in submission order
 * (x -> 2x + 1 five times from 0 gives 31), whatever the first one's
 * pause. */
TEST(tasks_chain_in_order) {
  poas_context *ctx = test_open("cpu");
  CHECK(ctx);
  int x[64] = {0};
  poas_buffer *b;
  CHECK_OK(poas_buffer_register(ctx, x, sizeof x, &b));
  step_arg slow = {64, 3000}, fast = {64, 0};
  poas_task *last = NULL;
  for (int i = 0; i < 5; i++) {
    poas_task_desc d = rw_task(b, 0, 0, step, i == 0 ? &slow : &fast, POAS_RW);
    CHECK_OK(poas_task_submit(ctx, &d, i == 4 ? &last : NULL));
  }
  CHECK_OK(poas_task_wait(last));
  for (int i = 0; i < 64; i++)
    CHECK_MSG(x[i] == 31, "x[%d] = %d", i, x[i]);
  CHECK_OK(poas_buffer_unregister(b));
  poas_finalize(ctx);
  return 0;
}

typedef struct meet {
  atomic_int *mine, *other;
  atomic_int timed_out;
} meet;

static void meet_fn(void **buffers, void *arg) {
  (void)buffers;
  meet *m = arg;
  atomic_store(m->mine, 1);
  double t0 = poas__now();
  while (!atomic_load(m->other))
    if (poas__now() - t0 > 10) {
      atomic_store(&m->timed_out, 1);
      return;
    }
}

/* Writers of disjoint halves of one buffer run at the same time: each
 * waits until the other has started. */
TEST(tasks_disjoint_regions_concurrent) {
  poas_context *ctx = test_open("cpu");
  CHECK(ctx);
  char mem[128];
  poas_buffer *b;
  CHECK_OK(poas_buffer_register(ctx, mem, sizeof mem, &b));
  atomic_int s1 = 0, s2 = 0;
  meet m1 = {&s1, &s2, 0}, m2 = {&s2, &s1, 0};
  poas_task_desc d1 = rw_task(b, 0, 64, meet_fn, &m1, POAS_W);
  poas_task_desc d2 = rw_task(b, 64, 64, meet_fn, &m2, POAS_W);
  CHECK_OK(poas_task_submit(ctx, &d1, NULL));
  CHECK_OK(poas_task_submit(ctx, &d2, NULL));
  CHECK_OK(poas_wait_all(ctx));
  CHECK(!atomic_load(&m1.timed_out) && !atomic_load(&m2.timed_out));
  poas_finalize(ctx);
  return 0;
}

static atomic_int counter;

static void count_fn(void **buffers, void *arg) {
  (void)buffers;
  usleep((useconds_t)(intptr_t)arg);
  atomic_fetch_add(&counter, 1);
}

/* Detached tasks are all done after poas_wait_all, and poas_finalize
 * waits for those still outstanding. */
TEST(tasks_wait_all_and_finalize_wait) {
  poas_context *ctx = test_open("cpu");
  CHECK(ctx);
  atomic_store(&counter, 0);
  poas_task_desc d = {.cpu = count_fn, .arg = (void *)(intptr_t)0};
  for (int i = 0; i < 1000; i++)
    CHECK_OK(poas_task_submit(ctx, &d, NULL));
  CHECK_OK(poas_wait_all(ctx));
  CHECK(atomic_load(&counter) == 1000);
  d.arg = (void *)(intptr_t)2000;
  for (int i = 0; i < 20; i++)
    CHECK_OK(poas_task_submit(ctx, &d, NULL));
  poas_finalize(ctx);
  CHECK(atomic_load(&counter) == 1020);
  return 0;
}

TEST(tasks_argument_checks) {
  poas_context *ctx = test_open("cpu");
  CHECK(ctx);
  int x[4];
  poas_buffer *b;
  poas_task *t = (poas_task *)&x; /* must stay untouched on error */
  CHECK_RC(poas_buffer_register(ctx, NULL, 16, &b), POAS_ENULL);
  CHECK_RC(poas_buffer_register(ctx, x, 0, &b), POAS_EINVAL);
  CHECK_RC(poas_buffer_register(ctx, x, SIZE_MAX, &b), POAS_EINVAL);      /* wraps */
  CHECK_OK(poas_buffer_register(ctx, x, UINTPTR_MAX - (uintptr_t)x, &b)); /* to the end */
  CHECK_OK(poas_buffer_unregister(b));
  CHECK_OK(poas_buffer_register(ctx, x, sizeof x, &b));
  CHECK_RC(poas_task_submit(ctx, NULL, &t), POAS_ENULL);
  poas_task_desc d = rw_task(b, 0, 0, NULL, NULL, POAS_R);
  CHECK_RC(poas_task_submit(ctx, &d, &t), POAS_EINVAL);
  d.opencl = (poas_opencl_fn)(void (*)(void))step;
  CHECK_RC(poas_task_submit(ctx, &d, &t), POAS_ENOTSUP);
  d = rw_task(b, 8, 9, step, NULL, POAS_R);
  CHECK_RC(poas_task_submit(ctx, &d, &t), POAS_ERANGE);
  d = rw_task(b, 0, 0, step, NULL, (poas_access)7);
  CHECK_RC(poas_task_submit(ctx, &d, &t), POAS_EINVAL);
  d.naccess = 5;
  CHECK_RC(poas_task_submit(ctx, &d, &t), POAS_EINVAL);
  CHECK(t == (poas_task *)&x);
  CHECK_RC(poas_task_wait(NULL), POAS_ENULL);
  CHECK_RC(poas_wait_all(NULL), POAS_ENULL);
  poas_finalize(ctx); /* releases the registered buffer */
  return 0;
}

/* Sums E into *out; registered on E, so it runs after the GEMM that
 * writes E. */
typedef struct sum_arg {
  size_t n;
  double sum;
} sum_arg;

static void sum_fn(void **buffers, void *arg) {
  sum_arg *s = arg;
  const double *e = buffers[0];
  s->sum = 0;
  for (size_t i = 0; i < s->n; i++)
    s->sum += e[i];
}

/* C = A B, then E = C D, submitted asynchronously and back to back, then a
 * task reading E: ordered by inference, the result matches a reference. */
TEST(async_gemm_chain) {
  poas_context *ctx = test_open("cpu");
  CHECK(ctx);
  enum { N = 160 };
  static double A[N * N], B[N * N], C[N * N], D[N * N], E[N * N], R1[N * N], R2[N * N];
  test_fill(A, POAS_FLOAT64, N * N, 1);
  test_fill(B, POAS_FLOAT64, N * N, 2);
  test_fill(D, POAS_FLOAT64, N * N, 3);
  test_poison(C, POAS_FLOAT64, N * N);
  test_poison(E, POAS_FLOAT64, N * N);
  poas_buffer *eb;
  CHECK_OK(poas_buffer_register(ctx, E, sizeof E, &eb));
  poas_task *t1, *t3;
  CHECK_OK(poas_dgemm_async(ctx, POAS_ROW_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, N, N, N, 1.0, A,
                            N, B, N, 0.0, C, N, &t1));
  CHECK_OK(poas_dgemm_async(ctx, POAS_ROW_MAJOR, POAS_NO_TRANS, POAS_TRANS, N, N, N, 1.0, C, N,
                            D, N, 0.0, E, N, NULL));
  sum_arg s = {N * N, 0};
  poas_task_desc d = rw_task(eb, 0, 0, sum_fn, &s, POAS_R);
  CHECK_OK(poas_task_submit(ctx, &d, &t3));
  CHECK_OK(poas_task_wait(t3));
  CHECK_OK(poas_task_wait(t1));
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0, A, N, B, N, 0.0, R1, N);
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, N, N, 1.0, R1, N, D, N, 0.0, R2, N);
  double worst = 0, ref_sum = 0;
  for (int i = 0; i < N * N; i++) {
    worst = fmax(worst, fabs(E[i] - R2[i]));
    ref_sum += R2[i];
  }
  CHECK_MSG(worst < 1e-9, "worst error %g", worst);
  CHECK_MSG(fabs(s.sum - ref_sum) < 1e-6, "the reading task saw %g, not %g", s.sum, ref_sum);
  poas_report rep;
  CHECK_OK(poas_last_report(ctx, &rep));
  CHECK(rep.m == N && rep.dtype == POAS_FLOAT64);
  /* Argument errors are reported at submission, nothing queued. */
  poas_task *none = NULL;
  CHECK_RC(poas_dgemm_async(ctx, POAS_ROW_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, N, N, N, 1.0, A,
                            N - 1, B, N, 0.0, C, N, &none),
           POAS_ELD);
  CHECK(none == NULL);
  poas_finalize(ctx);
  return 0;
}

static void scale2_fn(void **buffers, void *arg) {
  double *c = buffers[0];
  for (size_t i = 0; i < *(size_t *)arg; i++)
    c[i] *= 2;
}

/* Largest |x - 2^scale_log2 * ref| over n elements; NaN shows as infinity. */
static double max_diff(const double *x, const double *ref, double scale, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs(x[i] - scale * ref[i]);
    worst = isnan(d) ? INFINITY : fmax(worst, d);
  }
  return worst;
}

/* The chain C = A B, E = C D on one device with its own memory (the first
 * GPU, else the first OpenCL device): C is computed into device memory that
 * the second GEMM reads, so the second run copies only D in. Then the
 * cases where that copy must not be trusted: after a wait (the caller may
 * have changed C: here it doubles it), and after a host task that writes C.
 * Results are checked against OpenBLAS each time. */
TEST(async_gemm_chain_keeps_c_on_the_device) {
  const char *devices = NULL;
  poas_context *ctx = NULL;
  static const char *const candidates[] = {"cuda0", "opencl0"};
  for (int i = 0; i < 2 && !ctx; i++)
    if ((ctx = test_open(candidates[i])) != NULL)
      devices = candidates[i];
  if (!ctx)
    SKIP("no device with its own memory (cuda0, opencl0)");
  fprintf(stderr, "  on %s\n", devices);
  enum { M = 96, K = 80, N = 112, P = 64 };
  static double A[M * K], B[K * N], C[M * N], D[N * P], E[M * P], R1[M * N], R2[M * P];
  test_fill(A, POAS_FLOAT64, M * K, 11);
  test_fill(B, POAS_FLOAT64, K * N, 12);
  test_fill(D, POAS_FLOAT64, N * P, 13);
  cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0, A, M, B, K, 0.0, R1, M);
  cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, M, P, N, 1.0, R1, M, D, N, 0.0, R2, M);
  const uint64_t c_bytes = sizeof C, d_bytes = sizeof D;
  poas_report rep;
  poas_task *t1, *t2;

  /* 1: back to back, C stays on the device for the second GEMM. */
  test_poison(C, POAS_FLOAT64, M * N);
  test_poison(E, POAS_FLOAT64, M * P);
  CHECK_OK(poas_dgemm_async(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, M, N, K, 1.0, A,
                            M, B, K, 0.0, C, M, &t1));
  CHECK_OK(poas_dgemm_async(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, M, P, N, 1.0, C,
                            M, D, N, 0.0, E, M, &t2));
  CHECK_OK(poas_wait_all(ctx));
  CHECK_OK(poas_task_wait(t1));
  CHECK_OK(poas_task_wait(t2));
  CHECK_OK(poas_last_report(ctx, &rep));
  CHECK_MSG(rep.ndevices == 1 && rep.dev[0].bytes_h2d == d_bytes,
            "the second GEMM copied %llu bytes in; D alone is %llu",
            (unsigned long long)rep.dev[0].bytes_h2d, (unsigned long long)d_bytes);
  CHECK(rep.dev[0].bytes_d2h == sizeof E);
  CHECK_MSG(max_diff(C, R1, 1, M * N) < 1e-12, "C off by %g", max_diff(C, R1, 1, M * N));
  CHECK_MSG(max_diff(E, R2, 1, M * P) < 1e-11, "E off by %g", max_diff(E, R2, 1, M * P));

  /* 2: after the waits the caller may change C; the device copy is not used. */
  for (int i = 0; i < M * N; i++)
    C[i] *= 2;
  test_poison(E, POAS_FLOAT64, M * P);
  CHECK_OK(poas_dgemm_async(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, M, P, N, 1.0, C,
                            M, D, N, 0.0, E, M, &t2));
  CHECK_OK(poas_task_wait(t2));
  CHECK_OK(poas_last_report(ctx, &rep));
  CHECK(rep.dev[0].bytes_h2d == c_bytes + d_bytes);
  CHECK_MSG(max_diff(E, R2, 2, M * P) < 1e-11, "E off by %g after C changed",
            max_diff(E, R2, 2, M * P));

  /* 3: a host task that writes C between the two GEMMs. */
  poas_buffer *cb;
  CHECK_OK(poas_buffer_register(ctx, C, sizeof C, &cb));
  test_poison(C, POAS_FLOAT64, M * N);
  test_poison(E, POAS_FLOAT64, M * P);
  size_t nc = M * N;
  CHECK_OK(poas_dgemm_async(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, M, N, K, 1.0, A,
                            M, B, K, 0.0, C, M, NULL));
  poas_task_desc d = rw_task(cb, 0, 0, scale2_fn, &nc, POAS_RW);
  CHECK_OK(poas_task_submit(ctx, &d, NULL));
  CHECK_OK(poas_dgemm_async(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, M, P, N, 1.0, C,
                            M, D, N, 0.0, E, M, NULL));
  CHECK_OK(poas_wait_all(ctx));
  CHECK_OK(poas_last_report(ctx, &rep));
  CHECK(rep.dev[0].bytes_h2d == c_bytes + d_bytes);
  CHECK_MSG(max_diff(C, R1, 2, M * N) < 1e-12, "C off by %g", max_diff(C, R1, 2, M * N));
  CHECK_MSG(max_diff(E, R2, 2, M * P) < 1e-11, "E off by %g after a task doubled C",
            max_diff(E, R2, 2, M * P));
  CHECK_OK(poas_buffer_unregister(cb));
  poas_finalize(ctx);
  return 0;
}

static void set42_fn(void **buffers, void *arg) {
  (void)arg;
  *(int *)buffers[0] = 42;
}

/* Submits an asynchronous sgemm that fails when it runs on a context of
 * one 1 GiB sim: no plan fits 100000^3. The operands are never read (a
 * sim computes nothing, and no plan is made), so addresses suffice. */
static int unplannable_sgemm_async(poas_context *ctx, poas_task **out) {
  const int64_t n = 100000;
  float *A = (float *)(uintptr_t)0x100000000000ull, *B = (float *)(uintptr_t)0x200000000000ull,
        *C = (float *)(uintptr_t)0x300000000000ull;
  return poas_sgemm_async(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, n, n, n, 1, A, n, B,
                          n, 0, C, n, out);
}

/* An asynchronous GEMM that fails when it runs (no plan fits a 1 GiB sim)
 * reports its error and its detail to its waiter, and the context's task
 * runtime goes on: a later task and a later GEMM run as usual. */
TEST(failed_task_leaves_later_tasks_alone) {
  poas_context *ctx = test_open("sim:memory=1Gi");
  CHECK(ctx);
  poas_task *k;
  for (int round = 0; round < 2; round++) {
    CHECK_OK(unplannable_sgemm_async(ctx, &k));
    CHECK_RC(poas_task_wait(k), POAS_ETOOBIG);
    CHECK_MSG(strstr(poas_error_detail(), "plan"), "the waiter's detail is '%s', not the plan's",
              poas_error_detail());
    int x = 0;
    poas_buffer *b;
    CHECK_OK(poas_buffer_register(ctx, &x, sizeof x, &b));
    poas_task_desc d = rw_task(b, 0, 0, set42_fn, NULL, POAS_W);
    CHECK_OK(poas_task_submit(ctx, &d, &k));
    CHECK_OK(poas_task_wait(k));
    CHECK(x == 42);
    CHECK_OK(poas_buffer_unregister(b));
    float a[4] = {1, 1, 1, 1}, bb[4] = {1, 1, 1, 1}, c[4];
    CHECK_OK(poas_sgemm_async(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 2, 2, 2, 1, a, 2,
                              bb, 2, 0, c, 2, &k));
    CHECK_OK(poas_task_wait(k));
  }
  poas_finalize(ctx);
  return 0;
}

/* The same on the CPU, with a run that fails on its device (an injected
 * fault); once the fault is gone, a later GEMM computes. */
TEST(failed_run_leaves_later_tasks_alone) {
  poas_context *ctx = test_open("cpu");
  CHECK(ctx);
  float a[4] = {1, 2, 3, 4}, bb[4] = {1, 0, 0, 1}, c[4] = {0};
  poas_task *k;
  setenv("POAS_FAULT", "cpu0:after=0", 1);
  CHECK_OK(poas_sgemm_async(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 2, 2, 2, 1, a, 2,
                            bb, 2, 0, c, 2, &k));
  int rc = poas_task_wait(k);
  unsetenv("POAS_FAULT");
  CHECK_RC(rc, POAS_EDEVICE);
  int x = 0;
  poas_buffer *b;
  CHECK_OK(poas_buffer_register(ctx, &x, sizeof x, &b));
  poas_task_desc d = rw_task(b, 0, 0, set42_fn, NULL, POAS_W);
  CHECK_OK(poas_task_submit(ctx, &d, &k));
  CHECK_OK(poas_task_wait(k));
  CHECK(x == 42);
  CHECK_OK(poas_sgemm_async(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 2, 2, 2, 1, a, 2,
                            bb, 2, 0, c, 2, &k));
  CHECK_OK(poas_task_wait(k));
  for (int i = 0; i < 4; i++)
    CHECK_MSG(c[i] == a[i], "c[%d] = %g, not %g", i, c[i], a[i]);
  poas_finalize(ctx);
  return 0;
}

/* A task submitted without a handle has no wait of its own: the next
 * poas_wait_all reports its failure, once; later waits, and calls that
 * only wait for the tasks (a synchronous GEMM), are not failed by it. */
TEST(wait_all_reports_a_task_without_a_handle) {
  poas_context *ctx = test_open("sim:memory=1Gi");
  CHECK(ctx);
  CHECK_OK(unplannable_sgemm_async(ctx, NULL));
  float a[4] = {1, 1, 1, 1}, bb[4] = {1, 1, 1, 1}, c[4];
  CHECK_OK(poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 2, 2, 2, 1, a, 2, bb, 2,
                      0, c, 2));
  CHECK_RC(poas_wait_all(ctx), POAS_ETOOBIG);
  CHECK_MSG(strstr(poas_error_detail(), "without a handle") && strstr(poas_error_detail(), "plan"),
            "detail '%s'", poas_error_detail());
  CHECK_OK(poas_wait_all(ctx));
  poas_finalize(ctx);
  return 0;
}

/* Reads the first float of its access into *arg, after a pause when
 * asked (a later writer's chance to overtake it). */
typedef struct peek_arg {
  int pause_us;
  float seen;
} peek_arg;

static void peek_fn(void **buffers, void *arg) {
  peek_arg *p = arg;
  usleep((useconds_t)p->pause_us);
  p->seen = *(const float *)buffers[0];
}

typedef struct poke_arg {
  int pause_us;
  float value;
} poke_arg;

static void poke_fn(void **buffers, void *arg) {
  poke_arg *p = arg;
  usleep((useconds_t)p->pause_us);
  *(float *)buffers[0] = p->value;
}

/* A task reading C's first element waits for the asynchronous GEMM that
 * writes C, however C was registered: only its first column (the GEMM's C
 * is not inside that buffer), or whole after an earlier registration of
 * the same memory was dropped (whose stale entry the lookup once found). */
TEST(async_gemm_ordered_by_bytes_not_buffers) {
  poas_context *ctx = test_open("cpu");
  CHECK(ctx);
  enum { N = 1024 };
  static float A[N * N], B[N * N], C[N * N];
  for (int i = 0; i < N * N; i++)
    A[i] = B[i] = 1;
  for (int shape = 0; shape < 2; shape++) {
    for (int i = 0; i < N * N; i++)
      C[i] = -1;
    poas_buffer *cb;
    if (shape == 0) {
      CHECK_OK(poas_buffer_register(ctx, C, N * sizeof *C, &cb));
    } else {
      CHECK_OK(poas_buffer_register(ctx, C, sizeof C, &cb));
      CHECK_OK(poas_buffer_unregister(cb));
      CHECK_OK(poas_buffer_register(ctx, C, sizeof C, &cb));
    }
    poas_task *g, *k;
    CHECK_OK(poas_sgemm_async(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, N, N, N, 1, A,
                              N, B, N, 0, C, N, &g));
    peek_arg p = {0, 0};
    poas_task_desc d = rw_task(cb, 0, sizeof(float), peek_fn, &p, POAS_R);
    CHECK_OK(poas_task_submit(ctx, &d, &k));
    CHECK_OK(poas_task_wait(k));
    CHECK_OK(poas_task_wait(g));
    CHECK_MSG(p.seen == N, "%s: the task saw C[0] = %g, not %d",
              shape == 0 ? "first column registered" : "registered again", p.seen, N);
    CHECK_OK(poas_buffer_unregister(cb));
  }
  poas_finalize(ctx);
  return 0;
}

/* Holds its task until *go: a host task that a GEMM on its bytes waits
 * behind. */
static void hold_fn(void **bufs, void *arg) {
  (void)bufs;
  atomic_int *go = arg;
  for (int i = 0; i < 100000 && !atomic_load(go); i++)
    usleep(100);
}

/* An asynchronous GEMM takes POAS_FAULT as it was when submitted, on the
 * caller's thread: it was once read when the GEMM ran, on the task
 * worker's, where the caller's setenv raced the read, and a GEMM queued
 * behind a task met the faults set or unset after it. */
TEST(async_gemm_takes_the_faults_set_at_submission) {
  poas_context *ctx = test_open("sim");
  CHECK(ctx);
  enum { N = 64 };
  static double A[N * N], B[N * N], C[N * N];
  poas_buffer *cb;
  CHECK_OK(poas_buffer_register(ctx, C, sizeof C, &cb));
  for (int faulty = 0; faulty < 2; faulty++) {
    atomic_int go = 0;
    poas_task_desc d = rw_task(cb, 0, 0, hold_fn, &go, POAS_W);
    poas_task *held, *g;
    CHECK_OK(poas_task_submit(ctx, &d, &held));
    /* Set around the submission, or set only after it. */
    if (faulty)
      setenv("POAS_FAULT", "sim0:after=0", 1);
    CHECK_OK(poas_dgemm_async(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, N, N, N, 1, A,
                              N, B, N, 0, C, N, &g));
    if (faulty)
      unsetenv("POAS_FAULT");
    else
      setenv("POAS_FAULT", "sim0:after=0", 1);
    atomic_store(&go, 1);
    CHECK_OK(poas_task_wait(held));
    int rc = poas_task_wait(g);
    unsetenv("POAS_FAULT");
    CHECK_MSG(faulty ? rc == POAS_EDEVICE : rc == 0,
              "POAS_FAULT set %s the submission: the GEMM returned %d", faulty ? "at" : "after",
              rc);
  }
  CHECK_OK(poas_buffer_unregister(cb));
  poas_finalize(ctx);
  return 0;
}

/* poas_last_report may be called while an asynchronous GEMM runs: it
 * gives the last finished GEMM's report whole (the report was once
 * written by the task's worker with no lock: a TSan build found the race),
 * and the task's own once it has finished. */
TEST(the_report_may_be_read_while_a_gemm_task_runs) {
  poas_context *ctx = test_open("cpu");
  CHECK(ctx);
  enum { N = 512 };
  static float A[N * N], B[N * N], C[N * N];
  for (int i = 0; i < N * N; i++)
    A[i] = B[i] = 1;
  poas_report r;
  for (int round = 0; round < 3; round++) {
    int n = N - 64 * round;
    poas_task *g;
    CHECK_OK(poas_sgemm_async(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, n, n, n, 1, A, n,
                              B, n, 0, C, n, &g));
    for (int i = 0; i < 200; i++) {
      int rc = poas_last_report(ctx, &r);
      CHECK(rc == (round == 0 ? POAS_ESTATE : POAS_OK) || rc == POAS_OK);
      CHECK_MSG(rc || r.m == r.n, "a torn report: %lld x %lld", (long long)r.m, (long long)r.n);
    }
    CHECK_OK(poas_task_wait(g));
    CHECK_OK(poas_last_report(ctx, &r));
    CHECK(r.m == n && r.n == n && r.k == n && C[0] == (float)n);
  }
  poas_finalize(ctx);
  return 0;
}

/* Two registrations of the same bytes, or of overlapping ones: a writer
 * through one and a reader through the other are ordered, the reader
 * second, though the writer pauses first. */
TEST(tasks_ordered_across_overlapping_registrations) {
  poas_context *ctx = test_open("cpu");
  CHECK(ctx);
  float x[8] = {0};
  poas_buffer *same1, *same2, *whole, *tail;
  CHECK_OK(poas_buffer_register(ctx, x, 4 * sizeof *x, &same1));
  CHECK_OK(poas_buffer_register(ctx, x, 4 * sizeof *x, &same2));
  CHECK_OK(poas_buffer_register(ctx, x, sizeof x, &whole));
  CHECK_OK(poas_buffer_register(ctx, x + 4, 4 * sizeof *x, &tail));
  poke_arg w1 = {20000, 42}, w2 = {20000, 7};
  peek_arg r1 = {0, 0}, r2 = {0, 0};
  poas_task_desc d = rw_task(same1, 0, 0, poke_fn, &w1, POAS_W);
  CHECK_OK(poas_task_submit(ctx, &d, NULL));
  d = rw_task(same2, 0, 0, peek_fn, &r1, POAS_R);
  CHECK_OK(poas_task_submit(ctx, &d, NULL));
  d = rw_task(whole, 4 * sizeof *x, sizeof *x, poke_fn, &w2, POAS_W);
  CHECK_OK(poas_task_submit(ctx, &d, NULL));
  d = rw_task(tail, 0, sizeof *x, peek_fn, &r2, POAS_R);
  CHECK_OK(poas_task_submit(ctx, &d, NULL));
  CHECK_OK(poas_wait_all(ctx));
  CHECK_MSG(r1.seen == 42, "through the same bytes registered twice the reader saw %g", r1.seen);
  CHECK_MSG(r2.seen == 7, "through an overlapping registration the reader saw %g", r2.seen);
  poas_finalize(ctx);
  return 0;
}

/* Handles are released once: a second wait or unregister, or one after
 * poas_finalize, is refused with POAS_EINVAL, also once a later task or
 * registration has taken over the released record; handles never waited
 * for are released by poas_finalize (ASan's leak check sees the rest). */
TEST(task_handles_released_once) {
  poas_context *ctx = test_open("cpu");
  CHECK(ctx);
  int x = 0;
  poas_buffer *b, *b2;
  CHECK_OK(poas_buffer_register(ctx, &x, sizeof x, &b));
  poas_task_desc d = rw_task(b, 0, 0, set42_fn, NULL, POAS_W);
  poas_task *k, *k2, *unwaited[50];
  CHECK_OK(poas_task_submit(ctx, &d, &k));
  CHECK_OK(poas_task_wait(k));
  CHECK_RC(poas_task_wait(k), POAS_EINVAL);
  CHECK_OK(poas_task_submit(ctx, &d, &k2));
  CHECK_RC(poas_task_wait(k), POAS_EINVAL);
  CHECK_OK(poas_task_wait(k2));
  CHECK_RC(poas_task_wait((poas_task *)b), POAS_EINVAL);
  CHECK_OK(poas_buffer_unregister(b));
  CHECK_RC(poas_buffer_unregister(b), POAS_EINVAL);
  CHECK_RC(poas_task_submit(ctx, &d, NULL), POAS_EINVAL); /* d names b */
  CHECK_OK(poas_buffer_register(ctx, &x, sizeof x, &b2));
  CHECK_RC(poas_buffer_unregister(b), POAS_EINVAL);
  d.access[0].buffer = b2;
  for (int i = 0; i < 50; i++)
    CHECK_OK(poas_task_submit(ctx, &d, &unwaited[i]));
  poas_finalize(ctx);
  CHECK_RC(poas_task_wait(unwaited[0]), POAS_EINVAL);
  CHECK_RC(poas_buffer_unregister(b2), POAS_EINVAL);
  CHECK(x == 42);
  return 0;
}

/* What a task tries of the calls that wait for its context's tasks, and
 * what they returned. */
typedef struct nested_arg {
  poas_context *ctx;
  poas_task *other;
  poas_buffer *buf;
  int wait_all_rc, wait_rc, unregister_rc, gemm_rc;
  float c[4];
  char detail[128];
} nested_arg;

static void nested_fn(void **buffers, void *arg) {
  (void)buffers;
  nested_arg *n = arg;
  n->wait_all_rc = poas_wait_all(n->ctx);
  snprintf(n->detail, sizeof n->detail, "%s", poas_error_detail());
  n->wait_rc = poas_task_wait(n->other);
  n->unregister_rc = poas_buffer_unregister(n->buf);
  /* A synchronous GEMM waits for the context's tasks before it runs, and
   * leaves C as it was when it cannot. */
  static const float one[4] = {1, 1, 1, 1};
  n->gemm_rc = poas_sgemm(n->ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 2, 2, 2, 1, one, 2,
                          one, 2, 0, n->c, 2);
  /* Ignored: the context stays open for the test's calls below. */
  poas_finalize(n->ctx);
}

/* A task that waits for its context's tasks would wait for itself: the
 * calls refuse with POAS_ESTATE at once, and leave the handles they were
 * given as they were; a synchronous GEMM refuses the same way, and
 * poas_finalize is ignored. */
TEST(task_cannot_wait_for_its_context) {
  poas_context *ctx = test_open("cpu");
  CHECK(ctx);
  int x = 0;
  poas_buffer *b;
  CHECK_OK(poas_buffer_register(ctx, &x, sizeof x, &b));
  nested_arg n = {.ctx = ctx, .buf = b, .c = {-1, -1, -1, -1}};
  poas_task_desc d = rw_task(b, 0, 0, set42_fn, NULL, POAS_W);
  CHECK_OK(poas_task_submit(ctx, &d, &n.other));
  poas_task_desc nd = {.cpu = nested_fn, .arg = &n};
  poas_task *k;
  CHECK_OK(poas_task_submit(ctx, &nd, &k));
  CHECK_OK(poas_task_wait(k));
  CHECK_RC(n.wait_all_rc, POAS_ESTATE);
  CHECK_MSG(strstr(n.detail, "task"), "detail '%s'", n.detail);
  CHECK_RC(n.wait_rc, POAS_ESTATE);
  CHECK_RC(n.unregister_rc, POAS_ESTATE);
  CHECK_RC(n.gemm_rc, POAS_ESTATE);
  for (int i = 0; i < 4; i++)
    CHECK(n.c[i] == -1);
  CHECK_OK(poas_task_wait(n.other));
  CHECK(x == 42);
  CHECK_OK(poas_buffer_unregister(b));
  poas_finalize(ctx);
  return 0;
}

/* A copy an asynchronous GEMM leaves on a device serves only GEMMs of the
 * epoch it was made in; once the caller has waited, it serves nobody and
 * is freed before the next plan. It once stayed, counted as taken: on a
 * sim of 8 MiB, after one asynchronous 512^3 sgemm and a wait, every
 * later 1300^3 sgemm failed with POAS_ETOOBIG, synchronous or not, and
 * poas_plan_gemm_call planned 600^3 in 4 tiles instead of 1, with the
 * same profile and learning off. */
TEST(a_copy_left_on_a_device_gives_its_room_back_after_a_wait) {
  poas_context *ctx = test_open_unlearning("sim:memory=8Mi");
  CHECK(ctx);
  enum { N = 1300, S = 512, P = 600 };
  float *A = calloc((size_t)N * N, sizeof *A), *B = calloc((size_t)N * N, sizeof *B),
        *C = calloc((size_t)N * N, sizeof *C), *D = calloc((size_t)S * S, sizeof *D);
  CHECK(A && B && C && D);
  const poas_op NT = POAS_NO_TRANS;
  poas_plan *before = malloc(sizeof *before), *after = malloc(sizeof *after);
  CHECK(before && after);
  CHECK_OK(poas_plan_gemm_call(ctx, POAS_FLOAT32, POAS_COL_MAJOR, NT, NT, P, P, P, 1, 0, before));
  CHECK_OK(poas_sgemm(ctx, POAS_COL_MAJOR, NT, NT, N, N, N, 1, A, N, B, N, 0, C, N));
  CHECK_OK(poas_sgemm_async(ctx, POAS_COL_MAJOR, NT, NT, S, S, S, 1, A, S, B, S, 0, D, S, NULL));
  CHECK_OK(poas_wait_all(ctx));
  /* Freed by the wait itself, not by the next GEMM: a device task after
   * the wait finds the room. */
  CHECK_MSG(poas__resident_bytes(ctx, 0) == 0, "%llu bytes still held after the wait",
            (unsigned long long)poas__resident_bytes(ctx, 0));
  CHECK_OK(poas_plan_gemm_call(ctx, POAS_FLOAT32, POAS_COL_MAJOR, NT, NT, P, P, P, 1, 0, after));
  CHECK_MSG(after->dev[0].tiles == before->dev[0].tiles &&
                after->makespan_s == before->makespan_s,
            "%lld tiles and %g s after the wait, %lld and %g s before",
            (long long)after->dev[0].tiles, after->makespan_s, (long long)before->dev[0].tiles,
            before->makespan_s);
  CHECK_OK(poas_sgemm(ctx, POAS_COL_MAJOR, NT, NT, N, N, N, 1, A, N, B, N, 0, C, N));
  /* An asynchronous GEMM of a later epoch, after another wait, too. */
  CHECK_OK(poas_sgemm_async(ctx, POAS_COL_MAJOR, NT, NT, S, S, S, 1, A, S, B, S, 0, D, S, NULL));
  CHECK_OK(poas_wait_all(ctx));
  poas_task *t;
  CHECK_OK(poas_sgemm_async(ctx, POAS_COL_MAJOR, NT, NT, N, N, N, 1, A, N, B, N, 0, C, N, &t));
  CHECK_OK(poas_task_wait(t));
  free(before), free(after);
  free(A), free(B), free(C), free(D);
  poas_finalize(ctx);
  return 0;
}

/* A synchronous GEMM refused from inside a task (it would wait for
 * itself) is a GEMM refused: poas_last_report then has no report, where
 * it once returned the GEMM's before. */
static int sgemm_4x4(poas_context *ctx) {
  static float a[16], b[16], c[16];
  return poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 4, 4, 4, 1, a, 4, b, 4, 0,
                    c, 4);
}

static void sync_gemm_fn(void **buffers, void *arg) {
  (void)buffers;
  nested_arg *n = arg;
  n->gemm_rc = sgemm_4x4(n->ctx);
}

TEST(a_gemm_refused_in_a_task_leaves_no_report) {
  poas_context *ctx = test_open("sim");
  CHECK(ctx);
  CHECK_OK(sgemm_4x4(ctx));
  poas_report r;
  CHECK_OK(poas_last_report(ctx, &r));
  nested_arg n = {.ctx = ctx};
  poas_task_desc d = {.cpu = sync_gemm_fn, .arg = &n};
  CHECK_OK(poas_task_submit(ctx, &d, NULL));
  CHECK_OK(poas_wait_all(ctx));
  CHECK_RC(n.gemm_rc, POAS_ESTATE);
  CHECK_RC(poas_last_report(ctx, &r), POAS_ESTATE);
  poas_finalize(ctx);
  return 0;
}

/* A task may register buffers while the caller registers others: the
 * context's list of them is changed under a lock (ThreadSanitizer found the
 * two threads writing it at once). The caller starts once the task has. */
enum { REGISTERED = 512 };
typedef struct registering_arg {
  poas_context *ctx;
  atomic_int started;
  int data[REGISTERED];
  poas_buffer *made[REGISTERED];
  int failed;
} registering_arg;

static void register_fn(void **buffers, void *arg) {
  (void)buffers;
  registering_arg *r = arg;
  atomic_store(&r->started, 1);
  for (int i = 0; i < REGISTERED; i++)
    r->failed |= poas_buffer_register(r->ctx, &r->data[i], sizeof r->data[i], &r->made[i]) != 0;
}

TEST(a_task_registers_buffers_beside_the_caller) {
  poas_context *ctx = test_open("sim");
  CHECK(ctx);
  static registering_arg r;
  r.ctx = ctx;
  poas_task_desc d = {.cpu = register_fn, .arg = &r};
  poas_task *t;
  CHECK_OK(poas_task_submit(ctx, &d, &t));
  while (!atomic_load(&r.started))
    sched_yield();
  static int mine[REGISTERED];
  static poas_buffer *b[REGISTERED];
  for (int i = 0; i < REGISTERED; i++)
    CHECK_OK(poas_buffer_register(ctx, &mine[i], sizeof mine[i], &b[i]));
  CHECK_OK(poas_task_wait(t));
  CHECK(!r.failed);
  for (int i = 0; i < REGISTERED; i++) {
    CHECK_OK(poas_buffer_unregister(r.made[i]));
    CHECK_OK(poas_buffer_unregister(b[i]));
  }
  poas_finalize(ctx);
  return 0;
}

/* Keeping C on a device takes room the plan did not count: with 12 of a
 * 16 MiB sim's memory held elsewhere, an asynchronous sgemm whose C is 4
 * MiB (under a quarter of the total, so kept) was planned in the 4 MiB
 * left; C's whole copy then took all of it and the tiles found none: the
 * device failed and the GEMM with it, where the same synchronous call
 * runs. The sim computes nothing: the statuses are checked. */
TEST(keeping_c_leaves_the_plan_its_memory) {
  poas_context *ctx = test_open_unlearning("sim:memory=16Mi");
  CHECK(ctx);
  poas__device *d = ctx->devices.dev[0];
  poas__mem taken;
  CHECK_OK(d->be->mem_alloc(d, 12u << 20, &taken)); /* someone else's */
  enum { M = 1024, N = 1024, K = 16 };
  float *A = calloc((size_t)M * K, sizeof *A), *B = calloc((size_t)K * N, sizeof *B),
        *C = calloc((size_t)M * N, sizeof *C);
  CHECK(A && B && C);
  const poas_op NT = POAS_NO_TRANS;
  int rc = poas_sgemm(ctx, POAS_COL_MAJOR, NT, NT, M, N, K, 1, A, M, B, K, 0, C, M);
  CHECK_MSG(rc == 0, "synchronous: %s: %s", poas_err_name(rc), poas_error_detail());
  poas_task *t;
  CHECK_OK(poas_sgemm_async(ctx, POAS_COL_MAJOR, NT, NT, M, N, K, 1, A, M, B, K, 0, C, M, &t));
  rc = poas_task_wait(t);
  CHECK_MSG(rc == 0, "asynchronous: %s: %s", poas_err_name(rc), poas_error_detail());
  poas_report rep;
  CHECK_OK(poas_last_report(ctx, &rep));
  CHECK(rep.faults == 0);
  d->be->mem_free(d, taken);
  free(A), free(B), free(C);
  poas_finalize(ctx);
  return 0;
}

/* Calibration measures a device's memory by allocating all it can: the
 * copies asynchronous GEMMs left on it, dead once the caller returned
 * from a wait, and the buffers its cache parked, are the context's own
 * and go first. After a chain of two 1024^2 sgemm tasks on a 64 MiB sim
 * it measured 50 MiB, and its plans took that from then on. */
TEST(calibration_measures_the_memory_copies_held) {
  poas_context *ctx = test_open_unlearning("sim:memory=64Mi");
  CHECK(ctx);
  enum { N = 1024 };
  float *A = calloc((size_t)N * N, sizeof *A), *B = calloc((size_t)N * N, sizeof *B),
        *C = calloc((size_t)N * N, sizeof *C), *E = calloc((size_t)N * N, sizeof *E);
  CHECK(A && B && C && E);
  const poas_op NT = POAS_NO_TRANS;
  CHECK_OK(poas_sgemm_async(ctx, POAS_COL_MAJOR, NT, NT, N, N, N, 1, A, N, B, N, 0, C, N, NULL));
  CHECK_OK(poas_sgemm_async(ctx, POAS_COL_MAJOR, NT, NT, N, N, N, 1, C, N, B, N, 0, E, N, NULL));
  CHECK_OK(poas_wait_all(ctx));
  poas_calibrate_options o;
  poas_calibrate_options_init(&o);
  o.quick = 1;
  o.dtypes = 1 << POAS_FLOAT32;
  poas_calibration_result *r = malloc(sizeof *r);
  CHECK(r);
  CHECK_OK(poas_calibrate(ctx, &o, r));
  CHECK_MSG(r->dev[0].memory_bytes == 64u << 20, "measured %llu of 64 MiB",
            (unsigned long long)r->dev[0].memory_bytes);
  free(r);
  free(A), free(B), free(C), free(E);
  poas_finalize(ctx);
  return 0;
}

TEST_MAIN(TEST_ENTRY(tasks_chain_in_order),
          TEST_ENTRY(the_report_may_be_read_while_a_gemm_task_runs),
          TEST_ENTRY(tasks_disjoint_regions_concurrent),
          TEST_ENTRY(tasks_wait_all_and_finalize_wait), TEST_ENTRY(tasks_argument_checks),
          TEST_ENTRY(async_gemm_chain), TEST_ENTRY(async_gemm_chain_keeps_c_on_the_device),
          TEST_ENTRY(failed_task_leaves_later_tasks_alone),
          TEST_ENTRY(failed_run_leaves_later_tasks_alone),
          TEST_ENTRY(wait_all_reports_a_task_without_a_handle),
          TEST_ENTRY(async_gemm_ordered_by_bytes_not_buffers),
          TEST_ENTRY(async_gemm_takes_the_faults_set_at_submission),
          TEST_ENTRY(tasks_ordered_across_overlapping_registrations),
          TEST_ENTRY(task_handles_released_once), TEST_ENTRY(task_cannot_wait_for_its_context),
          TEST_ENTRY(a_copy_left_on_a_device_gives_its_room_back_after_a_wait),
          TEST_ENTRY(a_gemm_refused_in_a_task_leaves_no_report),
          TEST_ENTRY(a_task_registers_buffers_beside_the_caller),
          TEST_ENTRY(keeping_c_leaves_the_plan_its_memory),
          TEST_ENTRY(calibration_measures_the_memory_copies_held))
