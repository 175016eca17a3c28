/* test-gemm-cuda.c: the CUDA backend on a real GPU: the GEMM case matrix
 * through the public API, then the backend's hooks one by one (2-D copies
 * with padding, ordering across lanes through events, page-locked host
 * memory, copies staged through page-locked slots, allocation failure,
 * settings, the alpha = 0 / k = 0 paths, sizes
 * cuBLAS cannot take, use from other threads), and two contexts that share
 * one GPU's memory. Every test skips (exit 77) when no CUDA device is
 * present or the backend was not built. */
#include "devices/device.h"
#include "gemm-cases.h"

#include "config.h"

#include <cblas.h>
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#if POAS_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#define NEED_CUDA()                                                         \
  do {                                                                      \
    if (poas__backend_cuda.count() == 0)                                    \
      SKIP("no CUDA device (backend %s)", poas__backend_cuda.built ? "built" : "not built"); \
  } while (0)

static int open_set(const char *sel, poas__devset *set) {
  char err[256] = "";
  int rc = poas__devset_open(sel, set, err, sizeof err);
  if (rc)
    fprintf(stderr, "  poas__devset_open(%s): %s: %s\n", sel, poas_err_name(rc), err);
  return rc;
}

static unsigned char pattern(size_t i) { return (unsigned char)(i * 7 + 3) % 251; }

TEST(cuda_gemm_matrix) {
  NEED_CUDA();
  return gemm_cases_run("cuda0", 1);
}

TEST(cuda_info) {
  NEED_CUDA();
  poas__devset set;
  CHECK_OK(open_set("cuda0", &set));
  const poas__device *d = set.dev[0];
  const poas_device_info *in = &d->info;
  fprintf(stderr, "  %s: %s; %s; %llu MiB, %d SMs, peak %.0f / %.0f GFLOP/s\n", in->id, in->name,
          in->driver, (unsigned long long)(in->memory_bytes >> 20), in->cores,
          in->peak_gflops[0], in->peak_gflops[1]);
  CHECK(strcmp(in->id, "cuda0") == 0 && in->kind == POAS_DEVICE_CUDA);
  CHECK(in->name[0] && strstr(in->driver, "cuBLAS"));
  CHECK(in->memory_bytes > 0 && in->cores > 0);
  CHECK(!in->host_memory && !in->shares_host_cores);
  CHECK(in->peak_gflops[POAS_FLOAT32] > 0);
  CHECK(in->peak_gflops[POAS_FLOAT64] > 0 &&
        in->peak_gflops[POAS_FLOAT64] <= in->peak_gflops[POAS_FLOAT32]);
  CHECK(d->nlanes == 3);
  poas__devset_close(&set);
  return 0;
}

/* One block copied in through `shape` over a device buffer filled with
 * 0xAB, read back whole (the bytes outside the block must still be 0xAB)
 * and copied out again into a host buffer filled with 0xCD whose padding
 * must stay untouched. */
static int roundtrip(poas__device *d, const poas__copy2d *shape, size_t out_pitch) {
  const poas__backend *be = d->be;
  size_t devbytes = shape->dev_off + shape->dev_pitch * shape->rows + 64;
  size_t srcbytes = shape->host_pitch * shape->rows, outbytes = out_pitch * shape->rows;
  unsigned char *src = malloc(srcbytes), *whole = malloc(devbytes), *out = malloc(outbytes);
  CHECK(src && whole && out);
  for (size_t i = 0; i < srcbytes; i++)
    src[i] = pattern(i);
  memset(whole, 0xAB, devbytes);
  memset(out, 0xCD, outbytes);
  poas__mem m = {0};
  CHECK_OK(be->mem_alloc(d, devbytes, &m));
  poas__copy2d flat = {devbytes, 1, devbytes, devbytes, 0, 0};
  CHECK_OK(be->copy_h2d(d, 0, m, whole, &flat));
  CHECK_OK(be->copy_h2d(d, 0, m, src, shape));
  CHECK_OK(be->lane_sync(d, 0));
  memset(whole, 0, devbytes);
  CHECK_OK(be->copy_d2h(d, 2, whole, m, &flat));
  poas__copy2d back = *shape;
  back.host_pitch = out_pitch;
  CHECK_OK(be->copy_d2h(d, 2, out, m, &back));
  CHECK_OK(be->lane_sync(d, 2));
  be->mem_free(d, m);
  for (size_t o = 0; o < devbytes; o++) {
    size_t rel = o - shape->dev_off, r = rel / shape->dev_pitch, c = rel % shape->dev_pitch;
    int inside = o >= shape->dev_off && r < shape->rows && c < shape->width;
    unsigned char want = inside ? src[r * shape->host_pitch + c] : 0xAB;
    CHECK_MSG(whole[o] == want, "device byte %zu is %#x, expected %#x (width %zu rows %zu)", o,
              whole[o], want, shape->width, shape->rows);
  }
  for (size_t o = 0; o < outbytes; o++) {
    size_t r = o / out_pitch, c = o % out_pitch;
    unsigned char want = c < shape->width ? src[r * shape->host_pitch + c] : 0xCD;
    CHECK_MSG(out[o] == want, "host byte %zu is %#x, expected %#x", o, out[o], want);
  }
  free(src), free(whole), free(out);
  return 0;
}

