/* poas.h: the one public header of POAS.
 *
 * POAS runs one computation (GEMM first) on every useful processor of a
 * machine at once: CPU cores through OpenBLAS, NVIDIA GPUs through cuBLAS and
 * OpenCL devices through CLBlast. Calibrated models predict each device's
 * time, a solver splits the work, an adapter cuts it into device-sized chunks
 * and a scheduler co-executes them. Every run can report what was predicted
 * beside what was measured.
 *
 * Conventions: functions return 0 on success or a negative POAS_E* code;
 * the library never frees memory the caller owns; on an error nothing the
 * caller passed for output is written. Link with `pkg-config --libs poas`.
 */
#ifndef POAS_H
#define POAS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define POAS_VERSION_MAJOR 0
#define POAS_VERSION_MINOR 1
#define POAS_VERSION_PATCH 0

/* Most devices one context drives, and so the size of the arrays in the
 * info, plan and report structures below. */
#define POAS_MAX_DEVICES 32
/* Room for a device id such as "opencl12" and its terminating zero. */
#define POAS_ID_LEN 32

/* ---------------------------------------------------------------- errors */

/* The error list: name, value, message. poas_strerror() and the enum below
 * are both generated from it, so they cannot drift apart. */
#define POAS_ERRNO_MAP(XX)                                                    \
  XX(EINVAL, -1, "invalid argument")                                          \
  XX(ENULL, -2, "null pointer argument")                                      \
  XX(ESIZE, -3, "negative matrix size")                                       \
  XX(ELD, -4, "leading dimension too small")                                  \
  XX(ELAYOUT, -5, "unknown matrix layout")                                    \
  XX(EOP, -6, "unknown transpose operation")                                  \
  XX(EOVERLAP, -7, "output matrix overlaps an input")                         \
  XX(ENOMEM, -8, "out of memory")                                             \
  XX(ENODEV, -9, "no usable device")                                          \
  XX(EDEVICE, -10, "device operation failed")                                 \
  XX(ESPEC, -11, "malformed device specification")                            \
  XX(EPROFILE, -12, "invalid or unusable profile")                            \
  XX(EIO, -13, "input/output error")                                          \
  XX(ENOTSUP, -14, "operation not supported")                                 \
  XX(EFIT, -15, "model fitting failed")                                       \
  XX(ETOOBIG, -16, "problem does not fit in device or host memory")           \
  XX(EDTYPE, -17, "unknown data type")                                        \
  XX(ESTATE, -18, "operation not valid in the current state")                 \
  XX(ERANGE, -19, "index out of range")

typedef enum poas_errno {
  POAS_OK = 0,
#define POAS__ERRNO_ENUM(name, value, msg) POAS_##name = value,
  POAS_ERRNO_MAP(POAS__ERRNO_ENUM)
#undef POAS__ERRNO_ENUM
} poas_errno;

/* A static, human-readable message for an error code; never NULL. */
const char *poas_strerror(int err);
/* The symbolic name ("POAS_EINVAL") of an error code; never NULL. */
const char *poas_err_name(int err);
/* The detail of the last error a POAS call returned in this thread (which
 * device, which token, which file), or "" when there is none. Valid until
 * the next POAS call in this thread. */
const char *poas_error_detail(void);
/* The library's version as "MAJOR.MINOR.PATCH". */
const char *poas_version(void);
/* The level the library logs at now, process-wide: 0 silent, 1 warnings,
 * 2 info, 3 debug; the most verbose of POAS_LOG's (as poas_init last read
 * it, by the library's own rule for numbers) and those of the live
 * contexts that set poas_options.log_level. A program that prints its own
 * note where the library would warn asks this rather than reading
 * POAS_LOG again, so that the two never both speak or both stay silent. */
int poas_log_level(void);
/* Receives the library's messages in place of stderr: `level` 1 warning,
 * 2 info, 3 debug; `message` is one line, without the "poas: " prefix,
 * the level's tag or a newline, and valid only during the call. It is
 * called on whichever thread logs, the library's own workers included,
 * one message at a time; it must not call POAS (should it, what such a
 * call says on that thread goes to stderr, and poas_set_log_handler from
 * it takes effect; a call that waits for the library's own threads may
 * still hang, as they wait for the handler to take their messages). */
typedef void (*poas_log_fn)(void *user, int level, const char *message);
/* Sends every later message to fn (NULL: back to stderr), process-wide,
 * with `user` passed through. Which messages are made is still the log
 * level's to decide (poas_log_level): a handler turns no logging on. Once
 * it returns, the handler it replaced is not running (called from that
 * handler: once the handler returns) and is not called again, so that
 * what its `user` points to may be freed. */
void poas_set_log_handler(poas_log_fn fn, void *user);

/* ----------------------------------------------------------------- types */

typedef enum poas_layout { POAS_ROW_MAJOR = 101, POAS_COL_MAJOR = 102 } poas_layout;
typedef enum poas_op { POAS_NO_TRANS = 111, POAS_TRANS = 112 } poas_op;
typedef enum poas_dtype { POAS_FLOAT32 = 0, POAS_FLOAT64 = 1 } poas_dtype;
typedef enum poas_direction { POAS_H2D = 0, POAS_D2H = 1 } poas_direction;

typedef enum poas_device_kind {
  POAS_DEVICE_CPU = 0,
  POAS_DEVICE_CUDA = 1,
  POAS_DEVICE_OPENCL = 2,
  POAS_DEVICE_SIM = 3
} poas_device_kind;

/* The name of a device kind: "cpu", "cuda", "opencl" or "sim". */
const char *poas_device_kind_name(poas_device_kind kind);

