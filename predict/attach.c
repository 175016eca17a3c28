/* attach.c: choosing each device's model when a context opens.
 *
 * Every device starts from its built-in estimate. A sim device with
 * profile=FILE then takes the model of a device of that profile and has its
 * simulated times follow it (replay of a real machine). The machine's
 * profile, when present and readable, replaces the estimate of each real
 * device whose fingerprint it matches; a device that differs, or that the
 * profile does not cover, keeps its estimate and the status says which.
 * With no usable profile, POAS says once (when logging) to run
 * poas-calibrate. */
#include "devices/sim/sim.h"
#include "predict/predict.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* Copies the parts a profile device has over a model: each dtype with a
 * model (thin-block tables included), the transfers and the transpose
 * when measured, the memory, the contention, the two-way copy factor, the
 * per-call thread counts, the runtime's costs of a run (dispatch_s,
 * engine_s) and the hand-off probes. All of them: what is left out here,
 * plans and poas-info from a loaded profile never see (the contention and
 * the run costs once were left out, and only a context that had just
 * calibrated used them). */
static void overlay(poas__device_model *dst, const poas__device_model *src) {
  for (int dt = 0; dt < 2; dt++) {
    if (!src->gemm[dt][0].valid)
      continue;
    memcpy(dst->gemm[dt], src->gemm[dt], sizeof dst->gemm[dt]);
    dst->gemm_fit[dt] = src->gemm_fit[dt];
  }
  for (int dir = 0; dir < 2; dir++) {
    if (src->xfer[dir].valid)
      dst->xfer[dir] = src->xfer[dir];
    dst->xfer_pinned[dir] = src->xfer_pinned[dir];
  }
  for (int dt = 0; dt < 2; dt++)
    if (src->transpose[dt].valid)
      dst->transpose[dt] = src->transpose[dt];
  if (src->memory_bytes)
    dst->memory_bytes = src->memory_bytes;
  dst->contention = src->contention;
  dst->duplex = src->duplex;
  memcpy(dst->threads_by_side, src->threads_by_side, sizeof dst->threads_by_side);
  memcpy(dst->one_thread, src->one_thread, sizeof dst->one_thread);
  dst->dispatch_s = src->dispatch_s;
  dst->engine_s = src->engine_s;
  memcpy(dst->handoff, src->handoff, sizeof dst->handoff);
  dst->handoff_timings = src->handoff_timings;
  dst->handoff_slow = src->handoff_slow;
  memcpy(dst->handoff_extra, src->handoff_extra, sizeof dst->handoff_extra);
  memcpy(dst->handoff_latency_ns, src->handoff_latency_ns, sizeof dst->handoff_latency_ns);
  memcpy(dst->gemm_block, src->gemm_block, sizeof dst->gemm_block);
  dst->source = POAS__MODEL_CALIBRATED;
}

void poas__device_take_settings(poas__device *dev, poas__device_model *dm) {
  poas__threads_slow_table(dm);
  memcpy(dev->threads_by_side, dm->threads_by_side, sizeof dev->threads_by_side);
  memcpy(dev->threads_slow_by_side, dm->threads_slow, sizeof dev->threads_slow_by_side);
  /* The pieces its models were calibrated in (whole calls where the
   * profile has none, as it was written before calibration chose them). */
  if (dev->can_block)
    memcpy(dev->gemm_block, dm->gemm_block, sizeof dev->gemm_block);
}

/* The sim replay hook: times from the device's (profile) model. */
static double replay_time(void *user, const poas__gemm_call *g, const poas__transpose_call *t,
                          size_t copy_bytes, poas_direction dir) {
  const poas__device_model *dm = user;
  if (t)
    return poas__model_transpose_time(dm, t->dtype, (double)t->rows * (double)t->cols *
                                                        (double)poas__dtype_size(t->dtype));
  if (!g)
    return poas__model_transfer_time(dm, dir, (double)copy_bytes);
  return poas__model_gemm_time(dm, g->dtype, g->transa, g->transb, g->m, g->n, g->k);
}

/* sim:profile=FILE[#ID]: loads FILE and replays device ID (default: the
 * profile's first device) on `dev`. */
