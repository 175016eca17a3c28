/* model.h: the performance models of one device and the profile that
 * stores them. A model is numbers and formulas only: it says how long a
 * GEMM of a shape, or a copy of some bytes, takes on a device. Calibration
 * (predict/) fits the numbers; optimize/ and adapt/ evaluate them.
 *
 * GEMM model: t = sum_i coef[i] * feature_i(m, n, k), one coefficient set
 * per dtype and per transpose pair, with the features chosen in model.c so
 * that thin blocks (few rows, full n and k) are predicted as well as
 * squares. Transfer model: t = latency + bytes / bandwidth, per direction,
 * with a second, lower rate past a knee where calibration found one. */
#ifndef POAS_MODEL_H
#define POAS_MODEL_H

#include "core/core.h"

#define POAS__GEMM_NFEAT 8
/* Short sides a thin-block table covers: 1 to POAS__THIN_MAX. Calibration
 * times every side up to POAS__THIN_DENSE and every POAS__THIN_STEP-th
 * beyond (the pattern's period is 16, its peak at 12 mod 16, its trough
 * at 0), and fills the sides between by linear interpolation. */
#define POAS__THIN_MAX 256
#define POAS__THIN_DENSE 64
#define POAS__THIN_STEP 4
/* Bounds of a thin-block factor: OpenBLAS's worst short sides measured
 * 2.2x its smooth model and its best 0.4x; beyond these a factor says
 * more about a disturbed calibration than about the BLAS. */
#define POAS__THIN_FACTOR_MIN 0.05
#define POAS__THIN_FACTOR_MAX 20.0

/* How a model came to be, from best to worst. */
typedef enum poas__model_source {
  POAS__MODEL_NONE = 0,      /* nothing known */
  POAS__MODEL_BUILTIN = 1,   /* rough estimate from the device's info */
  POAS__MODEL_EXACT = 2,     /* a sim device's own parameters */
  POAS__MODEL_CALIBRATED = 3 /* fitted from measurements (a profile) */
} poas__model_source;

/* How well a fit describes its measurements: samples measured (training
 * and held out together), R^2 of the weighted fit on the training samples,
 * and the median and largest relative error |predicted - measured| /
 * measured on the held-out samples. timing_noise is how much the machine
 * itself moved while they were measured: over the samples, the median of
 * each one's median |one timing - its median| / median across the sweep's
 * passes (poas__timing_noise). A held-out error near it is the machine's,
 * not the model's. All 0 when not calibrated; timing_noise 0 also when
 * not measured (one pass, or a profile written before it was). */
typedef struct poas__fit_stats {
  int samples;
  double r2, heldout_median, heldout_max;
  double timing_noise;
} poas__fit_stats;

/* A block with a short side of at most POAS__THIN_MAX rows or columns
 * does not cost what a smooth model says: a BLAS deals its columns to
 * threads and its rows to register tiles, and its time goes up and down
 * with the short side, period 16 (OpenBLAS, two threads, sgemm of 1400 x
 * n x 900: n = 12 takes 2.5x n = 16; n = 76 1.3x its smooth model and n =
 * 80 0.9x; m = 68 to 200, 0.74x to 0.9x). Calibration times one such block
 * per short side and keeps measured / model: factor[0][s - 1] for s rows
 * (m = s), factor[1][s - 1] for s columns (n = s). One per dtype and
 * transpose pair: the pattern differs between pairs (OpenBLAS's 12-column
 * dgemm took 1.03x its NN factor's prediction in NN and 1.46x in TT).
 *
 * Tables are immutable and interned (poas__thin_intern): models, which
 * are copied by value into every plan and every run, hold a pointer, not
 * the 1 KiB (held inline, the tables made a 64^3 sgemm's fixed cost 18 us
 * instead of 12 on the CI machine, in the copies of plans and models). */
typedef struct poas__thin_table {
  double factor[2][POAS__THIN_MAX];
} poas__thin_table;

typedef struct poas__gemm_model {
  int valid;
  double coef[POAS__GEMM_NFEAT];
  /* Applied on top of the coefficients' smooth time; NULL: none. Interned,
   * so it outlives every model that points at it. */
  const poas__thin_table *thin;
  poas__fit_stats fit; /* from calibration; all 0 when not calibrated */
} poas__gemm_model;

