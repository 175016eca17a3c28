/* cublas.c: the cuBLAS calls POAS makes (devices/cuda/cublas_api.h), built
 * as libcublas with the real soname over the fake runtime (runtime.c). A
 * handle belongs to the device current when it was made; GEMM and GEAM
 * check their sizes and leading dimensions as cuBLAS does, check that A,
 * B and C lie with their whole extent in device memory of the handle's
 * device, take alpha and beta at the call (host pointer mode) and run
 * column-major on the worker of the stream the handle has at the call:
 * GEMM through OpenBLAS's cblas, GEAM element by element. Tensor-core
 * modes are stored and change nothing: results are full precision. */
#include "fakecuda.h"

#include <cblas.h>
#include <cublas_v2.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct cublasContext {
  int dev;
  cudaStream_t stream;
  cublasMath_t math;
  struct cublasContext *next;
};

static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cublasContext *handles;

/* A live handle; aborts on anything else. */
static struct cublasContext *handle_of(const char *call, cublasHandle_t h) {
  pthread_mutex_lock(&handles_lock);
  struct cublasContext *c = handles;
  while (c && c != h)
    c = c->next;
  pthread_mutex_unlock(&handles_lock);
  if (!c)
    fakecuda_misuse(call, "handle %p is not a live cuBLAS handle", (void *)h);
  return c;
}

/* An injected failure, or the lost context's, for a call on dev. */
static cublasStatus_t enter_call(const char *call, int dev) {
  int code = CUBLAS_STATUS_EXECUTION_FAILED;
  if (fakecuda_injected(call, &code))
    return (cublasStatus_t)code;
  return fakecuda_lost(dev) == cudaSuccess ? CUBLAS_STATUS_SUCCESS
                                           : CUBLAS_STATUS_EXECUTION_FAILED;
}

