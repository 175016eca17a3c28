/* test-profile.c: the profile file. A profile written and read back is
 * the same; every kind of bad file (corrupt, truncated, foreign version,
 * wrong types, NaN, negative or absurd numbers, missing or unknown fields,
 * and the inputs the fuzzer found) fails with POAS_EPROFILE and a message
 * naming the file and the problem, leaves the output untouched, and still
 * lets a context start on built-in models; a device whose fingerprint
 * differs is named and not given the profile's model. Writers of one
 * profile at once each keep to a temporary file of their own, and a write
 * that fails leaves none behind. */
#include "devices/device.h"
#include "harness.h"
#include "models/profile.h"

#include <cblas.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  char *buf = calloc(1, 1 << 20);
  if (buf)
    fread(buf, 1, (1 << 20) - 1, f);
  fclose(f);
  return buf;
}

static int write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  if (!f)
    return -1;
  fputs(text, f);
  return fclose(f);
}

/* Replaces every occurrence of `from` by `to` in place (to no longer). */
static void replace_all(char *s, const char *from, const char *to) {
  size_t lf = strlen(from), lt = strlen(to);
  for (char *p = strstr(s, from); p; p = strstr(p + lt, from)) {
    memmove(p + lt, p + lf, strlen(p + lf) + 1);
    memcpy(p, to, lt);
  }
}

static int gemm_equal(const poas__gemm_model *a, const poas__gemm_model *b) {
  if (a->valid != b->valid || a->fit.samples != b->fit.samples || a->fit.r2 != b->fit.r2 ||
      a->fit.heldout_median != b->fit.heldout_median ||
      a->fit.heldout_max != b->fit.heldout_max || a->fit.timing_noise != b->fit.timing_noise)
    return 0;
  for (int i = 0; i < POAS__GEMM_NFEAT; i++)
    if (a->coef[i] != b->coef[i])
      return 0;
  if (!a->thin != !b->thin)
    return 0;
  return !a->thin || memcmp(a->thin, b->thin, sizeof *a->thin) == 0;
}

static int xfer_equal(const poas__transfer_model *a, const poas__transfer_model *b) {
  return a->valid == b->valid && a->latency == b->latency && a->bandwidth == b->bandwidth &&
         a->knee_bytes == b->knee_bytes && a->bandwidth_beyond == b->bandwidth_beyond &&
         a->fit.samples == b->fit.samples && a->fit.r2 == b->fit.r2 &&
         a->fit.heldout_median == b->fit.heldout_median && a->fit.heldout_max == b->fit.heldout_max;
}

