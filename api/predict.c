/* predict.c: the public face of predict/: poas_calibrate, the prediction
 * calls and what a context knows of its profile. Arguments are checked
 * here; the measuring and fitting happen in predict/, the file format in
 * models/. */
#include "api/context.h"
#include "devices/sim/sim.h"
#include "schedule/tasks.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void poas_calibrate_options_init(poas_calibrate_options *opts) {
  if (opts)
    memset(opts, 0, sizeof *opts);
}

int poas_default_profile_path(char *buf, size_t cap) {
  poas__clear_detail();
  if (!buf)
    return poas__fail(POAS_ENULL, "poas_default_profile_path: buf is NULL");
  char tmp[PATH_MAX];
  int rc = poas__profile_default_path(tmp, sizeof tmp);
  if (rc)
    return rc;
  if (strlen(tmp) >= cap)
    return poas__fail(POAS_EINVAL, "the default profile path needs %zu bytes", strlen(tmp) + 1);
  poas__strlcpy(buf, tmp, cap);
  return 0;
}

static void fit_info(poas_fit_info *out, const poas__fit_stats *s) {
  *out = (poas_fit_info){.samples = s->samples, .r2 = s->r2, .heldout_median = s->heldout_median,
                         .heldout_max = s->heldout_max, .timing_noise = s->timing_noise};
}

/* A rate model's fit and parameters, as poas_device_fit lists them for
 * copies and transposes; left as they are (zero) when t was not measured. */
static void rate_info(const poas__transfer_model *t, poas_fit_info *fit, double *latency_s,
                      double *bandwidth, double *knee_bytes, double *bandwidth_beyond) {
  if (!t->valid)
    return;
  fit_info(fit, &t->fit);
  *latency_s = t->latency;
  *bandwidth = t->bandwidth;
  *knee_bytes = t->knee_bytes;
  *bandwidth_beyond = t->bandwidth_beyond;
}

static void thin_range(const poas__thin_table *tt, poas_fit_info *out) {
  if (!tt)
    return;
  out->thin_min = out->thin_max = tt->factor[0][0];
  for (int side = 0; side < 2; side++)
    for (int i = 0; i < POAS__THIN_MAX; i++) {
      out->thin_min = fmin(out->thin_min, tt->factor[side][i]);
      out->thin_max = fmax(out->thin_max, tt->factor[side][i]);
    }
}

/* A dtype's pooled entry spans the ranges of its pairs' tables. */
static void widen_thin(poas_fit_info *all, const poas_fit_info *pair) {
  if (!(pair->thin_max > 0))
    return;
  all->thin_min = all->thin_max > 0 ? fmin(all->thin_min, pair->thin_min) : pair->thin_min;
  all->thin_max = fmax(all->thin_max, pair->thin_max);
}

static void device_fit(const poas__device *dev, const poas__device_model *m, poas_device_fit *f) {
  memset(f, 0, sizeof *f);
  poas__strlcpy(f->id, dev->info.id, sizeof f->id);
  f->calibrated = m->source == POAS__MODEL_CALIBRATED;
  for (int dt = 0; dt < 2; dt++) {
    fit_info(&f->gemm[dt], &m->gemm_fit[dt]);
    for (int p = 0; p < 4; p++) {
      const poas__gemm_model *g = &m->gemm[dt][p];
      fit_info(&f->gemm_pair[dt][p], &g->fit);
      thin_range(g->thin, &f->gemm_pair[dt][p]);
      widen_thin(&f->gemm[dt], &f->gemm_pair[dt][p]);
    }
  }
  for (int i = 0; i < 2; i++) { /* copies by direction, transposes by dtype */
    rate_info(&m->xfer[i], &f->transfer[i], &f->latency_s[i], &f->bandwidth[i],
              &f->knee_bytes[i], &f->bandwidth_beyond[i]);
    rate_info(&m->transpose[i], &f->transpose[i], &f->transpose_latency_s[i],
              &f->transpose_bandwidth[i], &f->transpose_knee_bytes[i],
              &f->transpose_bandwidth_beyond[i]);
  }
  f->memory_bytes = m->memory_bytes;
  f->dispatch_s = m->dispatch_s;
  f->engine_s = m->engine_s;
  f->run_cost_spread_s = m->run_cost_spread_s;
  f->sweep_passes = m->sweep_passes;
  f->sweep_planned = m->sweep_planned;
  f->thin_skipped = m->thin_skipped;
  f->handoff_start = m->handoff[0];
  f->handoff_end = m->handoff[1];
  f->handoff_timings = m->handoff_timings;
  f->handoff_slow_timings = m->handoff_slow;
  memcpy(f->handoff_extra, m->handoff_extra, sizeof f->handoff_extra);
  memcpy(f->handoff_latency_ns, m->handoff_latency_ns, sizeof f->handoff_latency_ns);
  f->duplex = m->duplex > 1 ? m->duplex : 1;
  /* The device's, which are its model's unless block=N set them. */
  memcpy(f->gemm_block, dev->gemm_block, sizeof f->gemm_block);
  _Static_assert(sizeof f->threads_by_rows == sizeof m->threads_by_side[0],
                 "poas_device_fit.threads_by_rows follows POAS__FEW_SIDE");
  /* The slow state's table, as a context derives it from these models. */
  poas__device_model slow = *m;
  poas__threads_slow_table(&slow);
  for (int dt = 0; dt < 2; dt++) {
    memcpy(f->threads_by_rows[dt], m->threads_by_side[dt][0], sizeof f->threads_by_rows[dt]);
    memcpy(f->threads_by_cols[dt], m->threads_by_side[dt][1], sizeof f->threads_by_cols[dt]);
    memcpy(f->threads_slow_by_rows[dt], slow.threads_slow[dt][0],
           sizeof f->threads_slow_by_rows[dt]);
    memcpy(f->threads_slow_by_cols[dt], slow.threads_slow[dt][1],
           sizeof f->threads_slow_by_cols[dt]);
  }
}

