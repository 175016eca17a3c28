/* opencl.c: OpenCL devices as POAS devices, with GEMM through CLBlast.
 * Every device of every platform is one device, in platform order then
 * device order. An open device has one context and four in-order command
 * queues, a session taken from a process-wide pool (ocl_session): lanes 0
 * (host to device), 1 (compute) and 2 (device to host), and a private
 * queue on which mem_alloc touches new buffers so that a lazy
 * implementation fails at allocation time rather than in the middle of a
 * schedule. Events are OpenCL markers; a lane waits on one with a barrier,
 * never on the host. */
#include "config.h"

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif

#include "devices/opencl/opencl.h"

#include <CL/cl.h>
#include <clblast_c.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OCL_LANES 3
#define OCL_ALLOC_QUEUE OCL_LANES

/* What an open device computes through: its context and queues, on the
 * device or on a sub-device of `cores` compute units. Sessions are never
 * released, only handed back to a process-wide pool when their device
 * closes and taken again by the next open of the same device and cores.
 * PoCL 3.1's pthread driver drops its own reference to a finished
 * command's event after clFinish has returned: releasing the queues and
 * the context at close let that late release read freed memory (a worker
 * thread died in POclReleaseEvent while the next test opened the device,
 * 2 times in about 360 runs of test-gemm-opencl under load). CLBlast's
 * compiled programs, which it caches per context, then stay valid too. */
typedef struct ocl_session {
  cl_device_id parent;      /* the device as enumerated */
  int cores;                /* of a sub-device; 0: the whole device */
  cl_device_id subdevice;   /* created for cores, else NULL */
  cl_context ctx;
  cl_command_queue queue[OCL_LANES + 1];
  int in_use;
  struct ocl_session *next;
} ocl_session;

/* CLBlast's indirect GEMM copies the operands that are not in its kernel's
 * layout into a temporary buffer. Left to itself it creates one per call
 * and releases it as the call returns, but OpenCL keeps a buffer until the
 * kernels that use it have run, and PoCL 3.1 backs it as soon as the call
 * is queued: 16 1000^3 sgemms queued behind an unfinished event held 16
 * of their 12 MiB buffers at once (VmData), and resident once they ran.
 * The engine queues every GEMM of a device's open chunks before the first
 * completes (the 16 tiles of a 4096^3 sgemm on opencl0 at once), so a
 * buffer per call was as many scratches as tiles where plans count one.
 * A lane keeps one instead, which every call queued on it takes in turn
 * (an in-order queue runs them one after the other); see lane_scratch. */
typedef struct ocl_scratch {
  pthread_mutex_t lock; /* held across a call: another call's copies in
                           between would overwrite its own */
  poas__mem mem;        /* NULL: none held */
  size_t bytes;
} ocl_scratch;

/* The bytes reserved on one device as enumerated, by every context of the
 * process that opened it, whole or as a sub-device of cores=N (the
 * parent's memory): OpenCL tells no free memory, so this count is what
 * stands for it. Counted per context, two contexts on opencl0 (21 GiB)
 * could each reserve 21 GiB, and what one context held was free to every
 * other one's plan; a real OpenCL GPU then fails the buffer late, at its
 * first use (CL_MEM_OBJECT_ALLOCATION_FAILURE on an enqueue). Never
 * freed, like the sessions. */
typedef struct ocl_memory {
  cl_device_id parent;
  uint64_t reserved; /* guarded by memory_lock: live and parked buffers */
  struct ocl_memory *next;
} ocl_memory;

/* Innermost: the memcache may hold its list of shared caches' lock around
 * mem_free (releasing another context's parked buffers), which takes it. */
static pthread_mutex_t memory_lock = PTHREAD_MUTEX_INITIALIZER;
static ocl_memory *memories; /* guarded by memory_lock */

typedef struct ocl_state {
  poas__device dev;
  cl_device_id device;          /* the one computing: a sub-device for cores=N */
  ocl_session *session;         /* its context and queues */
  ocl_memory *memory;           /* its device's, shared with other contexts */
  uint64_t max_alloc;
  int has_fp64;
  int block;                    /* block=N as given: 0 none, -1 not given */
  ocl_scratch scratch[OCL_LANES];
} ocl_state;

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static ocl_session *pool; /* guarded by pool_lock */

/* ---------------------------------------------------------------- errors */

static const char *status_name(int code) {
  static const struct {
    int code;
    const char *name;
  } names[] = {
      {CL_DEVICE_NOT_FOUND, "CL_DEVICE_NOT_FOUND"},
      {CL_DEVICE_NOT_AVAILABLE, "CL_DEVICE_NOT_AVAILABLE"},
      {CL_MEM_OBJECT_ALLOCATION_FAILURE, "CL_MEM_OBJECT_ALLOCATION_FAILURE"},
      {CL_OUT_OF_RESOURCES, "CL_OUT_OF_RESOURCES"},
      {CL_OUT_OF_HOST_MEMORY, "CL_OUT_OF_HOST_MEMORY"},
      {CL_BUILD_PROGRAM_FAILURE, "CL_BUILD_PROGRAM_FAILURE"},
      {CL_INVALID_VALUE, "CL_INVALID_VALUE"},
      {CL_INVALID_DEVICE, "CL_INVALID_DEVICE"},
      {CL_INVALID_CONTEXT, "CL_INVALID_CONTEXT"},
      {CL_INVALID_COMMAND_QUEUE, "CL_INVALID_COMMAND_QUEUE"},
      {CL_INVALID_MEM_OBJECT, "CL_INVALID_MEM_OBJECT"},
      {CL_INVALID_EVENT, "CL_INVALID_EVENT"},
      {CL_INVALID_OPERATION, "CL_INVALID_OPERATION"},
      {CL_INVALID_BUFFER_SIZE, "CL_INVALID_BUFFER_SIZE"},
      {CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST,
       "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST"},
      {CLBlastNotImplemented, "CLBlastNotImplemented"},
      {CLBlastInvalidMatrixA, "CLBlastInvalidMatrixA"},
      {CLBlastInvalidMatrixB, "CLBlastInvalidMatrixB"},
      {CLBlastInvalidMatrixC, "CLBlastInvalidMatrixC"},
      {CLBlastInvalidDimension, "CLBlastInvalidDimension"},
      {CLBlastInvalidLeadDimA, "CLBlastInvalidLeadDimA"},
      {CLBlastInvalidLeadDimB, "CLBlastInvalidLeadDimB"},
      {CLBlastInvalidLeadDimC, "CLBlastInvalidLeadDimC"},
      {CLBlastInsufficientMemoryA, "CLBlastInsufficientMemoryA"},
      {CLBlastInsufficientMemoryB, "CLBlastInsufficientMemoryB"},
      {CLBlastInsufficientMemoryC, "CLBlastInsufficientMemoryC"},
      {CLBlastInsufficientMemoryTemp, "CLBlastInsufficientMemoryTemp"},
      {CLBlastInvalidLocalMemUsage, "CLBlastInvalidLocalMemUsage"},
      {CLBlastNoDoublePrecision, "CLBlastNoDoublePrecision"},
      {CLBlastDatabaseError, "CLBlastDatabaseError"},
      {CLBlastUnknownError, "CLBlastUnknownError"},
      {CLBlastUnexpectedError, "CLBlastUnexpectedError"},
  };
  for (size_t i = 0; i < POAS__ARRAY_LEN(names); i++)
    if (names[i].code == code)
      return names[i].name;
  return "error";
}

