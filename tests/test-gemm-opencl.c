/* test-gemm-opencl.c: the OpenCL backend (CLBlast) on opencl0: the GEMM
 * case matrix through the public API, and the backend's own contract: 2-D
 * copies, lanes ordered by events, operand offsets, C not read when beta is
 * 0, sub-devices, settings and allocation limits. Every test skips (77)
 * when no OpenCL device is present or the backend is not built. */
#include "config.h"

#include "devices/device.h"
#include "gemm-cases.h"
#include "harness.h"

#include <string.h>

#if POAS_HAVE_OPENCL
#include <CL/cl.h>
#endif

/* Opens `selection`; TEST_SKIP when no OpenCL device is there. */
static int open_set(const char *selection, poas__devset *set, char *err, size_t errcap) {
  int rc = poas__devset_open(selection, set, err, errcap);
  if (rc == POAS_ENODEV) {
    fprintf(stderr, "  skip: %s\n", err);
    return TEST_SKIP;
  }
  if (rc)
    fprintf(stderr, "  open %s: %s: %s\n", selection, poas_err_name(rc), err);
  return rc ? 1 : 0;
}

TEST(opencl_gemm_cases) { return gemm_cases_run("opencl0", 1); }

TEST(opencl_copy2d_keeps_padding) {
  poas__devset set;
  char err[256];
  int rc = open_set("opencl0", &set, err, sizeof err);
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
  poas__copy2d whole = {SIZE, 1, SIZE, SIZE, 0};
  poas__copy2d block = {W, ROWS, HP, DP, OFF};
  poas__copy2d block_back = {W, ROWS, BACKP, DP, OFF};
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
  poas__copy2d ca = {(size_t)ar * es, (size_t)ac, (size_t)g->lda * es, (size_t)g->lda * es, offb};
  poas__copy2d cb = {(size_t)br * es, (size_t)bc, (size_t)g->ldb * es, (size_t)g->ldb * es, offb};
  poas__copy2d cc = {(size_t)g->m * es, (size_t)g->n, (size_t)g->ldc * es, (size_t)g->ldc * es,
                     offb};
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
  char err[256];
  int rc = open_set("opencl0", &set, err, sizeof err);
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

/* C holds NaNs on the device: beta = 0 must not read them, whether the
 * product is computed, k is 0 or alpha is 0. */
TEST(opencl_beta_zero_ignores_c) {
  poas__devset set;
  char err[256];
  int rc = open_set("opencl0", &set, err, sizeof err);
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

TEST(opencl_alloc_limits) {
  poas__devset set;
  char err[256];
  int rc = open_set("opencl0", &set, err, sizeof err);
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

TEST_MAIN(TEST_ENTRY(opencl_gemm_cases), TEST_ENTRY(opencl_copy2d_keeps_padding),
          TEST_ENTRY(opencl_lanes_ordered_by_events), TEST_ENTRY(opencl_beta_zero_ignores_c),
          TEST_ENTRY(opencl_cores_subdevice), TEST_ENTRY(opencl_bad_settings_named),
          TEST_ENTRY(opencl_alloc_limits))
