/* cuda.c: NVIDIA GPUs through the CUDA runtime and cuBLAS. Each device has
 * three non-blocking streams as lanes (by convention 0 for host-to-device
 * copies, 1 for compute, 2 for device-to-host copies), one cuBLAS handle
 * shared by the lanes, and plain cudaMalloc buffers. The scheduler drives a
 * device from worker threads, so every hook makes the device current on
 * the calling thread first; the runtime's cudaSetDevice is a cheap
 * thread-local switch once the primary context exists. On a thread of the
 * caller's (a GEMM run inline, a plan, a calibration, opening and closing)
 * a hook puts back the device that was current before it (enter, leave).
 * Errors are turned into POAS_EDEVICE with the failing call and the
 * runtime's name and message, and the runtime's last-error slot is
 * cleared so that one failure does not show up again in an unrelated
 * later check. An error that corrupts the device's context
 * (cuda_errors.h) retires the device for the rest of the process.
 *
 * Copies of pageable host memory are staged: the runtime's own path packs
 * its page-locked bounce buffer with one thread (6-10 GB/s on the H100 VM),
 * so large copies go through page-locked slots of this backend's instead,
 * packed and unpacked by copy_threads threads (core/hostcopy.h) while the
 * DMA engine moves the slot before (22 GB/s host-to-device and 18
 * device-to-host with four threads, 512 MiB; bench/results/staged-copies-
 * h100-2026-11-23.md). Page-locked host memory, small copies, and
 * copy_threads=0 go straight to the runtime. */
#include "core/hostcopy.h"
#include "devices/cuda/cublas_api.h"
#include "devices/cuda/cuda_errors.h"
#include "devices/device.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CUDA_LANES 3
/* Staging: slots per lane, their size, and the smallest copy staged: a
 * contiguous one from STAGE_MIN_BYTES (below it the runtime's path is as
 * fast: 13 GB/s at 16 MiB on the H100 VM), a pitched one (a tile of a
 * larger matrix) from STAGE_MIN_PITCHED_BYTES, because the runtime moves
 * pageable pitched memory far slower: in an H100 trace of a row-major
 * 2800^3 sgemm, its 7.9 MB column tiles (runs of 2.75 KiB) took 1.7-3.0 ms
 * each way (2.7-4.7 GB/s), while the contiguous 31 MB operand beside them
 * went at 32 GB/s. */
#define STAGE_SLOTS 3
#define STAGE_SLOT_BYTES ((size_t)16 << 20)
#define STAGE_MIN_BYTES ((size_t)8 << 20)
#define STAGE_MIN_PITCHED_BYTES ((size_t)64 << 10)

/* A lane's staging: page-locked slots used round robin, each with the
 * event of the last copy that read or wrote it, and the threads that pack
 * and unpack them. Made at the lane's first staged copy. */
typedef struct stage {
  pthread_mutex_t lock; /* one staged copy at a time on the lane */
  int ready;
  int unavailable; /* making it failed: the lane's copies go to the runtime */
  poas__copier *copier;
  char *slot[STAGE_SLOTS];
  cudaEvent_t done[STAGE_SLOTS];
  int next;
} stage;

typedef struct cuda_state {
  poas__device dev;
  int ordinal;
  cublasHandle_t blas;
  /* cublasSetStream and the GEMM after it must not interleave with another
   * thread's pair on the same handle. */
  pthread_mutex_t blas_lock;
  cudaStream_t stream[CUDA_LANES];
  int tf32;
  int copy_threads; /* 0: pageable copies go straight to the runtime */
  stage stage[CUDA_LANES];
} cuda_state;

/* The error that corrupted each device's context, by ordinal (0 for
 * none): process-wide, as the context is, so that a later context that
 * opens the device again is refused too. */
#define CUDA_MAX_ORDINALS 64
static atomic_int lost_error[CUDA_MAX_ORDINALS];

static cudaError_t lost_by(int ordinal) {
  if (ordinal < 0 || ordinal >= CUDA_MAX_ORDINALS)
    return cudaSuccess;
  return (cudaError_t)atomic_load(&lost_error[ordinal]);
}

/* After error e of `what`: where e corrupted the device's context, the
 * device is lost for the rest of the process. Its hooks then refuse at
 * once and plans leave it out (poas__dev_mark_lost), instead of every
 * later call giving it work that fails the same way. */
