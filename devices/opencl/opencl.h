/* opencl.h: the OpenCL backend's pure rules, apart from the driver calls
 * that feed them, so that tests can hold them to numbers no device here
 * reports (devices/opencl/opencl.c; built only under HAVE_OPENCL). */
#ifndef POAS_OPENCL_H
#define POAS_OPENCL_H

#include "devices/device.h"

#include <CL/cl.h>
#include <stdint.h>

/* A string query of a device (CL_DEVICE_NAME, CL_DRIVER_VERSION...) into
 * buf, cut to fit; empty when it cannot be read. */
void poas__ocl_device_string(cl_device_id d, cl_device_info what, char *buf, size_t cap);
/* The same for a platform (CL_PLATFORM_NAME...). */
void poas__ocl_platform_string(cl_platform_id p, cl_platform_info what, char *buf, size_t cap);

/* Whether a device computes in double precision, from its extension list
 * (CL_DEVICE_EXTENSIONS, space-separated; NULL when it could not be read)
 * and its CL_DEVICE_DOUBLE_FP_CONFIG: either one saying so is enough. */
int poas__ocl_has_fp64(const char *extensions, uint64_t double_fp_config);

/* The clock a peak estimate uses for a device reporting `reported_mhz` as
 * CL_DEVICE_MAX_CLOCK_FREQUENCY: that, or POAS__OCL_NOMINAL_MHZ where it
 * reads 0. */
#define POAS__OCL_NOMINAL_MHZ 1000u
unsigned poas__ocl_clock_mhz(unsigned reported_mhz);

/* CLBlast's limit on the elements of one GEMM operand, and the block its
 * kernels pad each side of an operand to (see opencl.c); an open device
 * takes them as gemm_max_elems and gemm_index_pad. Tests lower the limit,
 * before opening a device, to reach it with small matrices. */
extern int64_t poas__ocl_index_max;
#define POAS__OCL_INDEX_PAD 128

/* 0, or a largest buffer (bytes) below the device's own
 * CL_DEVICE_MAX_MEM_ALLOC_SIZE that a device opened after it is set
 * takes instead, refusing allocations past it and telling plans so
 * (max_buffer_bytes): tests set it to reach the limit with small
 * matrices. */
extern uint64_t poas__ocl_buffer_max;

/* 0, or a memory size (bytes) below the device's own
 * CL_DEVICE_GLOBAL_MEM_SIZE that a device opened after it is set reports
 * and reserves within, in every context together: tests set it to fill
 * the device with small buffers. */
extern uint64_t poas__ocl_memory_max;

/* Whether every operand of a GEMM call stays within `max` elements (an
 * operand CLBlast does not read, A and B when k or alpha is 0, is not
 * counted). */
int poas__ocl_gemm_fits(const poas__gemm_call *g, int64_t max);
/* The same for a transpose's source and destination. */
int poas__ocl_transpose_fits(const poas__transpose_call *t, int64_t max);

#endif /* POAS_OPENCL_H */