TEST(cuda_copy2d_roundtrip_keeps_padding) {
  NEED_CUDA();
  poas__devset set;
  CHECK_OK(open_set("cuda0", &set));
  /* width, rows, host pitch, device pitch, device offset (one way); odd
   * sizes on purpose, plus the one-row and the contiguous cases. */
  static const poas__copy2d shapes[] = {
      {13, 7, 29, 40, 5, 0}, {4096, 33, 4100, 4608, 256, 0}, {13, 1, 13, 13, 3, 0},
      {64, 9, 64, 64, 0, 0}, {1, 300, 3, 2, 1, 0},
  };
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
    if (roundtrip(set.dev[0], &shapes[i], shapes[i].width + 11))
      return 1;
  poas__devset_close(&set);
  return 0;
}

/* Copies of pageable memory large enough to be staged, on a device with
 * staging threads whatever the host's size: a flat run of several slots
 * and a partial one, a pitched block of several slots of whole rows, and
 * rows longer than a slot. The same round trip: every byte arrives, and
 * the padding on both sides keeps its poison. */
TEST(cuda_staged_copies_keep_padding) {
  NEED_CUDA();
  poas__devset set;
  CHECK_OK(open_set("cuda0:copy_threads=3", &set));
  size_t big = ((size_t)17 << 20) + 5;
  const poas__copy2d shapes[] = {
      {((size_t)40 << 20) + 123, 1, ((size_t)40 << 20) + 123, ((size_t)40 << 20) + 123, 0, 0},
      {4000, 10000, 4100, 4352, 128, 0},
      {big, 2, big + 64, big + 256, 32, 0},
  };
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
    if (roundtrip(set.dev[0], &shapes[i], shapes[i].width + 11))
      return 1;
  poas__devset_close(&set);
  return 0;
}

/* A pipeline over three lanes: A and B go in on lane 0, the GEMM on lane
 * 1 waits for them, C comes out on lane 2 after the GEMM. Host memory is
 * page-locked, so the copies are truly asynchronous and a missing wait
 * shows as NaN (C's device buffer is poisoned first) or as a stale C. */
typedef struct pipe {
  poas__device *d;
  int n;
  float *A, *B, *C;
  poas__mem a, b, c;
  poas__event ev[3];
} pipe;

static int pipe_run(pipe *p, float alpha, float beta) {
  const poas__backend *be = p->d->be;
  size_t bytes = (size_t)p->n * p->n * sizeof(float);
  poas__copy2d flat = {bytes, 1, bytes, bytes, 0, 0};
  poas__gemm_call g = {POAS_FLOAT32, POAS_NO_TRANS, POAS_NO_TRANS, p->n, p->n, p->n, alpha, beta,
                       {p->a, 0, p->n}, {p->b, 0, p->n}, {p->c, 0, p->n}};
  CHECK_OK(be->copy_h2d(p->d, 0, p->a, p->A, &flat));
  CHECK_OK(be->copy_h2d(p->d, 0, p->b, p->B, &flat));
  CHECK_OK(be->event_record(p->d, 0, &p->ev[0]));
  CHECK_OK(be->lane_wait(p->d, 1, &p->ev[0]));
  CHECK_OK(be->gemm(p->d, 1, &g));
  CHECK_OK(be->event_record(p->d, 1, &p->ev[1]));
  CHECK_OK(be->lane_wait(p->d, 2, &p->ev[1]));
  CHECK_OK(be->copy_d2h(p->d, 2, p->C, p->c, &flat));
  CHECK_OK(be->event_record(p->d, 2, &p->ev[2]));
  CHECK_OK(be->event_sync(p->d, &p->ev[2]));
  CHECK(p->ev[2].recorded && p->ev[2].wall > 0);
  return 0;
}