/* A profile with awkward numbers in every field. */
static void sample_profile(poas__profile *p) {
  memset(p, 0, sizeof *p);
  poas__profile_fingerprint_host(p);
  p->ndev = 2;
  for (int d = 0; d < 2; d++) {
    poas__profile_device *pd = &p->dev[d];
    snprintf(pd->id, sizeof pd->id, d ? "cuda0" : "cpu0");
    pd->kind = d ? POAS_DEVICE_CUDA : POAS_DEVICE_CPU;
    snprintf(pd->name, sizeof pd->name, d ? "Some \"GPU\"\\ model" : "Some CPU");
    snprintf(pd->driver, sizeof pd->driver, "driver %d", d);
    pd->cores = 2 + 100 * d;
    pd->memory_bytes = ((uint64_t)3 << 33) + (uint64_t)d;
    /* The GPU's are not what its kind implies: read from the file. */
    pd->host_memory = !d;
    pd->shares_host_cores = 1;
    /* Written where declared (not 0): the CPU's none, the other's all,
     * one of them the largest count there is. */
    if (d)
      pd->gemm_decl = (poas__gemm_decl){1, 32, ((uint64_t)1 << 26) + 3, (uint64_t)3 << 31,
                                        INT32_MAX, 128, 64, INT64_MAX};
    poas__device_model *m = &pd->model;
    m->source = POAS__MODEL_CALIBRATED;
    m->memory_bytes = (uint64_t)5 << 32;
    for (int dt = 0; dt < 2; dt++) {
      /* Timing noise on one dtype: a profile may lack it (0, not written). */
      m->gemm_fit[dt] = (poas__fit_stats){40 + dt, 0.987654321, 0.0123456789, 0.1, dt ? 0 : 0.0271};
      for (int pair = 0; pair < 4 - 2 * d; pair++) {
        poas__gemm_model *g = &m->gemm[dt][pair];
        poas__gemm_model_from_rate(g, 1e11 / 3 * (dt + 1) + pair, 1.0 / 7e5);
        g->coef[3] = 1e-11 / 3;
        g->coef[7] = 2.5e-13;
        g->fit = (poas__fit_stats){10 + pair, 0.9 + pair / 100.0, 0.01 / 3, 0.1 / 7,
                                   pair == 1 ? 0 : 0.01 / 7};
        /* A thin-block table on some pairs, written only when measured, of
         * factors that four significant digits hold exactly. */
        static poas__thin_table thin[2];
        for (int side = 0; side < 2; side++)
          for (int i = 0; i < POAS__THIN_MAX; i++)
            thin[dt].factor[side][i] = 0.5 + (double)((i * 7 + side + dt) % 16) / 8;
        g->thin = pair % 2 == dt ? &thin[dt] : NULL;
      }
    }
    if (d)
      for (int dir = 0; dir < 2; dir++) {
        /* A knee on host-to-device copies only: written only when found. */
        m->xfer[dir] = (poas__transfer_model){.valid = 1, .latency = 1e-5 / 3,
                                              .bandwidth = 1.2e10 + dir,
                                              .knee_bytes = dir ? 0 : 64.0 * 1048576 + 1,
                                              .bandwidth_beyond = dir ? 0 : 1e10 / 3,
                                              .fit = {12, 0.999, 0.001, 0.01}};
        m->xfer_pinned[dir] = (poas__transfer_model){
            .valid = 1, .latency = 7e-6, .bandwidth = 2.4e10 / 7, .fit = {12, 0.9, 0.002, 0.02}};
      }
    /* Written only when measured. */
    if (d)
      for (int dt = 0; dt < 2; dt++)
        m->transpose[dt] = (poas__transfer_model){.valid = 1, .latency = 3e-5 / (7 + dt),
                                                  .bandwidth = 8e9 / (3 + dt),
                                                  .fit = {10, 0.99, 0.01, 0.03}};
    /* Written only when measured (> 1); read back as 1 otherwise. */
    m->contention = d ? 1.0 + 1.0 / 7 : 1;
    m->duplex = d ? 1.0 + 1.0 / 3 : 1;
    /* Written only where set; sgemm of 4 and 12 columns and dgemm of 6
     * rows on one thread. */
    memset(m->threads_by_side, 0, sizeof m->threads_by_side);
    if (!d) {
      m->threads_by_side[0][1][4] = m->threads_by_side[0][1][12] = 1;
      m->threads_by_side[1][1][32] = 3;
      m->threads_by_side[1][0][6] = 1;
    }
    /* Written only when measured (> 0); read back as 0 otherwise. */
    m->dispatch_s = d ? 4.7e-5 / 3 : 0;
    m->engine_s = d ? 4.5e-4 / 7 : 0;
    /* Written only when both were measured. */
    m->handoff[0] = d ? 0.0 : 0.8 + 1.0 / 7;
    m->handoff[1] = d ? 0.0 : 2.5 + 1.0 / 3;
    m->handoff_timings = d ? 0 : 1980;
    m->handoff_slow = d ? 0 : 237;
    m->handoff_extra[0] = d ? 0 : 1e-9 / 3; /* dgemm's left out */
    m->handoff_latency_ns[0] = d ? 0 : 57.0 + 1.0 / 3;
    m->handoff_latency_ns[1] = d ? 0 : 310.0 + 1.0 / 7;
    /* Written only where calibration chose pieces; dgemm's whole. */
    m->gemm_block[0] = d ? 0 : 512;
    m->gemm_block[1] = 0;
    /* Written with four significant digits: numbers read from such text
     * come back exactly. sgemm's only (a dtype is written when all its
     * entries were measured). */
    memset(m->one_thread, 0, sizeof m->one_thread);
    for (int side = 0; !d && side < 2; side++)
      for (int s = 1; s <= POAS__FEW_SIDE; s++) {
        char text[32];
        snprintf(text, sizeof text, "%.4g", (1 + (s + 8 * side) / 7.0) * 1e-10);
        m->one_thread[0][side][s] = strtod(text, NULL);
      }
  }
}

TEST(round_trip_is_exact) {
  poas__profile *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
  CHECK(a && b);
  sample_profile(a);
  const char *path = test_tmp_path("sub/dir/round.json");
  CHECK_OK(poas__profile_write(path, a));
  CHECK_OK(poas__profile_load(path, b));
  CHECK(strcmp(a->host, b->host) == 0 && strcmp(a->created, b->created) == 0);
  CHECK(a->created_epoch == b->created_epoch && a->cores == b->cores);
  CHECK(strcmp(a->cpu_model, b->cpu_model) == 0 && strcmp(a->blas, b->blas) == 0);
  CHECK(a->ndev == b->ndev);
  for (int d = 0; d < a->ndev; d++) {
    const poas__profile_device *x = &a->dev[d], *y = &b->dev[d];
    CHECK(strcmp(x->id, y->id) == 0 && x->kind == y->kind && strcmp(x->name, y->name) == 0);
    CHECK(strcmp(x->driver, y->driver) == 0 && x->cores == y->cores);
    CHECK(x->host_memory == y->host_memory && x->shares_host_cores == y->shares_host_cores);
    CHECK(memcmp(&x->gemm_decl, &y->gemm_decl, sizeof x->gemm_decl) == 0);
    CHECK(x->memory_bytes == y->memory_bytes && x->model.memory_bytes == y->model.memory_bytes);
    CHECK(y->model.source == POAS__MODEL_CALIBRATED);
    for (int dt = 0; dt < 2; dt++) {
      CHECK(memcmp(&x->model.gemm_fit[dt], &y->model.gemm_fit[dt], sizeof(poas__fit_stats)) ==
            0);
      for (int pair = 0; pair < 4; pair++)
        CHECK(gemm_equal(&x->model.gemm[dt][pair], &y->model.gemm[dt][pair]));
    }
    for (int dir = 0; dir < 2; dir++) {
      CHECK(xfer_equal(&x->model.xfer[dir], &y->model.xfer[dir]));
      CHECK(xfer_equal(&x->model.xfer_pinned[dir], &y->model.xfer_pinned[dir]));
    }
    for (int dt = 0; dt < 2; dt++)
      CHECK(xfer_equal(&x->model.transpose[dt], &y->model.transpose[dt]));
    CHECK(x->model.contention == y->model.contention);
    CHECK(x->model.duplex == y->model.duplex);
    CHECK(memcmp(x->model.threads_by_side, y->model.threads_by_side,
                 sizeof x->model.threads_by_side) == 0);
    CHECK(x->model.dispatch_s == y->model.dispatch_s);
    CHECK(x->model.engine_s == y->model.engine_s);
    CHECK(x->model.handoff[0] == y->model.handoff[0] && x->model.handoff[1] == y->model.handoff[1]);
    CHECK(x->model.handoff_timings == y->model.handoff_timings &&
          x->model.handoff_slow == y->model.handoff_slow);
    CHECK(x->model.handoff_extra[0] == y->model.handoff_extra[0] &&
          x->model.handoff_extra[1] == y->model.handoff_extra[1]);
    CHECK(memcmp(x->model.handoff_latency_ns, y->model.handoff_latency_ns,
                 sizeof x->model.handoff_latency_ns) == 0);
    CHECK(memcmp(x->model.one_thread, y->model.one_thread, sizeof x->model.one_thread) == 0);
    CHECK(memcmp(x->model.gemm_block, y->model.gemm_block, sizeof x->model.gemm_block) == 0);
  }
  /* Written again, the file is byte for byte the same. */
  const char *again = test_tmp_path("again.json");
  char *t1 = read_text(test_tmp_path("sub/dir/round.json"));
  CHECK_OK(poas__profile_write(again, b));
  char *t2 = read_text(again);
  CHECK(t1 && t2 && strcmp(t1, t2) == 0);
  free(t1);
  free(t2);
  free(a);
  free(b);
  return 0;
}

