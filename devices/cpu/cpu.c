/* cpu.c: the host CPU as a device, through OpenBLAS. It computes directly
 * on host memory (host_memory = 1), so the adapter gives it no copies. Its
 * one lane is the calling thread: every operation is synchronous and events
 * are always complete. With pin=1 (the default) the calling thread and
 * OpenBLAS's threads are bound with hwloc to the first `threads` cores of
 * those the process may run on (first_cores), so
 * that a device placed on the remaining cores (PoCL's, say) does not fight
 * over them, and small calls do not pay for threads woken on a far core;
 * where those cores are all the process may use, binding would change
 * nothing and is left out (poas__device.binds_caller).
 * They are bound to those cores as a set, not one thread to each core:
 * with each worker on a core of its own and the caller free among them,
 * the caller sometimes ran on a worker's core once calls alternated
 * between one thread and two (a call whose C has few rows or columns may
 * run on fewer, see threads_by_side in devices/device.h), and sgemm of
 * 2032 x 16 x 2032 took 1.14 times as long on two threads as on one,
 * against 0.55-0.60 with the threads bound as a set. (The caller bound to the
 * first core alone did as well, but moving it there and back cost a 64^3
 * sgemm 3 us.) On a quiet 2-core machine pinning costs nothing for large
 * calls (sgemm n = 4096: 247.0 pinned, 247.8 unpinned, 245.8 GFLOP/s for
 * plain cblas, with the workers bound one to a core);
 * on a machine shared with other busy processes pin=0 can be faster, since
 * the OS can then move a thread off a core someone else took. */
#include "devices/device.h"

#include "core/roundtrip.h"

/* cblas.h is OpenBLAS's: it declares openblas_set_num_threads and, with
 * _GNU_SOURCE, openblas_setaffinity. */
#include <cblas.h>
#include <hwloc.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct cpu_state {
  poas__device dev;
  hwloc_topology_t topo; /* machine_topology()'s, shared */
  hwloc_cpuset_t cpuset; /* the cores this device computes on */
  cpu_set_t mask;        /* the same, for OpenBLAS's workers */
  int threads;
  int pin;
} cpu_state;

/* 1 while OpenBLAS's workers are bound to fewer cores than the process
 * may use (a narrow device bound them): a device on all cores binds them
 * back before its next call on several threads. Process-wide, as the
 * workers are. */
static atomic_int workers_narrow;

/* OpenBLAS's thread count is process-wide, and each call sets the one it
 * runs on (bind_threads): the count the program had before the first cpu
 * device opened is given back when the last one closes, where a program's
 * own cblas calls after poas_finalize ran on one thread after a context of
 * cpu:threads=1. */
static pthread_mutex_t blas_threads_lock = PTHREAD_MUTEX_INITIALIZER;
static int blas_threads_users, blas_threads_found;

static void blas_threads_take(void) {
  pthread_mutex_lock(&blas_threads_lock);
  if (blas_threads_users++ == 0)
    blas_threads_found = openblas_get_num_threads();
  pthread_mutex_unlock(&blas_threads_lock);
}

static void blas_threads_give_back(void) {
  pthread_mutex_lock(&blas_threads_lock);
  if (--blas_threads_users == 0 && blas_threads_found > 0)
    openblas_set_num_threads(blas_threads_found);
  pthread_mutex_unlock(&blas_threads_lock);
}

/* A lease on OpenBLAS's thread count, held from setting it to the end of
 * the call that runs on it: calls that want the same count run side by
 * side, one that wants another waits until they are done. Without it, two
 * contexts calling from two threads ran on each other's count: in 3 to 5
 * of 40-60 square calls a cpu:threads=1 device's GEMM ran on two threads,
 * on the core it had left to another device (found by helper-67). */
static pthread_mutex_t lease_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t lease_free = PTHREAD_COND_INITIALIZER;
static int lease_threads, lease_users;