/* pd names dev, with what it declares. */
static void identify(poas__profile_device *pd, const poas__device *dev) {
  poas__gemm_decl decl;
  poas__dev_gemm_decl(dev, &decl);
  poas__profile_device_identify(pd, &dev->info, &decl);
}

/* The context's device with this id: its index, or -1. */
static int device_index(const poas_context *ctx, const char *id) {
  for (int i = 0; i < ctx->devices.ndev; i++)
    if (strcmp(ctx->devices.dev[i]->info.id, id) == 0)
      return i;
  return -1;
}

/* Marks in sel[] the devices a comma-separated id list names. */
static int select_devices(const poas_context *ctx, const char *list, int sel[]) {
  for (int i = 0; i < ctx->devices.ndev; i++)
    sel[i] = list == NULL;
  if (!list)
    return 0;
  char buf[1024];
  if (strlen(list) >= sizeof buf)
    return poas__fail(POAS_EINVAL, "poas_calibrate: device list too long");
  poas__strlcpy(buf, list, sizeof buf);
  /* Entries as poas_init takes them: blanks around the commas go, and an
   * empty entry is refused ("cpu0," was cpu0, and "cpu0 sim0" two ids). */
  for (char *next = buf, *id; next;) {
    id = next;
    next = strchr(id, ',');
    if (next)
      *next++ = '\0';
    id = poas__trim(id);
    if (!*id)
      return poas__fail(POAS_ESPEC, "poas_calibrate: an empty entry in the device list '%s'",
                        list);
    int i = device_index(ctx, id);
    if (i < 0)
      return poas__fail(POAS_EINVAL, "poas_calibrate: no device '%s' in this context", id);
    /* As poas_init refuses a device named twice (core/spec.c): an id
     * names one device, a sim's as much as any. */
    if (sel[i])
      return poas__fail(POAS_ESPEC, "poas_calibrate: device '%s' selected twice", id);
    sel[i] = 1;
  }
  return 0;
}

/* The mask of the dtypes a model has GEMM models for. */
static int model_dtypes(const poas__device_model *m) {
  return (m->gemm[0][0].valid ? 1 : 0) | (m->gemm[1][0].valid ? 2 : 0);
}

/* Gives dst the models of src in the dtypes dst has no GEMM models in:
 * the GEMM models with the thread counts and pieces they were fitted to,
 * the transpose's, and the slow hand-off state's term; returns their mask.
 * With them go the cache-line round trips of the hand-off states dst's
 * calibration did not see, which are the cores', not a dtype's. */
static int keep_dtypes(poas__device_model *dst, const poas__device_model *src) {
  int kept = 0;
  for (int dt = 0; dt < 2; dt++) {
    if (dst->gemm[dt][0].valid || !src->gemm[dt][0].valid)
      continue;
    memcpy(dst->gemm[dt], src->gemm[dt], sizeof dst->gemm[dt]);
    dst->gemm_fit[dt] = src->gemm_fit[dt];
    memcpy(dst->threads_by_side[dt], src->threads_by_side[dt], sizeof dst->threads_by_side[dt]);
    memcpy(dst->one_thread[dt], src->one_thread[dt], sizeof dst->one_thread[dt]);
    dst->gemm_block[dt] = src->gemm_block[dt];
    if (!dst->transpose[dt].valid)
      dst->transpose[dt] = src->transpose[dt];
    if (!(dst->handoff_extra[dt] > 0))
      dst->handoff_extra[dt] = src->handoff_extra[dt];
    kept |= 1 << dt;
  }
  for (int st = 0; kept && st < 2; st++)
    if (!(dst->handoff_latency_ns[st] > 0))
      dst->handoff_latency_ns[st] = src->handoff_latency_ns[st];
  return kept;
}