static int attach_replay(poas__device *dev, const char *spec, poas__device_model *model,
                         int *host_cores) {
  char file[POAS__SPEC_TOKEN];
  poas__strlcpy(file, spec, sizeof file);
  char *hash = strchr(file, '#');
  const char *want = NULL;
  if (hash) {
    *hash = '\0';
    want = hash + 1;
  }
  if (!file[0])
    return poas__fail(POAS_ESPEC, "%s: profile=%s names no file (expected FILE or FILE#ID)",
                      dev->info.id, spec);
  poas__profile *p = malloc(sizeof *p);
  if (!p)
    return poas__fail(POAS_ENOMEM, "%s: no memory to read the replay profile %s", dev->info.id,
                      file);
  int rc = poas__profile_load(file, p);
  if (rc == POAS_EIO)
    rc = poas__fail(POAS_EPROFILE, "%s: replay profile for %s: %s", file, dev->info.id,
                    strerror(errno));
  const poas__profile_device *pd = NULL;
  if (!rc) {
    pd = want ? poas__profile_find(p, want) : (p->ndev ? &p->dev[0] : NULL);
    if (!pd)
      rc = poas__fail(POAS_EPROFILE, "%s: no device '%s' to replay on %s", file,
                      want ? want : "(any)", dev->info.id);
  }
  if (!rc) {
    *host_cores = p->cores;
    overlay(model, &pd->model);
    poas__device_take_settings(dev, model);
    /* It declares what the replayed device declared: plans give a CPU's
     * replay no copies, as they gave the CPU none, and an OpenCL device's
     * replay the transposed B, padded blocks and tiles of its GEMM.
     * Allocations follow the sim's limit, which is the replayed device's
     * unless memory= set one. */
    poas__sim_replay_device(dev, &(poas__sim_replay){.memory = pd->model.memory_bytes,
                                                     .host_memory = pd->host_memory,
                                                     .shares_host_cores = pd->shares_host_cores,
                                                     .cores = pd->cores,
                                                     .dispatch_s = pd->model.dispatch_s,
                                                     .duplex = pd->model.duplex,
                                                     .contention = pd->model.contention,
                                                     .gemm = pd->gemm_decl});
    model->memory_bytes = dev->info.memory_bytes;
    /* The sim spends its own copy of the profile's models: the context's
     * are refitted when the replay is calibrated, and a replay then ran
     * what calibration fitted to it, not the device it replays. (Their
     * thin-block tables are interned: the copy shares them.) */
    poas__device_model *own = malloc(sizeof *own);
    if (own) {
      *own = *model;
      poas__sim_set_time_fn(dev, replay_time, own, free);
    } else {
      rc = poas__fail(POAS_ENOMEM, "%s: no memory for the models it replays", dev->info.id);
    }
  }
  if (!rc) {
    /* Its name says what it replays: the rate in the name its settings
     * gave is not what it runs at. */
    snprintf(dev->info.name, sizeof dev->info.name, "simulated %.*s (%.*s)",
             (int)sizeof pd->id - 1, pd->id,
             (int)(sizeof dev->info.name - sizeof "simulated  ()" - (sizeof pd->id - 1)),
             pd->name);
    poas__info("%s replays %s (%s) from %s", dev->info.id, pd->id, pd->name, file);
  }
  free(p);
  return rc;
}

static void append(char *buf, size_t cap, const char *text) {
  size_t n = strlen(buf);
  if (n + 2 < cap)
    snprintf(buf + n, cap - n, "%s%s", n ? "; " : "", text);
}

/* Says once per process, when logging, that calibration would help. */
static void suggest_calibration(const char *why) {
  static atomic_int said;
  if (poas__log_level() >= POAS__LOG_WARN && !atomic_exchange(&said, 1))
    poas__warn("%s; using rough built-in estimates: run poas-calibrate for accurate ones", why);
}

/* Applies a loaded profile to the real devices of the set. */
static void apply_profile(const poas__devset *set, const poas__profile *p,
                          poas__device_model models[], poas__profile_status *st) {
  int used = 0, missing = 0;
  for (int i = 0; i < set->ndev; i++) {
    const poas__device *dev = set->dev[i];
    if (dev->be == &poas__backend_sim)
      continue;
    const poas__profile_device *pd = poas__profile_find(p, dev->info.id);
    char why[400];
    if (!pd) {
      snprintf(why, sizeof why, "%s is not in the profile", dev->info.id);
      append(st->problem, sizeof st->problem, why);
      missing++;
    } else if (!poas__profile_device_matches(pd, &dev->info, why, sizeof why)) {
      append(st->problem, sizeof st->problem, why);
      poas__warn("%s: not using its model: %s", st->path, why);
      missing++;
    } else {
      overlay(&models[i], &pd->model);
      poas__device_take_settings(set->dev[i], &models[i]);
      used++;
    }
  }
  /* The host's fingerprint too (CPU model, cores, BLAS), as calibration
   * checks it before keeping a file's models: the devices that match keep
   * their models (a GPU's own are the GPU's), but the plans' copies and
   * contention were the other host's, and nothing said so. */
  poas__profile *here = calloc(1, sizeof *here);
  if (here) {
    char why[400];
    poas__profile_fingerprint_host(here);
    if (!poas__profile_same_machine(p, here, NULL, 0, why, sizeof why)) {
      char note[460];
      snprintf(note, sizeof note, "written on another host: %s", why);
      append(st->problem, sizeof st->problem, note);
      poas__warn("%s: %s; the models of the devices that match are used", st->path, note);
    }
    free(here);
  }
  st->loaded = used > 0;
  poas__strlcpy(st->created, p->created, sizeof st->created);
  st->age_s = difftime(time(NULL), (time_t)p->created_epoch);
  if (missing)
    suggest_calibration(st->problem);
}

