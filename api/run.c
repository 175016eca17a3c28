/* run.c: a normalised GEMM through the pipeline: the context's models
 * (predict) go to the solver (optimize), whose split becomes a work source
 * (adapt) that the scheduler runs (schedule); the report comes back from
 * the scheduler and gets the problem's fields here. Planning alone
 * (poas_plan_gemm) shares everything up to the solve. */
#include "adapt/adapt.h"
#include "api/context.h"
#include "predict/predict.h"
#include "schedule/schedule.h"

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* A device must shorten the predicted makespan by at least this much to
 * take part, or by the devices' calibrated model errors when those are
 * larger (weighted by share in optimize/: poas__opt_device.model_error).
 * Below it the gain is inside what the runtime costs and the models miss,
 * while the device still costs: it needs host threads to feed it or
 * shares the host's cores and memory bandwidth with the others. */
#define POAS__MIN_GAIN 0.03

/* How far device i's GEMM model can be off for dtype: its held-out median
 * when fitted, else 0 (not known). */
static double model_error(const poas_context *ctx, int i, poas_dtype dtype) {
  const poas__device_model *dm = &ctx->models[i];
  return poas__model_fitted(dm, dtype) ? dm->gemm_fit[dtype].heldout_median : 0;
}

/* What a run through the engine (several devices, or several tiles on
 * one) costs beyond what the models predict, at the least (see
 * plan_engine_s): its threads and hand-offs. Measured with
 * bench/call-overhead as the public call against the same work issued
 * directly: 0.1 ms on the CI machine's PoCL device, 0.45 ms on an H100 VM,
 * where waking a thread on another vCPU is slow. The larger one, since the
 * cost of getting it wrong is not symmetric: too small makes small GEMMs
 * several times slower, too large gives up a few percent of overlap on
 * GEMMs of a few milliseconds. */
#define POAS__ENGINE_RUN_S 5e-4

/* What a run through the engine costs on the context's devices: the most
 * any measured (calibration's engine_s), but not less than
 * POAS__ENGINE_RUN_S. Calibration times one device on a tiny GEMM, which
 * misses what several devices' hand-offs cost: on the CI machine it
 * measured 28 us for the cpu device and nothing for PoCL (whose model
 * over-predicts tiny GEMMs), and planned with 28 us a 512^3 dgemm split
 * between them lost 13% of its 4.9 ms to gaps between their instructions
 * and ran at 0.93x the cpu alone. */
static double plan_engine_s(const poas_context *ctx) {
  double e = POAS__ENGINE_RUN_S;
  for (int i = 0; i < ctx->devices.ndev; i++)
    if (ctx->models[i].source == POAS__MODEL_CALIBRATED)
      e = POAS__MAX(e, ctx->models[i].engine_s);
  return e;
}

/* Whether dm's calls of dtype carry the hand-off state's term, and
 * *fits_slow: whether its models were fitted to the slow state. */
static int handoff_term(const poas__device_model *dm, poas_dtype dtype, int *fits_slow) {
  *fits_slow = poas__handoff_fits_slow(dm->handoff_timings, dm->handoff_slow);
  return dm->handoff_extra[dtype == POAS_FLOAT64] > 0 && dm->handoff_timings > 0;
}

/* The hand-off term's multiple a plan gives dm's calls (handoff_shift) with
 * the host in the slow state (slow = 1) or the quick one, the slow state
 * `level` times as strong as calibration measured: relative to the
 * state the models were fitted to. */
static double handoff_shift_in(int fits_slow, int slow, double level) {
  return (slow ? level : 0) - (fits_slow ? 1 : 0);
}

/* The shift device i's plans of dtype take now: what its runs showed of
 * the host's state and its strength. Called with adapt_lock held. */
static double handoff_shift_now(const poas_context *ctx, int i, poas_dtype dtype) {
  int fits_slow;
  if (!handoff_term(&ctx->models[i], dtype, &fits_slow))
    return 0;
  return handoff_shift_in(fits_slow, fits_slow != ctx->taught.handoff_other[i],
                          ctx->taught.handoff_level[i][dtype]);
}

/* The host's hand-off state now, from the device's cores. On the CI VM
 * the host moves its two vCPUs apart and back every few seconds, and a
 * cache line's round trip between them tells which it did: 51-104 ns
 * while thin calls on two threads ran 0.66-1.1x their time on one,
 * 250-360 ns while they ran 2.2-3.3x (bench/results/handoff-latency-ci-
 * 2core-2026-11-24.md). While it is slow the device runs calls of few
 * rows on one thread (devices/device.h, handoff_slow; 12-row calls ran
 * 1.3-2.2x faster there), and runs on one thread cannot tell the state:
 * so a plan for a device whose models carry the slow state's term, and
 * whose calibration saw the round trip in a state, measures it first
 * (0.2 ms on the CI VM), at most once per POAS__HANDOFF_PROBE_EVERY_S:
 * back-to-back calls then spend at most 1% of their time on it, and the
 * state lasts hundreds of milliseconds or more. Not while a GEMM runs on
 * the context, whose threads would be in the probe's way. */

