/* contention.c: how much devices that share the host's cores slow each
 * other down. The CPU device and a CPU OpenCL device limited to the other
 * cores do not share cores, but they share caches, memory bandwidth and the
 * host's scheduler: on the 2-core CI machine class, OpenBLAS on one core ran
 * 10-13% slower while PoCL computed on the other, and PoCL 14-17% slower.
 * A plan that ignores this predicts co-execution gains that do not exist.
 *
 * The probe times an sgemm on each device alone, then on all of them at
 * once, each from its own thread (as the scheduler drives them), and gives
 * each device the ratio of its times. Each computes what a device computes
 * in a real split by columns: all PROBE_N rows of C, over the whole
 * PROBE_N x PROBE_N A (16 MiB), for a band of as many columns as it
 * computes in about PROBE_CALL_S (all PROBE_N for a fast device). A slow
 * device's thin band still streams the whole A, as it does in a split:
 * with small squares instead (1088^3 for a one-core PoCL device, which
 * stays in the caches), a CPU beside PoCL measured 0.6% and 1.9% while a
 * split between them ran 5-15% slower than its parts alone; with 768^3,
 * 0.3% and 1.3%. A device with its own memory also copies its band of B
 * in and its band of C out on every call, as its pipeline does: on a CPU
 * OpenCL device those copies are memory traffic on the host's cores too.
 *
 * Sims in virtual time are timed by their lane's clock, and compute
 * together as a run's sims do (poas__sim_beside): a replay's calibration
 * then measures the contention the sim spends, where the wall's time of
 * its bookkeeping gave cpu0 and opencl0 of the EPYC pair 2.37 and 1.79
 * against the profile's 1.0198 and none. */
#include "devices/sim/sim.h"
#include "predict/predict.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Seconds each device computes alone, and all of them together; a
 * calibration short of time shrinks both, to WINDOW_MIN of them at the
 * least (window_scale). */
#define ALONE_S 1.0
#define TOGETHER_S 2.0
#define WINDOW_MIN 0.5
#define PROBE_CALL_S 0.25
#define PROBE_N 2048

/* Where the probes wait to start together; `abort` sends them home when
 * not all of them could be started. */
typedef struct gate {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int open, abort;
} gate;

typedef struct probe {
  poas__device *dev;
  poas__mem a, b, c;
  double deadline;   /* poas__now() at which to stop */
  int64_t w;          /* columns of the probe's band of B and C */
  float *host;        /* staging for the copies of a device with its own memory */
  gate *start;
  int calls;
  double busy;       /* seconds spent in completed calls */
  int rc;
} probe;

/* Whether the device runs its part as adapt/ gives it to a device whose
 * GEMM wants B transposed: a band of rows of A and C against the whole
 * of B, stored transposed (one PoCL core runs that 1.3-1.5x faster than
 * a band of columns over the whole of A, and slows beside the CPU by a
 * different amount). */
static int rows_band(const probe *p) { return p->dev->gemm_wants_bt; }

static int probe_gemm(probe *p) {
  poas__gemm_call g = {.dtype = POAS_FLOAT32, .transa = POAS_NO_TRANS, .transb = POAS_NO_TRANS,
                       .m = PROBE_N, .n = p->w, .k = PROBE_N, .alpha = 1, .beta = 0,
                       .a = {p->a, 0, PROBE_N}, .b = {p->b, 0, PROBE_N},
                       .c = {p->c, 0, PROBE_N}};
  if (rows_band(p)) {
    g.transb = POAS_TRANS, g.m = p->w, g.n = PROBE_N;
    g.a.ld = g.c.ld = p->w;
  }
  /* Column-major bands of B (k x w) and C (m x w), or of A (w x k) and C
   * (w x n) with ld w, are contiguous. */
  size_t bytes = (size_t)(PROBE_N * p->w) * sizeof(float);
  poas__copy2d c = {bytes, 1, bytes, bytes, 0, 0};
  poas__mem in = rows_band(p) ? p->a : p->b;
  int rc = p->host ? p->dev->be->copy_h2d(p->dev, 0, in, p->host, &c) : 0;
  if (!rc)
    rc = p->dev->be->gemm(p->dev, 0, &g);
  if (!rc && p->host)
    rc = p->dev->be->copy_d2h(p->dev, 0, p->host, p->c, &c);
  return rc ? rc : p->dev->be->lane_sync(p->dev, 0);
}