int poas__predict_attach(const poas__devset *set, const char *profile_path, int no_profile,
                         poas__device_model models[], poas__profile_status *status) {
  memset(status, 0, sizeof *status);
  status->age_s = -1;
  /* Replays of one file plan with its host's cores: a pair that shared
   * 2 cores there, and could not compute together, can on no other host
   * either. Replays of several files, or beside other devices, plan with
   * this host's. */
  const char *file = NULL;
  size_t file_len = 0;
  int one_file = set->ndev > 0, cores = 0;
  for (int i = 0; i < set->ndev; i++) {
    poas__device *dev = set->dev[i];
    poas__predict_builtin(dev, &models[i]);
    poas__sim_params sp;
    if (poas__sim_get_params(dev, &sp) == 0 && sp.profile) {
      int rc = attach_replay(dev, sp.profile, &models[i], &cores);
      if (rc)
        return rc;
      size_t len = strcspn(sp.profile, "#");
      if (!file)
        file = sp.profile, file_len = len;
      one_file &= len == file_len && strncmp(sp.profile, file, len) == 0;
    } else {
      one_file = 0;
    }
  }
  if (one_file && cores > 0)
    status->replayed_host_cores = cores;
  int real = 0;
  for (int i = 0; i < set->ndev; i++)
    real += set->dev[i]->be != &poas__backend_sim;
  /* Simulated devices take no model from the profile, but one named for
   * them is still read, so that a wrong name is said, not passed over. */
  if (no_profile || (!real && !profile_path))
    return 0;
  if (profile_path && strlen(profile_path) >= sizeof status->path) {
    /* Not cut short: a shorter name may be another file. */
    snprintf(status->problem, sizeof status->problem,
             "the profile path is %zu bytes, past the system's %zu", strlen(profile_path),
             sizeof status->path - 1);
    poas__strlcpy(status->path, profile_path, sizeof status->path);
    suggest_calibration(status->problem);
    return 0;
  }
  if (profile_path)
    poas__strlcpy(status->path, profile_path, sizeof status->path);
  else if (poas__profile_default_path(status->path, sizeof status->path) != 0) {
    poas__strlcpy(status->problem, poas_error_detail(), sizeof status->problem);
    poas__clear_detail();
    suggest_calibration(status->problem);
    return 0;
  }
  /* A missing profile is the usual first run, not a fault worth a
   * warning of its own. */
  struct stat sb;
  if (stat(status->path, &sb) != 0 && errno == ENOENT) {
    snprintf(status->problem, sizeof status->problem, "no profile at %.480s", status->path);
    if (real)
      suggest_calibration(status->problem);
    return 0;
  }
  poas__profile *p = malloc(sizeof *p);
  if (!p)
    return poas__fail(POAS_ENOMEM, "no memory to read the profile %s", status->path);
  int rc = poas__profile_load(status->path, p);
  if (rc == 0)
    apply_profile(set, p, models, status);
  else
    poas__strlcpy(status->problem, poas_error_detail(), sizeof status->problem);
  if (rc == 0 && !real)
    poas__strlcpy(status->problem,
                  "every device selected is simulated, and a sim takes its model from its "
                  "settings or sim:profile=FILE",
                  sizeof status->problem);
  free(p);
  poas__clear_detail();
  if (rc && real)
    suggest_calibration(status->problem);
  /* The one failure that fails poas_init, whose detail the clearing above
   * took: the problem holds it. */
  return rc == POAS_ENOMEM ? poas__fail(rc, "%s", status->problem) : 0;
}
