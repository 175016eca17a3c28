/* context.c: poas_init / poas_finalize and the device queries. Settings
 * come from poas_options first, then the environment, then defaults. */
#include "api/context.h"
#include "schedule/schedule.h"
#include "schedule/tasks.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void poas_options_init(poas_options *opts) {
  if (!opts)
    return;
  memset(opts, 0, sizeof *opts);
  opts->log_level = -1;
}

/* An option's value: the explicit one, else the environment's, else NULL.
 * An empty string is no value, in an option as in the environment (where
 * `POAS_DEVICES= prog` means the default): the two once differed, "" in
 * an option refusing the devices, or naming no trace file. */
static const char *setting(const char *explicit_value, const char *env_name) {
  if (explicit_value && *explicit_value)
    return explicit_value;
  const char *env = getenv(env_name);
  return env && *env ? env : NULL;
}

/* POAS_ADAPT: "0" turns learning from runs off, "1" leaves it on, as when
 * unset. Anything else is refused, as an unknown POAS_SCHED is: "off" or
 * "no" once left learning on without a word. */
static int parse_adapt(const char *text, int *off) {
  if (!text || strcmp(text, "1") == 0)
    *off = 0;
  else if (strcmp(text, "0") == 0)
    *off = 1;
  else
    return poas__fail(POAS_EINVAL, "POAS_ADAPT='%s': expected 0 (learning off) or 1 (on)",
                      text);
  return 0;
}

/* The scheduling policy, named in an error by where it came from: an
 * unknown POAS_SCHED once read as if the program had passed it, where
 * poas_init's doc says the detail names the variable. */
static int parse_policy(const char *text, const char *source, poas__policy *out) {
  if (poas__policy_parse(text, out) == 0)
    return 0;
  return poas__fail(POAS_EINVAL,
                    "unknown scheduling policy '%s' in %s (expected static, guided or dynamic)",
                    text, source);
}

/* Checks that the trace file can be written, so that a path that cannot
 * be fails poas_init, naming it, instead of every run that traces.
 * A file there is opened for writing but not truncated (a trace from an
 * earlier run stays until a run replaces it); a missing one is created
 * and removed again. O_NONBLOCK: a FIFO with no reader is refused instead
 * of waited on. */
static int check_trace(const char *path) {
  int fd = open(path, O_WRONLY | O_NONBLOCK | O_NOCTTY);
  if (fd < 0 && errno == ENOENT) {
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOCTTY, 0666);
    if (fd >= 0)
      unlink(path);
  }
  if (fd < 0)
    return poas__fail(POAS_EIO, "poas_init: cannot write the trace %s: %s", path,
                      strerror(errno));
  close(fd);
  return 0;
}

int poas_init(poas_context **out, const poas_options *opts) {
  poas__clear_detail();
  if (!out)
    return poas__fail(POAS_ENULL, "poas_init: ctx is NULL");
  poas_options defaults;
  poas_options_init(&defaults);
  if (!opts)
    opts = &defaults;
  poas__log_reread_env();
  /* Held before anything that may warn, so that init's own messages show. */
  int log_level = opts->log_level;
  if (log_level >= 0)
    poas__log_hold(log_level);

  poas_context *ctx = calloc(1, sizeof *ctx);
  if (!ctx) {
    int rc = poas__fail(POAS_ENOMEM, "poas_init: no memory for a context");
    if (log_level >= 0)
      poas__log_release(log_level);
    return rc;
  }
  ctx->log_level = log_level;
  poas__resident_init(ctx);
  pthread_mutex_init(&ctx->adapt_lock, NULL);
  pthread_mutex_init(&ctx->handoff_probe_lock, NULL);
  pthread_mutex_init(&ctx->report_lock, NULL);
  pthread_mutex_init(&ctx->buffers_lock, NULL);
  int adapt_env_off = 0;
  int rc = parse_adapt(setting(NULL, "POAS_ADAPT"), &adapt_env_off);
  if (rc)
    goto fail_ctx;
  ctx->adapt_off = opts->no_adapt || adapt_env_off;
  poas__adapt_reset(ctx, NULL);
  const char *sched = setting(opts->sched, "POAS_SCHED");
  if ((rc = parse_policy(sched ? sched : "guided",
                         sched == opts->sched ? "poas_options.sched" : "POAS_SCHED",
                         &ctx->sched)) != 0)
    goto fail_ctx;
  /* Each run reads POAS_FAULT again (a test may set it between GEMMs), but
   * a malformed one fails here, not at the first GEMM. */
  if ((rc = poas__fault_parse(setting(NULL, "POAS_FAULT"), NULL, NULL)) != 0)
    goto fail_ctx;
  const char *trace = setting(opts->trace, "POAS_TRACE");
  if (trace && (rc = check_trace(trace)) != 0)
    goto fail_ctx;
  if (trace && !(ctx->trace_path = strdup(trace))) {
    rc = poas__fail(POAS_ENOMEM, "poas_init: no memory for the trace's path");
    goto fail_ctx;
  }
  char err[512] = "";
  rc = poas__devset_open(setting(opts->devices, "POAS_DEVICES"), &ctx->devices, err, sizeof err);
  if (rc) {
    poas__fail(rc, "%s", err);
    goto fail_trace;
  }
  rc = poas__predict_attach(&ctx->devices, setting(opts->profile, "POAS_PROFILE"), opts->no_profile,
                            ctx->models, &ctx->profile);
  if (rc)
    goto fail_devices;
  for (int i = 0; i < ctx->devices.ndev; i++)
    ctx->devices.dev[i]->info.has_model = ctx->models[i].source == POAS__MODEL_CALIBRATED;
  ctx->host_cores = ctx->profile.replayed_host_cores ? ctx->profile.replayed_host_cores
                                                     : poas__host_usable_cores();
  *out = ctx;
  return 0;

fail_devices:
  poas__devset_close(&ctx->devices);
fail_trace:
  free(ctx->trace_path);
fail_ctx:
  poas__resident_release_all(ctx);
  pthread_mutex_destroy(&ctx->adapt_lock);
  pthread_mutex_destroy(&ctx->handoff_probe_lock);
  pthread_mutex_destroy(&ctx->report_lock);
  pthread_mutex_destroy(&ctx->buffers_lock);
  free(ctx);
  if (log_level >= 0)
    poas__log_release(log_level);
  return rc;
}