/* An opaque handle on the library: its devices, models and last report.
 * Created by poas_init(), destroyed by poas_finalize(). One context may be
 * used by one thread at a time. */
typedef struct poas_context poas_context;

/* Options for poas_init(). Call poas_options_init() first, then set what
 * you need; a NULL or empty string means "from the environment, else the
 * default", and an empty environment variable is one not set. */
typedef struct poas_options {
  /* Device selection, as POAS_DEVICES: comma-separated entries, each a kind
   * ("cpu", "cuda", "opencl", "sim") or an id ("opencl0"), with settings
   * after colons: "cpu:threads=1,opencl0", "sim:rate=1e11:bandwidth=1e10".
   * Blanks around ',', ':' and '=' are ignored, not those inside a name
   * or value. At most 4095 bytes in all, POAS_MAX_DEVICES entries, 12
   * settings an entry, and 159 bytes a value (a sim:profile= path among
   * them); past these the selection is malformed. Default: every device
   * found.
   *
   * A sim device simulates timing only: it takes the time its settings
   * (or profile) say and computes nothing, so the part of C given to it
   * is not computed. It is for testing scheduling and for planning
   * machines you do not have; a context that mixes sims with real devices
   * gives wrong numbers in C, by design. */
  const char *devices;
  /* Profile path, as POAS_PROFILE; default: poas_default_profile_path's,
   * $XDG_DATA_HOME/poas/<hostname>.json, else
   * ~/.local/share/poas/<hostname>.json. */
  const char *profile;
  /* Do not load any profile: use built-in estimates. */
  int no_profile;
  /* Scheduling policy, as POAS_SCHED: "static", "guided" or "dynamic". */
  const char *sched;
  /* Chrome trace output file, as POAS_TRACE; each run replaces it.
   * poas_init checks that it can be written. Should a run's trace still
   * fail to be written (a full disk), the run succeeds all the same, with
   * a warning (POAS_LOG), and the context writes no trace after it. */
  const char *trace;
  /* Log level, as POAS_LOG: 0 silent, 1 warnings, 2 info, 3 debug (a
   * larger one is 3); -1, as any negative, means take POAS_LOG (default
   * silent). Messages go to stderr (or poas_set_log_handler's handler),
   * which is the process's: while the context lives, every context's messages
   * print at the most verbose of POAS_LOG's level and those of the live
   * contexts that set one; poas_finalize gives its level up. */
  int log_level;
  /* Plan with the calibrated models only (also POAS_ADAPT=0; 1 or unset:
   * learn). By default a context learns from its runs how much slower or
   * faster than its models each device really runs, and plans and predicts
   * with the models scaled by that; calibrating a device resets what it
   * learned of that device. */
  int no_adapt;
} poas_options;

/* Fills *opts with the defaults. */
void poas_options_init(poas_options *opts);

/* Creates a context: opens the selected devices and loads the profile.
 * opts may be NULL. On success *ctx is set and 0 returned; on error *ctx is
 * left untouched. A device that fails at start-up is left out with a warning
 * unless the selection names it explicitly, in which case it is an error;
 * host memory running out while one opens is POAS_ENOMEM either way.
 * A malformed selection is POAS_ESPEC, and one that opens no device
 * POAS_ENODEV. A profile that cannot be read or used, even one named by
 * opts->profile or POAS_PROFILE, is not an error: the devices it would
 * have modelled plan with built-in estimates, and poas_profile_get() says
 * why (loaded, problem); a sim's own sim:profile=FILE that cannot be
 * read is POAS_EPROFILE. A trace file that cannot be written is POAS_EIO,
 * the detail naming it and why. A setting the environment gives in a
 * form it cannot take (POAS_SCHED, POAS_ADAPT other than 0 or 1,
 * POAS_FAULT not ID:after=N,...) is POAS_EINVAL, the detail naming the
 * variable; a POAS_LOG that is no level leaves the library silent, and
 * poas_init says so on stderr, once per value. */
int poas_init(poas_context **ctx, const poas_options *opts);
/* Destroys a context; NULL is allowed. Called from one of the context's
 * own tasks it is ignored, with a warning (it would wait for itself), as
 * it is from poas_calibrate's progress callback. */
void poas_finalize(poas_context *ctx);

/* What a device is. */
typedef struct poas_device_info {
  char id[POAS_ID_LEN];    /* "cpu0", "cuda1", "opencl0", "sim2" */
  poas_device_kind kind;
  char name[128];          /* product name */
  /* Driver / library version, may be empty; a simulated device's is "sim"
   * and each of its settings that is not the default ("sim drate=4e+10
   * shared=1"). Profiles compare it to tell a device from another. */
  char driver[512];
  uint64_t memory_bytes;   /* global memory it can compute from */
  int cores;               /* threads or compute units it uses */
  int shares_host_cores;   /* computes on the same cores as the host CPU */
  int host_memory;         /* computes directly on host memory (no copies) */
  double peak_gflops[2];   /* rough peak estimate, by poas_dtype */
  int has_model;           /* a calibrated model from the profile is in use */
} poas_device_info;

/* Number of devices in the context, or a negative error. */
int poas_device_count(const poas_context *ctx);
/* Copies device `index`'s info into *out. */
int poas_device_get(const poas_context *ctx, int index, poas_device_info *out);

/* ------------------------------------------------------------------ GEMM */

