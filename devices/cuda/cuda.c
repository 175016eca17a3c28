/* cuda.c: NVIDIA GPUs through the CUDA runtime and cuBLAS. Each device has
 * three non-blocking streams as lanes (by convention 0 for host-to-device
 * copies, 1 for compute, 2 for device-to-host copies), one cuBLAS handle
 * shared by the lanes, and plain cudaMalloc buffers. The scheduler drives a
 * device from worker threads, so every hook makes the device current on
 * the calling thread first; the runtime's cudaSetDevice is a cheap
 * thread-local switch once the primary context exists. Errors are turned
 * into POAS_EDEVICE with the failing call and the runtime's message, and
 * the runtime's last-error slot is cleared so that one failure does not
 * show up again in an unrelated later check. */
#include "devices/device.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_LANES 3

typedef struct cuda_state {
  poas__device dev;
  int ordinal;
  cublasHandle_t blas;
  /* cublasSetStream and the GEMM after it must not interleave with another
   * thread's pair on the same handle. */
  pthread_mutex_t blas_lock;
  cudaStream_t stream[CUDA_LANES];
  int tf32;
  size_t free_bytes_at_open;
} cuda_state;

/* Clears the runtime's last error and reports `what` failed. */
static int cuda_fail(const cuda_state *s, const char *what, cudaError_t e) {
  (void)cudaGetLastError();
  return poas__fail(POAS_EDEVICE, "cuda%d: %s: %s", s->ordinal, what, cudaGetErrorString(e));
}

/* Makes the device current on the calling thread. */
static int use(const cuda_state *s) {
  cudaError_t e = cudaSetDevice(s->ordinal);
  return e == cudaSuccess ? 0 : cuda_fail(s, "cudaSetDevice", e);
}

static int check_lane(const cuda_state *s, int lane) {
  if (lane < 0 || lane >= CUDA_LANES)
    return poas__fail(POAS_EINVAL, "cuda%d: no lane %d (0 to %d)", s->ordinal, lane,
                      CUDA_LANES - 1);
  return 0;
}

/* A lane that exists, with the device made current: what every hook that
 * works on a lane needs first. */
static int on_lane(const cuda_state *s, int lane) {
  int rc = check_lane(s, lane);
  return rc ? rc : use(s);
}

/* The device count, never cached: without a driver or device the runtime
 * answers with an error, which means zero devices here, and a later call
 * asks again rather than trusting an earlier answer. */
static int cuda_count(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    poas__debug("cuda: no devices: cudaGetDeviceCount: %s", cudaGetErrorString(e));
    return 0;
  }
  return n;
}

static int parse_settings(cuda_state *s, const poas__spec_entry *e, char *err, size_t errcap) {
  const poas__int_setting known[] = {{"tf32", 0, 1, &s->tf32}};
  return poas__spec_ints("cuda", e, known, 1, err, errcap);
}

/* FP32 lanes per SM, and the FP64 rate as a fraction of FP32, by compute
 * capability; rough numbers from NVIDIA's tables, for a first guess only
 * (calibration replaces them). FP64 tensor cores on sm_80 and later
 * datacenter parts can double the FP64 figure for DGEMM. */
static void sm_rates(int major, int minor, int *fp32_lanes, double *fp64_ratio) {
  int cc = major * 10 + minor;
  *fp32_lanes = 128;
  *fp64_ratio = 1.0 / 32;
  if (major == 3) {
    *fp32_lanes = 192;
    *fp64_ratio = cc == 35 || cc == 37 ? 1.0 / 3 : 1.0 / 24;
  } else if (cc == 60 || cc == 70 || cc == 80 || cc == 90 || cc == 100) {
    /* P100, V100, A100, H100/H200, B200: the datacenter parts. */
    *fp32_lanes = major == 10 || major == 9 ? 128 : 64;
    *fp64_ratio = 1.0 / 2;
  } else if (cc == 72 || cc == 75) {
    *fp32_lanes = 64;
  } else if (cc == 86 || cc == 89 || major >= 10) {
    *fp64_ratio = 1.0 / 64;
  }
}