static const struct {
  const char *file;
  const char *problem; /* a word the message must contain */
} bad_files[] = {
    {"bad-corrupt.json", "not valid JSON"},
    {"bad-truncated.json", "not valid JSON"},
    {"bad-empty.json", "the file is empty"},
    {"bad-version.json", "version 2"},
    {"bad-format.json", "not a POAS profile"},
    {"bad-type-cores.json", "fingerprint.cores' should be an integer"},
    {"bad-type-coef.json", "coef' should be an array"},
    {"bad-type-devices.json", "'devices' should be an array"},
    {"bad-nan.json", "not valid JSON"},
    {"bad-negative-bandwidth.json", "bandwidth' is -5e+09"},
    {"bad-negative-rate.json", "coef[1]' is -1e-12, outside [0, 1]"},
    {"bad-absurd-latency.json", "latency' is 1e+06"},
    {"bad-overflow.json", "not valid JSON"},
    {"bad-absurd-memory.json", "memory_bytes' is"},
    {"bad-missing-nn.json", "missing field 'devices[0].gemm.s.NN'"},
    {"bad-missing-fingerprint.json", "missing field 'fingerprint'"},
    {"bad-missing-samples.json", "missing field 'devices[0].gemm.s.NN.samples'"},
    {"bad-short-coef.json", "has 5 numbers"},
    {"bad-unknown-field.json", "unknown field 'devices[0].gemm.s.NN.speed'"},
    {"bad-device-count.json", "'devices' has 2 entries"},
    {"bad-duplicate-key.json", "not valid JSON"},
    {"bad-toplevel-array.json", "top level should be an object"},
    {"bad-features.json", "features"},
    {"bad-heldout-order.json", "heldout_max is below"},
    {"bad-timing-noise.json", "'devices[0].gemm.s.TN.timing_noise' is -0.02, outside [0, 100]"},
    {"bad-negative-dispatch.json", "dispatch_s"},
    {"bad-handoff.json", "'devices[0].handoff_end' is -2, outside"},
    {"bad-handoff-sweep.json", "'devices[0].handoff_slow_timings' is 401, outside [0, 400]"},
    {"bad-handoff-pair.json", "missing field 'devices[0].handoff_slow_timings'"},
    {"bad-handoff-extra.json", "'devices[0].handoff_extra.s' is -1e-09, outside [0, 1e-06]"},
    {"bad-handoff-extra-key.json", "unknown field 'devices[0].handoff_extra.x'"},
    {"bad-handoff-latency.json", "'devices[0].handoff_latency_ns.slow' is -5, outside [1, 1e+07]"},
    {"bad-handoff-latency-key.json", "unknown field 'devices[0].handoff_latency_ns.fast'"},
    {"bad-threads-one.json", "'devices[0].threads_one.s.rows' has 2 numbers, expected 32"},
    {"bad-gemm-block.json", "'devices[0].gemm_block.s' is 48, not a multiple of 32"},
    {"bad-gemm-block-range.json", "'devices[0].gemm_block.d' is 9000, outside [0, 8192]"},
    {"bad-gemm-block-key.json", "unknown field 'devices[0].gemm_block.h'"},
    {"bad-gemm-declares-key.json", "unknown field 'fingerprint.devices[0].gemm_declares.tiles'"},
    {"bad-gemm-declares-range.json",
     "'fingerprint.devices[0].gemm_declares.align' is 9000, outside [0, 8192]"},
    {"bad-gemm-declares-flag.json",
     "'fingerprint.devices[0].gemm_declares.wants_bt' should be true or false, not a number"},
    {"bad-knee-alone.json", "needs knee_bytes and bandwidth_beyond together"},
    {"bad-knee-rate.json", "bandwidth_beyond' is -1"},
    {"bad-transpose-rate.json", "transpose.bandwidth' is 0"},
    {"bad-transpose-s.json", "'devices[0].transpose_s.latency' is -1e-05"},
    {"bad-duplex.json", "duplex"},
    {"bad-host-memory.json",
     "field 'fingerprint.devices[0].host_memory' should be true or false, not a number"},
    {"bad-threads-cols.json", "'devices[0].threads_by_cols.s' lists '33', not a column count"},
    {"bad-threads-count.json", "threads_by_cols.d.12' is 0, outside [1, 255]"},
    {"bad-threads-rows.json", "'devices[0].threads_by_rows.d' lists '0', not a row count"},
    /* Found by the fuzzer: a transfer section read past the end of its
     * list of known keys. */
    {"fuzz-crash-transfer-keys.json", "latency' is 1e+06"},
    {"bad-thin-length.json", "thin.cols' has 3 numbers, expected 256"},
    {"bad-thin-range.json", "thin.rows' number 6 is 0.001, outside"},
    {"bad-thin-text.json", "thin.cols' holds '1.5x', not a number"},
    {"bad-thin-side.json", "unknown field 'devices[0].gemm.s.NN.thin.diagonal'"},
};