static int cl_fail(const poas__device *dev, const char *call, cl_int code) {
  return poas__fail(POAS_EDEVICE, "%s: %s failed: %s (%d)", dev->info.id, call,
                    status_name(code), (int)code);
}

static int is_out_of_memory(cl_int code) {
  return code == CL_MEM_OBJECT_ALLOCATION_FAILURE || code == CL_OUT_OF_RESOURCES ||
         code == CL_OUT_OF_HOST_MEMORY || code == CL_INVALID_BUFFER_SIZE;
}

/* ------------------------------------------------------------- discovery */

/* NVIDIA's OpenCL platform shows the same GPUs the CUDA backend drives with
 * cuBLAS, much faster than CLBlast does; listing them twice would let a plan
 * split one GPU between two "devices". So an NVIDIA device is left out here
 * whenever the CUDA backend sees at least one GPU. */
#define PCI_VENDOR_NVIDIA 0x10DEu

static int covered_by_cuda(cl_device_id d) {
  cl_uint vendor = 0;
  if (clGetDeviceInfo(d, CL_DEVICE_VENDOR_ID, sizeof vendor, &vendor, NULL) != CL_SUCCESS)
    return 0;
  return vendor == PCI_VENDOR_NVIDIA && poas__backend_cuda.count() > 0;
}

/* Finds device `index` in the flattened list of usable devices, or counts
 * them when `index` is negative. Any platform or loader error counts as no
 * device; no memory for the lists is POAS_ENOMEM (they said "0 opencl
 * devices present", or "no such device", of a host out of memory). Called
 * with walk_lock held. */
static int walk_devices_locked(int index, cl_device_id *out) {
  cl_uint np = 0;
  if (clGetPlatformIDs(0, NULL, &np) != CL_SUCCESS || np == 0)
    return 0;
  cl_platform_id *plat = calloc(np, sizeof *plat);
  if (!plat)
    return POAS_ENOMEM;
  if (clGetPlatformIDs(np, plat, NULL) != CL_SUCCESS) {
    free(plat);
    return 0;
  }
  int seen = 0, found = 0;
  for (cl_uint p = 0; p < np && !found; p++) {
    cl_uint nd = 0;
    if (clGetDeviceIDs(plat[p], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) != CL_SUCCESS || nd == 0)
      continue;
    cl_device_id *devs = calloc(nd, sizeof *devs);
    if (!devs) {
      free(plat);
      return POAS_ENOMEM;
    }
    if (clGetDeviceIDs(plat[p], CL_DEVICE_TYPE_ALL, nd, devs, NULL) != CL_SUCCESS) {
      free(devs);
      continue;
    }
    for (cl_uint i = 0; i < nd && !found; i++) {
      if (covered_by_cuda(devs[i])) {
        poas__debug("opencl: leaving out an NVIDIA device that the CUDA backend drives");
        continue;
      }
      if (seen == index) {
        *out = devs[i];
        found = 1;
      }
      seen++;
    }
    free(devs);
  }
  free(plat);
  return index >= 0 ? found : seen;
}

/* Discovery one thread at a time. The first clGetDeviceIDs of a process
 * sets PoCL 3.1's devices up, and a second thread's discovery meanwhile
 * saw CL_DEVICE_NOT_FOUND (a context failed: "0 opencl devices present")
 * or a device whose fields were not filled yet (a crash in
 * clGetDeviceInfo): two threads calling poas_init on opencl0 at once
 * crashed in most runs. Every path into OpenCL starts here, so the setup
 * always happens under the lock. */
static pthread_mutex_t walk_lock = PTHREAD_MUTEX_INITIALIZER;

static int walk_devices(int index, cl_device_id *out) {
  pthread_mutex_lock(&walk_lock);
  int r = walk_devices_locked(index, out);
  pthread_mutex_unlock(&walk_lock);
  return r;
}

static int ocl_count(void) { return walk_devices(-1, NULL); }

static cl_uint device_uint(cl_device_id d, cl_device_info what) {
  cl_uint v = 0;
  return clGetDeviceInfo(d, what, sizeof v, &v, NULL) == CL_SUCCESS ? v : 0;
}

static cl_ulong device_ulong(cl_device_id d, cl_device_info what) {
  cl_ulong v = 0;
  return clGetDeviceInfo(d, what, sizeof v, &v, NULL) == CL_SUCCESS ? v : 0;
}

/* clGetDeviceInfo and clGetPlatformInfo, as one type, for info_string. */
typedef cl_int (*info_query)(const void *obj, cl_uint what, size_t cap, void *buf, size_t *bytes);

static cl_int device_query(const void *obj, cl_uint what, size_t cap, void *buf, size_t *bytes) {
  return clGetDeviceInfo((cl_device_id)obj, what, cap, buf, bytes);
}

static cl_int platform_query(const void *obj, cl_uint what, size_t cap, void *buf,
                             size_t *bytes) {
  return clGetPlatformInfo((cl_platform_id)obj, what, cap, buf, bytes);
}

/* A string of a device or platform, whole, to be freed; NULL when it
 * cannot be read. Asked for its size first: OpenCL writes nothing at all
 * (CL_INVALID_VALUE) into a buffer smaller than the string, which left a
 * long name or driver version empty. */
static char *info_whole(info_query query, const void *obj, cl_uint what) {
  size_t bytes = 0;
  char *whole = NULL;
  if (query(obj, what, 0, NULL, &bytes) != CL_SUCCESS || bytes == 0 ||
      (whole = calloc(1, bytes + 1)) == NULL)
    return NULL;
  if (query(obj, what, bytes, whole, NULL) != CL_SUCCESS) {
    free(whole);
    return NULL;
  }
  return whole;
}

/* The same, cut to cap - 1 bytes ("" when it cannot be read). */
static void info_string(info_query query, const void *obj, cl_uint what, char *buf, size_t cap) {
  char *whole = info_whole(query, obj, what);
  snprintf(buf, cap, "%s", whole ? whole : "");
  free(whole);
}

void poas__ocl_device_string(cl_device_id d, cl_device_info what, char *buf, size_t cap) {
  info_string(device_query, d, what, buf, cap);
}

void poas__ocl_platform_string(cl_platform_id p, cl_platform_info what, char *buf, size_t cap) {
  info_string(platform_query, p, what, buf, cap);
}

static int partitions_by_counts(cl_device_id d) {
  cl_device_partition_property props[8];
  size_t bytes = 0;
  if (clGetDeviceInfo(d, CL_DEVICE_PARTITION_PROPERTIES, sizeof props, props, &bytes) !=
      CL_SUCCESS)
    return 0;
  for (size_t i = 0; i < bytes / sizeof *props; i++)
    if (props[i] == CL_DEVICE_PARTITION_BY_COUNTS)
      return 1;
  return 0;
}

/* ------------------------------------------------------------ open/close */

/* cores=N: a sub-device of N compute units, for CPU devices that can be
 * partitioned (PoCL's can), so that OpenCL leaves the other cores to the
 * cpu device. *cores is 0 for the whole device. block=N (ocl_gemm_blocked):
 * pieces of N (POAS__GEMM_BLOCK_STEP and _MAX), 0 for whole calls;
 * *block_out stays -1 when not given, for calibration to choose. */
