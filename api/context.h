/* context.h: the inside of a poas_context, shared by the files of api/.
 * The phases below api/ never see this struct: api/ hands each of them the
 * pieces it needs. */
#ifndef POAS_CONTEXT_H
#define POAS_CONTEXT_H

#include "adapt/adapt.h"
#include "devices/device.h"
#include "models/model.h"
#include "optimize/optimize.h"
#include "poas.h"
#include "predict/predict.h"
#include "schedule/schedule.h"

#include <stdatomic.h>

/* A GEMM normalised to column-major, after validation: what the phases
 * below api/ work on. Row-major calls are turned into this by swapping the
 * operands (C^T = op(B)^T op(A)^T). */
typedef struct poas__gemm_problem {
  poas_dtype dtype;
  poas_op transa, transb;
  int64_t m, n, k;
  double alpha, beta;
  const void *a, *b;
  void *c;
  int64_t lda, ldb, ldc;
  int row_major;           /* the caller's layout was row-major (m, n swapped) */
  int async;               /* run as a task: it may keep C on a device (resident.c) */
  unsigned epoch;          /* async: the tasks' epoch when it was submitted */
  int only;                /* 1 + the one device it may run on; 0: any (calibration) */
  int no_inline;           /* through the engine whatever the plan (calibration) */
  /* POAS_FAULT as read when an asynchronous call was submitted, on the
   * caller's thread ("" for none); NULL: read it when the call runs. */
  const char *fault;
} poas__gemm_problem;

/* Host bytes [*lo, *hi) a column-major matrix of rows x cols spans. */
static inline void poas__matrix_span(const void *p, int64_t rows, int64_t cols, int64_t ld,
                                     size_t elem, uintptr_t *lo, uintptr_t *hi) {
  *lo = (uintptr_t)p;
  *hi = *lo + ((uintptr_t)(cols - 1) * (uintptr_t)ld + (uintptr_t)rows) * elem;
}

/* Stored rows and columns of A (which 'a') or B, column-major. */
static inline void poas__operand_dims(const poas__gemm_problem *p, char which, int64_t *rows,
                                      int64_t *cols) {
  int plain = which == 'a' ? p->transa == POAS_NO_TRANS : p->transb == POAS_NO_TRANS;
  int64_t outer = which == 'a' ? p->m : p->n;
  *rows = which == 'a' ? (plain ? outer : p->k) : (plain ? p->k : outer);
  *cols = which == 'a' ? (plain ? p->k : outer) : (plain ? outer : p->k);
}

static inline int poas__spans_overlap(uintptr_t alo, uintptr_t ahi, uintptr_t blo,
                                      uintptr_t bhi) {
  return alo < bhi && blo < ahi;
}

/* Sets p's layout, transposes and sizes from a call in either layout,
 * swapping the operands' roles for row-major (pointers and leading
 * dimensions are the caller's business). POAS_ELAYOUT for a bad layout. */
int poas__gemm_shape(poas__gemm_problem *p, poas_layout layout, poas_op transa, poas_op transb,
                     int64_t m, int64_t n, int64_t k);

/* A matrix kept on a device by an asynchronous GEMM (api/resident.c). */
typedef struct poas__resident {
  int device;              /* -1: a free slot */
  const void *host;        /* the matrix in host memory, column-major */
  int64_t ld, rows, cols;
  poas_dtype dtype;
  poas__mem mem;           /* dense on the device: ld = rows */
  unsigned epoch;          /* the tasks' epoch it may serve */
  unsigned long seq;       /* age, for eviction */
} poas__resident;

#define POAS__MAX_RESIDENT 4

/* What a device's runs in one dtype taught: how many it has taken part
 * in, and the factors (busy time over the models' time for its part) that
 * its last POAS__LEARN_WINDOW counted runs implied, oldest first. While
 * plans leave the device out, the window ages (poas__learn_sit_out): the
 * plans sat out since its last factor went, how many it takes to drop one
 * (0 or 1: every plan), and, after the window emptied that way, how many
 * runs are left before the device counts as back for good. */
#define POAS__LEARN_WINDOW 5
/* A plan times the host's hand-off state at most once in this many
 * seconds (api/run.c, handoff_probe). */
#define POAS__HANDOFF_PROBE_EVERY_S 0.02
typedef struct poas__learned {
  int runs;
  int n;
  double implied[POAS__LEARN_WINDOW];
  int sat_out, per_drop, returning;
  /* While returning: the busy seconds of the runs too short to teach
   * alone, and their time by the models at factor 1, not yet learned
   * from (api/run.c, short_runs_add). */
  double short_busy_s, short_model_s;
} poas__learned;

/* Adds a run's implied factor and returns the factor to plan with: the
 * median of the window's (the mean of the middle two for an even count).
 * One slow or fast run among the last few does not move it; a lasting
 * change wins once it fills half the window. */
double poas__learn(poas__learned *l, double implied);

/* A plan left the device out while its window said it runs slower than
 * its models: ages the window (api/run.c, why). Returns the factor to plan
 * with from now on: the median of what is left, or 0 when nothing is. */