TEST(bad_profiles_fail_with_file_and_problem) {
  poas__profile *p = malloc(sizeof *p), *before = malloc(sizeof *before);
  CHECK(p && before);
  memset(p, 0xab, sizeof *p);
  memcpy(before, p, sizeof *p);
  for (size_t i = 0; i < sizeof bad_files / sizeof *bad_files; i++) {
    char rel[128];
    snprintf(rel, sizeof rel, "tests/profiles/%s", bad_files[i].file);
    const char *path = test_src_path(rel);
    CHECK_RC(poas__profile_load(path, p), POAS_EPROFILE);
    const char *detail = poas_error_detail();
    CHECK_MSG(strncmp(detail, path, strlen(path)) == 0, "%s: '%s'", bad_files[i].file, detail);
    CHECK_MSG(strstr(detail, bad_files[i].problem) != NULL, "%s: '%s' lacks '%s'",
              bad_files[i].file, detail, bad_files[i].problem);
    CHECK_MSG(memcmp(p, before, sizeof *p) == 0, "%s: output written", bad_files[i].file);

    /* The context starts anyway, on built-in models, and says why. */
    poas_options o;
    poas_options_init(&o);
    o.devices = "cpu";
    o.profile = path;
    poas_context *ctx = NULL;
    CHECK_OK(poas_init(&ctx, &o));
    poas_device_info info;
    CHECK_OK(poas_device_get(ctx, 0, &info));
    CHECK(!info.has_model);
    poas_profile_info pi;
    CHECK_OK(poas_profile_get(ctx, &pi));
    CHECK(!pi.loaded && pi.age_s == -1 && strstr(pi.problem, bad_files[i].file));
    double t;
    CHECK_OK(poas_predict_gemm(ctx, 0, POAS_FLOAT64, POAS_NO_TRANS, POAS_NO_TRANS, 100, 100, 100,
                               &t));
    CHECK(t > 0);
    poas_finalize(ctx);
  }
  free(before);
  free(p);
  return 0;
}

TEST(good_file_loads_and_missing_file_is_eio) {
  static const char *const good[] = {"tests/profiles/good-sim.json"};
  poas__profile *p = malloc(sizeof *p);
  CHECK(p);
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
    CHECK_OK(poas__profile_load(test_src_path(good[i]), p));
    CHECK(p->ndev == 1 && p->dev[0].model.xfer[0].valid && p->dev[0].model.gemm[1][3].valid);
  }
  /* The reference profiles that sim devices replay: every device has a
   * model for each dtype and transpose pair, and a device with its own
   * memory has both transfer models. */
  static const char *const reference[] = {
      "models/profiles/amd-epyc-2c.json",
      "models/profiles/amd-epyc-2c-cpu1-opencl1.json",
      "models/profiles/intel-xeon-2c.json",
      "models/profiles/intel-xeon-2c-cpu1-opencl1.json",
      "models/profiles/intel-xeon-2c-cpu1-opencl1-block512.json",
      "models/profiles/nvidia-h100-80gb-16c.json"};
  for (size_t i = 0; i < sizeof reference / sizeof *reference; i++) {
    CHECK_MSG(poas__profile_load(test_src_path(reference[i]), p) == 0, "%s: %s", reference[i],
              poas_error_detail());
    for (int d = 0; d < p->ndev; d++) {
      const poas__device_model *m = &p->dev[d].model;
      for (int dt = 0; dt < 2; dt++)
        for (int pair = 0; pair < 4; pair++)
          CHECK(m->gemm[dt][pair].valid);
      if (p->dev[d].kind == POAS_DEVICE_CUDA)
        CHECK(m->xfer[0].valid && m->xfer[1].valid);
    }
  }
  /* Written before profiles said what a device declared, it is what its
   * kind's backend always declares, and unknown where that varies (an
   * OpenCL device shares the host's cores where it is a CPU device). */
  CHECK_OK(poas__profile_load(test_src_path("models/profiles/nvidia-h100-80gb-16c.json"), p));
  CHECK(p->dev[0].kind == POAS_DEVICE_CPU && p->dev[0].host_memory == 1 &&
        p->dev[0].shares_host_cores == 1);
  CHECK(p->dev[1].kind == POAS_DEVICE_CUDA && p->dev[1].host_memory == 0 &&
        p->dev[1].shares_host_cores == 0);
  CHECK_OK(poas__profile_load(test_src_path(good[0]), p));
  CHECK(p->dev[0].host_memory == -1 && p->dev[0].shares_host_cores == -1);
  CHECK_RC(poas__profile_load(test_tmp_path("does-not-exist.json"), p), POAS_EIO);
  CHECK(strstr(poas_error_detail(), "does-not-exist.json"));
  /* A FIFO that nothing writes is read as empty, not waited on for ever
   * (the alarm ends a test that waits). */
  const char *fifo = test_tmp_path("nobody-writes.json");
  CHECK(mkfifo(fifo, 0600) == 0);
  alarm(20);
  CHECK_RC(poas__profile_load(fifo, p), POAS_EPROFILE);
  alarm(0);
  CHECK_MSG(strstr(poas_error_detail(), "the file is empty"), "%s", poas_error_detail());
  unlink(fifo);
  /* A file past the limit is read only to one byte beyond it: the message
   * once gave that count (4194305 bytes) as the size of a 5 MiB file. */
  const char *big = test_tmp_path("too-large.json");
  FILE *bf = fopen(big, "w");
  CHECK(bf && fseek(bf, 5 << 20, SEEK_SET) == 0 && fputc(' ', bf) == ' ' && fclose(bf) == 0);
  CHECK_RC(poas__profile_load(big, p), POAS_EPROFILE);
  CHECK_MSG(strstr(poas_error_detail(), "larger than the 4194304 bytes a profile may hold") &&
                !strstr(poas_error_detail(), "4194305"),
            "%s", poas_error_detail());
  unlink(big);
  CHECK_RC(poas__profile_parse("{}", 2, "<mem>", p), POAS_EPROFILE);
  CHECK(strcmp(poas_error_detail(), "<mem>: missing field 'format'") == 0);
  free(p);
  return 0;
}

