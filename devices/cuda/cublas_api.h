/* cublas_api.h: cuBLAS, loaded when the first CUDA device opens instead of
 * when the process starts. Linked in, libcublas (with the libcublasLt it
 * pulls in) cost every process that loaded libpoas 216 MB of resident
 * memory and 0.06-0.11 s before main on the CI machine, GPU or not: a
 * CPU-only run, and each MPI rank of a CPU node, paid it. The CUDA runtime
 * (1.6 MB) stays linked; it is what tells whether there is a GPU at all.
 *
 * poas__cublas holds one pointer per cuBLAS call the backend makes, typed
 * from cublas_v2.h's own declarations, so every call through it is checked
 * by the compiler as a direct call would be. Built only with the backend. */
#ifndef POAS_CUBLAS_API_H
#define POAS_CUBLAS_API_H

#include <stddef.h>

#include <cublas_v2.h>

/* X(name) for each cuBLAS function the backend calls; the name is the one
 * cublas_v2.h declares (some are macros for their _v2 symbols). */
#define POAS__CUBLAS_CALLS(X)                                                                     \
  X(cublasCreate)                                                                                 \
  X(cublasDestroy)                                                                                \
  X(cublasGetVersion)                                                                             \
  X(cublasSetMathMode)                                                                            \
  X(cublasGetStream)                                                                              \
  X(cublasSetStream)                                                                              \
  X(cublasSgemm)                                                                                  \
  X(cublasDgemm)                                                                                  \
  X(cublasSgeam)                                                                                  \
  X(cublasDgeam)                                                                                  \
  X(cublasGetStatusName)                                                                          \
  X(cublasGetStatusString)

#define POAS__CUBLAS_POINTER(name) __typeof__(name) *name;
typedef struct poas__cublas_api {
  POAS__CUBLAS_CALLS(POAS__CUBLAS_POINTER)
} poas__cublas_api;
#undef POAS__CUBLAS_POINTER

/* The loaded calls: valid after poas__cublas_load returned 0. */
extern poas__cublas_api poas__cublas;

/* Loads cuBLAS once per process (later calls return the first one's
 * result): the library by its soname (found as the dynamic linker finds
 * any: LD_LIBRARY_PATH, the caller's run path, the system's cache), else
 * by the path configure found it at, and then every call above. Returns
 * 0, or POAS_EDEVICE with what failed in err. */
int poas__cublas_load(char *err, size_t errcap);

/* Fills *api from lib, a library dlopen loaded by the name `loaded_as`:
 * poas__cublas_load's second step, apart for tests. Returns 0, or
 * POAS_EDEVICE with *api zeroed and, in err, the first call lib lacks, the
 * name it was loaded by and the file it was loaded from. */
int poas__cublas_resolve(void *lib, const char *loaded_as, poas__cublas_api *api, char *err,
                         size_t errcap);

#endif /* POAS_CUBLAS_API_H */
