/* predict.h: what the library knows of each device's speed. At poas_init
 * the models come from the profile when it matches this machine, else from
 * built-in estimates (exact ones for sim devices). Calibration, which
 * measures devices and writes profiles, lives here too. */
#ifndef POAS_PREDICT_H
#define POAS_PREDICT_H

#include "devices/device.h"
#include "models/model.h"
#include "models/profile.h"

#include <limits.h>

/* What happened when models were attached to a context's devices. */
typedef struct poas__profile_status {
  int loaded;              /* a profile was read and used */
  char path[PATH_MAX];     /* the profile looked for (may not exist) */
  char problem[512];       /* why it was not used, in words; "" when used or absent */
  double age_s;            /* seconds since the profile was written */
  char created[32];        /* when it was written (ISO 8601), "" when not loaded */
  /* When every device replays one profile file (sim:profile=FILE#ID),
   * the cores of the host it was calibrated on, as its fingerprint
   * records them; else 0. */
  int replayed_host_cores;
} poas__profile_status;

/* Fills models[i] for each device of `set`: from the profile at
 * `profile_path` (NULL: the default path) unless `no_profile`, else a
 * built-in estimate. A device whose fingerprint differs from the
 * profile's, or which the profile does not cover, gets the built-in
 * estimate, and the status says which. A sim device with profile=FILE
 * (optionally FILE#ID to pick a device of that profile; default its first)
 * replays it: its model and its simulated times both follow that profile's
 * model, so `models` must outlive the devices of `set`. Sims take no
 * model from the profile, but one named for them is read all the same,
 * and the status says whether it could be. Never fails for a
 * missing or mismatched default profile (the status says why); returns an
 * error for out-of-memory and for a sim replay profile that cannot be
 * used. */
int poas__predict_attach(const poas__devset *set, const char *profile_path, int no_profile,
                         poas__device_model models[], poas__profile_status *status);

/* The device runs its calls as its model dm was fitted to: dm's threads
 * tables (threads_slow derived here, poas__threads_slow_table) go to the
 * device's, and so do its GEMM pieces where the device can_block. */
void poas__device_take_settings(poas__device *dev, poas__device_model *dm);

/* A built-in estimate for one device: exact for sim devices, rough (from
 * peak estimates) for the others. */
void poas__predict_builtin(const poas__device *dev, poas__device_model *out);

/* ---------------------------------------------------------- calibration */

typedef struct poas__calib_opts {
  int quick;               /* the short sweep */
  int dtype_mask;          /* 1 << POAS_FLOAT32 | 1 << POAS_FLOAT64 */
  void (*progress)(void *user, const char *device_id, const char *step, double fraction);
  void *user;
  double frac0, frac1;     /* the slice of overall progress this device spans */
  /* poas__now() by which the device's calibration should end; its GEMM
   * sweep then runs fewer passes where the machine is slow (three of its
   * five at the least, two in a quick calibration, which also leaves out
   * its thin-block probes when late). 0: no limit. */
  double end_s;
} poas__calib_opts;

/* Fits a transfer model to n timed copies: X holds rows (1, bytes), y the
 * seconds, held marks samples kept out of the fit for its error figures.
 * t = latency + bytes / bandwidth, with a knee at one of the measured
 * sizes of 1 MiB or more, with at least two sizes past it, when that fits
 * significantly better (an F-test at 1% over the sizes of 1 MiB or more)
 * and the rates on its two sides differ by a tenth or more: the bytes past
 * the knee move at bandwidth_beyond. POAS_EFIT when no positive
 * rate fits, POAS_ENOMEM when memory ran out. */
int poas__fit_transfer(const double *X, const double *y, const int *held, int n,
                       poas__transfer_model *tm);

/* Keeps a device with its own processors (a GPU) computing for `seconds`:
 * back-to-back square GEMMs of dtype on lane `lane`, on buffers a, b and c
 * of `bytes` each (sides up to 2048), then a wait for them. A GPU at its
 * power limit clocks down, and a GEMM's time then depends on how hard the
 * GPU worked just before (predict/calibrate.c, "The GPU's regime"): so
 * calibration and bench/accuracy time a GPU's GEMMs right after this, in
 * the sustained regime that a split's back-to-back tiles run in. Does
 * nothing on devices that compute on the host, on simulated ones, or when
 * the buffers hold no 256^2 square. Returns 0 or the backend's error. */
int poas__gemm_sustain(poas__device *dev, int lane, poas_dtype dtype, poas__mem a, poas__mem b,
                       poas__mem c, size_t bytes, double seconds);