/* C = alpha * op(A) * op(B) + beta * C, with BLAS semantics: op(A) is m x k,
 * op(B) is k x n, C is m x n; when beta is 0, C is not read (NaNs in it do
 * not propagate). Runs on every selected device at once. On an argument
 * error nothing is written, and poas_error_detail() names the argument as
 * the call passed it, in either layout. Sizes whose matrices' bytes
 * overflow 64 bits are refused with POAS_EINVAL, as are leading dimensions
 * whose matrix, counted as whole lines of ld elements (one line too), would
 * pass INT64_MAX / 8 elements, in either precision.
 * A call that would cut a device's share into more than 1024 tiles (a
 * problem some thousand times its memory, as a sim's can be) is refused
 * with POAS_ETOOBIG before anything runs.
 * A device that fails during the run
 * is retired (poas_report.faults counts such failures): the tiles it had
 * copied back to C are kept, and the rest of its work runs on the others.
 * A failure in the middle of a copy back leaves that tile's part of C
 * unknown: with beta = 0 it is written again; with beta != 0 its update
 * cannot be applied twice, and the call fails with POAS_EDEVICE. When
 * every device that took part has failed, the call fails: POAS_ENOMEM
 * where all of them failed for want of memory (host or device), else
 * POAS_EDEVICE. A run
 * that fails once started (a device error, POAS_EDEVICE, or memory,
 * POAS_ENOMEM) may have written part of C: the chunks the devices finished,
 * and C is then to be treated as lost. A CUDA device met by an error that
 * leaves its context unusable (an illegal address, a failed launch) is
 * lost for the rest of the process, in every context: later plans leave
 * it out, "lost: " and the error being the reason in poas_plan.excluded,
 * and a context opened later does not open it. On the caller's thread,
 * calls put back the CUDA context current before them (none where there
 * was none), so the caller's own CUDA code finds it as it left it.
 *
 * C may share no element with A or B (POAS_EOVERLAP); A and B, only read,
 * may overlap each other. Blocks of one array are fine, such as LAPACK's
 * trailing update (A21, A12 and A22 of one matrix) or matrices of
 * interleaved rows: when C and the other matrix have the same leading
 * dimension (and lie a whole number of elements apart) the test is exact,
 * element by element; otherwise any overlap of the address ranges they
 * span is refused. */
int poas_sgemm(poas_context *ctx, poas_layout layout, poas_op transa,
               poas_op transb, int64_t m, int64_t n, int64_t k, float alpha,
               const float *A, int64_t lda, const float *B, int64_t ldb,
               float beta, float *C, int64_t ldc);
int poas_dgemm(poas_context *ctx, poas_layout layout, poas_op transa,
               poas_op transb, int64_t m, int64_t n, int64_t k, double alpha,
               const double *A, int64_t lda, const double *B, int64_t ldb,
               double beta, double *C, int64_t ldc);

/* ---------------------------------------------------------------- report */

/* What one device did in a run. */
typedef struct poas_device_report {
  char id[POAS_ID_LEN];
  double share;            /* fraction of C's elements it computed */
  int chunks;              /* GEMM chunks it ran to their end: a device that failed
                              in its only chunk has 0, and a share of the tiles of
                              that chunk that reached C */
  double predicted_s;      /* what the plan predicted for it */
  double measured_s;       /* from the run's start to its last instruction */
  double busy_s;           /* time with work on the device */
  double idle_s;           /* measured_s - busy_s */
  uint64_t bytes_h2d, bytes_d2h;
  int failed;              /* it failed during the run; its work moved */
  double learned;          /* the factor its models were scaled by, learned from the
                              context's earlier runs (POAS_ADAPT) of calls of the same
                              class (of at most 256 rows, of at most 256 columns, or
                              neither); 1 when none */
} poas_device_report;

/* What one run did: per device and in all. */
typedef struct poas_report {
  poas_dtype dtype;
  int64_t m, n, k;
  int ndevices;
  poas_device_report dev[POAS_MAX_DEVICES];
  double predicted_s;      /* predicted makespan */
  double measured_s;       /* measured makespan */
  double gflops;           /* 2mnk / measured_s / 1e9 */
  int faults;              /* device failures recovered from */
  int virtual_time;        /* all devices simulated: times are virtual */
  char policy[16];         /* "static", "guided" or "dynamic" */
} poas_report;

/* Copies the report of the context's last GEMM into *out (one with m or n
 * = 0 runs nothing: no devices, no time); POAS_ESTATE when nothing has run
 * yet, or when the last GEMM failed or its arguments were refused (it
 * leaves no report: its error code and poas_error_detail() say what
 * failed). An asynchronous GEMM counts when its task runs, and one
 * refused when submitted never runs: it leaves the report as it was. */
int poas_last_report(const poas_context *ctx, poas_report *out);

/* ------------------------------------------------------ prediction (predict/)
 * Calibration measures devices and fits their models; a profile file keeps
 * them; predictions evaluate them. GEMM models are kept per dtype and per
 * transpose pair: index pair = (transa == POAS_TRANS) + 2 * (transb ==
 * POAS_TRANS), so 0 NN, 1 TN, 2 NT, 3 TT. */

/* How well a fitted model describes its measurements. All 0 for a model
 * that was not fitted (built-in estimates). */
typedef struct poas_fit_info {
  int samples;             /* measurements taken (training and held out) */
  double r2;               /* R^2 of the relative-error fit on the training ones */
  double heldout_median;   /* median |predicted - measured| / measured, held out */
  double heldout_max;      /* largest such error on the held-out samples */
  /* How much the machine moved while calibrating: over the samples, the
   * median of each one's median |timing - its median| / median across the
   * sweep's passes. A held-out error near it is the machine's noise, not
   * the model's; calibrate on a quiet machine. 0 when not measured
   * (transfers, one pass, profiles written before it was). */
  double timing_noise;
  /* GEMM models: the smallest and largest factor of the transpose pair's
   * thin-block table (of all its pairs' tables, for a dtype's pooled
   * entry), the time of a block with 1 to 256 rows or columns over what
   * the smooth model says (a BLAS's speed goes up and down with such a
   * short side); both 0 when there is no table (calibration leaves a
   * dtype's tables out when they predict its held-out samples worse). */
  double thin_min, thin_max;
} poas_fit_info;