/* Checks C x against scale * A (B x) with a random x, in double. */
static int pipe_verify(const pipe *p, double scale) {
  int n = p->n;
  double *x = malloc(sizeof(double) * n * 4), *bx = x + n, *abs_bx = x + 2 * n, *cx = x + 3 * n;
  CHECK(x);
  test_fill(x, POAS_FLOAT64, (size_t)n, 99);
  for (int i = 0; i < n; i++) {
    bx[i] = abs_bx[i] = cx[i] = 0;
  }
  for (int j = 0; j < n; j++)
    for (int i = 0; i < n; i++) {
      bx[i] += (double)p->B[(size_t)j * n + i] * x[j];
      abs_bx[i] += fabs((double)p->B[(size_t)j * n + i] * x[j]);
      cx[i] += (double)p->C[(size_t)j * n + i] * x[j];
    }
  for (int i = 0; i < n; i++) {
    double want = 0, mag = 0;
    for (int j = 0; j < n; j++) {
      want += (double)p->A[(size_t)j * n + i] * bx[j];
      mag += fabs((double)p->A[(size_t)j * n + i]) * abs_bx[j];
    }
    want *= scale;
    double bound = 8.0 * 5.96e-8 * n * fabs(scale) * mag;
    CHECK_MSG(fabs(cx[i] - want) <= bound, "row %d: (C x) = %.9g, expected %.9g (bound %.3g)", i,
              cx[i], want, bound);
  }
  free(x);
  return 0;
}

TEST(cuda_events_order_lanes) {
  NEED_CUDA();
  poas__devset set;
  CHECK_OK(open_set("cuda0", &set));
  pipe p = {set.dev[0], 2048, NULL, NULL, NULL, {0}, {0}, {0}, {{0}}};
  const poas__backend *be = p.d->be;
  size_t count = (size_t)p.n * p.n, bytes = count * sizeof(float);
  p.A = malloc(bytes), p.B = malloc(bytes), p.C = malloc(bytes);
  CHECK(p.A && p.B && p.C);
  test_fill(p.A, POAS_FLOAT32, count, 1);
  test_fill(p.B, POAS_FLOAT32, count, 2);
  CHECK_OK(be->mem_alloc(p.d, bytes, &p.a));
  CHECK_OK(be->mem_alloc(p.d, bytes, &p.b));
  CHECK_OK(be->mem_alloc(p.d, bytes, &p.c));
  test_poison(p.C, POAS_FLOAT32, count);
  poas__copy2d flat = {bytes, 1, bytes, bytes, 0, 0};
  CHECK_OK(be->copy_h2d(p.d, 0, p.c, p.C, &flat));
  CHECK_OK(be->lane_sync(p.d, 0));
  CHECK_OK(be->host_register(p.d, p.A, bytes));
  CHECK_OK(be->host_register(p.d, p.B, bytes));
  CHECK_OK(be->host_register(p.d, p.C, bytes));
  for (int i = 0; i < 3; i++)
    CHECK_OK(be->event_create(p.d, &p.ev[i]));
  /* C = A B, then, recording the same events again, C = A B + C = 2 A B. */
  CHECK(pipe_run(&p, 1, 0) == 0 && pipe_verify(&p, 1) == 0);
  test_poison(p.C, POAS_FLOAT32, count);
  CHECK(pipe_run(&p, 1, 1) == 0 && pipe_verify(&p, 2) == 0);
  for (int i = 0; i < 3; i++)
    be->event_destroy(p.d, &p.ev[i]);
  be->host_unregister(p.d, p.A), be->host_unregister(p.d, p.B), be->host_unregister(p.d, p.C);
  be->mem_free(p.d, p.a), be->mem_free(p.d, p.b), be->mem_free(p.d, p.c);
  free(p.A), free(p.B), free(p.C);
  poas__devset_close(&set);
  return 0;
}

TEST(cuda_host_register_path) {
  NEED_CUDA();
  poas__devset set;
  CHECK_OK(open_set("cuda0", &set));
  poas__device *d = set.dev[0];
  size_t bytes = (size_t)4 << 20;
  unsigned char *h = malloc(bytes);
  CHECK(h);
  CHECK_OK(d->be->host_register(d, h, bytes));
  /* The same range twice is refused, cleanly, and leaves nothing behind:
   * the next operation still succeeds. */
  CHECK_RC(d->be->host_register(d, h, bytes), POAS_EDEVICE);
  CHECK(strstr(poas_error_detail(), "cudaHostRegister") != NULL);
  poas__copy2d pinned = {1000, 1000, 1000 + 24, 1024, 64, 0};
  CHECK(roundtrip(d, &pinned, 1003) == 0);
  poas__mem m;
  CHECK_OK(d->be->mem_alloc(d, bytes, &m));
  for (size_t i = 0; i < bytes; i++)
    h[i] = pattern(i);
  poas__copy2d flat = {bytes, 1, bytes, bytes, 0, 0};
  CHECK_OK(d->be->copy_h2d(d, 0, m, h, &flat));
  CHECK_OK(d->be->lane_sync(d, 0));
  memset(h, 0, bytes);
  CHECK_OK(d->be->copy_d2h(d, 2, h, m, &flat));
  CHECK_OK(d->be->lane_sync(d, 2));
  for (size_t i = 0; i < bytes; i++)
    CHECK(h[i] == pattern(i));
  d->be->mem_free(d, m);
  d->be->host_unregister(d, h);
  /* Unregistered for real: registering again works. */
  CHECK_OK(d->be->host_register(d, h, bytes));
  d->be->host_unregister(d, h);
  free(h);
  poas__devset_close(&set);
  return 0;
}

