/* device.h: the backend interface. Each backend (cpu, cuda, opencl, sim)
 * fills one static const poas__backend table with designated initializers;
 * the rest of the library drives devices only through these pointers and
 * never contains a backend's #ifdef.
 *
 * Model of a device:
 * - memory: buffers allocated on the device, named by a poas__mem handle
 *   (a device pointer, a cl_mem, or host memory for host_memory devices)
 *   plus a byte offset;
 * - lanes: in-order queues of work (a CUDA stream, an OpenCL command queue;
 *   on the CPU the calling thread itself). Operations on one lane run in
 *   submission order; operations on different lanes are ordered only
 *   through events;
 * - copies: 2-D strided blocks between host memory and device memory,
 *   asynchronous on a lane (the host memory must stay valid until an event
 *   recorded after the copy has completed);
 * - compute: column-major GEMM on device memory (the adapter turns
 *   row-major problems into column-major ones before they get here).
 *
 * A backend that is not built still compiles its registration file, whose
 * table reports zero devices, so the list of kinds is the same everywhere. */
#ifndef POAS_DEVICE_H
#define POAS_DEVICE_H

#include "core/core.h"
#include "poas.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* The most a real backend writes of its driver string, the terminating
 * null included: poas_device_info.driver had 64 bytes until a sim's settings
 * needed more, and profiles recorded the first 63 characters of an OpenBLAS
 * configuration; the whole of it would make every earlier profile's cpu0
 * another device. */
#define POAS__DRIVER_LEN 64

typedef struct poas__device poas__device;
typedef struct poas__backend poas__backend;
typedef struct poas__memcache poas__memcache;

/* Device memory: what mem_alloc returned. For host_memory devices, ptr is a
 * host address and poas__mem_host() wraps caller memory directly. */
typedef struct poas__mem {
  void *ptr;
} poas__mem;

static inline poas__mem poas__mem_host(const void *p) {
  poas__mem m = {(void *)(uintptr_t)p};
  return m;
}

/* An event: a point in one lane's stream of work. Backends store what they
 * need in the union; the scheduler only passes events around. */
typedef struct poas__event {
  poas__device *dev;
  union {
    void *handle;       /* cudaEvent_t, cl_event */
    double vtime;       /* sim: the virtual time the lane reached */
  } u;
  double wall;          /* host time at which it was seen complete, if known */
  int recorded;
} poas__event;

/* A GEMM operand: buffer, byte offset of its first element, leading
 * dimension in elements. Column-major. */
typedef struct poas__operand {
  poas__mem mem;
  size_t off;
  int64_t ld;
} poas__operand;

/* C = alpha op(A) op(B) + beta C, column-major, on device memory. */
typedef struct poas__gemm_call {
  poas_dtype dtype;
  poas_op transa, transb;
  int64_t m, n, k;
  double alpha, beta;
  poas__operand a, b, c;
} poas__gemm_call;

/* dst = src^T on device memory: src is `rows` x `cols` (column-major, ld
 * src.ld), dst `cols` x `rows` with ld dst.ld. */
typedef struct poas__transpose_call {
  poas_dtype dtype;
  int64_t rows, cols;
  poas__operand src, dst;
} poas__transpose_call;

/* A 2-D block copy: `rows` runs of `width` bytes, `pitch` bytes apart on
 * each side. */
typedef struct poas__copy2d {
  size_t width, rows;
  size_t host_pitch, dev_pitch;
  size_t dev_off;
  /* 1: one of a pipeline's tile copies, which run while copies go the
   * other way (adapt/gemm.c), and which plans lengthen by the device's
   * duplex factor (optimize/pipeline.c). A sim replaying a device spends
   * that factor on them; a backend that copies takes no notice. */
  int both_ways;
} poas__copy2d;

struct poas__backend {
  const char *kind_name;          /* "cpu", "cuda", "opencl", "sim" */
  poas_device_kind kind;
  int built;                      /* 0: compiled out, reports no devices */

  /* Number of physical devices of this kind present now (0 when none or not
   * built), or POAS_ENOMEM (negative) when the host had no memory to list
   * them. sim returns 0: every "sim" entry creates a new device. */
  int (*count)(void);
  /* Opens device `index` of this kind with the settings of a selection
   * entry (NULL for defaults). Unknown settings keys are an error: write a
   * message naming the bad key or value to err[errcap] and return
   * POAS_ESPEC. On success *out is a device whose info is filled. */
  int (*open)(int index, const poas__spec_entry *settings, poas__device **out, char *err,
              size_t errcap);
  void (*close)(poas__device *dev);