static void note_error(cuda_state *s, const char *what, cudaError_t e) {
  if (!poas__cuda_error_sticky(e))
    return;
  if (s->ordinal >= 0 && s->ordinal < CUDA_MAX_ORDINALS) {
    int none = cudaSuccess;
    atomic_compare_exchange_strong(&lost_error[s->ordinal], &none, (int)e);
  }
  char why[sizeof s->dev.lost_why];
  snprintf(why, sizeof why,
           "%s in %s (%s); a CUDA context is unusable after it until the process ends",
           cudaGetErrorName(e), what, cudaGetErrorString(e));
  if (poas__dev_mark_lost(&s->dev, why))
    poas__warn("cuda%d is lost for the rest of the process: %s", s->ordinal, why);
}

/* Clears the runtime's last error and reports `what` failed. */
static int cuda_fail(cuda_state *s, const char *what, cudaError_t e) {
  (void)cudaGetLastError();
  note_error(s, what, e);
  return poas__fail(POAS_EDEVICE, "cuda%d: %s: %s: %s", s->ordinal, what, cudaGetErrorName(e),
                    cudaGetErrorString(e));
}

/* What a caller's thread had current before a hook, which leave() puts
 * back. The driver's own view (its current context, NULL where the thread
 * never had one) where the driver API could be reached, else the
 * runtime's current device. The runtime's view alone cannot tell a thread
 * that chose device 0 from one that chose nothing (cudaGetDevice says 0
 * for both), and putting device 0 back on the second would make device
 * 0's primary context, memory on a GPU the program may not have asked for;
 * the driver's can put back "nothing current" exactly, and a context the
 * program made with the driver API too. */
typedef struct caller_current {
  enum { KEEP_CURRENT, RESTORE_CONTEXT, RESTORE_DEVICE } restore;
  void *context; /* RESTORE_CONTEXT: a CUcontext, NULL for none */
  int device;    /* RESTORE_DEVICE */
} caller_current;

/* cuCtxGetCurrent and cuCtxSetCurrent, from the libcuda the runtime loads
 * (POAS links the runtime alone); NULL where they could not be found. */
typedef int (*ctx_get_fn)(void **context);
typedef int (*ctx_set_fn)(void *context);
static ctx_get_fn driver_ctx_get;
static ctx_set_fn driver_ctx_set;
static pthread_once_t driver_once = PTHREAD_ONCE_INIT;

static void driver_resolve(void) {
  void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!h)
    return;
  ctx_get_fn get = (ctx_get_fn)(uintptr_t)dlsym(h, "cuCtxGetCurrent");
  ctx_set_fn set = (ctx_set_fn)(uintptr_t)dlsym(h, "cuCtxSetCurrent");
  if (get && set)
    driver_ctx_get = get, driver_ctx_set = set;
  /* The handle stays open: the runtime holds the library for the
   * process's life anyway. */
}

/* What to put back after making `ordinal` current on the calling thread.
 * A scheduler worker (poas__thread_is_worker) serves this device alone and
 * keeps it current, which spares the calls on each of its hooks. */
static caller_current to_restore(int ordinal) {
  caller_current c = {KEEP_CURRENT, NULL, 0};
  if (poas__thread_is_worker())
    return c;
  pthread_once(&driver_once, driver_resolve);
  if (driver_ctx_get) {
    if (driver_ctx_get(&c.context) == 0)
      c.restore = RESTORE_CONTEXT;
    return c;
  }
  if (cudaGetDevice(&c.device) != cudaSuccess)
    (void)cudaGetLastError();
  else if (c.device != ordinal)
    c.restore = RESTORE_DEVICE;
  return c;
}

/* Puts back what to_restore() found current. A failure is not reported:
 * the hook's own work is done either way. */
static void leave(caller_current prev) {
  void *now;
  if (prev.restore == RESTORE_CONTEXT) {
    if (driver_ctx_get(&now) != 0 || now != prev.context)
      (void)driver_ctx_set(prev.context);
  } else if (prev.restore == RESTORE_DEVICE && cudaSetDevice(prev.device) != cudaSuccess)
    (void)cudaGetLastError();
}

/* NULL, or why the device is lost: in this context, or through another
 * context of the process (the ordinal's record), with which this
 * context's device is then marked lost too, so that plans leave it out. */
static const char *device_lost(cuda_state *s) {
  cudaError_t other = lost_by(s->ordinal);
  if (other != cudaSuccess && !poas__dev_lost(&s->dev)) {
    char why[sizeof s->dev.lost_why];
    snprintf(why, sizeof why, "%s (%s), met by another context of this process",
             cudaGetErrorName(other), cudaGetErrorString(other));
    poas__dev_mark_lost(&s->dev, why);
  }
  return poas__dev_lost(&s->dev);
}