static int fill_info(cuda_state *s, char *err, size_t errcap) {
  struct cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceProperties(&prop, s->ordinal);
  int clock_khz = 0;
  if (e == cudaSuccess)
    e = cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, s->ordinal);
  size_t free_b = 0, total_b = 0;
  if (e == cudaSuccess)
    e = cudaMemGetInfo(&free_b, &total_b);
  int drv = 0, rt = 0, blas = 0;
  if (e == cudaSuccess)
    e = cudaDriverGetVersion(&drv);
  if (e == cudaSuccess)
    e = cudaRuntimeGetVersion(&rt);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    snprintf(err, errcap, "cuda%d: reading the device's properties: %s", s->ordinal,
             cudaGetErrorString(e));
    return POAS_EDEVICE;
  }
  cublasGetVersion(s->blas, &blas);
  poas_device_info *info = &s->dev.info;
  char text[sizeof prop.name + 128];
  snprintf(text, sizeof text, "%s (sm_%d%d)", prop.name, prop.major, prop.minor);
  poas__strlcpy(info->name, text, sizeof info->name);
  snprintf(text, sizeof text, "driver %d.%d, runtime %d.%d, cuBLAS %d.%d.%d", drv / 1000,
           drv % 1000 / 10, rt / 1000, rt % 1000 / 10, blas / 10000, blas / 100 % 100,
           blas % 100);
  poas__strlcpy(info->driver, text, sizeof info->driver);
  info->memory_bytes = prop.totalGlobalMem;
  info->cores = prop.multiProcessorCount;
  info->shares_host_cores = 0;
  info->host_memory = 0;
  int lanes;
  double fp64;
  sm_rates(prop.major, prop.minor, &lanes, &fp64);
  double fp32 = 2.0 * lanes * prop.multiProcessorCount * (clock_khz / 1e6);
  info->peak_gflops[POAS_FLOAT32] = fp32;
  info->peak_gflops[POAS_FLOAT64] = fp32 * fp64;
  s->free_bytes_at_open = free_b;
  poas__info("cuda%d: %s, %zu of %zu MiB free, %d SMs at %d MHz", s->ordinal, info->name,
             free_b >> 20, total_b >> 20, info->cores, clock_khz / 1000);
  return 0;
}

static int cuda_open(int index, const poas__spec_entry *e, poas__device **out, char *err,
                     size_t errcap) {
  cuda_state *s = calloc(1, sizeof *s);
  if (!s)
    return POAS_ENOMEM;
  int lane = 0;
  s->ordinal = index;
  int rc = parse_settings(s, e, err, errcap);
  if (rc)
    goto fail_state;
  rc = POAS_EDEVICE;
  cudaError_t ce = cudaSetDevice(index);
  if (ce != cudaSuccess) {
    snprintf(err, errcap, "cuda%d: cudaSetDevice: %s", index, cudaGetErrorString(ce));
    goto fail_clear;
  }
  for (; lane < CUDA_LANES; lane++) {
    ce = cudaStreamCreateWithFlags(&s->stream[lane], cudaStreamNonBlocking);
    if (ce != cudaSuccess) {
      snprintf(err, errcap, "cuda%d: cudaStreamCreate: %s", index, cudaGetErrorString(ce));
      goto fail_streams;
    }
  }
  cublasStatus_t bs = cublasCreate(&s->blas);
  if (bs == CUBLAS_STATUS_SUCCESS)
    bs = cublasSetMathMode(s->blas, s->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
  if (bs != CUBLAS_STATUS_SUCCESS) {
    snprintf(err, errcap, "cuda%d: cuBLAS: %s", index, cublasGetStatusString(bs));
    goto fail_blas;
  }
  rc = fill_info(s, err, errcap);
  if (rc)
    goto fail_blas;
  pthread_mutex_init(&s->blas_lock, NULL);
  s->dev.nlanes = CUDA_LANES;
  /* A copy from pageable memory holds its caller until the data is staged
   * (to the device) or delivered (from it): a thread per lane, and one to
   * wait on events, keep the other lanes fed meanwhile. */
  s->dev.issue_threads = CUDA_LANES + 1;
  s->dev.priv = s;
  *out = &s->dev;
  return 0;

fail_blas:
  if (s->blas)
    cublasDestroy(s->blas);
fail_streams:
  while (lane-- > 0)
    cudaStreamDestroy(s->stream[lane]);
fail_clear:
  (void)cudaGetLastError();
fail_state:
  free(s);
  return rc;
}

/* Waits for every lane, then releases the streams and the handle. Events
 * belong to their creators, who destroy them with event_destroy. */
static void cuda_close(poas__device *dev) {
  cuda_state *s = dev->priv;
  use(s);
  for (int l = 0; l < CUDA_LANES; l++)
    cudaStreamSynchronize(s->stream[l]);
  cublasDestroy(s->blas);
  for (int l = CUDA_LANES - 1; l >= 0; l--)
    cudaStreamDestroy(s->stream[l]);
  (void)cudaGetLastError();
  pthread_mutex_destroy(&s->blas_lock);
  free(s);
}

static int cuda_mem_alloc(poas__device *dev, size_t bytes, poas__mem *out) {
  cuda_state *s = dev->priv;
  int rc = use(s);
  if (rc)
    return rc;
  /* cudaMalloc(0) succeeds with NULL, which callers read as "nothing
   * allocated"; a small real buffer keeps the handle meaningful. */
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, bytes ? bytes : 256);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return poas__fail(POAS_ENOMEM, "cuda%d: cudaMalloc of %zu bytes: %s", s->ordinal, bytes,
                      cudaGetErrorString(e));
  }
  if (e != cudaSuccess)
    return cuda_fail(s, "cudaMalloc", e);
  out->ptr = p;
  return 0;
}

