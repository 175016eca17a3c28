/* cuda-transfer: what host memory costs a GPU pipeline, measured on the
 * first GPU (not a test: it times things). For a few sizes it reports
 *   - H2D and D2H bandwidth from pageable (malloc) and page-locked
 *     (cudaMallocHost) memory;
 *   - the time cudaHostRegister and cudaHostUnregister take on pageable
 *     memory that is already touched, as GB/s of registered memory;
 *   - how long the host is held by cudaMemcpyAsync from and to pageable
 *     memory (a copy that blocks the issuing thread stalls a pipeline);
 *   - a single host thread's memcpy bandwidth (staging through a
 *     page-locked bounce buffer costs one such copy);
 *   - H2D and D2H bandwidth of a pitched block from pageable memory (the
 *     same bytes as 4096 columns of half a matrix twice as wide, which is
 *     what a row block of a column-major operand is), through
 *     cudaMemcpy2D.
 * Each figure is the median of 5 runs after a warm-up.
 *   bench/cuda-transfer [MiB ...]   (default 16 64 256; at most 8 sizes,
 *                                     each 1 to 65536)
 *   bench/cuda-transfer --help      (or -h: the usage text)
 *   bench/cuda-transfer --version   (or -V; the package's, as it links
 *                                     nothing of POAS) */
#include "config.h"

#include "bench/cli.h"
#include "bench/timing.h"
#include "tools/stdout-check.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REPS 5
#define MAX_SIZES 8
#define MAX_MIB 65536

#define CK(call)                                                                \
  do {                                                                          \
    cudaError_t e_ = (call);                                                    \
    if (e_ != cudaSuccess) {                                                    \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,             \
              cudaGetErrorString(e_));                                          \
      exit(1);                                                                  \
    }                                                                           \
  } while (0)

/* Seconds for one synchronous copy of `bytes`, median of REPS. */
static double copy_s(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
  double t[REPS];
  CK(cudaMemcpy(dst, src, bytes, kind));
  for (int r = 0; r < REPS; r++) {
    double t0 = bench_now();
    CK(cudaMemcpy(dst, src, bytes, kind));
    t[r] = bench_now() - t0;
  }
  return bench_median(t, REPS);
}

/* Seconds for one synchronous pitched copy, median of REPS. */
static double copy2d_s(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                       size_t rows, enum cudaMemcpyKind kind) {
  double t[REPS];
  CK(cudaMemcpy2D(dst, dpitch, src, spitch, width, rows, kind));
  for (int r = 0; r < REPS; r++) {
    double t0 = bench_now();
    CK(cudaMemcpy2D(dst, dpitch, src, spitch, width, rows, kind));
    t[r] = bench_now() - t0;
  }
  return bench_median(t, REPS);
}

/* Seconds the host spends inside cudaMemcpyAsync (issue time), median. */
static double async_issue_s(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t st) {
  double t[REPS];
  for (int r = 0; r < REPS; r++) {
    CK(cudaStreamSynchronize(st));
    double t0 = bench_now();
    CK(cudaMemcpyAsync(dst, src, bytes, kind, st));
    t[r] = bench_now() - t0;
    CK(cudaStreamSynchronize(st));
  }
  return bench_median(t, REPS);
}

static void usage(FILE *f) {
  fprintf(f,
          "Usage: cuda-transfer [MiB ...]\n"
          "Measure host-device copy rates from pageable and page-locked memory, the cost\n"
          "of cudaHostRegister, and how long async copies hold the host, on the first GPU.\n\n"
          "  MiB         sizes to measure, up to %d of them, each 1 to %d\n"
          "              (default 16 64 256)\n"
          "  -h, --help     show this help\n"
          "  -V, --version  show the version\n",
          MAX_SIZES, MAX_MIB);
}

static int bad(const char *what, const char *value) {
  return bench_bad_arg("cuda-transfer", what, value);
}