static void handoff_probe(poas_context *ctx, int i, poas_dtype dtype) {
  poas__device *d = ctx->devices.dev[i];
  const poas__device_model *dm = &ctx->models[i];
  int fits_slow;
  /* (A reading of 1 ns tells whether calibration saw any round trip.) */
  if (!d->be->handoff_latency || !handoff_term(dm, dtype, &fits_slow) ||
      poas__handoff_latency_slow(dm, 1) < 0 || atomic_load(&ctx->runs_active) > 0 ||
      pthread_mutex_trylock(&ctx->handoff_probe_lock) != 0)
    return;
  double now = poas__now(), ns = 0;
  if (!(ctx->handoff_probed_at[i] > 0) ||
      now - ctx->handoff_probed_at[i] >= POAS__HANDOFF_PROBE_EVERY_S) {
    ns = d->be->handoff_latency(d);
    ctx->handoff_probed_at[i] = poas__now();
  }
  pthread_mutex_unlock(&ctx->handoff_probe_lock);
  int slow = poas__handoff_latency_slow(dm, ns);
  if (slow < 0)
    return;
  pthread_mutex_lock(&ctx->adapt_lock);
  if (ctx->taught.handoff_other[i] != (slow != fits_slow))
    poas__debug("%s: cache-line round trip %.0f ns: the %s hand-off state", d->info.id, ns,
                slow ? "slow" : "quick");
  ctx->taught.handoff_other[i] = slow != fits_slow;
  atomic_store(&d->handoff_slow, slow);
  pthread_mutex_unlock(&ctx->adapt_lock);
}

int poas__shape_class(int64_t m, int64_t n) {
  int side;
  return poas__short_side(m, n, POAS__THIN_MAX, &side) ? POAS__SHAPE_ROWS + side
                                                       : POAS__SHAPE_WHOLE;
}

int poas__gemm_plan_make(poas_context *ctx, const poas__gemm_problem *p, poas__gemm_plan *out) {
  /* The scaled models at the end are written where used, and the solver
   * writes res (only as far as the devices go): neither is cleared here,
   * beyond res's count of devices. */
  memset(out, 0, offsetof(poas__gemm_plan, res));
  memset(&out->res, 0, offsetof(poas__opt_result, dev));
  memset(&out->makespan_s, 0,
         offsetof(poas__gemm_plan, model) - offsetof(poas__gemm_plan, makespan_s));
  out->prob = (poas__opt_problem){.dtype = p->dtype, .transa = p->transa, .transb = p->transb,
                                  .m = p->m, .n = p->n, .k = p->k, .reads_c = p->beta != 0,
                                  .reads_ab = p->k > 0 && p->alpha != 0,
                                  .host_cores = ctx->host_cores,
                                  .min_gain = POAS__MIN_GAIN,
                                  .engine_s = plan_engine_s(ctx),
                                  .names_swapped = p->row_major};
  int nd = ctx->devices.ndev;
  /* Thin calls learn apart from whole ones (POAS__SHAPE_*): a call plans
   * with its class's factor where that class has runs of its own. */
  int shape = poas__shape_class(p->m, p->n);
  double shift[POAS_MAX_DEVICES], one[POAS_MAX_DEVICES];
  for (int i = 0; i < nd; i++)
    handoff_probe(ctx, i, p->dtype);
  pthread_mutex_lock(&ctx->adapt_lock);
  for (int i = 0; i < nd; i++) {
    double own = ctx->taught.adapt_shape[i][p->dtype][shape];
    out->learned[i] = own > 0 ? own : ctx->taught.adapt[i][p->dtype];
    shift[i] = handoff_shift_now(ctx, i, p->dtype);
    one[i] = ctx->taught.adapt_one[i][p->dtype][poas__gemm_pair(p->transa, p->transb)];
  }
  pthread_mutex_unlock(&ctx->adapt_lock);
  for (int i = 0; i < nd; i++) {
    const poas_device_info *info = &ctx->devices.dev[i]->info;
    const poas__device_model *dm = &ctx->models[i];
    /* The device runs calls of few rows or columns as the host's state
     * says when the plan is made (handoff_probe). */
    int slow_now = atomic_load(&ctx->devices.dev[i]->handoff_slow);
    /* A model that runs corrected is copied and scaled; the others are
     * used as they are (no copy on every call). */
    if (out->learned[i] != 1 || shift[i] != 0 || slow_now) {
      out->model[i] = ctx->models[i];
      poas__device_model_scale(&out->model[i], p->dtype, out->learned[i]);
      out->model[i].handoff_shift = shift[i];
      out->model[i].handoff_slow_now = slow_now;
      /* Calls moved to one thread take what their own runs taught. */
      out->one_factor[i] = one[i];
      for (int side = 0; slow_now && side < 2; side++)
        for (int s = 1; s <= POAS__FEW_SIDE; s++)
          out->model[i].one_thread[p->dtype][side][s] *= one[i];
      dm = &out->model[i];
    }
    uint64_t mem = info->memory_bytes;
    if (dm->memory_bytes > 0 && dm->memory_bytes < mem)
      mem = dm->memory_bytes;
    /* Matrices kept on the device by earlier GEMM tasks take their room
     * from a GEMM task, whose run freed the dead ones before this plan; a
     * synchronous call frees them all first (api/gemm.c). */
    uint64_t resident = poas__resident_bytes(ctx, i);
    uint64_t held = p->async ? resident : 0;
    mem = mem > held ? mem - held : 0;
    /* Nor more than the device could allocate now, where it can tell: on a
     * GPU another process shares, a plan of the total failed mid-run. The
     * copies GEMM tasks left are allocated: a task's plan counted them
     * above, and a synchronous call frees them first, so their room is
     * its own. */
    uint64_t now;
    if (poas__dev_available(ctx->devices.dev[i], &now) == 0) {
      if (!p->async)
        now += resident;
      if (now < mem)
        mem = now;
    }
    out->dev[i] = (poas__opt_device){
        .id = info->id,
        .model = dm->source == POAS__MODEL_NONE ? NULL : dm,
        .memory_bytes = mem,
        .host_memory = info->host_memory,
        .shares_host_cores = info->shares_host_cores,
        .cores = info->cores,
        .wants_bt = ctx->devices.dev[i]->gemm_wants_bt,
        .tile_bytes_max = ctx->devices.dev[i]->gemm_tile_bytes,
        .unit_align = ctx->devices.dev[i]->gemm_align,
        .max_operand_elems = ctx->devices.dev[i]->gemm_max_elems,
        .index_pad = ctx->devices.dev[i]->gemm_index_pad,
        .buffer_bytes_max = ctx->devices.dev[i]->max_buffer_bytes,
        .scratch_pad = ctx->devices.dev[i]->gemm_scratch_pad,
        .scratch_min_mnk = ctx->devices.dev[i]->gemm_scratch_min_mnk,
        .model_error = model_error(ctx, i, p->dtype),
        /* A dtype it has no peak for only where it was fitted in it: a
         * device calibrated in sgemm alone (an OpenCL device without
         * fp64) was planned dgemm it cannot run. */
        .supports_dtype =
            (info->peak_gflops[p->dtype] > 0 || poas__model_fitted(dm, p->dtype)) &&
            (p->only == 0 || p->only == i + 1),
        .lost = poas__dev_lost(ctx->devices.dev[i]),
    };
  }
  int rc = poas__optimize(out->dev, nd, &out->prob, &out->res);
  out->makespan_s =
      ctx->sched == POAS__SCHED_STATIC ? out->res.makespan_s : out->res.balanced_s;
  for (int i = 0; i < nd; i++)
    if (out->res.dev[i].estimated)
      poas__warn("%s has no usable model: planning with a conservative estimate "
                 "(run poas-calibrate)",
                 out->dev[i].id);
  return rc;
}

