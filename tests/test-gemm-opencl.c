/* test-gemm-opencl.c: the OpenCL backend (CLBlast) on opencl0: the GEMM
 * case matrix through the public API, and the backend's own contract: 2-D
 * copies, lanes ordered by events, operand offsets, C not read when beta is
 * 0, sub-devices, settings and allocation limits; and tasks with an OpenCL
 * implementation (poas_task_submit). Every test skips (77)
 * when no OpenCL device is present or the backend is not built. */
#include "config.h"

#include "api/context.h"
#include "devices/device.h"
#include "gemm-cases.h"
#include "predict/predict.h"
#include "harness.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#if POAS_HAVE_OPENCL
#include "devices/opencl/opencl.h"

#include <CL/cl.h>
#include <clblast_c.h>
#endif

/* Opens `selection`; TEST_SKIP when no OpenCL device is there, 1 when it
 * fails otherwise. Either way the reason is on stderr, so a test that
 * opens this way needs no buffer of its own for it. */
static int open_set(const char *selection, poas__devset *set) {
  char err[256];
  int rc = poas__devset_open(selection, set, err, sizeof err);
  if (rc == POAS_ENODEV) {
    fprintf(stderr, "  skip: %s\n", err);
    return TEST_SKIP;
  }
  if (rc)
    fprintf(stderr, "  open %s: %s: %s\n", selection, poas_err_name(rc), err);
  return rc ? 1 : 0;
}

/* Four threads open opencl0 through poas_init at once, then each checks a
 * GEMM. PoCL sets its devices up at a process's first discovery, and
 * without POAS's lock around discovery (devices/opencl/opencl.c,
 * walk_devices) a second thread's discovery meanwhile crashed in
 * clGetDeviceInfo or found no device. Only a process's first discovery
 * can meet it: this test comes first in the list, and
 * `test-gemm-opencl opencl_concurrent_opens` runs it alone. */
enum { OPENERS = 4, OPEN_N = 48 };

#if defined(__SANITIZE_ADDRESS__)
/* The openers build CLBlast's kernels, and PoCL's LLVM then gives each of
 * those threads an alternate signal stack of its own in place of ASan's,
 * which ASan fails to unmap when the thread ends ("unable to unmap"): this
 * program runs without ASan's alternate stacks. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "use_sigaltstack=0"; }
#endif

typedef struct opener {
  pthread_barrier_t *start;
  int rc, wrong;
  char why[256];
} opener;

static void *open_and_multiply(void *arg) {
  opener *o = arg;
  float A[OPEN_N * OPEN_N], B[OPEN_N * OPEN_N], C[OPEN_N * OPEN_N];
  for (int i = 0; i < OPEN_N * OPEN_N; i++)
    A[i] = (float)(i % 7), B[i] = (float)(i % 5), C[i] = NAN;
  pthread_barrier_wait(o->start);
  poas_context *ctx = test_open("opencl0");
  if (!ctx) {
    o->rc = -1;
    snprintf(o->why, sizeof o->why, "poas_init: %s", poas_error_detail());
    return NULL;
  }
  o->rc = poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, OPEN_N, OPEN_N, OPEN_N,
                     1, A, OPEN_N, B, OPEN_N, 0, C, OPEN_N);
  if (o->rc)
    snprintf(o->why, sizeof o->why, "poas_sgemm: %s", poas_error_detail());
  for (int j = 0; !o->rc && j < OPEN_N; j++)
    for (int i = 0; i < OPEN_N; i++) {
      double want = 0;
      for (int l = 0; l < OPEN_N; l++)
        want += (double)A[i + l * OPEN_N] * B[l + j * OPEN_N];
      o->wrong += !(fabs(C[i + j * OPEN_N] - want) <= 1e-6 * (fabs(want) + 1));
    }
  poas_finalize(ctx);
  return NULL;
}

TEST(opencl_concurrent_opens) {
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, OPENERS);
  opener o[OPENERS] = {0};
  pthread_t t[OPENERS];
  int started = 0;
  for (int i = 0; i < OPENERS; i++) {
    o[i].start = &start;
    started += pthread_create(&t[i], NULL, open_and_multiply, &o[i]) == 0;
  }
  CHECK(started == OPENERS); /* a barrier short of a thread would never open */
  for (int i = 0; i < OPENERS; i++)
    pthread_join(t[i], NULL);
  pthread_barrier_destroy(&start);
  /* Whether there is an OpenCL device is asked after the threads, since
   * asking first would set PoCL up before them. */
  poas__devset set;
  int rc = open_set("opencl0", &set);
  if (rc)
    return rc;
  poas__devset_close(&set);
  for (int i = 0; i < OPENERS; i++)
    CHECK_MSG(o[i].rc == 0 && o[i].wrong == 0, "thread %d: %s, %d elements wrong", i,
              o[i].rc ? o[i].why : "ran", o[i].wrong);
  return 0;
}

TEST(opencl_gemm_cases) { return gemm_cases_run("opencl0", 1); }

/* block=32 cuts every case past 32 a side into pieces of C and steps of
 * k (transposed, padded, alpha 0, beta 0 and 0.5 among them): each piece
 * after the first of its k accumulates, and a wrong offset or beta puts
 * wrong values in C. The string the profile matches ends with the
 * setting, and bad values are refused by name. */
TEST(opencl_gemm_cases_in_blocks) {
  poas__devset set;
  char err[256];
  if (poas__backend_opencl.count() == 0)
    SKIP("no OpenCL device");
  CHECK_OK(poas__devset_open("opencl0:block=32", &set, err, sizeof err));
  const char *driver = set.dev[0]->info.driver;
  size_t len = strlen(driver);
  CHECK_MSG(len > 9 && strcmp(driver + len - 9, " block=32") == 0, "driver '%s'", driver);
  poas__devset_close(&set);
  CHECK_OK(poas__devset_open("opencl0", &set, err, sizeof err));
  CHECK_MSG(!strstr(set.dev[0]->info.driver, "block="), "driver '%s'", set.dev[0]->info.driver);
  poas__devset_close(&set);
  /* block=0 holds whole calls where calibration might choose pieces: a
   * device apart from the default one, to a profile. */
  CHECK_OK(poas__devset_open("opencl0:block=0", &set, err, sizeof err));
  driver = set.dev[0]->info.driver;
  len = strlen(driver);
  CHECK_MSG(len > 8 && strcmp(driver + len - 8, " block=0") == 0 && !set.dev[0]->can_block,
            "driver '%s'", driver);
  poas__devset_close(&set);
  CHECK_RC(poas__devset_open("opencl0:block=48", &set, err, sizeof err), POAS_ESPEC);
  CHECK_MSG(strstr(err, "block=48") && strstr(err, "multiple of 32"), "%s", err);
  CHECK_RC(poas__devset_open("opencl0:block=-32", &set, err, sizeof err), POAS_ESPEC);
  CHECK_MSG(strstr(err, "-32") != NULL, "%s", err);
  CHECK_RC(poas__devset_open("opencl0:block=16384", &set, err, sizeof err), POAS_ESPEC);
  CHECK_MSG(strstr(err, "16384") != NULL, "%s", err);
  return gemm_cases_run("opencl0:block=32", 1);
}

