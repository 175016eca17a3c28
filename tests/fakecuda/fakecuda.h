/* fakecuda.h: what the fake CUDA runtime (runtime.c, built as libcudart
 * with the real soname) offers the fake cuBLAS (cublas.c) and the fake
 * driver (driver.c) beside the CUDA API: the thread's current device, the
 * device-memory registry's checks, stream queues and failure injection.
 * The fakes run the real CUDA backend of POAS in host memory for logic
 * tests (tests/test-cuda-fake.sh); nothing here models GPU speed. */
#ifndef FAKECUDA_H
#define FAKECUDA_H

#include <cuda_runtime_api.h>
#include <stddef.h>

/* Prints "fakecuda: call: ..." and aborts: a misuse of the API is a bug
 * the test must not pass over. */
_Noreturn void fakecuda_misuse(const char *call, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The calling thread's current device, making device 0 current where it
 * had none, as the runtime's implicit context creation does. */
int fakecuda_device_here(void);

/* The driver's view: the thread's current context (NULL for none), and
 * making one current (NULL for none). fakecuda_set_context returns 0, or
 * -1 for a pointer that is no fake context. */
void *fakecuda_context(void);
int fakecuda_set_context(void *context);

/* The device of a live stream (NULL: the current device's default
 * stream); aborts on anything else. */
int fakecuda_stream_device(const char *call, cudaStream_t stream);

/* Aborts unless [p, p + extent) lies inside one live cudaMalloc block of
 * device dev. `what` names the argument in the message. */
void fakecuda_check_device(const char *call, const char *what, const void *p, size_t extent,
                           int dev);

/* Queues fn(arg) on the stream, run in order by the stream's worker
 * thread; fn owns arg. */
void fakecuda_enqueue(const char *call, cudaStream_t stream, void (*fn)(void *), void *arg);

/* The error the device's context met (cudaSuccess for none): after a
 * sticky error every call on the context returns it, as on a GPU. */
cudaError_t fakecuda_lost(int dev);

/* Whether FAKECUDA_FAIL (name:N[:code], comma-separated) makes this call
 * of `name` fail, with *code set to the code to return (unchanged where
 * the entry gave none). The runtime's callers lose the device on a sticky
 * code, as any sticky error does. */
int fakecuda_injected(const char *name, int *code);

#endif /* FAKECUDA_H */