  /* Memory. mem_alloc returns POAS_ENOMEM when the device cannot provide
   * it. */
  int (*mem_alloc)(poas__device *dev, size_t bytes, poas__mem *out);
  void (*mem_free)(poas__device *dev, poas__mem mem);
  /* Optional: the bytes the device could allocate now (cudaMemGetInfo's
   * free), less than info.memory_bytes where other processes, or other
   * contexts of this one, hold some. NULL where it cannot tell. */
  int (*mem_available)(poas__device *dev, uint64_t *bytes);
  /* Optional: page-lock a host range for faster copies (cudaHostRegister);
   * NULL or an error means copies go from pageable memory. */
  int (*host_register)(poas__device *dev, void *p, size_t bytes);
  void (*host_unregister)(poas__device *dev, void *p);

  /* Work on lanes 0..info.nlanes-1; all asynchronous where the device
   * allows. */
  int (*copy_h2d)(poas__device *dev, int lane, poas__mem dst, const void *src,
                  const poas__copy2d *shape);
  int (*copy_d2h)(poas__device *dev, int lane, void *dst, poas__mem src,
                  const poas__copy2d *shape);
  int (*gemm)(poas__device *dev, int lane, const poas__gemm_call *call);
  /* An out-of-place transpose on a lane; required of a backend whose
   * devices set gemm_wants_bt, optional otherwise. */
  int (*transpose)(poas__device *dev, int lane, const poas__transpose_call *call);

  /* Events: record marks the current end of a lane; wait makes a lane wait
   * for an event (of the same device) without blocking the host; sync
   * blocks the host until the event completed. An event may be recorded
   * again after it completed. */
  int (*event_create)(poas__device *dev, poas__event *ev);
  int (*event_record)(poas__device *dev, int lane, poas__event *ev);
  int (*lane_wait)(poas__device *dev, int lane, poas__event *ev);
  int (*event_sync)(poas__device *dev, poas__event *ev);
  void (*event_destroy)(poas__device *dev, poas__event *ev);
  /* Blocks until everything submitted to the lane has completed. */
  int (*lane_sync)(poas__device *dev, int lane);
  /* Optional: the lane's native handle, handed to a task's device
   * implementation (cudaStream_t, cl_command_queue). */
  void *(*native_lane)(poas__device *dev, int lane);
  /* Optional: the round trip of a cache line between two of the host
   * cores the device computes on, in nanoseconds (core/roundtrip.h): how
   * plans tell the host's hand-off state before a run (api/run.c,
   * handoff_probe). 0 where it cannot be measured (one core). */
  double (*handoff_latency)(poas__device *dev);
};

/* An open device. The backend allocates it (with its own private state
 * after or beside it) and fills every field. */
