/* baseline-cublas.c: cuBLAS alone on the first GPU with plain synchronous
 * copies: cudaMemcpy of A and B from pageable host memory, the multiply,
 * and cudaMemcpy of C back, all inside the timed call, as the simplest
 * correct cuBLAS program does. The default math mode is kept, so sgemm runs
 * in full single precision. Device buffers are kept between runs and only
 * grown. The row-major product is the column-major C^T = B^T A^T. cuBLAS
 * is loaded only where there is a GPU, as the library loads it
 * (devices/cuda/cublas_api.h, compiled into poas-bench too). */
#include "config.h"

#include "bench/bench.h"
#include "devices/cuda/cublas_api.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct cublas_state {
  cublasHandle_t handle;
  void *buf[3]; /* A, B, C */
  size_t cap[3];
} cublas_state;

static int cublas_open(void **state, char *desc, size_t cap) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    snprintf(desc, cap, "no CUDA GPU");
    return BENCH_UNSUPPORTED;
  }
  char why[400];
  if (poas__cublas_load(why, sizeof why)) {
    snprintf(desc, cap, "%s", why);
    return BENCH_FAILED;
  }
  cublas_state *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(desc, cap, "out of memory");
    return BENCH_FAILED;
  }
  struct cudaDeviceProp prop;
  if (cudaSetDevice(0) != cudaSuccess || cudaGetDeviceProperties(&prop, 0) != cudaSuccess ||
      poas__cublas.cublasCreate(&s->handle) != CUBLAS_STATUS_SUCCESS) {
    snprintf(desc, cap, "CUDA or cuBLAS initialisation failed");
    free(s);
    return BENCH_FAILED;
  }
  snprintf(desc, cap, "cuBLAS on %s", prop.name);
  *state = s;
  return 0;
}

static cudaError_t ensure(cublas_state *s, int i, size_t bytes) {
  if (s->cap[i] >= bytes)
    return cudaSuccess;
  if (s->buf[i])
    cudaFree(s->buf[i]);
  s->buf[i] = NULL, s->cap[i] = 0;
  cudaError_t err = cudaMalloc(&s->buf[i], bytes);
  if (err == cudaSuccess)
    s->cap[i] = bytes;
  return err;
}

static cublasStatus_t multiply(cublas_state *s, const bench_problem *p) {
  int m = (int)p->m, n = (int)p->n, k = (int)p->k;
  if (p->dtype == POAS_FLOAT64) {
    const double one = 1.0, zero = 0.0;
    return poas__cublas.cublasDgemm(s->handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, s->buf[1],
                                    n, s->buf[0], k, &zero, s->buf[2], n);
  }
  const float one = 1.0f, zero = 0.0f;
  return poas__cublas.cublasSgemm(s->handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, s->buf[1], n,
                                  s->buf[0], k, &zero, s->buf[2], n);
}

static int cublas_gemm(void *state, const bench_problem *p, char *why, size_t cap) {
  cublas_state *s = state;
  size_t es = bench_dtype_size(p->dtype);
  size_t bytes[3] = {(size_t)(p->m * p->k) * es, (size_t)(p->k * p->n) * es,
                     (size_t)(p->m * p->n) * es};
  cudaError_t err = cudaSuccess;
  for (int i = 0; i < 3 && err == cudaSuccess; i++)
    err = ensure(s, i, bytes[i]);
  if (err == cudaSuccess)
    err = cudaMemcpy(s->buf[0], p->a, bytes[0], cudaMemcpyHostToDevice);
  if (err == cudaSuccess)
    err = cudaMemcpy(s->buf[1], p->b, bytes[1], cudaMemcpyHostToDevice);
  if (err != cudaSuccess) {
    snprintf(why, cap, "CUDA allocation or copy failed: %s", cudaGetErrorString(err));
    return BENCH_FAILED;
  }
  cublasStatus_t st = multiply(s, p);
  if (st != CUBLAS_STATUS_SUCCESS) {
    snprintf(why, cap, "cuBLAS gemm failed (status %d)", (int)st);
    return BENCH_FAILED;
  }
  /* A synchronous copy on the legacy default stream waits for the gemm. */
  err = cudaMemcpy(p->c, s->buf[2], bytes[2], cudaMemcpyDeviceToHost);
  if (err != cudaSuccess) {
    snprintf(why, cap, "CUDA copy back failed: %s", cudaGetErrorString(err));
    return BENCH_FAILED;
  }
  return 0;
}

static void cublas_close(void *state) {
  cublas_state *s = state;
  for (int i = 2; i >= 0; i--)
    if (s->buf[i])
      cudaFree(s->buf[i]);
  poas__cublas.cublasDestroy(s->handle);
  free(s);
}

const bench_baseline bench_baseline_cublas = {
    .name = "cublas", .open = cublas_open, .gemm = cublas_gemm, .close = cublas_close,
    .copies = 1};