/* Makes the device current on the calling thread for a hook, having
 * refused a lost device without a CUDA call (every call on its context
 * would fail the same way); *prev is what leave() puts back. A program
 * with CUDA code of its own must not find its current device changed by
 * a GEMM that ran on its thread (schedule/run.c, run_inline). */
static int enter(cuda_state *s, caller_current *prev) {
  prev->restore = KEEP_CURRENT;
  const char *lost = device_lost(s);
  if (lost)
    return poas__fail(POAS_EDEVICE, "cuda%d: lost earlier in this process: %s", s->ordinal, lost);
  caller_current was = to_restore(s->ordinal);
  cudaError_t e = cudaSetDevice(s->ordinal);
  if (e != cudaSuccess)
    return cuda_fail(s, "cudaSetDevice", e);
  *prev = was;
  return 0;
}

static int check_lane(const cuda_state *s, int lane) {
  if (lane < 0 || lane >= CUDA_LANES)
    return poas__fail(POAS_EINVAL, "cuda%d: no lane %d (0 to %d)", s->ordinal, lane,
                      CUDA_LANES - 1);
  return 0;
}

/* A lane that exists, with the device made current: what every hook that
 * works on a lane needs first. */
static int on_lane(cuda_state *s, int lane, caller_current *prev) {
  prev->restore = KEEP_CURRENT;
  int rc = check_lane(s, lane);
  return rc ? rc : enter(s, prev);
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

/* Staging threads by default: four where the host has at least eight
 * cores (four packed 512 MiB at 22 GB/s, eight at 26, one at 7 on the
 * H100 VM's 16), none on smaller hosts, whose cores the CPU device needs
 * and where one thread would do what the runtime does. */
static int default_copy_threads(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n >= 8 ? 4 : 0;
}

static int parse_settings(cuda_state *s, const poas__spec_entry *e, char *err, size_t errcap) {
  s->copy_threads = default_copy_threads();
  const poas__int_setting known[] = {{"tf32", 0, 1, &s->tf32},
                                     {"copy_threads", 0, 64, &s->copy_threads}};
  return poas__spec_ints("cuda", e, known, 2, err, errcap);
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
  poas__cublas.cublasGetVersion(s->blas, &blas);
  poas_device_info *info = &s->dev.info;
  char text[sizeof prop.name + 128];
  snprintf(text, sizeof text, "%s (sm_%d%d)", prop.name, prop.major, prop.minor);
  poas__strlcpy(info->name, text, sizeof info->name);
  int len = snprintf(text, sizeof text, "driver %d.%d, runtime %d.%d, cuBLAS %d.%d.%d",
                     drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10, blas / 10000,
                     blas / 100 % 100, blas % 100);
  /* Settings that change its times, where not the default, as a sim's
   * driver string has them: a profile tells the device apart by this
   * string, and TF32 sgemm or another staging of pageable copies is
   * another device to its models. */
  if (s->tf32)
    len += snprintf(text + len, sizeof text - (size_t)len, " tf32=1");
  if (s->copy_threads != default_copy_threads())
    snprintf(text + len, sizeof text - (size_t)len, " copy_threads=%d", s->copy_threads);
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
  caller_current prev = {KEEP_CURRENT, NULL, 0};
  s->ordinal = index;
  int rc = parse_settings(s, e, err, errcap);
  if (rc)
    goto fail_state;
  rc = POAS_EDEVICE;
  cudaError_t ce = lost_by(index);
  if (ce != cudaSuccess) {
    snprintf(err, errcap,
             "cuda%d: lost earlier in this process to %s (%s); a CUDA context is unusable "
             "after it until the process ends",
             index, cudaGetErrorName(ce), cudaGetErrorString(ce));
    goto fail_state;
  }
  /* Opened on the caller's thread, which gets its current device back. */
  prev = to_restore(index);
  ce = cudaSetDevice(index);
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
  /* cuBLAS is loaded with the first device that needs it (cublas_api.h). */
  char why[400];
  if (poas__cublas_load(why, sizeof why)) {
    snprintf(err, errcap, "cuda%d: %s", index, why);
    goto fail_streams;
  }
  cublasStatus_t bs = poas__cublas.cublasCreate(&s->blas);
  if (bs == CUBLAS_STATUS_SUCCESS)
    bs = poas__cublas.cublasSetMathMode(s->blas,
                                        s->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
  if (bs != CUBLAS_STATUS_SUCCESS) {
    snprintf(err, errcap, "cuda%d: cuBLAS: %s", index, poas__cublas.cublasGetStatusString(bs));
    goto fail_blas;
  }
  rc = fill_info(s, err, errcap);
  if (rc)
    goto fail_blas;
  pthread_mutex_init(&s->blas_lock, NULL);
  for (int l = 0; l < CUDA_LANES; l++)
    pthread_mutex_init(&s->stage[l].lock, NULL);
  s->dev.nlanes = CUDA_LANES;
  /* A copy from pageable memory holds its caller until the data is staged
   * (to the device) or delivered (from it): a thread per lane, and one to
   * wait on events, keep the other lanes fed meanwhile. */
  s->dev.issue_threads = CUDA_LANES + 1;
  s->dev.priv = s;
  *out = &s->dev;
  leave(prev);
  return 0;

fail_blas:
  if (s->blas)
    poas__cublas.cublasDestroy(s->blas);
fail_streams:
  while (lane-- > 0)
    cudaStreamDestroy(s->stream[lane]);
fail_clear:
  (void)cudaGetLastError();
  leave(prev);
fail_state:
  free(s);
  return rc;
}

/* A lane's staging slots and threads, as far as they were made. */
static void stage_release(stage *st) {
  for (int i = 0; i < STAGE_SLOTS; i++) {
    if (st->done[i])
      cudaEventDestroy(st->done[i]);
    if (st->slot[i])
      cudaFreeHost(st->slot[i]);
    st->done[i] = NULL;
    st->slot[i] = NULL;
  }
  poas__copier_destroy(st->copier);
  st->copier = NULL;
  st->ready = 0;
}

/* Waits for every lane, then releases the staging, the streams and the
 * handle. Events belong to their creators, who destroy them with
 * event_destroy. */
static void cuda_close(poas__device *dev) {
  cuda_state *s = dev->priv;
  /* Not through enter(): a lost device's streams and handle are released
   * as far as the runtime still lets, and its threads in any case. */
  caller_current prev = to_restore(s->ordinal);
  (void)cudaSetDevice(s->ordinal);
  for (int l = 0; l < CUDA_LANES; l++)
    cudaStreamSynchronize(s->stream[l]);
  for (int l = 0; l < CUDA_LANES; l++) {
    stage_release(&s->stage[l]);
    pthread_mutex_destroy(&s->stage[l].lock);
  }
  poas__cublas.cublasDestroy(s->blas);
  for (int l = CUDA_LANES - 1; l >= 0; l--)
    cudaStreamDestroy(s->stream[l]);
  (void)cudaGetLastError();
  leave(prev);
  pthread_mutex_destroy(&s->blas_lock);
  free(s);
}

static int cuda_mem_alloc(poas__device *dev, size_t bytes, poas__mem *out) {
  cuda_state *s = dev->priv;
  caller_current prev;
  int rc = enter(s, &prev);
  if (rc)
    return rc;
  /* cudaMalloc(0) succeeds with NULL, which callers read as "nothing
   * allocated"; a small real buffer keeps the handle meaningful. */
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, bytes ? bytes : 256);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    rc = poas__fail(POAS_ENOMEM, "cuda%d: cudaMalloc of %zu bytes: %s", s->ordinal, bytes,
                    cudaGetErrorString(e));
  } else if (e != cudaSuccess) {
    rc = cuda_fail(s, "cudaMalloc", e);
  } else {
    out->ptr = p;
  }
  leave(prev);
  return rc;
}