static void cuda_mem_free(poas__device *dev, poas__mem mem) {
  cuda_state *s = dev->priv;
  if (!mem.ptr || use(s))
    return;
  if (cudaFree(mem.ptr) != cudaSuccess)
    (void)cudaGetLastError();
}

/* Portable rather than default registration: with several GPUs, memory
 * pinned through one device must count as pinned for the others too. */
static int cuda_host_register(poas__device *dev, void *p, size_t bytes) {
  cuda_state *s = dev->priv;
  int rc = use(s);
  if (rc)
    return rc;
  cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterPortable);
  return e == cudaSuccess ? 0 : cuda_fail(s, "cudaHostRegister", e);
}

static void cuda_host_unregister(poas__device *dev, void *p) {
  cuda_state *s = dev->priv;
  if (use(s))
    return;
  if (cudaHostUnregister(p) != cudaSuccess)
    (void)cudaGetLastError();
}

/* One 2-D copy on a lane. A contiguous block goes as one 1-D copy; a pitch
 * beyond what cudaMemcpy2D accepts (2^31 bytes on current parts) falls back
 * to a copy per row. */
static int copy2d(cuda_state *s, int lane, char *dst, size_t dpitch, const char *src,
                  size_t spitch, const poas__copy2d *c, enum cudaMemcpyKind kind) {
  int rc = on_lane(s, lane);
  if (rc || c->width == 0 || c->rows == 0)
    return rc;
  cudaStream_t st = s->stream[lane];
  cudaError_t e;
  if (c->rows == 1 || (dpitch == c->width && spitch == c->width)) {
    e = cudaMemcpyAsync(dst, src, c->width * c->rows, kind, st);
  } else if (dpitch <= INT_MAX && spitch <= INT_MAX) {
    e = cudaMemcpy2DAsync(dst, dpitch, src, spitch, c->width, c->rows, kind, st);
  } else {
    e = cudaSuccess;
    for (size_t r = 0; r < c->rows && e == cudaSuccess; r++)
      e = cudaMemcpyAsync(dst + r * dpitch, src + r * spitch, c->width, kind, st);
  }
  return e == cudaSuccess ? 0 : cuda_fail(s, "cudaMemcpy2DAsync", e);
}

static int cuda_copy_h2d(poas__device *dev, int lane, poas__mem dst, const void *src,
                         const poas__copy2d *c) {
  return copy2d(dev->priv, lane, (char *)dst.ptr + c->dev_off, c->dev_pitch, src, c->host_pitch,
                c, cudaMemcpyHostToDevice);
}

static int cuda_copy_d2h(poas__device *dev, int lane, void *dst, poas__mem src,
                         const poas__copy2d *c) {
  return copy2d(dev->priv, lane, dst, c->host_pitch, (const char *)src.ptr + c->dev_off,
                c->dev_pitch, c, cudaMemcpyDeviceToHost);
}

static int blas_fail(const cuda_state *s, const char *what, cublasStatus_t st) {
  (void)cudaGetLastError();
  return poas__fail(POAS_EDEVICE, "cuda%d: %s: %s (%s)", s->ordinal, what,
                    cublasGetStatusName(st), cublasGetStatusString(st));
}