TEST(cuda_alloc_beyond_memory_is_enomem) {
  NEED_CUDA();
  poas__devset set;
  CHECK_OK(open_set("cuda0", &set));
  poas__device *d = set.dev[0];
  poas__mem m = {(void *)&m};
  CHECK_RC(d->be->mem_alloc(d, d->info.memory_bytes + ((size_t)1 << 30), &m), POAS_ENOMEM);
  CHECK(m.ptr == (void *)&m);
  CHECK(strstr(poas_error_detail(), "cudaMalloc") != NULL);
  CHECK_RC(d->be->mem_alloc(d, SIZE_MAX / 2, &m), POAS_ENOMEM);
  /* The failure is not sticky: the device still works. */
  CHECK_OK(d->be->mem_alloc(d, 1 << 20, &m));
  CHECK(m.ptr != NULL);
  d->be->mem_free(d, m);
  CHECK_OK(d->be->mem_alloc(d, 0, &m));
  CHECK(m.ptr != NULL);
  d->be->mem_free(d, m);
  poas__copy2d small = {24, 5, 30, 32, 8, 0};
  CHECK(roundtrip(d, &small, 27) == 0);
  poas__devset_close(&set);
  return 0;
}

TEST(cuda_bad_settings_name_the_token) {
  NEED_CUDA();
  static const struct {
    const char *sel, *token;
  } bad[] = {{"cuda0:bogus=1", "bogus"},
               {"cuda0:tf32=2", "'2'"},
               {"cuda:tf32=yes", "yes"},
               {"cuda0:copy_threads=65", "65"}};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    poas__devset set = {0};
    char err[256] = "";
    CHECK_RC(poas__devset_open(bad[i].sel, &set, err, sizeof err), POAS_ESPEC);
    CHECK_MSG(strstr(err, bad[i].token) != NULL, "'%s' gave '%s'", bad[i].sel, err);
    CHECK(set.ndev == 0);
  }
  poas__devset set;
  CHECK_OK(open_set("cuda0:tf32=0:copy_threads=0", &set));
  poas__devset_close(&set);
  return 0;
}

/* alpha = 0 and k = 0 read neither A nor B (NaN here), and beta = 0 does
 * not read C (NaN too); the padding rows of C stay as they were. */