TEST(opencl_copy2d_keeps_padding) {
  poas__devset set;
  int rc = open_set("opencl0", &set);
  if (rc)
    return rc;
  poas__device *d = set.dev[0];
  enum { W = 24, ROWS = 7, HP = 40, DP = 56, OFF = 13, SIZE = OFF + ROWS * DP + 9, BACKP = 31 };
  unsigned char src[ROWS * HP], dev[SIZE], back[ROWS * BACKP];
  for (size_t i = 0; i < sizeof src; i++)
    src[i] = (unsigned char)(i * 7 + 1);
  memset(dev, 0xAB, sizeof dev);
  memset(back, 0xCD, sizeof back);
  poas__mem mem;
  CHECK_OK(d->be->mem_alloc(d, SIZE, &mem));
  poas__copy2d whole = {SIZE, 1, SIZE, SIZE, 0, 0};
  poas__copy2d block = {W, ROWS, HP, DP, OFF, 0};
  poas__copy2d block_back = {W, ROWS, BACKP, DP, OFF, 0};
  CHECK_OK(d->be->copy_h2d(d, 0, mem, dev, &whole));
  CHECK_OK(d->be->copy_h2d(d, 0, mem, src, &block));
  CHECK_OK(d->be->copy_d2h(d, 0, dev, mem, &whole));
  CHECK_OK(d->be->copy_d2h(d, 0, back, mem, &block_back));
  CHECK_OK(d->be->lane_sync(d, 0));
  for (size_t i = 0; i < SIZE; i++) {
    size_t r = (i - OFF) / DP, c = (i - OFF) % DP;
    int inside = i >= OFF && r < ROWS && c < W;
    CHECK_MSG(dev[i] == (inside ? src[r * HP + c] : 0xAB), "device byte %zu", i);
  }
  for (size_t i = 0; i < sizeof back; i++) {
    size_t r = i / BACKP, c = i % BACKP;
    CHECK_MSG(back[i] == (c < W ? src[r * HP + c] : 0xCD), "host byte %zu", i);
  }
  d->be->mem_free(d, mem);
  poas__devset_close(&set);
  return 0;
}

/* Runs a column-major test problem on the device through all three lanes:
 * copies in on lane 0, gemm on lane 1 after an event, copy out on lane 2
 * after another, operands `off` elements into their buffers. C is always
 * copied in, so that a poisoned C reaches the device. */
static int device_gemm(poas__device *d, test_gemm *g, size_t off) {
  size_t es = poas__dtype_size(g->dtype);
  int64_t ar = g->ta == POAS_NO_TRANS ? g->m : g->k, ac = g->ta == POAS_NO_TRANS ? g->k : g->m;
  int64_t br = g->tb == POAS_NO_TRANS ? g->k : g->n, bc = g->tb == POAS_NO_TRANS ? g->n : g->k;
  size_t offb = off * es;
  poas__mem a, b, c;
  CHECK_OK(d->be->mem_alloc(d, offb + (size_t)(g->lda * POAS__MAX(ac, 1)) * es, &a));
  CHECK_OK(d->be->mem_alloc(d, offb + (size_t)(g->ldb * POAS__MAX(bc, 1)) * es, &b));
  CHECK_OK(d->be->mem_alloc(d, offb + (size_t)(g->ldc * g->n) * es, &c));
  poas__copy2d ca = {(size_t)ar * es, (size_t)ac, (size_t)g->lda * es, (size_t)g->lda * es,
                     offb, 0};
  poas__copy2d cb = {(size_t)br * es, (size_t)bc, (size_t)g->ldb * es, (size_t)g->ldb * es,
                     offb, 0};
  poas__copy2d cc = {(size_t)g->m * es, (size_t)g->n, (size_t)g->ldc * es, (size_t)g->ldc * es,
                     offb, 0};
  CHECK_OK(d->be->copy_h2d(d, 0, a, g->A, &ca));
  CHECK_OK(d->be->copy_h2d(d, 0, b, g->B, &cb));
  CHECK_OK(d->be->copy_h2d(d, 0, c, g->C, &cc));
  poas__event in, done;
  CHECK_OK(d->be->event_create(d, &in));
  CHECK_OK(d->be->event_create(d, &done));
  CHECK_OK(d->be->event_record(d, 0, &in));
  CHECK_OK(d->be->lane_wait(d, 1, &in));
  poas__gemm_call call = {g->dtype, g->ta,  g->tb,         g->m,          g->n,
                          g->k,     g->alpha, g->beta,     {a, offb, g->lda},
                          {b, offb, g->ldb}, {c, offb, g->ldc}};
  CHECK_OK(d->be->gemm(d, 1, &call));
  CHECK_OK(d->be->event_record(d, 1, &done));
  CHECK_OK(d->be->lane_wait(d, 2, &done));
  CHECK_OK(d->be->copy_d2h(d, 2, g->C, c, &cc));
  CHECK_OK(d->be->event_sync(d, &in));
  CHECK_OK(d->be->event_record(d, 2, &in)); /* recorded again once complete */
  CHECK_OK(d->be->event_sync(d, &in));
  CHECK(in.wall > 0);
  d->be->event_destroy(d, &done);
  d->be->event_destroy(d, &in);
  d->be->mem_free(d, c);
  d->be->mem_free(d, b);
  d->be->mem_free(d, a);
  return 0;
}

/* A col-major sgemm m x n x k with beta 0 through ctx, C poisoned first
 * and checked against the reference after: 0 when it ran and is right,
 * else 1 with what went wrong on stderr (`what` names the case). */
static int sgemm_checked(poas_context *ctx, int64_t m, int64_t n, int64_t k, uint64_t seed,
                         const char *what) {
  test_gemm tg;
  if (test_gemm_alloc(&tg, POAS_FLOAT32, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, m, n, k, 0,
                      1.0, 0.0, seed)) {
    test_gemm_free(&tg);
    fprintf(stderr, "  %s: no memory for the operands\n", what);
    return 1;
  }
  test_poison(tg.C, POAS_FLOAT32, (size_t)(m * n));
  int rc = test_gemm_run(ctx, &tg), bad = rc != 0;
  if (bad)
    fprintf(stderr, "  %s: %s: %s\n", what, poas_err_name(rc), poas_error_detail());
  else
    bad = test_gemm_verify(&tg, what);
  test_gemm_free(&tg);
  return bad;
}

static int run_device_case(poas__device *d, poas_dtype dt, poas_op ta, poas_op tb, int64_t m,
                           int64_t n, int64_t k, double alpha, double beta, size_t off,
                           uint64_t seed) {
  test_gemm g;
  if (test_gemm_alloc(&g, dt, POAS_COL_MAJOR, ta, tb, m, n, k, 3, alpha, beta, seed)) {
    test_gemm_free(&g);
    return 1;
  }
  if (beta == 0)
    for (int64_t j = 0; j < n; j++) {
      test_poison((char *)g.C + (size_t)(j * g.ldc) * poas__dtype_size(dt), dt, (size_t)m);
      test_poison((char *)g.C0 + (size_t)(j * g.ldc) * poas__dtype_size(dt), dt, (size_t)m);
    }
  char what[128];
  snprintf(what, sizeof what, "%sgemm %c%c m=%lld n=%lld k=%lld alpha=%g beta=%g off=%zu",
           dt == POAS_FLOAT32 ? "s" : "d", ta == POAS_TRANS ? 'T' : 'N',
           tb == POAS_TRANS ? 'T' : 'N', (long long)m, (long long)n, (long long)k, alpha, beta,
           off);
  int bad = device_gemm(d, &g, off);
  if (bad)
    fprintf(stderr, "  %s: %s\n", what, poas_error_detail());
  else
    bad = test_gemm_verify(&g, what);
  test_gemm_free(&g);
  return bad;
}