/* Writes a profile describing this machine's cpu0 with a known model. */
static int write_cpu_profile(const char *path, double rate) {
  poas__devset set;
  char err[256];
  if (poas__devset_open("cpu", &set, err, sizeof err))
    return -1;
  poas__profile *p = calloc(1, sizeof *p);
  poas__profile_fingerprint_host(p);
  p->ndev = 1;
  poas__profile_device_identify(&p->dev[0], &set.dev[0]->info, &(poas__gemm_decl){0});
  poas__devset_close(&set);
  poas__device_model *m = &p->dev[0].model;
  m->source = POAS__MODEL_CALIBRATED;
  m->memory_bytes = 1 << 30;
  for (int dt = 0; dt < 2; dt++) {
    for (int pair = 0; pair < 4; pair++)
      poas__gemm_model_from_rate(&m->gemm[dt][pair], rate / (dt + 1), 1e-6);
    m->gemm_fit[dt] = (poas__fit_stats){30, 0.99, 0.02, 0.05, 0};
  }
  m->threads_by_side[POAS_FLOAT32][1][12] = 1; /* as calibration finds on the CI machine */
  m->threads_by_side[POAS_FLOAT32][0][6] = 1;
  int rc = poas__profile_write(path, p);
  free(p);
  return rc;
}

static poas_context *open_with_profile(const char *devices, const char *path) {
  poas_options o;
  poas_options_init(&o);
  o.devices = devices;
  o.profile = path;
  poas_context *ctx = NULL;
  return poas_init(&ctx, &o) == 0 ? ctx : NULL;
}

TEST(matching_profile_is_used) {
  const char *path = test_tmp_path("cpu.json");
  CHECK_OK(write_cpu_profile(path, 3e10));
  poas_context *ctx = open_with_profile("cpu,sim", path);
  CHECK(ctx);
  poas_device_info info;
  CHECK_OK(poas_device_get(ctx, 0, &info));
  CHECK(info.has_model);
  CHECK_OK(poas_device_get(ctx, 1, &info));
  CHECK(!info.has_model); /* sim devices keep their exact model */
  poas_profile_info pi;
  CHECK_OK(poas_profile_get(ctx, &pi));
  CHECK(pi.loaded && pi.problem[0] == '\0' && pi.age_s >= 0 && pi.age_s < 600);
  CHECK(strcmp(pi.path, path) == 0 && pi.created[0]);
  CHECK(pi.dev[0].calibrated && pi.dev[0].gemm[1].samples == 30 && !pi.dev[1].calibrated);
  double t;
  CHECK_OK(poas_predict_gemm(ctx, 0, POAS_FLOAT32, POAS_TRANS, POAS_NO_TRANS, 1000, 1000, 1000,
                             &t));
  CHECK(fabs(t - (1e-6 + 2e9 / 3e10)) < 1e-12);
  poas_finalize(ctx);
  return 0;
}

/* The profile's per-call thread counts reach the device: an sgemm whose C
 * has 12 columns runs on one thread, one of 13 on all (OpenBLAS's count
 * after the call is the one it ran on). */
TEST(a_profiles_thread_counts_reach_the_device) {
  const char *path = test_tmp_path("cpu-threads.json");
  CHECK_OK(write_cpu_profile(path, 3e10));
  poas_context *ctx = open_with_profile("cpu", path);
  CHECK(ctx);
  poas_device_info info;
  CHECK_OK(poas_device_get(ctx, 0, &info));
  if (info.cores < 2) {
    poas_finalize(ctx);
    SKIP("one core: the device has no thread count to choose");
  }
  static float a[64 * 48], b[48 * 13], c[64 * 13];
  for (int i = 0; i < 64 * 48; i++)
    a[i] = 1;
  for (int i = 0; i < 48 * 13; i++)
    b[i] = 1;
  /* C of 12 columns and of 6 rows run on one thread, 13 columns and 7
   * rows on all (the profile lists 12 columns and 6 rows). */
  static const struct {
    int m, n, one;
  } calls[] = {{64, 12, 1}, {64, 13, 0}, {6, 13, 1}, {7, 13, 0}};
  for (size_t i = 0; i < sizeof calls / sizeof *calls; i++) {
    int m = calls[i].m, n = calls[i].n, want = calls[i].one ? 1 : info.cores;
    c[0] = c[m * n - 1] = -1;
    CHECK_OK(poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, m, n, 48, 1, a, m, b,
                        48, 0, c, m));
    CHECK_MSG(openblas_get_num_threads() == want, "%d x %d: %d threads, not %d", m, n,
              openblas_get_num_threads(), want);
    CHECK(c[0] == 48 && c[m * n - 1] == 48);
  }
  poas_finalize(ctx);
  return 0;
}