TEST(cuda_gemm_scaling_paths) {
  NEED_CUDA();
  poas__devset set;
  CHECK_OK(open_set("cuda0", &set));
  poas__device *d = set.dev[0];
  enum { M = 5, N = 4, K = 3, LDC = 7 };
  for (int dt = 0; dt < 2; dt++) {
    size_t es = dt == POAS_FLOAT32 ? 4 : 8;
    double nanab[M * K], c[LDC * N], got[LDC * N];
    poas__mem a, b, cm;
    CHECK_OK(d->be->mem_alloc(d, sizeof nanab, &a));
    CHECK_OK(d->be->mem_alloc(d, sizeof nanab, &b));
    CHECK_OK(d->be->mem_alloc(d, sizeof c, &cm));
    test_poison(nanab, (poas_dtype)dt, M * K);
    poas__copy2d ab = {sizeof nanab, 1, sizeof nanab, sizeof nanab, 0, 0};
    CHECK_OK(d->be->copy_h2d(d, 0, a, nanab, &ab));
    CHECK_OK(d->be->copy_h2d(d, 0, b, nanab, &ab));
    static const struct {
      double alpha, beta;
      int64_t k;
    } cases[] = {{0, 0, K}, {0, 0.5, K}, {2, 0, 0}, {2, -3, 0}, {0, 1, K}};
    poas__copy2d cc = {LDC * es * N, 1, LDC * es * N, LDC * es * N, 0, 0};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
      if (cases[i].beta == 0)
        test_poison(c, (poas_dtype)dt, LDC * N);
      else
        test_fill(c, (poas_dtype)dt, LDC * N, 7 + i);
      CHECK_OK(d->be->copy_h2d(d, 1, cm, c, &cc));
      poas__gemm_call g = {(poas_dtype)dt, POAS_NO_TRANS, POAS_TRANS, M, N, cases[i].k,
                           cases[i].alpha, cases[i].beta, {a, 0, M}, {b, 0, N}, {cm, 0, LDC}};
      CHECK_OK(d->be->gemm(d, 1, &g));
      CHECK_OK(d->be->copy_d2h(d, 1, got, cm, &cc));
      CHECK_OK(d->be->lane_sync(d, 1));
      for (int j = 0; j < N; j++)
        for (int r = 0; r < LDC; r++) {
          size_t at = (size_t)j * LDC + r;
          double v = dt ? got[at] : ((float *)got)[at], c0 = dt ? c[at] : ((float *)c)[at];
          if (r >= M) {
            CHECK(memcmp((char *)got + at * es, (char *)c + at * es, es) == 0);
            continue;
          }
          double want = cases[i].beta == 0 ? 0 : cases[i].beta * c0;
          CHECK_MSG(fabs(v - want) <= 1e-6 * fabs(want), "%s case %zu C(%d,%d) = %g, want %g",
                    dt ? "d" : "s", i, r, j, v, want);
        }
    }
    d->be->mem_free(d, cm), d->be->mem_free(d, b), d->be->mem_free(d, a);
  }
  poas__devset_close(&set);
  return 0;
}

TEST(cuda_gemm_beyond_int_is_enotsup) {
  NEED_CUDA();
  poas__devset set;
  CHECK_OK(open_set("cuda0", &set));
  poas__device *d = set.dev[0];
  poas__mem none = {0};
  int64_t big = (int64_t)INT_MAX + 1;
  poas__gemm_call g = {POAS_FLOAT32, POAS_NO_TRANS, POAS_NO_TRANS, big, 2, 2, 1, 0,
                       {none, 0, big}, {none, 0, 2}, {none, 0, big}};
  CHECK_RC(d->be->gemm(d, 1, &g), POAS_ENOTSUP);
  CHECK(strstr(poas_error_detail(), "cuBLAS") != NULL);
  g.m = 2, g.a.ld = 2, g.c.ld = big + 5;
  CHECK_RC(d->be->gemm(d, 1, &g), POAS_ENOTSUP);
  CHECK_RC(d->be->gemm(d, 3, &g), POAS_EINVAL);
  poas__devset_close(&set);
  return 0;
}

/* TF32 math on: sgemm stays within TF32's precision (10-bit mantissa). */
TEST(cuda_tf32_sgemm_within_tf32_bound) {
  NEED_CUDA();
  poas_options o;
  poas_options_init(&o);
  o.devices = "cuda0:tf32=1";
  o.no_profile = 1;
  poas_context *ctx = NULL;
  CHECK_OK(poas_init(&ctx, &o));
  enum { N = 256 };
  test_gemm g;
  CHECK_OK(test_gemm_alloc(&g, POAS_FLOAT32, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, N, N,
                           N, 0, 1.0, 0.0, 5));
  CHECK_OK(test_gemm_run(ctx, &g));
  const float *A = g.A, *B = g.B, *C = g.C;
  for (int j = 0; j < N; j++)
    for (int i = 0; i < N; i++) {
      double want = 0, mag = 0;
      for (int p = 0; p < N; p++) {
        want += (double)A[p * N + i] * B[j * N + p];
        mag += fabs((double)A[p * N + i] * B[j * N + p]);
      }
      CHECK_MSG(fabs(C[j * N + i] - want) <= 4.0 * 0x1p-10 * mag, "C(%d,%d) = %g, want %g", i, j,
                C[j * N + i], want);
    }
  test_gemm_free(&g);
  poas_finalize(ctx);
  return 0;
}

/* The scheduler drives devices from worker threads: every device, each
 * from a thread of its own, runs a small GEMM and checks it. With two or
 * more GPUs a hook that forgot to make its device current fails here. */
typedef struct worker {
  poas__device *d;
  int rc;
} worker;