/* Runs one small GEMM of each dtype in o->dtype_mask and each transpose pair,
 * at sizes that take each of a BLAS's kernels, and on devices whose GEMM
 * wants B transposed one transpose of each dtype: a device that builds its
 * kernels on first use builds them here. CLBlast over PoCL does, and on
 * the CI machine class with an empty kernel cache (a new machine's first
 * calibration) that took 25 s, which calibration spends before it divides
 * its time between the devices. Nothing on simulated devices. Reports the
 * step "kernels" at o->frac0 through o->progress when set. */
int poas__calibrate_build(poas__device *dev, const poas__calib_opts *o);

/* Measures one device (memory, transfers when it has its own memory, GEMM
 * for each dtype in the mask and each transpose pair) and fits its model
 * into *out (source POAS__MODEL_CALIBRATED; dtypes not measured are left
 * invalid). Drives the device only through its backend table. */
int poas__calibrate_device(poas__device *dev, const poas__calib_opts *opts,
                           poas__device_model *out);

/* A thin-block table that also says what calibration measured of the
 * calls a device runs on fewer threads (poas__device_model.threads_by_side):
 * base's factors (1 where base is NULL), except, for each such short side
 * s of dtype dt, that side's factor: t[side][s], the call s x L x L (rows,
 * side 0) or L x s x L (columns, side 1) timed as the device runs it, over
 * the smooth NN model's time for it. Returns 0 and leaves *out alone when
 * dt has no such side. Calibration puts it in every pair's model: the thin
 * probes are small (512 x n x 430 on the CI machine) and left 12 x 4096 x
 * 4096 on one thread predicted 39% short. */
int poas__threads_thin_table(const poas__device_model *m, int dt,
                             const double t[2][POAS__FEW_SIDE + 1], int64_t l,
                             const poas__thin_table *base, poas__thin_table *out);

/* Measures how much the n devices slow each other when they compute at
 * once (devices that share the host's cores) and writes each one's time
 * factor, at least 1, into factor[i]; shorter windows where the full ones
 * would end after end_s (poas__now()'s clock; 0 for no end). */
int poas__calibrate_contention(poas__device *const *devs, int n, double end_s, double *factor);

/* ------------------------------------------------------------------ fits */

#define POAS__FIT_ACCUM_MAX 4096

/* Pools several fits' figures (one dtype over its transpose pairs). */
typedef struct poas__fit_accum {
  int samples, nerr;
  double ss_res, ss_tot;
  double err[POAS__FIT_ACCUM_MAX];
} poas__fit_accum;

/* Fits y ~ X coef (X: nrows x ncols, row-major; ncols <= POAS__GEMM_NFEAT)
 * by least squares on relative error with non-negative coefficients.
 * Rows with heldout[i] are left out of the fit whose R^2 and held-out
 * errors go to *stats (and to *acc when not NULL), and whose coefficients
 * go to train_coef when not NULL; coef is then refitted on every row.
 * POAS_EFIT when there are too few rows. */
int poas__fit_linear(const double *X, const double *y, const int *heldout, int nrows, int ncols,
                     double *coef, double *train_coef, poas__fit_accum *acc,
                     poas__fit_stats *stats);
void poas__fit_accum_stats(poas__fit_accum *acc, poas__fit_stats *stats);
/* The median of v[n] (sorts v); 0 when n is 0. */
double poas__median(double *v, int n);
/* How far repeated timings t[n] of one thing stray: the median of |t[i] -
 * median| / median (overwrites t); 0 when n < 3, where it says nothing. */
double poas__timing_noise(double *t, int n);

/* The runtime's fixed costs of a run, from n <= POAS__RUN_COST_MAX pairs of
 * runs of one tiny GEMM, each timed end to end less what the models
 * predict for it: plain[r] as a single tile on the caller's thread,
 * engine[r] forced through the engine right after. dispatch_s is the cost
 * of the first, engine_s what the engine adds to it, each taken as a low
 * quantile (see poas__run_costs) and kept within 0 and 0.1 s; spread_s is
 * how far the median run of either kind strayed above that: a machine
 * busy while it was measured. The arrays are left as they are. */
#define POAS__RUN_COST_MAX 64
typedef struct poas__run_cost {
  double dispatch_s, engine_s, spread_s;
} poas__run_cost;
poas__run_cost poas__run_costs(const double *plain, const double *engine, int n);

#endif /* POAS_PREDICT_H */