TEST(opencl_lanes_ordered_by_events) {
  poas__devset set;
  int rc = open_set("opencl0", &set);
  if (rc)
    return rc;
  poas__device *d = set.dev[0];
  CHECK(d->nlanes == 3 && d->info.host_memory == 0);
  for (int dt = 0; dt < 2; dt++) {
    CHECK(0 == run_device_case(d, (poas_dtype)dt, POAS_NO_TRANS, POAS_TRANS, 192, 160, 224, 1.0,
                             0.5, 5, 11));
    CHECK(0 == run_device_case(d, (poas_dtype)dt, POAS_TRANS, POAS_NO_TRANS, 37, 29, 19, -1.5, 1.0,
                             3, 12));
  }
  poas__devset_close(&set);
  return 0;
}

/* A CPU device without block=N runs in the pieces its model was
 * calibrated in (poas__device_take_settings), by dtype; one given block=N
 * keeps N whatever the model says. Both compute right in those pieces
 * (offsets, transposes, beta 0.5 after the first step over k). */
TEST(opencl_pieces_follow_the_model) {
  poas__devset set;
  int rc = open_set("opencl0", &set);
  if (rc)
    return rc;
  poas__device *d = set.dev[0];
  CHECK(d->gemm_block[0] == 0 && d->gemm_block[1] == 0);
  CHECK(d->can_block == d->info.shares_host_cores);
  if (!d->can_block) {
    poas__devset_close(&set);
    SKIP("opencl0 is not a CPU device: calibration does not choose its pieces");
  }
  poas__device_model m = {0};
  m.gemm_block[0] = 64, m.gemm_block[1] = 96;
  poas__device_take_settings(d, &m);
  CHECK(d->gemm_block[0] == 64 && d->gemm_block[1] == 96);
  for (int dt = 0; dt < 2; dt++) {
    CHECK(0 == run_device_case(d, (poas_dtype)dt, POAS_NO_TRANS, POAS_TRANS, 200, 150, 130, 1.0,
                               0.5, 5, 31));
    CHECK(0 == run_device_case(d, (poas_dtype)dt, POAS_TRANS, POAS_NO_TRANS, 97, 211, 65, -1.5,
                               0.0, 3, 32));
  }
  poas__devset_close(&set);
  char err[256];
  CHECK_OK(poas__devset_open("opencl0:block=32", &set, err, sizeof err));
  d = set.dev[0];
  CHECK(!d->can_block && d->gemm_block[0] == 32 && d->gemm_block[1] == 32);
  poas__device_take_settings(d, &m);
  CHECK(d->gemm_block[0] == 32 && d->gemm_block[1] == 32);
  poas__devset_close(&set);
  return 0;
}

/* poas_profile_get tells the pieces a device runs its GEMMs in (poas-info
 * prints them): block=N's by hand, none for whole calls. */
TEST(opencl_fit_reports_pieces) {
  static const char *const sel[2] = {"opencl0:block=96", "opencl0:block=0"};
  for (int i = 0; i < 2; i++) {
    poas_context *ctx = test_open(sel[i]);
    if (!ctx && i == 0)
      SKIP("no OpenCL device");
    CHECK_MSG(ctx != NULL, "%s: %s", sel[i], poas_error_detail());
    poas_profile_info pi;
    CHECK_OK(poas_profile_get(ctx, &pi));
    CHECK(pi.ndevices == 1);
    int want = i == 0 ? 96 : 0;
    CHECK_MSG(pi.dev[0].gemm_block[0] == want && pi.dev[0].gemm_block[1] == want,
              "%s: pieces %d and %d", sel[i], pi.dev[0].gemm_block[0], pi.dev[0].gemm_block[1]);
    poas_finalize(ctx);
  }
  return 0;
}

/* C holds NaNs on the device: beta = 0 must not read them, whether the
 * product is computed, k is 0 or alpha is 0. */
TEST(opencl_beta_zero_ignores_c) {
  poas__devset set;
  int rc = open_set("opencl0", &set);
  if (rc)
    return rc;
  poas__device *d = set.dev[0];
  for (int dt = 0; dt < 2; dt++) {
    poas_dtype t = (poas_dtype)dt;
    CHECK(0 == run_device_case(d, t, POAS_NO_TRANS, POAS_NO_TRANS, 33, 17, 9, 1.0, 0.0, 0, 21));
    CHECK(0 == run_device_case(d, t, POAS_NO_TRANS, POAS_NO_TRANS, 33, 17, 0, 1.0, 0.0, 0, 22));
    CHECK(0 == run_device_case(d, t, POAS_TRANS, POAS_TRANS, 33, 17, 9, 0.0, 0.0, 2, 23));
    CHECK(0 == run_device_case(d, t, POAS_NO_TRANS, POAS_NO_TRANS, 33, 17, 0, 1.0, 0.5, 1, 24));
    CHECK(0 == run_device_case(d, t, POAS_NO_TRANS, POAS_TRANS, 33, 17, 9, 0.0, -2.0, 0, 25));
  }
  poas__devset_close(&set);
  return 0;
}

TEST(opencl_cores_subdevice) {
  poas__devset set;
  char err[256];
  int rc = poas__devset_open("opencl0:cores=1", &set, err, sizeof err);
  if (rc == POAS_ENODEV)
    SKIP("%s", err);
  if (rc == POAS_ESPEC && strstr(err, "cannot be partitioned"))
    SKIP("%s", err);
  CHECK_MSG(rc == 0, "%s", err);
  poas__device *d = set.dev[0];
  CHECK(d->info.cores == 1);
  CHECK(strcmp(d->info.id, "opencl0") == 0);
  CHECK(0 == run_device_case(d, POAS_FLOAT32, POAS_NO_TRANS, POAS_NO_TRANS, 64, 48, 32, 1.0, 0.5, 0,
                           31));
  poas__devset_close(&set);
  return 0;
}

/* Calibration first builds the device's kernels (CLBlast's programs and
 * PoCL's per-launch variants: 23-31 s on a new CI machine) through
 * poas__calibrate_build: its calls all succeed, in one dtype or both, and
 * leave the device computing right. */
TEST(opencl_calibration_builds_its_kernels) {
  poas__devset set;
  int rc = open_set("opencl0:cores=1", &set);
  if (rc)
    return rc;
  poas__device *d = set.dev[0];
  for (int mask = 0; mask < 4; mask++) { /* none, s, d, both */
    poas__calib_opts o = {.dtype_mask = mask};
    CHECK_OK(poas__calibrate_build(d, &o));
  }
  for (int dt = 0; dt < 2; dt++)
    CHECK(0 == run_device_case(d, (poas_dtype)dt, POAS_TRANS, POAS_NO_TRANS, 250, 60, 256, 1.0,
                               0.5, 0, 41 + dt));
  poas__devset_close(&set);
  return 0;
}

/* Double precision is the extension or a nonzero CL_DEVICE_DOUBLE_FP_CONFIG,
 * either one alone (drivers have reported one without the other); the
 * extension only as a whole name. */