static void cuda_mem_free(poas__device *dev, poas__mem mem) {
  cuda_state *s = dev->priv;
  caller_current prev;
  /* A lost device's memory went with its context: nothing to free, and
   * no error to report over the one that lost it. */
  if (!mem.ptr || device_lost(s) || enter(s, &prev))
    return;
  if (cudaFree(mem.ptr) != cudaSuccess)
    (void)cudaGetLastError();
  leave(prev);
}

/* What cudaMalloc could take now: another process on the GPU (or another
 * context of this one) holds the rest. Planned from the total instead, a
 * shared GPU's cudaMalloc failed mid-run and retired the device, on every
 * call. */
static int cuda_mem_available(poas__device *dev, uint64_t *bytes) {
  cuda_state *s = dev->priv;
  size_t free_b = 0, total_b = 0;
  /* Not through enter(): a plan asks this, on the caller's thread, and a
   * failure here leaves the plan on the total, not an error detail
   * behind. */
  if (device_lost(s))
    return POAS_EDEVICE;
  caller_current prev = to_restore(s->ordinal);
  cudaError_t e = cudaSetDevice(s->ordinal);
  if (e == cudaSuccess)
    e = cudaMemGetInfo(&free_b, &total_b);
  leave(prev);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    note_error(s, "cudaMemGetInfo", e);
    return POAS_EDEVICE;
  }
  *bytes = free_b;
  return 0;
}