/* Devices a profile lists once `keep`'s are kept beside those selected. */
static int merged_count(const poas_context *ctx, const int sel[], const poas__profile *keep) {
  int n = keep->ndev;
  for (int i = 0; i < ctx->devices.ndev; i++)
    n += sel[i] && !poas__profile_find(keep, ctx->devices.dev[i]->info.id);
  return n;
}

/* Checks, before anything is measured, the file a calibration is to
 * write: that it can be written, and what it holds. *keep gets the
 * profile of this machine there, whose models the new one keeps where it
 * does not measure them (NULL when there is none); replaced[cap] why what
 * is there is replaced whole. A file that is not a POAS profile is
 * refused: it may be anything of the user's. */
static int examine_output(const poas_context *ctx, const int sel[], const char *path,
                          poas__profile **keep, char *replaced, size_t cap) {
  *keep = NULL;
  replaced[0] = '\0';
  char target[1024], why[400];
  int rc = poas__profile_check_writable(path, target, sizeof target);
  if (rc)
    return rc;
  poas__profile *old = malloc(sizeof *old), *here = calloc(1, sizeof *here);
  poas__profile_found found = POAS__FOUND_NOTHING;
  rc = old && here ? poas__profile_examine(target, old, &found, why, sizeof why)
                   : poas__fail(POAS_ENOMEM, "poas_calibrate: no memory to read %s", path);
  if (!rc && found == POAS__FOUND_OTHER)
    rc = poas__fail(POAS_EPROFILE, "%s is not a POAS profile: %s; not replacing it (remove it, "
                                   "or write the profile elsewhere)", path, why);
  /* A later POAS's profile is kept from being overwritten by an earlier
   * POAS's calibration: the user who runs both would lose the newer one's
   * models to a format it has moved on from. */
  if (!rc && found == POAS__FOUND_NEWER)
    rc = poas__fail(POAS_EPROFILE,
                    "%s: %s; not replacing it (use that POAS, or write this "
                    "profile elsewhere)",
                    path, why);
  if (!rc && found == POAS__FOUND_UNUSABLE)
    snprintf(replaced, cap, "a profile this POAS cannot use (%s)", why);
  if (!rc && found == POAS__FOUND_PROFILE) {
    /* A sim's settings are not the machine's: a sim of other settings
     * replaces that sim's models alone (merge_profile), where taking it for
     * another machine once threw away the real devices' calibration. */
    const poas_device_info *devs[POAS_MAX_DEVICES];
    int nreal = 0;
    for (int i = 0; i < ctx->devices.ndev; i++)
      if (ctx->devices.dev[i]->info.kind != POAS_DEVICE_SIM)
        devs[nreal++] = &ctx->devices.dev[i]->info;
    poas__profile_fingerprint_host(here);
    if (!poas__profile_same_machine(old, here, devs, nreal, why, sizeof why))
      snprintf(replaced, cap, "a profile of another machine (%s)", why);
    else if (merged_count(ctx, sel, old) > POAS_MAX_DEVICES)
      rc = poas__fail(POAS_EINVAL, "%s: its devices and those measured now are more than %d",
                      path, POAS_MAX_DEVICES);
    else
      *keep = old, old = NULL;
  }
  free(old);
  free(here);
  return rc;
}

/* The profile of a calibration into p: the devices measured, with what
 * `keep` (the profile of this machine it replaces; may be NULL) has that
 * they were not measured in, and keep's other devices whole; in keep's
 * order, devices new to it after. What was kept goes to kept[]. */