TEST(opencl_fp64_from_either_report) {
#if !POAS_HAVE_OPENCL
  SKIP("OpenCL backend not built");
#else
  const uint64_t config = CL_FP_FMA | CL_FP_ROUND_TO_NEAREST | CL_FP_INF_NAN | CL_FP_DENORM;
  CHECK(poas__ocl_has_fp64("cl_khr_icd cl_khr_fp64", 0));
  CHECK(poas__ocl_has_fp64("cl_khr_fp64 cl_khr_fp16", 0));
  CHECK(poas__ocl_has_fp64("cl_khr_fp64", 0));
  CHECK(poas__ocl_has_fp64("cl_khr_fp16", config));
  CHECK(poas__ocl_has_fp64(NULL, config));
  CHECK(!poas__ocl_has_fp64("cl_khr_fp16 cl_khr_int64_base_atomics", 0));
  CHECK(!poas__ocl_has_fp64("cl_khr_fp64x cl_amd_fp64", 0));
  CHECK(!poas__ocl_has_fp64("xcl_khr_fp64", 0));
  CHECK(!poas__ocl_has_fp64("", 0));
  CHECK(!poas__ocl_has_fp64(NULL, 0));
  /* PoCL's CPU device reports both: it gets a double-precision peak. */
  poas__devset set;
  int rc = open_set("opencl0", &set);
  if (rc)
    return rc;
  poas__device *d = set.dev[0];
  CHECK(d->info.peak_gflops[POAS_FLOAT64] > 0);
  poas__devset_close(&set);
  return 0;
#endif
}

/* A device that reports a clock of 0 MHz is estimated at a nominal clock,
 * not at a peak of 0, which the planner would read as "cannot compute". */
TEST(opencl_zero_clock_gets_nominal) {
#if !POAS_HAVE_OPENCL
  SKIP("OpenCL backend not built");
#else
  CHECK(poas__ocl_clock_mhz(0) == POAS__OCL_NOMINAL_MHZ);
  CHECK(POAS__OCL_NOMINAL_MHZ > 0);
  CHECK(poas__ocl_clock_mhz(2596) == 2596);
  CHECK(poas__ocl_clock_mhz(1) == 1);
  return 0;
#endif
}

/* CLBlast indexes operands with 32-bit ints, its padded copies too: an
 * operand is refused once its last element, from its buffer's start, or
 * its sides rounded up to 128 reach past the limit; A and B do not count
 * where they are not read. */
TEST(opencl_operands_past_int32_refused) {
#if !POAS_HAVE_OPENCL
  SKIP("OpenCL backend not built");
#else
  const int64_t max = INT32_MAX;
  poas__mem none = {NULL};
  poas__gemm_call g = {POAS_FLOAT32, POAS_NO_TRANS, POAS_NO_TRANS, 46336, 46336, 46336, 1.0, 0.0,
                       {none, 0, 46336}, {none, 0, 46336}, {none, 0, 46336}};
  CHECK(poas__ocl_gemm_fits(&g, max)); /* 46336^2 = 2147024896, a multiple of 128 a side */
  g.c.off = 1000000 * sizeof(float);   /* its last element then 2148024896 */
  CHECK(!poas__ocl_gemm_fits(&g, max));
  g.c.off = 0, g.b.off = 1000000 * sizeof(float);
  CHECK(!poas__ocl_gemm_fits(&g, max));
  g.alpha = 0; /* B not read: C alone counts */
  CHECK(poas__ocl_gemm_fits(&g, max));
  g.alpha = 1, g.b.off = 0;
  g.m = g.n = g.k = 46340; /* 2147395600 elements, but 46464^2 padded */
  g.a.ld = g.b.ld = g.c.ld = 46340;
  CHECK(!poas__ocl_gemm_fits(&g, max));
  g.dtype = POAS_FLOAT64; /* in elements, whatever their size */
  CHECK(!poas__ocl_gemm_fits(&g, max));
  poas__gemm_call thin = {POAS_FLOAT32, POAS_TRANS, POAS_NO_TRANS, 1, 1, 1, 1.0, 1.0,
                          {none, 0, (int64_t)1 << 31}, {none, 0, 1}, {none, 0, 1}};
  CHECK(!poas__ocl_gemm_fits(&thin, max)); /* an ld past int, on a one-column operand */
  thin.a.ld = 1;
  CHECK(poas__ocl_gemm_fits(&thin, max));
  poas__transpose_call t = {POAS_FLOAT32, 128, 16384, {none, 0, 128}, {none, 0, 16384}};
  CHECK(poas__ocl_transpose_fits(&t, 128 * 16384));
  t.dst.off = 4;
  CHECK(!poas__ocl_transpose_fits(&t, 128 * 16384));
  return 0;
#endif
}

/* With the limit lowered to 128 x 128 elements, opencl0 runs a 100^3
 * sgemm at offset 0 and refuses one whose C starts 6400 elements into its
 * buffer, writing nothing; a plan on it alone cuts a 1000-row C (100
 * columns) into tiles of at most 128 rows, which then all run. */
TEST(opencl_index_limit_cuts_plans) {
#if !POAS_HAVE_OPENCL
  SKIP("OpenCL backend not built");
#else
  int64_t saved = poas__ocl_index_max;
  poas__ocl_index_max = 128 * 128;
  poas__devset set;
  int rc = open_set("opencl0", &set);
  if (rc) {
    poas__ocl_index_max = saved;
    return rc;
  }
  poas__device *d = set.dev[0];
  CHECK(d->gemm_max_elems == 128 * 128 && d->gemm_index_pad == 128);
  enum { N = 100, OFF = 6400 };
  static float host[OFF + N * N];
  for (size_t i = 0; i < POAS__ARRAY_LEN(host); i++)
    host[i] = 1.0f;
  poas__mem a, b, c;
  CHECK_OK(d->be->mem_alloc(d, N * N * sizeof(float), &a));
  CHECK_OK(d->be->mem_alloc(d, N * N * sizeof(float), &b));
  CHECK_OK(d->be->mem_alloc(d, sizeof host, &c));
  poas__copy2d square = {N * N * sizeof(float), 1, 0, 0, 0, 0};
  poas__copy2d whole = {sizeof host, 1, 0, 0, 0, 0};
  CHECK_OK(d->be->copy_h2d(d, 1, a, host, &square));
  CHECK_OK(d->be->copy_h2d(d, 1, b, host, &square));
  CHECK_OK(d->be->copy_h2d(d, 1, c, host, &whole));
  poas__gemm_call g = {POAS_FLOAT32, POAS_NO_TRANS, POAS_NO_TRANS, N, N, N, 1.0, 0.0,
                       {a, 0, N}, {b, 0, N}, {c, 0, N}};
  CHECK_OK(d->be->gemm(d, 1, &g));
  g.c.off = OFF * sizeof(float);
  CHECK_RC(d->be->gemm(d, 1, &g), POAS_ENOTSUP);
  CHECK_MSG(strstr(poas_error_detail(), "32-bit"), "%s", poas_error_detail());
  CHECK_OK(d->be->copy_d2h(d, 1, host, c, &whole));
  CHECK_OK(d->be->lane_sync(d, 1));
  for (int i = 0; i < OFF + N * N; i++) /* the first call's C, then ones */
    CHECK_MSG(host[i] == (i < N * N ? (float)N : 1.0f), "C[%d] = %g", i, host[i]);
  d->be->mem_free(d, c);
  d->be->mem_free(d, b);
  d->be->mem_free(d, a);
  poas__devset_close(&set);

  poas_context *ctx = test_open("opencl0");
  CHECK_MSG(ctx != NULL, "%s", poas_error_detail());
  test_gemm tg;
  CHECK_OK(test_gemm_alloc(&tg, POAS_FLOAT32, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 1000,
                           N, N, 0, 1.0, 0.5, 51));
  rc = test_gemm_run(ctx, &tg);
  CHECK_MSG(rc == 0, "%s: %s", poas_err_name(rc), poas_error_detail());
  CHECK(0 == test_gemm_verify(&tg, "sgemm 1000 x 100 x 100 under a 128^2 limit"));
  test_gemm_free(&tg);
  poas_finalize(ctx);
  poas__ocl_index_max = saved;
  return 0;
#endif
}