/* The scheduler's configuration from the plan and the context, with the
 * faults `fault` names (NULL: POAS_FAULT's now). */
static void sched_config(const poas_context *ctx, const poas__gemm_plan *plan, const char *fault,
                         poas__sched_config *cfg) {
  const poas__opt_result *r = &plan->res;
  memset(cfg, 0, sizeof *cfg);
  cfg->policy = ctx->sched;
  /* The context settled its trace, POAS_TRACE included, in poas_init: ""
   * keeps the scheduler from reading POAS_TRACE again. */
  cfg->trace_path = ctx->trace_path ? ctx->trace_path : "";
  if (!fault)
    fault = getenv("POAS_FAULT");
  cfg->fault_spec = fault ? fault : ""; /* "": none, not POAS_FAULT's again */
  for (int i = 0; i < r->ndev; i++) {
    const poas__opt_share *sh = &r->dev[i];
    cfg->u0[i] = sh->u0, cfg->u1[i] = sh->u1;
    cfg->predicted_s[i] = sh->time.total_s;
    cfg->tiles[i] = sh->time.tiles;
    double units = (double)(sh->u1 - sh->u0);
    cfg->rate[i] = units > 0 ? units / POAS__MAX(sh->time.total_s, 1e-12) : 0;
    cfg->model_error[i] = model_error(ctx, i, plan->prob.dtype);
  }
  cfg->predicted_makespan_s = plan->makespan_s;
  cfg->engine_s = r->engine_s;
}

/* The problem as one GEMM call on the caller's (host) memory. */
static poas__gemm_call host_call(const poas__gemm_problem *p) {
  return (poas__gemm_call){p->dtype,
                           p->transa,
                           p->transb,
                           p->m,
                           p->n,
                           p->k,
                           p->alpha,
                           p->beta,
                           {poas__mem_host(p->a), 0, p->lda},
                           {poas__mem_host(p->b), 0, p->ldb},
                           {poas__mem_host(p->c), 0, p->ldc}};
}

/* Learning from runs. A device's models are fitted once, by calibration;
 * the machine then changes under them: PoCL on one core of the CI VM ran
 * 20-50% under a model fitted the hour before, while OpenBLAS beside it
 * stayed within 3% of its own (bench/results/pocl-shared-transposed-ci-
 * 2core-2026-11-23.md), and a GPU's clock follows its power. So after each
 * run the context compares the time a device was busy with what its
 * models predicted for the part it actually computed: the factor that
 * would have predicted the run. It plans with the median of the factors
 * its last POAS__LEARN_WINDOW runs implied (poas__learn): the first run it
 * learns from sets the factor outright (halfway steps took five runs to
 * learn most of a factor of 1.5), and one slow run among the last few
 * does not move it (moving halfway, one run of cpu0 at 1.33x its usual
 * time on the CI VM once took a fixed-budget row from 0.94 to 0.81 of the
 * summed rates; bench/results/bench-ci-2core-cpu1-opencl1-20261123-085636-
 * 6dee492e91c8.md). Calls of few rows or columns keep factors of their
 * own beside the one learned from all (POAS__SHAPE_*): a thin call on two
 * OpenBLAS threads can run 3x its model while squares run 1.2x. Left
 * out: a device's first run in a dtype where it ran longer than planned
 * (it pays one-time costs, kernel compilation among them, which only
 * lengthen it; one that ran shorter says at least that much, see
 * first_run_tells), or on an accelerator at all, runs in which it was
 * busy under ADAPT_MIN_S (fixed costs, not rate; but see short_runs_add),
 * and failed devices. A
 * run's factor is at most ADAPT_STEP times the one it was planned with,
 * either way, and the factor stays within ADAPT_MAX of the models;
 * POAS_ADAPT=0 turns this off. */