static int fits_int(const poas__gemm_call *g) {
  return g->m <= INT_MAX && g->n <= INT_MAX && g->k <= INT_MAX && g->a.ld <= INT_MAX &&
         g->b.ld <= INT_MAX && g->c.ld <= INT_MAX;
}

/* C = beta C, for k == 0 or alpha == 0, where BLAS reads neither A nor B
 * and, when beta is 0, not C either: zero bits are 0.0 in both dtypes. */
static cublasStatus_t scale_c(cuda_state *s, int lane, const poas__gemm_call *g, void *c,
                              cudaError_t *cuda_err) {
  size_t es = poas__dtype_size(g->dtype);
  int m = (int)g->m, n = (int)g->n, ldc = (int)g->c.ld;
  if (g->beta == 1)
    return CUBLAS_STATUS_SUCCESS;
  if (g->beta == 0) {
    *cuda_err =
        cudaMemset2DAsync(c, (size_t)ldc * es, 0, (size_t)m * es, (size_t)n, s->stream[lane]);
    return CUBLAS_STATUS_SUCCESS;
  }
  /* geam in place (C = beta C + 0 C), which cuBLAS allows for C == A with
   * ldc == lda and no transpose. */
  if (g->dtype == POAS_FLOAT32) {
    float b = (float)g->beta, zero = 0;
    return cublasSgeam(s->blas, CUBLAS_OP_N, CUBLAS_OP_N, m, n, &b, c, ldc, &zero, c, ldc, c,
                       ldc);
  }
  double zero = 0;
  return cublasDgeam(s->blas, CUBLAS_OP_N, CUBLAS_OP_N, m, n, &g->beta, c, ldc, &zero, c, ldc,
                     c, ldc);
}

static cublasStatus_t run_gemm(cuda_state *s, int lane, const poas__gemm_call *g,
                               cudaError_t *cuda_err) {
  const char *a = (const char *)g->a.mem.ptr + g->a.off;
  const char *b = (const char *)g->b.mem.ptr + g->b.off;
  char *c = (char *)g->c.mem.ptr + g->c.off;
  if (g->k == 0 || g->alpha == 0)
    return scale_c(s, lane, g, c, cuda_err);
  cublasOperation_t ta = g->transa == POAS_TRANS ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t tb = g->transb == POAS_TRANS ? CUBLAS_OP_T : CUBLAS_OP_N;
  int m = (int)g->m, n = (int)g->n, k = (int)g->k;
  if (g->dtype == POAS_FLOAT32) {
    float alpha = (float)g->alpha, beta = (float)g->beta;
    return cublasSgemm(s->blas, ta, tb, m, n, k, &alpha, (const float *)a, (int)g->a.ld,
                       (const float *)b, (int)g->b.ld, &beta, (float *)c, (int)g->c.ld);
  }
  return cublasDgemm(s->blas, ta, tb, m, n, k, &g->alpha, (const double *)a, (int)g->a.ld,
                     (const double *)b, (int)g->b.ld, &g->beta, (double *)c, (int)g->c.ld);
}

static int cuda_gemm(poas__device *dev, int lane, const poas__gemm_call *g) {
  cuda_state *s = dev->priv;
  int rc = check_lane(s, lane);
  if (rc)
    return rc;
  if (g->dtype != POAS_FLOAT32 && g->dtype != POAS_FLOAT64)
    return poas__fail(POAS_EDTYPE, "cuda%d: gemm: unknown dtype %d", s->ordinal, (int)g->dtype);
  if (g->m == 0 || g->n == 0)
    return 0;
  if (!fits_int(g))
    return poas__fail(POAS_ENOTSUP,
                      "cuda%d: gemm m=%lld n=%lld k=%lld (ld %lld, %lld, %lld): cuBLAS takes "
                      "sizes up to %d",
                      s->ordinal, (long long)g->m, (long long)g->n, (long long)g->k,
                      (long long)g->a.ld, (long long)g->b.ld, (long long)g->c.ld, INT_MAX);
  rc = use(s);
  if (rc)
    return rc;
  pthread_mutex_lock(&s->blas_lock);
  cudaError_t cuda_err = cudaSuccess;
  /* cublasSetStream also resets the handle's workspace: only on a change. */
  cudaStream_t current = NULL;
  cublasStatus_t st = cublasGetStream(s->blas, &current);
  if (st == CUBLAS_STATUS_SUCCESS && current != s->stream[lane])
    st = cublasSetStream(s->blas, s->stream[lane]);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = run_gemm(s, lane, g, &cuda_err);
  pthread_mutex_unlock(&s->blas_lock);
  if (cuda_err != cudaSuccess)
    return cuda_fail(s, "cudaMemset2DAsync", cuda_err);
  if (st != CUBLAS_STATUS_SUCCESS)
    return blas_fail(s, g->dtype == POAS_FLOAT32 ? "cublasSgemm" : "cublasDgemm", st);
  return 0;
}