TEST(fingerprint_mismatch_names_the_device) {
  const char *path = test_tmp_path("edited.json");
  CHECK_OK(write_cpu_profile(path, 3e10));
  poas__profile *p = malloc(sizeof *p);
  CHECK(p);
  CHECK_OK(poas__profile_load(path, p));
  char name[sizeof p->dev[0].name + 2];
  snprintf(name, sizeof name, "\"%s\"", p->dev[0].name);
  free(p);
  /* Hand-edit the device name everywhere it appears. */
  char *text = read_text(path);
  CHECK(text);
  replace_all(text, name, "\"Imaginary CPU 9000\"");
  CHECK(write_text(path, text) == 0);
  free(text);
  poas_context *ctx = open_with_profile("cpu", path);
  CHECK(ctx);
  poas_device_info info;
  CHECK_OK(poas_device_get(ctx, 0, &info));
  CHECK(!info.has_model);
  poas_profile_info pi;
  CHECK_OK(poas_profile_get(ctx, &pi));
  CHECK(!pi.loaded);
  CHECK_MSG(strstr(pi.problem, "cpu0") && strstr(pi.problem, "Imaginary CPU 9000"), "'%s'",
            pi.problem);
  poas_finalize(ctx);

  /* A device the profile does not have is named too. */
  CHECK_OK(write_cpu_profile(path, 3e10));
  text = read_text(path);
  replace_all(text, "\"cpu0\"", "\"cpu7\"");
  CHECK(write_text(path, text) == 0);
  free(text);
  ctx = open_with_profile("cpu", path);
  CHECK(ctx);
  CHECK_OK(poas_profile_get(ctx, &pi));
  CHECK(!pi.loaded && strstr(pi.problem, "cpu0 is not in the profile"));
  poas_finalize(ctx);
  return 0;
}

/* A sim's fingerprint holds every setting that changes what calibration
 * measures: a profile entry of a sim set otherwise is not this one, and
 * the difference shows the setting. It once held the sgemm rate alone (in
 * the name), and a sim of another drate took the old dgemm models. The
 * default sim's name and driver stay what tables and profiles show. */
TEST(a_sims_fingerprint_holds_its_settings) {
  static const char *const settings[] = {"drate=4e10", "latency=2e-5", "bandwidth=1.5e10",
                                         "slowdown=2", "shared=1", "roundtrip=80", "jitter=0.1",
                                         "memory=8Gi", "rate=1.00001e11",
                                         "profile=a b.json#cuda0"};
  poas__devset set;
  char err[256], spec[256], why[400];
  CHECK_OK(poas__devset_open("sim", &set, err, sizeof err));
  CHECK(strcmp(set.dev[0]->info.name, "simulated device 0 (1e+11 flop/s)") == 0);
  CHECK(strcmp(set.dev[0]->info.driver, "sim") == 0);
  poas__profile_device *plain = calloc(1, sizeof *plain);
  CHECK(plain);
  poas__profile_device_identify(plain, &set.dev[0]->info, &(poas__gemm_decl){0});
  poas__devset_close(&set);
  for (size_t i = 0; i < sizeof settings / sizeof *settings; i++) {
    snprintf(spec, sizeof spec, "sim:%s", settings[i]);
    CHECK_MSG(poas__devset_open(spec, &set, err, sizeof err) == 0, "%s: %s", spec, err);
    const poas_device_info *info = &set.dev[0]->info;
    int same = poas__profile_device_matches(plain, info, why, sizeof why);
    char key[32];
    snprintf(key, sizeof key, "%.*s", (int)strcspn(settings[i], "="), settings[i]);
    CHECK_MSG(!same && strstr(why, "sim0 ") && strstr(why, key) &&
                  strstr(why, "in the profile"),
              "%s: %s", spec, same ? "matches" : why);
    poas__devset_close(&set);
  }
  /* Settings that make the same device give the same fingerprint, and
   * values are said as read back, to the last digit. */
  CHECK_OK(poas__devset_open("sim:rate=2e11:drate=1e11:latency=3.0000001e-5", &set, err,
                             sizeof err));
  poas__profile_device_identify(plain, &set.dev[0]->info, &(poas__gemm_decl){0});
  poas__devset_close(&set);
  CHECK_OK(poas__devset_open("sim:rate=2e11:latency=3.0000001e-5", &set, err, sizeof err));
  CHECK_MSG(poas__profile_device_matches(plain, &set.dev[0]->info, why, sizeof why), "%s", why);
  poas__devset_close(&set);
  CHECK_OK(poas__devset_open("sim:rate=2e11:latency=3.0000002e-5", &set, err, sizeof err));
  CHECK(!poas__profile_device_matches(plain, &set.dev[0]->info, why, sizeof why));
  CHECK_MSG(strcmp(why, "sim0 has driver 'sim rate=2e+11 latency=3.0000002e-05' here but 'sim "
                        "rate=2e+11 latency=3.0000001e-05' in the profile") == 0,
            "%s", why);
  poas__devset_close(&set);
  free(plain);
  return 0;
}

