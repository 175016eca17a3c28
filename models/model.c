/* model.c: evaluating the GEMM and transfer models.
 *
 * Features (chosen by cross-validated fits of OpenBLAS on the CI machine,
 * and general enough for any BLAS): 1 (call overhead), 2mnk (the
 * arithmetic), mn (writing C), mk and nk (packing A and B: a thin block of
 * few rows still pays for packing all of B, which is what makes thin
 * blocks slower per flop than squares), 2nk min(m, 64) and 2mk min(n, 64)
 * (thin blocks lose parallelism: OpenBLAS runs a GEMM with fewer than 32
 * rows or columns per thread on one thread, and GPUs leave multiprocessors
 * idle; the extra cost grows with the short side until it saturates), and
 * the work wasted on partial 16x16 register tiles at the edges of C. All
 * are linear in the coefficients, so weighted linear least squares fits
 * them.
 *
 * The solver in optimize/ needs time to grow with m and n. With
 * non-negative coefficients every feature but the last does; the padding
 * feature does too as long as its coefficient is at most the arithmetic's
 * (then it only moves time from 2mnk towards the padded work), so the
 * evaluation caps it there.
 *
 * The thin-block table (model.h) is the exception, on purpose: a BLAS
 * really is faster at 16 columns than at 12. So the solver searches on the
 * smooth model (poas__model_gemm_smooth, through poas__pipe_init_search)
 * and reports its plan's times with the table. */
#include "models/model.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static double pad16(double x) { return ceil(x / 16.0) * 16.0; }

void poas__gemm_features(int64_t m, int64_t n, int64_t k, double f[POAS__GEMM_NFEAT]) {
  double dm = (double)m, dn = (double)n, dk = (double)k;
  f[0] = 1.0;
  f[1] = 2.0 * dm * dn * dk;
  f[2] = dm * dn;
  f[3] = dm * dk;
  f[4] = dn * dk;
  f[5] = 2.0 * dn * dk * POAS__MIN(dm, 64.0);
  f[6] = 2.0 * dm * dk * POAS__MIN(dn, 64.0);
  f[7] = 2.0 * pad16(dm) * pad16(dn) * dk - f[1];
}

/* Interned tables: a list that only grows, reachable from here until the
 * process ends. */
typedef struct thin_node {
  struct thin_node *next;
  poas__thin_table table;
} thin_node;

static thin_node *thin_list;
static pthread_mutex_t thin_lock = PTHREAD_MUTEX_INITIALIZER;

const poas__thin_table *poas__thin_intern(const poas__thin_table *t) {
  pthread_mutex_lock(&thin_lock);
  thin_node *n = thin_list;
  while (n && memcmp(&n->table, t, sizeof *t) != 0)
    n = n->next;
  if (!n && (n = malloc(sizeof *n)) != NULL) {
    n->table = *t;
    n->next = thin_list;
    thin_list = n;
  }
  pthread_mutex_unlock(&thin_lock);
  return n ? &n->table : NULL;
}

double poas__thin_factor(const poas__thin_table *tt, int64_t m, int64_t n) {
  int side;
  int64_t s = tt ? poas__short_side(m, n, POAS__THIN_MAX, &side) : 0;
  return s ? tt->factor[side][s - 1] : 1;
}

const poas__gemm_model *poas__gemm_model_for(const poas__device_model *dm, poas_dtype dtype,
                                             poas_op ta, poas_op tb) {
  const poas__gemm_model *gm = &dm->gemm[dtype == POAS_FLOAT64][poas__gemm_pair(ta, tb)];
  return gm->valid ? gm : &dm->gemm[dtype == POAS_FLOAT64][0];
}