/* The spread of the runs that time a device's fixed costs
 * (poas_device_fit.run_cost_spread_s) past which most of them waited on
 * another process: a quiet 2-core CI VM shows 1 us for cpu0 and 25 us for
 * PoCL, one with a core spinning 0.4 to 4 ms. Calibration then times more
 * runs, and poas-calibrate warns. */
#define POAS_RUN_COST_BUSY_S 2.5e-4

/* What one device's models are and how good. */
typedef struct poas_device_fit {
  char id[POAS_ID_LEN];
  int calibrated;          /* 1: fitted (a profile or poas_calibrate); 0: estimate */
  poas_fit_info gemm[2];   /* by poas_dtype, pooled over transpose pairs */
  poas_fit_info gemm_pair[2][4]; /* by poas_dtype and transpose pair */
  poas_fit_info transfer[2]; /* by poas_direction; samples 0 for host-memory devices */
  double latency_s[2];     /* transfer model by direction; 0 when none */
  double bandwidth[2];     /* bytes/s by direction; 0 when none */
  /* Past this many bytes a copy moves at bandwidth_beyond; 0: one rate.
   * Calibration keeps a knee only where an F-test at 1% over its copies
   * of 1 MiB or more finds it fits better than one rate. */
  double knee_bytes[2];
  double bandwidth_beyond[2];
  uint64_t memory_bytes;   /* memory the model says the device can allocate */
  double dispatch_s;       /* the runtime's fixed cost of a run on it; 0 when not measured */
  double engine_s;         /* what a run through the engine (several devices or tiles)
                              costs beyond that; 0 when not measured */
  /* How much longer than those costs the median of the runs that measured
   * them took: a machine busy while they were measured, which the costs
   * (taken from the quicker runs) leave out; past POAS_RUN_COST_BUSY_S the
   * runs waited on another process. 0 when not measured; a profile does
   * not keep it. */
  double run_cost_spread_s;
  /* The on-device transpose of a split's shared operand, for devices whose
   * GEMM wants B transposed (OpenCL, through CLBlast), by poas_dtype: a
   * model of the same form as a transfer's, over the matrix's bytes;
   * samples 0 when not measured (profiles before 2026-11-24 measured
   * doubles only). */
  poas_fit_info transpose[2];
  double transpose_latency_s[2], transpose_bandwidth[2], transpose_knee_bytes[2],
      transpose_bandwidth_beyond[2];
  /* How much longer copies take while copies run the other way at the same
   * time (a pipeline's tiles do), as a time factor; 1 when not measured
   * (devices on host memory or on the host's cores). */
  double duplex;
  /* Threads a GEMM of that dtype whose C has n columns runs on,
   * threads_by_cols[dtype][n] for n from 1 to 32 ([0] unused), and one
   * whose C has m rows, threads_by_rows[dtype][m]; the shorter side
   * decides (columns on a tie); 0: all of the device's. Calibration
   * chooses them on devices that compute on several host threads, where
   * fewer ran faster (OpenBLAS on two cores: sgemm of 4 and 12 columns on
   * one). */
  unsigned char threads_by_cols[2][33];
  unsigned char threads_by_rows[2][33];
  /* The same while the host is in the slow hand-off state (see
   * handoff_latency_ns): calibration times every such call on one thread
   * too, and a call that one thread runs faster than all of them with the
   * slow state's term (handoff_extra) runs on one while a context finds
   * the host slow (on the CI machine class, sgemm and dgemm of 1 to 32
   * rows; 12-row calls ran 1.3-2.2x faster). Equal to threads_by_cols /
   * _rows where nothing moves. */
  unsigned char threads_slow_by_cols[2][33];
  unsigned char threads_slow_by_rows[2][33];
  /* Passes the calibration timed its GEMM samples in, and the passes it
   * planned: fewer where the machine ran too slowly for the calibration's
   * time (--quick: a minute on the 2-core CI machine class). Both 0 for a
   * loaded profile, which keeps neither. */
  int sweep_passes, sweep_planned;
  /* 1: a quick calibration short of its time left out the thin-block
   * probes, and with them the thin tables (poas_fit_info.thin_min and
   * thin_max are then 0), except the factors of the calls the device runs
   * on fewer threads (threads_by_cols, _rows), which the threads step
   * measured: on a CPU device those still give a range; 0 otherwise, and
   * for a loaded profile. */
  int thin_skipped;
  /* Seconds the calibration spent having the device build its kernels
   * before measuring (tens of seconds for PoCL on a machine's first
   * calibration, when its kernel cache is empty): in
   * poas_calibration_result only, 0 elsewhere. */
  double build_s;
  /* On a device that computes on several host threads: the time of a
   * POAS_HANDOFF_M x POAS_HANDOFF_N x POAS_HANDOFF_K sgemm (thin, so its
   * threads synchronise often) on all of them over its time on one, at
   * the start of its calibration and at the end. Around 0.75-0.9 where the host hands work
   * between threads quickly; above POAS_HANDOFF_SLOW where it is slow (a
   * VM whose host takes a vCPU away for short spells: 2.5-3 on the CI
   * machine class), and then calls on several threads, thin ones most,
   * run slower than they do when it is quick. Both 0 when not measured
   * (one thread, or a profile written before it was). */
  double handoff_start, handoff_end;
  /* The GEMM sweep's timings that calibration probed for that state
   * between its calls, and those of them that met slow hand-offs. Its
   * models fit the state most of them met: each sample's time is the
   * median of its timings in that state. Both 0 when not probed (one
   * thread, or a profile written before it was). */
  int handoff_timings, handoff_slow_timings;
  /* By dtype: seconds per element of B (n x k) that a call on all the
   * device's threads took more in the slow state than in the quick one,
   * fitted from the sweep's samples timed in both (about 1 ns for sgemm
   * and 1.5 ns for dgemm on the CI machine class); 0 where too few were.
   * A context that learns from its runs (POAS_ADAPT) plans with it while
   * its runs show the host in the state the models do not fit. */
  double handoff_extra[2];
  /* The round trip of a cache line between the device's first two cores,
   * in ns, that calibration saw in the quick hand-off state [0] and the
   * slow one [1] (medians; about 90 and 320 on the CI machine class, where
   * the host moves the two vCPUs apart and back). A context measures it
   * before a run (0.2 ms, at most once per 20 ms) and
   * plans in the state it is nearer. 0 where a state was not seen. */
  double handoff_latency_ns[2];
  /* By dtype: the pieces the device runs a GEMM in, which its models
   * describe: C in pieces of at most this many rows and columns, and k in
   * steps of it; 0 for whole calls. Calibration chooses them on an OpenCL
   * device on the host's cores where they ran 15% faster than whole calls
   * (PoCL's sgemm on the Intel CI VM: 2048^3 at 41 GFLOP/s in pieces of
   * 512, 9.6 whole); opencl0:block=N sets them by hand. */
  int gemm_block[2];
} poas_device_fit;