/* A transpose of an unknown dtype is refused like a gemm of one, before
 * the dtype's size (0) divides its offsets. */
TEST(opencl_transpose_refuses_unknown_dtype) {
  poas__devset set;
  int rc = open_set("opencl0", &set);
  if (rc)
    return rc;
  poas__device *d = set.dev[0];
  poas__mem mem;
  CHECK_OK(d->be->mem_alloc(d, 64 * sizeof(double), &mem));
  poas__transpose_call t = {(poas_dtype)7, 4, 4, {mem, 0, 4}, {mem, 32 * sizeof(double), 4}};
  CHECK_RC(d->be->transpose(d, 1, &t), POAS_EDTYPE);
  poas__gemm_call g = {(poas_dtype)7, POAS_NO_TRANS, POAS_NO_TRANS, 4, 4, 4, 1.0, 0.0,
                       {mem, 0, 4}, {mem, 0, 4}, {mem, 32 * sizeof(double), 4}};
  CHECK_RC(d->be->gemm(d, 1, &g), POAS_EDTYPE);
  t.dtype = POAS_FLOAT64;
  CHECK_OK(d->be->transpose(d, 1, &t));
  CHECK_OK(d->be->lane_sync(d, 1));
  d->be->mem_free(d, mem);
  poas__devset_close(&set);
  return 0;
}

/* With its largest buffer lowered to 64 KiB, opencl0 refuses an
 * allocation past it, and says so to plans. A 1000 x 100 x 100 sgemm on
 * it alone shares B (40000 bytes, held twice: as stored and transposed
 * for CLBlast) and is cut into tiles of at most 163 rows, whose A and C
 * tiles (400 bytes a row each) fit; run, every element of a poisoned C is
 * right. A k of 200 makes B (80000 bytes) too large to hold: alone, the
 * plan is refused with the reason; beside the CPU, opencl0 is left out
 * with it and the CPU computes C. Without the planner's limit, opencl0
 * alone was planned one tile of 1000 rows, whose 400000-byte A and C
 * tiles it cannot allocate. */
TEST(opencl_buffer_limit_cuts_plans) {
#if !POAS_HAVE_OPENCL
  SKIP("OpenCL backend not built");
#else
  enum { LIMIT = 64 << 10, M = 1000, N = 100, K = 100 };
  uint64_t saved = poas__ocl_buffer_max;
  poas__ocl_buffer_max = LIMIT;
  poas__devset set;
  int rc = open_set("opencl0", &set);
  if (rc) {
    poas__ocl_buffer_max = saved;
    return rc;
  }
  poas__device *d = set.dev[0];
  CHECK(d->max_buffer_bytes == LIMIT);
  poas__mem mem;
  CHECK_RC(d->be->mem_alloc(d, LIMIT + 1, &mem), POAS_ENOMEM);
  CHECK_OK(d->be->mem_alloc(d, LIMIT, &mem));
  d->be->mem_free(d, mem);
  poas__devset_close(&set);

  poas_context *ctx = test_open("opencl0");
  CHECK_MSG(ctx != NULL, "%s", poas_error_detail());
  poas_plan plan;
  CHECK_OK(poas_plan_gemm_call(ctx, POAS_FLOAT32, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS,
                               M, N, K, 1.0, 0.0, &plan));
  CHECK(plan.ndevices == 1 && plan.split == POAS_SPLIT_ROWS);
  CHECK_MSG(plan.dev[0].tile * (K > N ? K : N) * (int64_t)sizeof(float) <= LIMIT,
            "tile %lld", (long long)plan.dev[0].tile);
  CHECK(0 == sgemm_checked(ctx, M, N, K, 52,
                           "sgemm 1000 x 100 x 100 under a 64 KiB buffer limit"));
  CHECK_RC(poas_plan_gemm_call(ctx, POAS_FLOAT32, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS,
                               M, N, 2 * K, 1.0, 0.0, &plan),
           POAS_ETOOBIG);
  CHECK_MSG(strstr(poas_error_detail(), "it can allocate at once"), "%s", poas_error_detail());
  poas_finalize(ctx);

  ctx = test_open("cpu,opencl0");
  CHECK_MSG(ctx != NULL, "%s", poas_error_detail());
  CHECK_OK(poas_plan_gemm_call(ctx, POAS_FLOAT32, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS,
                               M, N, 2 * K, 1.0, 0.0, &plan));
  CHECK(plan.ndevices == 1 && strcmp(plan.dev[0].id, "cpu0") == 0);
  CHECK(plan.nexcluded == 1 && strstr(plan.excluded[0].reason, "it can allocate at once"));
  CHECK(0 == sgemm_checked(ctx, M, N, 2 * K, 53,
                           "sgemm 1000 x 100 x 200 beside opencl0 left out"));
  poas_finalize(ctx);
  poas__ocl_buffer_max = saved;
  return 0;
#endif
}

#if POAS_HAVE_OPENCL
/* Runs a 1000 x 100 x 100 sgemm as a task on a context of opencl0 alone,
 * C poisoned, and checks C against the reference; *kept: the bytes of C
 * the GEMM left on the device once its task was waited for. */
static int kept_c_case(const char *what, uint64_t seed, uint64_t *kept) {
  poas_context *ctx = test_open("opencl0");
  CHECK_MSG(ctx != NULL, "%s", poas_error_detail());
  test_gemm tg;
  CHECK_OK(test_gemm_alloc(&tg, POAS_FLOAT32, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 1000,
                           100, 100, 0, 1.0, 0.0, seed));
  test_poison(tg.C, POAS_FLOAT32, (size_t)tg.ldc * 100);
  poas_task *t;
  CHECK_OK(poas_sgemm_async(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 1000, 100, 100,
                            1.0f, tg.A, tg.lda, tg.B, tg.ldb, 0.0f, tg.C, tg.ldc, &t));
  int rc = poas_task_wait(t);
  CHECK_MSG(rc == 0, "%s: %s: %s", what, poas_err_name(rc), poas_error_detail());
  CHECK(0 == test_gemm_verify(&tg, what));
  *kept = poas__resident_bytes(ctx, 0); /* freed only by the next wait_all or GEMM */
  test_gemm_free(&tg);
  poas_finalize(ctx);
  return 0;
}
#endif

/* A GEMM task planned on one device keeps C whole there for the next task
 * (api/resident.c), one buffer of m x n that each tile's GEMM indexes from
 * its start. A 1000 x 100 C (100000 elements, 400000 bytes) is kept on
 * opencl0 as it is. With the index limit lowered to 128^2 its plan is cut
 * into tiles within it, but C whole was kept past it, and the tiles' GEMMs
 * were refused mid-run (POAS_ENOTSUP: this part fails without the check).
 * With the largest buffer lowered to 64 KiB, C whole is past that: its
 * allocation failed and C went through tiles, which the check now decides
 * before. Both leave nothing kept and compute a poisoned C right. */
TEST(opencl_kept_c_stays_within_limits) {
#if !POAS_HAVE_OPENCL
  SKIP("OpenCL backend not built");
#else
  poas__devset set;
  int rc = open_set("opencl0", &set);
  if (rc)
    return rc;
  poas__devset_close(&set);
  uint64_t kept;
  CHECK_OK(kept_c_case("sgemm task 1000 x 100 x 100", 61, &kept));
  CHECK_MSG(kept == 1000 * 100 * sizeof(float), "kept %llu bytes", (unsigned long long)kept);

  int64_t saved_index = poas__ocl_index_max;
  poas__ocl_index_max = 128 * 128;
  rc = kept_c_case("sgemm task 1000 x 100 x 100 under a 128^2 index limit", 62, &kept);
  poas__ocl_index_max = saved_index;
  CHECK_OK(rc);
  CHECK_MSG(kept == 0, "kept %llu bytes", (unsigned long long)kept);

  uint64_t saved_buffer = poas__ocl_buffer_max;
  poas__ocl_buffer_max = 64 << 10;
  rc = kept_c_case("sgemm task 1000 x 100 x 100 under a 64 KiB buffer limit", 63, &kept);
  poas__ocl_buffer_max = saved_buffer;
  CHECK_OK(rc);
  CHECK_MSG(kept == 0, "kept %llu bytes", (unsigned long long)kept);
  return 0;
#endif
}

