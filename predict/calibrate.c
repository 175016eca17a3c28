/* calibrate.c: measuring one device and fitting its models.
 *
 * Everything goes through the backend table: allocate, copy, gemm,
 * lane_sync, timed with poas__now() (or, for a simulated device in virtual
 * time, with its lane clock, where times are exact). The GEMM sweep covers
 * what planning asks about: squares, thin row blocks (few rows x full n x
 * full k, what a row split hands a device), thin column blocks (the
 * transposed case) and random shapes in between, for every transpose
 * pair. The sweep runs several passes, each over every sample in a new
 * shuffled order, each sample warmed up and then timed once per pass; the
 * median of its passes is kept (on a device of several host threads, of
 * its passes in the hand-off state most of the sweep met, and what the
 * other state adds is fitted apart: measure_gemm). The fastest pass was tried first: it is
 * steadier on a machine busy with other work, but it is the best case, and
 * the runs it is meant to predict are typical ones: with it, GEMMs on a
 * quiet CI-class machine ran 5-9% slower than predicted (median of
 * poas-bench's repeats, n = 1024 to 4096). Calibrate on a quiet machine.
 * One sample in five, chosen by position, is held out of the fit to report
 * honest errors. */
#include "devices/sim/sim.h"
#include "predict/predict.h"

#include <gsl/gsl_cdf.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Most timed repetitions of one sample. */
#define MAX_REPS 16

typedef struct gemm_sample {
  int id; /* position in the sweep, which shuffles do not change */
  int dtype, pair;
  int64_t m, n, k;
  int heldout;
  double t;
  double noise; /* poas__timing_noise of its passes; 0 with fewer than 3 */
} gemm_sample;

/* The transposes of pair index `pair` (see poas__gemm_pair). */
static poas_op pair_op_a(int pair) { return (pair & 1) ? POAS_TRANS : POAS_NO_TRANS; }
static poas_op pair_op_b(int pair) { return (pair & 2) ? POAS_TRANS : POAS_NO_TRANS; }

/* xorshift64*: deterministic shuffles and shapes from a fixed seed. */
static uint64_t rng_next(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ull;
}

static double rng_unit(uint64_t *s) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }

/* A size drawn log-uniformly in [lo, hi], rounded to a multiple of 8 half
 * the time so that both aligned and ragged shapes are seen. */
static int64_t rng_size(uint64_t *s, int64_t lo, int64_t hi) {
  double v = exp(log((double)lo) + rng_unit(s) * (log((double)hi) - log((double)lo)));
  int64_t x = (int64_t)v;
  if (rng_next(s) & 1)
    x = x / 8 * 8;
  return POAS__MAX(x, lo);
}

/* The sweep's extent. */
typedef struct sweep {
  int64_t big_max;       /* largest full dimension */
  const int64_t *squares, *thin, *full;
  int nsquares, nthin, nfull, nrandom;
  int reps;
  int thin_reps; /* timed repetitions of each thin-block probe */
  int thin_large; /* probe thin blocks at the largest full sizes (thin_long) */
  int slow;       /* scaled below SLOW_SCALE: sized to the time left (device_sweep) */
} sweep;

static const int64_t quick_squares[] = {128, 256, 448, 640, 896, 1152};
static const int64_t quick_thin[] = {8, 24, 64, 160};
static const int64_t quick_full[] = {640, 1152, 1536};
static const int64_t full_squares[] = {128, 256, 384, 512, 768, 1024, 1408, 1792, 2048};
static const int64_t full_thin[] = {4, 16, 40, 96, 200, 384};
static const int64_t full_full[] = {512, 1024, 1792, 2560, 3072};

static sweep sweep_for(int quick) {
  if (quick)
    return (sweep){1536, quick_squares, quick_thin, quick_full, POAS__ARRAY_LEN(quick_squares),
                   POAS__ARRAY_LEN(quick_thin), POAS__ARRAY_LEN(quick_full), 12, 5, 1, 0, 0};
  return (sweep){3072, full_squares, full_thin, full_full, POAS__ARRAY_LEN(full_squares),
                 POAS__ARRAY_LEN(full_thin), POAS__ARRAY_LEN(full_full), 30, 5, 3, 0, 0};
}

/* The sweeps above are sized for a device of about REFERENCE_RATE flop/s
 * (the 2-core CI machine's OpenBLAS). A slower device would spend minutes
 * on them (PoCL on the same two cores took 8 of the 10 minutes of a full
 * calibration), a faster one would only time small calls it barely
 * notices; so the square and full sizes are scaled by the cube root of the
 * device's measured rate over the reference, which keeps the time per
 * sample about constant. Thin sizes are row counts a split produces and
 * stay as they are. */
#define REFERENCE_RATE 1e11
#define MAX_SWEEP_SIZES 16

/* Below SLOW_SCALE (a device under REFERENCE_RATE / 64, about 1.6e9 flop/s,
 * slower than any CPU or GPU calibrated so far) the sizes still follow the
 * rate, down to MIN_SCALE, but no longer keep a pass's time: the thin
 * blocks' short sides do not shrink, and a sim of 1e8 flop/s spent 85 s
 * on each pass of a quick sweep at a quarter. Such a device's sweep is
 * sized to the time it has left instead (device_sweep). At MIN_SCALE the
 * quick sweep's full sizes are 64, 112 and 152: its longest side is still
 * twice the 64 rows at which the model's thin-block terms level off
 * (models/model.c), and the blocks of 8 and 24 rows are still thin. */
#define SLOW_SCALE 0.25
#define MIN_SCALE 0.1

typedef struct scaled_sweep {
  sweep sw;
  int64_t squares[MAX_SWEEP_SIZES], full[MAX_SWEEP_SIZES];
} scaled_sweep;

static int64_t scale_size(int64_t x, double f) {
  int64_t v = (int64_t)((double)x * f) / 8 * 8;
  return POAS__MAX(v, 32);
}

static void scale_sweep(const sweep *in, double f, scaled_sweep *out) {
  out->sw = *in;
  for (int i = 0; i < in->nsquares && i < MAX_SWEEP_SIZES; i++)
    out->squares[i] = scale_size(in->squares[i], f);
  for (int i = 0; i < in->nfull && i < MAX_SWEEP_SIZES; i++)
    out->full[i] = scale_size(in->full[i], f);
  out->sw.squares = out->squares;
  out->sw.full = out->full;
  out->sw.big_max = scale_size(in->big_max, f);
}

static void add(gemm_sample *s, int *n, int dt, int pair, int64_t m, int64_t nn, int64_t k) {
  s[*n] = (gemm_sample){.dtype = dt, .pair = pair, .m = m, .n = nn, .k = k};
  (*n)++;
}

/* The shapes of one dtype and pair: squares, thin row and column blocks
 * over the full sizes (k = n for row blocks, k = m for column blocks, and
 * one unequal pair), and random shapes. */
static int build_shapes(const sweep *sw, int dt, int pair, uint64_t *rng, gemm_sample *s) {
  int n = 0;
  for (int i = 0; i < sw->nsquares; i++)
    add(s, &n, dt, pair, sw->squares[i], sw->squares[i], sw->squares[i]);
  for (int i = 0; i < sw->nthin; i++)
    for (int j = 0; j < sw->nfull; j++) {
      int64_t full = sw->full[j], other = sw->full[(j + 1) % sw->nfull];
      add(s, &n, dt, pair, sw->thin[i], full, i % 2 ? full : other);
      add(s, &n, dt, pair, full, sw->thin[i], i % 2 ? other : full);
    }
  for (int i = 0; i < sw->nrandom; i++)
    add(s, &n, dt, pair, rng_size(rng, 32, sw->big_max), rng_size(rng, 32, sw->big_max),
        rng_size(rng, 32, sw->big_max));
  for (int i = 0; i < n; i++)
    s[i].heldout = i % 5 == 2;
  return n;
}

/* A device whose calls POAS cuts into tiles of at most gemm_tile_bytes of
 * the split's non-shared operand (A's rows or B's columns: a CPU OpenCL
 * device) runs no call whose sides are both larger, so its shapes are cut
 * to that: the shorter of m and n to what the limit leaves (whole 8s, at
 * least 32). One PoCL core's rate falls by a third past its limit, a
 * cliff the smooth model cannot follow: fitted over squares of up to 3072
 * as well, its held-out errors were 10-13%. */
static void fit_to_tiles(gemm_sample *s, int n, uint64_t tile_bytes) {
  if (!tile_bytes)
    return;
  for (int i = 0; i < n; i++) {
    size_t es = poas__dtype_size((poas_dtype)s[i].dtype);
    int64_t most = (int64_t)(tile_bytes / ((uint64_t)s[i].k * es)) / 8 * 8;
    most = POAS__MAX(most, 32);
    int64_t *side = s[i].m <= s[i].n ? &s[i].m : &s[i].n;
    *side = POAS__MIN(*side, most);
  }
}

static int max_shapes(const sweep *sw) {
  return sw->nsquares + 2 * sw->nthin * sw->nfull + sw->nrandom;
}

/* The sweep's samples in the dtypes of dtype_mask into s (room for 8
 * max_shapes()), cut to a device's tiles; returns how many. */
static int sweep_samples(const sweep *sw, int dtype_mask, uint64_t tile_bytes, gemm_sample *s) {
  uint64_t rng = 12345;
  int ns = 0;
  for (int dt = 0; dt < 2; dt++)
    for (int pair = 0; pair < 4 && (dtype_mask & (1 << dt)); pair++) {
      int n = build_shapes(sw, dt, pair, &rng, s + ns);
      fit_to_tiles(s + ns, n, tile_bytes);
      ns += n;
    }
  return ns;
}

/* ------------------------------------------------------------ timing */

/* The clock of a device: its lane clock in virtual time, else the wall. */
static double dev_clock(poas__device *dev) {
  return dev->virtual_time ? poas__sim_lane_clock(dev, 0) : poas__now();
}

typedef struct bench {
  poas__device *dev;
  poas__mem a, b, c;
  size_t cap;       /* bytes in each of a, b, c */
  char *host;       /* host staging buffer for copies */
  size_t host_cap;
  /* The threads step's calls (threads_shape) as the device then runs
   * them: their median seconds by dtype, side (0: rows) and short side. */
  double few_t[2][2][POAS__FEW_SIDE + 1];
  /* The same calls' median seconds on one thread, whatever was chosen. */
  double one_t[2][2][POAS__FEW_SIDE + 1];
} bench;

/* A device with memory and processors of its own (a GPU): what the
 * sustained regime, the timed calls below and the large thin-block probes
 * are for. */
static int own_processors(const poas__device *dev) {
  return !dev->info.host_memory && !dev->info.shares_host_cores;
}

/* Timed calls of a sample after its warm-up call: the median of three on
 * a device with its own memory and processors (a GPU), whose first call
 * after a warm-up ran up to 10% slower than the ones after it (H100,
 * sgemm 7600^3: 18.9-20.0 ms against 18.0-18.2; 800^3: 60-79 us against
 * 56-59), while runs and bench/accuracy see the later ones; one on devices
 * that compute on the host's cores, which showed no such thing and whose
 * quick calibration must stay within a minute on the CI machine. */
#define GPU_TIMED_CALLS 3

/* Timed calls of each sample on dev (time_gemm), after one untimed. */
static int timed_calls(const poas__device *dev) {
  return own_processors(dev) ? GPU_TIMED_CALLS : 1;
}

/* A sample's GEMM on the calibration buffers. */
static poas__gemm_call sample_call(const bench *bb, const gemm_sample *s) {
  return (poas__gemm_call){
      .dtype = (poas_dtype)s->dtype,
      .transa = pair_op_a(s->pair),
      .transb = pair_op_b(s->pair),
      .m = s->m, .n = s->n, .k = s->k, .alpha = 1, .beta = 0,
      .a = {bb->a, 0, (s->pair & 1) ? s->k : s->m},
      .b = {bb->b, 0, (s->pair & 2) ? s->n : s->k},
      .c = {bb->c, 0, s->m},
  };
}

/* ------------------------------------------------------- the GPU's regime
 *
 * An H100 (700 W limit) idle for a second reads 1980 MHz; after 3 s of
 * back-to-back dgemm it reads 1545-1650 MHz at its power limit, and the
 * same GEMMs take 1.02-1.19x as long as after the idle second (dgemm NT
 * 5200^3: 4.97-5.01 ms against 5.43-5.57; sgemm 48 x 5600 x 8800:
 * 0.159-0.165 ms against 0.190-0.196; bench/results/gpu-regime-h100-
 * 2026-11-23.md). A sweep in random order therefore timed each sample in
 * whatever regime the samples before it left (one sweep read dgemm
 * 8192^3 at 51.8 TFLOP/s and 5632^3 at 57.8), and bench/accuracy, timing
 * its kernels between copy-bound runs, saw a cooler one. A GPU's samples
 * are timed in the sustained regime that a split's seconds of back-to-
 * back tiles run in: the GPU computes for SUSTAIN_START_S before the GEMM
 * sweep and for SUSTAIN_S before each sample's warm-up. Under the limit
 * the clock still follows each kernel's own power (1395-1980 MHz during
 * such a sweep), so this narrows the spread rather than removing it. */