int main(int argc, char **argv) {
  size_t mib[MAX_SIZES] = {16, 64, 256};
  int nsizes = 3;
  tool_std_ready();
  for (int i = 1; i < argc; i++) {
    if (bench_is_help(argv[i])) {
      usage(stdout);
      return tool_stdout_status("cuda-transfer", 0);
    }
    if (bench_is_version(argv[i])) {
      printf("cuda-transfer (POAS) %s\n", PACKAGE_VERSION);
      return tool_stdout_status("cuda-transfer", 0);
    }
  }
  if (argc > 1) {
    nsizes = 0;
    for (int i = 1; i < argc; i++) {
      const char *a = argv[i];
      long v;
      if (bench_is_option(a))
        return bad("option", a);
      if (bench_parse_long(a, 1, MAX_MIB, &v))
        return bad("size in MiB (1 to " BENCH_XSTR(MAX_MIB) ")", a);
      if (nsizes == MAX_SIZES)
        return bad("argument (at most " BENCH_XSTR(MAX_SIZES) " sizes)", a);
      mib[nsizes++] = (size_t)v;
    }
  }
  struct cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("GPU: %s\n", prop.name);
  printf("%8s %9s %9s %9s %9s %9s %9s %10s %10s %9s %9s %9s\n", "MiB", "h2d-page", "d2h-page",
         "h2d-pin", "d2h-pin", "register", "unreg", "h2dA-hold", "d2hA-hold", "memcpy",
         "h2d-2d", "d2h-2d");
  printf("%8s %9s %9s %9s %9s %9s %9s %10s %10s %9s %9s %9s\n", "", "GB/s", "GB/s", "GB/s",
         "GB/s", "GB/s", "GB/s", "ms", "ms", "GB/s", "GB/s", "GB/s");
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  for (int s = 0; s < nsizes; s++) {
    size_t bytes = mib[s] << 20;
    char *page = malloc(bytes), *page2 = malloc(bytes), *wide = malloc(2 * bytes), *pin, *dev;
    if (!page || !page2 || !wide) {
      fprintf(stderr, "cuda-transfer: out of host memory\n");
      return 1;
    }
    memset(page, 1, bytes);
    memset(page2, 2, bytes);
    memset(wide, 4, 2 * bytes);
    CK(cudaMallocHost((void **)&pin, bytes));
    memset(pin, 3, bytes);
    CK(cudaMalloc((void **)&dev, bytes));
    double gb = (double)bytes / 1e9;
    double h2d_page = copy_s(dev, page, bytes, cudaMemcpyHostToDevice);
    double d2h_page = copy_s(page, dev, bytes, cudaMemcpyDeviceToHost);
    double h2d_pin = copy_s(dev, pin, bytes, cudaMemcpyHostToDevice);
    double d2h_pin = copy_s(pin, dev, bytes, cudaMemcpyDeviceToHost);
    double treg[REPS], tunreg[REPS], tmem[REPS];
    for (int r = 0; r < REPS; r++) {
      double t0 = bench_now();
      CK(cudaHostRegister(page2, bytes, cudaHostRegisterPortable));
      double t1 = bench_now();
      CK(cudaHostUnregister(page2));
      treg[r] = t1 - t0;
      tunreg[r] = bench_now() - t1;
      t0 = bench_now();
      memcpy(page2, page, bytes);
      tmem[r] = bench_now() - t0;
    }
    const size_t cols = 4096, width = bytes / cols;
    double h2d_2d = copy2d_s(dev, width, wide, 2 * width, width, cols, cudaMemcpyHostToDevice);
    double d2h_2d = copy2d_s(wide, 2 * width, dev, width, width, cols, cudaMemcpyDeviceToHost);
    double hold_h2d = async_issue_s(dev, page, bytes, cudaMemcpyHostToDevice, st);
    double hold_d2h = async_issue_s(page, dev, bytes, cudaMemcpyDeviceToHost, st);
    printf("%8zu %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %10.3f %10.3f %9.2f %9.2f %9.2f\n", mib[s],
           gb / h2d_page, gb / d2h_page, gb / h2d_pin, gb / d2h_pin, gb / bench_median(treg, REPS),
           gb / bench_median(tunreg, REPS), 1e3 * hold_h2d, 1e3 * hold_d2h,
           gb / bench_median(tmem, REPS), gb / h2d_2d, gb / d2h_2d);
    CK(cudaFree(dev));
    CK(cudaFreeHost(pin));
    free(page);
    free(page2);
    free(wide);
  }
  CK(cudaStreamDestroy(st));
  return tool_stdout_status("cuda-transfer", 0);
}