static void blas_lease_take(int threads) {
  pthread_mutex_lock(&lease_lock);
  while (lease_users > 0 && lease_threads != threads)
    pthread_cond_wait(&lease_free, &lease_lock);
  /* Set on every first taker: a program's own call (a baseline, a test)
   * may have changed it since. */
  if (lease_users++ == 0 && openblas_get_num_threads() != threads)
    openblas_set_num_threads(threads);
  lease_threads = threads;
  pthread_mutex_unlock(&lease_lock);
}

static void blas_lease_give(void) {
  pthread_mutex_lock(&lease_lock);
  if (--lease_users == 0)
    pthread_cond_broadcast(&lease_free);
  pthread_mutex_unlock(&lease_lock);
}

static int cpu_count(void) { return 1; }

/* The first PU of `core` the process may run on (may_use NULL: any), or
 * -1 when it may use none of them. */
static int usable_pu(hwloc_obj_t core, const cpu_set_t *may_use) {
  unsigned pu;
  hwloc_bitmap_foreach_begin(pu, core->cpuset) {
    if (!may_use || (pu < CPU_SETSIZE && CPU_ISSET(pu, may_use)))
      return (int)pu;
  }
  hwloc_bitmap_foreach_end();
  return -1;
}

/* The cores the process may run on (may_use NULL: all of them): its share
 * of the machine, where mpirun, taskset or a batch system bound it. */
static int core_count(hwloc_topology_t topo, const cpu_set_t *may_use) {
  int n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE), usable = 0;
  for (int i = 0; i < n; i++)
    usable += usable_pu(hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, (unsigned)i), may_use) >= 0;
  return usable > 0 ? usable : n > 0 ? n : (int)sysconf(_SC_NPROCESSORS_ONLN);
}

/* The machine's topology, loaded once for the process: a load took 3 ms
 * on the CI VM, and every context counts the usable cores and every cpu
 * device opened reads it. hwloc allows concurrent reads and bindings on a
 * loaded topology. NULL when hwloc cannot read it. */
static hwloc_topology_t machine_topo;
static pthread_once_t machine_topo_once = PTHREAD_ONCE_INIT;

static void load_machine_topo(void) {
  if (hwloc_topology_init(&machine_topo) != 0) {
    machine_topo = NULL;
  } else if (hwloc_topology_load(machine_topo) != 0) {
    hwloc_topology_destroy(machine_topo);
    machine_topo = NULL;
  }
}

static hwloc_topology_t machine_topology(void) {
  pthread_once(&machine_topo_once, load_machine_topo);
  return machine_topo;
}

int poas__host_usable_cores(void) {
  hwloc_topology_t topo = machine_topology();
  if (!topo)
    return (int)sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t may_use;
  return core_count(topo, sched_getaffinity(0, sizeof may_use, &may_use) == 0 ? &may_use : NULL);
}

static void fill_name(cpu_state *s) {
  hwloc_obj_t pkg = hwloc_get_obj_by_type(s->topo, HWLOC_OBJ_PACKAGE, 0);
  const char *model = pkg ? hwloc_obj_get_info_by_name(pkg, "CPUModel") : NULL;
  poas__strlcpy(s->dev.info.name, model ? model : "host CPU", sizeof s->dev.info.name);
  const char *cfg = openblas_get_config();
  poas__strlcpy(s->dev.info.driver, cfg ? cfg : "OpenBLAS", POAS__DRIVER_LEN);
}

/* The cpuset of the first `threads` cores the process may run on, one PU
 * each. Not simply the machine's first cores: two processes bound to
 * cores of their own (MPI ranks, by mpirun) each moved their threads to
 * core 0 and ran at half speed (2048^3 sgemm on cpu:threads=1, two
 * processes under taskset -c 0 and -c 1: 50.8 and 50.5 GFLOP/s, against
 * 102.1 and 94.5 unpinned). */
static hwloc_cpuset_t first_cores(hwloc_topology_t topo, const cpu_set_t *may_use, int threads) {
  hwloc_cpuset_t set = hwloc_bitmap_alloc();
  int ncores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  for (int i = 0, taken = 0; taken < threads && i < ncores; i++) {
    int pu = usable_pu(hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, (unsigned)i), may_use);
    if (pu >= 0)
      hwloc_bitmap_set(set, (unsigned)pu), taken++;
  }
  return set;
}