double poas__learn_sit_out(poas__learned *l);

/* GEMM calls by shape, for learning: whole ones, and those whose C has a
 * short side of at most POAS__THIN_MAX rows or columns. A machine does
 * not drift alike for both: on the 2-vCPU CI VM, while its second vCPU was
 * contended, OpenBLAS's 12-row sgemm calls on two threads took 3x their
 * usual time and 1024^3 ones 1.2x, and such spells come and go within
 * seconds (bench/results/learned-shapes-ci-2core-2026-11-23.md). */
enum { POAS__SHAPE_WHOLE = 0, POAS__SHAPE_ROWS = 1, POAS__SHAPE_COLS = 2, POAS__SHAPE_CLASSES = 3 };

/* The class of a call whose C is m x n. */
int poas__shape_class(int64_t m, int64_t n);

/* What runs taught (api/run.c, poas__adapt_*): how many times slower
 * than its models each device ran, by dtype (1: as modelled), and the
 * runs behind it. Plans scale the models by it. */
typedef struct poas__taught {
  double adapt[POAS_MAX_DEVICES][2];
  poas__learned learned[POAS_MAX_DEVICES][2];
  /* The same by the class of the calls (POAS__SHAPE_*): a call of a
   * class that has runs of its own plans with that class's factor, the
   * others with adapt[][], which learns from all. 0: none learned. */
  double adapt_shape[POAS_MAX_DEVICES][2][POAS__SHAPE_CLASSES];
  poas__learned learned_shape[POAS_MAX_DEVICES][2][POAS__SHAPE_CLASSES];
  /* 1: the device's runs show the host in the hand-off state its models
   * were not fitted to (api/run.c, handoff_from_run); plans then add or
   * take its handoff_extra. 0: the fitted state, or not known. The runs
   * it has looked at, by dtype (the first pays one-time costs and is
   * left out). */
  int handoff_other[POAS_MAX_DEVICES];
  int handoff_runs[POAS_MAX_DEVICES][2];
  /* How strong the slow state is now, by dtype: the multiple of the
   * device's handoff_extra it adds over the quick state (1: as calibration
   * measured it), learned from the runs that found the device in it. The
   * same host adds 1.2-1.7 times one day what it added the day before. */
  double handoff_level[POAS_MAX_DEVICES][2];
  poas__learned handoff_learned[POAS_MAX_DEVICES][2];
  /* How many times slower than one_thread's time the calls that the slow
   * state moves to one thread (poas__moved_to_one) ran, by dtype and
   * transpose pair (poas__gemm_pair; 1: as modelled), learned from their
   * runs alone: the threads step times NN calls only, and on the CI VM
   * 12-row sgemm took 0.5 ns per element of B as NN and 0.8-1.0 as NT. */
  double adapt_one[POAS_MAX_DEVICES][2][4];
  poas__learned learned_one[POAS_MAX_DEVICES][2][4];
} poas__taught;

/* Which devices a plan left out for what their runs taught (api/run.c,
 * kept_out), for the last problem it was asked of: a loop of the same
 * small GEMM asks once. Valid for the problem, factors and memory below,
 * and cleared with what runs taught. */
typedef struct poas__kept_memo {
  int valid;
  poas__opt_problem prob;
  double learned[POAS_MAX_DEVICES];
  uint64_t memory[POAS_MAX_DEVICES];
  int lost[POAS_MAX_DEVICES]; /* planned out as lost (poas__dev_lost) */
  int kept[POAS_MAX_DEVICES];
} poas__kept_memo;

struct poas_context {
  poas__devset devices;
  poas__device_model models[POAS_MAX_DEVICES]; /* models[i] for devices.dev[i] */
  poas__profile_status profile;
  poas__policy sched; /* from options, POAS_SCHED, else guided */
  /* The host's cores the devices that share them share: those the
   * process could run on at poas_init (poas__host_usable_cores). */
  int host_cores;
  char *trace_path;   /* NULL: no trace */
  int log_level;      /* the level its options hold (core/log.c); -1: none */
  /* poas_calibrate is running: the calls its progress callback may make
   * on the context that would use or free the devices it measures are
   * refused (poas__refuse_while_calibrating). */
  int calibrating;
  /* The last GEMM's report: written by the thread that ran it (a task's
   * worker, for an async GEMM) while the caller may read it. */
  pthread_mutex_t report_lock;
  int has_report;
  poas_report report;
  struct poas__tasks *tasks; /* the task runtime, from the first task on */
  poas_buffer *buffers;      /* registered buffers, released at finalize */
  /* Held over the list's changes: a task may register a buffer while the
   * caller registers or unregisters another. */
  pthread_mutex_t buffers_lock;
  pthread_mutex_t resident_lock;
  poas__resident resident[POAS__MAX_RESIDENT];
  unsigned long resident_seq;
  /* What runs taught, and whether they teach (POAS_ADAPT=0: not). */
  pthread_mutex_t adapt_lock;
  int adapt_off;
  poas__taught taught; /* under adapt_lock */
  poas__kept_memo kept_memo; /* under adapt_lock */
  /* One probe at a time (it spins on the device's cores), and when each
   * device was last probed; under handoff_probe_lock. */
  pthread_mutex_t handoff_probe_lock;
  double handoff_probed_at[POAS_MAX_DEVICES];
  /* GEMM runs under way: a probe while one computes would time the run's
   * threads, not the host. */
  atomic_int runs_active;
};

