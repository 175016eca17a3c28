/* test-cuda-discovery.c: finding CUDA devices, in every build and on every
 * machine: the count is the same each time it is asked (nothing wrongly
 * cached after a failed driver call), asking for a CUDA device where there
 * is none is POAS_ENODEV with a message, the default selection still
 * opens the CPU whether or not a GPU is there, and cuBLAS is loaded only
 * once a CUDA device opens; and, where the backend is built, what needs
 * no GPU to check: which runtime errors retire a device for good, and
 * what a cuBLAS missing a call is reported as. */
#include "devices/device.h"
#include "harness.h"

#if POAS_HAVE_CUDA
#include "devices/cuda/cublas_api.h"
#include "devices/cuda/cuda_errors.h"

#include <dlfcn.h>
#endif

#include <stdio.h>
#include <string.h>

TEST(cuda_count_is_stable) {
  int n = poas__backend_cuda.count();
  CHECK(n >= 0);
  CHECK(poas__backend_cuda.count() == n);
  CHECK(poas__backend_cuda.count() == n);
  if (!poas__backend_cuda.built)
    CHECK(n == 0);
  fprintf(stderr, "  %d CUDA device%s (backend %s)\n", n, n == 1 ? "" : "s",
          poas__backend_cuda.built ? "built" : "not built");
  return 0;
}

static int init_rc(const char *devices, poas_context **ctx) {
  poas_options o;
  poas_options_init(&o);
  o.devices = devices;
  o.no_profile = 1;
  return poas_init(ctx, &o);
}

TEST(cuda_absent_is_enodev_with_detail) {
  if (poas__backend_cuda.count() > 0)
    SKIP("a CUDA device is present");
  static const char *const sels[] = {"cuda", "cuda0", "cuda1"};
  for (size_t i = 0; i < sizeof sels / sizeof *sels; i++) {
    poas_context *ctx = NULL;
    CHECK_RC(init_rc(sels[i], &ctx), POAS_ENODEV);
    CHECK(ctx == NULL);
    CHECK_MSG(strstr(poas_error_detail(), "cuda") != NULL, "'%s' gave '%s'", sels[i],
              poas_error_detail());
  }
  /* A failed lookup leaves nothing behind: the count is still zero. */
  CHECK(poas__backend_cuda.count() == 0);
  return 0;
}

TEST(default_selection_opens_cpu0) {
  poas_context *ctx = NULL;
  CHECK_OK(init_rc(NULL, &ctx));
  int n = poas_device_count(ctx), ncuda = 0, has_cpu = 0;
  for (int i = 0; i < n; i++) {
    poas_device_info info;
    CHECK_OK(poas_device_get(ctx, i, &info));
    has_cpu |= strcmp(info.id, "cpu0") == 0;
    ncuda += info.kind == POAS_DEVICE_CUDA;
  }
  CHECK(has_cpu);
  CHECK(ncuda == poas__backend_cuda.count());
  float a = 2, b = 3, c = 0;
  CHECK_OK(poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 1, 1, 1, 1, &a, 1, &b, 1,
                      0, &c, 1));
  CHECK(c == 6);
  poas_finalize(ctx);
  return 0;
}

/* Whether the process has libcublas mapped; -1 where it cannot tell. */
static int cublas_mapped(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f)
    return -1;
  char line[1024];
  int found = 0;
  while (fgets(line, sizeof line, f))
    found |= strstr(line, "/libcublas.so") != NULL;
  fclose(f);
  return found;
}

/* cuBLAS costs a process hundreds of MB at load (devices/cuda/cublas_api.h):
 * opening every device and running a GEMM loads it only where a CUDA
 * device opened. Where the backend is built, the loader then finds every
 * call it names, GPU or not, and they are cuBLAS's own. Runs after the
 * tests above, which would load it too where there is a GPU. */
TEST(cublas_is_loaded_only_for_a_cuda_device) {
  int before = cublas_mapped();
  if (before < 0)
    SKIP("no /proc/self/maps to tell what is loaded");
  int ncuda = poas__backend_cuda.count();
  CHECK_MSG(before == 0 || ncuda > 0, "cuBLAS was loaded before any CUDA device opened");
  poas_context *ctx = NULL;
  CHECK_OK(init_rc(NULL, &ctx));
  double a = 2, b = 3, c = 0;
  CHECK_OK(poas_dgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 1, 1, 1, 1, &a, 1, &b, 1,
                      0, &c, 1));
  CHECK(c == 6);
  CHECK_MSG(cublas_mapped() == (ncuda > 0), "cuBLAS %s with %d CUDA devices",
            cublas_mapped() ? "loaded" : "not loaded", ncuda);
  poas_finalize(ctx);