TEST(default_path_follows_environment) {
  char buf[512], host[128];
  gethostname(host, sizeof host);
  host[sizeof host - 1] = '\0';
  char want[700];
  setenv("POAS_PROFILE", "/x/y.json", 1);
  CHECK_OK(poas_default_profile_path(buf, sizeof buf));
  CHECK(strcmp(buf, "/x/y.json") == 0);
  unsetenv("POAS_PROFILE");
  setenv("XDG_DATA_HOME", "/data", 1);
  CHECK_OK(poas_default_profile_path(buf, sizeof buf));
  snprintf(want, sizeof want, "/data/poas/%s.json", host);
  CHECK(strcmp(buf, want) == 0);
  unsetenv("XDG_DATA_HOME");
  setenv("HOME", "/home/someone", 1);
  CHECK_OK(poas_default_profile_path(buf, sizeof buf));
  snprintf(want, sizeof want, "/home/someone/.local/share/poas/%s.json", host);
  CHECK(strcmp(buf, want) == 0);
  /* A relative XDG_DATA_HOME is invalid (the XDG spec) and ignored. */
  setenv("XDG_DATA_HOME", "data", 1);
  CHECK_OK(poas_default_profile_path(buf, sizeof buf));
  CHECK(strcmp(buf, want) == 0);
  unsetenv("XDG_DATA_HOME");
  CHECK_RC(poas_default_profile_path(buf, 8), POAS_EINVAL);
  CHECK_RC(poas_default_profile_path(NULL, 8), POAS_ENULL);
  /* With no HOME either there is no path: POAS_EPROFILE, as poas.h says,
   * and buf as it was. */
  unsetenv("HOME");
  memset(buf, 'z', sizeof buf);
  CHECK_RC(poas_default_profile_path(buf, sizeof buf), POAS_EPROFILE);
  CHECK(buf[0] == 'z' && buf[sizeof buf - 1] == 'z');
  setenv("HOME", "/home/someone", 1);
  /* No profile there: built-in estimates, and the status says so. */
  poas_context *ctx = open_with_profile("cpu", NULL);
  CHECK(ctx);
  poas_profile_info pi;
  CHECK_OK(poas_profile_get(ctx, &pi));
  CHECK(!pi.loaded && strcmp(pi.path, want) == 0 && strstr(pi.problem, "no profile at"));
  poas_finalize(ctx);
  return 0;
}

/* Simulated devices take no model from a profile, but one named for them
 * is read: the status says it is unused, or why it cannot be read (it
 * once said nothing, the path left empty). Unnamed, none is looked for. */
TEST(a_profile_named_for_simulated_devices_is_read) {
  const char *path = test_tmp_path("for-sims.json");
  CHECK_OK(write_cpu_profile(path, 3e10));
  poas_profile_info pi;
  poas_context *ctx = open_with_profile("sim,sim", path);
  CHECK(ctx);
  CHECK_OK(poas_profile_get(ctx, &pi));
  CHECK(!pi.loaded && pi.created[0] && strcmp(pi.path, path) == 0);
  CHECK_MSG(strstr(pi.problem, "every device selected is simulated"), "'%s'", pi.problem);
  poas_finalize(ctx);
  ctx = open_with_profile("sim", "/nonexistent/p.json");
  CHECK(ctx);
  CHECK_OK(poas_profile_get(ctx, &pi));
  CHECK(!pi.loaded && !pi.created[0] && strstr(pi.problem, "no profile at /nonexistent/p.json"));
  poas_finalize(ctx);
  unsetenv("POAS_PROFILE");
  ctx = open_with_profile("sim", NULL);
  CHECK(ctx);
  CHECK_OK(poas_profile_get(ctx, &pi));
  CHECK(!pi.path[0] && !pi.problem[0]);
  poas_finalize(ctx);
  return 0;
}

/* A profile path longer than poas_profile_info's 512 bytes is loaded
 * whole (it was once cut short, and a missing shorter name reported); one
 * longer than the system allows is refused, not cut; so is a
 * POAS_PROFILE too long for the caller's buffer. */
TEST(long_profile_paths_are_used_whole) {
  char path[1024];
  poas__strlcpy(path, test_tmp_path("long"), sizeof path);
  CHECK(mkdir(path, 0700) == 0 || errno == EEXIST);
  for (int i = 0; i < 6; i++) { /* six folders of 100 bytes */
    size_t len = strlen(path);
    snprintf(path + len, sizeof path - len, "/%099d", i);
    CHECK(mkdir(path, 0700) == 0 || errno == EEXIST);
  }
  size_t len = strlen(path);
  snprintf(path + len, sizeof path - len, "/cpu.json");
  CHECK(strlen(path) > 600);
  CHECK_OK(write_cpu_profile(path, 3e10));
  poas_context *ctx = open_with_profile("cpu", path);
  CHECK(ctx);
  poas_profile_info pi;
  CHECK_OK(poas_profile_get(ctx, &pi));
  CHECK_MSG(pi.loaded && pi.problem[0] == '\0', "%s", pi.problem);
  CHECK(strncmp(pi.path, path, sizeof pi.path - 4) == 0 &&
        strcmp(pi.path + sizeof pi.path - 4, "...") == 0);
  poas_finalize(ctx);

  static char huge[PATH_MAX + 64];
  memset(huge, 'a', sizeof huge - 1);
  huge[0] = '/';
  ctx = open_with_profile("cpu", huge);
  CHECK(ctx);
  CHECK_OK(poas_profile_get(ctx, &pi));
  CHECK_MSG(!pi.loaded && strstr(pi.problem, "past the system's"), "%s", pi.problem);
  poas_finalize(ctx);

  setenv("POAS_PROFILE", huge, 1);
  static char buf[sizeof huge + 16];
  CHECK_RC(poas_default_profile_path(buf, sizeof buf), POAS_EINVAL);
  unsetenv("POAS_PROFILE");
  return 0;
}