/* Portable rather than default registration: with several GPUs, memory
 * pinned through one device must count as pinned for the others too. */
static int cuda_host_register(poas__device *dev, void *p, size_t bytes) {
  cuda_state *s = dev->priv;
  caller_current prev;
  int rc = enter(s, &prev);
  if (rc)
    return rc;
  cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterPortable);
  rc = e == cudaSuccess ? 0 : cuda_fail(s, "cudaHostRegister", e);
  leave(prev);
  return rc;
}

static void cuda_host_unregister(poas__device *dev, void *p) {
  cuda_state *s = dev->priv;
  caller_current prev;
  if (device_lost(s) || enter(s, &prev))
    return;
  if (cudaHostUnregister(p) != cudaSuccess)
    (void)cudaGetLastError();
  leave(prev);
}

/* One 2-D copy on a lane, the device current. A contiguous block goes as
 * one 1-D copy; a pitch beyond what cudaMemcpy2D accepts (2^31 bytes on
 * current parts) falls back to a copy per row. */
static int copy2d(cuda_state *s, int lane, char *dst, size_t dpitch, const char *src,
                  size_t spitch, const poas__copy2d *c, enum cudaMemcpyKind kind) {
  if (c->width == 0 || c->rows == 0)
    return 0;
  cudaStream_t st = s->stream[lane];
  cudaError_t e;
  const char *call = "cudaMemcpyAsync";
  if (c->rows == 1 || (dpitch == c->width && spitch == c->width)) {
    e = cudaMemcpyAsync(dst, src, c->width * c->rows, kind, st);
  } else if (dpitch <= INT_MAX && spitch <= INT_MAX) {
    call = "cudaMemcpy2DAsync";
    e = cudaMemcpy2DAsync(dst, dpitch, src, spitch, c->width, c->rows, kind, st);
  } else {
    e = cudaSuccess;
    for (size_t r = 0; r < c->rows && e == cudaSuccess; r++)
      e = cudaMemcpyAsync(dst + r * dpitch, src + r * spitch, c->width, kind, st);
  }
  return e == cudaSuccess ? 0 : cuda_fail(s, call, e);
}

/* ------------------------------------------------------------ staging */

/* Makes a lane's slots, events and threads; the lane's stage lock is held.
 * A failure leaves nothing behind, and the copy then goes straight to the
 * runtime. */
static int stage_make(cuda_state *s, stage *st) {
  int rc = poas__copier_create(s->copy_threads, &st->copier);
  for (int i = 0; !rc && i < STAGE_SLOTS; i++) {
    cudaError_t e = cudaMallocHost((void **)&st->slot[i], STAGE_SLOT_BYTES);
    if (e == cudaSuccess)
      e = cudaEventCreateWithFlags(&st->done[i], cudaEventDisableTiming);
    if (e != cudaSuccess)
      rc = cuda_fail(s, "staging buffers", e);
  }
  if (rc) {
    stage_release(st);
    return rc;
  }
  st->next = 0;
  st->ready = 1;
  return 0;
}

/* Whether host memory is page-locked (cudaMallocHost, cudaHostRegister):
 * the DMA engine reads it directly, and staging would only add a copy. */
static int host_pinned(const void *p) {
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return a.type == cudaMemoryTypeHost;
}

/* A piece of a 2-D copy that fits one slot: `rows` runs of `width` bytes,
 * starting `host_off` and `dev_off` bytes into the two sides. */
typedef struct piece {
  size_t host_off, dev_off, width, rows;
} piece;

/* How copy c is cut into pieces of at most `bytes` (a slot, or less): a
 * contiguous block in byte ranges (flat), a pitched one in whole rows per
 * piece (rows_per > 0), rows longer than a piece in ranges of each row
 * (per_row pieces a row). A copy of a slot or a few is still cut in
 * STAGE_PIECES pieces (none under STAGE_PIECE_MIN_BYTES), so that the
 * threads pack one piece while the DMA engine moves the one before: in one
 * piece the two run one after the other. */
typedef struct cut {
  int flat;
  size_t bytes, rows_per, per_row, count;
} cut;

#define STAGE_PIECES 4
#define STAGE_PIECE_MIN_BYTES ((size_t)1 << 20)