#if POAS_HAVE_OPENCL
/* The bytes poas__dev_available says d could allocate now; ~0 when it
 * cannot tell. */
static uint64_t available(poas__device *d) {
  uint64_t now;
  return poas__dev_available(d, &now) == 0 ? now : ~(uint64_t)0;
}
#endif

/* Two contexts of one OpenCL device share its memory: OpenCL tells no
 * free memory, and the backend counted what each context reserved apart,
 * so with opencl0 reporting 8 MiB, context A held 6 MiB and context B
 * (a sub-device of one core, in its parent's memory) was still let
 * allocate 6 MiB more, and planned on all 8 (poas__dev_available could
 * not tell: -1). Counted for the process, B is refused past the 2 MiB
 * left and sees just those; what A and B park counts as free to both,
 * and an allocation that needs it releases every context's parked
 * buffers first. A third context's sgemm of 2000 x 200 x 200 (3.5 MB,
 * one tile within 8 MiB) is then planned in tiles within the 2 MiB B
 * leaves it, and computes a poisoned C right. */
TEST(opencl_memory_shared_by_contexts) {
#if !POAS_HAVE_OPENCL
  SKIP("OpenCL backend not built");
#else
  enum { MIB = 1 << 20, M = 2000, N = 200, K = 200 };
  uint64_t saved = poas__ocl_memory_max;
  poas__ocl_memory_max = 8 * MIB;
  poas__devset sa, sb;
  int rc = open_set("opencl0", &sa);
  if (!rc && (rc = open_set("opencl0:cores=1", &sb)) != 0)
    poas__devset_close(&sa);
  if (rc) {
    poas__ocl_memory_max = saved;
    return rc;
  }
  poas__device *a = sa.dev[0], *b = sb.dev[0];
  CHECK(a->info.memory_bytes == 8 * MIB && b->info.memory_bytes == 8 * MIB);
  CHECK_MSG(available(a) == 8 * MIB && available(b) == 8 * MIB, "a %llu, b %llu",
            (unsigned long long)available(a), (unsigned long long)available(b));
  poas__mem a1, a2, b1, big;
  CHECK_OK(poas__dev_alloc(a, 3 * MIB, &a1));
  CHECK_OK(poas__dev_alloc(a, 3 * MIB, &a2));
  CHECK_MSG(available(b) == 2 * MIB, "b sees %llu bytes free beside a's 6 MiB",
            (unsigned long long)available(b));
  int was = poas__failures_expected(1);
  rc = poas__dev_alloc(b, 3 * MIB, &b1);
  poas__failures_expected(was);
  CHECK_MSG(rc == POAS_ENOMEM, "b allocated 3 MiB beside a's 6 MiB of 8: %s", poas_err_name(rc));
  CHECK_OK(poas__dev_alloc(b, 2 * MIB, &b1));
  CHECK(available(a) == 0 && available(b) == 0);
  /* Parked: b's 2 MiB, and 3 of a's 6 (a cache parks half the device). */
  poas__dev_free(b, b1, 2 * MIB);
  poas__dev_free(a, a1, 3 * MIB);
  poas__dev_free(a, a2, 3 * MIB);
  CHECK_MSG(available(a) == 8 * MIB && available(b) == 8 * MIB, "a %llu, b %llu",
            (unsigned long long)available(a), (unsigned long long)available(b));
  /* 6 MiB fit only once both caches are emptied. */
  CHECK_OK(poas__dev_alloc(b, 6 * MIB, &big));
  CHECK_MSG(available(a) == 2 * MIB, "a sees %llu bytes free beside b's 6 MiB",
            (unsigned long long)available(a));

  poas_context *ctx = test_open("opencl0");
  CHECK_MSG(ctx != NULL, "%s", poas_error_detail());
  poas_plan plan;
  CHECK_OK(poas_plan_gemm_call(ctx, POAS_FLOAT32, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS,
                               M, N, K, 1.0, 0.0, &plan));
  CHECK_MSG(plan.ndevices == 1 && plan.dev[0].tiles > 1, "%d devices, %lld tiles of %lld",
            plan.ndevices, (long long)plan.dev[0].tiles, (long long)plan.dev[0].tile);
  CHECK(0 == sgemm_checked(ctx, M, N, K, 71,
                           "sgemm 2000 x 200 x 200 beside another context's 6 MiB"));
  poas_finalize(ctx);
  CHECK_MSG(available(b) == 2 * MIB, "b sees %llu bytes free once the GEMM's context closed",
            (unsigned long long)available(b));
  poas__dev_free(b, big, 6 * MIB);
  poas__devset_close(&sb);
  CHECK_MSG(available(a) == 8 * MIB, "a sees %llu bytes free alone",
            (unsigned long long)available(a));
  poas__devset_close(&sa);
  poas__ocl_memory_max = saved;
  return 0;
#endif
}

TEST(opencl_bad_settings_named) {
  poas__devset set;
  char err[256];
  if (poas__backend_opencl.count() == 0)
    SKIP("no OpenCL device");
  CHECK_RC(poas__devset_open("opencl0:colour=blue", &set, err, sizeof err), POAS_ESPEC);
  CHECK_MSG(strstr(err, "colour") != NULL, "%s", err);
  CHECK_RC(poas__devset_open("opencl0:cores=0", &set, err, sizeof err), POAS_ESPEC);
  CHECK_MSG(strstr(err, "'0'") != NULL, "%s", err);
  CHECK_RC(poas__devset_open("opencl0:cores=100000", &set, err, sizeof err), POAS_ESPEC);
  CHECK_MSG(strstr(err, "100000") != NULL, "%s", err);
  CHECK_RC(poas__devset_open("opencl0:cores=two", &set, err, sizeof err), POAS_ESPEC);
  CHECK_MSG(strstr(err, "two") != NULL, "%s", err);
  return 0;
}

#if POAS_HAVE_OPENCL
/* The largest single allocation of opencl0, asked of OpenCL directly. */
static uint64_t max_alloc_of_first_device(void) {
  cl_uint np = 0;
  cl_platform_id plat[16];
  if (clGetPlatformIDs(16, plat, &np) != CL_SUCCESS)
    return 0;
  for (cl_uint p = 0; p < np && p < 16; p++) {
    cl_device_id dev;
    cl_ulong v = 0;
    if (clGetDeviceIDs(plat[p], CL_DEVICE_TYPE_ALL, 1, &dev, NULL) == CL_SUCCESS)
      return clGetDeviceInfo(dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof v, &v, NULL) == CL_SUCCESS
                 ? v
                 : 0;
  }
  return 0;
}
#endif

/* A device or platform string longer than the room for it comes back
 * cut, not empty (OpenCL refuses a buffer smaller than the string). */