static int cuda_event_create(poas__device *dev, poas__event *ev) {
  cuda_state *s = dev->priv;
  memset(ev, 0, sizeof *ev);
  ev->dev = dev;
  int rc = use(s);
  if (rc)
    return rc;
  cudaEvent_t e;
  cudaError_t ce = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  if (ce != cudaSuccess)
    return cuda_fail(s, "cudaEventCreate", ce);
  ev->u.handle = e;
  return 0;
}

static int cuda_event_record(poas__device *dev, int lane, poas__event *ev) {
  cuda_state *s = dev->priv;
  int rc = on_lane(s, lane);
  if (rc)
    return rc;
  cudaError_t ce = cudaEventRecord((cudaEvent_t)ev->u.handle, s->stream[lane]);
  if (ce != cudaSuccess)
    return cuda_fail(s, "cudaEventRecord", ce);
  ev->recorded = 1;
  return 0;
}

/* The lane waits on the device; the host returns at once. */
static int cuda_lane_wait(poas__device *dev, int lane, poas__event *ev) {
  cuda_state *s = dev->priv;
  int rc = on_lane(s, lane);
  if (rc)
    return rc;
  cudaError_t ce = cudaStreamWaitEvent(s->stream[lane], (cudaEvent_t)ev->u.handle, 0);
  return ce == cudaSuccess ? 0 : cuda_fail(s, "cudaStreamWaitEvent", ce);
}

static int cuda_event_sync(poas__device *dev, poas__event *ev) {
  cuda_state *s = dev->priv;
  int rc = use(s);
  if (rc)
    return rc;
  cudaError_t ce = cudaEventSynchronize((cudaEvent_t)ev->u.handle);
  if (ce != cudaSuccess)
    return cuda_fail(s, "cudaEventSynchronize", ce);
  ev->wall = poas__now();
  return 0;
}

static void cuda_event_destroy(poas__device *dev, poas__event *ev) {
  cuda_state *s = dev->priv;
  if (!ev->u.handle || use(s))
    return;
  if (cudaEventDestroy((cudaEvent_t)ev->u.handle) != cudaSuccess)
    (void)cudaGetLastError();
  ev->u.handle = NULL;
}

static int cuda_lane_sync(poas__device *dev, int lane) {
  cuda_state *s = dev->priv;
  int rc = on_lane(s, lane);
  if (rc)
    return rc;
  cudaError_t ce = cudaStreamSynchronize(s->stream[lane]);
  return ce == cudaSuccess ? 0 : cuda_fail(s, "cudaStreamSynchronize", ce);
}

static void *cuda_native_lane(poas__device *dev, int lane) {
  cuda_state *s = dev->priv;
  return lane >= 0 && lane < CUDA_LANES ? (void *)s->stream[lane] : NULL;
}

const poas__backend poas__backend_cuda = {
    .kind_name = "cuda",
    .kind = POAS_DEVICE_CUDA,
    .built = 1,
    .count = cuda_count,
    .open = cuda_open,
    .close = cuda_close,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .host_register = cuda_host_register,
    .host_unregister = cuda_host_unregister,
    .copy_h2d = cuda_copy_h2d,
    .copy_d2h = cuda_copy_d2h,
    .gemm = cuda_gemm,
    .event_create = cuda_event_create,
    .event_record = cuda_event_record,
    .lane_wait = cuda_lane_wait,
    .event_sync = cuda_event_sync,
    .event_destroy = cuda_event_destroy,
    .lane_sync = cuda_lane_sync,
    .native_lane = cuda_native_lane,
};
