/* baseline-clblast.c: CLBlast alone on the first OpenCL device (the first
 * device of the first platform that has one), through its C API with its
 * own context and queue. Operands start and end in host memory: each run
 * writes A and B with blocking writes, multiplies, and reads C back with a
 * blocking read, all inside the timed call. Device buffers are kept between
 * runs and only grown, as a program that calls CLBlast in a loop would. */
#define CL_TARGET_OPENCL_VERSION 120
#include "config.h"

#include "bench/bench.h"

#include <CL/cl.h>
#include <clblast_c.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct clblast_state {
  cl_context context;
  cl_command_queue queue;
  cl_device_id device;
  int has_double;
  cl_mem buf[3]; /* A, B, C */
  size_t cap[3];
} clblast_state;

static int first_device(cl_device_id *out) {
  cl_platform_id platforms[16];
  cl_uint np = 0;
  if (clGetPlatformIDs(16, platforms, &np) != CL_SUCCESS)
    return -1;
  for (cl_uint i = 0; i < np && i < 16; i++) {
    cl_uint nd = 0;
    if (clGetDeviceIDs(platforms[i], CL_DEVICE_TYPE_ALL, 1, out, &nd) == CL_SUCCESS && nd > 0)
      return 0;
  }
  return -1;
}

static int clblast_open(void **state, char *desc, size_t cap) {
  clblast_state *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(desc, cap, "out of memory");
    return BENCH_FAILED;
  }
  if (first_device(&s->device) != 0) {
    snprintf(desc, cap, "no OpenCL device");
    free(s);
    return BENCH_UNSUPPORTED;
  }
  cl_int err;
  s->context = clCreateContext(NULL, 1, &s->device, NULL, NULL, &err);
  if (err == CL_SUCCESS)
    s->queue = clCreateCommandQueue(s->context, s->device, 0, &err);
  if (err != CL_SUCCESS) {
    snprintf(desc, cap, "OpenCL context or queue creation failed (%d)", (int)err);
    if (s->context)
      clReleaseContext(s->context);
    free(s);
    return BENCH_FAILED;
  }
  char name[128] = "";
  clGetDeviceInfo(s->device, CL_DEVICE_NAME, sizeof name, name, NULL);
  cl_device_fp_config fp64 = 0;
  clGetDeviceInfo(s->device, CL_DEVICE_DOUBLE_FP_CONFIG, sizeof fp64, &fp64, NULL);
  s->has_double = fp64 != 0;
  snprintf(desc, cap, "CLBlast on %s", name);
  *state = s;
  return 0;
}

/* Makes buffer i hold at least `bytes`. */
static cl_int ensure(clblast_state *s, int i, size_t bytes) {
  if (s->cap[i] >= bytes)
    return CL_SUCCESS;
  if (s->buf[i])
    clReleaseMemObject(s->buf[i]);
  s->cap[i] = 0;
  cl_int err;
  s->buf[i] = clCreateBuffer(s->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
  if (err != CL_SUCCESS) {
    s->buf[i] = NULL;
    return err;
  }
  s->cap[i] = bytes;
  return CL_SUCCESS;
}

static CLBlastStatusCode multiply(clblast_state *s, const bench_problem *p) {
  size_t m = (size_t)p->m, n = (size_t)p->n, k = (size_t)p->k;
  cl_event ev = NULL;
  CLBlastStatusCode st;
  if (p->dtype == POAS_FLOAT64)
    st = CLBlastDgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo, m, n, k, 1.0,
                      s->buf[0], 0, k, s->buf[1], 0, n, 0.0, s->buf[2], 0, n, &s->queue, &ev);
  else
    st = CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo, m, n, k,
                      1.0f, s->buf[0], 0, k, s->buf[1], 0, n, 0.0f, s->buf[2], 0, n, &s->queue,
                      &ev);
  if (st == CLBlastSuccess && ev) {
    clWaitForEvents(1, &ev);
    clReleaseEvent(ev);
  }
  return st;
}

static int clblast_gemm(void *state, const bench_problem *p, char *why, size_t cap) {
  clblast_state *s = state;
  if (p->dtype == POAS_FLOAT64 && !s->has_double) {
    snprintf(why, cap, "the device has no double precision");
    return BENCH_UNSUPPORTED;
  }
  size_t es = bench_dtype_size(p->dtype);
  size_t bytes[3] = {(size_t)(p->m * p->k) * es, (size_t)(p->k * p->n) * es,
                     (size_t)(p->m * p->n) * es};
  cl_int err = CL_SUCCESS;
  for (int i = 0; i < 3 && err == CL_SUCCESS; i++)
    err = ensure(s, i, bytes[i]);
  if (err == CL_SUCCESS)
    err = clEnqueueWriteBuffer(s->queue, s->buf[0], CL_TRUE, 0, bytes[0], p->a, 0, NULL, NULL);
  if (err == CL_SUCCESS)
    err = clEnqueueWriteBuffer(s->queue, s->buf[1], CL_TRUE, 0, bytes[1], p->b, 0, NULL, NULL);
  if (err != CL_SUCCESS) {
    snprintf(why, cap, "OpenCL allocation or write failed (%d)", (int)err);
    return BENCH_FAILED;
  }
  CLBlastStatusCode st = multiply(s, p);
  if (st != CLBlastSuccess) {
    snprintf(why, cap, "CLBlast gemm failed (status %d)", (int)st);
    return BENCH_FAILED;
  }
  err = clEnqueueReadBuffer(s->queue, s->buf[2], CL_TRUE, 0, bytes[2], p->c, 0, NULL, NULL);
  if (err != CL_SUCCESS) {
    snprintf(why, cap, "OpenCL read failed (%d)", (int)err);
    return BENCH_FAILED;
  }
  return 0;
}

static void clblast_close(void *state) {
  clblast_state *s = state;
  for (int i = 2; i >= 0; i--)
    if (s->buf[i])
      clReleaseMemObject(s->buf[i]);
  clReleaseCommandQueue(s->queue);
  clReleaseContext(s->context);
  free(s);
}

const bench_baseline bench_baseline_clblast = {
    .name = "clblast", .open = clblast_open, .gemm = clblast_gemm, .close = clblast_close,
    .copies = 1};