static void merge_profile(const poas_context *ctx, const int sel[],
                          const poas__device_model fresh[], const poas__profile *keep,
                          poas__profile *p, poas_kept_device kept[], int *nkept,
                          char *replaced, size_t cap) {
  poas__profile_fingerprint_host(p);
  p->ndev = *nkept = 0;
  for (int j = 0; keep && j < keep->ndev; j++) {
    const poas__profile_device *od = &keep->dev[j];
    poas__profile_device *pd = &p->dev[p->ndev++];
    poas_kept_device *k = &kept[*nkept];
    poas__strlcpy(k->id, od->id, sizeof k->id);
    int i = device_index(ctx, od->id);
    if (i < 0 || !sel[i]) {
      *pd = *od;
      k->measured = 0;
      k->dtypes = model_dtypes(&od->model);
      ++*nkept;
      continue;
    }
    identify(pd, ctx->devices.dev[i]);
    pd->model = fresh[i];
    k->measured = 1;
    /* Only a sim measured with other settings than the file's (examine_output
     * let it pass) is unlike its entry: what the entry holds was another
     * device's, and none of it is kept. The result says so (`replaced`):
     * a sim calibrated in sgemm alone over one of other settings lost its
     * dgemm model with a line at POAS_LOG=2 alone. */
    char why[400];
    if (!poas__profile_device_matches(od, &ctx->devices.dev[i]->info, why, sizeof why)) {
      poas__info("none of %s's models in the profile kept: %s", od->id, why);
      size_t used = strlen(replaced);
      snprintf(replaced + used, cap - used, "%s%s's models, another device's (%s)",
               used ? "; " : "", od->id, why);
      continue;
    }
    k->dtypes = keep_dtypes(&pd->model, &od->model);
    *nkept += k->dtypes != 0;
    /* A device measured without the devices it shares the host's cores
     * with (contention 0: not measured) keeps the factor measured with
     * them. */
    if (pd->model.contention == 0)
      pd->model.contention = od->model.contention;
  }
  for (int i = 0; i < ctx->devices.ndev; i++) {
    if (!sel[i] || poas__profile_find(p, ctx->devices.dev[i]->info.id))
      continue;
    poas__profile_device *pd = &p->dev[p->ndev++];
    identify(pd, ctx->devices.dev[i]);
    pd->model = fresh[i];
  }
}

/* The runtime's fixed cost of a run on each selected device (dispatch_s):
 * how much longer a tiny GEMM takes end to end, through the whole
 * pipeline, than the device's fresh models predict for it; and how much
 * more the same run costs forced through the engine (engine_s), which
 * plans on several devices or tiles take. Both from DISPATCH_RUNS pairs
 * of runs after warm-ups, by poas__run_costs, which takes the quicker
 * runs. Where the median strayed more than POAS_RUN_COST_BUSY_S above
 * them (a busy machine), up to DISPATCH_BATCHES - 1 more batches are
 * timed, so that the quiet moments are enough for the quantile taken: on
 * the 2-core CI VM with one core spinning, 5 of 21 runs through the engine
 * had one. That is a quarter of a millisecond: ten times the spread of a
 * quiet CI VM (1 us for cpu0, 25 us for PoCL), and half what plans take
 * the engine to cost at the least. A batch takes 0.2 s at most there (4
 * ms a run, a scheduler tick). A replay in virtual time is timed by the
 * runs' virtual makespans, which hold what it spends for the device it
 * replays (its dispatch_s) and nothing of the host's: a calibration of an
 * H100 replay once skipped it and planned with no dispatch_s while the
 * sim spent the profile's 25 us a run. Other sims in virtual time spend
 * no such cost, and are not timed: their runs through the engine would
 * only add ways for calibration to fail. */
#define DISPATCH_RUNS 21
#define DISPATCH_BATCHES 3
#define DISPATCH_N 32
_Static_assert(DISPATCH_RUNS * DISPATCH_BATCHES <= POAS__RUN_COST_MAX,
               "poas__run_costs takes every batch's runs");

/* Whether device i's runs are timed: a replay's virtual time holds its
 * runtime's costs, a sim's own holds none. */
static int has_run_costs(const poas_context *ctx, int i) {
  poas__sim_params sp;
  return !ctx->devices.dev[i]->virtual_time ||
         (poas__sim_get_params(ctx->devices.dev[i], &sp) == 0 && sp.profile);
}

/* Times `runs` pairs of runs of the tiny GEMM on device i (ops: its
 * operands, in dtype) after `warmups`, alternating, so that both of a pair
 * see the same machine: extra[0] on the caller's thread, extra[1] through
 * the engine, each its time less the prediction its report holds. */
static int time_runs(poas_context *ctx, int i, poas_dtype dtype, double *ops, int warmups,
                     int runs, poas_report *run, double *extra[2]) {
  double *a = ops, *b = a + DISPATCH_N * DISPATCH_N, *c = b + DISPATCH_N * DISPATCH_N;
  int rc = 0;
  for (int r = -warmups; !rc && r < runs; r++)
    for (int engine = 0; !rc && engine < 2; engine++) {
      poas__gemm_problem p = {.dtype = dtype, .transa = POAS_NO_TRANS, .transb = POAS_NO_TRANS,
                              .m = DISPATCH_N, .n = DISPATCH_N, .k = DISPATCH_N, .alpha = 1,
                              .beta = 0, .a = a, .b = b, .c = c, .lda = DISPATCH_N,
                              .ldb = DISPATCH_N, .ldc = DISPATCH_N, .only = i + 1,
                              .no_inline = engine};
      double t0 = poas__now();
      rc = poas__gemm_run(ctx, &p);
      double t = poas__now() - t0;
      if (!rc && r >= 0 && poas__report_get(ctx, run))
        extra[engine][r] = (run->virtual_time ? run->measured_s : t) - run->predicted_s;
    }
  return rc;
}