static int parse_settings(cpu_state *s, const poas__spec_entry *e, int ncores, char *err,
                          size_t errcap) {
  s->threads = ncores;
  s->pin = 1;
  const poas__int_setting known[] = {{"threads", 1, ncores, &s->threads}, {"pin", 0, 1, &s->pin}};
  return poas__spec_ints("cpu", e, known, 2, err, errcap);
}

static int cpu_open(int index, const poas__spec_entry *e, poas__device **out, char *err,
                    size_t errcap) {
  (void)index;
  cpu_state *s = calloc(1, sizeof *s);
  if (!s)
    return POAS_ENOMEM;
  if (!(s->topo = machine_topology())) {
    snprintf(err, errcap, "cpu: hwloc could not read the topology");
    free(s);
    return POAS_EDEVICE;
  }
  cpu_set_t may_use;
  int bound = sched_getaffinity(0, sizeof may_use, &may_use) == 0;
  int ncores = core_count(s->topo, bound ? &may_use : NULL);
  int rc = parse_settings(s, e, ncores, err, errcap);
  if (rc) {
    free(s);
    return rc;
  }
  s->cpuset = first_cores(s->topo, bound ? &may_use : NULL, s->threads);
  CPU_ZERO(&s->mask);
  unsigned pu;
  hwloc_bitmap_foreach_begin(pu, s->cpuset) {
    if (pu < CPU_SETSIZE)
      CPU_SET(pu, &s->mask);
  }
  hwloc_bitmap_foreach_end();
  /* With pin, binding is needed unless the device's cores are exactly
   * what the opening thread may run on (the cpu device on every core, the
   * usual case): a device on all of them binds nothing and leaves a
   * caller's own binding alone. Each binding is a system call (1-2 us on
   * the CI VM), and the four a call made were a third of a 16^3 sgemm's
   * cost through POAS. */
  int narrow = !bound || !CPU_EQUAL(&may_use, &s->mask);
  s->dev.binds_caller = s->pin && narrow;
  fill_name(s);
  /* A device of fewer cores than the process may use, left unbound, runs
   * where the kernel puts its threads: another device to a profile, which
   * tells devices apart by this string (as tf32=1 on a GPU). */
  if (!s->pin && narrow) {
    size_t len = strlen(s->dev.info.driver);
    snprintf(s->dev.info.driver + len, sizeof s->dev.info.driver - len, "%spin=0",
             len && s->dev.info.driver[len - 1] == ' ' ? "" : " ");
  }
  poas_device_info *info = &s->dev.info;
  hwloc_obj_t root = hwloc_get_root_obj(s->topo);
  info->memory_bytes = root->total_memory;
  info->cores = s->threads;
  s->dev.max_threads = s->threads;
  info->shares_host_cores = 1;
  info->host_memory = 1;
  /* A rough peak: 2 FMA units x 8 floats x 2 flops x ~2.5 GHz per core. */
  info->peak_gflops[POAS_FLOAT32] = 80.0 * s->threads;
  info->peak_gflops[POAS_FLOAT64] = 40.0 * s->threads;
  s->dev.nlanes = 1;
  s->dev.priv = s;
  blas_threads_take();
  *out = &s->dev;
  return 0;
}

static void cpu_close(poas__device *dev) {
  cpu_state *s = dev->priv;
  blas_threads_give_back();
  hwloc_bitmap_free(s->cpuset);
  free(s);
}

static int cpu_mem_alloc(poas__device *dev, size_t bytes, poas__mem *out) {
  (void)dev;
  void *p = NULL;
  if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
    return POAS_ENOMEM;
  out->ptr = p;
  return 0;
}

static void cpu_mem_free(poas__device *dev, poas__mem mem) {
  (void)dev;
  free(mem.ptr);
}

static void copy2d(char *dst, size_t dpitch, const char *src, size_t spitch, size_t width,
                   size_t rows) {
  for (size_t r = 0; r < rows; r++)
    memcpy(dst + r * dpitch, src + r * spitch, width);
}