/* The smooth model's seconds on model gm. */
static double smooth_time(const poas__gemm_model *gm, int64_t m, int64_t n, int64_t k) {
  if (m <= 0 || n <= 0)
    return 0;
  double f[POAS__GEMM_NFEAT], t = 0;
  poas__gemm_features(m, n, k, f);
  for (int i = 0; i < POAS__GEMM_NFEAT - 1; i++)
    t += gm->coef[i] * f[i];
  t += POAS__MIN(gm->coef[7], POAS__MAX(gm->coef[1], 0)) * f[7];
  /* A fit can dip below its own overhead on tiny shapes; time is never
   * less than the arithmetic at the fitted rate, nor negative. */
  double floor_t = gm->coef[1] > 0 ? gm->coef[1] * f[1] : 0;
  return t > floor_t ? t : floor_t;
}

int poas__handoff_latency_slow(const poas__device_model *dm, double ns) {
  double quick = dm->handoff_latency_ns[0], slow = dm->handoff_latency_ns[1];
  double threshold = quick > 0 && slow > quick ? sqrt(quick * slow)
                     : quick > 0               ? 2 * quick
                     : slow > 0                ? slow / 2
                                               : 0;
  if (!(threshold > 0) || !(ns > 0))
    return -1;
  return ns > threshold;
}

/* The quick state's time of a call that took `t` in the slow one is at
 * least this share of it: OpenBLAS's thinnest calls on the CI VM's two
 * threads took 2-3.6x as long in the slow state
 * (bench/results/handoff-state-fit-ci-2core-2026-11-24.md). */
#define HANDOFF_QUICK_MIN 0.25

int64_t poas__moved_to_one(const poas__device_model *dm, poas_dtype dtype, int64_t m, int64_t n,
                           int *side) {
  int64_t s = poas__short_side(m, n, POAS__FEW_SIDE, side);
  int dt = dtype == POAS_FLOAT64;
  return s && dm->threads_slow[dt][*side][s] && !dm->threads_by_side[dt][*side][s] &&
                 dm->one_thread[dt][*side][s] > 0
             ? s
             : 0;
}

double poas__model_gemm_time_in(const poas__device_model *dm, double shift, int slow,
                                poas_dtype dtype, poas_op ta, poas_op tb, int64_t m, int64_t n,
                                int64_t k) {
  const poas__gemm_model *gm = poas__gemm_model_for(dm, dtype, ta, tb);
  int side;
  int64_t s = slow ? poas__moved_to_one(dm, dtype, m, n, &side) : 0;
  if (s) /* on one thread, which hands nothing over */
    return dm->one_thread[dtype == POAS_FLOAT64][side][s] * (double)(side ? m : n) * (double)k;
  double t = smooth_time(gm, m, n, k) * poas__thin_factor(gm->thin, m, n);
  double extra = dm->handoff_extra[dtype == POAS_FLOAT64];
  /* Calls the threads table puts on fewer threads hand nothing over. */
  if (shift && extra > 0 && m > 0 && n > 0 && k > 0 &&
      !poas__few_threads(dm->threads_by_side, dtype, m, n)) {
    double shifted = t + shift * extra * (double)n * (double)k;
    t = POAS__MAX(shifted, HANDOFF_QUICK_MIN * t);
  }
  return t;
}

double poas__model_gemm_time(const poas__device_model *dm, poas_dtype dtype, poas_op ta,
                             poas_op tb, int64_t m, int64_t n, int64_t k) {
  return poas__model_gemm_time_in(dm, dm->handoff_shift, dm->handoff_slow_now, dtype, ta, tb, m, n,
                                  k);
}

void poas__threads_slow_table(poas__device_model *dm) {
  memcpy(dm->threads_slow, dm->threads_by_side, sizeof dm->threads_slow);
  if (!(dm->handoff_timings > 0))
    return;
  /* The slow state at its calibrated strength, relative to the state the
   * models were fitted to (api/run.c, handoff_shift_in). */
  double shift = poas__handoff_fits_slow(dm->handoff_timings, dm->handoff_slow) ? 0 : 1;
  const int64_t l = POAS__THREADS_SLOW_REF;
  for (int dt = 0; dt < 2; dt++) {
    if (!(dm->handoff_extra[dt] > 0) || !dm->gemm[dt][0].valid)
      continue;
    for (int side = 0; side < 2; side++)
      for (int s = 1; s <= POAS__FEW_SIDE; s++) {
        if (dm->threads_by_side[dt][side][s] || !(dm->one_thread[dt][side][s] > 0))
          continue;
        int64_t m = side ? l : s, n = side ? s : l;
        double all = poas__model_gemm_time_in(dm, shift, 0, (poas_dtype)dt, POAS_NO_TRANS,
                                              POAS_NO_TRANS, m, n, l);
        double one = dm->one_thread[dt][side][s] * (double)l * (double)l;
        dm->threads_slow[dt][side][s] = one < all;
      }
  }
}