/* The hand-off probe's sgemm (poas_device_fit.handoff_*), and the ratio
 * above which it says hand-offs were slow. */
#define POAS_HANDOFF_M 12
#define POAS_HANDOFF_N 900
#define POAS_HANDOFF_K 1400
#define POAS_HANDOFF_SLOW 1.2

/* Progress of a calibration: the device being measured, the step
 * ("kernels" while a device builds its kernels before any is measured,
 * which can take tens of seconds on a machine's first calibration, "memory",
 * "h2d", "d2h", "transpose", "sthreads" and "dthreads" for the per-call
 * thread counts, "sgemm", "dgemm", "sthin" and "dthin" for the thin-block
 * tables, "fit", "done"; then device "all" for the probes of the devices
 * together, "contention" and "runs", and "done" at 1) and the fraction of
 * the whole calibration done, from 0 to 1, never going back. Called from
 * the calibrating thread, often (throttle any drawing yourself). A GEMM,
 * a task or a calibration asked of the context from it is POAS_ESTATE
 * (the devices are being measured), and a poas_finalize is ignored. */
typedef void (*poas_progress_fn)(void *user, const char *device_id, const char *step,
                                 double fraction);

typedef struct poas_calibrate_options {
  /* The short sweep (about a minute for a 2-core CPU and both dtypes)
   * instead of the full one (up to about ten minutes). */
  int quick;
  /* Comma-separated ids of the context's devices to measure ("cpu0,sim0",
   * blanks around the commas ignored, as in poas_options.devices); NULL:
   * every device. An id not in the context is POAS_EINVAL; one named
   * twice, or an empty entry ("cpu0,"), POAS_ESPEC. */
  const char *devices;
  /* Which dtypes: a mask of 1 << POAS_FLOAT32 and 1 << POAS_FLOAT64; 0: both. */
  int dtypes;
  /* Profile file to write; NULL: write none (the models are still used). */
  const char *output;
  poas_progress_fn progress; /* may be NULL */
  void *progress_user;
} poas_calibrate_options;

/* Fills *opts with the defaults: full sweep, every device, both dtypes, no
 * output file, no progress callback. */
void poas_calibrate_options_init(poas_calibrate_options *opts);

/* A device of the profile a calibration replaced whose models the new
 * profile keeps (poas_calibration_result.kept). */
typedef struct poas_kept_device {
  char id[POAS_ID_LEN];
  /* 1: measured now, and only the GEMM models of the dtypes in `dtypes`
   * were kept; 0: not measured now, and all its models were kept (the
   * GEMM ones of `dtypes`). */
  int measured;
  int dtypes;              /* a mask as poas_calibrate_options.dtypes */
} poas_kept_device;

/* What poas_calibrate measured. */
typedef struct poas_calibration_result {
  int ndevices;
  poas_device_fit dev[POAS_MAX_DEVICES];
  double seconds;          /* wall time the calibration took */
  /* The profile written, "" when none; a longer path is cut to fit and
   * ends in "..." (as poas_profile_info.path). */
  char output[512];
  /* What the profile written kept of the profile of this machine it
   * replaced: the models this calibration did not measure. */
  int nkept;
  poas_kept_device kept[POAS_MAX_DEVICES];
  /* Why nothing was kept of the file replaced, when there was one: "a
   * profile of another machine (...)" or "a profile this POAS cannot use
   * (...)"; or of a sim's entry, when the sim measured now has other
   * settings: "sim0's models, another device's (...)", one such for each,
   * parted by "; "; "" otherwise. */
  char replaced[512];
} poas_calibration_result;