/* Forgets what runs taught of device i. */
static void forget_device(poas__taught *t, int i) {
  t->handoff_other[i] = 0;
  for (int dt = 0; dt < 2; dt++) {
    t->handoff_runs[i][dt] = 0;
    t->handoff_level[i][dt] = 1;
    t->handoff_learned[i][dt] = (poas__learned){0};
    for (int pair = 0; pair < 4; pair++) {
      t->adapt_one[i][dt][pair] = 1;
      t->learned_one[i][dt][pair] = (poas__learned){0};
    }
    t->adapt[i][dt] = 1;
    t->learned[i][dt] = (poas__learned){0};
    for (int c = 0; c < POAS__SHAPE_CLASSES; c++) {
      t->adapt_shape[i][dt][c] = 0;
      t->learned_shape[i][dt][c] = (poas__learned){0};
    }
  }
}

void poas__adapt_reset(poas_context *ctx, const int *only) {
  pthread_mutex_lock(&ctx->adapt_lock);
  ctx->kept_memo.valid = 0;
  for (int i = 0; i < POAS_MAX_DEVICES; i++)
    if (!only || (i < ctx->devices.ndev && only[i]))
      forget_device(&ctx->taught, i);
  pthread_mutex_unlock(&ctx->adapt_lock);
}

void poas_finalize(poas_context *ctx) {
  if (!ctx)
    return;
  /* From one of its own tasks it would wait for itself, then free what
   * that task runs on: refused, and the context stays open. */
  if (poas__tasks_in_task(ctx->tasks)) {
    poas__warn("poas_finalize called from one of the context's tasks: ignored (a task cannot "
               "close its own context)");
    return;
  }
  /* From poas_calibrate's progress callback it would free the devices
   * being measured under it. */
  if (ctx->calibrating) {
    poas__warn("poas_finalize called while poas_calibrate runs (from its progress callback): "
               "ignored");
    return;
  }
  poas__context_tasks_close(ctx);
  poas__resident_release_all(ctx);
  poas__devset_close(&ctx->devices);
  pthread_mutex_destroy(&ctx->adapt_lock);
  pthread_mutex_destroy(&ctx->handoff_probe_lock);
  pthread_mutex_destroy(&ctx->report_lock);
  pthread_mutex_destroy(&ctx->buffers_lock);
  free(ctx->trace_path);
  if (ctx->log_level >= 0)
    poas__log_release(ctx->log_level);
  free(ctx);
}

int poas_device_count(const poas_context *ctx) {
  poas__clear_detail();
  if (!ctx)
    return poas__fail(POAS_ENULL, "poas_device_count: ctx is NULL");
  return ctx->devices.ndev;
}

int poas_device_get(const poas_context *ctx, int index, poas_device_info *out) {
  poas__clear_detail();
  if (!ctx || !out)
    return poas__fail(POAS_ENULL, "poas_device_get: %s is NULL", ctx ? "out" : "ctx");
  if (index < 0 || index >= ctx->devices.ndev)
    return poas__fail(POAS_ERANGE, "poas_device_get: device %d out of range (0 to %d)", index,
                      ctx->devices.ndev - 1);
  *out = ctx->devices.dev[index]->info;
  return 0;
}

int poas_last_report(const poas_context *ctx, poas_report *out) {
  poas__clear_detail();
  if (!ctx || !out)
    return poas__fail(POAS_ENULL, "poas_last_report: %s is NULL", ctx ? "out" : "ctx");
  if (!poas__report_get(ctx, out)) /* which writes nothing then */
    return poas__fail(POAS_ESTATE, "poas_last_report: no GEMM has run on this context yet, or "
                                   "the last one failed");
  return 0;
}

void poas__report_set(poas_context *ctx, const poas_report *r) {
  pthread_mutex_lock(&ctx->report_lock);
  ctx->has_report = r != NULL;
  if (r)
    ctx->report = *r;
  pthread_mutex_unlock(&ctx->report_lock);
}

int poas__report_get(const poas_context *ctx, poas_report *out) {
  /* The lock is the context's own state, not what the caller sees. */
  pthread_mutex_t *lock = (pthread_mutex_t *)&ctx->report_lock;
  pthread_mutex_lock(lock);
  int has = ctx->has_report;
  if (has)
    *out = ctx->report;
  pthread_mutex_unlock(lock);
  return has;
}