static int calibrate_dispatch(poas_context *ctx, const int *sel, poas__device_model *fresh,
                              int dtype_mask) {
  /* The context's models and report come back as they were; the
   * operands are this call's own (contexts may calibrate at once). */
  poas__device_model *saved = malloc(sizeof ctx->models);
  poas_report *saved_report = malloc(sizeof *saved_report), *run = malloc(sizeof *run);
  double *ops = malloc(3 * sizeof(double) * DISPATCH_N * DISPATCH_N);
  if (!saved || !saved_report || !run || !ops) {
    free(saved), free(saved_report), free(run), free(ops);
    return poas__fail(POAS_ENOMEM, "poas_calibrate: no memory to time the runtime's cost");
  }
  memcpy(saved, ctx->models, sizeof ctx->models);
  int saved_has = poas__report_get(ctx, saved_report), rc = 0;
  /* In a dtype that was calibrated, so that the model's part is right. */
  poas_dtype dtype = dtype_mask & 1 ? POAS_FLOAT32 : POAS_FLOAT64;
  double *a = ops, *b = a + DISPATCH_N * DISPATCH_N;
  for (int i = 0; i < DISPATCH_N * DISPATCH_N; i++) {
    double v = 1.0 / (double)(1 + i % 7);
    if (dtype == POAS_FLOAT32)
      ((float *)a)[i] = ((float *)b)[i] = (float)v;
    else
      a[i] = b[i] = v;
  }
  for (int i = 0; i < ctx->devices.ndev; i++)
    if (sel[i]) {
      ctx->models[i] = fresh[i];
      ctx->models[i].dispatch_s = ctx->models[i].engine_s = 0;
    }
  for (int i = 0; !rc && i < ctx->devices.ndev; i++) {
    if (!sel[i] || !has_run_costs(ctx, i))
      continue;
    double extra[2][DISPATCH_RUNS * DISPATCH_BATCHES];
    poas__run_cost cost = {0, 0, 0};
    for (int n = 0; !rc && n < DISPATCH_RUNS * DISPATCH_BATCHES; n += DISPATCH_RUNS) {
      if (n > 0 && !(cost.spread_s > POAS_RUN_COST_BUSY_S))
        break;
      rc = time_runs(ctx, i, dtype, ops, n ? 0 : 3, DISPATCH_RUNS, run,
                     (double *[2]){extra[0] + n, extra[1] + n});
      if (!rc)
        cost = poas__run_costs(extra[0], extra[1], n + DISPATCH_RUNS);
    }
    if (!rc) {
      fresh[i].dispatch_s = cost.dispatch_s;
      fresh[i].engine_s = cost.engine_s;
      fresh[i].run_cost_spread_s = cost.spread_s;
    }
  }
  memcpy(ctx->models, saved, sizeof ctx->models);
  free(saved);
  poas__report_set(ctx, saved_has ? saved_report : NULL);
  free(saved_report);
  free(run);
  free(ops);
  return rc;
}

/* Devices calibrated together that share the host's cores get their
 * contention factor; a device measured alone keeps none, and so do they
 * all where the probe finds no memory (a device too small for its
 * operands, or the host short): a warning then, not the minutes of
 * measuring before it thrown away. */
static int calibrate_contention(poas_context *ctx, const int *sel, double end_s,
                                poas__device_model *fresh) {
  poas__device *devs[POAS_MAX_DEVICES];
  int idx[POAS_MAX_DEVICES], n = 0;
  for (int i = 0; i < ctx->devices.ndev; i++)
    if (sel[i] && ctx->devices.dev[i]->info.shares_host_cores)
      idx[n] = i, devs[n++] = ctx->devices.dev[i];
  if (n < 2)
    return 0;
  double factor[POAS_MAX_DEVICES];
  int rc = poas__calibrate_contention(devs, n, end_s, factor);
  if (rc == POAS_ENOMEM) {
    poas__warn("calibration: contention of devices that share the host's cores not measured: %s",
               poas_error_detail());
    poas__clear_detail();
    return 0;
  }
  for (int j = 0; !rc && j < n; j++)
    fresh[idx[j]].contention = factor[j];
  return rc;
}