cublasStatus_t cublasCreate(cublasHandle_t *out) {
  int dev = fakecuda_device_here();
  cublasStatus_t st = enter_call("cublasCreate_v2", dev);
  if (st != CUBLAS_STATUS_SUCCESS)
    return st;
  struct cublasContext *c = calloc(1, sizeof *c);
  if (!c)
    return CUBLAS_STATUS_ALLOC_FAILED;
  c->dev = dev;
  pthread_mutex_lock(&handles_lock);
  c->next = handles;
  handles = c;
  pthread_mutex_unlock(&handles_lock);
  *out = c;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t h) {
  struct cublasContext *c = handle_of("cublasDestroy_v2", h);
  pthread_mutex_lock(&handles_lock);
  for (struct cublasContext **p = &handles; *p; p = &(*p)->next)
    if (*p == c) {
      *p = c->next;
      break;
    }
  pthread_mutex_unlock(&handles_lock);
  free(c);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetVersion(cublasHandle_t h, int *version) {
  handle_of("cublasGetVersion_v2", h);
  *version = CUBLAS_VERSION;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
  handle_of("cublasSetMathMode", h)->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream(cublasHandle_t h, cudaStream_t *stream) {
  *stream = handle_of("cublasGetStream_v2", h)->stream;
  return CUBLAS_STATUS_SUCCESS;
}

/* The stream must be of the handle's device, as in cuBLAS. */
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t stream) {
  struct cublasContext *c = handle_of("cublasSetStream_v2", h);
  if (stream && fakecuda_stream_device("cublasSetStream_v2", stream) != c->dev)
    fakecuda_misuse("cublasSetStream_v2", "stream %p is of device %d, the handle of device %d",
                    (void *)stream, fakecuda_stream_device("cublasSetStream_v2", stream), c->dev);
  c->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

/* The elements a column-major `rows` x `cols` matrix with leading
 * dimension ld spans. */
static size_t span(int rows, int cols, int ld) {
  return rows && cols ? (size_t)(cols - 1) * (size_t)ld + (size_t)rows : 0;
}

static int bad_op(cublasOperation_t t) { return t != CUBLAS_OP_N && t != CUBLAS_OP_T; }

static int max1(int x) { return x > 1 ? x : 1; }

/* One GEMM or GEAM, queued: the operands, the scalars taken at the call,
 * and the element size (4 or 8). */
typedef struct blas_op {
  int geam;
  size_t es;
  cublasOperation_t ta, tb;
  int m, n, k, lda, ldb, ldc;
  double alpha, beta;
  const void *a, *b;
  void *c;
} blas_op;

static void run_gemm(const blas_op *o) {
  enum CBLAS_TRANSPOSE ta = o->ta == CUBLAS_OP_T ? CblasTrans : CblasNoTrans;
  enum CBLAS_TRANSPOSE tb = o->tb == CUBLAS_OP_T ? CblasTrans : CblasNoTrans;
  if (o->es == 4)
    cblas_sgemm(CblasColMajor, ta, tb, o->m, o->n, o->k, (float)o->alpha, o->a, o->lda, o->b,
                o->ldb, (float)o->beta, o->c, o->ldc);
  else
    cblas_dgemm(CblasColMajor, ta, tb, o->m, o->n, o->k, o->alpha, o->a, o->lda, o->b, o->ldb,
                o->beta, o->c, o->ldc);
}

/* Element (i, j) of op(X): a zero scalar reads nothing, as in cuBLAS. */
static double element(const blas_op *o, const void *x, int ld, cublasOperation_t t, int i, int j) {
  size_t at = t == CUBLAS_OP_T ? (size_t)i * ld + j : (size_t)j * ld + i;
  return o->es == 4 ? ((const float *)x)[at] : ((const double *)x)[at];
}

/* C = alpha op(A) + beta op(B), element by element: in place (C == A or
 * C == B, untransposed, same ld) each element is read before it is
 * written. */
static void run_geam(const blas_op *o) {
  for (int j = 0; j < o->n; j++)
    for (int i = 0; i < o->m; i++) {
      double v = 0;
      if (o->alpha != 0)
        v += o->alpha * element(o, o->a, o->lda, o->ta, i, j);
      if (o->beta != 0)
        v += o->beta * element(o, o->b, o->ldb, o->tb, i, j);
      size_t at = (size_t)j * o->ldc + i;
      if (o->es == 4)
        ((float *)o->c)[at] = (float)v;
      else
        ((double *)o->c)[at] = v;
    }
}

static void run_blas(void *arg) {
  blas_op *o = arg;
  if (o->geam)
    run_geam(o);
  else
    run_gemm(o);
  free(o);
}

/* The stored rows and columns of A and B: op(A) is m x k and op(B) k x n
 * for GEMM, both m x n for GEAM. */
static void shapes(const blas_op *o, int *ar, int *ac, int *br, int *bc) {
  int opa_cols = o->geam ? o->n : o->k, opb_rows = o->geam ? o->m : o->k;
  *ar = o->ta == CUBLAS_OP_N ? o->m : opa_cols;
  *ac = o->ta == CUBLAS_OP_N ? opa_cols : o->m;
  *br = o->tb == CUBLAS_OP_N ? opb_rows : o->n;
  *bc = o->tb == CUBLAS_OP_N ? o->n : opb_rows;
}

/* The sizes cuBLAS refuses with CUBLAS_STATUS_INVALID_VALUE. */
static int bad_sizes(const blas_op *o) {
  int ar, ac, br, bc;
  shapes(o, &ar, &ac, &br, &bc);
  return bad_op(o->ta) || bad_op(o->tb) || o->m < 0 || o->n < 0 || o->k < 0 ||
         o->lda < max1(ar) || o->ldb < max1(br) || o->ldc < max1(o->m);
}

/* In-place GEAM is allowed only on an untransposed operand of C's ld. */
static int bad_in_place(const blas_op *o) {
  return (o->c == o->a && (o->ta != CUBLAS_OP_N || o->lda != o->ldc)) ||
         (o->c == o->b && (o->tb != CUBLAS_OP_N || o->ldb != o->ldc));
}

/* Checks, then queues o (owned) on the handle's current stream. */
static cublasStatus_t submit(const char *call, cublasHandle_t h, blas_op *o) {
  struct cublasContext *c = handle_of(call, h);
  cublasStatus_t st = enter_call(call, c->dev);
  if (st == CUBLAS_STATUS_SUCCESS && (bad_sizes(o) || (o->geam && bad_in_place(o))))
    st = CUBLAS_STATUS_INVALID_VALUE;
  if (st != CUBLAS_STATUS_SUCCESS || o->m == 0 || o->n == 0) {
    free(o);
    return st;
  }
  int ar, ac, br, bc;
  shapes(o, &ar, &ac, &br, &bc);
  if (o->geam || o->k > 0) {
    fakecuda_check_device(call, "A", o->a, span(ar, ac, o->lda) * o->es, c->dev);
    fakecuda_check_device(call, "B", o->b, span(br, bc, o->ldb) * o->es, c->dev);
  }
  fakecuda_check_device(call, "C", o->c, span(o->m, o->n, o->ldc) * o->es, c->dev);
  fakecuda_enqueue(call, c->stream, run_blas, o);
  return CUBLAS_STATUS_SUCCESS;
}

static blas_op *new_op(int geam, size_t es, cublasOperation_t ta, cublasOperation_t tb, int m,
                       int n, int k, double alpha, const void *a, int lda, const void *b, int ldb,
                       double beta, void *c, int ldc) {
  blas_op *o = malloc(sizeof *o);
  if (!o)
    fakecuda_misuse(geam ? "cublas?geam" : "cublas?gemm", "out of host memory");
  *o = (blas_op){geam, es, ta, tb, m, n, k, lda, ldb, ldc, alpha, beta, a, b, c};
  return o;
}

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const float *alpha, const float *a, int lda,
                           const float *b, int ldb, const float *beta, float *c, int ldc) {
  return submit("cublasSgemm_v2", h,
                new_op(0, 4, ta, tb, m, n, k, *alpha, a, lda, b, ldb, *beta, c, ldc));
}

cublasStatus_t cublasDgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const double *alpha, const double *a, int lda,
                           const double *b, int ldb, const double *beta, double *c, int ldc) {
  return submit("cublasDgemm_v2", h,
                new_op(0, 8, ta, tb, m, n, k, *alpha, a, lda, b, ldb, *beta, c, ldc));
}