TEST(opencl_long_strings_are_cut) {
#if !POAS_HAVE_OPENCL
  SKIP("OpenCL backend not built");
#else
  cl_platform_id plat;
  cl_device_id dev;
  cl_uint np = 0;
  if (clGetPlatformIDs(1, &plat, &np) != CL_SUCCESS || np == 0 ||
      clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, NULL) != CL_SUCCESS)
    SKIP("no OpenCL device");
  char whole[1024], cut[8];
  poas__ocl_device_string(dev, CL_DEVICE_NAME, whole, sizeof whole);
  CHECK_MSG(strlen(whole) >= sizeof cut, "name '%s' too short to be cut", whole);
  poas__ocl_device_string(dev, CL_DEVICE_NAME, cut, sizeof cut);
  CHECK_MSG(strlen(cut) == sizeof cut - 1 && strncmp(cut, whole, sizeof cut - 1) == 0,
            "'%s' cut to '%s'", whole, cut);
  poas__ocl_device_string(dev, (cl_device_info)0x7fff, cut, sizeof cut); /* no such query */
  CHECK(cut[0] == '\0');
  /* A platform's name, which fill_info read into 64 bytes and left empty
   * when longer. */
  poas__ocl_platform_string(plat, CL_PLATFORM_NAME, whole, sizeof whole);
  CHECK_MSG(strlen(whole) >= sizeof cut, "platform '%s' too short to be cut", whole);
  poas__ocl_platform_string(plat, CL_PLATFORM_NAME, cut, sizeof cut);
  CHECK_MSG(strlen(cut) == sizeof cut - 1 && strncmp(cut, whole, sizeof cut - 1) == 0,
            "'%s' cut to '%s'", whole, cut);
  poas__ocl_platform_string(plat, (cl_platform_info)0x7fff, cut, sizeof cut);
  CHECK(cut[0] == '\0');
  return 0;
#endif
}

TEST(opencl_alloc_limits) {
  poas__devset set;
  int rc = open_set("opencl0", &set);
  if (rc)
    return rc;
  poas__device *d = set.dev[0];
  poas__mem mem;
#if POAS_HAVE_OPENCL
  uint64_t max_alloc = max_alloc_of_first_device();
  CHECK(max_alloc > 0);
  CHECK_RC(d->be->mem_alloc(d, (size_t)max_alloc + 1, &mem), POAS_ENOMEM);
  CHECK_MSG(strstr(poas_error_detail(), "largest allocation") != NULL, "%s",
            poas_error_detail());
#endif
  CHECK_RC(d->be->mem_alloc(d, (size_t)d->info.memory_bytes + 1, &mem), POAS_ENOMEM);
  CHECK_RC(d->be->mem_alloc(d, SIZE_MAX / 2, &mem), POAS_ENOMEM);
  CHECK_OK(d->be->mem_alloc(d, 0, &mem));
  d->be->mem_free(d, mem);
  poas__devset_close(&set);
  return 0;
}

/* CLBlast's indirect GEMM takes its temporary buffer from the lane
 * (devices/opencl/opencl.c, ocl_scratch): counted in the device's memory
 * like any buffer, and one per lane however many calls are queued on it.
 * A 500^3 sgemm, indirect on PoCL, pads A, B and C to 512^2 (3 MiB). With
 * room for the operands and one such buffer less a byte, the call is
 * refused as out of memory; with room for exactly one, four calls queued
 * on the compute lane before any is waited for all run, and C is
 * C0 + 4 x 0.25 AB. Before the lane kept one, each call made its own
 * outside the count: the refusal did not come, and PoCL held all four. */
TEST(opencl_scratch_is_one_per_lane) {
#if !POAS_HAVE_OPENCL
  SKIP("OpenCL backend not built");
#else
  enum { N = 500, CALLS = 4 };
  poas__devset set;
  int rc = open_set("opencl0", &set);
  if (rc)
    return rc;
  poas__device *d = set.dev[0];
  test_gemm g;
  CHECK_OK(test_gemm_alloc(&g, POAS_FLOAT32, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, N, N,
                           N, 0, 1.0 / CALLS, 1.0, 61));
  size_t bytes = (size_t)N * N * sizeof(float), temp = 0;
  cl_command_queue queue = d->be->native_lane(d, 1);
  CHECK(CLBlastSGemmTempBufferSize(CLBlastLayoutColMajor, CLBlastTransposeNo, CLBlastTransposeNo,
                                   N, N, N, 0, N, 0, N, 0, N, &queue, &temp) == CLBlastSuccess);
  if (temp == 0) {
    test_gemm_free(&g);
    poas__devset_close(&set);
    SKIP("CLBlast runs a 500^3 sgemm direct on this device: no temporary buffer");
  }
  poas__mem a, b, c;
  CHECK_OK(d->be->mem_alloc(d, bytes, &a));
  CHECK_OK(d->be->mem_alloc(d, bytes, &b));
  CHECK_OK(d->be->mem_alloc(d, bytes, &c));
  poas__copy2d whole = {bytes, 1, bytes, bytes, 0, 0};
  CHECK_OK(d->be->copy_h2d(d, 0, a, g.A, &whole));
  CHECK_OK(d->be->copy_h2d(d, 0, b, g.B, &whole));
  CHECK_OK(d->be->copy_h2d(d, 0, c, g.C, &whole));
  CHECK_OK(d->be->lane_sync(d, 0));
  poas__gemm_call call = {POAS_FLOAT32, POAS_NO_TRANS, POAS_NO_TRANS, N, N, N, g.alpha, g.beta,
                          {a, 0, N}, {b, 0, N}, {c, 0, N}};
  uint64_t memory = d->info.memory_bytes;
  d->info.memory_bytes = 3 * bytes + temp - 1;
  CHECK_RC(d->be->gemm(d, 1, &call), POAS_ENOMEM);
  CHECK_MSG(strstr(poas_error_detail(), "CLBlast's temporary copies") &&
                strstr(poas_error_detail(), "do not fit"),
            "%s", poas_error_detail());
  d->info.memory_bytes = 3 * bytes + temp;
  for (int i = 0; i < CALLS; i++)
    CHECK_OK(d->be->gemm(d, 1, &call));
  CHECK_OK(d->be->lane_sync(d, 1));
  CHECK_OK(d->be->copy_d2h(d, 2, g.C, c, &whole));
  CHECK_OK(d->be->lane_sync(d, 2));
  d->info.memory_bytes = memory;
  g.alpha = 1.0; /* CALLS times 1 / CALLS */
  CHECK(0 == test_gemm_verify(&g, "4 sgemms of 500^3 queued on one lane's scratch"));
  test_gemm_free(&g);
  d->be->mem_free(d, c);
  d->be->mem_free(d, b);
  d->be->mem_free(d, a);
  poas__devset_close(&set);
  return 0;
#endif
}

/* A closed device's queues and context go back to a pool, not to the
 * driver (PoCL's worker still releases events after clFinish returns): the
 * next open of the same device and cores takes the same queue, a second
 * device open at the same time gets its own, and other cores another. */