static int cpu_copy_h2d(poas__device *dev, int lane, poas__mem dst, const void *src,
                        const poas__copy2d *c) {
  (void)dev, (void)lane;
  copy2d((char *)dst.ptr + c->dev_off, c->dev_pitch, src, c->host_pitch, c->width, c->rows);
  return 0;
}

static int cpu_copy_d2h(poas__device *dev, int lane, void *dst, poas__mem src,
                        const poas__copy2d *c) {
  (void)dev, (void)lane;
  copy2d(dst, c->host_pitch, (const char *)src.ptr + c->dev_off, c->dev_pitch, c->width, c->rows);
  return 0;
}

/* Binds the calling thread and OpenBLAS's workers to this device's cores
 * for a call on `threads` threads, whose count the caller's lease set
 * (blas_lease_take). */
static void bind_threads(cpu_state *s, int threads) {
  if (!s->pin)
    return;
  /* The caller and the OpenBLAS workers the call uses go to the device's
   * cores as a set, and the OS places them within it (see the top of the
   * file). On all the process's cores that changes nothing, unless a
   * narrow device bound the workers before. */
  int workers;
  if (s->dev.binds_caller) { /* on fewer cores than the process may use */
    hwloc_set_cpubind(s->topo, s->cpuset, HWLOC_CPUBIND_THREAD);
    if (threads < 2)
      return; /* no worker takes part */
    atomic_store(&workers_narrow, 1);
    workers = threads - 1;
  } else {
    if (threads < 2 || !atomic_exchange(&workers_narrow, 0))
      return;
    workers = s->threads - 1; /* all of them back, whatever this call uses */
  }
  for (int i = 0; i < workers; i++)
    openblas_setaffinity(i, sizeof s->mask, &s->mask);
}

/* One OpenBLAS call: every size and leading dimension fits blasint. */
static void blas_gemm(const poas__gemm_call *g) {
  enum CBLAS_TRANSPOSE ta = g->transa == POAS_TRANS ? CblasTrans : CblasNoTrans;
  enum CBLAS_TRANSPOSE tb = g->transb == POAS_TRANS ? CblasTrans : CblasNoTrans;
  if (g->dtype == POAS_FLOAT32) {
    cblas_sgemm(CblasColMajor, ta, tb, (blasint)g->m, (blasint)g->n, (blasint)g->k, (float)g->alpha,
                (const float *)((const char *)g->a.mem.ptr + g->a.off), (blasint)g->a.ld,
                (const float *)((const char *)g->b.mem.ptr + g->b.off), (blasint)g->b.ld,
                (float)g->beta, (float *)((char *)g->c.mem.ptr + g->c.off), (blasint)g->c.ld);
  } else {
    cblas_dgemm(CblasColMajor, ta, tb, (blasint)g->m, (blasint)g->n, (blasint)g->k, g->alpha,
                (const double *)((const char *)g->a.mem.ptr + g->a.off), (blasint)g->a.ld,
                (const double *)((const char *)g->b.mem.ptr + g->b.off), (blasint)g->b.ld, g->beta,
                (double *)((char *)g->c.mem.ptr + g->c.off), (blasint)g->c.ld);
  }
}

int64_t poas__cpu_blas_int_max = sizeof(blasint) >= 8 ? INT64_MAX : INT_MAX;

/* The side of the blocks a call past blasint runs as: small enough that a
 * block's compact copy of an operand stays a few MiB, large enough that
 * OpenBLAS runs each at its full rate. */
#define BLOCK_SIDE 2048

static int fits_blas(const poas__gemm_call *g, int64_t max) {
  return g->m <= max && g->n <= max && g->k <= max && g->a.ld <= max && g->b.ld <= max &&
         g->c.ld <= max;
}

/* The rows x cols block of `op` at (row, col), as an operand of its own:
 * the same memory where its ld fits blasint, else a compact copy in buf
 * (rows x cols elements; ld = rows) when copy_in, or only its place. */