cublasStatus_t cublasSgeam(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, const float *alpha, const float *a, int lda, const float *beta,
                           const float *b, int ldb, float *c, int ldc) {
  return submit("cublasSgeam", h,
                new_op(1, 4, ta, tb, m, n, 0, *alpha, a, lda, b, ldb, *beta, c, ldc));
}

cublasStatus_t cublasDgeam(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, const double *alpha, const double *a, int lda,
                           const double *beta, const double *b, int ldb, double *c, int ldc) {
  return submit("cublasDgeam", h,
                new_op(1, 8, ta, tb, m, n, 0, *alpha, a, lda, b, ldb, *beta, c, ldc));
}

#define FAKE_STATUSES(X)                                                                          \
  X(CUBLAS_STATUS_SUCCESS, "success")                                                             \
  X(CUBLAS_STATUS_NOT_INITIALIZED, "the library was not initialized")                             \
  X(CUBLAS_STATUS_ALLOC_FAILED, "the resource allocation failed")                                 \
  X(CUBLAS_STATUS_INVALID_VALUE, "an invalid numeric value was used as an argument")              \
  X(CUBLAS_STATUS_EXECUTION_FAILED, "the GPU program failed to execute")                          \
  X(CUBLAS_STATUS_INTERNAL_ERROR, "an internal operation failed")                                 \
  X(CUBLAS_STATUS_NOT_SUPPORTED, "the functionality requested is not supported")

const char *cublasGetStatusName(cublasStatus_t st) {
#define FAKE_NAME(name, text)                                                                     \
  if (st == name)                                                                                 \
    return #name;
  FAKE_STATUSES(FAKE_NAME)
#undef FAKE_NAME
  return "CUBLAS_STATUS_UNMODELLED_BY_FAKECUDA";
}

const char *cublasGetStatusString(cublasStatus_t st) {
#define FAKE_TEXT(name, text)                                                                     \
  if (st == name)                                                                                 \
    return text " (fake cuBLAS)";
  FAKE_STATUSES(FAKE_TEXT)
#undef FAKE_TEXT
  return "a status the fake cuBLAS has no text for";
}