/* The time the devices' own steps have, from the start of a calibration
 * (building their kernels included): a quick one may take 60 s on the
 * 2-core CI machine class and a full one 10 minutes, and the contention
 * and run-cost probes after the devices took 5 s there. On a slow day the
 * GEMM sweeps run fewer passes to keep to it (poas__calib_opts.end_s): a
 * quick calibration of cpu0 and PoCL took 55.8 and 58.4 s on one such VM,
 * 23.6 s of it cpu0's and 29.8 s PoCL's, and with 52 s for the devices one
 * still took 58.3 s. On a new machine PoCL first builds its kernels (23-31
 * s there), and the devices' steps then cannot all shrink to what is left:
 * with 50 s, such calibrations took 53.1 and 57.2 s. */
#define QUICK_DEVICES_S 48.0
#define FULL_DEVICES_S 560.0
/* When the probes of the devices together end at the latest: a second
 * or two before the quick minute or the full ten, for the run-cost probes
 * (tens of milliseconds) and writing the profile. Where the devices' steps
 * ran late (their sweeps cannot shrink below two passes of their smallest
 * sizes), the contention probe shortens its windows to keep to it. */
#define QUICK_TOTAL_S 58.0
#define FULL_TOTAL_S 595.0
/* The part of a calibration's progress (poas_progress_fn's fraction) that
 * the devices' own steps take; the probes of them together after them
 * (contention, the runs' costs; 5 s of a quick minute on the CI machine)
 * take the rest, where progress stood at 100% while they ran. */
#define DEVICES_PART 0.92

/* Reports a step of the probes of the devices together (device "all"). */
static void progress_all(const poas_calibrate_options *opts, const char *step, double fraction) {
  if (opts->progress)
    opts->progress(opts->progress_user, "all", step, fraction);
}