static poas__operand block_of(poas__operand op, size_t es, int64_t row, int64_t col, int64_t rows,
                              int64_t cols, int64_t max, char *buf, int copy_in) {
  poas__operand b = op;
  b.off += ((size_t)row + (size_t)col * (size_t)op.ld) * es;
  if (op.ld <= max)
    return b;
  const char *src = (const char *)op.mem.ptr + b.off;
  if (copy_in)
    copy2d(buf, (size_t)rows * es, src, (size_t)op.ld * es, (size_t)rows * es, (size_t)cols);
  b.mem.ptr = buf, b.off = 0, b.ld = POAS__MAX(rows, 1);
  return b;
}

/* A call whose sizes or leading dimensions do not fit blasint (32 bits in
 * Debian's libopenblas; OpenBLAS would refuse such an argument, or worse,
 * take it cut to 32 bits and compute on the wrong elements): runs as
 * blocks of at most `side` rows, columns and depth, C's blocks summing
 * its depth's with beta 1 after the first, and an operand whose ld does
 * not fit copied, block by block, to a compact buffer (C's back). */
static int gemm_blocked(const poas__gemm_call *g, int64_t max) {
  int64_t side = POAS__MIN(max, BLOCK_SIDE);
  size_t es = poas__dtype_size(g->dtype), cap = (size_t)side * (size_t)side * es;
  char *buf[3] = {NULL, NULL, NULL};
  const int64_t ld[3] = {g->a.ld, g->b.ld, g->c.ld};
  for (int i = 0; i < 3; i++)
    if (ld[i] > max && !(buf[i] = malloc(cap))) {
      for (int j = 0; j < i; j++)
        free(buf[j]);
      return poas__fail(POAS_ENOMEM,
                        "cpu: no memory for a %zu-byte block of an operand whose "
                        "leading dimension %lld is past the BLAS's %lld",
                        cap, (long long)ld[i], (long long)max);
    }
  int ta = g->transa == POAS_TRANS, tb = g->transb == POAS_TRANS;
  for (int64_t i0 = 0; i0 < g->m; i0 += side) {
    int64_t mb = POAS__MIN(side, g->m - i0);
    for (int64_t j0 = 0; j0 < g->n; j0 += side) {
      int64_t nb = POAS__MIN(side, g->n - j0);
      poas__gemm_call c = *g;
      c.m = mb, c.n = nb;
      /* C's block is read only where beta asks for it, as BLAS does. */
      c.c = block_of(g->c, es, i0, j0, mb, nb, max, buf[2], g->beta != 0);
      int64_t l0 = 0;
      do { /* once at least: k = 0 still scales C by beta */
        c.k = POAS__MIN(side, g->k - l0);
        c.a = ta ? block_of(g->a, es, l0, i0, c.k, mb, max, buf[0], 1)
                 : block_of(g->a, es, i0, l0, mb, c.k, max, buf[0], 1);
        c.b = tb ? block_of(g->b, es, j0, l0, nb, c.k, max, buf[1], 1)
                 : block_of(g->b, es, l0, j0, c.k, nb, max, buf[1], 1);
        c.beta = l0 == 0 ? g->beta : 1;
        blas_gemm(&c);
        l0 += c.k;
      } while (l0 < g->k);
      if (buf[2]) /* C's compact block back to where it belongs */
        copy2d((char *)g->c.mem.ptr + g->c.off + ((size_t)i0 + (size_t)j0 * (size_t)g->c.ld) * es,
               (size_t)g->c.ld * es, buf[2], (size_t)mb * es, (size_t)mb * es, (size_t)nb);
    }
  }
  for (int i = 0; i < 3; i++)
    free(buf[i]);
  return 0;
}

static int cpu_gemm(poas__device *dev, int lane, const poas__gemm_call *g) {
  (void)lane;
  cpu_state *s = dev->priv;
  if (g->m == 0 || g->n == 0)
    return 0;
  /* A C of few rows or columns may run on fewer threads (see
   * threads_by_side). */
  int threads = s->threads,
      few = poas__few_threads(atomic_load_explicit(&dev->handoff_slow, memory_order_relaxed)
                                  ? dev->threads_slow_by_side
                                  : dev->threads_by_side,
                              g->dtype, g->m, g->n);
  if (few > 0)
    threads = POAS__MIN(threads, few);
  blas_lease_take(threads);
  bind_threads(s, threads);
  int64_t max = poas__cpu_blas_int_max;
  int rc = 0;
  if (fits_blas(g, max))
    blas_gemm(g);
  else
    rc = gemm_blocked(g, max);
  blas_lease_give();
  return rc;
}