static cut cut_of(const poas__copy2d *c) {
  size_t total = c->width * c->rows;
  cut k = {0, total / STAGE_PIECES, 0, 0, 0};
  k.bytes = POAS__MIN(POAS__MAX(k.bytes, STAGE_PIECE_MIN_BYTES), STAGE_SLOT_BYTES);
  if (c->rows == 1 || (c->host_pitch == c->width && c->dev_pitch == c->width)) {
    k.flat = 1;
    k.count = (total + k.bytes - 1) / k.bytes;
  } else if (c->width <= k.bytes && c->dev_pitch <= INT_MAX) {
    /* Whole rows per piece, moved by cudaMemcpy2DAsync, which takes no
     * pitch past INT_MAX (see copy2d); beyond it, a piece per row. */
    k.rows_per = k.bytes / c->width;
    k.count = (c->rows + k.rows_per - 1) / k.rows_per;
  } else {
    k.per_row = (c->width + k.bytes - 1) / k.bytes;
    k.count = c->rows * k.per_row;
  }
  return k;
}

/* Piece i of copy c, cut as k says. */
static piece piece_at(const poas__copy2d *c, const cut *k, size_t i) {
  if (k->flat) {
    size_t off = i * k->bytes;
    return (piece){off, off, POAS__MIN(k->bytes, c->width * c->rows - off), 1};
  }
  if (k->rows_per) {
    size_t r = i * k->rows_per;
    return (piece){r * c->host_pitch, r * c->dev_pitch, c->width,
                   POAS__MIN(k->rows_per, c->rows - r)};
  }
  size_t r = i / k->per_row, b = i % k->per_row * k->bytes;
  return (piece){r * c->host_pitch + b, r * c->dev_pitch + b, POAS__MIN(k->bytes, c->width - b),
                 1};
}

/* Moves piece p between slot and device on the lane's stream and records
 * the slot's event after it. */
static cudaError_t slot_dma(cuda_state *s, int lane, int slot, char *dev, const piece *p,
                            size_t dev_pitch, enum cudaMemcpyKind kind) {
  stage *st = &s->stage[lane];
  cudaStream_t sm = s->stream[lane];
  char *d = dev + p->dev_off, *h = st->slot[slot];
  int h2d = kind == cudaMemcpyHostToDevice;
  cudaError_t e =
      p->rows == 1
          ? cudaMemcpyAsync(h2d ? d : h, h2d ? h : d, p->width, kind, sm)
          : cudaMemcpy2DAsync(h2d ? d : h, h2d ? dev_pitch : p->width, h2d ? h : d,
                              h2d ? p->width : dev_pitch, p->width, p->rows, kind, sm);
  return e == cudaSuccess ? cudaEventRecord(st->done[slot], sm) : e;
}

/* Host to device through the slots, in the pieces k cuts c into, the
 * slots used round robin: each piece waits for its slot's last copy, is
 * packed by the lane's threads, and is sent on the lane's stream while
 * the next is packed. Returns once the host
 * memory is no longer read, like the runtime's copy from pageable
 * memory. */
static int staged_h2d(cuda_state *s, int lane, char *dev, const char *host,
                      const poas__copy2d *c, cut k) {
  stage *st = &s->stage[lane];
  for (size_t i = 0; i < k.count; i++) {
    piece p = piece_at(c, &k, i);
    int slot = st->next;
    st->next = (slot + 1) % STAGE_SLOTS;
    cudaError_t e = cudaEventSynchronize(st->done[slot]);
    if (e != cudaSuccess)
      return cuda_fail(s, "staging: cudaEventSynchronize", e);
    poas__copier_run(st->copier, st->slot[slot], p.width, host + p.host_off, c->host_pitch,
                     p.width, p.rows);
    e = slot_dma(s, lane, slot, dev, &p, c->dev_pitch, cudaMemcpyHostToDevice);
    if (e != cudaSuccess)
      return cuda_fail(s, "staging: cudaMemcpy2DAsync", e);
  }
  return 0;
}

/* Device to host through the slots, in the pieces k cuts c into: up to
 * STAGE_SLOTS pieces are in flight on the lane's stream (behind whatever
 * the lane waits for), piece i in slot (first + i) % STAGE_SLOTS, and each
 * is unpacked by the lane's threads as it lands. A slot's last user was a copy on this lane, in
 * stream order before, whose host side was done before it returned: no
 * wait before reusing it. Returns once the host memory holds the data,
 * like the runtime's copy to pageable memory. */