typedef struct poas__transfer_model {
  int valid;
  double latency;   /* seconds per copy */
  double bandwidth; /* bytes per second */
  /* Pageable copies change rate with size (slower once they outgrow the
   * host's caches, faster as fixed costs amortise): the bytes of a copy
   * past knee_bytes move at bandwidth_beyond. knee_bytes 0: one rate. */
  double knee_bytes, bandwidth_beyond;
  poas__fit_stats fit;
} poas__transfer_model;

typedef struct poas__device_model {
  poas__model_source source;
  /* gemm[dtype][transpose pair]: pair = (transa == T) + 2 * (transb == T). */
  poas__gemm_model gemm[2][4];
  /* Fit quality over all transpose pairs of a dtype (pooled samples). */
  poas__fit_stats gemm_fit[2];
  /* By poas_direction: copies from ordinary (pageable) host memory, which
   * is what predictions use, and from page-locked memory where the device
   * can register it (valid only when measured and different). */
  poas__transfer_model xfer[2];
  poas__transfer_model xfer_pinned[2];
  /* An on-device transpose of a matrix of that many bytes (the shared
   * operand's, for devices whose GEMM wants it transposed: adapt/gemm.c),
   * by dtype: its cost goes by elements more than by bytes (one PoCL core
   * took 2.4x as long per byte for floats as for doubles), so each dtype
   * has its own; valid only where measured. */
  poas__transfer_model transpose[2];
  uint64_t memory_bytes;        /* what calibration could really allocate */
  /* How much slower its GEMMs and copies run while another device that
   * shares the host's cores computes at the same time (caches, memory
   * bandwidth, the host threads of a CPU OpenCL driver): a time factor,
   * measured by calibrating such devices together; 0 or 1 when none was
   * measured. */
  double contention;
  /* How much longer its copies take while copies run the other way at the
   * same time (the directions share the host's memory bandwidth and, when
   * the backend stages them, its copy threads): a time factor for the
   * tiles' copies in a pipeline, measured by calibration; 0 or 1 when not
   * measured. */
  double duplex;
  /* Threads a call of dtype dt whose C has a short side of s <=
   * POAS__FEW_SIDE rows (side 0) or columns (side 1) runs on,
   * [dt][side][s], 0 for all the device's (see poas__device): measured by
   * calibration on devices with a choice, and the GEMM models are fitted
   * to what the device then does. All 0 when not measured. */
  uint8_t threads_by_side[2][2][POAS__FEW_SIDE + 1];
  /* The runtime's fixed cost of a run on the device, beyond the GEMM and
   * copy models: planning, threads handing work over, events. Measured by
   * poas_calibrate end to end on a tiny GEMM; 0 when not measured. */
  double dispatch_s;
  /* What a run through the engine (several devices, or several tiles)
   * costs beyond that: its threads and their hand-offs. Measured the same
   * way with the engine forced; 0 when not measured. */
  double engine_s;
  /* How far the median of those runs strayed above the costs taken (see
   * poas__run_costs): a machine busy while they were measured. Not kept
   * in profiles; 0 when not measured. */
  double run_cost_spread_s;
  /* Passes of calibration's GEMM sweep, timed and planned: fewer timed
   * where the calibration ran short of its time (poas__calib_opts.end_s).
   * Both 0 when not known (a model from a profile, which keeps neither). */
  int sweep_passes, sweep_planned;
  /* 1: a quick calibration short of its time left the thin-block probes
   * out (the model then has no thin tables beyond the threads step's).
   * Not kept in profiles. */
  int thin_skipped;
  /* How the host handed work between the device's threads at the start
   * of its calibration and at the end: a thin sgemm's time on all its
   * threads over its time on one (predict/calibrate.c, handoff_probe).
   * Kept in profiles. 0 where not measured (one thread, a sim device, a
   * profile written before it was). */
  double handoff[2];
  /* The GEMM sweep's timings that were probed for that state between
   * visits, and those of them that met slow hand-offs: the models fit the
   * slow state when they are the most, else the quick one (measure_gemm).
   * Kept in profiles. 0 where not probed. */
  int handoff_timings, handoff_slow;
  /* Seconds per element of B (n x k) that a call on all the device's
   * threads took more in the slow state than in the quick one, by dtype:
   * fitted by calibration from the sweep's samples timed in both states
   * (measure_gemm). Kept in profiles. 0 where not measured. */
  double handoff_extra[2];
  /* The round trip of a cache line between the device's first two cores
   * (core/roundtrip.h), in ns, that calibration's hand-off probes saw in
   * the quick state [0] and the slow one [1] (medians): plans measure it
   * before a run and take the state it is nearer
   * (poas__handoff_latency_slow). Kept in profiles. 0 where a state was not
   * seen or the device cannot measure it. */
  double handoff_latency_ns[2];
  /* On a plan's copy only, never kept: how many times handoff_extra per
   * element of B calls on all the device's threads take more (above 0) or
   * less (below 0) than the fitted models say, in the host's hand-off
   * state now. Models fitted quick: 0 while the host is quick, the slow
   * state's strength (api/context.h, handoff_level) while it is slow;
   * fitted slow: -1 while quick, the strength less 1 while slow. */
  double handoff_shift;
  /* Seconds per element of the long operand (B, k x n, for a C of s rows;
   * A, m x k, for s columns) that a call of dtype dt whose C has a short
   * side of s <= POAS__FEW_SIDE takes on one thread: one_thread[dt][side]
   * [s], from calibration's threads step, which times each such call on
   * one thread whatever it then chooses (one thread does not depend on
   * the hand-off state). Such a call packs and multiplies that operand
   * once, whatever the transposes: per element, 12-row sgemm on one
   * thread of the CI VM took 0.55-0.76 ns in four transpose pairs, and the
   * smooth model's shape missed them by 4-47%. Kept in profiles
   * ("threads_one"). 0 where not measured. */
  double one_thread[2][2][POAS__FEW_SIDE + 1];
  /* By dtype: the pieces its GEMMs ran in when calibrated
   * (poas__device.gemm_block), which its models describe; 0 for whole
   * calls. Kept in profiles ("gemm_block"). */
  int gemm_block[2];
  /* The threads such calls run on while the host is in the slow hand-off
   * state, as threads_by_side: also one where one_thread says one thread
   * beats them all with the slow state's term (poas__threads_slow_table).
   * Derived, not kept. */
  uint8_t threads_slow[2][2][POAS__FEW_SIDE + 1];
  /* On a plan's copy only, never kept: 1 while the host is in the slow
   * hand-off state, whose calls of few rows or columns run by
   * threads_slow. */
  int handoff_slow_now;
} poas__device_model;