struct poas__device {
  const poas__backend *be;
  poas_device_info info;
  int index;             /* position of this kind among the host's devices */
  int nlanes;            /* lanes available, at least 1 */
  int virtual_time;      /* sim: lane clocks are virtual, nothing sleeps */
  /* Host threads that may issue work to the lanes at once (0 means 1).
   * More than one where an issue call can hold the calling thread, as
   * CUDA's copies from pageable memory do for the whole copy: one thread
   * per lane, and one to wait on events, keeps the other lanes fed. */
  int issue_threads;
  /* The device's GEMM reads B in place only when it is transposed (op
   * POAS_TRANS) and A only when it is not: it copies either operand into
   * that layout first otherwise, on every call (CLBlast's indirect kernel).
   * adapt/ then stores a shared operand that arrives the other way
   * transposed, once per run, with the backend's transpose op, instead of
   * having every chunk's call copy it (see adapt/gemm.c). */
  int gemm_wants_bt;
  /* Largest tile of the split's non-shared operand (bytes) a GEMM call on
   * it should get; 0: no limit but memory. See devices/opencl/opencl.c. */
  uint64_t gemm_tile_bytes;
  /* By dtype: the side of the pieces of C, and of the steps over k, that
   * its GEMM runs a call in; 0 for whole calls. Devices that can_block
   * (the OpenCL backend's CPU devices, without block=N) take it from
   * their model: calibration measures whether pieces are faster
   * (predict/calibrate.c, choose_block), and the context sets it from the
   * profile. A device given block=N runs in those pieces and cannot. */
  int can_block;
  int gemm_block[2];
  /* Rows and columns its GEMM computes in one block: a chunk or tile that
   * is not a whole multiple is padded to one (0 or 1: none). The OpenCL
   * backend declares POAS__OCL_GEMM_ALIGN, and a sim that replays one of
   * its devices does too (predict/attach.c). */
  int gemm_align;
  /* The most elements its GEMM may index in one operand, each side of the
   * operand counted rounded up to a multiple of gemm_index_pad, and from
   * the start of its buffer where it lies at an offset; 0: no limit.
   * CLBlast hands sizes, offsets and leading dimensions to its kernels as
   * 32-bit ints (devices/opencl/opencl.c). Plans keep the shared operand
   * and every tile within it; the device refuses a call past it. */
  int64_t gemm_max_elems;
  int64_t gemm_index_pad;
  /* The largest single buffer it can allocate, in bytes (OpenCL's
   * CL_DEVICE_MAX_MEM_ALLOC_SIZE: 8 GiB of PoCL's 21 here, often a
   * quarter of a GPU's memory); 0: no limit but memory. Plans keep every
   * buffer a run allocates on it within it: the shared operand and its
   * transpose, and each tile of the other operand and of C (adapt/
   * gemm.c); past it the allocation fails mid-run with POAS_ENOMEM. */
  uint64_t max_buffer_bytes;
  /* Scratch its GEMM allocates per call, beside the operands; pad 0: none.
   * CLBlast's indirect kernel copies each operand that is not already in
   * its layout (sides whole multiples of its work-group tile, dense, at
   * offset 0, the way round it wants) into one temporary buffer, each
   * side rounded up to that tile (at most gemm_scratch_pad), for calls of
   * m n k from gemm_scratch_min_mnk on (below it, its direct kernel needs
   * none; 0: every call). The backend keeps that buffer per lane, through
   * poas__dev_alloc, and the calls queued on a lane share it (devices/
   * opencl/opencl.c, ocl_scratch); GEMMs run on one lane, so plans count
   * one such buffer against memory, the largest allocation and
   * gemm_max_elems, since its kernels index the one buffer as a whole
   * (optimize/split.c); past the allocation the call fails mid-run as
   * out of memory, past the index it reads and writes wrapped indices. */
  int64_t gemm_scratch_pad;
  int64_t gemm_scratch_min_mnk;
  /* Devices that run a GEMM on several host threads (the CPU's OpenBLAS):
   * the most a call may use (0 or 1: nothing to choose), and, for a C
   * whose short side s is at most POAS__FEW_SIDE, how many a call of
   * dtype dt runs on: threads_by_side[dt][side][s], side 0 for s rows,
   * 1 for s columns (the shorter side decides, columns on a tie:
   * poas__few_threads), 0 for all of them. Calibration measures which is
   * faster (OpenBLAS 0.3.21 on two cores ran sgemm of 4-12 columns up to
   * twice as fast on one thread, and calls of 4-30 rows 1.1-2.4x when the
   * VM let its two vCPUs meet slowly); the context sets it from the
   * profile. */
  int max_threads;
  /* 1: its GEMM binds the calling thread to the device's cores (the cpu
   * device on fewer cores than the process may use), so a caller that
   * runs it on its own thread gets its binding back after (schedule/
   * run.c). 0: it leaves the caller's binding alone. */
  int binds_caller;
  uint8_t threads_by_side[2][2][POAS__FEW_SIDE + 1];
  /* The same while the host is in the slow hand-off state (handoff_slow),
   * in which calls of few rows on two threads of the CI VM took 1.2-2.6x
   * their time on one (bench/results/handoff-latency-ci-2core-
   * 2026-11-24.md): the context sets it from its models
   * (poas__threads_slow_table). */
  uint8_t threads_slow_by_side[2][2][POAS__FEW_SIDE + 1];
  /* 1 while the context's last probe of the host found it slow (api/run.c,
   * handoff_probe); calls then run by threads_slow_by_side. */
  atomic_int handoff_slow;
  void *priv;            /* backend state */
  poas__memcache *cache; /* freed buffers kept for reuse; set by the registry */
  /* Why the device can do no more work in this process, once its backend
   * found so (poas__dev_mark_lost); read through poas__dev_lost. */
  char lost_why[160];
  atomic_int lost_state; /* 0, 1 while lost_why is written, 2 once it is */
};

/* d's GEMM declarations, and setting them (a replaying sim). */
void poas__dev_gemm_decl(const poas__device *d, poas__gemm_decl *out);
void poas__dev_set_gemm_decl(poas__device *d, const poas__gemm_decl *in);

/* --------------------------------------------------------- lost devices */