static int staged_d2h(cuda_state *s, int lane, char *host, const char *dev,
                      const poas__copy2d *c, cut k) {
  stage *st = &s->stage[lane];
  int first = st->next;
  st->next = (int)((first + k.count) % STAGE_SLOTS);
  for (size_t i = 0, issued = 0; i < k.count; i++) {
    for (; issued < k.count && issued < i + STAGE_SLOTS; issued++) {
      piece p = piece_at(c, &k, issued);
      cudaError_t e = slot_dma(s, lane, (int)((first + issued) % STAGE_SLOTS), (char *)dev, &p,
                               c->dev_pitch, cudaMemcpyDeviceToHost);
      if (e != cudaSuccess)
        return cuda_fail(s, "staging: cudaMemcpy2DAsync", e);
    }
    int slot = (int)((first + i) % STAGE_SLOTS);
    piece p = piece_at(c, &k, i);
    cudaError_t e = cudaEventSynchronize(st->done[slot]);
    if (e != cudaSuccess)
      return cuda_fail(s, "staging: cudaEventSynchronize", e);
    poas__copier_run(st->copier, host + p.host_off, c->host_pitch, st->slot[slot], p.width,
                     p.width, p.rows);
  }
  return 0;
}

/* A copy through the lane's staging when it pays (copy_threads set, at
 * least STAGE_MIN_BYTES, or STAGE_MIN_PITCHED_BYTES for a pitched copy,
 * host memory pageable); *staged says whether it was taken. The device is
 * current. The lane's stage is made at its first such copy. */
static int try_staged(cuda_state *s, int lane, int h2d, char *dev, char *host,
                      const poas__copy2d *c, int *staged) {
  *staged = 0;
  stage *st = &s->stage[lane];
  cut k = cut_of(c);
  if (s->copy_threads == 0 ||
      c->width * c->rows < (k.flat ? STAGE_MIN_BYTES : STAGE_MIN_PITCHED_BYTES))
    return 0;
  if (host_pinned(host))
    return 0;
  pthread_mutex_lock(&st->lock);
  if (!st->ready && !st->unavailable) {
    poas__failures_expected(1);
    if (stage_make(s, st) != 0) {
      /* No page-locked memory or threads to spare: the runtime's path
       * still works, and is not asked again. */
      poas__info("cuda%d: lane %d copies go unstaged: %s", s->ordinal, lane,
                 poas_error_detail());
      poas__clear_detail();
      st->unavailable = 1;
    }
    poas__failures_expected(0);
  }
  if (st->unavailable) {
    pthread_mutex_unlock(&st->lock);
    return 0;
  }
  int rc = h2d ? staged_h2d(s, lane, dev, host, c, k) : staged_d2h(s, lane, host, dev, c, k);
  pthread_mutex_unlock(&st->lock);
  *staged = 1;
  return rc;
}

/* A copy between host memory and device memory (dev, already offset) on
 * a lane: staged where that pays, else the runtime's. */
static int copy(cuda_state *s, int lane, int h2d, char *dev, char *host, const poas__copy2d *c) {
  caller_current prev;
  int staged, rc = on_lane(s, lane, &prev);
  if (rc)
    return rc;
  rc = try_staged(s, lane, h2d, dev, host, c, &staged);
  if (!rc && !staged)
    rc = h2d ? copy2d(s, lane, dev, c->dev_pitch, host, c->host_pitch, c, cudaMemcpyHostToDevice)
             : copy2d(s, lane, host, c->host_pitch, dev, c->dev_pitch, c, cudaMemcpyDeviceToHost);
  leave(prev);
  return rc;
}

static int cuda_copy_h2d(poas__device *dev, int lane, poas__mem dst, const void *src,
                         const poas__copy2d *c) {
  return copy(dev->priv, lane, 1, (char *)dst.ptr + c->dev_off, (char *)(uintptr_t)src, c);
}

static int cuda_copy_d2h(poas__device *dev, int lane, void *dst, poas__mem src,
                         const poas__copy2d *c) {
  return copy(dev->priv, lane, 0, (char *)src.ptr + c->dev_off, dst, c);
}