#define ADAPT_MIN_S 0.01
#define ADAPT_STEP 2.0
#define ADAPT_MAX 4.0
/* Whether a device's first run in a dtype, busy_s against the planned_s
 * of the same work, teaches its factor. Its one-time costs (kernels
 * built, threads started, buffers first touched) can only have lengthened
 * it: a run longer than planned may be nothing but them, while one
 * shorter than planned ran at least that much faster than the plan
 * without them. Skipping it too had left the first warm call after a
 * calibration that met the CI VM's slow state planned on models 14% slow
 * for the quick state the calls ran in: poas-demo's warm median read
 * +15-17% in 2 of 5 runs, though the cold call before it had run
 * quicker than planned too. Not where the plan slowed the device for the
 * devices beside it on the host's cores (corun > 1): in a first run they
 * may have spent their time building kernels instead, and the device ran
 * quicker than it will beside them. And only for a device on the host's
 * cores: an accelerator's clock boosts while it is cold, and its models
 * are of the sustained regime calibration times it in. An H100 ran its
 * GEMMs 5-19% quicker after an idle second (1980 MHz) than after 3 s of
 * dgemm (1545-1650 MHz at its 700 W cap), and a split of seconds runs
 * hot within about one (bench/results/gpu-regime-h100-2026-11-23.md):
 * its first run quicker than planned says the clock, not the models. */
static int first_run_tells(double busy_s, double planned_s, double corun,
                           int shares_host_cores) {
  return shares_host_cores && busy_s < planned_s && !(corun > 1);
}

/* The shortest run that counts towards a sum of short runs
 * (short_runs_add): at most ten of them make one, and the fixed costs of
 * a run the models miss stay a small part of each. */
#define ADAPT_PART_MIN_S 1e-3

/* The median of what l holds; 0 when it holds nothing. */
static double learned_median(const poas__learned *l) {
  double v[POAS__LEARN_WINDOW]; /* poas__median sorts what it is given */
  memcpy(v, l->implied, (size_t)l->n * sizeof *v);
  return l->n > 0 ? poas__median(v, l->n) : 0;
}

static void learned_drop_oldest(poas__learned *l) {
  memmove(l->implied, l->implied + 1, (size_t)(l->n - 1) * sizeof *l->implied);
  l->n--;
}

double poas__learn(poas__learned *l, double implied) {
  if (l->n == POAS__LEARN_WINDOW)
    learned_drop_oldest(l);
  l->implied[l->n++] = implied;
  /* Back for a window's worth of runs: it is back for good. */
  if (l->returning > 0 && --l->returning == 0) {
    l->per_drop = 1;
    l->short_busy_s = l->short_model_s = 0;
  }
  return learned_median(l);
}

/* Forgetting what keeps a device out. A device whose runs taught it that
 * it runs slower than its models can then be left out of every plan, and
 * no run teaches it otherwise: on the CI VM three runs of a 2048 sgemm in
 * a spell that slowed both vCPUs (one-core PoCL at half its rate) left
 * PoCL out of all the context's later plans, whose runs took a median 169
 * ms on the CPU alone against 162 ms with it before. So every plan that
 * leaves such a device out ages its window: every per_drop of them, the
 * oldest run's factor goes. Once none is left the device plans at its
 * models' rate, takes part, and its runs are learned afresh. A device left
 * out again within a window's worth of runs of its return is still slow:
 * it then sits out twice as many plans per factor dropped, up to
 * LEARN_PER_DROP_MAX, so that one that stays slow costs a misplanned run
 * ever more rarely. */
#define LEARN_PER_DROP_MAX 64

double poas__learn_sit_out(poas__learned *l) {
  if (l->returning > 0) {
    l->returning = 0;
    l->short_busy_s = l->short_model_s = 0;
    l->per_drop = POAS__MIN(2 * POAS__MAX(l->per_drop, 1), LEARN_PER_DROP_MAX);
    l->sat_out = 0;
  }
  if (l->n > 0 && ++l->sat_out >= POAS__MAX(l->per_drop, 1)) {
    l->sat_out = 0;
    learned_drop_oldest(l);
    if (l->n == 0)
      l->returning = POAS__LEARN_WINDOW;
  }
  return learned_median(l);
}

/* The factor l now gives, after a run that took measured_s where its
 * plan, at factor `planned_factor`, said planned_s: the run implies the
 * factor times their ratio (the ratio within ADAPT_STEP either way), and
 * the result stays within ADAPT_MAX either way. */
static double learn_factor(poas__learned *l, double planned_factor, double measured_s,
                           double planned_s) {
  double ratio = POAS__MIN(POAS__MAX(measured_s / planned_s, 1 / ADAPT_STEP), ADAPT_STEP);
  double f = poas__learn(l, planned_factor * ratio);
  return POAS__MIN(POAS__MAX(f, 1 / ADAPT_MAX), ADAPT_MAX);
}