/* Whether dm's GEMM model of dtype was fitted from measurements (its
 * calibration, or a profile that holds that dtype). A device calibrated
 * in one dtype only keeps its built-in estimate for the other, while its
 * source says calibrated. */
static inline int poas__model_fitted(const poas__device_model *dm, poas_dtype dtype) {
  return dm->source == POAS__MODEL_CALIBRATED && dm->gemm_fit[dtype].samples > 0;
}

/* The index of a transpose pair in poas__device_model.gemm[dtype][]. */
static inline int poas__gemm_pair(poas_op ta, poas_op tb) {
  return (ta == POAS_TRANS) + 2 * (tb == POAS_TRANS);
}

/* The GEMM model a shape of dtype and transposes uses: its pair's, else
 * (not measured) the NN pair's. */
const poas__gemm_model *poas__gemm_model_for(const poas__device_model *dm, poas_dtype dtype,
                                             poas_op ta, poas_op tb);
/* The features of a GEMM shape; t = dot(coef, features). */
void poas__gemm_features(int64_t m, int64_t n, int64_t k, double f[POAS__GEMM_NFEAT]);
/* The thin-block factor of an m x n block: the table's entry for its
 * shorter side (columns on a tie) when that is at most POAS__THIN_MAX,
 * else 1 (and 1 for no table). */
double poas__thin_factor(const poas__thin_table *tt, int64_t m, int64_t n);
/* The process's copy of table *t: identical tables share one copy, and
 * copies live until the process ends (a few KiB per calibration or
 * profile load). NULL when out of memory. Thread-safe. */
const poas__thin_table *poas__thin_intern(const poas__thin_table *t);
/* Predicted seconds of the smooth model alone, without the thin table. */
double poas__model_gemm_smooth(const poas__device_model *dm, poas_dtype dtype, poas_op ta,
                               poas_op tb, int64_t m, int64_t n, int64_t k);