static int calibrate(poas_context *ctx, const poas_calibrate_options *opts,
                     poas_calibration_result *out) {
  poas_calibrate_options defaults;
  poas_calibrate_options_init(&defaults);
  if (!opts)
    opts = &defaults;
  int mask = opts->dtypes ? opts->dtypes : 3;
  if (mask & ~3)
    return poas__fail(POAS_EINVAL, "poas_calibrate: dtype mask %#x has unknown bits",
                      (unsigned)opts->dtypes);
  int sel[POAS_MAX_DEVICES], nsel = 0;
  int rc = select_devices(ctx, opts->devices, sel);
  if (rc)
    return rc;
  /* Whether the profile can be written, and what of the file there to
   * keep, is known before the minutes of measuring. */
  poas__profile *keep = NULL;
  char replaced[512] = "";
  if (opts->output && (rc = examine_output(ctx, sel, opts->output, &keep, replaced,
                                           sizeof replaced)))
    return rc;
  /* Calibration has the devices to itself: outstanding tasks finish first
   * (from one of them it would wait for itself: POAS_ESTATE). */
  if ((rc = poas__wait_tasks(ctx)) != 0) {
    free(keep);
    return rc;
  }
  /* It measures a device's memory by allocating all it can: what the
   * process holds there idle goes first, the copies GEMM tasks left
   * (freed by that wait) and the buffers its cache and other contexts'
   * caches of the device parked. Held, they were measured as memory the
   * device does not have. */
  for (int i = 0; i < ctx->devices.ndev; i++)
    if (sel[i])
      poas__dev_trim(ctx->devices.dev[i]);
  for (int i = 0; i < ctx->devices.ndev; i++)
    nsel += sel[i];
  poas__device_model *fresh = calloc(POAS_MAX_DEVICES, sizeof *fresh);
  poas__profile *merged = calloc(1, sizeof *merged);
  poas__taught *taught = malloc(sizeof *taught);
  if (!fresh || !merged || !taught) {
    free(fresh);
    free(merged);
    free(taught);
    free(keep);
    return poas__fail(POAS_ENOMEM, "poas_calibrate: no memory for the models");
  }
  /* A cpu device on fewer cores than the process binds the thread that
   * calls BLAS (devices/cpu), here the caller's, while its GEMMs are timed
   * on it: the thread gets its binding back after each device's steps, as
   * after a GEMM (schedule/run.c, run_inline). Kept bound, the caller
   * stayed on the device's core after poas_calibrate returned, and every
   * thread made from it after (the contention probe's and the runs'
   * engine threads here; PoCL's, were it opened later) inherited the one
   * core: the runs were timed with their issuing threads beside the cpu
   * device's. */
  cpu_set_t caller_cpus;
  int have_cpus = pthread_getaffinity_np(pthread_self(), sizeof caller_cpus, &caller_cpus) == 0;
  double t0 = poas__now();
  double devices_end = t0 + (opts->quick ? QUICK_DEVICES_S : FULL_DEVICES_S);
  /* Kernels first, so that what building them takes comes out of every
   * device's time and not only out of the device that builds them. */
  double build_s[POAS_MAX_DEVICES] = {0};
  for (int i = 0; !rc && i < ctx->devices.ndev; i++) {
    if (!sel[i])
      continue;
    poas__calib_opts bo = {.quick = opts->quick, .dtype_mask = mask,
                           .progress = opts->progress, .user = opts->progress_user};
    double b0 = poas__now();
    rc = poas__calibrate_build(ctx->devices.dev[i], &bo);
    build_s[i] = poas__now() - b0;
    if (have_cpus)
      pthread_setaffinity_np(pthread_self(), sizeof caller_cpus, &caller_cpus);
  }
  for (int i = 0, done = 0; !rc && i < ctx->devices.ndev; i++) {
    if (!sel[i])
      continue;
    /* Each device has an equal part of the time the devices have left. */
    double now = poas__now();
    poas__calib_opts co = {opts->quick, mask, opts->progress, opts->progress_user,
                           DEVICES_PART * done / nsel, DEVICES_PART * (done + 1) / nsel,
                           now + POAS__MAX(devices_end - now, 0) / (nsel - done)};
    rc = poas__calibrate_device(ctx->devices.dev[i], &co, &fresh[i]);
    if (have_cpus)
      pthread_setaffinity_np(pthread_self(), sizeof caller_cpus, &caller_cpus);
    done++;
  }
  if (!rc) {
    progress_all(opts, "contention", DEVICES_PART);
    rc = calibrate_contention(ctx, sel, t0 + (opts->quick ? QUICK_TOTAL_S : FULL_TOTAL_S),
                              fresh);
    if (have_cpus)
      pthread_setaffinity_np(pthread_self(), sizeof caller_cpus, &caller_cpus);
  }
  /* The dispatch runs below are timed on the fresh models as they are,
   * with nothing taught; what runs taught comes back should the
   * calibration fail from here on, as the models do. */
  int untaught = 0;
  if (!rc) {
    pthread_mutex_lock(&ctx->adapt_lock);
    *taught = ctx->taught;
    pthread_mutex_unlock(&ctx->adapt_lock);
    poas__adapt_reset(ctx, NULL);
    untaught = 1;
    progress_all(opts, "runs", (1 + DEVICES_PART) / 2);
    rc = calibrate_dispatch(ctx, sel, fresh, mask);
  }
  /* Another calibration may have written the file while this one measured
   * (one per dtype, started at once): what to keep is read again now, so
   * that its models are kept, not written over with what the file held
   * when this one started, while both said they had written theirs. The
   * read and the write hold the folder's lock: two that finished together
   * (sims, in virtual time, within a millisecond) still each read the
   * file before the other's write, and one dtype was lost in 15 of 20
   * tries. */
  int lock = -1;
  if (!rc && opts->output) {
    lock = poas__profile_lock(opts->output);
    poas__profile *now = NULL;
    rc = examine_output(ctx, sel, opts->output, &now, replaced, sizeof replaced);
    if (!rc) {
      free(keep);
      keep = now;
    }
  }
  poas_kept_device kept[POAS_MAX_DEVICES];
  int nkept = 0;
  if (!rc) {
    merge_profile(ctx, sel, fresh, keep, merged, kept, &nkept, replaced, sizeof replaced);
    /* Models the reader would refuse are not written, and not used either
     * when there is no file: they were taken unchecked, and planned on. */
    rc = opts->output ? poas__profile_write(opts->output, merged)
                      : poas__profile_check(merged, "the calibration's models");
  }
  poas__profile_unlock(lock);
  if (!rc) {
    for (int i = 0; i < ctx->devices.ndev; i++) {
      if (!sel[i])
        continue;
      poas__device_model m = poas__profile_find(merged, ctx->devices.dev[i]->info.id)->model;
      /* Dtypes neither measured nor kept from the file keep the model
       * they had. */
      keep_dtypes(&m, &ctx->models[i]);
      ctx->models[i] = m;
      ctx->devices.dev[i]->info.has_model = 1;
    }
    /* What runs taught of the measured devices was about their old
     * models; the others keep their models, and what their runs taught
     * of them (it once went too, for every device and dtype). */
    pthread_mutex_lock(&ctx->adapt_lock);
    ctx->taught = *taught;
    pthread_mutex_unlock(&ctx->adapt_lock);
    poas__adapt_reset(ctx, sel);
    if (opts->output) {
      poas__profile_status *st = &ctx->profile;
      poas__strlcpy(st->path, opts->output, sizeof st->path);
      st->loaded = 1;
      st->age_s = 0;
      poas__strlcpy(st->created, merged->created, sizeof st->created);
      st->problem[0] = '\0';
    }
  }
  /* The devices run their calls as the context's models were fitted to:
   * the new ones, or, when the calibration failed, the old ones it keeps
   * (calibration set their thread counts as it went). */
  for (int i = 0; i < ctx->devices.ndev; i++)
    if (sel[i])
      poas__device_take_settings(ctx->devices.dev[i], &ctx->models[i]);
  if (!rc && out) {
    memset(out, 0, sizeof *out);
    for (int i = 0; i < ctx->devices.ndev; i++) {
      if (!sel[i])
        continue;
      device_fit(ctx->devices.dev[i], &fresh[i], &out->dev[out->ndevices]);
      out->dev[out->ndevices++].build_s = build_s[i];
    }
    out->seconds = poas__now() - t0;
    if (opts->output)
      poas__strlcpy_marked(out->output, opts->output, sizeof out->output);
    out->nkept = nkept;
    memcpy(out->kept, kept, (size_t)nkept * sizeof *kept);
    poas__strlcpy(out->replaced, replaced, sizeof out->replaced);
  }
  if (rc && untaught) {
    pthread_mutex_lock(&ctx->adapt_lock);
    ctx->taught = *taught;
    pthread_mutex_unlock(&ctx->adapt_lock);
  }
  if (!rc)
    progress_all(opts, "done", 1.0);
  free(taught);
  free(merged);
  free(keep);
  free(fresh);
  return rc;
}