/* A device that plans forgot (poas__learn_sit_out) comes back at its
 * models' rate, and only its runs can teach it otherwise; but the calls
 * that made plans leave it out, and so forgot its factor, are often short
 * ones, its runs in them under ADAPT_MIN_S, and it stayed at its models'
 * rate for good: on sims, 670^3 sgemm beside a device 1.5x slower than
 * its models, busy 5.4 ms a run, planned it 1.5x too fast in every run
 * after its return (test-predict). So while a window is returning, its
 * short runs from ADAPT_PART_MIN_S add up, and once their busy time
 * reaches ADAPT_MIN_S they teach as one run: returns 1 with the sums in
 * *sum_busy_s and *sum_model_s (the models' seconds at factor 1). Not for
 * other windows: factors learned from every run from 0.5 ms up, applied
 * to the longer calls of their class, made the CI VM's 90th percentile
 * worse in 7 of 8 rounds (bench/results/learned-shapes-ci-2core-
 * 2026-11-23.md); a returning window's factor is one that no run
 * measured. Called with adapt_lock held. */
static int short_runs_add(poas__learned *l, double busy_s, double model_s, double *sum_busy_s,
                          double *sum_model_s) {
  if (l->returning <= 0 || !(busy_s >= ADAPT_PART_MIN_S) || !(model_s > 0))
    return 0;
  l->short_busy_s += busy_s;
  l->short_model_s += model_s;
  if (l->short_busy_s < ADAPT_MIN_S)
    return 0;
  *sum_busy_s = l->short_busy_s, *sum_model_s = l->short_model_s;
  l->short_busy_s = l->short_model_s = 0;
  return 1;
}

/* Teaches the window l, whose factor is *factor, a run busy busy_s where
 * its plan, at factor `planned_factor`, said planned_s; a short one only
 * through short_runs_add. Returns whether it learned. Called with
 * adapt_lock held. */
static int learn_run(poas__learned *l, double *factor, double planned_factor, double busy_s,
                     double planned_s) {
  if (busy_s >= ADAPT_MIN_S) {
    *factor = learn_factor(l, planned_factor, busy_s, planned_s);
    return 1;
  }
  double sum_busy, sum_model;
  if (!short_runs_add(l, busy_s, planned_s / planned_factor, &sum_busy, &sum_model))
    return 0;
  *factor = learn_factor(l, planned_factor, sum_busy, sum_model * planned_factor);
  return 1;
}

/* Following the host's hand-off state. A device whose models carry the
 * slow state's term (handoff_extra: a CPU on several threads, calibrated
 * on a host that went in and out of that state) is in the state whose
 * prediction its last informative run came nearer: a run of the whole
 * problem on the device alone, in which the two states' predictions
 * differ by a tenth or more. The state lasts seconds on the CI VM, many
 * runs. A run that finds the device slow also tells how strong the slow
 * state is now (the multiple of handoff_extra it added), and plans use
 * the median of the last POAS__LEARN_WINDOW such runs' (poas__learn): on
 * the CI VM the slow state added 1.2-1.7 times what calibration had
 * measured an hour before, and over rounds of bench/accuracy --adapt
 * learning it took the slow timings' median signed error from -10.7% to
 * -4.7%; their median |error| stayed about 11%, since the strength itself
 * moved 0.4-4x within a round (bench/results/handoff-level-ci-2core-
 * 2026-11-24.md).
 * Where plans probe the state (handoff_probe), each probe sets the state
 * again, and a run in between that disagrees moves it until the next one
 * (the host changed state, or its round trip does not tell its state).
 * Runs from HANDOFF_MIN_S: thin calls of a millisecond, which the state
 * moves most, tell it best; a device's first run in a dtype, which pays
 * one-time costs, is left out. Returns 1 when the run taught the hand-off
 * state (moved the device to the other state, or measured the slow
 * state's strength), which then does not teach the device's factor.
 * Called with adapt_lock held. */
#define HANDOFF_MIN_S 1e-4
#define HANDOFF_TELLS 0.1
#define HANDOFF_LEVEL_MIN 0.25
#define HANDOFF_LEVEL_MAX 4.0