static int worker_gemm(poas__device *d) {
  enum { N = 96 };
  double A[N * N], B[N * N], C[N * N], R[N * N];
  test_fill(A, POAS_FLOAT64, N * N, 11);
  test_fill(B, POAS_FLOAT64, N * N, 12);
  cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1, A, N, B, N, 0, R, N);
  poas__mem a, b, c;
  CHECK_OK(d->be->mem_alloc(d, sizeof A, &a));
  CHECK_OK(d->be->mem_alloc(d, sizeof B, &b));
  CHECK_OK(d->be->mem_alloc(d, sizeof C, &c));
  poas__copy2d flat = {sizeof A, 1, sizeof A, sizeof A, 0, 0};
  CHECK_OK(d->be->copy_h2d(d, 0, a, A, &flat));
  CHECK_OK(d->be->copy_h2d(d, 0, b, B, &flat));
  poas__event ev;
  CHECK_OK(d->be->event_create(d, &ev));
  CHECK_OK(d->be->event_record(d, 0, &ev));
  CHECK_OK(d->be->lane_wait(d, 1, &ev));
  poas__gemm_call g = {POAS_FLOAT64, POAS_NO_TRANS, POAS_NO_TRANS, N, N, N, 1, 0,
                       {a, 0, N}, {b, 0, N}, {c, 0, N}};
  CHECK_OK(d->be->gemm(d, 1, &g));
  CHECK_OK(d->be->copy_d2h(d, 1, C, c, &flat));
  CHECK_OK(d->be->lane_sync(d, 1));
  d->be->event_destroy(d, &ev);
  d->be->mem_free(d, c), d->be->mem_free(d, b), d->be->mem_free(d, a);
  for (int i = 0; i < N * N; i++)
    CHECK_MSG(fabs(C[i] - R[i]) <= 1e-12 * N, "%s: C[%d] = %g, want %g", d->info.id, i, C[i],
              R[i]);
  return 0;
}

static void *worker_main(void *arg) {
  worker *w = arg;
  w->rc = worker_gemm(w->d);
  return NULL;
}

TEST(cuda_devices_from_worker_threads) {
  NEED_CUDA();
  poas__devset set;
  CHECK_OK(open_set("cuda", &set));
  CHECK(set.ndev == poas__backend_cuda.count());
  worker w[POAS_MAX_DEVICES];
  pthread_t t[POAS_MAX_DEVICES];
  /* Reversed, so that the thread of cuda0 is not the last one opened. */
  for (int i = set.ndev - 1; i >= 0; i--) {
    w[i].d = set.dev[i], w[i].rc = -1;
    CHECK(pthread_create(&t[i], NULL, worker_main, &w[i]) == 0);
  }
  int bad = 0;
  for (int i = 0; i < set.ndev; i++) {
    pthread_join(t[i], NULL);
    bad |= w[i].rc;
  }
  CHECK(bad == 0);
  poas__devset_close(&set);
  return 0;
}

/* A program with CUDA code of its own keeps its current device across
 * POAS calls on its thread: opening cuda0, a GEMM run inline (one device,
 * one tile), a plan, and closing. It takes two GPUs: with one, POAS's
 * device is the caller's. */
TEST(cuda_caller_keeps_its_current_device) {
  NEED_CUDA();
#if POAS_HAVE_CUDA
  if (poas__backend_cuda.count() < 2)
    SKIP("one CUDA device: the caller's current device is POAS's own");
  int cur = -1;
  CHECK(cudaSetDevice(1) == cudaSuccess);
  poas_context *ctx = test_open("cuda0");
  CHECK(ctx);
  CHECK(cudaGetDevice(&cur) == cudaSuccess && cur == 1);
  float a = 2, b = 3, c = 0;
  CHECK_OK(poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 1, 1, 1, 1, &a, 1, &b, 1,
                      0, &c, 1));
  CHECK(c == 6);
  CHECK(cudaGetDevice(&cur) == cudaSuccess && cur == 1);
  poas_plan plan;
  CHECK_OK(poas_plan_gemm(ctx, POAS_FLOAT32, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 64, 64,
                          64, &plan));
  CHECK(cudaGetDevice(&cur) == cudaSuccess && cur == 1);
  poas_finalize(ctx);
  CHECK(cudaGetDevice(&cur) == cudaSuccess && cur == 1);
  CHECK(cudaSetDevice(0) == cudaSuccess);
#endif
  return 0;
}

#if POAS_HAVE_CUDA
typedef int (*ctx_get_fn)(void **context);

/* On a thread that never chose a device: opening cuda0, a GEMM run
 * inline, a plan and closing leave the driver's current context as they
 * found it, none, rather than cuda0's (or device 0's) primary context. */