#define SUSTAIN_S 0.002
#define SUSTAIN_START_S 2.0

int poas__gemm_sustain(poas__device *dev, int lane, poas_dtype dtype, poas__mem a, poas__mem b,
                       poas__mem c, size_t bytes, double seconds) {
  /* A simulated device has no clock to keep anywhere. */
  if (!own_processors(dev) || dev->info.kind == POAS_DEVICE_SIM)
    return 0;
  int64_t side = (int64_t)sqrt((double)bytes / poas__dtype_size(dtype));
  side = POAS__MIN(side, 2048) / 64 * 64;
  if (side < 256)
    return 0;
  poas__gemm_call g = {.dtype = dtype, .transa = POAS_NO_TRANS, .transb = POAS_NO_TRANS,
                       .m = side, .n = side, .k = side, .alpha = 1, .beta = 0,
                       .a = {a, 0, side}, .b = {b, 0, side}, .c = {c, 0, side}};
  double t0 = poas__now();
  int rc = 0;
  do {
    for (int i = 0; !rc && i < 4; i++)
      rc = dev->be->gemm(dev, lane, &g);
    if (!rc)
      rc = dev->be->lane_sync(dev, lane);
  } while (!rc && poas__now() - t0 < seconds);
  return rc;
}

/* One call of g on lane 0, timed to its end. */
static int timed_call(poas__device *dev, const poas__gemm_call *g, double *out) {
  double t0 = dev_clock(dev);
  int rc = dev->be->gemm(dev, 0, g);
  if (!rc)
    rc = dev->be->lane_sync(dev, 0);
  *out = dev_clock(dev) - t0;
  return rc;
}

static int gemm_failed(const poas__device *dev, const gemm_sample *s, int rc) {
  return poas__fail(rc, "%s: GEMM %lldx%lldx%lld failed during calibration", dev->info.id,
                    (long long)s->m, (long long)s->n, (long long)s->k);
}

/* Times a sample's GEMM after a warm-up call of it. */
static int time_gemm(bench *bb, const gemm_sample *s, double *out) {
  poas__device *dev = bb->dev;
  poas__gemm_call g = sample_call(bb, s);
  int calls = timed_calls(dev);
  double t[GPU_TIMED_CALLS];
  int rc = poas__gemm_sustain(dev, 0, g.dtype, bb->a, bb->b, bb->c, bb->cap, SUSTAIN_S);
  if (!rc)
    rc = dev->be->gemm(dev, 0, &g);
  if (!rc)
    rc = poas__dev_sync_all(dev);
  for (int i = 0; !rc && i < calls; i++)
    rc = timed_call(dev, &g, &t[i]);
  if (rc)
    return gemm_failed(dev, s, rc);
  *out = poas__median(t, calls);
  return 0;
}

/* ---------------------------------------------------------- progress */

typedef struct progress {
  const poas__calib_opts *o;
  const char *id;
  double done, total;
} progress;

static void report(progress *p, const char *step, double add_work) {
  p->done += add_work;
  if (p->o->progress) {
    double f = p->total > 0 ? POAS__MIN(p->done / p->total, 1.0) : 1.0;
    p->o->progress(p->o->user, p->id, step, p->o->frac0 + f * (p->o->frac1 - p->o->frac0));
  }
}

/* Work units for progress: a GEMM's flops scaled to a rough 1e10 flop/s,
 * plus a fixed cost per call. */
static double gemm_work(const gemm_sample *s) {
  return 2 * (2.0 * (double)s->m * (double)s->n * (double)s->k / 1e10 + 1e-4);
}

/* ------------------------------------------------------------ memory */

/* What the device can really allocate: for a device with its own memory,
 * as many 1/32 slices of its reported size as it gives; for one computing
 * on host memory, what the host has available now. */