int poas_calibrate(poas_context *ctx, const poas_calibrate_options *opts,
                   poas_calibration_result *out) {
  poas__clear_detail();
  if (!ctx)
    return poas__fail(POAS_ENULL, "poas_calibrate: ctx is NULL");
  int rc = poas__refuse_while_calibrating(ctx, "poas_calibrate");
  if (rc)
    return rc;
  ctx->calibrating = 1;
  rc = calibrate(ctx, opts, out);
  ctx->calibrating = 0;
  return rc;
}

/* `who`, the call, leads the detail, as its other errors' do. */
static int check_device(const char *who, const poas_context *ctx, int device, const void *outp) {
  if (!ctx || !outp)
    return poas__fail(POAS_ENULL, "%s: %s is NULL", who, ctx ? "seconds" : "ctx");
  if (device < 0 || device >= ctx->devices.ndev)
    return poas__fail(POAS_ERANGE, "%s: device %d out of range (0 to %d)", who, device,
                      ctx->devices.ndev - 1);
  return 0;
}

int poas_predict_gemm(const poas_context *ctx, int device, poas_dtype dtype, poas_op transa,
                      poas_op transb, int64_t m, int64_t n, int64_t k, double *seconds) {
  poas__clear_detail();
  int rc = check_device("poas_predict_gemm", ctx, device, seconds);
  if (rc)
    return rc;
  /* Sizes no matrices can have are refused as the GEMM calls and
   * poas_plan_gemm refuse them, not timed. */
  if ((rc = poas__gemm_shape_check("poas_predict_gemm", dtype, transa, transb, m, n, k)) != 0)
    return rc;
  *seconds = poas__model_gemm_time(&ctx->models[device], dtype, transa, transb, m, n, k);
  return 0;
}

int poas_predict_transfer(const poas_context *ctx, int device, poas_direction direction,
                          uint64_t bytes, double *seconds) {
  poas__clear_detail();
  int rc = check_device("poas_predict_transfer", ctx, device, seconds);
  if (rc)
    return rc;
  if (direction != POAS_H2D && direction != POAS_D2H)
    return poas__fail(POAS_EINVAL, "poas_predict_transfer: unknown direction %d",
                      (int)direction);
  *seconds = ctx->devices.dev[device]->info.host_memory
                 ? 0
                 : poas__model_transfer_time(&ctx->models[device], direction, (double)bytes);
  return 0;
}

int poas_profile_get(const poas_context *ctx, poas_profile_info *out) {
  poas__clear_detail();
  if (!ctx || !out)
    return poas__fail(POAS_ENULL, "poas_profile_get: %s is NULL", ctx ? "out" : "ctx");
  const poas__profile_status *st = &ctx->profile;
  memset(out, 0, sizeof *out);
  poas__strlcpy_marked(out->path, st->path, sizeof out->path);
  out->loaded = st->loaded;
  poas__strlcpy(out->created, st->created, sizeof out->created);
  out->age_s = st->loaded ? st->age_s : -1;
  poas__strlcpy(out->problem, st->problem, sizeof out->problem);
  out->ndevices = ctx->devices.ndev;
  for (int i = 0; i < ctx->devices.ndev; i++)
    device_fit(ctx->devices.dev[i], &ctx->models[i], &out->dev[i]);
  return 0;
}