TEST(opencl_sessions_are_reused) {
  poas__devset a, b;
  char err[256];
  int rc = open_set("opencl0", &a);
  if (rc)
    return rc;
  CHECK_OK(poas__devset_open("opencl0", &b, err, sizeof err)); /* both open at once */
  void *qa = a.dev[0]->be->native_lane(a.dev[0], 1), *qb = b.dev[0]->be->native_lane(b.dev[0], 1);
  CHECK(qa && qb && qa != qb);
  poas__devset_close(&b);
  poas__devset_close(&a);
  /* Opened again, twice at once: the two idle sessions, no new one. */
  CHECK_OK(poas__devset_open("opencl0", &a, err, sizeof err));
  CHECK_OK(poas__devset_open("opencl0", &b, err, sizeof err));
  void *ra = a.dev[0]->be->native_lane(a.dev[0], 1), *rb = b.dev[0]->be->native_lane(b.dev[0], 1);
  poas__devset_close(&b);
  poas__devset_close(&a);
  CHECK_MSG((ra == qa && rb == qb) || (ra == qb && rb == qa), "queues %p %p, then %p %p", qa, qb,
            ra, rb);
  /* Another core count is another session. */
  rc = poas__devset_open("opencl0:cores=1", &a, err, sizeof err);
  if (rc == 0) {
    void *r1 = a.dev[0]->be->native_lane(a.dev[0], 1);
    poas__devset_close(&a);
    CHECK(r1 != qa && r1 != qb);
  }
  return 0;
}

#if POAS_HAVE_OPENCL
/* A task's OpenCL implementation: `value < 0` doubles each float of
 * buffers[0], else it sets the first `count` floats to `value`. It builds
 * its kernel from the queue's own context, as a user's code would. */
typedef struct kernel_arg {
  float value;
  size_t count;
  int calls;
  cl_int status;
} kernel_arg;

static void opencl_kernel_task(void **buffers, void *arg, void *queue_handle) {
  kernel_arg *k = arg;
  cl_command_queue q = queue_handle;
  static const char *src =
      "__kernel void twice(__global float *x) { x[get_global_id(0)] *= 2.0f; }\n"
      "__kernel void set(__global float *x, float v) { x[get_global_id(0)] = v; }\n";
  cl_context cx;
  cl_device_id dev;
  cl_int r = clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof cx, &cx, NULL);
  if (r == CL_SUCCESS)
    r = clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof dev, &dev, NULL);
  cl_program prog = r == CL_SUCCESS ? clCreateProgramWithSource(cx, 1, &src, NULL, &r) : NULL;
  if (r == CL_SUCCESS)
    r = clBuildProgram(prog, 1, &dev, "", NULL, NULL);
  cl_kernel kern = r == CL_SUCCESS ? clCreateKernel(prog, k->value < 0 ? "twice" : "set", &r)
                                   : NULL;
  cl_mem buf = buffers[0];
  if (r == CL_SUCCESS)
    r = clSetKernelArg(kern, 0, sizeof buf, &buf);
  if (r == CL_SUCCESS && k->value >= 0)
    r = clSetKernelArg(kern, 1, sizeof k->value, &k->value);
  if (r == CL_SUCCESS)
    r = clEnqueueNDRangeKernel(q, kern, 1, NULL, &k->count, NULL, 0, NULL, NULL);
  if (kern)
    clReleaseKernel(kern);
  if (prog)
    clReleaseProgram(prog);
  k->status = r;
  k->calls++;
}

static void host_must_not_run(void **buffers, void *arg) {
  (void)buffers;
  ((kernel_arg *)arg)->calls += 100;
}
#endif

/* Tasks with an OpenCL implementation run it on opencl0 (rather than the
 * host implementation beside it), on the bytes of their access alone:
 * a RW access on a middle range is doubled there and nowhere else, and a
 * W access whose kernel writes only its first floats leaves the rest of
 * the range as it was. Tasks with only an OpenCL implementation are
 * refused where there is no OpenCL device. */
TEST(opencl_tasks_run_their_kernels) {
#if !POAS_HAVE_OPENCL
  SKIP("OpenCL backend not built");
#else
  poas_context *ctx = test_open("cpu,opencl0");
  if (!ctx)
    SKIP("no opencl0: %s", poas_error_detail());
  enum { N = 1000, LO = 100, LEN = 500, W_LO = 700, W_LEN = 200, SET = 10 };
  static float x[N];
  for (int i = 0; i < N; i++)
    x[i] = (float)i;
  poas_buffer *b;
  CHECK_OK(poas_buffer_register(ctx, x, sizeof x, &b));
  kernel_arg twice = {-1, LEN, 0, 0}, set = {7, SET, 0, 0};
  poas_task_desc d = {.cpu = host_must_not_run, .opencl = opencl_kernel_task, .arg = &twice,
                      .naccess = 1};
  d.access[0] = (poas_task_access){b, POAS_RW, LO * sizeof *x, LEN * sizeof *x};
  CHECK_OK(poas_task_submit(ctx, &d, NULL));
  poas_task_desc w = {.opencl = opencl_kernel_task, .arg = &set, .naccess = 1};
  w.access[0] = (poas_task_access){b, POAS_W, W_LO * sizeof *x, W_LEN * sizeof *x};
  poas_task *wt;
  CHECK_OK(poas_task_submit(ctx, &w, &wt));
  CHECK_OK(poas_task_wait(wt));
  CHECK_OK(poas_wait_all(ctx));
  CHECK_MSG(twice.calls == 1 && set.calls == 1, "kernel calls %d and %d", twice.calls,
            set.calls);
  CHECK_MSG(twice.status == CL_SUCCESS && set.status == CL_SUCCESS, "OpenCL status %d, %d",
            (int)twice.status, (int)set.status);
  for (int i = 0; i < N; i++) {
    float want = (float)i;
    if (i >= LO && i < LO + LEN)
      want = 2.0f * (float)i;
    else if (i >= W_LO && i < W_LO + SET)
      want = 7;
    CHECK_MSG(x[i] == want, "x[%d] = %g, want %g", i, x[i], want);
  }
  CHECK_OK(poas_buffer_unregister(b));
  poas_finalize(ctx);

  /* No OpenCL device: an OpenCL-only task is refused with a reason. */
  ctx = test_open("cpu");
  CHECK(ctx);
  CHECK_OK(poas_buffer_register(ctx, x, sizeof x, &b));
  w.access[0].buffer = b;
  CHECK_RC(poas_task_submit(ctx, &w, NULL), POAS_ENOTSUP);
  CHECK(strstr(poas_error_detail(), "OpenCL") != NULL);
  poas_finalize(ctx);
  return 0;
#endif
}

TEST_MAIN(TEST_ENTRY(opencl_concurrent_opens), TEST_ENTRY(opencl_gemm_cases),
          TEST_ENTRY(opencl_gemm_cases_in_blocks), TEST_ENTRY(opencl_pieces_follow_the_model),
          TEST_ENTRY(opencl_fit_reports_pieces),
          TEST_ENTRY(opencl_copy2d_keeps_padding),
          TEST_ENTRY(opencl_lanes_ordered_by_events), TEST_ENTRY(opencl_beta_zero_ignores_c),
          TEST_ENTRY(opencl_cores_subdevice), TEST_ENTRY(opencl_bad_settings_named),
          TEST_ENTRY(opencl_alloc_limits), TEST_ENTRY(opencl_scratch_is_one_per_lane),
          TEST_ENTRY(opencl_sessions_are_reused),
          TEST_ENTRY(opencl_tasks_run_their_kernels),
          TEST_ENTRY(opencl_calibration_builds_its_kernels),
          TEST_ENTRY(opencl_fp64_from_either_report), TEST_ENTRY(opencl_zero_clock_gets_nominal),
          TEST_ENTRY(opencl_operands_past_int32_refused),
          TEST_ENTRY(opencl_index_limit_cuts_plans),
          TEST_ENTRY(opencl_transpose_refuses_unknown_dtype),
          TEST_ENTRY(opencl_long_strings_are_cut), TEST_ENTRY(opencl_buffer_limit_cuts_plans),
          TEST_ENTRY(opencl_kept_c_stays_within_limits),
          TEST_ENTRY(opencl_memory_shared_by_contexts))