/* POAS_ESTATE, said for `what`, while poas_calibrate runs on ctx: called
 * from its progress callback (the one thread the context may have), a
 * GEMM, a task or another calibration would run on the devices being
 * measured. 0 otherwise. */
static inline int poas__refuse_while_calibrating(const poas_context *ctx, const char *what) {
  return ctx->calibrating
             ? poas__fail(POAS_ESTATE, "%s called while poas_calibrate runs (from its progress "
                          "callback): the devices are being measured", what)
             : 0;
}

/* The context's last report: sets it (r NULL: none), or copies it to
 * *out and returns whether there is one. */
void poas__report_set(poas_context *ctx, const poas_report *r);
int poas__report_get(const poas_context *ctx, poas_report *out);

/* Forgets what runs taught of the devices only[i] names (NULL: all), whose
 * models changed (calibration). */
void poas__adapt_reset(poas_context *ctx, const int *only);

/* Runs a validated, normalised GEMM on the context's devices and fills
 * ctx->report. */
int poas__gemm_run(poas_context *ctx, const poas__gemm_problem *p);

/* What the solver was given for a problem on the context's devices, and
 * what it returned: the one path from a problem to a plan, shared by
 * poas__gemm_run and poas_plan_gemm. */
typedef struct poas__gemm_plan {
  poas__opt_problem prob;
  poas__opt_device dev[POAS_MAX_DEVICES];
  poas__opt_result res;
  /* The run's predicted makespan: res.balanced_s under the guided and
   * dynamic policies, whose tails move work between the devices unit by
   * unit; res.makespan_s under static, which runs the shares as given. */
  double makespan_s;
  /* The factors the devices' models were scaled by, from what runs
   * taught, and the scaled copies of those not at 1 (dev[i].model points
   * there; at the context's model otherwise). model stays last:
   * poas__gemm_plan_make clears what comes before it. */
  double learned[POAS_MAX_DEVICES];
  /* The factor of calls the slow hand-off state moved to one thread
   * (poas_context.adapt_one), where the plan's model is a copy. */
  double one_factor[POAS_MAX_DEVICES];
  poas__device_model model[POAS_MAX_DEVICES];
} poas__gemm_plan;

/* Plans a normalised problem (p's pointers are not used). */
int poas__gemm_plan_make(poas_context *ctx, const poas__gemm_problem *p, poas__gemm_plan *out);

/* Device copies kept by asynchronous GEMMs (api/resident.c). */
void poas__resident_init(poas_context *ctx);
void poas__resident_release_all(poas_context *ctx);
/* A host task wrote host bytes [lo, hi): device copies of them are stale. */
void poas__resident_invalidate(poas_context *ctx, uintptr_t lo, uintptr_t hi);
/* Before an async run: drops the copies its C overlaps, hands the source the
 * operands already on the one device of the plan, and, when C fits, has
 * the source keep C there (*kept describes it; device -1 when not). */
int poas__resident_prepare(poas_context *ctx, const poas__gemm_problem *p,
                           const poas__gemm_plan *plan, poas__gemm_source *src,
                           poas__resident *kept);
/* Frees the copies no GEMM of the tasks' epoch `epoch` can use (those of
 * other epochs). Only where no GEMM of an earlier epoch may still run:
 * in a GEMM task of that epoch, before its plan (GEMM tasks run one at a
 * time, in order), or once every task is done (a synchronous GEMM's
 * wait). Plans made with dead copies still counted found less room than
 * there was: after a wait, one left by an asynchronous GEMM changed every
 * later plan and failed GEMMs that fit with POAS_ETOOBIG. */
void poas__resident_drop_stale(poas_context *ctx, unsigned epoch);
/* Waits for every task of ctx (0 when it has none; POAS_ESTATE from one of
 * them), then frees the copies that serve nobody after that wait. */
int poas__wait_tasks(poas_context *ctx);
/* Device memory the copies on `device` hold: a GEMM task's plan counts it
 * as taken, once the dead are gone (poas__resident_drop_stale). */
uint64_t poas__resident_bytes(poas_context *ctx, int device);
/* After the run: keeps *kept when the run went through without a device
 * failing (failed == 0), frees it otherwise. */
void poas__resident_finish(poas_context *ctx, poas__resident *kept, int failed);

/* The context's task runtime, started on first use (api/tasks.c). */
int poas__context_tasks(poas_context *ctx, struct poas__tasks **out);
/* Stops the task runtime after its tasks and releases registered buffers;
 * for poas_finalize. */
void poas__context_tasks_close(poas_context *ctx);

#endif /* POAS_CONTEXT_H */