/* The clock of the probe's lane: its own in virtual time, else the wall. */
static double probe_clock(const probe *p) {
  return p->dev->virtual_time ? poas__sim_lane_clock(p->dev, 0) : poas__now();
}

/* Computes until the deadline; counts the calls that completed. */
static void *probe_loop(void *arg) {
  probe *p = arg;
  if (p->start) {
    pthread_mutex_lock(&p->start->lock);
    while (!p->start->open)
      pthread_cond_wait(&p->start->cond, &p->start->lock);
    int abort = p->start->abort;
    pthread_mutex_unlock(&p->start->lock);
    if (abort)
      return NULL;
  }
  p->calls = 0, p->busy = 0;
  double t0 = probe_clock(p);
  while (!p->rc && poas__now() < p->deadline) {
    p->rc = probe_gemm(p);
    if (!p->rc)
      p->calls++;
  }
  p->busy = probe_clock(p) - t0;
  return NULL;
}

static int probe_open(probe *p, poas__device *dev) {
  memset(p, 0, sizeof *p);
  p->dev = dev;
  size_t bytes = (size_t)PROBE_N * PROBE_N * sizeof(float);
  enum { CHUNK = 4 << 20 };
  float *host = malloc(CHUNK);
  int rc = host ? 0
                : poas__fail(POAS_ENOMEM, "%s: no memory for the contention probe",
                             dev->info.id);
  for (size_t i = 0; host && i < CHUNK / sizeof(float); i++)
    host[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
  poas__mem *m[3] = {&p->a, &p->b, &p->c};
  for (int i = 0; !rc && i < 3; i++)
    if ((rc = dev->be->mem_alloc(dev, bytes, m[i])) == POAS_ENOMEM)
      rc = poas__fail(rc, "%s: no room for the contention probe's %zu MiB", dev->info.id,
                      3 * bytes >> 20);
  for (int i = 0; !rc && i < 3; i++)
    for (size_t off = 0; !rc && off < bytes; off += CHUNK) {
      poas__copy2d c = {CHUNK, 1, CHUNK, CHUNK, off, 0};
      if (dev->info.host_memory)
        memcpy((char *)m[i]->ptr + off, host, CHUNK);
      else
        rc = dev->be->copy_h2d(dev, 0, *m[i], host, &c);
    }
  if (!rc)
    rc = dev->be->lane_sync(dev, 0);
  if (!rc && !dev->info.host_memory && !(p->host = malloc(bytes)))
    rc = poas__fail(POAS_ENOMEM, "%s: no memory for the contention probe's results",
                    dev->info.id);
  if (p->host)
    memset(p->host, 0, bytes);
  /* Warm-up (threads started, kernels compiled), then the band that
   * takes about PROBE_CALL_S at the rate of a 64-column one. */
  p->w = 64;
  if (!rc)
    rc = probe_gemm(p);
  double t0 = poas__now();
  if (!rc)
    rc = probe_gemm(p);
  double t = poas__now() - t0;
  int64_t w = t > 0 ? (int64_t)(64 * PROBE_CALL_S / t) / 32 * 32 : PROBE_N;
  /* Not past the tiles the device's calls are cut to. */
  if (dev->gemm_tile_bytes)
    w = POAS__MIN(w, (int64_t)(dev->gemm_tile_bytes / (PROBE_N * sizeof(float))) / 32 * 32);
  p->w = POAS__MIN(POAS__MAX(w, 32), PROBE_N);
  if (!rc)
    rc = probe_gemm(p); /* pages of the wider band touched */
  free(host);
  return rc;
}

static void probe_close(probe *p) {
  free(p->host);
  poas__mem *m[3] = {&p->c, &p->b, &p->a};
  for (int i = 0; i < 3; i++)
    if (m[i]->ptr)
      p->dev->be->mem_free(p->dev, *m[i]);
}

/* Seconds per call, or 0 when none completed. */
static double per_call(const probe *p) { return p->calls ? p->busy / p->calls : 0; }

/* What the probes' windows are scaled by for n devices to end by end_s
 * (poas__now()'s clock; 0 for no end): 1 where they fit, else what
 * leaves the slowest call's time (about PROBE_CALL_S) for the last
 * together window to overrun by, WINDOW_MIN at the least. At full length
 * the probes of cpu0 and PoCL on the 2-core CI machine took 4.9 s of a
 * quick calibration's minute. */
static double window_scale(int n, double end_s) {
  if (!(end_s > 0))
    return 1;
  double left = end_s - poas__now() - 2 * PROBE_CALL_S;
  double f = left / (n * ALONE_S + TOGETHER_S);
  return POAS__MIN(POAS__MAX(f, WINDOW_MIN), 1.0);
}

int poas__calibrate_contention(poas__device *const *devs, int n, double end_s, double *factor) {
  double window = window_scale(n, end_s);
  if (window < 1)
    poas__debug("calibration: contention windows scaled by %.2f to end in time", window);
  probe *p = calloc((size_t)n, sizeof *p);
  pthread_t *th = calloc((size_t)n, sizeof *th);
  double *alone = calloc((size_t)n, sizeof *alone);
  int rc = p && th && alone
               ? 0
               : poas__fail(POAS_ENOMEM, "calibration: no memory for the contention probes");
  int opened = 0;
  for (; !rc && opened < n; opened++)
    rc = probe_open(&p[opened], devs[opened]);
  for (int i = 0; !rc && i < n; i++) {
    p[i].deadline = poas__now() + ALONE_S * window;
    probe_loop(&p[i]);
    rc = p[i].rc;
    alone[i] = per_call(&p[i]);
  }
  if (!rc) {
    gate start = {.open = 0, .abort = 0};
    pthread_mutex_init(&start.lock, NULL);
    pthread_cond_init(&start.cond, NULL);
    int started = 0;
    for (int i = 0; i < n; i++) {
      poas__sim_beside(devs[i], 1);
      p[i].start = &start;
      if (pthread_create(&th[i], NULL, probe_loop, &p[i]) != 0)
        break;
      started++;
    }
    /* Every probe computes beside the others for at least its window
     * (TOGETHER_S, scaled): the deadline leaves the slowest single call on
     * top of it. */
    double longest = 0;
    for (int i = 0; i < n; i++)
      longest = POAS__MAX(longest, alone[i]);
    double deadline = poas__now() + TOGETHER_S * window + longest;
    for (int i = 0; i < n; i++)
      p[i].deadline = deadline;
    pthread_mutex_lock(&start.lock);
    start.open = 1;
    start.abort = started < n; /* all of them together, or none */
    pthread_cond_broadcast(&start.cond);
    pthread_mutex_unlock(&start.lock);
    for (int i = 0; i < started; i++)
      pthread_join(th[i], NULL);
    for (int i = 0; i < n; i++)
      poas__sim_beside(devs[i], 0);
    pthread_cond_destroy(&start.cond);
    pthread_mutex_destroy(&start.lock);
    if (started < n)
      rc = poas__fail(POAS_ENOMEM, "calibration: cannot start a thread per device");
    for (int i = 0; !rc && i < n; i++)
      rc = p[i].rc;
  }
  for (int i = 0; !rc && i < n; i++) {
    double together = per_call(&p[i]);
    double f = alone[i] > 0 && together > 0 ? together / alone[i] : 1;
    factor[i] = POAS__MIN(POAS__MAX(f, 1.0), 10.0);
    poas__info("%s: %.3g ms per %dx%lldx%d sgemm alone, %.3g ms beside the others: "
               "contention %.3f",
               devs[i]->info.id, alone[i] * 1e3, PROBE_N, (long long)p[i].w, PROBE_N,
               together * 1e3, factor[i]);
  }
  for (int i = 0; i < opened; i++)
    probe_close(&p[i]);
  free(alone);
  free(th);
  free(p);
  return rc;
}