/* Marks d lost for the rest of the process, with why in words: a backend
 * calls it on an error after which the device can do no more work (a
 * CUDA error that corrupts its context), so that plans leave it out with
 * that reason (api/run.c) instead of giving it work that fails on every
 * call. The first call's reason is kept; thread-safe. Returns 1 for the
 * call that marked it, 0 when it was lost already. */
int poas__dev_mark_lost(poas__device *d, const char *why);
/* NULL, or why d was marked lost. */
const char *poas__dev_lost(const poas__device *d);

/* ---------------------------------------------------------- memory cache */

/* Device buffers outlive a run: poas__dev_free parks a buffer, and a later
 * poas__dev_alloc of about the same size takes it back, so a repeated GEMM
 * allocates nothing (cudaMalloc and cudaFree took 0.1 to 0.4 ms each on an
 * H100, and cudaFree waits for the whole device). A failed allocation
 * releases everything parked on its device and tries once more: the
 * device's own cache, and on a device that other contexts of the process
 * may have opened too (see poas__memcache_attach) theirs, whose idle
 * buffers would otherwise hold its memory from this context; closing the
 * device set releases the rest. Thread-safe. Devices opened without the
 * registry (cache NULL) allocate and free directly. */
int poas__dev_alloc(poas__device *d, size_t bytes, poas__mem *out);
void poas__dev_free(poas__device *d, poas__mem mem, size_t bytes);
/* poas__dev_free, unless the work that used the buffer failed (`failed`):
 * then it goes back to the backend, not to the cache, since the device
 * may be in no state to hand it out again. */
void poas__dev_release(poas__device *d, poas__mem mem, size_t bytes, int failed);
/* Releases every buffer parked on the device: its own cache's, and where
 * it is shared every other context's cache of it too. Calibration trims
 * before it measures the memory a device can allocate: another context's
 * parked buffers were measured as memory the device does not have. */
void poas__dev_trim(poas__device *d);
/* The bytes device d could allocate now, the buffers parked on it counted
 * as free, other contexts' too where it is shared (they are, to whoever
 * asks through poas__dev_alloc): 0, or -1 where its backend cannot tell
 * (mem_available NULL or failing). */
int poas__dev_available(poas__device *d, uint64_t *bytes);
/* The registry's: gives an opened device its cache, and releases it.
 * `shared`: the device is a physical one that other contexts of the
 * process may open as well (the same backend and index), whose memory,
 * where it has its own (not host memory), they then share. */
int poas__memcache_attach(poas__device *d, int shared);
void poas__memcache_detach(poas__device *d);

/* ------------------------------------------------------------- registry */

/* Every backend's table, always compiled (see each folder's register file). */
extern const poas__backend poas__backend_cpu;
extern const poas__backend poas__backend_cuda;
extern const poas__backend poas__backend_opencl;
extern const poas__backend poas__backend_sim;

/* The largest size or leading dimension the cpu device hands OpenBLAS in
 * one call (its blasint's: INT_MAX in Debian's 32-bit-index build); a
 * call past it runs as blocks within it. Tests lower it to run that path
 * on small matrices. */
extern int64_t poas__cpu_blas_int_max;

/* The host's cores the calling thread may run on (its affinity: where
 * mpirun, taskset or a batch system bound the process), counted by hwloc;
 * all of them when that cannot be read. The cpu device computes on them,
 * and devices that share the host's cores share these. */
int poas__host_usable_cores(void);

/* The backend for a kind name, or NULL. */
const poas__backend *poas__backend_find(const char *kind_name);

/* An opened set of devices. */
typedef struct poas__devset {
  int ndev;
  poas__device *dev[POAS_MAX_DEVICES];
} poas__devset;

/* Opens the devices a selection names (NULL text: every device present).
 * Ids are assigned per kind in order: cpu0, opencl0, opencl1, sim0...
 * A device named explicitly that cannot open is an error; one found by a
 * bare kind or by the default that fails is left out with a warning. */
int poas__devset_open(const char *selection, poas__devset *out, char *err, size_t errcap);
void poas__devset_close(poas__devset *set);

/* Convenience wrappers used by every caller, so a missing optional hook is
 * handled in one place. */
static inline int poas__dev_sync_all(poas__device *d) {
  int rc = 0;
  for (int l = 0; l < d->nlanes; l++) {
    int r = d->be->lane_sync(d, l);
    if (r && !rc)
      rc = r;
  }
  return rc;
}

#endif /* POAS_DEVICE_H */