static int handoff_from_run(poas_context *ctx, const poas__gemm_plan *plan, int i,
                            const poas_device_report *d) {
  const poas__opt_problem *p = &plan->prob;
  const poas__opt_share *sh = &plan->res.dev[i];
  const poas__device_model *dm = plan->dev[i].model;
  /* A call the slow state moved to one thread hands nothing over, and its
   * time on one thread is not what the device's other calls take: its
   * runs teach the factor of such calls alone (from the device's whole
   * problem), and nothing else. */
  int side, pair = poas__gemm_pair(p->transa, p->transb);
  /* The device ran the whole problem, long enough to tell. */
  int tells = !d->failed && d->busy_s >= HANDOFF_MIN_S && sh->u0 == 0 &&
              sh->u1 == plan->res.total_units && sh->time.total_s > 0;
  if (dm && dm->handoff_slow_now && poas__moved_to_one(dm, p->dtype, p->m, p->n, &side)) {
    poas__learned *l = &ctx->taught.learned_one[i][p->dtype][pair];
    if (tells && l->runs++ > 0) { /* the first pays one-time costs */
      double *one = &ctx->taught.adapt_one[i][p->dtype][pair];
      *one = learn_factor(l, plan->one_factor[i], d->busy_s, sh->time.total_s);
      poas__debug("%s: %sgemm on one thread (slow hand-offs) ran %.3g s; such calls now take "
                  "%.3f times their calibrated time",
                  d->id, poas__dtype_letter(p->dtype), d->busy_s, *one);
    }
    return 1;
  }
  int fits_slow;
  if (!dm || !handoff_term(dm, p->dtype, &fits_slow) || !tells ||
      ctx->taught.handoff_runs[i][p->dtype]++ == 0)
    return 0;
  /* The plan's time for its GEMM in either state: its model's time moves
   * by then - now. The term per element of B is the plan's (scaled by the
   * factor the plan took). */
  int was_slow = fits_slow != ctx->taught.handoff_other[i];
  double level = ctx->taught.handoff_level[i][p->dtype];
  double now = poas__model_gemm_time(dm, p->dtype, p->transa, p->transb, p->m, p->n, p->k);
  double quick = poas__model_gemm_time_in(dm, handoff_shift_in(fits_slow, 0, level), 0,
                                          p->dtype, p->transa, p->transb, p->m, p->n, p->k);
  double slow = poas__model_gemm_time_in(dm, handoff_shift_in(fits_slow, 1, level), 0,
                                         p->dtype, p->transa, p->transb, p->m, p->n, p->k);
  double planned = sh->time.total_s, in_quick = planned + (quick - now),
         in_slow = planned + (slow - now);
  if (!(slow - quick >= HANDOFF_TELLS * planned) || !(in_quick > 0))
    return 0;
  int is_slow = fabs(log(d->busy_s / in_slow)) < fabs(log(d->busy_s / in_quick));
  if (is_slow != was_slow) {
    ctx->taught.handoff_other[i] = !ctx->taught.handoff_other[i];
    poas__debug("%s: ran %.3g s, nearer the %s hand-off state's %.3g s than the plan's %.3g s",
                d->id, d->busy_s, is_slow ? "slow" : "quick", is_slow ? in_slow : in_quick,
                planned);
  }
  if (!is_slow)
    return is_slow != was_slow;
  /* The slow state's strength this run showed: what it took over the quick
   * state's time, in units of the term at strength 1. */
  double unit = dm->handoff_extra[p->dtype == POAS_FLOAT64] * (double)p->n * (double)p->k;
  double implied = POAS__MIN(POAS__MAX((d->busy_s - in_quick) / unit, HANDOFF_LEVEL_MIN),
                             HANDOFF_LEVEL_MAX);
  ctx->taught.handoff_level[i][p->dtype] =
      poas__learn(&ctx->taught.handoff_learned[i][p->dtype], implied);
  poas__debug("%s: %sgemm ran %.3g s, the slow hand-off state %.2f times as strong as "
              "calibrated; plans now take it %.2f times",
              d->id, poas__dtype_letter(p->dtype), d->busy_s, implied,
              ctx->taught.handoff_level[i][p->dtype]);
  return 1;
}

/* Ages one of device i's factors for a plan it sat out, where that
 * factor says it runs slower than its models (poas__learn_sit_out); an
 * emptied window leaves `none`. Called with adapt_lock held. */
static void age_factor(poas_context *ctx, int i, poas_dtype dt, double *factor,
                       poas__learned *l, double none, const char *what) {
  if (!(*factor > 1) || l->n == 0)
    return;
  double before = *factor, f = poas__learn_sit_out(l);
  *factor = f > 0 ? POAS__MIN(POAS__MAX(f, 1 / ADAPT_MAX), ADAPT_MAX) : none;
  poas__debug("%s: left out of a plan of %sgemm, its %s at %.3f times its models' time; %s",
              ctx->devices.dev[i]->info.id, poas__dtype_letter(dt), what, before,
              l->n ? "that ages" : "now forgotten");
}

/* Device i sat out a plan of dtype dt and the shape class: its factors
 * for the dtype and for the class age alike, since the runs that taught
 * one taught the other. Called with adapt_lock held. */
static void sit_out(poas_context *ctx, int i, poas_dtype dt, int shape) {
  age_factor(ctx, i, dt, &ctx->taught.adapt_shape[i][dt][shape],
             &ctx->taught.learned_shape[i][dt][shape], 0, "calls of this shape");
  age_factor(ctx, i, dt, &ctx->taught.adapt[i][dt], &ctx->taught.learned[i][dt], 1,
             "calls of any shape");
}

/* Whether two plans' problems are the same for the solver (compared
 * field by field: a problem's padding is not cleared). */
static int same_problem(const poas__opt_problem *a, const poas__opt_problem *b) {
  return a->dtype == b->dtype && a->transa == b->transa && a->transb == b->transb &&
         a->m == b->m && a->n == b->n && a->k == b->k && a->reads_c == b->reads_c &&
         a->reads_ab == b->reads_ab && a->granule == b->granule && a->tile_max == b->tile_max &&
         a->host_cores == b->host_cores && a->min_gain == b->min_gain &&
         a->engine_s == b->engine_s && a->names_swapped == b->names_swapped;
}