static int no_context_calls(ctx_get_fn get) {
  void *cur = (void *)1;
  CHECK(get(&cur) == 0 && cur == NULL);
  poas_context *ctx = test_open("cuda0");
  CHECK_MSG(ctx, "%s", poas_error_detail());
  CHECK_MSG(get(&cur) == 0 && cur == NULL, "after opening: context %p", cur);
  float a = 2, b = 3, c = 0;
  CHECK_OK(poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 1, 1, 1, 1, &a, 1, &b, 1,
                      0, &c, 1));
  CHECK(c == 6);
  CHECK_MSG(get(&cur) == 0 && cur == NULL, "after a GEMM: context %p", cur);
  poas_plan plan;
  CHECK_OK(poas_plan_gemm(ctx, POAS_FLOAT32, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 64, 64,
                          64, &plan));
  CHECK_MSG(get(&cur) == 0 && cur == NULL, "after a plan: context %p", cur);
  poas_finalize(ctx);
  CHECK_MSG(get(&cur) == 0 && cur == NULL, "after closing: context %p", cur);
  return 0;
}

typedef struct no_context_arg {
  ctx_get_fn get;
  int rc;
} no_context_arg;

static void *no_context_main(void *arg) {
  no_context_arg *a = arg;
  a->rc = no_context_calls(a->get);
  return NULL;
}
#endif

TEST(cuda_thread_without_a_context_keeps_none) {
  NEED_CUDA();
#if POAS_HAVE_CUDA
  void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  CHECK_MSG(h, "libcuda.so.1: %s", dlerror());
  no_context_arg arg = {(ctx_get_fn)(uintptr_t)dlsym(h, "cuCtxGetCurrent"), -1};
  CHECK(arg.get);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, no_context_main, &arg) == 0);
  pthread_join(t, NULL);
  CHECK(arg.rc == 0);
#endif
  return 0;
}

#if POAS_HAVE_CUDA
typedef struct memset_arg {
  size_t bytes;
  int calls;
  cudaError_t status;
} memset_arg;

/* A task's CUDA implementation: zeroes the first `bytes` of buffers[0] on
 * the stream it is given. */
static void cuda_memset_task(void **buffers, void *arg, void *stream) {
  memset_arg *m = arg;
  m->status = cudaMemsetAsync(buffers[0], 0, m->bytes, (cudaStream_t)stream);
  m->calls++;
}

static void host_must_not_run(void **buffers, void *arg) {
  (void)buffers;
  ((memset_arg *)arg)->calls += 100;
}
#endif

/* A task with a CUDA implementation runs it on cuda0, on its access's bytes
 * alone: the first half of a RW range is zeroed, the rest of the range and
 * the bytes around it keep their values. */
TEST(cuda_task_runs_its_implementation) {
  NEED_CUDA();
#if POAS_HAVE_CUDA
  poas_context *ctx = test_open("cpu,cuda0");
  CHECK_MSG(ctx, "%s", poas_error_detail());
  enum { SIZE = 4096, LO = 1000, LEN = 2000 };
  static unsigned char x[SIZE];
  memset(x, 0xAB, sizeof x);
  poas_buffer *b;
  CHECK_OK(poas_buffer_register(ctx, x, sizeof x, &b));
  memset_arg m = {LEN / 2, 0, cudaSuccess};
  poas_task_desc d = {.cpu = host_must_not_run, .cuda = cuda_memset_task, .arg = &m,
                      .naccess = 1};
  d.access[0] = (poas_task_access){b, POAS_RW, LO, LEN};
  poas_task *t;
  CHECK_OK(poas_task_submit(ctx, &d, &t));
  CHECK_OK(poas_task_wait(t));
  CHECK_MSG(m.calls == 1 && m.status == cudaSuccess, "calls %d, status %s", m.calls,
            cudaGetErrorString(m.status));
  for (int i = 0; i < SIZE; i++)
    CHECK_MSG(x[i] == (i >= LO && i < LO + LEN / 2 ? 0 : 0xAB), "x[%d] = %d", i, x[i]);
  CHECK_OK(poas_buffer_unregister(b));
  poas_finalize(ctx);
#endif
  return 0;
}

/* A square sgemm of side n with beta = 0 on ctx, its C poisoned, checked
 * against the reference; the plan it ran by in *plan. */