#if POAS_HAVE_CUDA
  char err[512];
  CHECK_MSG(poas__cublas_load(err, sizeof err) == 0, "%s", err);
  CHECK(cublas_mapped() == 1);
#define CHECK_RESOLVED(name) CHECK_MSG(poas__cublas.name != NULL, "%s not resolved", #name);
  POAS__CUBLAS_CALLS(CHECK_RESOLVED)
#undef CHECK_RESOLVED
  const char *name = poas__cublas.cublasGetStatusName(CUBLAS_STATUS_NOT_INITIALIZED);
  CHECK_MSG(name && strcmp(name, "CUBLAS_STATUS_NOT_INITIALIZED") == 0, "'%s'",
            name ? name : "(null)");
  /* Loaded once: a second call changes nothing. */
  CHECK(poas__cublas_load(NULL, 0) == 0);
#endif
  return 0;
}

/* The errors the runtime documents as corrupting the context
 * (driver_types.h: "the process must be terminated and relaunched") retire
 * a device; errors that answer one call leave it in use. */
TEST(sticky_cuda_errors_are_the_documented_ones) {
#if POAS_HAVE_CUDA
  static const struct {
    cudaError_t e;
    int sticky;
  } cases[] = {
      {cudaErrorIllegalAddress, 1},     {cudaErrorLaunchFailure, 1},
      {cudaErrorLaunchTimeout, 1},      {cudaErrorAssert, 1},
      {cudaErrorHardwareStackError, 1}, {cudaErrorIllegalInstruction, 1},
      {cudaErrorMisalignedAddress, 1},  {cudaErrorInvalidAddressSpace, 1},
      {cudaErrorInvalidPc, 1},          {(cudaError_t)226, 1}, /* cudaErrorContained */
      {(cudaError_t)721, 1},            /* cudaErrorTensorMemoryLeak */
      {(cudaError_t)810, 1},            /* cudaErrorMpsClientTerminated */
      {(cudaError_t)911, 1},            /* cudaErrorExternalDevice */
      {cudaSuccess, 0},                 {cudaErrorMemoryAllocation, 0},
      {cudaErrorInvalidValue, 0},       {cudaErrorNotReady, 0},
      {cudaErrorInvalidResourceHandle, 0}, {cudaErrorLaunchOutOfResources, 0},
      {cudaErrorNoDevice, 0},           {cudaErrorInsufficientDriver, 0},
      {cudaErrorHostMemoryAlreadyRegistered, 0}, {cudaErrorNotSupported, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    CHECK_MSG(poas__cuda_error_sticky(cases[i].e) == cases[i].sticky, "%s (%d): sticky %d",
              cudaGetErrorName(cases[i].e), (int)cases[i].e, !cases[i].sticky);
  return 0;
#else
  SKIP("the CUDA backend is not built");
#endif
}

/* A library that lacks a call the backend needs is refused with the call,
 * the name it was loaded by and the file it came from, and no pointer
 * from it is kept: libm stands for a cuBLAS too old. */
TEST(cublas_missing_a_call_names_it_and_the_file) {
#if POAS_HAVE_CUDA
  void *lib = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    SKIP("no libm.so.6 to stand for an old cuBLAS");
  poas__cublas_api api;
  memset(&api, 0xA5, sizeof api);
  char err[512] = "";
  CHECK_RC(poas__cublas_resolve(lib, "libm.so.6", &api, err, sizeof err), POAS_EDEVICE);
  CHECK_MSG(strstr(err, "cublasCreate_v2") && strstr(err, "libm.so.6 (/"), "'%s'", err);
  poas__cublas_api zero;
  memset(&zero, 0, sizeof zero);
  CHECK(memcmp(&api, &zero, sizeof api) == 0);
  dlclose(lib);
  return 0;
#else
  SKIP("the CUDA backend is not built");
#endif
}

TEST_MAIN(TEST_ENTRY(cuda_count_is_stable), TEST_ENTRY(sticky_cuda_errors_are_the_documented_ones),
          TEST_ENTRY(cublas_missing_a_call_names_it_and_the_file),
          TEST_ENTRY(cuda_absent_is_enodev_with_detail),
          TEST_ENTRY(default_selection_opens_cpu0),
          TEST_ENTRY(cublas_is_loaded_only_for_a_cuda_device))