/* Which devices `plan` left out for what their runs taught, into kept[]:
 * those it left out while the factor it planned them with said they run
 * slower than their models, and that the same plan at their models' rate
 * gives work. Only those age their factors (sit_out): a GEMM too small to
 * share leaves a slow device out at its models' rate too, and three such
 * calls once forgot a learned 1.5x, so that the next 2048^3 was planned
 * with the device 1.5x too fast (21% short). The answer takes a second
 * solve (a 300 x 300 x 8 plan's 7.5 us became 34 us), so it is kept for
 * the last problem asked: a loop of one small GEMM solves once. Called
 * with adapt_lock held. */
static void kept_out(poas_context *ctx, const poas__gemm_plan *plan, int kept[]) {
  int nd = plan->res.ndev;
  poas__kept_memo *m = &ctx->kept_memo;
  int same = m->valid && same_problem(&m->prob, &plan->prob);
  for (int i = 0; same && i < nd; i++)
    same = m->learned[i] == plan->learned[i] && m->memory[i] == plan->dev[i].memory_bytes &&
           m->lost[i] == (plan->dev[i].lost != NULL);
  if (same) {
    memcpy(kept, m->kept, (size_t)nd * sizeof *kept);
    return;
  }
  memset(kept, 0, (size_t)nd * sizeof *kept);
  poas__opt_device *dev = malloc((size_t)nd * sizeof *dev);
  poas__device_model *model = malloc((size_t)nd * sizeof *model);
  poas__opt_result *res = malloc(sizeof *res);
  int any = 0;
  if (dev && model && res) {
    memcpy(dev, plan->dev, (size_t)nd * sizeof *dev);
    for (int i = 0; i < nd; i++) {
      const poas__opt_share *sh = &plan->res.dev[i];
      if (!dev[i].supports_dtype || !dev[i].model || !(plan->learned[i] > 1) || sh->u1 > sh->u0)
        continue;
      /* The plan's model of it (its hand-off state too), at factor 1. */
      model[i] = *dev[i].model;
      poas__device_model_scale(&model[i], plan->prob.dtype, 1 / plan->learned[i]);
      dev[i].model = &model[i];
      any = 1;
    }
    int rc = any ? poas__optimize(dev, nd, &plan->prob, res) : 0;
    for (int i = 0; any && !rc && i < nd; i++)
      kept[i] = dev[i].model == &model[i] && res->dev[i].u1 > res->dev[i].u0;
    /* Kept only once answered: after a failed solve the next call asks
     * again. */
    m->valid = !rc;
    m->prob = plan->prob;
    for (int i = 0; i < nd; i++) {
      m->learned[i] = plan->learned[i];
      m->memory[i] = plan->dev[i].memory_bytes;
      m->lost[i] = plan->dev[i].lost != NULL;
      m->kept[i] = kept[i];
    }
  }
  free(dev), free(model), free(res);
}

static void adapt_from_run(poas_context *ctx, const poas__gemm_plan *plan, const poas_report *r) {
  if (ctx->adapt_off)
    return;
  poas_dtype dt = plan->prob.dtype;
  int shape = poas__shape_class(plan->prob.m, plan->prob.n);
  double total = (double)plan->res.total_units;
  pthread_mutex_lock(&ctx->adapt_lock);
  int kept[POAS_MAX_DEVICES], asked = 0;
  for (int i = 0; i < r->ndevices && i < plan->res.ndev; i++) {
    const poas_device_report *d = &r->dev[i];
    const poas__opt_share *sh = &plan->res.dev[i];
    if (handoff_from_run(ctx, plan, i, d))
      continue;
    double planned = (double)(sh->u1 - sh->u0), done = d->share * total;
    if (!(planned > 0) && !(done > 0) && !d->failed && plan->dev[i].supports_dtype) {
      /* Only a device that what it learned kept out forgets it. */
      if (plan->learned[i] > 1 && !asked++)
        kept_out(ctx, plan, kept);
      if (plan->learned[i] > 1 && kept[i])
        sit_out(ctx, i, dt, shape);
      continue;
    }
    /* The plan's time for the units it computed, at the plan's rate (its
     * models scaled by plan->learned[i], the factor of the call's class),
     * without the engine's cost of the run, which fill_result adds to
     * every working device's time and which its busy time does not hold:
     * 0.5 ms of a 5 ms run read as a device 10% faster than it ran. */
    double planned_s = (sh->time.total_s - plan->res.engine_s) * done / planned;
    if (d->failed || !(planned > 0) || !(done > 0) || !(planned_s > 0) ||
        !(plan->learned[i] > 0))
      continue;
    poas__learned *l = &ctx->taught.learned[i][dt];
    if (d->busy_s >= ADAPT_MIN_S && l->runs++ == 0 &&
        !first_run_tells(d->busy_s, planned_s, sh->corun, plan->dev[i].shares_host_cores))
      continue;
    int whole = learn_run(l, &ctx->taught.adapt[i][dt], plan->learned[i], d->busy_s, planned_s);
    int own = learn_run(&ctx->taught.learned_shape[i][dt][shape],
                        &ctx->taught.adapt_shape[i][dt][shape], plan->learned[i], d->busy_s,
                        planned_s);
    if (!whole && !own)
      continue;
    poas__debug("%s: %sgemm ran %.3fx its plan's rate; models now scaled by %.3f, %s by %.3f",
                d->id, poas__dtype_letter(dt), d->busy_s / planned_s, ctx->taught.adapt[i][dt],
                shape == POAS__SHAPE_WHOLE  ? "whole calls"
                : shape == POAS__SHAPE_ROWS ? "calls of few rows"
                                            : "calls of few columns",
                ctx->taught.adapt_shape[i][dt][shape]);
  }
  pthread_mutex_unlock(&ctx->adapt_lock);
}