/* Measures the selected devices (memory, transfers, GEMM over squares,
 * thin row and column blocks and every transpose pair), fits their models,
 * writes the profile when opts->output is set and makes the context use
 * the new models at once. opts may be NULL (defaults); out may be NULL.
 *
 * The output is checked before anything is measured: a symbolic link is
 * followed (its target is replaced, written beside it and renamed over
 * it), the directory is created, and a file there that is not a regular
 * file, or that is not a POAS profile (an empty one aside), is refused,
 * as are a profile of a later format version than this POAS reads (a
 * newer POAS wrote it) and a folder where no file can be created. When the file holds a
 * profile of this machine (same CPU, cores and BLAS, and the devices of
 * the context that it lists match their fingerprints), the new profile
 * keeps what this calibration did not measure: its other devices, and
 * the other dtypes of the devices measured (out->kept says which); a
 * profile of another machine, or one this POAS cannot read, is replaced
 * whole (out->replaced says why).
 *
 * Errors: POAS_EINVAL for an unknown device id or dtype mask, or an
 * output that is not a regular file; POAS_ESPEC for a device id given
 * twice, as poas_init refuses one; POAS_EPROFILE for an output that
 * holds something other than a POAS profile, or a later POAS's; POAS_EIO when the output
 * cannot be written (before measuring, or after) or read; POAS_EFIT when
 * a fit fails, or fits models that the profile reader would refuse (a
 * sim of 1e3 flop/s: its times are absurd), which are then neither
 * written nor used, with an output or without, and before a device is
 * measured where its sgemm runs under the 1e6 flop/s a profile may hold,
 * or so slowly that even its smallest GEMM sweep could not end within the
 * calibration's time (a sim of 1e8 flop/s in both dtypes beside a real
 * device, which then sleeps for its calls: a quick sweep of it needs 53
 * s, where a quick calibration has a minute); POAS_ETOOBIG for a device
 * whose memory cannot hold the sweep's largest operands (a sim of 16 MiB
 * in a full calibration, 4 MiB in a quick one).
 * The context's models are then left as they were.
 * Calibration has the devices to itself: the context's outstanding tasks
 * finish first, and called from one of them it returns POAS_ESTATE. */
int poas_calibrate(poas_context *ctx, const poas_calibrate_options *opts,
                   poas_calibration_result *out);

/* Predicted seconds for a column-major GEMM of this shape on device
 * `device` (an index as for poas_device_get) with the operands already in
 * its memory: the cost of one chunk by the device's calibrated model (or
 * its estimate), as the profile gives it. What the context learned from
 * its runs is not applied (a plan's times are scaled by each device's
 * `learned` factor and the host's hand-off state; poas_plan_gemm_call
 * gives those), so the same profile always gives the same answer. 0 for
 * an empty C. Errors: POAS_ENULL, POAS_ERANGE (device), POAS_EDTYPE, POAS_EOP,
 * POAS_ESIZE (negative size), POAS_EINVAL (sizes whose matrices' bytes
 * overflow 64 bits, as for the GEMM calls). */
int poas_predict_gemm(const poas_context *ctx, int device, poas_dtype dtype, poas_op transa,
                      poas_op transb, int64_t m, int64_t n, int64_t k, double *seconds);
/* Predicted seconds to copy `bytes` between the host's (pageable) memory
 * and device `device` in one direction; 0 for a device that computes on
 * host memory. Errors: POAS_ENULL, POAS_ERANGE, POAS_EINVAL (direction). */
int poas_predict_transfer(const poas_context *ctx, int device, poas_direction direction,
                          uint64_t bytes, double *seconds);

/* The profile behind a context's models. */
typedef struct poas_profile_info {
  /* The file looked for; "" with no_profile, and when every device is
   * simulated and no profile was named (sims take no model from one). A
   * longer path is cut to fit and ends in "..." (the context itself uses
   * the whole path). */
  char path[512];
  int loaded;              /* 1: read, and at least one device uses it */
  char created[32];        /* when it was written (ISO 8601 UTC), or "" */
  double age_s;            /* seconds since then (below 0 when the profile is dated
                            * ahead of this machine's clock); -1 when not loaded */
  /* Why the profile or part of it is not used, in words ("no profile at
   * ...", "cpu0 is 'X' here but 'Y' in the profile", a parse error naming
   * the file, "every device selected is simulated ..."), and whether it
   * was written on another host ("written on another host: its CPU is
   * ...", whose devices that match still use it); "" when every device
   * uses it and it was written on this host. */
  char problem[512];
  int ndevices;            /* as poas_device_count */
  poas_device_fit dev[POAS_MAX_DEVICES]; /* the model each device uses now */
} poas_profile_info;

/* Copies what the context knows of its profile and models into *out. */
int poas_profile_get(const poas_context *ctx, poas_profile_info *out);

/* The default profile path into buf[cap]: $POAS_PROFILE, else
 * $XDG_DATA_HOME/poas/<hostname>.json (an absolute one: a relative
 * XDG_DATA_HOME is ignored), else ~/.local/share/poas/<hostname>.json.
 * POAS_EINVAL when it does not fit; POAS_EPROFILE when there is none
 * (none of the three set, HOME among them). */
int poas_default_profile_path(char *buf, size_t cap);