/* Predicted seconds for a GEMM with operands already on the device: the
 * smooth model times the thin factor, and for a call on all the device's
 * threads the hand-off state's term (handoff_shift) where it is set. */
double poas__model_gemm_time(const poas__device_model *dm, poas_dtype dtype, poas_op ta,
                             poas_op tb, int64_t m, int64_t n, int64_t k);
/* The same in a hand-off state given by `shift` (as handoff_shift) and
 * `slow` (as handoff_slow_now) rather than dm's own. */
double poas__model_gemm_time_in(const poas__device_model *dm, double shift, int slow,
                                poas_dtype dtype, poas_op ta, poas_op tb, int64_t m, int64_t n,
                                int64_t k);
/* The range of one_thread's seconds per element a profile may hold. */
#define POAS__ONE_THREAD_MIN 1e-14
#define POAS__ONE_THREAD_MAX 1e-6
/* Fills dm->threads_slow: threads_by_side, and one thread also for the
 * calls of few rows or columns (s x POAS__THREADS_SLOW_REF^2, or the
 * transpose) that one_thread predicts faster on one thread than the
 * models on all of them with the slow state's term at its calibrated
 * strength. Where dm has no term or no one_thread, a copy of
 * threads_by_side. */
#define POAS__THREADS_SLOW_REF 2048
void poas__threads_slow_table(poas__device_model *dm);
/* Whether a call of dtype with an m x n C runs on one thread in the slow
 * state only (threads_slow moved it there; it then takes one_thread's
 * time): its short side, and which side it is in *side; else 0. */
int64_t poas__moved_to_one(const poas__device_model *dm, poas_dtype dtype, int64_t m, int64_t n,
                           int *side);
/* Whether a calibration whose GEMM sweep had `timings` probed for the
 * hand-off state, `slow` of them slow, fitted its models to the slow
 * state: the state most of them met (predict/calibrate.c, measure_gemm). */
static inline int poas__handoff_fits_slow(int timings, int slow) { return 2 * slow > timings; }
/* Whether a cache-line round trip of `ns` between the device's cores says
 * the host is in the slow hand-off state: nearer (by ratio) the slow
 * state's latency calibration saw than the quick one's; with one of them
 * seen, above twice the quick one or half the slow one (on the CI VM the
 * two are 4-6x apart). -1 where dm has neither, or ns is not a reading. */
int poas__handoff_latency_slow(const poas__device_model *dm, double ns);
/* Predicted seconds for one host<->device copy of `bytes`; 0 when the
 * device computes on host memory. */
double poas__model_transfer_time(const poas__device_model *dm, poas_direction dir, double bytes);
/* Seconds to transpose a matrix of dtype of `bytes` on the device: the
 * dtype's transpose model where calibration measured one; else the other
 * dtype's for as many elements (profiles before 2026-11-24 measured
 * doubles only); else the time of copying the bytes in (a stand-in: PoCL
 * on one core transposed 8 MiB to 32 MiB at 7.5-10 GB/s read and
 * written). */
double poas__model_transpose_time(const poas__device_model *dm, poas_dtype dtype, double bytes);
/* The model of a device that runs `factor` times slower than *dm says:
 * every time of dtype's GEMMs (all transpose pairs), of its copies and of
 * its transpose multiplied by factor (> 0). Thin tables are ratios and
 * stay; fit statistics stay. */
void poas__device_model_scale(poas__device_model *dm, poas_dtype dtype, double factor);
/* A throughput model of `flops_per_s` with a fixed `overhead_s` per call,
 * for built-in estimates and sim devices. */
void poas__gemm_model_from_rate(poas__gemm_model *gm, double flops_per_s, double overhead_s);
/* A whole device of that kind: GEMMs of every transpose pair at
 * flops_per_s[dtype] with overhead_s per call, and copies of latency_s +
 * bytes / bandwidth (no copy model when bandwidth is 0: host memory). The
 * rest of *dm is zero. */
void poas__device_model_from_rates(poas__device_model *dm, poas__model_source source,
                                   const double flops_per_s[2], double overhead_s,
                                   double latency_s, double bandwidth);

#endif /* POAS_MODEL_H */