static int parse_settings(cl_device_id device, const poas__spec_entry *e, int *cores_out,
                          int *block_out, char *err, size_t errcap) {
  cl_uint cu = device_uint(device, CL_DEVICE_MAX_COMPUTE_UNITS);
  int cores = 0; /* not given */
  *cores_out = 0;
  *block_out = -1;
  const poas__int_setting known[] = {{"cores", 1, (int64_t)cu, &cores},
                                     {"block", 0, POAS__GEMM_BLOCK_MAX, block_out}};
  if (poas__spec_ints("opencl", e, known, 2, err, errcap))
    return POAS_ESPEC;
  if (*block_out > 0 && *block_out % POAS__GEMM_BLOCK_STEP) {
    snprintf(err, errcap,
             "opencl: block=%d is not a multiple of %d (the GEMM kernel's tile; 0 for none)",
             *block_out, POAS__GEMM_BLOCK_STEP);
    return POAS_ESPEC;
  }
  if (cores == 0)
    return 0;
  cl_device_type type = 0;
  clGetDeviceInfo(device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
  if (!(type & CL_DEVICE_TYPE_CPU) || !partitions_by_counts(device)) {
    snprintf(err, errcap,
             "opencl: cores=%d not supported: the device cannot be partitioned by counts", cores);
    return POAS_ESPEC;
  }
  if (cores == (int)cu)
    return 0;
  *cores_out = cores;
  /* PoCL with POCL_AFFINITY=1 pins its workers to the first cores, which the
   * cpu device binds to as well: a 2048 split between one-core PoCL and a
   * one-thread cpu device then ran at 0.46-0.55 of the summed rates. */
  const char *affinity = getenv("POCL_AFFINITY");
  if (affinity && *affinity && strcmp(affinity, "0") != 0)
    poas__warn("opencl: POCL_AFFINITY=%s pins PoCL's threads to the first cores, where the "
               "cpu device runs too; unset it to co-execute with cores=%d",
               affinity, cores);
  return 0;
}

/* The OpenCL specification offers two ways for a device to say it computes
 * in double precision: the cl_khr_fp64 extension (OpenCL 1.0 and 1.1, where
 * double is optional and CL_DEVICE_DOUBLE_FP_CONFIG may not be there at all),
 * and a nonzero CL_DEVICE_DOUBLE_FP_CONFIG (which 1.2 and later require of a
 * device that supports double; 3.0 adds the __opencl_c_fp64 feature beside
 * the extension). Drivers have reported one without the other, so either
 * is taken as a yes. The extension is matched as a whole name in the
 * space-separated list, not as a prefix of a longer one. */
int poas__ocl_has_fp64(const char *extensions, uint64_t double_fp_config) {
  if (double_fp_config != 0)
    return 1;
  static const char name[] = "cl_khr_fp64";
  const size_t len = sizeof name - 1;
  for (const char *p = extensions; p && (p = strstr(p, name)) != NULL; p += len) {
    int starts = p == extensions || p[-1] == ' ';
    int ends = p[len] == '\0' || p[len] == ' ';
    if (starts && ends)
      return 1;
  }
  return 0;
}

/* Some drivers report CL_DEVICE_MAX_CLOCK_FREQUENCY as 0. A peak of 0
 * would mean "cannot compute this dtype" to the planner (api/run.c takes
 * an uncalibrated device with no peak for one that lacks the dtype), so
 * such a device is estimated at a nominal 1 GHz instead: a low clock for
 * any device that runs OpenCL today, so the estimate stays on the modest
 * side until calibration measures the real rate. */
unsigned poas__ocl_clock_mhz(unsigned reported_mhz) {
  return reported_mhz ? reported_mhz : POAS__OCL_NOMINAL_MHZ;
}

/* Reads the device's extension list and its double-precision support. */
static int device_has_fp64(cl_device_id d) {
  char *ext = info_whole(device_query, d, CL_DEVICE_EXTENSIONS);
  int yes = poas__ocl_has_fp64(ext, device_ulong(d, CL_DEVICE_DOUBLE_FP_CONFIG));
  free(ext);
  return yes;
}

uint64_t poas__ocl_buffer_max = 0;
uint64_t poas__ocl_memory_max = 0;

/* A rough peak: compute units x clock x flops per cycle and unit, by device
 * type. PoCL's CPU device gets a modest factor: CLBlast's generic kernels
 * reach far less than OpenBLAS on the same cores. */
static void fill_info(ocl_state *s) {
  poas_device_info *info = &s->dev.info;
  poas__ocl_device_string(s->device, CL_DEVICE_NAME, info->name, sizeof info->name);
  char version[64], platname[64];
  poas__ocl_device_string(s->device, CL_DRIVER_VERSION, version, sizeof version);
  cl_platform_id plat = NULL;
  platname[0] = '\0';
  if (clGetDeviceInfo(s->device, CL_DEVICE_PLATFORM, sizeof plat, &plat, NULL) == CL_SUCCESS)
    poas__ocl_platform_string(plat, CL_PLATFORM_NAME, platname, sizeof platname);
  /* Cut where the two pass the field: the platform and the start of its
   * version say which driver it is. */
  /* block=N, where given (0 included: whole calls whatever calibration
   * would choose), ends it: a profile tells the device apart by this
   * string, and GEMMs in other pieces are another device to its models. */
  char block[24] = "";
  if (s->block >= 0)
    snprintf(block, sizeof block, " block=%d", s->block);
  int room = POAS__DRIVER_LEN - 2 - (int)strlen(block);
  int plat_len = (int)strnlen(platname, (size_t)room);
  snprintf(info->driver, POAS__DRIVER_LEN, "%.*s %.*s%s", plat_len, platname, room - plat_len,
           version, block);
  cl_device_type type = 0;
  clGetDeviceInfo(s->device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
  cl_uint cu = device_uint(s->device, CL_DEVICE_MAX_COMPUTE_UNITS);
  cl_uint mhz = poas__ocl_clock_mhz(device_uint(s->device, CL_DEVICE_MAX_CLOCK_FREQUENCY));
  /* The parent's: a sub-device computes in its parent's memory. */
  info->memory_bytes = device_ulong(s->session->parent, CL_DEVICE_GLOBAL_MEM_SIZE);
  if (poas__ocl_memory_max && poas__ocl_memory_max < info->memory_bytes)
    info->memory_bytes = poas__ocl_memory_max;
  info->cores = (int)cu;
  info->shares_host_cores = (type & CL_DEVICE_TYPE_CPU) != 0;
  info->host_memory = 0;
  double per_cycle = 32, fp64_ratio = 0.25;
  if (type & CL_DEVICE_TYPE_CPU)
    per_cycle = 16, fp64_ratio = 0.5;
  else if (type & CL_DEVICE_TYPE_GPU)
    per_cycle = 128, fp64_ratio = 1.0 / 16;
  s->has_fp64 = device_has_fp64(s->device);
  info->peak_gflops[POAS_FLOAT32] = cu * (mhz / 1e3) * per_cycle;
  info->peak_gflops[POAS_FLOAT64] = s->has_fp64 ? info->peak_gflops[POAS_FLOAT32] * fp64_ratio : 0;
  s->max_alloc = device_ulong(s->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
  if (poas__ocl_buffer_max && poas__ocl_buffer_max < s->max_alloc)
    s->max_alloc = poas__ocl_buffer_max;
}

/* Releases a session that never reached the pool (its creation failed
 * part way, so no command ever ran on it). */
static void release_session(ocl_session *ss) {
  for (int q = OCL_LANES; q >= 0; q--)
    if (ss->queue[q])
      clReleaseCommandQueue(ss->queue[q]);
  if (ss->ctx)
    clReleaseContext(ss->ctx);
  if (ss->subdevice)
    clReleaseDevice(ss->subdevice);
  free(ss);
}

/* A session for `parent` (cores: 0 or a sub-device's compute units): an
 * idle one from the pool, else a new one, which joins the pool. */
static int acquire_session(int index, cl_device_id parent, int cores, ocl_session **out,
                           char *err, size_t errcap) {
  pthread_mutex_lock(&pool_lock);
  for (ocl_session *ss = pool; ss; ss = ss->next)
    if (!ss->in_use && ss->parent == parent && ss->cores == cores) {
      ss->in_use = 1;
      pthread_mutex_unlock(&pool_lock);
      *out = ss;
      return 0;
    }
  pthread_mutex_unlock(&pool_lock);
  ocl_session *ss = calloc(1, sizeof *ss);
  if (!ss)
    return POAS_ENOMEM;
  ss->parent = parent;
  ss->cores = cores;
  cl_device_id device = parent;
  cl_int r;
  if (cores) {
    cl_device_partition_property props[] = {CL_DEVICE_PARTITION_BY_COUNTS,
                                            (cl_device_partition_property)cores,
                                            CL_DEVICE_PARTITION_BY_COUNTS_LIST_END, 0};
    cl_uint got = 0;
    r = clCreateSubDevices(parent, props, 1, &ss->subdevice, &got);
    if (r != CL_SUCCESS || got != 1) {
      /* A call that succeeded with another count still made the one it
       * wrote: release_session releases it. */
      if (r != CL_SUCCESS) {
        ss->subdevice = NULL;
        snprintf(err, errcap, "opencl: cores=%d: clCreateSubDevices failed: %s (%d)", cores,
                 status_name(r), (int)r);
      } else {
        snprintf(err, errcap, "opencl: cores=%d: clCreateSubDevices reported %u sub-devices, not 1",
                 cores, (unsigned)got);
      }
      release_session(ss);
      return POAS_ESPEC;
    }
    device = ss->subdevice;
  }
  ss->ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &r);
  if (!ss->ctx) {
    snprintf(err, errcap, "opencl%d: clCreateContext failed: %s (%d)", index, status_name(r),
             (int)r);
    release_session(ss);
    return POAS_EDEVICE;
  }
  for (int q = 0; q <= OCL_LANES; q++) {
    ss->queue[q] = clCreateCommandQueue(ss->ctx, device, 0, &r);
    if (!ss->queue[q]) {
      snprintf(err, errcap, "opencl%d: clCreateCommandQueue failed: %s (%d)", index,
               status_name(r), (int)r);
      release_session(ss);
      return POAS_EDEVICE;
    }
  }
  ss->in_use = 1;
  pthread_mutex_lock(&pool_lock);
  ss->next = pool;
  pool = ss;
  pthread_mutex_unlock(&pool_lock);
  *out = ss;
  return 0;
}

/* The count of `parent`'s memory, made on its first open; NULL when host
 * memory ran out. */
static ocl_memory *device_memory(cl_device_id parent) {
  pthread_mutex_lock(&memory_lock);
  ocl_memory *m = memories;
  while (m && m->parent != parent)
    m = m->next;
  if (!m && (m = calloc(1, sizeof *m)) != NULL) {
    m->parent = parent;
    m->next = memories;
    memories = m;
  }
  pthread_mutex_unlock(&memory_lock);
  return m;
}

/* Hands a session back once its queues are empty. */
static void return_session(ocl_session *ss) {
  for (int q = 0; q <= OCL_LANES; q++)
    clFinish(ss->queue[q]);
  pthread_mutex_lock(&pool_lock);
  ss->in_use = 0;
  pthread_mutex_unlock(&pool_lock);
}

/* CLBlast runs a GEMM with its direct kernel below XGEMM_MIN_INDIRECT_SIZE
 * cubed (m n k) and with its indirect one (operands copied into the
 * kernel's layout where they are not in it, then a faster kernel) above.
 * Its defaults for PoCL on a CPU (896 for sgemm, 1152 for dgemm) keep the
 * thin blocks of a split on the direct kernel. On one core of the CI
 * machine's AMD EPYC, with the shared operand transposed once (adapt/) so
 * that the indirect kernel copies only the chunk's own operand, 2048 x
 * 2048 x 2048 blocks of 32 to 384 rows ran indirect at 11.1-15.5 GFLOP/s
 * (dgemm) against 7.0-11.0 direct, and squares from 128 up 1.4-2.4x
 * faster than direct in both precisions; below 128^3 the two are alike
 * (within 20% either way). */
#define CPU_MIN_INDIRECT 128

/* Every CLBlast call, one thread at a time. CLBlast 1.5.3 (Debian 12)
 * keeps process-wide caches and a parameter database that its calls from
 * several threads corrupt (CLBlast issue #486, fixed by PR #495 after that
 * release): under ASan, four contexts opening opencl0 at once read freed
 * memory in CLBlastOverrideParameters, and contexts or devices issuing
 * GEMMs from their own threads meet the cache's race. The calls only
 * enqueue work (a kernel is compiled once per shape class), so holding
 * the lock costs microseconds, and it is taken innermost: nothing else is
 * locked or waited for while it is held. */
static pthread_mutex_t clblast_lock = PTHREAD_MUTEX_INITIALIZER;

/* Returns the m n k from which CLBlast runs GEMMs indirect on the device
 * where both precisions took CPU_MIN_INDIRECT; 0 (every call, as far as
 * plans know) where they did not, or on other devices, whose thresholds
 * are CLBlast's own. */
static int64_t tune_clblast(ocl_state *s) {
  if (!s->dev.info.shares_host_cores) /* fill_info: a CPU device */
    return 0;
  const char *names[1] = {"XGEMM_MIN_INDIRECT_SIZE"};
  const size_t values[1] = {CPU_MIN_INDIRECT};
  const CLBlastPrecision precs[2] = {CLBlastPrecisionSingle, CLBlastPrecisionDouble};
  int took = 0;
  for (int i = 0; i < 2; i++) {
    pthread_mutex_lock(&clblast_lock);
    CLBlastStatusCode st = CLBlastOverrideParameters(s->device, "GemmRoutine", precs[i], 1, names,
                                                     values);
    pthread_mutex_unlock(&clblast_lock);
    if (st == CLBlastSuccess)
      took++;
    else
      poas__debug("opencl: CLBlast kept its own kernel choice (precision %d: %d)", (int)precs[i],
                  (int)st);
  }
  return took == 2 ? (int64_t)CPU_MIN_INDIRECT * CPU_MIN_INDIRECT * CPU_MIN_INDIRECT : 0;
}

static int ocl_open(int index, const poas__spec_entry *e, poas__device **out, char *err,
                    size_t errcap) {
  ocl_state *s = calloc(1, sizeof *s);
  if (!s)
    return POAS_ENOMEM;
  int rc = POAS_ENODEV, cores = 0;
  cl_device_id parent;
  int found = walk_devices(index, &parent);
  if (found < 0) {
    rc = found;
    snprintf(err, errcap, "opencl%d: no memory to list the OpenCL devices", index);
    goto fail;
  }
  if (!found) {
    snprintf(err, errcap, "opencl%d: no such device", index);
    goto fail;
  }
  rc = parse_settings(parent, e, &cores, &s->block, err, errcap);
  if (!rc && (s->memory = device_memory(parent)) == NULL)
    rc = POAS_ENOMEM;
  if (!rc)
    rc = acquire_session(index, parent, cores, &s->session, err, errcap);
  if (rc)
    goto fail;
  s->device = s->session->subdevice ? s->session->subdevice : parent;
  fill_info(s);
  int64_t indirect_mnk = tune_clblast(s);
  for (int l = 0; l < OCL_LANES; l++)
    pthread_mutex_init(&s->scratch[l].lock, NULL);
  s->dev.nlanes = OCL_LANES;
  s->dev.gemm_wants_bt = 1;
  /* CLBlast's indirect kernel computes C in tiles of MWG x NWG and pads a
   * block to whole tiles: 32 x 32 for PoCL's CPU device in both
   * precisions (its defaults for CPUs, read with the C++ API's
   * RetrieveParameters; the C API cannot read them). A 72-row dgemm chunk
   * ran at 10.3 GFLOP/s against 12.7-13.8 for 64 and 96 rows. Tuned GPU
   * entries use 32 to 128; 32 at least spares them the worst padding. */
  s->dev.gemm_align = POAS__OCL_GEMM_ALIGN;
  s->dev.gemm_max_elems = poas__ocl_index_max;
  s->dev.gemm_index_pad = POAS__OCL_INDEX_PAD;
  /* mem_alloc refuses a buffer past it: plans keep theirs within it. */
  s->dev.max_buffer_bytes = s->max_alloc;
  /* CLBlast's indirect GEMM needs one temporary buffer per call (the
   * lane's, counted like any buffer: ocl_scratch) for padded copies of
   * the operands not in its layout: its work-group tiles are
   * 16 to 128 a side (powers of two), so POAS__OCL_INDEX_PAD bounds the
   * padding. CLBlastXGemmTempBufferSize on PoCL here, B transposed: 12 MB
   * for a 1000^3 sgemm (A, B and C each padded to 1024^2), 8 MiB for a
   * 100 x 4096 x 4096 dgemm (A and C padded to 128 rows), 4.8 GB for a
   * 5088 x 20001 x 20001 dgemm; none for a 4096^3 or a 5088 x 20000 x
   * 20000 one (sides whole multiples of its 32-wide tiles), but 0.8 GB
   * for the latter with C at an offset in a larger matrix (a kept C). */
  s->dev.gemm_scratch_pad = POAS__OCL_INDEX_PAD;
  s->dev.gemm_scratch_min_mnk = indirect_mnk;
  /* A CPU device's GEMM slows down once the chunk's own operand outgrows
   * its share of the cache: on one PoCL core of the CI machine (32 MiB
   * L3), CLBlast's indirect kernel ran blocks whose non-shared operand
   * held 1-4 MiB at 11.9-16.7 GFLOP/s and 16 MiB at 9.5-10.2, in both
   * precisions (2048 and 4096 squares cut into 64 to 2048 rows). So a
   * tile holds at most an eighth of the cache the device reports. */
  if (s->dev.info.shares_host_cores)
    s->dev.gemm_tile_bytes = device_ulong(s->device, CL_DEVICE_GLOBAL_MEM_CACHE_SIZE) / 8;
  /* Pieces as block=N gives them, else as calibration found faster on a
   * CPU device (a GPU runs a whole call as one grid). */
  s->dev.gemm_block[0] = s->dev.gemm_block[1] = POAS__MAX(s->block, 0);
  s->dev.can_block = s->block < 0 && s->dev.info.shares_host_cores;
  s->dev.priv = s;
  *out = &s->dev;
  return 0;
fail:
  free(s);
  return rc;
}

static void drop_scratch(ocl_state *s, int lane);

static void ocl_close(poas__device *dev) {
  ocl_state *s = dev->priv;
  return_session(s->session);
  for (int l = 0; l < OCL_LANES; l++) {
    drop_scratch(s, l);
    pthread_mutex_destroy(&s->scratch[l].lock);
  }
  free(s);
}

/* ---------------------------------------------------------------- memory */

/* Reserves `bytes` of the device's global memory in the process's count
 * (ocl_memory): a CPU implementation on an overcommitting host would
 * otherwise accept any total, and a GPU's driver fail it late. A refusal
 * is POAS_ENOMEM to poas__dev_alloc, which then releases the buffers
 * every context parked on the device and tries again. */
/* What the count leaves of the device's memory. Locked. */
static uint64_t memory_left(const ocl_state *s) {
  uint64_t total = s->dev.info.memory_bytes, used = s->memory->reserved;
  return used < total ? total - used : 0;
}

static int reserve(ocl_state *s, size_t bytes) {
  pthread_mutex_lock(&memory_lock);
  int ok = bytes <= memory_left(s);
  if (ok)
    s->memory->reserved += bytes;
  pthread_mutex_unlock(&memory_lock);
  return ok;
}

static void unreserve(ocl_state *s, size_t bytes) {
  pthread_mutex_lock(&memory_lock);
  s->memory->reserved -= bytes;
  pthread_mutex_unlock(&memory_lock);
}

/* What the count leaves of the device's memory, to every context: those
 * of the buffers parked in caches poas__dev_available adds back. */
static int ocl_mem_available(poas__device *dev, uint64_t *bytes) {
  ocl_state *s = dev->priv;
  pthread_mutex_lock(&memory_lock);
  *bytes = memory_left(s);
  pthread_mutex_unlock(&memory_lock);
  return 0;
}

/* Makes the implementation back the buffer now: a one-byte fill on the
 * private queue, waited for. *call names the call that failed. */
static cl_int touch(ocl_state *s, cl_mem buf, const char **call) {
  const unsigned char zero = 0;
  cl_event ev;
  *call = "clEnqueueFillBuffer";
  cl_int r = clEnqueueFillBuffer(s->session->queue[OCL_ALLOC_QUEUE], buf, &zero, 1, 0, 1, 0, NULL, &ev);
  if (r != CL_SUCCESS)
    return r;
  *call = "clWaitForEvents";
  r = clWaitForEvents(1, &ev);
  clReleaseEvent(ev);
  return r;
}

static int ocl_mem_alloc(poas__device *dev, size_t bytes, poas__mem *out) {
  ocl_state *s = dev->priv;
  if (bytes == 0)
    bytes = 64;
  if (bytes > s->max_alloc)
    return poas__fail(POAS_ENOMEM, "%s: %zu bytes exceed the largest allocation (%llu)",
                      dev->info.id, bytes, (unsigned long long)s->max_alloc);
  if (!reserve(s, bytes))
    return poas__fail(POAS_ENOMEM, "%s: %zu bytes do not fit in the device memory left",
                      dev->info.id, bytes);
  cl_int r;
  const char *call = "clCreateBuffer";
  cl_mem buf = clCreateBuffer(s->session->ctx, CL_MEM_READ_WRITE, bytes, NULL, &r);
  if (buf && (r = touch(s, buf, &call)) != CL_SUCCESS) {
    clReleaseMemObject(buf);
    buf = NULL;
  }
  if (!buf) {
    unreserve(s, bytes);
    if (is_out_of_memory(r) || r == CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
      return poas__fail(POAS_ENOMEM, "%s: allocation of %zu bytes failed: %s: %s (%d)",
                        dev->info.id, bytes, call, status_name(r), (int)r);
    return cl_fail(dev, call, r);
  }
  out->ptr = buf;
  return 0;
}

static void ocl_mem_free(poas__device *dev, poas__mem mem) {
  ocl_state *s = dev->priv;
  size_t bytes = 0;
  if (clGetMemObjectInfo(mem.ptr, CL_MEM_SIZE, sizeof bytes, &bytes, NULL) == CL_SUCCESS)
    unreserve(s, bytes);
  clReleaseMemObject(mem.ptr);
}

/* ---------------------------------------------------------------- copies */

static int check_lane(const poas__device *dev, int lane) {
  if (lane < 0 || lane >= OCL_LANES)
    return poas__fail(POAS_EINVAL, "%s: no lane %d", dev->info.id, lane);
  return 0;
}

/* The rectangle of a 2-D copy; a single row needs no pitch. */
static void rect(const poas__copy2d *c, size_t origin[3], size_t region[3], size_t *host_pitch,
                 size_t *dev_pitch) {
  origin[0] = c->dev_off, origin[1] = 0, origin[2] = 0;
  region[0] = c->width, region[1] = c->rows, region[2] = 1;
  *host_pitch = c->rows > 1 ? c->host_pitch : c->width;
  *dev_pitch = c->rows > 1 ? c->dev_pitch : c->width;
}

/* A 2-D copy between host memory and a buffer, non-blocking on the lane. */
static int copy_rect(poas__device *dev, int lane, poas_direction dir, cl_mem buf, void *host,
                     const poas__copy2d *c) {
  int rc = check_lane(dev, lane);
  if (rc || c->width == 0 || c->rows == 0)
    return rc;
  ocl_state *s = dev->priv;
  size_t origin[3], region[3], hp, dp;
  static const size_t zero[3] = {0, 0, 0};
  rect(c, origin, region, &hp, &dp);
  cl_int r = dir == POAS_H2D
                 ? clEnqueueWriteBufferRect(s->session->queue[lane], buf, CL_FALSE, origin, zero, region,
                                            dp, 0, hp, 0, host, 0, NULL, NULL)
                 : clEnqueueReadBufferRect(s->session->queue[lane], buf, CL_FALSE, origin, zero, region,
                                           dp, 0, hp, 0, host, 0, NULL, NULL);
  if (r == CL_SUCCESS)
    return 0;
  return cl_fail(dev, dir == POAS_H2D ? "clEnqueueWriteBufferRect" : "clEnqueueReadBufferRect", r);
}

static int ocl_copy_h2d(poas__device *dev, int lane, poas__mem dst, const void *src,
                        const poas__copy2d *c) {
  return copy_rect(dev, lane, POAS_H2D, dst.ptr, (void *)(uintptr_t)src, c);
}

static int ocl_copy_d2h(poas__device *dev, int lane, void *dst, poas__mem src,
                        const poas__copy2d *c) {
  return copy_rect(dev, lane, POAS_D2H, src.ptr, dst, c);
}

/* ------------------------------------------------------------------ gemm */

/* CLBlast 1.5 takes sizes, offsets and leading dimensions as size_t, but
 * hands them to its OpenCL kernels as int (static_cast<int> in every
 * routine's SetArgument calls), and the kernels compute element indices
 * in int: an operand that reaches past 2^31 - 1 elements from its
 * buffer's start is read and written at wrapped indices, with no error.
 * Its indirect GEMM kernel also copies operands into temporary buffers
 * padded to whole work-group tiles (MWG, NWG, KWG: 32 to 128 in the tuned
 * entries), which the same int indices address; POAS__OCL_INDEX_PAD
 * bounds that padding per side. */
int64_t poas__ocl_index_max = INT32_MAX;

/* The highest element count CLBlast may index for an operand of rows x
 * cols at `off` elements into its buffer with leading dimension ld: its
 * last element, its padded copy, and ld itself. A double, which cannot
 * wrap. */
static double operand_reach(size_t off, int64_t ld, int64_t rows, int64_t cols) {
  double last = (double)off + (double)ld * (double)(cols - 1) + (double)rows;
  double reach = POAS__MAX(last, poas__padded_elems(rows, cols, POAS__OCL_INDEX_PAD));
  return POAS__MAX(reach, (double)ld);
}

int poas__ocl_gemm_fits(const poas__gemm_call *g, int64_t max) {
  size_t es = poas__dtype_size(g->dtype);
  double most = (double)max;
  if (operand_reach(g->c.off / es, g->c.ld, g->m, g->n) > most)
    return 0;
  if (g->k == 0 || g->alpha == 0) /* A and B unread (scale_c) */
    return 1;
  int ta = g->transa == POAS_TRANS, tb = g->transb == POAS_TRANS;
  return operand_reach(g->a.off / es, g->a.ld, ta ? g->k : g->m, ta ? g->m : g->k) <= most &&
         operand_reach(g->b.off / es, g->b.ld, tb ? g->n : g->k, tb ? g->k : g->n) <= most;
}

int poas__ocl_transpose_fits(const poas__transpose_call *t, int64_t max) {
  size_t es = poas__dtype_size(t->dtype);
  return operand_reach(t->src.off / es, t->src.ld, t->rows, t->cols) <= (double)max &&
         operand_reach(t->dst.off / es, t->dst.ld, t->cols, t->rows) <= (double)max;
}

/* Releases a lane's scratch; the lane has run everything queued on it
 * (clFinish), so nothing reads the buffer any more. */
static void drop_scratch(ocl_state *s, int lane) {
  ocl_scratch *sc = &s->scratch[lane];
  poas__dev_free(&s->dev, sc->mem, sc->bytes);
  sc->mem.ptr = NULL;
  sc->bytes = 0;
}

/* The lane's scratch for a call that needs `need` bytes (CLBlast's
 * GemmTempBufferSize; 0: none, its direct kernel or operands in layout),
 * in *temp (NULL: none). It is allocated through the device's count
 * (poas__dev_alloc), so mem_alloc's limits and memory hold for it, and
 * grown only once the calls queued on the lane have run: their buffer
 * would otherwise be held beside the new one. Lock held. */
static int lane_scratch(poas__device *dev, int lane, size_t need, cl_mem *temp) {
  ocl_state *s = dev->priv;
  ocl_scratch *sc = &s->scratch[lane];
  *temp = NULL;
  if (need == 0)
    return 0;
  if (need > sc->bytes) {
    if (sc->mem.ptr) {
      cl_int r = clFinish(s->session->queue[lane]);
      if (r != CL_SUCCESS)
        return cl_fail(dev, "clFinish", r);
      drop_scratch(s, lane);
    }
    /* Said once, as this buffer's: mem_alloc's own words ("3145728
     * bytes do not fit") came alone, mid-run, for no buffer a plan names. */
    int was = poas__failures_expected(1);
    int rc = poas__dev_alloc(dev, need, &sc->mem);
    poas__failures_expected(was);
    if (rc) {
      const char *why = poas_error_detail();
      size_t id = strlen(dev->info.id);
      if (strncmp(why, dev->info.id, id) == 0 && strncmp(why + id, ": ", 2) == 0)
        why += id + 2;
      char said[256];
      poas__strlcpy(said, why, sizeof said);
      return poas__fail(rc, "%s: CLBlast's temporary copies of a GEMM's operands (lane %d): %s",
                        dev->info.id, lane, said);
    }
    sc->bytes = need;
  }
  *temp = sc->mem.ptr;
  return 0;
}

/* C = alpha op(A) op(B) + beta C through CLBlast on the lane, with the
 * lane's scratch; `what` names the call in an error. */
static int clblast_gemm(poas__device *dev, int lane, const poas__gemm_call *g,
                        CLBlastTranspose ta, CLBlastTranspose tb, size_t k, cl_mem a,
                        size_t aoff, size_t lda, cl_mem b, size_t boff, size_t ldb,
                        const char *what) {
  ocl_state *s = dev->priv;
  ocl_scratch *sc = &s->scratch[lane];
  cl_command_queue *queue = &s->session->queue[lane];
  size_t es = poas__dtype_size(g->dtype), m = (size_t)g->m, n = (size_t)g->n;
  size_t coff = g->c.off / es, ldc = (size_t)g->c.ld, need = 0;
  int single = g->dtype == POAS_FLOAT32;
  pthread_mutex_lock(&sc->lock);
  pthread_mutex_lock(&clblast_lock);
  CLBlastStatusCode st =
      single ? CLBlastSGemmTempBufferSize(CLBlastLayoutColMajor, ta, tb, m, n, k, aoff, lda, boff,
                                          ldb, coff, ldc, queue, &need)
             : CLBlastDGemmTempBufferSize(CLBlastLayoutColMajor, ta, tb, m, n, k, aoff, lda, boff,
                                          ldb, coff, ldc, queue, &need);
  pthread_mutex_unlock(&clblast_lock);
  cl_mem temp = NULL;
  int rc = st == CLBlastSuccess ? lane_scratch(dev, lane, need, &temp)
                                : cl_fail(dev, "CLBlast's GemmTempBufferSize", st);
  if (!rc) {
    pthread_mutex_lock(&clblast_lock);
    st = single ? CLBlastSgemmWithTempBuffer(CLBlastLayoutColMajor, ta, tb, m, n, k,
                                             (float)g->alpha, a, aoff, lda, b, boff, ldb,
                                             (float)g->beta, g->c.mem.ptr, coff, ldc, queue, NULL,
                                             temp)
                : CLBlastDgemmWithTempBuffer(CLBlastLayoutColMajor, ta, tb, m, n, k, g->alpha, a,
                                             aoff, lda, b, boff, ldb, g->beta, g->c.mem.ptr, coff,
                                             ldc, queue, NULL, temp);
    pthread_mutex_unlock(&clblast_lock);
    if (st != CLBlastSuccess)
      rc = cl_fail(dev, what, st);
  }
  pthread_mutex_unlock(&sc->lock);
  return rc;
}

/* C = beta C, for k = 0 or alpha = 0, where BLAS reads neither A nor B.
 * CLBlast rejects k = 0, so this is a rank-1 update with zero vectors: its
 * kernels do not read C when beta is 0, which gives exact zeros even over
 * NaNs. The zero buffer is released at once; OpenCL keeps it until the
 * commands using it have run. */
static int scale_c(poas__device *dev, int lane, const poas__gemm_call *g) {
  ocl_state *s = dev->priv;
  size_t es = poas__dtype_size(g->dtype);
  size_t bytes = (size_t)POAS__MAX(g->m, g->n) * es;
  cl_int r;
  cl_mem zero = clCreateBuffer(s->session->ctx, CL_MEM_READ_ONLY, bytes, NULL, &r);
  if (!zero)
    return is_out_of_memory(r) ? poas__fail(POAS_ENOMEM, "%s: no room for %zu bytes of zeros",
                                            dev->info.id, bytes)
                               : cl_fail(dev, "clCreateBuffer", r);
  const double pattern = 0;
  r = clEnqueueFillBuffer(s->session->queue[lane], zero, &pattern, es, 0, bytes, 0, NULL, NULL);
  if (r != CL_SUCCESS) {
    clReleaseMemObject(zero);
    return cl_fail(dev, "clEnqueueFillBuffer", r);
  }
  int rc = clblast_gemm(dev, lane, g, CLBlastTransposeNo, CLBlastTransposeNo, 1, zero, 0,
                        (size_t)g->m, zero, 0, 1, "CLBlast gemm (scaling C)");
  clReleaseMemObject(zero);
  return rc;
}

/* Refuses a dtype the device cannot compute, for gemm and transpose
 * alike: unknown (POAS_EDTYPE; checked before its size, 0, divides
 * offsets), or double on a device without it (POAS_ENOTSUP, where CLBlast
 * would fail as a device error). */
static int refuse_dtype(const poas__device *dev, poas_dtype dtype) {
  const ocl_state *s = dev->priv;
  if (dtype != POAS_FLOAT32 && dtype != POAS_FLOAT64)
    return poas__fail(POAS_EDTYPE, "%s: unknown dtype %d", dev->info.id, (int)dtype);
  if (dtype == POAS_FLOAT64 && !s->has_fp64)
    return poas__fail(POAS_ENOTSUP, "%s: the device has no double precision", dev->info.id);
  return 0;
}

/* A GEMM in pieces of C of at most blk a side, each over k in steps of
 * blk, on the lane's in-order queue (the steps of one piece
 * accumulate: beta 1 after the first). PoCL's CPU device on the 2-core CI
 * class's Intel VM (2 MiB L2 a core, its L3 the host's 480 MiB shared
 * with other guests) ran CLBlast's sgemm at 37 GFLOP/s up to 768^3 and at
 * 9-15 from 1024^3 on, whichever side grew (1024 x 1024 x 768: 17;
 * 768 x 768 x 2048: 12): a 2048^3 sgemm, B transposed as splits give it,
 * took 2.08 s as one call and 0.45 s in 512 pieces (64 calls), 1.11 s in
 * 512 x 512 pieces of C over the whole k. Its dgemm ran at 15.7 GFLOP/s
 * either way (768 pieces: 18.3). The pieces are block=N's, else what
 * calibration chose (poas__device.gemm_block). */
static int ocl_gemm_blocked(poas__device *dev, int lane, const poas__gemm_call *g, size_t blk,
                            CLBlastTranspose ta, CLBlastTranspose tb, const char *what) {
  size_t es = poas__dtype_size(g->dtype);
  size_t m = (size_t)g->m, n = (size_t)g->n, k = (size_t)g->k;
  size_t lda = (size_t)g->a.ld, ldb = (size_t)g->b.ld, ldc = (size_t)g->c.ld;
  size_t a0 = g->a.off / es, b0 = g->b.off / es;
  int rc = 0;
  for (size_t j = 0; !rc && j < n; j += blk)
    for (size_t i = 0; !rc && i < m; i += blk)
      for (size_t l = 0; !rc && l < k; l += blk) {
        poas__gemm_call piece = *g;
        piece.m = (int64_t)POAS__MIN(blk, m - i);
        piece.n = (int64_t)POAS__MIN(blk, n - j);
        piece.beta = l ? 1.0 : g->beta;
        piece.c.off = g->c.off + (i + j * ldc) * es;
        /* Column-major: op(A)(i, l) and op(B)(l, j), stored as given. */
        size_t aoff = a0 + (ta == CLBlastTransposeYes ? l + i * lda : i + l * lda);
        size_t boff = b0 + (tb == CLBlastTransposeYes ? j + l * ldb : l + j * ldb);
        rc = clblast_gemm(dev, lane, &piece, ta, tb, POAS__MIN(blk, k - l), g->a.mem.ptr, aoff,
                          lda, g->b.mem.ptr, boff, ldb, what);
      }
  return rc;
}

static int ocl_gemm(poas__device *dev, int lane, const poas__gemm_call *g) {
  int rc = check_lane(dev, lane);
  if (!rc)
    rc = refuse_dtype(dev, g->dtype);
  if (rc)
    return rc;
  size_t es = poas__dtype_size(g->dtype);
  if (g->a.off % es || g->b.off % es || g->c.off % es)
    return poas__fail(POAS_EINVAL, "%s: gemm operand offsets must be whole elements",
                      dev->info.id);
  if (g->m == 0 || g->n == 0)
    return 0;
  if (!poas__ocl_gemm_fits(g, dev->gemm_max_elems))
    return poas__fail(POAS_ENOTSUP,
                      "%s: a %lld x %lld x %lld gemm has an operand past the %lld elements "
                      "(offset and padding included) that CLBlast indexes with 32-bit ints",
                      dev->info.id, (long long)g->m, (long long)g->n, (long long)g->k,
                      (long long)dev->gemm_max_elems);
  if (g->k == 0 || g->alpha == 0)
    return g->beta == 1 ? 0 : scale_c(dev, lane, g);
  CLBlastTranspose ta = g->transa == POAS_TRANS ? CLBlastTransposeYes : CLBlastTransposeNo;
  CLBlastTranspose tb = g->transb == POAS_TRANS ? CLBlastTransposeYes : CLBlastTransposeNo;
  const char *what = g->dtype == POAS_FLOAT32 ? "CLBlastSgemm" : "CLBlastDgemm";
  int64_t blk = dev->gemm_block[g->dtype == POAS_FLOAT64];
  if (blk > 0 && (g->m > blk || g->n > blk || g->k > blk))
    return ocl_gemm_blocked(dev, lane, g, (size_t)blk, ta, tb, what);
  return clblast_gemm(dev, lane, g, ta, tb, (size_t)g->k, g->a.mem.ptr, g->a.off / es,
                      (size_t)g->a.ld, g->b.mem.ptr, g->b.off / es, (size_t)g->b.ld, what);
}

/* The shared operand of a split, transposed once per run for CLBlast's
 * indirect kernel (gemm_wants_bt): CLBlastXomatcopy. */
static int ocl_transpose(poas__device *dev, int lane, const poas__transpose_call *t) {
  ocl_state *s = dev->priv;
  int rc = check_lane(dev, lane);
  if (rc || t->rows == 0 || t->cols == 0)
    return rc;
  if ((rc = refuse_dtype(dev, t->dtype)) != 0)
    return rc;
  size_t es = poas__dtype_size(t->dtype);
  if (t->src.off % es || t->dst.off % es)
    return poas__fail(POAS_EINVAL, "%s: transpose offsets must be whole elements", dev->info.id);
  if (!poas__ocl_transpose_fits(t, dev->gemm_max_elems))
    return poas__fail(POAS_ENOTSUP,
                      "%s: a transpose of %lld x %lld has an operand past the %lld elements "
                      "(offset and padding included) that CLBlast indexes with 32-bit ints",
                      dev->info.id, (long long)t->rows, (long long)t->cols,
                      (long long)dev->gemm_max_elems);
  pthread_mutex_lock(&clblast_lock);
  CLBlastStatusCode st =
      t->dtype == POAS_FLOAT32
          ? CLBlastSomatcopy(CLBlastLayoutColMajor, CLBlastTransposeYes, (size_t)t->rows,
                             (size_t)t->cols, 1.0f, t->src.mem.ptr, t->src.off / es,
                             (size_t)t->src.ld, t->dst.mem.ptr, t->dst.off / es,
                             (size_t)t->dst.ld, &s->session->queue[lane], NULL)
          : CLBlastDomatcopy(CLBlastLayoutColMajor, CLBlastTransposeYes, (size_t)t->rows,
                             (size_t)t->cols, 1.0, t->src.mem.ptr, t->src.off / es,
                             (size_t)t->src.ld, t->dst.mem.ptr, t->dst.off / es,
                             (size_t)t->dst.ld, &s->session->queue[lane], NULL);
  pthread_mutex_unlock(&clblast_lock);
  if (st != CLBlastSuccess)
    return cl_fail(dev, t->dtype == POAS_FLOAT32 ? "CLBlastSomatcopy" : "CLBlastDomatcopy", st);
  return 0;
}

/* ---------------------------------------------------------------- events */

static int ocl_event_create(poas__device *dev, poas__event *ev) {
  memset(ev, 0, sizeof *ev);
  ev->dev = dev;
  return 0;
}

static int ocl_event_record(poas__device *dev, int lane, poas__event *ev) {
  ocl_state *s = dev->priv;
  int rc = check_lane(dev, lane);
  if (rc)
    return rc;
  cl_event e;
  cl_int r = clEnqueueMarkerWithWaitList(s->session->queue[lane], 0, NULL, &e);
  if (r != CL_SUCCESS)
    return cl_fail(dev, "clEnqueueMarkerWithWaitList", r);
  if (ev->u.handle)
    clReleaseEvent(ev->u.handle);
  ev->u.handle = e;
  ev->recorded = 1;
  ev->wall = 0;
  return 0;
}

static int ocl_lane_wait(poas__device *dev, int lane, poas__event *ev) {
  ocl_state *s = dev->priv;
  int rc = check_lane(dev, lane);
  if (rc || !ev->u.handle)
    return rc;
  cl_event e = ev->u.handle;
  cl_command_queue q = s->session->queue[lane], recorder = NULL;
  /* A command of one queue waiting on an event of another needs the other
   * flushed first (clFlush's specification): a driver that submits only
   * on a flush would never run the marker, and this lane would wait for
   * good. PoCL runs commands as they are enqueued, which hid it. */
  if (clGetEventInfo(e, CL_EVENT_COMMAND_QUEUE, sizeof recorder, &recorder, NULL) == CL_SUCCESS &&
      recorder && recorder != q)
    (void)clFlush(recorder);
  cl_int r = clEnqueueBarrierWithWaitList(q, 1, &e, NULL);
  return r == CL_SUCCESS ? 0 : cl_fail(dev, "clEnqueueBarrierWithWaitList", r);
}

static int ocl_event_sync(poas__device *dev, poas__event *ev) {
  if (!ev->u.handle)
    return 0;
  cl_event e = ev->u.handle;
  cl_int r = clWaitForEvents(1, &e);
  if (r != CL_SUCCESS)
    return cl_fail(dev, "clWaitForEvents", r);
  if (ev->wall == 0)
    ev->wall = poas__now();
  return 0;
}

static void ocl_event_destroy(poas__device *dev, poas__event *ev) {
  (void)dev;
  if (ev->u.handle)
    clReleaseEvent(ev->u.handle);
  ev->u.handle = NULL;
  ev->recorded = 0;
}

static int ocl_lane_sync(poas__device *dev, int lane) {
  ocl_state *s = dev->priv;
  int rc = check_lane(dev, lane);
  if (rc)
    return rc;
  /* A synced lane is idle: its scratch goes back until the next call (the
   * engine syncs every lane at the end of a run), so that room a run
   * planned for other buffers is not held by an earlier run's scratch.
   * Locked first: a call queued between the wait and the release would
   * read a released buffer. */
  pthread_mutex_lock(&s->scratch[lane].lock);
  cl_int r = clFinish(s->session->queue[lane]);
  if (r == CL_SUCCESS)
    drop_scratch(s, lane);
  pthread_mutex_unlock(&s->scratch[lane].lock);
  return r == CL_SUCCESS ? 0 : cl_fail(dev, "clFinish", r);
}

static void *ocl_native_lane(poas__device *dev, int lane) {
  ocl_state *s = dev->priv;
  return lane >= 0 && lane < dev->nlanes ? (void *)s->session->queue[lane] : NULL;
}

const poas__backend poas__backend_opencl = {
    .kind_name = "opencl",
    .kind = POAS_DEVICE_OPENCL,
    .built = 1,
    .count = ocl_count,
    .open = ocl_open,
    .close = ocl_close,
    .mem_alloc = ocl_mem_alloc,
    .mem_free = ocl_mem_free,
    .mem_available = ocl_mem_available,
    .copy_h2d = ocl_copy_h2d,
    .copy_d2h = ocl_copy_d2h,
    .gemm = ocl_gemm,
    .transpose = ocl_transpose,
    .event_create = ocl_event_create,
    .event_record = ocl_event_record,
    .lane_wait = ocl_lane_wait,
    .event_sync = ocl_event_sync,
    .event_destroy = ocl_event_destroy,
    .lane_sync = ocl_lane_sync,
    .native_lane = ocl_native_lane,
};