/* For tests of adapt/'s transposed shared operand (the CPU's own GEMM
 * does not want one: OpenBLAS packs both operands on every call anyway). */
static int cpu_transpose(poas__device *dev, int lane, const poas__transpose_call *t) {
  (void)dev, (void)lane;
  if (t->rows == 0 || t->cols == 0)
    return 0;
  int64_t max = poas__cpu_blas_int_max;
  if (t->rows > max || t->cols > max || t->src.ld > max || t->dst.ld > max)
    return poas__fail(POAS_ENOTSUP,
                      "cpu: a transpose of %lld x %lld (ld %lld and %lld) is past "
                      "the BLAS's %lld",
                      (long long)t->rows, (long long)t->cols, (long long)t->src.ld,
                      (long long)t->dst.ld, (long long)max);
  if (t->dtype == POAS_FLOAT32)
    cblas_somatcopy(CblasColMajor, CblasTrans, (blasint)t->rows, (blasint)t->cols, 1.0f,
                    (const float *)((const char *)t->src.mem.ptr + t->src.off), (blasint)t->src.ld,
                    (float *)((char *)t->dst.mem.ptr + t->dst.off), (blasint)t->dst.ld);
  else
    cblas_domatcopy(CblasColMajor, CblasTrans, (blasint)t->rows, (blasint)t->cols, 1.0,
                    (const double *)((const char *)t->src.mem.ptr + t->src.off),
                    (blasint)t->src.ld, (double *)((char *)t->dst.mem.ptr + t->dst.off),
                    (blasint)t->dst.ld);
  return 0;
}

static int cpu_event_create(poas__device *dev, poas__event *ev) {
  memset(ev, 0, sizeof *ev);
  ev->dev = dev;
  return 0;
}

static int cpu_event_record(poas__device *dev, int lane, poas__event *ev) {
  (void)dev, (void)lane;
  ev->recorded = 1;
  ev->wall = poas__now();
  return 0;
}

static int cpu_nop_event(poas__device *dev, int lane, poas__event *ev) {
  (void)dev, (void)lane, (void)ev;
  return 0;
}

static int cpu_event_sync(poas__device *dev, poas__event *ev) {
  (void)dev, (void)ev;
  return 0;
}

static void cpu_event_destroy(poas__device *dev, poas__event *ev) { (void)dev, (void)ev; }

static int cpu_lane_sync(poas__device *dev, int lane) {
  (void)dev, (void)lane;
  return 0;
}

/* Between the device's first two cores; the two threads of a 2-core
 * device hand work over on exactly those. */
static double cpu_handoff_latency(poas__device *dev) {
  cpu_state *s = dev->priv;
  int first = hwloc_bitmap_first(s->cpuset);
  int second = first < 0 ? -1 : hwloc_bitmap_next(s->cpuset, first);
  return second < 0 ? 0 : poas__roundtrip_ns(first, second);
}

const poas__backend poas__backend_cpu = {
    .kind_name = "cpu",
    .kind = POAS_DEVICE_CPU,
    .built = 1,
    .count = cpu_count,
    .open = cpu_open,
    .close = cpu_close,
    .mem_alloc = cpu_mem_alloc,
    .mem_free = cpu_mem_free,
    .copy_h2d = cpu_copy_h2d,
    .copy_d2h = cpu_copy_d2h,
    .gemm = cpu_gemm,
    .transpose = cpu_transpose,
    .event_create = cpu_event_create,
    .event_record = cpu_event_record,
    .lane_wait = cpu_nop_event,
    .event_sync = cpu_event_sync,
    .event_destroy = cpu_event_destroy,
    .lane_sync = cpu_lane_sync,
    .handoff_latency = cpu_handoff_latency,
};