/* -------------------------------------------------------- planning (optimize/)
 * A plan says how a GEMM would run, without running it: which devices take
 * part, which rows or columns of C each computes, in how many tiles, how
 * many bytes it moves and how long the models predict. The same profile,
 * problem, learned factors, host hand-off state and free device memory
 * give the same plan: a context that learns from its runs (POAS_ADAPT, the
 * default) may plan a problem differently after a run, and a GPU's part
 * fits the memory it could allocate when the plan is made (which matters
 * only where memory, not speed, sets its tiles: another process holding
 * memory on it, or a problem near its size). The hand-off state is measured, not
 * learned: on a device whose profile saw its host in both states
 * (poas_device_fit.handoff_latency_ns; the cpu device on a VM whose host
 * moves its vCPUs apart), each plan first times a cache line's round trip
 * between the device's cores (0.2 ms, at most once per 20 ms), plans calls
 * of few rows or columns for the state it finds, and the device runs them
 * so until the next plan. With learning off, then, the same profile and
 * problem give the same plan on every other device, and on that one while
 * the state holds. poas_sgemm / poas_dgemm run exactly the plan
 * poas_plan_gemm_call returns for their problem, alpha and beta just
 * before (poas_plan_gemm: for beta != 0). */

/* Which dimension of C (in the caller's layout) is cut between devices. */
typedef enum poas_split { POAS_SPLIT_ROWS = 0, POAS_SPLIT_COLS = 1 } poas_split;

/* One device given work. */
typedef struct poas_plan_device {
  char id[POAS_ID_LEN];
  int64_t first, count;    /* rows (or columns) [first, first + count) of C */
  double share;            /* count / (m or n): its fraction of C's elements */
  int64_t tile;            /* rows (or columns) per tile */
  int64_t tiles;           /* tiles it computes (1 on host-memory devices) */
  uint64_t bytes_h2d, bytes_d2h; /* copies to and from the device */
  double compute_s;        /* predicted GEMM time, summed over its tiles */
  double transfer_s;       /* predicted copy time, summed (overlaps compute) */
  double predicted_s;      /* predicted time of its whole pipeline */
  int estimated;           /* no calibrated model: a built-in or conservative
                              estimate */
  /* Its models' times are multiplied by this for computing beside other
   * devices that share the host's cores (caches, memory bandwidth, the
   * host's scheduler): the profile's contention; 1 when no such device
   * computes beside it. */
  double corun;
  /* Its models' times are multiplied by this too: how much slower (above
   * 1) or faster than its models the context's earlier runs found it
   * (POAS_ADAPT), in calls of this one's class (at most 256 rows, at most
   * 256 columns, or neither) where it has run such calls; 1 when none. */
  double learned;
} poas_plan_device;

/* A device left out, and why, in words. */
typedef struct poas_plan_excluded {
  char id[POAS_ID_LEN];
  char reason[200];
} poas_plan_excluded;

typedef struct poas_plan {
  poas_dtype dtype;
  int64_t m, n, k;
  poas_split split;
  int64_t granule;         /* shares are multiples of this many rows/columns */
  /* Predicted time of the whole GEMM. Under the guided and dynamic
   * policies (the default is guided) the run hands out its last rows or
   * columns in pieces smaller than a granule, so the devices finish
   * together: this is then below the latest dev[].predicted_s, which is
   * for whole granules; under static it is that latest time. */
  double makespan_s;
  int ndevices;            /* devices given work, in dev[] */
  poas_plan_device dev[POAS_MAX_DEVICES];
  int nexcluded;           /* devices left out, in excluded[] */
  poas_plan_excluded excluded[POAS_MAX_DEVICES];
} poas_plan;

/* Plans C = alpha op(A) op(B) + beta C with beta != 0 (C is copied to the
 * devices as well as back) and alpha != 0, on the context's devices, and
 * writes the plan into *out. Runs no GEMM and moves no data (it may time
 * the hand-off state, above). Tiles are cut so that every buffer a device
 * allocates stays within its largest allocation (an OpenCL device's
 * CL_DEVICE_MAX_MEM_ALLOC_SIZE) and every operand within what its GEMM
 * can index (CLBlast's kernels index in 32-bit ints), CLBlast's per-call
 * copies of the operands included; a device that cannot keep even one
 * tile within them (its shared operand alone past them, say) is left
 * out, with the reason. Returns POAS_ETOOBIG when the
 * problem fits in no device's memory or limits, POAS_ENODEV when no device
 * can take part (poas_error_detail() says why), or an argument error; on
 * error *out is untouched. m = 0 or n = 0 gives an empty plan. */
int poas_plan_gemm(poas_context *ctx, poas_dtype dtype, poas_layout layout, poas_op transa,
                   poas_op transb, int64_t m, int64_t n, int64_t k, poas_plan *out);

/* As poas_plan_gemm, for a call with these alpha and beta, which decide
 * what the devices copy: with beta = 0, C is not read, so devices with
 * memory of their own do not copy it in (the usual C = A B moves less than
 * poas_plan_gemm plans); with alpha = 0, A and B are not read. The plan
 * poas_sgemm / poas_dgemm run for the same problem, alpha and beta. */
int poas_plan_gemm_call(poas_context *ctx, poas_dtype dtype, poas_layout layout,
                        poas_op transa, poas_op transb, int64_t m, int64_t n, int64_t k,
                        double alpha, double beta, poas_plan *out);