double poas__model_gemm_smooth(const poas__device_model *dm, poas_dtype dtype, poas_op ta,
                               poas_op tb, int64_t m, int64_t n, int64_t k) {
  return smooth_time(poas__gemm_model_for(dm, dtype, ta, tb), m, n, k);
}

static double transfer_model_time(const poas__transfer_model *tm, double bytes) {
  if (!tm->valid || bytes <= 0)
    return 0;
  if (tm->knee_bytes > 0 && bytes > tm->knee_bytes)
    return tm->latency + tm->knee_bytes / tm->bandwidth +
           (bytes - tm->knee_bytes) / tm->bandwidth_beyond;
  return tm->latency + bytes / tm->bandwidth;
}

double poas__model_transfer_time(const poas__device_model *dm, poas_direction dir, double bytes) {
  return transfer_model_time(&dm->xfer[dir == POAS_D2H], bytes);
}

double poas__model_transpose_time(const poas__device_model *dm, poas_dtype dtype, double bytes) {
  poas_dtype other = dtype == POAS_FLOAT32 ? POAS_FLOAT64 : POAS_FLOAT32;
  if (dm->transpose[dtype].valid)
    return transfer_model_time(&dm->transpose[dtype], bytes);
  if (dm->transpose[other].valid)
    return transfer_model_time(&dm->transpose[other], bytes / (double)poas__dtype_size(dtype) *
                                                          (double)poas__dtype_size(other));
  return poas__model_transfer_time(dm, POAS_H2D, bytes);
}

void poas__gemm_model_from_rate(poas__gemm_model *gm, double flops_per_s, double overhead_s) {
  *gm = (poas__gemm_model){0};
  gm->valid = 1;
  gm->coef[0] = overhead_s;
  gm->coef[1] = 1.0 / flops_per_s;
}

void poas__device_model_from_rates(poas__device_model *dm, poas__model_source source,
                                   const double flops_per_s[2], double overhead_s,
                                   double latency_s, double bandwidth) {
  *dm = (poas__device_model){0};
  dm->source = source;
  for (int dt = 0; dt < 2; dt++)
    for (int pair = 0; pair < 4; pair++)
      poas__gemm_model_from_rate(&dm->gemm[dt][pair], flops_per_s[dt], overhead_s);
  for (int dir = 0; dir < 2 && bandwidth > 0; dir++)
    dm->xfer[dir] = (poas__transfer_model){.valid = 1, .latency = latency_s, .bandwidth = bandwidth};
}

static void scale_rate(poas__transfer_model *t, double factor) {
  if (!t->valid)
    return;
  t->latency *= factor;
  t->bandwidth /= factor;
  t->bandwidth_beyond /= factor;
}

void poas__device_model_scale(poas__device_model *dm, poas_dtype dtype, double factor) {
  for (int pair = 0; pair < 4; pair++)
    for (int f = 0; f < POAS__GEMM_NFEAT; f++)
      dm->gemm[dtype][pair].coef[f] *= factor;
  dm->handoff_extra[dtype] *= factor;
  for (int dir = 0; dir < 2; dir++) {
    scale_rate(&dm->xfer[dir], factor);
    scale_rate(&dm->xfer_pinned[dir], factor);
  }
  for (int dt = 0; dt < 2; dt++)
    scale_rate(&dm->transpose[dt], factor);
}