static int square_sgemm(poas_context *ctx, int64_t n, uint64_t seed, poas_plan *plan) {
  test_gemm g;
  int rc = test_gemm_alloc(&g, POAS_FLOAT32, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, n, n,
                           n, 0, 1, 0, seed);
  if (rc == 0) {
    test_poison(g.C, POAS_FLOAT32, (size_t)(n * n));
    test_poison(g.C0, POAS_FLOAT32, (size_t)(n * n));
    rc = poas_plan_gemm_call(ctx, POAS_FLOAT32, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, n,
                             n, n, 1, 0, plan);
    if (rc)
      fprintf(stderr, "  plan of n=%lld: %s: %s\n", (long long)n, poas_err_name(rc),
              poas_error_detail());
  }
  if (rc == 0 && (rc = test_gemm_run(ctx, &g)) != 0)
    fprintf(stderr, "  sgemm of n=%lld: %s: %s\n", (long long)n, poas_err_name(rc),
            poas_error_detail());
  if (rc == 0) {
    char what[64];
    snprintf(what, sizeof what, "sgemm n=%lld", (long long)n);
    rc = test_gemm_verify(&g, what);
  }
  test_gemm_free(&g);
  return rc;
}

/* Two contexts of one process on one GPU (one context per thread is how a
 * program calls from several): what one context's cache parked after its
 * GEMM is free to the other's. On a 6 MiB fake GPU, context A's sgemm of
 * 700 left 2.6 MiB parked, and context B's sgemm of 1000, which alone
 * runs in 10 tiles, was refused as too big (POAS_ETOOBIG: "the largest
 * device memory, 0.00328 GiB, cannot hold the shared operand and two
 * tiles"). B now plans as it would alone, its allocations release A's
 * parked buffers, and A's next GEMM releases those B parked. Every
 * result is checked, and no run may have lost its device on the way.
 * Sized by the device's memory, for a fake GPU of a few MiB
 * (test-cuda-fake.sh: FAKECUDA_MEMORY=3M); skips on larger ones, where
 * the GEMMs would take minutes to check. */
TEST(cuda_contexts_share_parked_memory) {
  NEED_CUDA();
  poas_context *a = test_open_unlearning("cuda0"), *b = test_open_unlearning("cuda0");
  CHECK_MSG(a && b, "%s", poas_error_detail());
  poas_device_info info;
  CHECK_OK(poas_device_get(a, 0, &info));
  if (info.memory_bytes > (64u << 20)) {
    poas_finalize(a);
    poas_finalize(b);
    SKIP("cuda0 has %llu MiB; this test wants a few (FAKECUDA_MEMORY=3M)",
         (unsigned long long)(info.memory_bytes >> 20));
  }
  /* A's operands about 30% of the memory each, B's about 60%. */
  int64_t na = (int64_t)sqrt((double)info.memory_bytes / 12.8);
  int64_t nb = (int64_t)sqrt((double)info.memory_bytes / 6.3);
  poas_plan alone, after, plan;
  CHECK(square_sgemm(b, nb, 1, &alone) == 0);
  CHECK(square_sgemm(a, na, 2, &plan) == 0);
  CHECK(square_sgemm(b, nb, 3, &after) == 0);
  CHECK_MSG(after.ndevices == 1 && after.dev[0].tiles == alone.dev[0].tiles,
            "B's sgemm of %lld after A's: %lld tiles, %lld alone", (long long)nb,
            (long long)after.dev[0].tiles, (long long)alone.dev[0].tiles);
  poas_report r;
  CHECK_OK(poas_last_report(b, &r));
  CHECK_MSG(r.faults == 0 && !r.dev[0].failed, "B's run: %d faults", r.faults);
  CHECK(square_sgemm(a, na, 4, &plan) == 0);
  CHECK_OK(poas_last_report(a, &r));
  CHECK_MSG(r.faults == 0 && !r.dev[0].failed, "A's second run: %d faults", r.faults);
  poas_finalize(a);
  poas_finalize(b);
  return 0;
}

TEST_MAIN(TEST_ENTRY(cuda_info), TEST_ENTRY(cuda_task_runs_its_implementation), TEST_ENTRY(cuda_copy2d_roundtrip_keeps_padding),
          TEST_ENTRY(cuda_staged_copies_keep_padding),
          TEST_ENTRY(cuda_events_order_lanes), TEST_ENTRY(cuda_host_register_path),
          TEST_ENTRY(cuda_alloc_beyond_memory_is_enomem),
          TEST_ENTRY(cuda_bad_settings_name_the_token), TEST_ENTRY(cuda_gemm_scaling_paths),
          TEST_ENTRY(cuda_gemm_beyond_int_is_enotsup),
          TEST_ENTRY(cuda_tf32_sgemm_within_tf32_bound),
          TEST_ENTRY(cuda_devices_from_worker_threads),
          TEST_ENTRY(cuda_caller_keeps_its_current_device),
          TEST_ENTRY(cuda_thread_without_a_context_keeps_none),
          TEST_ENTRY(cuda_contexts_share_parked_memory), TEST_ENTRY(cuda_gemm_matrix))