/* How many names in the folder `dir` hold `part`. */
static int names_holding(const char *dir, const char *part) {
  DIR *d = opendir(dir);
  if (!d)
    return -1;
  int n = 0;
  for (struct dirent *de; (de = readdir(d)) != NULL;)
    n += strstr(de->d_name, part) != NULL;
  closedir(d);
  return n;
}

typedef struct profile_writer {
  const char *path;
  const poas__profile *p;
  pthread_barrier_t *start;
  int rc;
} profile_writer;

static void *write_profile_again_and_again(void *arg) {
  profile_writer *w = arg;
  pthread_barrier_wait(w->start);
  for (int i = 0; i < 40 && !w->rc; i++)
    w->rc = poas__profile_write(w->path, w->p);
  return NULL;
}

/* Two threads of one process writing one profile each end with a whole
 * file and leave no temporary one. Their temporary files once had one
 * name, "PROFILE.tmp.PID": on a file system without O_TMPFILE each
 * truncated the other's, and the second rename found no file (POAS_EIO);
 * with it, each unlinked the name the other had just given its file. */
TEST(writers_of_one_profile_keep_to_their_own_files) {
  poas__profile *p = calloc(1, sizeof *p), *back = calloc(1, sizeof *back);
  CHECK(p && back);
  sample_profile(p);
  char dir[256], path[300];
  snprintf(dir, sizeof dir, "%s", test_tmp_path("writers"));
  snprintf(path, sizeof path, "%s/one.json", dir);
  for (int no_tmpfile = 0; no_tmpfile < 2; no_tmpfile++) {
    poas__profile_no_tmpfile = no_tmpfile;
    pthread_barrier_t start;
    CHECK(pthread_barrier_init(&start, NULL, 2) == 0);
    profile_writer w[2] = {{path, p, &start, 0}, {path, p, &start, 0}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
      CHECK(pthread_create(&t[i], NULL, write_profile_again_and_again, &w[i]) == 0);
    for (int i = 0; i < 2; i++)
      CHECK(pthread_join(t[i], NULL) == 0);
    pthread_barrier_destroy(&start);
    poas__profile_no_tmpfile = 0;
    for (int i = 0; i < 2; i++)
      CHECK_MSG(w[i].rc == 0, "%s: writer %d failed", no_tmpfile ? "without O_TMPFILE" : "as found",
                i);
    CHECK_OK(poas__profile_load(path, back));
    CHECK(back->ndev == p->ndev);
    CHECK_MSG(names_holding(dir, ".tmp.") == 0, "temporary files left in %s", dir);
  }
  free(p);
  free(back);
  return 0;
}

/* A write that fails (here past a file size limit, as on a full disk)
 * leaves the profile as it was and no temporary file beside it, with
 * O_TMPFILE or without. */
TEST(a_failed_write_leaves_no_temporary_file) {
  poas__profile *p = calloc(1, sizeof *p);
  CHECK(p);
  sample_profile(p);
  char dir[256], path[300];
  snprintf(dir, sizeof dir, "%s", test_tmp_path("failed"));
  snprintf(path, sizeof path, "%s/p.json", dir);
  CHECK_OK(poas__profile_write(path, p));
  char *before = read_text(path);
  CHECK(before);
  struct rlimit was, small;
  CHECK(getrlimit(RLIMIT_FSIZE, &was) == 0);
  small = was;
  small.rlim_cur = 64;
  void (*xfsz)(int) = signal(SIGXFSZ, SIG_IGN);
  int rc[2];
  for (int no_tmpfile = 0; no_tmpfile < 2; no_tmpfile++) {
    poas__profile_no_tmpfile = no_tmpfile;
    setrlimit(RLIMIT_FSIZE, &small);
    rc[no_tmpfile] = poas__profile_write(path, p);
    setrlimit(RLIMIT_FSIZE, &was);
  }
  poas__profile_no_tmpfile = 0;
  signal(SIGXFSZ, xfsz);
  for (int i = 0; i < 2; i++)
    CHECK_RC(rc[i], POAS_EIO);
  char *after = read_text(path);
  CHECK(after && strcmp(before, after) == 0);
  CHECK_MSG(names_holding(dir, ".tmp.") == 0, "temporary files left in %s", dir);
  free(before);
  free(after);
  free(p);
  return 0;
}

TEST_MAIN(TEST_ENTRY(round_trip_is_exact), TEST_ENTRY(writers_of_one_profile_keep_to_their_own_files),
          TEST_ENTRY(a_failed_write_leaves_no_temporary_file), TEST_ENTRY(bad_profiles_fail_with_file_and_problem),
          TEST_ENTRY(good_file_loads_and_missing_file_is_eio), TEST_ENTRY(matching_profile_is_used),
          TEST_ENTRY(a_profiles_thread_counts_reach_the_device),
          TEST_ENTRY(fingerprint_mismatch_names_the_device),
          TEST_ENTRY(a_sims_fingerprint_holds_its_settings),
          TEST_ENTRY(default_path_follows_environment),
          TEST_ENTRY(long_profile_paths_are_used_whole),
          TEST_ENTRY(a_profile_named_for_simulated_devices_is_read))