/* A trace that could not be written does not fail the run it traced,
 * whose result is in C by then: poas_init checked that the file could be
 * written, so this is a full disk or a file that went away, and the
 * scheduler's one warning says so; the context writes no trace after it,
 * rather than failing the same way on every run. */
static void give_up_trace(poas_context *ctx) {
  free(ctx->trace_path);
  ctx->trace_path = NULL;
}

/* The call's own part of its report: the dtype and sizes as the caller
 * passed them, the rate from the measured makespan. */
static void report_call(const poas__gemm_problem *p, poas_report *r) {
  r->dtype = p->dtype;
  r->m = p->row_major ? p->n : p->m;
  r->n = p->row_major ? p->m : p->n;
  r->k = p->k;
  r->gflops = r->measured_s > 0
                  ? 2.0 * (double)p->m * (double)p->n * (double)p->k / r->measured_s / 1e9
                  : 0;
}

/* The most tiles a run cuts one device's share into. Each tile is a few
 * instructions of the run's graph, built before it starts, and ordering
 * each after those it conflicts with scans the earlier ones: a sim with
 * 16 GiB given a 3 x 2.2e17 dgemm (k = 0, which no memory limits) was
 * planned in 3e8 tiles, and its run grew the graph past 3.6 GB before the
 * allocation failed; a 15 x 1e12 one, in thousands of tiles, spent 30 s
 * ordering them (sanitizer build). A real device needs a problem of about
 * a thousand times its memory in host memory to come near it. */
#define POAS__MAX_RUN_TILES 1024

/* Fails, before anything runs, a plan with a device past
 * POAS__MAX_RUN_TILES tiles. */
static int check_run_tiles(const poas_context *ctx, const poas__gemm_plan *plan) {
  const poas__opt_result *r = &plan->res;
  for (int i = 0; i < r->ndev; i++)
    if (r->dev[i].time.tiles > POAS__MAX_RUN_TILES)
      return poas__fail(POAS_ETOOBIG,
                        "gemm: %s would run its share in %lld tiles, past the %d a run holds "
                        "(its memory is far smaller than the problem)",
                        ctx->devices.dev[i]->info.id, (long long)r->dev[i].time.tiles,
                        POAS__MAX_RUN_TILES);
  return 0;
}

int poas__gemm_run(poas_context *ctx, const poas__gemm_problem *p) {
  if (p->m == 0 || p->n == 0) {
    /* Nothing runs, and its report says so: no devices, no time. */
    poas_report r = {0};
    report_call(p, &r);
    poas__strlcpy(r.policy, poas__policy_name(ctx->sched), sizeof r.policy);
    poas__report_set(ctx, &r);
    return 0;
  }
  poas__gemm_plan *plan = malloc(sizeof *plan);
  if (!plan)
    return poas__fail(POAS_ENOMEM, "gemm: no memory for a plan");
  poas__gemm_source *src = NULL;
  poas__work_source *ws = NULL;
  if (p->async)
    poas__resident_drop_stale(ctx, p->epoch);
  int rc = poas__gemm_plan_make(ctx, p, plan);
  if (rc || (rc = check_run_tiles(ctx, plan)) != 0)
    goto done;
  poas__gemm_call call = host_call(p);
  rc = poas__gemm_source_create(&call, &plan->prob, plan->dev, &plan->res, &src, &ws);
  if (rc)
    goto done;
  poas__resident kept = {.device = -1};
  if (p->async && (rc = poas__resident_prepare(ctx, p, plan, src, &kept)) != 0)
    goto done;
  poas__sched_config cfg;
  sched_config(ctx, plan, p->fault, &cfg);
  cfg.no_inline = p->no_inline;
  int trace_failed = 0;
  cfg.trace_failed = &trace_failed;
  poas_report r;
  atomic_fetch_add(&ctx->runs_active, 1);
  rc = poas__schedule_run(&ctx->devices, ws, &cfg, &r);
  atomic_fetch_sub(&ctx->runs_active, 1);
  /* The scheduler wrote the trace once the run was over; one it could not
   * write leaves the run's own status as it was. */
  if (trace_failed)
    give_up_trace(ctx);
  /* A device that failed during the run left its part of C to others: the
   * copy it kept is not all of C. */
  poas__resident_finish(ctx, &kept, rc || r.faults);
  if (rc) {
    /* What failed, as the layers below said it, where they did. */
    char why[400];
    poas__strlcpy(why, poas_error_detail(), sizeof why);
    poas__fail(rc, "gemm: the run failed: %s", why[0] ? why : poas_strerror(rc));
    goto done;
  }
  for (int i = 0; i < r.ndevices; i++)
    r.dev[i].learned = plan->learned[i];
  report_call(p, &r);
  poas__report_set(ctx, &r);
  if (!r.faults)
    adapt_from_run(ctx, plan, &r);
done:
  /* A GEMM that failed leaves no report: the one before it, kept, was
   * taken for this call's (its error says what failed). */
  if (rc)
    poas__report_set(ctx, NULL);
  poas__gemm_source_destroy(src);
  free(plan);
  return rc;
}
