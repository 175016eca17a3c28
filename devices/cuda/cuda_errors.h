/* cuda_errors.h: which CUDA runtime errors leave a device unusable for the
 * rest of the process. The runtime documents each of them (driver_types.h,
 * enum cudaError) as leaving "the process in an inconsistent state and any
 * further CUDA work will return the same error. To continue using CUDA,
 * the process must be terminated and relaunched": the device's context is
 * corrupt, and every later call on it fails the same way, so the backend
 * retires the device for good instead of giving it work again (cuda.c).
 * Every other error answers for one call (out of memory, a bad argument, a
 * launch too large) and the device works on after it. Header-only, so that
 * a test can check it with the CUDA headers alone. */
#ifndef POAS_CUDA_ERRORS_H
#define POAS_CUDA_ERRORS_H

#include <driver_types.h>

/* 1 for an error after which the device can do no more work in this
 * process, 0 for any other. The errors newer than some toolkits the
 * backend builds with (CUDA 11.4 has cublasGetStatusName, the newest call
 * it needs) are matched by their number, which the runtime never
 * reassigns. */
static inline int poas__cuda_error_sticky(cudaError_t e) {
  switch ((int)e) {
  case cudaErrorIllegalAddress:
  case cudaErrorLaunchTimeout:
  case cudaErrorAssert:
  case cudaErrorHardwareStackError:
  case cudaErrorIllegalInstruction:
  case cudaErrorMisalignedAddress:
  case cudaErrorInvalidAddressSpace:
  case cudaErrorInvalidPc:
  case cudaErrorLaunchFailure:
  case 226: /* cudaErrorContained: an uncorrectable error contained to the process */
  case 721: /* cudaErrorTensorMemoryLeak: tensor memory left allocated at a kernel's end */
  case 810: /* cudaErrorMpsClientTerminated: the MPS server ended this client */
  case 911: /* cudaErrorExternalDevice: an external device's fault */
    return 1;
  default:
    return 0;
  }
}

#endif /* POAS_CUDA_ERRORS_H */