static int blas_fail(const cuda_state *s, const char *what, cublasStatus_t st) {
  (void)cudaGetLastError();
  return poas__fail(POAS_EDEVICE, "cuda%d: %s: %s (%s)", s->ordinal, what,
                    poas__cublas.cublasGetStatusName(st), poas__cublas.cublasGetStatusString(st));
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
    return poas__cublas.cublasSgeam(s->blas, CUBLAS_OP_N, CUBLAS_OP_N, m, n, &b, c, ldc, &zero, c,
                                    ldc, c, ldc);
  }
  double zero = 0;
  return poas__cublas.cublasDgeam(s->blas, CUBLAS_OP_N, CUBLAS_OP_N, m, n, &g->beta, c, ldc, &zero,
                                  c, ldc, c, ldc);
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
    return poas__cublas.cublasSgemm(s->blas, ta, tb, m, n, k, &alpha, (const float *)a,
                                    (int)g->a.ld, (const float *)b, (int)g->b.ld, &beta, (float *)c,
                                    (int)g->c.ld);
  }
  return poas__cublas.cublasDgemm(s->blas, ta, tb, m, n, k, &g->alpha, (const double *)a,
                                  (int)g->a.ld, (const double *)b, (int)g->b.ld, &g->beta,
                                  (double *)c, (int)g->c.ld);
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
  caller_current prev;
  rc = enter(s, &prev);
  if (rc)
    return rc;
  pthread_mutex_lock(&s->blas_lock);
  cudaError_t cuda_err = cudaSuccess;
  /* cublasSetStream also resets the handle's workspace: only on a change. */
  cudaStream_t current = NULL;
  const char *what = "cublasGetStream";
  cublasStatus_t st = poas__cublas.cublasGetStream(s->blas, &current);
  if (st == CUBLAS_STATUS_SUCCESS && current != s->stream[lane]) {
    what = "cublasSetStream";
    st = poas__cublas.cublasSetStream(s->blas, s->stream[lane]);
  }
  if (st == CUBLAS_STATUS_SUCCESS) {
    int scale = g->k == 0 || g->alpha == 0;
    what = g->dtype == POAS_FLOAT32 ? (scale ? "cublasSgeam" : "cublasSgemm")
                                    : (scale ? "cublasDgeam" : "cublasDgemm");
    st = run_gemm(s, lane, g, &cuda_err);
  }
  pthread_mutex_unlock(&s->blas_lock);
  if (cuda_err != cudaSuccess)
    rc = cuda_fail(s, "cudaMemset2DAsync", cuda_err);
  else if (st != CUBLAS_STATUS_SUCCESS)
    rc = blas_fail(s, what, st);
  leave(prev);
  return rc;
}

static int cuda_event_create(poas__device *dev, poas__event *ev) {
  cuda_state *s = dev->priv;
  memset(ev, 0, sizeof *ev);
  ev->dev = dev;
  caller_current prev;
  int rc = enter(s, &prev);
  if (rc)
    return rc;
  cudaEvent_t e;
  cudaError_t ce = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  if (ce != cudaSuccess)
    rc = cuda_fail(s, "cudaEventCreate", ce);
  else
    ev->u.handle = e;
  leave(prev);
  return rc;
}

static int cuda_event_record(poas__device *dev, int lane, poas__event *ev) {
  cuda_state *s = dev->priv;
  caller_current prev;
  int rc = on_lane(s, lane, &prev);
  if (rc)
    return rc;
  cudaError_t ce = cudaEventRecord((cudaEvent_t)ev->u.handle, s->stream[lane]);
  if (ce != cudaSuccess)
    rc = cuda_fail(s, "cudaEventRecord", ce);
  else
    ev->recorded = 1;
  leave(prev);
  return rc;
}

/* The lane waits on the device; the host returns at once. */
static int cuda_lane_wait(poas__device *dev, int lane, poas__event *ev) {
  cuda_state *s = dev->priv;
  caller_current prev;
  int rc = on_lane(s, lane, &prev);
  if (rc)
    return rc;
  cudaError_t ce = cudaStreamWaitEvent(s->stream[lane], (cudaEvent_t)ev->u.handle, 0);
  rc = ce == cudaSuccess ? 0 : cuda_fail(s, "cudaStreamWaitEvent", ce);
  leave(prev);
  return rc;
}

static int cuda_event_sync(poas__device *dev, poas__event *ev) {
  cuda_state *s = dev->priv;
  caller_current prev;
  int rc = enter(s, &prev);
  if (rc)
    return rc;
  cudaError_t ce = cudaEventSynchronize((cudaEvent_t)ev->u.handle);
  if (ce != cudaSuccess)
    rc = cuda_fail(s, "cudaEventSynchronize", ce);
  else
    ev->wall = poas__now();
  leave(prev);
  return rc;
}

static void cuda_event_destroy(poas__device *dev, poas__event *ev) {
  cuda_state *s = dev->priv;
  caller_current prev;
  if (!ev->u.handle || device_lost(s) || enter(s, &prev))
    return;
  if (cudaEventDestroy((cudaEvent_t)ev->u.handle) != cudaSuccess)
    (void)cudaGetLastError();
  ev->u.handle = NULL;
  leave(prev);
}

static int cuda_lane_sync(poas__device *dev, int lane) {
  cuda_state *s = dev->priv;
  caller_current prev;
  int rc = on_lane(s, lane, &prev);
  if (rc)
    return rc;
  cudaError_t ce = cudaStreamSynchronize(s->stream[lane]);
  rc = ce == cudaSuccess ? 0 : cuda_fail(s, "cudaStreamSynchronize", ce);
  leave(prev);
  return rc;
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
    .mem_available = cuda_mem_available,
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
