/* driver.c: the two driver calls POAS's CUDA backend loads from
 * libcuda.so.1 (cuCtxGetCurrent, cuCtxSetCurrent), built with that soname
 * over the fake runtime (runtime.c), whose per-thread current device is
 * the current context here: a thread that never chose a device has none,
 * cudaSetDevice(d) makes device d's primary context current, and setting
 * a context makes its device the runtime's current one. */
#include "fakecuda.h"

#include <cuda.h>

CUresult cuCtxGetCurrent(CUcontext *context) {
  *context = fakecuda_context();
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext context) {
  return fakecuda_set_context(context) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}