/* ------------------------------------------------------ tasks (schedule/)
 * Work of your own, ordered with GEMMs by the data it touches. Register
 * the host memory tasks use, then submit tasks that declare which buffers
 * (or byte ranges of them) they read and write: a task starts only after
 * every earlier task whose accesses conflict with its own (a write against
 * anything on overlapping bytes) has finished, and tasks that do not
 * conflict run at the same time. Workers start with the first task and
 * stop in poas_finalize, which waits for outstanding tasks first.
 *
 * Accesses are byte ranges of host memory: two are ordered when their
 * bytes overlap and at least one writes, whichever registrations named
 * them (the same memory may be registered more than once, and
 * registrations may overlap). A task that fails does not stop later ones:
 * they run once it has finished and see what it left (a failed GEMM may
 * have written part of C); poas_task_wait() on its handle reports the
 * error, or, for a task submitted without one, the next poas_wait_all().
 * A task must not wait for its own context's tasks: poas_task_wait,
 * poas_wait_all, poas_buffer_unregister, poas_sgemm, poas_dgemm and
 * poas_calibrate called from one return POAS_ESTATE at once. It may register buffers, submit
 * tasks and asynchronous GEMMs, and read poas_last_report(), while the
 * caller does the same. An asynchronous GEMM may keep its C on a device
 * for the next GEMM of a chain to read there; that copy serves the GEMMs
 * submitted until the caller next returns from a wait. So write memory
 * that asynchronous GEMMs wrote after such a wait, or in a task that
 * declares the write: written after learning by other means that a GEMM
 * finished, it may be read as it was by a GEMM submitted since. */

/* A registered range of host memory. */
typedef struct poas_buffer poas_buffer;
/* A submitted task; poas_task_wait() waits for it and releases it. */
typedef struct poas_task poas_task;

typedef enum poas_access { POAS_R = 1, POAS_W = 2, POAS_RW = 3 } poas_access;

/* Registers [ptr, ptr + bytes) with the context. The handle is released by
 * poas_buffer_unregister() or poas_finalize(). POAS_EINVAL for an empty
 * range or one past the end of the address space. */
int poas_buffer_register(poas_context *ctx, void *ptr, size_t bytes, poas_buffer **out);
/* Waits for every outstanding task, then releases the handle. POAS_EINVAL
 * when the handle is already released (unregistered, or its context
 * finalized). */
int poas_buffer_unregister(poas_buffer *buf);

/* Most buffers one task names. */
#define POAS_TASK_MAX_ACCESS 4

/* One buffer a task uses: bytes [offset, offset + length) of it (length 0:
 * to its end), and how. */
typedef struct poas_task_access {
  poas_buffer *buffer;
  poas_access mode;
  size_t offset, length;
} poas_task_access;

/* The host implementation: buffers[i] points at access i's first byte. */
typedef void (*poas_cpu_fn)(void **buffers, void *arg);
/* Device implementations. They enqueue their work on the stream (a
 * cudaStream_t) or command queue (a cl_command_queue; clGetCommandQueueInfo
 * gives its context and device) and return; the task is finished when that
 * work is. buffers[i] holds access i's bytes on the device, copied in
 * before the call and, for W and RW accesses, out after it: a device
 * pointer for CUDA, a cl_mem of exactly the access's length for OpenCL.
 * A task runs on the first GPU when it has a CUDA implementation, else on
 * the first OpenCL device when it has an OpenCL one, else on the host; a
 * task no device of the context can run is rejected with POAS_ENOTSUP.
 * Device tasks take the devices one at a time, in turn with GEMMs. */
typedef void (*poas_cuda_fn)(void **buffers, void *arg, void *stream);
typedef void (*poas_opencl_fn)(void **buffers, void *arg, void *queue);

/* A task: one implementation per device kind (NULL where it has none),
 * the argument passed to it, and the buffers it uses. */
typedef struct poas_task_desc {
  poas_cpu_fn cpu;
  poas_cuda_fn cuda;
  poas_opencl_fn opencl;
  void *arg;
  int naccess;
  poas_task_access access[POAS_TASK_MAX_ACCESS];
} poas_task_desc;

/* Submits a task (desc is copied). With out != NULL, *out is a handle to
 * pass to poas_task_wait(); with out == NULL the task is released when it
 * finishes, and poas_wait_all() reports its error. Handles never waited for are
 * released by poas_finalize(). A desc with no implementation at all, or
 * naccess outside 0 to POAS_TASK_MAX_ACCESS, is POAS_EINVAL; one no device
 * of the context can run, POAS_ENOTSUP. On error nothing is submitted. */
int poas_task_submit(poas_context *ctx, const poas_task_desc *desc, poas_task **out);
/* Waits for a task and releases its handle; returns its status (0, or the
 * error that stopped it, poas_error_detail() saying why). Each handle is
 * waited for once: a released handle (waited for already, or its context
 * finalized) gives POAS_EINVAL. */
int poas_task_wait(poas_task *task);
/* Waits for every task submitted to the context so far. Returns the first
 * error, since the previous poas_wait_all(), of a task submitted without a
 * handle (poas_error_detail() saying why), else 0; the errors of tasks
 * with handles are their waits' to report. */
int poas_wait_all(poas_context *ctx);

/* poas_sgemm / poas_dgemm submitted as a task: arguments are checked now,
 * the GEMM runs (co-executed, as the synchronous call) once earlier tasks
 * that write A, B or C, or read C, have finished, and later tasks touching
 * C wait for it. A, B and C must stay valid until it has finished. The
 * report of poas_last_report() is complete once it has. */
int poas_sgemm_async(poas_context *ctx, poas_layout layout, poas_op transa,
                     poas_op transb, int64_t m, int64_t n, int64_t k, float alpha,
                     const float *A, int64_t lda, const float *B, int64_t ldb,
                     float beta, float *C, int64_t ldc, poas_task **out);
int poas_dgemm_async(poas_context *ctx, poas_layout layout, poas_op transa,
                     poas_op transb, int64_t m, int64_t n, int64_t k, double alpha,
                     const double *A, int64_t lda, const double *B, int64_t ldb,
                     double beta, double *C, int64_t ldc, poas_task **out);

#ifdef __cplusplus
}
#endif
#endif /* POAS_H */