static uint64_t probe_memory(poas__device *dev) {
  if (dev->info.host_memory) {
    long pages = sysconf(_SC_AVPHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    uint64_t avail = pages > 0 && psize > 0 ? (uint64_t)pages * (uint64_t)psize : 0;
    return avail && avail < dev->info.memory_bytes ? avail : dev->info.memory_bytes;
  }
  enum { SLICES = 32 };
  size_t slice = (size_t)(dev->info.memory_bytes / SLICES);
  poas__mem held[SLICES];
  int n = 0;
  /* The last allocation is meant to fail: not a warning (an H100 run
   * printed "cudaMalloc of 2656796672 bytes: out of memory" for it). */
  poas__failures_expected(1);
  while (slice && n < SLICES && dev->be->mem_alloc(dev, slice, &held[n]) == 0)
    n++;
  poas__failures_expected(0);
  poas__clear_detail();
  for (int i = n - 1; i >= 0; i--)
    dev->be->mem_free(dev, held[i]);
  return (uint64_t)n * slice;
}

/* --------------------------------------------------------- transfers */

/* How many sizes a rate sweep times: `first` bytes, doubling, up to
 * `top`, at most MAX_COPY_SIZES. */
#define MAX_COPY_SIZES 24
static int doubling_sizes(size_t first, size_t top) {
  int n = 0;
  for (size_t bytes = first; bytes <= top && n < MAX_COPY_SIZES; bytes *= 2)
    n++;
  return n;
}

/* Below this size a copy's time is mostly its fixed costs, which the
 * latency stands for: no knee there (a knee there fitted the noise of small
 * copies: PoCL's, on the CI machine, 1.9 GB/s up to 16 KiB, 71 GB/s past
 * it), and no say in whether there is one. */
#define KNEE_MIN_BYTES 1048576.0

/* Sum of squared relative errors, over the training sizes of
 * KNEE_MIN_BYTES or more (counted in *m), of t = c[0] + c[1] bytes (knee
 * 0), or of t = c[0] + c[1] min(bytes, knee) + c[2] (bytes - knee)+. */
static double large_copy_loss(const double *X, const double *y, const int *held, int n,
                              const double *c, double knee, int *m) {
  double loss = 0;
  *m = 0;
  for (int i = 0; i < n; i++) {
    double bytes = X[2 * i + 1];
    if (held[i] || bytes < KNEE_MIN_BYTES)
      continue;
    double t = knee > 0 ? c[0] + c[1] * POAS__MIN(bytes, knee) + c[2] * POAS__MAX(bytes - knee, 0)
                        : c[0] + c[1] * bytes;
    loss += (t - y[i]) * (t - y[i]) / (y[i] * y[i]);
    (*m)++;
  }
  return loss;
}

/* Whether a knee fits significantly better than one rate: an F-test, at
 * 1%, of the knee model (latency and two rates) against the line (latency
 * and one rate) on the m training sizes of KNEE_MIN_BYTES or more, given
 * each model's sum of squared relative errors there (the weighted loss
 * both fits minimise).
 *
 * Why a test at all: the knee has more freedom, so it fits at least as
 * well as the line whatever the timings; chosen by that fit alone (and a
 * tenth between its rates), timings off by up to 10% around one rate gave
 * a knee in a quarter of sweeps, whose second rate then mispredicted the
 * large copies a pipeline makes. With the test, one in fifty: more than
 * the nominal 1%, as the knee's position is picked among several to fit
 * best, while a real bend (a third slower past 32 MiB, under the same
 * noise) is still found in 99 sweeps of 100 (test-predict.c's
 * transfer_knee_only_where_it_fits_significantly_better). Counting the
 * position as a parameter too cut the false knees to one in two hundred
 * but lost most of those bends: past 1 MiB a sweep has only eight or so
 * training sizes.
 *
 * Why only the large sizes: small copies stray by 20% and more (H100
 * pageable copies: 21 us for 64 KiB, 17 us for 128 KiB), which no rate
 * explains; over every size that scatter drowned the H100's real bend,
 * 10 GB/s past 64 MiB after 15-16 (F 5.4 where 1% needs 9.6, against 76
 * over the large sizes, where it needs 16.3). A quick sweep has few large
 * sizes, so only a stark bend clears the test there. */
static int knee_is_significant(double line_loss, double knee_loss, int m) {
  enum { LINE_PARAMS = 2, KNEE_PARAMS = 3 };
  int df_extra = KNEE_PARAMS - LINE_PARAMS, df_resid = m - KNEE_PARAMS;
  if (df_resid < 1 || !(knee_loss < line_loss))
    return 0;
  if (!(knee_loss > 0)) /* an exact bend: nothing left to explain */
    return 1;
  double f = (line_loss - knee_loss) / df_extra / (knee_loss / df_resid);
  return f > gsl_cdf_fdist_Qinv(0.01, df_extra, df_resid);
}

/* See predict.h. Pageable copies change rate with size: on an H100
 * machine host-to-device copies ran at 15-16 GB/s up to 64 MiB and at
 * 10 GB/s for 256 MiB (the host's caches no longer held the source), which
 * one rate predicted 30% fast, while device-to-host ones kept climbing
 * from 12 GB/s at 4 MiB to 15.7 GB/s. With the knee at K the features are
 * min(bytes, K) and max(bytes - K, 0), so both rates come out positive
 * from the non-negative fit, whichever is the faster. */
int poas__fit_transfer(const double *X, const double *y, const int *held, int n,
                       poas__transfer_model *tm) {
  double coef[3], train[2];
  int rc = n < 4 ? POAS_EFIT : poas__fit_linear(X, y, held, n, 2, coef, train, NULL, &tm->fit);
  if (rc == POAS_ENOMEM)
    return rc;
  if (rc || !(coef[1] > 0))
    return POAS_EFIT;
  tm->latency = coef[0];
  tm->bandwidth = 1 / coef[1];
  tm->knee_bytes = tm->bandwidth_beyond = 0;
  /* Of the knees from KNEE_MIN_BYTES up whose rates differ by a tenth or
   * more (less is noise, or an exact line's rounding), the one the fit
   * likes best, if it beats one rate significantly (knee_is_significant). */
  double X3[MAX_COPY_SIZES * 3], best_loss = 1 - tm->fit.r2, best[3] = {0},
                                 best_train[3] = {0}, best_knee = 0;
  poas__fit_stats best_fit = {0};
  for (int knee = 2; knee + 2 < n && n <= MAX_COPY_SIZES; knee++) {
    double kb = X[2 * knee + 1], c3[3], t3[3];
    if (kb < KNEE_MIN_BYTES)
      continue;
    /* Two sizes past the knee that the fit sees, not counting held-out
     * ones: the fit choosing a knee sees only those, and from one it
     * takes a rate that passes through that timing exactly, so that a
     * knee before the last fitted size of a quick sweep (whose largest
     * size is held out) fitted one noisy timing perfectly and won. */
    int past = 0;
    for (int i = 0; i < n; i++)
      past += !held[i] && X[2 * i + 1] > kb;
    if (past < 2)
      continue;
    for (int i = 0; i < n; i++) {
      X3[3 * i] = 1;
      X3[3 * i + 1] = POAS__MIN(X[2 * i + 1], kb);
      X3[3 * i + 2] = POAS__MAX(X[2 * i + 1] - kb, 0);
    }
    poas__fit_stats st;
    int knee_rc = poas__fit_linear(X3, y, held, n, 3, c3, t3, NULL, &st);
    /* Out of memory is not a knee that fits worse: passed over, it left a
     * model of one rate that calibration reported as fitted. */
    if (knee_rc == POAS_ENOMEM)
      return knee_rc;
    if (knee_rc || !(c3[1] > 0) || !(c3[2] > 0) || fabs(c3[2] / c3[1] - 1) < 0.1 ||
        !(1 - st.r2 < best_loss))
      continue;
    best_loss = 1 - st.r2;
    best_fit = st;
    best_knee = kb;
    memcpy(best, c3, sizeof best);
    memcpy(best_train, t3, sizeof best_train);
  }
  if (!(best_knee > 0))
    return 0;
  /* Both losses over the same sizes, those the knee could be at, with the
   * coefficients fitted to the training sizes (as R^2 was). */
  int m;
  double line_loss = large_copy_loss(X, y, held, n, train, 0, &m);
  double knee_loss = large_copy_loss(X, y, held, n, best_train, best_knee, &m);
  if (!knee_is_significant(line_loss, knee_loss, m))
    return 0;
  tm->fit = best_fit;
  tm->latency = best[0];
  tm->bandwidth = 1 / best[1];
  tm->knee_bytes = best_knee;
  tm->bandwidth_beyond = 1 / best[2];
  return 0;
}

/* An operation a rate sweep times on lane 0: `run` issues it on `bytes`
 * (as `round` gave them, when there is one). */
typedef struct rate_op {
  const char *step; /* progress step: "h2d", "d2h", "transpose" */
  const char *name; /* in debug lines: the step, "-pinned" for page-locked copies */
  const char *what; /* in errors: "host-to-device copy" */
  size_t (*round)(void *ctx, size_t bytes); /* the bytes it really moves for a nominal size */
  /* Before each run, untimed: puts the operation's input where a run puts
   * it (NULL: nothing to do). */
  int (*prepare)(void *ctx, size_t bytes);
  int (*run)(void *ctx, size_t bytes);
  void *ctx;
} rate_op;

/* The median of `reps` timed runs of op on `bytes`, after one untimed. */
static int time_op(poas__device *dev, const rate_op *op, size_t bytes, int reps, double *out) {
  double t[MAX_REPS];
  reps = POAS__MIN(reps, MAX_REPS);
  int rc = 0;
  for (int r = -1; !rc && r < reps; r++) {
    if (op->prepare && ((rc = op->prepare(op->ctx, bytes)) != 0 ||
                        (rc = dev->be->lane_sync(dev, 0)) != 0))
      break;
    double t0 = dev_clock(dev);
    rc = op->run(op->ctx, bytes);
    if (!rc)
      rc = dev->be->lane_sync(dev, 0);
    if (r >= 0)
      t[r] = dev_clock(dev) - t0;
  }
  if (rc)
    return poas__fail(rc, "%s: %zu-byte %s failed during calibration", dev->info.id, bytes,
                      op->what);
  *out = poas__median(t, reps);
  return 0;
}

/* Times op from `first` bytes, doubling, up to `top`, and fits its rate
 * model (latency, rate, a knee: poas__fit_transfer). */
static int calibrate_rate(poas__device *dev, const rate_op *op, size_t first, size_t top,
                          const sweep *sw, progress *pg, poas__transfer_model *tm) {
  double X[MAX_COPY_SIZES * 2], y[MAX_COPY_SIZES];
  int held[MAX_COPY_SIZES], n = 0;
  for (size_t bytes = first; bytes <= top && n < MAX_COPY_SIZES; bytes *= 2, n++) {
    size_t real = op->round ? op->round(op->ctx, bytes) : bytes;
    int rc = time_op(dev, op, real, sw->reps, &y[n]);
    if (rc)
      return rc;
    poas__debug("calibrate %s %s %zu %.6e", dev->info.id, op->name, real, y[n]);
    X[2 * n] = 1;
    X[2 * n + 1] = (double)real;
    held[n] = n % 5 == 2;
    report(pg, op->step, 1);
  }
  int rc = poas__fit_transfer(X, y, held, n, tm);
  if (rc == POAS_ENOMEM)
    return poas__fail(rc, "%s: no memory to fit the %s model", dev->info.id, op->what);
  if (rc)
    return poas__fail(POAS_EFIT, "%s: could not fit the %s model", dev->info.id, op->what);
  tm->valid = 1;
  return 0;
}

/* A flat copy between a host buffer and a device buffer on a lane. */
typedef struct copy_ctx {
  poas__device *dev;
  poas_direction dir;
  int lane;
  void *host;
  poas__mem mem;
  int both_ways; /* poas__copy2d.both_ways: it runs while copies go the other way */
} copy_ctx;

static int run_copy(void *ctx, size_t bytes) {
  const copy_ctx *cc = ctx;
  poas__device *dev = cc->dev;
  poas__copy2d c = {bytes, 1, bytes, bytes, 0, cc->both_ways};
  return cc->dir == POAS_H2D ? dev->be->copy_h2d(dev, cc->lane, cc->mem, cc->host, &c)
                             : dev->be->copy_d2h(dev, cc->lane, cc->host, cc->mem, &c);
}

static int calibrate_direction(bench *bb, poas_direction dir, int pinned, const sweep *sw,
                               progress *pg, poas__transfer_model *tm) {
  copy_ctx cc = {bb->dev, dir, 0, bb->host, bb->a, 0};
  int h2d = dir == POAS_H2D;
  rate_op op = {.step = h2d ? "h2d" : "d2h",
                .name = h2d ? (pinned ? "h2d-pinned" : "h2d") : (pinned ? "d2h-pinned" : "d2h"),
                .what = h2d ? "host-to-device copy" : "device-to-host copy",
                .run = run_copy,
                .ctx = &cc};
  return calibrate_rate(bb->dev, &op, 4096, POAS__MIN(bb->cap, bb->host_cap), sw, pg, tm);
}

/* ------------------------------------------------ copies both ways */

/* A pipeline copies tiles in and out at once, on two lanes, and the two
 * directions share the host's memory bandwidth and, when a backend stages
 * them, its copy threads: on the H100 VM, 512 MiB each way at once moved
 * at 15.9 and 15.4 GB/s against 22.3 and 17.7 alone. The factor kept is
 * how much longer the pair takes at once than one after the other would,
 * per copy: the median over reps of (t_h2d + t_d2h at once) / (t_h2d +
 * t_d2h alone), at the largest size the sweep timed. Measured on devices
 * with a copy-out lane of their own (lane 2) that do not compute on the
 * host's cores (those run their lanes as one timeline). The copies made
 * at once say so (both_ways), as a pipeline's do: a sim in virtual time,
 * whose lanes keep clocks of their own, spends its duplex factor on those
 * alone, and is timed by its lanes' clocks. A replay's calibration once
 * skipped it and kept no factor while the sim spent its profile's 1.0855
 * on a pipeline's copies: the plans of a calibrated replay ran short. */
#define DUPLEX_LANE 2

/* One copy of the probe, timed to its lane's end; a thread's entry. */
typedef struct duplex_copy {
  copy_ctx copy;
  size_t bytes;
  double t;
  int rc;
} duplex_copy;

/* The clock of a copy's lane: its own in virtual time, else the wall. */
static double lane_clock(const copy_ctx *cc) {
  return cc->dev->virtual_time ? poas__sim_lane_clock(cc->dev, cc->lane) : poas__now();
}

static void *duplex_run(void *p) {
  duplex_copy *j = p;
  double t0 = lane_clock(&j->copy);
  j->rc = run_copy(&j->copy, j->bytes);
  if (!j->rc)
    j->rc = j->copy.dev->be->lane_sync(j->copy.dev, j->copy.lane);
  j->t = lane_clock(&j->copy) - t0;
  return NULL;
}

static int calibrate_duplex(bench *bb, const sweep *sw, double *out) {
  poas__device *dev = bb->dev;
  *out = 0;
  if (dev->info.shares_host_cores || dev->nlanes <= DUPLEX_LANE)
    return 0;
  size_t bytes = POAS__MIN(bb->cap, bb->host_cap);
  char *host = malloc(bytes);
  if (!host)
    return poas__fail(POAS_ENOMEM, "%s: no memory for the two-way copy probe", dev->info.id);
  memset(host, 0, bytes); /* pages of its own, touched, like a user's C */
  duplex_copy in = {{dev, POAS_H2D, 0, bb->host, bb->a, 0}, bytes, 0, 0};
  duplex_copy back = {{dev, POAS_D2H, DUPLEX_LANE, host, bb->b, 0}, bytes, 0, 0};
  double f[MAX_REPS];
  int reps = POAS__MIN(sw->reps, MAX_REPS), rc = 0;
  for (int r = 0; !rc && r < reps; r++) {
    in.copy.both_ways = back.copy.both_ways = 0;
    duplex_run(&in);
    duplex_run(&back);
    double alone = in.t + back.t;
    in.copy.both_ways = back.copy.both_ways = 1;
    rc = in.rc ? in.rc : back.rc;
    pthread_t th;
    if (!rc && pthread_create(&th, NULL, duplex_run, &in) != 0)
      rc = poas__fail(POAS_ENOMEM, "%s: no thread for the two-way copy probe", dev->info.id);
    if (!rc) {
      duplex_run(&back);
      pthread_join(th, NULL);
      rc = in.rc ? in.rc : back.rc;
    }
    f[r] = (in.t + back.t) / alone;
  }
  free(host);
  if (rc)
    return poas__fail(rc, "%s: copies both ways at once failed during calibration",
                      dev->info.id);
  double m = poas__median(f, reps);
  poas__debug("calibrate %s duplex %zu %.4f", dev->info.id, bytes, m);
  *out = m > 1 ? m : 1;
  return 0;
}

static int calibrate_transfers(bench *bb, const sweep *sw, progress *pg, poas__device_model *out) {
  for (int dir = 0; dir < 2; dir++) {
    int rc = calibrate_direction(bb, (poas_direction)dir, 0, sw, pg, &out->xfer[dir]);
    if (rc)
      return rc;
  }
  int rc = calibrate_duplex(bb, sw, &out->duplex);
  if (rc)
    return rc;
  poas__device *dev = bb->dev;
  if (!dev->be->host_register || dev->be->host_register(dev, bb->host, bb->host_cap) != 0)
    return 0;
  for (int dir = 0; !rc && dir < 2; dir++)
    rc = calibrate_direction(bb, (poas_direction)dir, 1, sw, pg, &out->xfer_pinned[dir]);
  dev->be->host_unregister(dev, bb->host);
  return rc;
}

/* The transpose a device whose GEMM wants B transposed runs on a split's
 * shared operand once per run (adapt/gemm.c), in each dtype calibrated:
 * square matrices from 64 KiB, doubling, up to transpose_top() bytes, in
 * buffers of their own (shared operands are larger than the GEMM sweep's
 * operands), each copied in just before it is transposed, as in a run;
 * fitted as a copy is. One PoCL core transposed 8 MiB to 32 MiB at
 * 7.5-10 GB/s read and written, a fifth of its copy-in rate, so the copy
 * model is no stand-in for it. Its cost goes by elements more than bytes
 * (floats took 2.4x as long per byte as doubles), and a matrix copied in
 * just before took 1.1-1.7x as long as one transposed again in place: runs
 * took 3.5-4x what a model of doubles timed in place predicted
 * (bench/results/fixed-budget-2048-ci-2core-2026-11-23.md). */
static size_t transpose_top(const poas__device *dev, int quick) {
  size_t top = (size_t)(quick ? 32 : 128) << 20;
  return POAS__MIN(top, (size_t)(dev->info.memory_bytes / 8));
}

typedef struct transpose_ctx {
  poas__device *dev;
  poas_dtype dtype;
  poas__mem src, dst;
  const void *host; /* what each matrix is copied in from */
} transpose_ctx;

/* Sides in whole 32s: CLBlast's transpose takes a slower general kernel
 * for others (1448^2 doubles took longer than 2048^2 on PoCL), and the
 * shapes worth co-executing are mostly whole multiples. */
static int64_t transpose_side(const transpose_ctx *tc, size_t bytes) {
  return POAS__MAX((int64_t)sqrt((double)bytes / (double)poas__dtype_size(tc->dtype)) / 32 * 32,
                   32);
}

static size_t transpose_bytes(void *ctx, size_t bytes) {
  const transpose_ctx *tc = ctx;
  int64_t side = transpose_side(tc, bytes);
  return (size_t)(side * side) * poas__dtype_size(tc->dtype);
}

static int copy_in_transpose_source(void *ctx, size_t bytes) {
  const transpose_ctx *tc = ctx;
  poas__copy2d c = {bytes, 1, bytes, bytes, 0, 0};
  return tc->dev->be->copy_h2d(tc->dev, 0, tc->src, tc->host, &c);
}

static int run_transpose(void *ctx, size_t bytes) {
  const transpose_ctx *tc = ctx;
  int64_t side = transpose_side(tc, bytes);
  poas__transpose_call t = {.dtype = tc->dtype, .rows = side, .cols = side,
                            .src = {tc->src, 0, side}, .dst = {tc->dst, 0, side}};
  return tc->dev->be->transpose(tc->dev, 0, &t);
}

/* The transpose models of the dtypes in dtype_mask, into out[dtype]. */
static int calibrate_transpose(poas__device *dev, size_t top, int dtype_mask, const sweep *sw,
                               progress *pg, poas__transfer_model out[2]) {
  transpose_ctx tc = {.dev = dev};
  void *host = calloc(1, top);
  int rc = host ? dev->be->mem_alloc(dev, top, &tc.src) : POAS_ENOMEM;
  if (!rc && (rc = dev->be->mem_alloc(dev, top, &tc.dst)) != 0)
    dev->be->mem_free(dev, tc.src);
  if (rc) {
    free(host);
    return poas__fail(rc, "%s: cannot allocate the transpose calibration buffers", dev->info.id);
  }
  tc.host = host;
  for (int dt = 0; !rc && dt < 2; dt++) {
    if (!(dtype_mask & (1 << dt)))
      continue;
    tc.dtype = (poas_dtype)dt;
    rate_op op = {.step = "transpose",
                  .name = dt ? "transpose-d" : "transpose-s",
                  .what = "transpose",
                  .round = transpose_bytes,
                  .prepare = copy_in_transpose_source,
                  .run = run_transpose,
                  .ctx = &tc};
    rc = calibrate_rate(dev, &op, 65536, top, sw, pg, &out[dt]);
  }
  dev->be->mem_free(dev, tc.src);
  dev->be->mem_free(dev, tc.dst);
  free(host);
  return rc;
}

/* ------------------------------------------------ the hand-off probe */

/* How quickly the host hands work between a device's threads, at the
 * start of its calibration and at the end: the thin sgemm of
 * POAS_HANDOFF_M/N/K (poas.h; its threads synchronise often) on all of
 * them over the same on one (through threads_by_side), alternated in
 * blocks, medians. The CI VM has a state in which every hand-off is slow: that
 * call took 1.5 ms on two threads instead of 0.5, while it took 0.6 ms on
 * one in both, and a 1024^3 one took 1.2x as long on two. The VM enters
 * and leaves the state within seconds
 * (bench/results/learned-shapes-ci-2core-2026-11-23.md). The two readings
 * tell the user which state the calibration began and ended in (poas-
 * calibrate warns); the GEMM sweep also probes it between its calls, more
 * cheaply (handoff_now), and fits one state (measure_gemm). About 40
 * calls, tens of milliseconds. */
#define HANDOFF_BLOCK 3
#define HANDOFF_BLOCKS 3

/* Whether the device can be probed: several host threads, operands
 * loaded that hold the probe's B. */
static int handoff_probes(const bench *bb) {
  size_t need = (size_t)POAS_HANDOFF_K * POAS_HANDOFF_N * sizeof(float);
  return bb->dev->max_threads > 1 && !bb->dev->virtual_time && bb->cap >= need;
}

/* The probe's calls in `blocks` blocks of `block` on all threads and on
 * one, alternated, after a warm-up block of each: their medians. */
static int handoff_times(bench *bb, int block, int blocks, double *all, double *one) {
  poas__device *dev = bb->dev;
  gemm_sample g = {.dtype = POAS_FLOAT32, .m = POAS_HANDOFF_M, .n = POAS_HANDOFF_N,
                   .k = POAS_HANDOFF_K};
  uint8_t *entry = &dev->threads_by_side[POAS_FLOAT32][0][POAS_HANDOFF_M];
  uint8_t kept = *entry;
  double t[2][HANDOFF_BLOCK * HANDOFF_BLOCKS], d;
  int rc = 0;
  for (int blk = -1; !rc && blk < blocks; blk++) /* -1: a warm-up of each */
    for (int on_one = 0; !rc && on_one < 2; on_one++) {
      *entry = (uint8_t)on_one; /* 0: all the device's threads */
      poas__gemm_call c = sample_call(bb, &g);
      for (int i = 0; !rc && i < block; i++) {
        rc = timed_call(dev, &c, &d);
        if (blk >= 0)
          t[on_one][blk * block + i] = d;
      }
    }
  *entry = kept;
  if (rc)
    return gemm_failed(dev, &g, rc);
  *all = poas__median(t[0], block * blocks);
  *one = poas__median(t[1], block * blocks);
  return 0;
}

/* How often the GEMM sweep probes the state between its visits: the
 * state lasts seconds on the CI VM, and a probe there costs 2.5 ms (5 ms
 * while hand-offs are slow). Probing after every visit, a full
 * calibration of cpu0 took 218 s, against 154 s without probes and 177 s
 * probing every 50 ms (one run each, minutes apart). */
#define HANDOFF_EVERY_S 0.05

/* The probe's time on all threads over its time on one, from `blocks`
 * blocks of `block` calls (handoff_times); *ratio 0 where the device
 * cannot be probed. */
static int handoff_ratio(bench *bb, int block, int blocks, double *ratio) {
  double all = 0, one = 0;
  *ratio = 0;
  int rc = handoff_probes(bb) ? handoff_times(bb, block, blocks, &all, &one) : 0;
  if (!rc && one > 0) {
    *ratio = all / one;
    poas__debug("calibrate %s: hand-off probe: sgemm %d x %d x %d %.4g s on %d threads, %.4g s "
                "on one",
                bb->dev->info.id, POAS_HANDOFF_M, POAS_HANDOFF_N, POAS_HANDOFF_K, all,
                bb->dev->max_threads, one);
  }
  return rc;
}

/* The cache-line round trips (core/roundtrip.h) the sweep's probes saw,
 * by the state the probe's ratio said: the last LATENCY_KEEP of each. */
#define LATENCY_KEEP 256
typedef struct latency_seen {
  double ns[2][LATENCY_KEEP];
  int n[2];
} latency_seen;

/* The state now, between the GEMM sweep's visits (measure_gemm): one
 * call on all threads and one on one after a warm-up of each, ~2.5 ms on
 * the CI machine; then, where the device can measure it, the round trip
 * of a cache line between its cores (0.2 ms), kept in *seen by the state
 * the calls said. On the CI VM the two agree: in one 30 s run the round
 * trip took 51-89 ns whenever the thin call on two threads took
 * 0.66-1.1x its time on one (twice 1.3-1.4x), and 306-327 ns whenever it
 * took 2.2-3.3x (bench/results/handoff-latency-ci-2core-2026-11-24.md). */
static int handoff_now(bench *bb, double *ratio, latency_seen *seen) {
  int rc = handoff_ratio(bb, 1, 1, ratio);
  poas__device *dev = bb->dev;
  if (rc || !(*ratio > 0) || !dev->be->handoff_latency)
    return rc;
  double ns = dev->be->handoff_latency(dev);
  if (ns > 0) {
    int st = *ratio > POAS_HANDOFF_SLOW;
    seen->ns[st][seen->n[st]++ % LATENCY_KEEP] = ns;
  }
  return 0;
}

/* The state at the start and the end of a calibration, in blocks. */
static int handoff_probe(bench *bb, double *ratio) {
  return handoff_ratio(bb, HANDOFF_BLOCK, HANDOFF_BLOCKS, ratio);
}

/* -------------------------------------------------------------- GEMM */

/* Fits every pair of one dtype from its samples; each pair's coefficients
 * fitted without its held-out samples go to train[pair]. */
static int fit_dtype(poas__device *dev, int dt, const gemm_sample *s, int ns,
                     poas__device_model *out, double train[4][POAS__GEMM_NFEAT]) {
  double *X = malloc((size_t)ns * POAS__GEMM_NFEAT * sizeof *X);
  double *y = malloc((size_t)ns * sizeof *y);
  int *held = malloc((size_t)ns * sizeof *held);
  double *noise = malloc((size_t)ns * sizeof *noise); /* by pair, one after another */
  poas__fit_accum *acc = calloc(1, sizeof *acc);
  int rc = X && y && held && noise && acc
               ? 0
               : poas__fail(POAS_ENOMEM, "%s: no memory to fit the %sgemm models", dev->info.id,
                            poas__dtype_letter((poas_dtype)dt));
  int nall = 0;
  for (int pair = 0; !rc && pair < 4; pair++) {
    int n = 0;
    for (int i = 0; i < ns; i++) {
      if (s[i].dtype != dt || s[i].pair != pair)
        continue;
      poas__gemm_features(s[i].m, s[i].n, s[i].k, X + n * POAS__GEMM_NFEAT);
      y[n] = s[i].t;
      held[n] = s[i].heldout;
      noise[nall + n] = s[i].noise;
      n++;
    }
    poas__gemm_model *gm = &out->gemm[dt][pair];
    poas__fit_stats st;
    rc = poas__fit_linear(X, y, held, n, POAS__GEMM_NFEAT, gm->coef, train[pair], acc, &st);
    /* Memory running out is not a fit that failed: it was once reported
     * as too few samples, POAS_EFIT. */
    if (rc == POAS_ENOMEM) {
      rc = poas__fail(rc, "%s: no memory to fit the %sgemm model", dev->info.id,
                      poas__dtype_letter((poas_dtype)dt));
      break;
    }
    if (rc || !(gm->coef[1] > 0)) {
      rc = poas__fail(POAS_EFIT, "%s: could not fit the %sgemm model (%s)", dev->info.id,
                      poas__dtype_letter((poas_dtype)dt),
                      rc ? "too few samples" : "no positive flop rate");
      break;
    }
    gm->valid = 1;
    gm->fit = st;
    gm->fit.timing_noise = poas__median(noise + nall, n);
    nall += n;
  }
  if (!rc) {
    poas__fit_accum_stats(acc, &out->gemm_fit[dt]);
    out->gemm_fit[dt].timing_noise = poas__median(noise, nall);
  }
  free(noise);
  free(acc);
  free(held);
  free(y);
  free(X);
  return rc;
}

/* The largest operand a sample needs, in elements. */
static size_t operand_elems(const gemm_sample *s) {
  int64_t e = POAS__MAX(s->m * s->k, s->k * s->n);
  return (size_t)POAS__MAX(e, s->m * s->n);
}

static void fill_random(char *p, size_t bytes, uint64_t seed) {
  /* Values in [-1, 1) as floats and doubles alike: no denormals, no NaNs
   * that would slow or short-cut the arithmetic. */
  double *d = (double *)p;
  for (size_t i = 0; i < bytes / sizeof(double); i++)
    d[i] = rng_unit(&seed) * 2 - 1;
  float *f = (float *)p;
  for (size_t i = 0; i < bytes / sizeof(float); i += 2)
    f[i] = (float)(rng_unit(&seed) * 2 - 1);
}

static int load_operands(bench *bb) {
  poas__device *dev = bb->dev;
  if (dev->info.host_memory) {
    fill_random(bb->a.ptr, bb->cap, 1);
    fill_random(bb->b.ptr, bb->cap, 2);
    fill_random(bb->c.ptr, bb->cap, 3);
    return 0;
  }
  poas__mem *m[3] = {&bb->a, &bb->b, &bb->c};
  for (int i = 0; i < 3; i++) {
    for (size_t off = 0; off < bb->cap; off += bb->host_cap) {
      size_t len = POAS__MIN(bb->host_cap, bb->cap - off);
      fill_random(bb->host, len, 10 + (uint64_t)i);
      poas__copy2d c = {len, 1, len, len, off, 0};
      int rc = dev->be->copy_h2d(dev, 0, *m[i], bb->host, &c);
      if (!rc)
        rc = dev->be->lane_sync(dev, 0);
      if (rc)
        return poas__fail(rc, "%s: could not load calibration operands", dev->info.id);
    }
  }
  return 0;
}

static void shuffle(gemm_sample *s, int ns, uint64_t *rng) {
  for (int i = ns - 1; i > 0; i--) {
    int j = (int)(rng_next(rng) % (uint64_t)(i + 1));
    gemm_sample tmp = s[i];
    s[i] = s[j];
    s[j] = tmp;
  }
}

/* The fewest passes a sweep cut short for time keeps (of the five it
 * has): three, enough for a median that ignores one disturbed pass and
 * for a noise figure; two in a quick calibration, whose minute would not
 * hold otherwise. On a new CI machine (building PoCL's kernels took 25-31
 * s) a quick calibration of cpu0 and PoCL with three passes and no
 * thin-block probes took 60.6 and 61.2 s. Two passes give the mean of
 * two timings and no noise figure. */
static int sweep_min_passes(int quick) { return quick ? 2 : 3; }

/* Whether a sweep that has run `passes` passes in `elapsed` seconds and
 * done `work` units of work must stop so that the device's calibration
 * ends by pg->o->end_s: one more pass, then `after_work` units of the
 * steps still to come at the sweep's seconds per unit, would end later.
 * The order in which a quick calibration short of time gives things up:
 * passes beyond the third, then the thin-block probes, then the third
 * pass. */
static int sweep_out_of_time(const progress *pg, int passes, double elapsed, double work,
                             double after_work) {
  double end = pg->o->end_s;
  if (!(end > 0) || passes < sweep_min_passes(pg->o->quick) || !(work > 0))
    return 0;
  /* A quick calibration puts a third pass before the steps that follow:
   * the thin-block probes, which it can leave out (thin_out_of_time). */
  if (passes < 3)
    after_work = 0;
  double per_pass = elapsed / passes, per_work = elapsed / work;
  return poas__now() + per_pass + after_work * per_work > end;
}

/* What a GEMM sweep saw of the hand-off state: its timings probed for it,
 * those that met slow hand-offs, and the slow state's extra seconds per
 * element of B by dtype (poas__device_model.handoff_*). */
typedef struct handoff_seen {
  int timings, slow;
  double extra[2];
  double latency_ns[2]; /* medians, by state; 0 where none */
} handoff_seen;

/* Fewest samples timed in both states that the slow state's extra is
 * fitted from, per dtype. */
#define HANDOFF_EXTRA_MIN_SAMPLES 12

/* The slow state's extra seconds per element of B (n x k), by dtype, from
 * the samples with timings in both states that run on all the device's
 * threads: the slope through the origin of (slow - quick) against n k,
 * weighted so that relative error is what is minimised. On the CI VM,
 * quick-state times plus that term predicted 96 shapes' slow-state times
 * within a median 5.6% (sgemm, 1.0 ns per element) and 4.0% (dgemm, 1.5
 * ns), where the quick times alone were 15.5% off. 0 where too few
 * samples met both states or the slope is not positive. */
static void handoff_extra_fit(const bench *bb, const gemm_sample *s, int ns, const double *t,
                              const unsigned char *slow, int reps, double extra[2]) {
  double num[2] = {0, 0}, den[2] = {0, 0};
  int used[2] = {0, 0};
  for (int i = 0; i < ns; i++) {
    int dt = s[i].dtype;
    if (poas__few_threads(bb->dev->threads_by_side, (poas_dtype)dt, s[i].m, s[i].n))
      continue; /* runs on fewer threads, which do not hand work over */
    double v[2][MAX_REPS];
    int nv[2] = {0, 0};
    for (int r = 0; r < reps; r++) {
      int sl = slow[s[i].id * MAX_REPS + r];
      v[sl][nv[sl]++] = t[s[i].id * MAX_REPS + r];
    }
    if (!nv[0] || !nv[1])
      continue;
    double quick = poas__median(v[0], nv[0]), slowt = poas__median(v[1], nv[1]);
    double x = (double)s[i].n * (double)s[i].k / slowt, y = (slowt - quick) / slowt;
    num[dt] += x * y;
    den[dt] += x * x;
    used[dt]++;
  }
  for (int dt = 0; dt < 2; dt++)
    extra[dt] = used[dt] >= HANDOFF_EXTRA_MIN_SAMPLES && den[dt] > 0 && num[dt] > 0
                    ? num[dt] / den[dt]
                    : 0;
}

/* The visits between two probes of the hand-off state met slow hand-offs
 * when either probe saw them: the state lasts seconds, the gap a fraction
 * of one. */
static void tag_visits(unsigned char *slow, const int *visits, int n, double before,
                       double after) {
  for (int j = 0; j < n; j++)
    slow[visits[j]] = POAS__MAX(before, after) > POAS_HANDOFF_SLOW;
}

/* Times every sample once per pass, each pass in a new random order, and
 * keeps each sample's median over the passes: a burst of load from a
 * neighbour spoils one repetition of many samples rather than every
 * repetition of a few, and the median then ignores it. With after_work
 * >= 0 (the work of the steps that follow) the sweep keeps to the
 * device's time (sweep_out_of_time), running at least sweep_min_passes()
 * of its passes; below 0 it runs them all. The passes it timed go to
 * *timed_passes and its seconds per unit of work to *per_work, and what
 * it saw of the hand-off state to *state, where not NULL.
 *
 * On a device of several host threads it also probes the hand-off state
 * (handoff_now) every HANDOFF_EVERY_S between visits, and fits the state
 * most of the timings met: each sample keeps its timings in that state,
 * all of them where it has none. The CI VM spends seconds at a time in
 * either state, with thin calls on two threads up to 3x slower in the
 * slow one, and medians over passes that mixed the two described neither:
 * with them, bench/accuracy read 10-13% in the slow state; fitted to it,
 * 4.7-7.8% (bench/results/handoff-state-fit-ci-2core-2026-11-24.md).
 * What the slow state adds is fitted too, from the samples timed in both
 * (handoff_extra_fit), so that a plan can follow the host into the state
 * the models do not fit. */
static int measure_gemm(bench *bb, const sweep *sw, gemm_sample *s, int ns, progress *pg,
                        const char *const step[2], double after_work, int *timed_passes,
                        double *per_work, handoff_seen *state) {
  int reps = POAS__MIN(sw->reps, MAX_REPS);
  int nid = 0; /* timings are kept by sample id, which may exceed ns */
  for (int i = 0; i < ns; i++)
    nid = POAS__MAX(nid, s[i].id + 1);
  /* t[id * MAX_REPS + pass]: the timings; slow[] the same: whether the
   * visit met slow hand-offs (where the device can be probed); pending[]
   * the visits since the last probe. */
  double *t = malloc((size_t)nid * MAX_REPS * sizeof *t);
  unsigned char *slow = calloc((size_t)nid * MAX_REPS, 1);
  int *pending = malloc((size_t)nid * MAX_REPS * sizeof *pending), npending = 0;
  if (!t || !slow || !pending) {
    free(t);
    free(slow);
    free(pending);
    return poas__fail(POAS_ENOMEM, "%s: no memory for the GEMM timings", bb->dev->info.id);
  }
  int probing = handoff_probes(bb);
  latency_seen *lat = probing ? calloc(1, sizeof *lat) : NULL;
  if (probing && !lat) {
    free(t);
    free(slow);
    free(pending);
    return poas__fail(POAS_ENOMEM, "%s: no memory for the hand-off probes", bb->dev->info.id);
  }
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  int rc = 0;
  double t0 = poas__now(), pass_work = 0, before = 0, probed_at = t0;
  for (int i = 0; i < ns; i++)
    pass_work += gemm_work(&s[i]);
  if (probing)
    rc = handoff_now(bb, &before, lat);
  for (int r = 0; !rc && r < reps; r++) {
    shuffle(s, ns, &rng);
    for (int i = 0; !rc && i < ns; i++) {
      double ti, after = 0;
      rc = time_gemm(bb, &s[i], &ti);
      t[s[i].id * MAX_REPS + r] = ti;
      pending[npending++] = s[i].id * MAX_REPS + r;
      if (!rc && probing && poas__now() - probed_at >= HANDOFF_EVERY_S) {
        rc = handoff_now(bb, &after, lat);
        tag_visits(slow, pending, npending, before, after);
        npending = 0;
        before = after;
        probed_at = poas__now();
      }
      report(pg, step[s[i].dtype != 0], gemm_work(&s[i]));
    }
    if (!rc && r + 1 < reps && after_work >= 0 &&
        sweep_out_of_time(pg, r + 1, poas__now() - t0, (r + 1) * pass_work, after_work)) {
      poas__info("%s: GEMM sweep cut to %d of its %d passes to keep to the time calibration "
                 "has",
                 bb->dev->info.id, r + 1, reps);
      report(pg, step[s[0].dtype != 0], (reps - r - 1) * pass_work);
      reps = r + 1;
    }
  }
  if (!rc && probing && npending) { /* the visits since the last probe */
    double after;
    rc = handoff_now(bb, &after, lat);
    tag_visits(slow, pending, npending, before, after);
  }
  if (timed_passes)
    *timed_passes = reps;
  if (per_work)
    *per_work = pass_work > 0 ? (poas__now() - t0) / (reps * pass_work) : 0;
  /* The state most of the sweep's timings met is the one the models
   * describe: each sample keeps its timings in that state, all of them
   * where it has none. */
  int nslow = 0;
  for (int i = 0; i < ns; i++)
    for (int r = 0; r < reps; r++)
      nslow += slow[s[i].id * MAX_REPS + r];
  int fit_slow = poas__handoff_fits_slow(ns * reps, nslow);
  if (state)
    *state = (handoff_seen){0};
  if (state && !rc) {
    state->timings = probing ? ns * reps : 0;
    state->slow = nslow;
    handoff_extra_fit(bb, s, ns, t, slow, reps, state->extra);
    for (int st = 0; lat && st < 2; st++)
      state->latency_ns[st] =
          lat->n[st] ? poas__median(lat->ns[st], POAS__MIN(lat->n[st], LATENCY_KEEP)) : 0;
  }
  free(lat);
  if (!rc && nslow)
    poas__info("%s: %d of the %d timings of %s/%s met slow hand-offs between the device's "
               "threads; kept: the timings in the %s state",
               bb->dev->info.id, nslow, ns * reps, step[0], step[1], fit_slow ? "slow" : "quick");
  for (int i = 0; !rc && i < ns; i++) {
    double *ti = &t[s[i].id * MAX_REPS], kept[MAX_REPS];
    int nk = 0;
    for (int r = 0; r < reps; r++)
      if (slow[s[i].id * MAX_REPS + r] == fit_slow)
        kept[nk++] = ti[r];
    if (nk == 0)
      memcpy(kept, ti, (size_t)(nk = reps) * sizeof *kept);
    s[i].t = poas__median(kept, nk);
    /* The noise over all of them: how much the machine moved. */
    s[i].noise = poas__timing_noise(ti, reps);
    if (!(s[i].t > 0))
      s[i].t = 1e-9; /* a clock too coarse to see it: count it as a nanosecond */
    /* The noise last, so that readers of the leading fields still work. */
    poas__debug("calibrate %s %sgemm %d %lld %lld %lld %.6e noise %.4f", bb->dev->info.id,
                poas__dtype_letter((poas_dtype)s[i].dtype), s[i].pair, (long long)s[i].m,
                (long long)s[i].n, (long long)s[i].k, s[i].t, s[i].noise);
  }
  free(t);
  free(slow);
  free(pending);
  return rc;
}

/* ----------------------------------------------- threads by short side */

/* For a device that runs its GEMM on several host threads, whether a call
 * whose C has a short side of s <= POAS__FEW_SIDE rows or columns runs
 * faster on one: each such call of the sweep's largest full size (s x L x
 * L for rows, L x s x L for columns, NN) is timed on all threads and on
 * one, alternately, three times each after a warm-up of each; one thread
 * is kept where its median is THREADS_MARGIN faster, and the device then
 * runs such calls so (poas__device.threads_by_side) while the rest of
 * calibration fits its models. OpenBLAS 0.3.21 on the CI machine's two
 * cores ran sgemm of 4, 8 and 12 columns 1.25-2x faster on one thread, at
 * 900 x n x 1400 up to 4096 x n x 4096, while dgemm gained nothing there
 * (bench/results/openblas-thin-threads-ci-2core-2026-11-23.md); calls of
 * few rows depend on the VM's period there: 4 to 30 rows of 1536 x 1536
 * took 0.41-0.92 of the two-thread time on one thread in a period when
 * it ran two-thread calls slowly, 0.45-1.65 in a fast one
 * (bench/results/openblas-thin-rows-ci-2core-2026-11-23.md), and a
 * calibration keeps what its period shows. The margin keeps noise from
 * choosing (at 10%, quick calibrations moved 8, 10, 13 or 28 columns,
 * whose one-thread times read 0.81-0.95 of the two-thread ones, to one
 * thread in some runs and not in others). Dtypes not measured keep the
 * device's current choice. */
#define THREADS_MARGIN 0.15
#define THREADS_TIMED 3

static gemm_sample threads_shape(const sweep *sw, int dt, int side, int s) {
  int64_t l = sw->full[sw->nfull - 1];
  return (gemm_sample){.dtype = dt, .pair = 0, .m = side ? l : s, .n = side ? s : l, .k = l};
}

/* The step's work for progress; 0 on a device with nothing to choose. */
static double threads_step_work(const poas__device *dev, const sweep *sw, int dtype_mask) {
  double w = 0;
  for (int dt = 0; dt < 2 && dev->max_threads > 1; dt++)
    for (int side = 0; side < 2 && (dtype_mask & (1 << dt)); side++)
      for (int s = 1; s <= POAS__FEW_SIDE; s++) {
        gemm_sample g = threads_shape(sw, dt, side, s);
        w += 2 * (THREADS_TIMED + 1) * gemm_work(&g);
      }
  return w;
}

/* One call of g on `threads` threads (0: all), timed; g's short side is
 * the side-th (0: rows). */
static int timed_on(bench *bb, const gemm_sample *g, int side, int threads, double *out) {
  bb->dev->threads_by_side[g->dtype][side][side ? g->n : g->m] = (uint8_t)threads;
  poas__gemm_call c = sample_call(bb, g);
  return timed_call(bb->dev, &c, out);
}

/* Chooses the device's threads_by_side into it and out; bb->few_t gets
 * each call's time as the device then runs it. */
static int calibrate_threads(bench *bb, const sweep *sw, int dtype_mask, progress *pg,
                             poas__device_model *out) {
  poas__device *dev = bb->dev;
  memcpy(out->threads_by_side, dev->threads_by_side, sizeof out->threads_by_side);
  if (dev->max_threads <= 1)
    return 0;
  static const char *const step[2] = {"sthreads", "dthreads"};
  static const char *const side_name[2] = {"row", "column"};
  for (int dt = 0; dt < 2; dt++)
    for (int side = 0; side < 2 && (dtype_mask & (1 << dt)); side++) {
      char chosen[160] = "";
      for (int s = 1; s <= POAS__FEW_SIDE; s++) {
        gemm_sample g = threads_shape(sw, dt, side, s);
        double all[THREADS_TIMED], one[THREADS_TIMED], t;
        int rc = timed_on(bb, &g, side, 0, &t);
        if (!rc)
          rc = timed_on(bb, &g, side, 1, &t);
        for (int r = 0; !rc && r < THREADS_TIMED; r++) {
          rc = timed_on(bb, &g, side, 0, &all[r]);
          if (!rc)
            rc = timed_on(bb, &g, side, 1, &one[r]);
        }
        if (rc)
          return gemm_failed(dev, &g, rc);
        double t_all = poas__median(all, THREADS_TIMED), t_one = poas__median(one, THREADS_TIMED);
        int keep_one = t_one < (1 - THREADS_MARGIN) * t_all;
        dev->threads_by_side[dt][side][s] = out->threads_by_side[dt][side][s] = keep_one ? 1 : 0;
        bb->few_t[dt][side][s] = keep_one ? t_one : t_all;
        bb->one_t[dt][side][s] = t_one;
        if (keep_one) {
          size_t len = strlen(chosen);
          snprintf(chosen + len, sizeof chosen - len, " %d", s);
        }
        poas__debug("calibrate %s %sgemm %lld x %lld x %lld: %.4g s on %d threads, %.4g s on one",
                    dev->info.id, poas__dtype_letter((poas_dtype)dt), (long long)g.m,
                    (long long)g.n, (long long)g.k, t_all, dev->max_threads, t_one);
        report(pg, step[dt], 2 * (THREADS_TIMED + 1) * gemm_work(&g));
      }
      if (chosen[0])
        poas__info("%s: %sgemm with C of these %s counts runs on one thread:%s", dev->info.id,
                   poas__dtype_letter((poas_dtype)dt), side_name[side], chosen);
    }
  return 0;
}

int poas__threads_thin_table(const poas__device_model *m, int dt,
                             const double t[2][POAS__FEW_SIDE + 1], int64_t l,
                             const poas__thin_table *base, poas__thin_table *out) {
  poas__thin_table tt;
  int any = 0;
  for (int side = 0; side < 2; side++)
    for (int i = 0; i < POAS__THIN_MAX; i++)
      tt.factor[side][i] = base ? base->factor[side][i] : 1;
  for (int side = 0; side < 2 && l > 0; side++)
    for (int s = 1; s <= POAS__FEW_SIDE; s++) {
      if (!m->threads_by_side[dt][side][s] || !(t[side][s] > 0))
        continue;
      double smooth = poas__model_gemm_smooth(m, (poas_dtype)dt, POAS_NO_TRANS, POAS_NO_TRANS,
                                              side ? l : s, side ? s : l, l);
      if (!(smooth > 0))
        continue;
      tt.factor[side][s - 1] =
          POAS__MIN(POAS__MAX(t[side][s] / smooth, POAS__THIN_FACTOR_MIN), POAS__THIN_FACTOR_MAX);
      any = 1;
    }
  if (any)
    *out = tt;
  return any;
}

/* ------------------------------------------------------- thin blocks */

/* The long side and the depth of the thin-block probes: the sweep's
 * smallest full size (512 on the CI machine, scaled like the rest; 1024
 * took the probes 15 s of a 26 s quick calibration there), the long side
 * at least twice the longest short side. The factors' pattern over the
 * short side is the same at other sizes (OpenBLAS, two threads: 1400 x n x
 * 900 and 4000 x n x 2500 gave the same peaks at n = 12, 28, 44, 60 and
 * troughs at multiples of 16). A quick calibration times each probe
 * once, a full one three times (three made a quick calibration of the CI
 * machine's cpu0 and PoCL take 74 s, against the 60 s it may; one, 35 s).
 *
 * A device with processors of its own (a GPU) is probed at the sweep's two
 * largest full sizes instead (12288 x s x 10240 on an H100): at its
 * smallest, 2048 x s x 2048, a call takes 20-60 us, mostly launch, and its
 * factors said nothing of the large thin blocks a split hands it (H100
 * dgemm: 40-row probes read 0.98-1.03 of the smooth model, the sweep's
 * 40-row samples at 4096 to 12288 read 0.80-0.92). Factors taken from
 * those large samples predicted bench/accuracy's thin shapes with a median
 * error of 5.8% and 6.3% on two VMs, against 8.0% and 10.3% with the
 * small probes' (offline, on bench/results/samples/ and the accuracy
 * tables of 2026-11-23). */
static int64_t thin_long(const sweep *sw) {
  if (sw->thin_large)
    return sw->full[sw->nfull - 1];
  return POAS__MAX(sw->full[0], 2 * POAS__THIN_MAX);
}

static int64_t thin_depth(const sweep *sw) {
  if (sw->thin_large)
    return sw->full[POAS__MAX(sw->nfull - 2, 0)];
  return POAS__MAX(sw->full[0], 64);
}

/* The short sides probed (knots): every one up to POAS__THIN_DENSE, then
 * every POAS__THIN_STEP-th up to POAS__THIN_MAX. */
#define THIN_KNOTS (POAS__THIN_DENSE + (POAS__THIN_MAX - POAS__THIN_DENSE) / POAS__THIN_STEP)

static int thin_knot(int i) {
  if (i < POAS__THIN_DENSE)
    return i + 1;
  return POAS__THIN_DENSE + (i - POAS__THIN_DENSE + 1) * POAS__THIN_STEP;
}

/* Thin-block probes of one dtype: knot x L x K (thin rows) and L x knot x
 * K (thin columns) for every knot and every transpose pair; a probe's id
 * is (pair * 2 + side) * THIN_KNOTS + knot index. */
#define THIN_PROBES (4 * 2 * THIN_KNOTS)

static const char *pair_name(int pair) {
  static const char *const names[4] = {"NN", "TN", "NT", "TT"};
  return names[pair & 3];
}

static int thin_shapes(const sweep *sw, int dt, gemm_sample *s) {
  int64_t l = thin_long(sw), k = thin_depth(sw);
  int n = 0;
  for (int pair = 0; pair < 4; pair++)
    for (int side = 0; side < 2; side++)
      for (int i = 0; i < THIN_KNOTS; i++) {
        int64_t t = thin_knot(i);
        s[n] = (gemm_sample){
            .id = n, .dtype = dt, .pair = pair, .m = side ? l : t, .n = side ? t : l, .k = k};
        n++;
      }
  return n;
}

/* Measured over smooth model for each probe, into knot[pair][side][k]
 * (the probes may be in any order: their ids say where they go). */
static void thin_factors(const poas__device_model *out, int dt, const gemm_sample *s, int ns,
                         double knot[4][2][THIN_KNOTS]) {
  for (int i = 0; i < ns; i++) {
    int pair = s[i].id / (2 * THIN_KNOTS), side = s[i].id / THIN_KNOTS % 2;
    double model = poas__model_gemm_smooth(out, (poas_dtype)dt, pair_op_a(pair), pair_op_b(pair),
                                           s[i].m, s[i].n, s[i].k);
    double f = model > 0 ? s[i].t / model : 1;
    knot[pair][side][s[i].id % THIN_KNOTS] =
        POAS__MIN(POAS__MAX(f, POAS__THIN_FACTOR_MIN), POAS__THIN_FACTOR_MAX);
  }
}

/* Whether knot k stands alone, THIN_SPIKE times above or below both its
 * neighbours: one disturbed timing looks like that (a quick calibration
 * on an H100 VM left one factor of 20 among the CPU's 0.3 to 3), while a
 * BLAS's own pattern moves by less from one side to the next. */
#define THIN_SPIKE 1.5
static int thin_spike(const double *f, int k) {
  if (k == 0 || k == THIN_KNOTS - 1)
    return 0;
  double lo = fmin(f[k - 1], f[k + 1]), hi = fmax(f[k - 1], f[k + 1]);
  return f[k] > hi * THIN_SPIKE || f[k] < lo / THIN_SPIKE;
}

/* Times the thin-block probes of dtype dt and gives each pair a table of
 * measured over smooth model at the knots, interpolated between them, and
 * within the bounds a profile accepts. */
static int measure_thin(bench *bb, const sweep *sw, int dt, progress *pg,
                        poas__device_model *out) {
  gemm_sample *s = malloc(THIN_PROBES * sizeof *s);
  if (!s)
    return poas__fail(POAS_ENOMEM, "%s: no memory for the thin-block probes", bb->dev->info.id);
  int ns = thin_shapes(sw, dt, s);
  sweep few = *sw;
  few.reps = sw->thin_reps;
  /* Each timing after a warm-up call of its own shape, as in the sweep:
   * without one, an H100 VM's tables held factors of 20 (cuBLAS loading a
   * kernel the sweep had not used) and its 16-core CPU's of 5 to 9. */
  static const char *const step[2] = {"sthin", "dthin"};
  int rc = measure_gemm(bb, &few, s, ns, pg, step, -1, NULL, NULL, NULL);
  double knot[4][2][THIN_KNOTS];
  if (!rc)
    thin_factors(out, dt, s, ns, knot);
  /* Spikes are timed again, three times, and their median kept. */
  int nspike = 0;
  for (int i = 0; !rc && i < ns; i++) {
    int id = s[i].id;
    if (thin_spike(knot[id / (2 * THIN_KNOTS)][id / THIN_KNOTS % 2], id % THIN_KNOTS))
      s[nspike++] = s[i];
  }
  if (!rc && nspike) {
    few.reps = 3;
    rc = measure_gemm(bb, &few, s, nspike, pg, step, -1, NULL, NULL, NULL);
    if (!rc)
      thin_factors(out, dt, s, nspike, knot);
    poas__info("%s: %d of %d thin-block probes timed again", bb->dev->info.id, nspike, ns);
  }
  for (int pair = 0; !rc && pair < 4; pair++) {
    poas__thin_table table;
    for (int side = 0; side < 2; side++)
      for (int k = 0; k < THIN_KNOTS; k++) {
        poas__debug("calibrate %s %sgemm %s thin %s %d: %.4g over the model", bb->dev->info.id,
                    poas__dtype_letter((poas_dtype)dt), pair_name(pair),
                    side ? "cols" : "rows", thin_knot(k), knot[pair][side][k]);
        int lo = k ? thin_knot(k - 1) : 0, hi = thin_knot(k);
        for (int t = lo + 1; t <= hi; t++) {
          double w = k ? (double)(t - lo) / (hi - lo) : 1;
          table.factor[side][t - 1] =
              w * knot[pair][side][k] + (1 - w) * (k ? knot[pair][side][k - 1] : 0);
        }
      }
    if (!(out->gemm[dt][pair].thin = poas__thin_intern(&table)))
      rc = poas__fail(POAS_ENOMEM, "%s: no memory for a thin-block table", bb->dev->info.id);
  }
  free(s);
  return rc;
}

/* The held-out errors of dtype dt again, with the thin tables its pairs
 * hold now: each held-out sample predicted by its pair's training fit
 * (train[pair]) times its table, so that the figures a profile reports
 * are the errors of what predictions use. R^2 (of the training fit) is left as it is.
 * Returns the mean relative error of the held-out samples (NaN when there
 * is no memory to compute it). */
static double restat_dtype(int dt, const gemm_sample *s, int ns,
                           double train[4][POAS__GEMM_NFEAT], poas__device_model *out) {
  double *all = malloc((size_t)ns * sizeof *all);
  double *pair_err = malloc((size_t)ns * sizeof *pair_err);
  double mean = NAN;
  if (!all || !pair_err)
    goto out;
  int nall = 0;
  double all_max = 0, sum = 0;
  for (int pair = 0; pair < 4; pair++) {
    poas__device_model dm = {0};
    dm.gemm[dt][pair] = out->gemm[dt][pair];
    memcpy(dm.gemm[dt][pair].coef, train[pair], sizeof train[pair]);
    int n = 0;
    double mx = 0;
    for (int i = 0; i < ns; i++) {
      if (s[i].dtype != dt || s[i].pair != pair || !s[i].heldout)
        continue;
      double p = poas__model_gemm_time(&dm, (poas_dtype)dt, pair_op_a(pair), pair_op_b(pair),
                                       s[i].m, s[i].n, s[i].k);
      double e = fabs(p - s[i].t) / s[i].t;
      pair_err[n++] = e;
      all[nall++] = e;
      sum += e;
      mx = fmax(mx, e);
    }
    if (!n)
      continue;
    out->gemm[dt][pair].fit.heldout_max = mx;
    out->gemm[dt][pair].fit.heldout_median = poas__median(pair_err, n);
    all_max = fmax(all_max, mx);
  }
  if (nall) {
    out->gemm_fit[dt].heldout_max = all_max;
    out->gemm_fit[dt].heldout_median = poas__median(all, nall);
    mean = sum / nall;
  }
out:
  free(pair_err);
  free(all);
  return mean;
}

/* Keeps dtype dt's thin-block tables only if they predict its held-out
 * samples (thin blocks and squares of the sweep's own sizes, up to 3072 in
 * a full sweep, where the probes are 512 x s x 430 on the CI machine) no
 * worse than the smooth model alone, by the mean relative error over all
 * pairs; the held-out figures stored are those of the choice. The probes
 * are small so that they take seconds, and what they find does not always
 * hold at the sizes a split runs. On one thread their operands stay in
 * the caches, so their factors (0.5-1.0 at short sides under 32) made thin
 * blocks that stream their operands look faster than they are: a full
 * calibration of the CI machine's cpu:threads=1 had a held-out mean error
 * of 10.3% (s) and 9.8% (d) with its tables, 5.1% and 4.4% without, and
 * on shapes calibration never measured the tables took the median error
 * from 4.2-6.1% to 4.7-10.5% and the 90th percentile from 10-14% to
 * 20-26%. On two threads they have helped (the 90th percentile on those
 * shapes 11-18% with them, 33-43% without), but two full calibrations of
 * them on a noisier day had held-out mean errors of 17-21% with their
 * tables and 7-8.5% without (one kept them by force: on those shapes its
 * largest error was 100-110% with them, 47-62% without). Tables
 * within THIN_KEEP_SLACK (and THIN_KEEP_ABS) of the smooth model's error
 * are kept: they cost nothing there (a sim's are all 1, its errors under
 * 0.1%), and the held-out set samples only a few of the short sides whose
 * swings they record. */
#define THIN_KEEP_SLACK 1.05
#define THIN_KEEP_ABS 1e-3
static void keep_thin_if_better(const poas__device *dev, int dt, const gemm_sample *s, int ns,
                                double train[4][POAS__GEMM_NFEAT], poas__device_model *out) {
  const poas__thin_table *tables[4];
  for (int pair = 0; pair < 4; pair++)
    tables[pair] = out->gemm[dt][pair].thin, out->gemm[dt][pair].thin = NULL;
  double without = restat_dtype(dt, s, ns, train, out);
  for (int pair = 0; pair < 4; pair++)
    out->gemm[dt][pair].thin = tables[pair];
  double with = restat_dtype(dt, s, ns, train, out);
  if (!(with > without * THIN_KEEP_SLACK + THIN_KEEP_ABS)) {
    poas__info("%s: %sgemm thin-block tables kept: held-out mean error %.2f%% with them, %.2f%% "
               "without",
               dev->info.id, poas__dtype_letter((poas_dtype)dt), 100 * with, 100 * without);
    return;
  }
  for (int pair = 0; pair < 4; pair++)
    out->gemm[dt][pair].thin = NULL;
  restat_dtype(dt, s, ns, train, out);
  poas__info("%s: %sgemm thin-block tables left out: held-out mean error %.2f%% with them, "
             "%.2f%% without",
             dev->info.id, poas__dtype_letter((poas_dtype)dt), 100 * with, 100 * without);
}

/* Whether a quick calibration whose sweep ran at `per_work` seconds per
 * unit of work must leave out the thin-block probes' `work` units to end
 * by pg->o->end_s. The probes refine the model of blocks with few rows or
 * columns (and a quick calibration of the CI machine kept them for one
 * dtype in two), while a minute is what --quick promises: on that machine's
 * first calibration, with 25 s of building PoCL's kernels, cpu0 and PoCL's
 * probes took 15 s of a calibration that then took 68 s. A full
 * calibration runs them, unless its sweep was sized to the time left
 * (sweep.slow): a sim of 1e8 flop/s would spend 15 minutes on them. */
static int thin_out_of_time(const progress *pg, const sweep *sw, double per_work, double work) {
  double end = pg->o->end_s;
  return (pg->o->quick || sw->slow) && end > 0 && work > 0 && per_work > 0 &&
         poas__now() + work * per_work > end;
}

/* after_work: the thin-block probes' work, which follows the sweep. */
static int calibrate_gemm(bench *bb, const sweep *sw, int dtype_mask, gemm_sample *s, int ns,
                          double after_work, progress *pg, poas__device_model *out) {
  /* One large warm-up per dtype: threads spun up, pages touched; a GPU
   * brought to its sustained regime. */
  for (int dt = 0; dt < 2; dt++) {
    if (!(dtype_mask & (1 << dt)))
      continue;
    int rc = poas__gemm_sustain(bb->dev, 0, (poas_dtype)dt, bb->a, bb->b, bb->c, bb->cap,
                                SUSTAIN_START_S);
    if (rc)
      return poas__fail(rc, "%s: GEMMs failed during calibration", bb->dev->info.id);
    int64_t big = sw->squares[sw->nsquares - 1];
    gemm_sample w = {.dtype = dt, .m = big, .n = big, .k = big};
    double t;
    rc = time_gemm(bb, &w, &t);
    if (rc)
      return rc;
  }
  static const char *const step[2] = {"sgemm", "dgemm"};
  out->sweep_planned = POAS__MIN(sw->reps, MAX_REPS);
  double per_work;
  handoff_seen seen;
  int rc = measure_gemm(bb, sw, s, ns, pg, step, after_work, &out->sweep_passes, &per_work,
                        &seen);
  out->handoff_timings = seen.timings;
  out->handoff_slow = seen.slow;
  memcpy(out->handoff_extra, seen.extra, sizeof out->handoff_extra);
  memcpy(out->handoff_latency_ns, seen.latency_ns, sizeof out->handoff_latency_ns);
  if (!rc && thin_out_of_time(pg, sw, per_work, after_work)) {
    out->thin_skipped = 1;
    poas__info("%s: thin-block probes left out to keep to the time calibration has",
               bb->dev->info.id);
    report(pg, "fit", after_work);
  }
  for (int dt = 0; !rc && dt < 2; dt++) {
    if (!(dtype_mask & (1 << dt)))
      continue;
    double train[4][POAS__GEMM_NFEAT];
    rc = fit_dtype(bb->dev, dt, s, ns, out, train);
    if (!rc && !out->thin_skipped)
      rc = measure_thin(bb, sw, dt, pg, out);
    if (!rc && !out->thin_skipped)
      keep_thin_if_better(bb->dev, dt, s, ns, train, out);
    /* Calls moved to fewer threads are predicted from the threads step's
     * larger timings (see poas__threads_thin_table). */
    int64_t l = threads_shape(sw, dt, 1, 1).m;
    for (int pair = 0; !rc && pair < 4; pair++) {
      poas__thin_table tt;
      poas__gemm_model *gm = &out->gemm[dt][pair];
      if (poas__threads_thin_table(out, dt, bb->few_t[dt], l, gm->thin, &tt)) {
        const poas__thin_table *kept = poas__thin_intern(&tt);
        if (kept)
          gm->thin = kept;
      }
    }
    /* Each such call's time on one thread per element of its long operand
     * (l x l): what calls the slow hand-off state moves to one thread take
     * (poas__threads_slow_table). One thread does not depend on the
     * state the step met. */
    for (int side = 0; !rc && side < 2; side++)
      for (int sz = 1; sz <= POAS__FEW_SIDE; sz++) {
        double per = bb->one_t[dt][side][sz] / ((double)l * (double)l);
        out->one_thread[dt][side][sz] =
            per >= POAS__ONE_THREAD_MIN && per <= POAS__ONE_THREAD_MAX ? per : 0;
      }
    /* The held-out figures of the model as stored: the threads table
     * above changes what held-out samples with a short side of 32 or less
     * are predicted, and without thin probes the figures were the raw
     * linear fit's, which ignores the cap on the padding term the model
     * applies (an H100 dgemm TN read 9.34% held out, its model 8.87%). */
    if (!rc)
      restat_dtype(dt, s, ns, train, out);
  }
  if (!rc)
    report(pg, "fit", 0);
  return rc;
}

/* --------------------------------------------------------------- all */

static void bench_free(bench *bb) {
  poas__device *dev = bb->dev;
  if (bb->c.ptr)
    dev->be->mem_free(dev, bb->c);
  if (bb->b.ptr)
    dev->be->mem_free(dev, bb->b);
  if (bb->a.ptr)
    dev->be->mem_free(dev, bb->a);
  free(bb->host);
}

/* Buffers a, b and c of `bytes` each on the device (and a host staging
 * buffer as large for a device with its own memory), loaded with random
 * operands; bench_free releases what was allocated, on failure too. */
static int small_bench(poas__device *dev, size_t bytes, bench *bb) {
  *bb = (bench){.dev = dev, .cap = bytes};
  int rc = dev->be->mem_alloc(dev, bytes, &bb->a);
  if (!rc)
    rc = dev->be->mem_alloc(dev, bytes, &bb->b);
  if (!rc)
    rc = dev->be->mem_alloc(dev, bytes, &bb->c);
  if (!rc && !dev->info.host_memory) {
    bb->host_cap = bytes;
    if (!(bb->host = malloc(bytes)))
      rc = poas__fail(POAS_ENOMEM, "%s: no memory for the staging buffer", dev->info.id);
  }
  return rc ? rc : load_operands(bb);
}

/* What the rate probe measured: the sgemm rate of its largest call, which
 * sets the sweep's sizes, and the line through its two largest calls
 * (seconds = latency + flops / marginal), which predicts a slow device's
 * sweep; 0 where not measured (the sweep is then left unscaled). */
typedef struct rate_probe {
  int64_t side;    /* the largest call's m = n = k */
  double rate;     /* its flop/s */
  double marginal; /* flop/s past the calls' fixed cost */
  double latency;  /* that fixed cost, in seconds a call */
} rate_probe;

/* The probe's calls: squares from PROBE_FIRST, doubling, up to 512^3 on
 * every device that runs a 256^3 sgemm within PROBE_CALL_S / 8 (1.1e9
 * flop/s), where only the 512^3 was timed before; a slower one stops at the
 * first side whose next would take longer than PROBE_CALL_S. The 512^3
 * alone took a sim of 1e8 flop/s 16 s, and one of 1e6 flop/s 27 minutes. */
#define PROBE_FIRST 16
#define PROBE_LAST 512
#define PROBE_CALL_S 0.25

static void probe_rate(poas__device *dev, rate_probe *out) {
  *out = (rate_probe){0};
  bench bb;
  double prev_flops = 0, prev_t = 0;
  if (small_bench(dev, (size_t)PROBE_LAST * PROBE_LAST * sizeof(float), &bb))
    goto done;
  for (int64_t n = PROBE_FIRST; n <= PROBE_LAST; n *= 2) {
    /* The fastest of three: the probe sets every later size, and one
     * disturbed call must not shrink them all (on an H100 VM a single
     * timing once read the 16-core CPU at 4.4 GFLOP/s, scaled its sweep by
     * 0.35 and left a profile 12% off). */
    gemm_sample w = {.dtype = POAS_FLOAT32, .m = n, .n = n, .k = n};
    double best = 0, flops = 2.0 * (double)n * (double)n * (double)n;
    for (int rep = 0; rep < 3; rep++) {
      double t;
      if (time_gemm(&bb, &w, &t) != 0)
        goto done;
      if (t > 0 && (best == 0 || t < best))
        best = t;
    }
    if (!(best > 0))
      break;
    out->side = n;
    out->rate = flops / best;
    if (prev_t > 0 && best > prev_t) {
      out->marginal = (flops - prev_flops) / (best - prev_t);
      out->latency = POAS__MAX(best - flops / out->marginal, 0);
    } else {
      out->marginal = out->latency = 0;
    }
    prev_flops = flops;
    prev_t = best;
    if (n > PROBE_FIRST && best * 8 > PROBE_CALL_S)
      break;
  }
done:
  bench_free(&bb);
}

/* The shapes poas__calibrate_build runs for each dtype and transpose pair:
 * below CLBlast's direct-kernel limit on PoCL (128^3, devices/opencl/), and
 * above it with sides that are whole tiles and sides that are not (the
 * indirect kernel then pads its operands with kernels of their own). */
static const int64_t build_sides[] = {60, 250, 256};

int poas__calibrate_build(poas__device *dev, const poas__calib_opts *o) {
  enum { SIDE = 256 };
  if (o->progress)
    o->progress(o->user, dev->info.id, "kernels", o->frac0);
  /* A sim computes nothing, and has nothing to build; beside a real
   * device it sleeps for its calls' time, and a sim of 1e8 flop/s spent
   * 40 s here. */
  if (dev->info.kind == POAS_DEVICE_SIM)
    return 0;
  bench bb;
  int rc = small_bench(dev, (size_t)SIDE * SIDE * sizeof(double), &bb);
  for (int dt = 0; !rc && dt < 2; dt++) {
    if (!(o->dtype_mask & (1 << dt)))
      continue;
    for (int pair = 0; !rc && pair < 4; pair++)
      for (size_t i = 0; !rc && i < sizeof build_sides / sizeof *build_sides; i++) {
        int64_t n = build_sides[i];
        gemm_sample g = {.dtype = dt, .pair = pair, .m = n, .n = n, .k = n};
        poas__gemm_call call = sample_call(&bb, &g);
        double t0 = poas__now();
        rc = dev->be->gemm(dev, 0, &call);
        if (!rc)
          rc = poas__dev_sync_all(dev);
        poas__debug("calibrate %s: built %sgemm %s %lld^3 in %.3f s", dev->info.id,
                    poas__dtype_letter((poas_dtype)dt), pair_name(pair), (long long)n,
                    poas__now() - t0);
        if (o->progress) /* a sign of life: one call may take seconds */
          o->progress(o->user, dev->info.id, "kernels", o->frac0);
      }
    if (!rc && dev->gemm_wants_bt) {
      poas__transpose_call t = {.dtype = (poas_dtype)dt, .rows = SIDE, .cols = SIDE,
                                .src = {bb.a, 0, SIDE}, .dst = {bb.b, 0, SIDE}};
      rc = dev->be->transpose(dev, 0, &t);
    }
  }
  if (!rc)
    rc = poas__dev_sync_all(dev);
  bench_free(&bb);
  if (rc)
    return poas__fail(rc, "%s: GEMMs failed while building the device's kernels",
                      dev->info.id);
  return 0;
}

/* Seconds the samples take in `passes` passes on dev, which the probe
 * measured: each sample's warm-up and timed calls (time_gemm) on the
 * probe's line, dgemm at half the sgemm rate (as on the CPUs and sims
 * measured). */
static double sweep_seconds(const poas__device *dev, const gemm_sample *s, int ns,
                            const rate_probe *p, int passes) {
  int calls = 1 + timed_calls(dev);
  double t = 0;
  for (int i = 0; i < ns; i++) {
    double rate = s[i].dtype == POAS_FLOAT64 ? p->marginal / 2 : p->marginal;
    t += calls * (p->latency + 2.0 * (double)s[i].m * (double)s[i].n * (double)s[i].k / rate);
  }
  return t * passes;
}

/* Scales a device's sweep (f) down, by tenths, to the largest size whose
 * fewest passes (sweep_min_passes) the probe says end by o->end_s, `floor`
 * at the least. It returns 1 when even the sweep at `floor` would end
 * later, for the caller to refuse a slow device (POAS_EFIT) or run a fast
 * one late; 0 when it fits, and below 0 on an error. The thin-block probes
 * are not counted: such a sweep leaves them out when late
 * (thin_out_of_time). */
static int fit_sweep(poas__device *dev, const poas__calib_opts *o, const sweep *nominal,
                     const rate_probe *p, double floor, double *f, double *need,
                     scaled_sweep *out) {
  gemm_sample *s = malloc((size_t)max_shapes(nominal) * 8 * sizeof *s);
  if (!s)
    return poas__fail(POAS_ENOMEM, "%s: no memory for the GEMM sweep's shapes", dev->info.id);
  int passes = sweep_min_passes(o->quick);
  for (;;) {
    scale_sweep(nominal, *f, out);
    int ns = sweep_samples(&out->sw, o->dtype_mask, dev->gemm_tile_bytes, s);
    *need = sweep_seconds(dev, s, ns, p, passes);
    poas__debug("calibrate %s: the sweep scaled by %.3f would take %.3g s in %d passes",
                dev->info.id, *f, *need, passes);
    if (poas__now() + *need <= o->end_s || *f <= floor)
      break;
    *f = POAS__MAX(*f * 0.9, floor);
  }
  free(s);
  return *need > POAS__MAX(o->end_s - poas__now(), 0);
}

/* How far a quick calibration short of time scales a fast device's sweep
 * down from the size its rate gives: to 0.7 of it, a third of each
 * sample's flops. On the 2-core CI machine class's Intel VM, PoCL's first
 * build of its kernels took 34-37 s of the minute, cpu0's two passes at
 * its scale (1.38) then took 9 s where its part of the time left was 6,
 * and the calibration took 54.5 to 61.6 s. The sweep's largest sides stay
 * near the reference sizes (1536 at a scale of 1). */
#define QUICK_FIT_FLOOR 0.7

/* The sweep for a device: the nominal one scaled to its speed, but never
 * beyond what a quarter of its memory holds in three operands. A device
 * slower than a profile may hold is refused before anything else is
 * measured (POAS_EFIT): a sim of 1e3 flop/s was measured for all of its
 * sweep, in virtual time, to be refused by the profile's read-back, and
 * beside a real device it would have slept for days. */
static int device_sweep(poas__device *dev, const poas__calib_opts *o, scaled_sweep *out) {
  sweep nominal = sweep_for(o->quick);
  rate_probe p;
  probe_rate(dev, &p);
  if (p.marginal > 0 && p.marginal < POAS__PROFILE_MIN_RATE)
    return poas__fail(POAS_EFIT,
                      "%s: sgemm runs at %.3g flop/s, below the %.3g flop/s a profile's models "
                      "may stand for (the reader refuses slower ones as absurd); not calibrated",
                      dev->info.id, p.marginal, POAS__PROFILE_MIN_RATE);
  double f = p.rate > 0 ? cbrt(p.rate / REFERENCE_RATE) : 1;
  f = POAS__MIN(POAS__MAX(f, MIN_SCALE), 4.0);
  double mem_side = sqrt((double)dev->info.memory_bytes / 4 / 3 / sizeof(double));
  if ((double)nominal.big_max * f > mem_side)
    f = POAS__MIN(f, POAS__MAX(mem_side / (double)nominal.big_max, SLOW_SCALE));
  /* In virtual time a sweep costs no time at all. */
  int timed = p.marginal > 0 && !dev->virtual_time && o->end_s > 0;
  int rc = 0, slow = f < SLOW_SCALE && timed;
  double need = 0;
  if (slow) {
    rc = fit_sweep(dev, o, &nominal, &p, MIN_SCALE, &f, &need, out);
    if (rc > 0)
      rc = poas__fail(POAS_EFIT,
                      "%s: too slow to calibrate in the time it has: at %.3g flop/s (sgemm), "
                      "the smallest GEMM sweep's %d passes would take %.0f s, and %.0f s are "
                      "left of the %s calibration's; not calibrated",
                      dev->info.id, p.marginal, sweep_min_passes(o->quick), need,
                      POAS__MAX(o->end_s - poas__now(), 0), o->quick ? "quick" : "full");
  } else if (timed && o->quick) {
    /* Late all the same, it runs at the floor and gives up passes and
     * probes (sweep_out_of_time, thin_out_of_time). */
    rc = fit_sweep(dev, o, &nominal, &p, POAS__MAX(f * QUICK_FIT_FLOOR, SLOW_SCALE), &f, &need,
                   out);
    rc = rc > 0 ? 0 : rc;
  } else
    scale_sweep(&nominal, f, out);
  out->sw.slow = slow;
  if (!rc)
    poas__info("%s: calibration sizes scaled by %.2f (sgemm %lld^3 at %.3g GFLOP/s)",
               dev->info.id, f, (long long)p.side, p.rate / 1e9);
  return rc;
}

/* Whether a device that can_block runs its GEMMs faster in pieces: the
 * side of them, BLOCK_SIDE, and the call it times whole and in pieces,
 * BLOCK_PROBE^3 with B transposed as splits give an OpenCL device. On the
 * 2-core CI class's Intel VM PoCL ran that sgemm in 0.15 s whole and
 * 0.05 s in pieces (devices/opencl/opencl.c, ocl_gemm_blocked); pieces
 * must win by BLOCK_GAIN, more than two timings of a VM stray. */
#define BLOCK_SIDE 512
#define BLOCK_PROBE 1024
#define BLOCK_GAIN 1.15

/* The better of two timings of g on dev in its pieces now (a first,
 * untimed call warms the kernels up); 0 on an error. */
static double time_block_probe(poas__device *dev, const poas__gemm_call *g) {
  double best = 0;
  for (int r = 0; r < 3; r++) {
    double t0 = poas__now();
    if (dev->be->gemm(dev, 0, g) || poas__dev_sync_all(dev))
      return 0;
    double t = poas__now() - t0;
    if (r && (!(best > 0) || t < best))
      best = t;
  }
  return best;
}

/* Chooses, by dtype, whether the device runs its GEMMs in pieces
 * (poas__device.gemm_block) for the sweep and for the runs its models
 * will plan: BLOCK_SIDE where the probe ran faster so, else whole calls.
 * Nothing to choose where the device cannot block (block=N keeps N); one
 * that cannot hold the probe's operands runs whole calls, as it did before
 * calibration chose. */
static void choose_block(poas__device *dev, const poas__calib_opts *o) {
  if (!dev->can_block)
    return;
  dev->gemm_block[0] = dev->gemm_block[1] = 0;
  bench bb;
  if (small_bench(dev, (size_t)BLOCK_PROBE * BLOCK_PROBE * sizeof(double), &bb)) {
    poas__clear_detail();
    bench_free(&bb);
    return;
  }
  for (int dt = 0; dt < 2; dt++) {
    if (!(o->dtype_mask & (1 << dt)))
      continue;
    gemm_sample g = {.dtype = dt, .pair = 2, .m = BLOCK_PROBE, .n = BLOCK_PROBE,
                     .k = BLOCK_PROBE};
    poas__gemm_call call = sample_call(&bb, &g);
    double whole = time_block_probe(dev, &call);
    dev->gemm_block[dt] = BLOCK_SIDE;
    double pieces = time_block_probe(dev, &call);
    int take = whole > 0 && pieces > 0 && pieces * BLOCK_GAIN < whole;
    dev->gemm_block[dt] = take ? BLOCK_SIDE : 0;
    poas__info("%s: %sgemm of %d^3 took %.3g ms whole and %.3g ms in %d pieces: %s",
               dev->info.id, poas__dtype_letter((poas_dtype)dt), BLOCK_PROBE, whole * 1e3,
               pieces * 1e3, BLOCK_SIDE, take ? "pieces" : "whole calls");
  }
  poas__clear_detail();
  bench_free(&bb);
}

int poas__calibrate_device(poas__device *dev, const poas__calib_opts *o, poas__device_model *out) {
  /* Calls run by the tables calibration sets, not by the slow state's
   * (the context derives that one again from the new models). */
  atomic_store(&dev->handoff_slow, 0);
  choose_block(dev, o);
  scaled_sweep scaled;
  int rc = device_sweep(dev, o, &scaled);
  if (rc)
    return rc;
  sweep sw = scaled.sw;
  sw.thin_large = own_processors(dev);
  gemm_sample *s = malloc((size_t)max_shapes(&sw) * 8 * sizeof *s);
  if (!s)
    return poas__fail(POAS_ENOMEM, "%s: no memory for the GEMM sweep's shapes", dev->info.id);
  int ns = sweep_samples(&sw, o->dtype_mask, dev->gemm_tile_bytes, s);
  size_t elems = 0;
  for (int i = 0; i < ns; i++)
    elems = POAS__MAX(elems, operand_elems(&s[i]));
  /* The thin-block probes: their work, and operands that fit the buffers
   * (a slow device's sweep is scaled down, its probes' long side is not). */
  gemm_sample *probe = malloc(THIN_PROBES * sizeof *probe);
  if (!probe) {
    free(s);
    return poas__fail(POAS_ENOMEM, "%s: no memory for the thin-block probes", dev->info.id);
  }
  double probe_work = 0;
  for (int dt = 0; dt < 2; dt++) {
    int np = o->dtype_mask & (1 << dt) ? thin_shapes(&sw, dt, probe) : 0;
    for (int i = 0; i < np; i++) {
      probe_work += gemm_work(&probe[i]) * sw.thin_reps;
      elems = POAS__MAX(elems, operand_elems(&probe[i]));
    }
  }
  free(probe);
  /* Host staging buffer: copies are timed up to this size (and the
   * largest operand). The pipeline moves tiles of a quarter of a device's
   * share, hundreds of MiB on a large GPU, and pageable copies that large
   * ran a third slower than 16 MiB ones on an H100 machine, so the full
   * sweep reaches them. */
  size_t staging = (size_t)(o->quick ? 16 : 256) << 20;
  progress pg = {o, dev->info.id, 0,
                 2 + probe_work + threads_step_work(dev, &sw, o->dtype_mask)};
  for (int i = 0; i < ns; i++) {
    s[i].id = i;
    pg.total += gemm_work(&s[i]) * POAS__MIN(sw.reps, MAX_REPS);
  }
  if (!dev->info.host_memory)
    pg.total += (dev->be->host_register ? 4 : 2) *
                doubling_sizes(4096, POAS__MIN(elems * sizeof(double), staging));
  int transposes = !dev->info.host_memory && dev->gemm_wants_bt;
  for (int dt = 0; dt < 2 && transposes; dt++)
    if (o->dtype_mask & (1 << dt))
      pg.total += doubling_sizes(65536, transpose_top(dev, o->quick));

  poas__device_model m = {0};
  m.source = POAS__MODEL_CALIBRATED;
  report(&pg, "memory", 0);
  m.memory_bytes = probe_memory(dev);
  report(&pg, "memory", 1);

  bench bb = {.dev = dev, .cap = elems * sizeof(double)};
  bb.host_cap = dev->info.host_memory ? 0 : POAS__MIN(bb.cap, staging);
  if (bb.cap * 3 > m.memory_bytes / 2)
    rc = poas__fail(POAS_ETOOBIG, "%s: too little memory for the calibration sweep",
                    dev->info.id);
  if (!rc && bb.host_cap && !(bb.host = malloc(bb.host_cap)))
    rc = POAS_ENOMEM;
  if (!rc)
    rc = dev->be->mem_alloc(dev, bb.cap, &bb.a);
  if (!rc)
    rc = dev->be->mem_alloc(dev, bb.cap, &bb.b);
  if (!rc)
    rc = dev->be->mem_alloc(dev, bb.cap, &bb.c);
  if (rc == POAS_ENOMEM)
    poas__fail(rc, "%s: cannot allocate the calibration buffers", dev->info.id);
  if (!rc)
    rc = load_operands(&bb);
  if (!rc && !dev->info.host_memory)
    rc = calibrate_transfers(&bb, &sw, &pg, &m);
  if (!rc && transposes)
    rc = calibrate_transpose(dev, transpose_top(dev, o->quick), o->dtype_mask, &sw, &pg,
                             m.transpose);
  if (!rc)
    rc = handoff_probe(&bb, &m.handoff[0]);
  if (!rc)
    rc = calibrate_threads(&bb, &sw, o->dtype_mask, &pg, &m);
  if (!rc)
    rc = calibrate_gemm(&bb, &sw, o->dtype_mask, s, ns, probe_work, &pg, &m);
  if (!rc)
    rc = handoff_probe(&bb, &m.handoff[1]);
  bench_free(&bb);
  free(s);
  if (rc)
    return rc;
  /* Dtypes not measured keep no model; the caller fills them in. The
   * pieces its GEMMs were measured in (choose_block's, or block=N's) go
   * with the models. */
  memcpy(m.gemm_block, dev->gemm_block, sizeof m.gemm_block);
  *out = m;
  pg.done = pg.total;
  report(&pg, "done", 0);
  return 0;
}
