/* poas-info: lists the devices POAS sees (id, kind, name, memory, cores,
 * whether it shares the host's cores) and the profile behind their models
 * (path, age, why it is not used, each model's held-out error), as tables
 * or, with --json, as one JSON object for scripts. */
#include "poas.h"
#include "tools/context-open.h"
#include "tools/fit-text.h"
#include "tools/json-out.h"
#include "tools/profile-note.h"
#include "tools/shared-options.h"
#include "tools/stdout-check.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
  fprintf(f, "Usage: poas-info [--devices LIST] [--profile FILE] [--json]\n"
             "List the devices POAS can use, and the profile behind their models.\n\n"
             "  -d, --devices LIST  device selection, as POAS_DEVICES (e.g. cpu,opencl0)\n"
             "  -p, --profile FILE  the profile to show, as POAS_PROFILE (default: this\n"
             "                      machine's); one that cannot be used is shown with why\n"
             "  -j, --json          print one JSON object instead of a table\n"
             "  -h, --help          show this help\n"
             "  -V, --version       show the version\n\n"
             "Exit status: 0, 1 when the devices cannot be opened or the output cannot be\n"
             "written, 2 on a usage error (a malformed --devices or POAS_DEVICES among them).\n");
}

/* Writes s to stdout as a JSON string. */
static void json_string(const char *s) { tool_json_string(stdout, s); }

static const char *const pair_names[4] = {"NN", "TN", "NT", "TT"};

static void json_fit(const poas_fit_info *f) {
  printf("{\"samples\": %d, \"r2\": %.6g, \"heldout_median\": %.6g, \"heldout_max\": %.6g",
         f->samples, f->r2, f->heldout_median, f->heldout_max);
  if (f->timing_noise > 0)
    printf(", \"timing_noise\": %.6g", f->timing_noise);
  if (f->thin_max > 0)
    printf(", \"thin_min\": %.6g, \"thin_max\": %.6g", f->thin_min, f->thin_max);
  printf("}");
}

/* One rate model (a copy's or a transpose's) as "name": {...}, after sep. */
static void json_rate(const char *sep, const char *name, const poas_fit_info *fit,
                      double latency_s, double bandwidth, double knee_bytes,
                      double bandwidth_beyond) {
  printf("%s\"%s\": {\"latency_s\": %.6g, \"bandwidth\": %.6g, \"knee_bytes\": %.6g, "
         "\"bandwidth_beyond\": %.6g, \"fit\": ",
         sep, name, latency_s, bandwidth, knee_bytes, bandwidth_beyond);
  json_fit(fit);
  printf("}");
}

static void json_device_fit(const poas_device_fit *f) {
  printf("{\"id\": ");
  json_string(f->id);
  printf(", \"calibrated\": %s, \"gemm\": {", f->calibrated ? "true" : "false");
  for (int dt = 0; dt < 2; dt++) {
    printf("%s\"%s\": {\"all\": ", dt ? ", " : "", dt ? "d" : "s");
    json_fit(&f->gemm[dt]);
    for (int p = 0; p < 4; p++) {
      printf(", \"%s\": ", pair_names[p]);
      json_fit(&f->gemm_pair[dt][p]);
    }
    printf("}");
  }
  printf("}, \"transfer\": {");
  for (int dir = 0; dir < 2; dir++)
    json_rate(dir ? ", " : "", dir ? "d2h" : "h2d", &f->transfer[dir], f->latency_s[dir],
              f->bandwidth[dir], f->knee_bytes[dir], f->bandwidth_beyond[dir]);
  printf("}, \"transpose\": {");
  for (int dt = 0; dt < 2; dt++)
    json_rate(dt ? ", " : "", dt ? "d" : "s", &f->transpose[dt], f->transpose_latency_s[dt],
              f->transpose_bandwidth[dt], f->transpose_knee_bytes[dt],
              f->transpose_bandwidth_beyond[dt]);
  printf("}, \"duplex\": %.6g, \"memory_bytes\": %llu, \"dispatch_s\": %.6g, \"engine_s\": %.6g",
         f->duplex, (unsigned long long)f->memory_bytes, f->dispatch_s, f->engine_s);
  printf(", \"handoff_latency_ns\": {\"quick\": %.6g, \"slow\": %.6g}", f->handoff_latency_ns[0],
         f->handoff_latency_ns[1]);
  /* The GEMM pieces by dtype, 0 for whole calls. */
  printf(", \"gemm_block\": {\"s\": %d, \"d\": %d}", f->gemm_block[0], f->gemm_block[1]);
  /* Row and column counts whose calls run on fewer threads than all:
   * {"4": 1}; then the same in the slow hand-off state. */
  static const char *const tables[4] = {"threads_by_rows", "threads_by_cols",
                                        "threads_slow_by_rows", "threads_slow_by_cols"};
  for (int tab = 0; tab < 4; tab++) {
    const unsigned char *in[2][2];
    tool_threads_tables(f, tab / 2, in);
    printf(", \"%s\": {", tables[tab]);
    for (int dt = 0; dt < 2; dt++) {
      const unsigned char *by = in[dt][tab % 2];
      printf("%s\"%s\": {", dt ? ", " : "", dt ? "d" : "s");
      for (int n = 1, listed = 0; n < (int)sizeof f->threads_by_cols[0]; n++)
        if (by[n])
          printf("%s\"%d\": %d", listed++ ? ", " : "", n, by[n]);
      printf("}");
    }
    printf("}");
  }
  printf("}");
}

static void print_profile_json(poas_context *ctx) {
  poas_profile_info pi;
  if (poas_profile_get(ctx, &pi) != 0)
    return;
  printf(", \"profile\": {\"path\": ");
  json_string(pi.path);
  printf(", \"loaded\": %s, \"created\": ", pi.loaded ? "true" : "false");
  json_string(pi.created);
  printf(", \"age_s\": %.0f, \"problem\": ", pi.age_s);
  json_string(pi.problem);
  printf(", \"devices\": [");
  for (int i = 0; i < pi.ndevices; i++) {
    printf("%s\n  ", i ? "," : "");
    json_device_fit(&pi.dev[i]);
  }
  printf("\n]}");
}

static void print_json(poas_context *ctx) {
  int n = poas_device_count(ctx);
  printf("{\"version\": ");
  json_string(poas_version());
  printf(", \"devices\": [");
  for (int i = 0; i < n; i++) {
    poas_device_info d;
    poas_device_get(ctx, i, &d);
    printf("%s\n  {\"id\": ", i ? "," : "");
    json_string(d.id);
    printf(", \"kind\": ");
    json_string(poas_device_kind_name(d.kind));
    printf(", \"name\": ");
    json_string(d.name);
    printf(", \"driver\": ");
    json_string(d.driver);
    printf(", \"memory_bytes\": %llu, \"cores\": %d, \"shares_host_cores\": %s, "
           "\"host_memory\": %s, \"has_model\": %s}",
           (unsigned long long)d.memory_bytes, d.cores, d.shares_host_cores ? "true" : "false",
           d.host_memory ? "true" : "false", d.has_model ? "true" : "false");
  }
  printf("\n]");
  print_profile_json(ctx);
  printf("}\n");
}

static void print_age(double s) {
  if (s < -60) { /* a profile copied from a machine whose clock is ahead */
    if (s > -2 * 86400) /* "0 days ahead" said nothing of minutes */
      printf("dated %.1f hours ahead of this machine's clock", -s / 3600);
    else
      printf("dated %.0f days ahead of this machine's clock", -s / 86400);
    return;
  }
  if (s < 90) /* "1 minutes old" */
    printf("%s old", s < 60 ? "under a minute" : "a minute");
  else if (s < 3600)
    printf("%.0f minutes old", s / 60);
  else if (s < 2 * 86400)
    printf("%.1f hours old", s / 3600);
  else
    printf("%.0f days old", s / 86400);
}

/* Whether the context's device `id` is simulated: its model is its
 * settings', not an estimate. */
static int is_sim(const poas_context *ctx, const char *id) {
  int n = poas_device_count(ctx);
  for (int i = 0; i < n; i++) {
    poas_device_info d;
    if (poas_device_get(ctx, i, &d) == 0 && strcmp(d.id, id) == 0)
      return d.kind == POAS_DEVICE_SIM;
  }
  return 0;
}

static void print_profile_table(poas_context *ctx) {
  poas_profile_info pi;
  if (poas_profile_get(ctx, &pi) != 0)
    return;
  /* A set of simulated devices reads no profile unless one is named
   * (and then uses none of it): they take theirs with sim:profile=FILE,
   * which is no profile of this machine's. Those that do are named, so
   * that "none" does not read as if their FILE had been left unread. */
  int real = 0;
  char replay[160] = "";
  for (int i = 0; i < poas_device_count(ctx); i++) {
    poas_device_info d;
    if (poas_device_get(ctx, i, &d) != 0)
      continue;
    real += d.kind != POAS_DEVICE_SIM;
    if (d.kind == POAS_DEVICE_SIM && i < pi.ndevices && pi.dev[i].calibrated) {
      size_t len = strlen(replay);
      snprintf(replay + len, sizeof replay - len, "%s%s", len ? ", " : "", d.id);
    }
  }
  /* With real devices and no path, the problem says why there is none
   * (no HOME to find the default under), and is said once, here. */
  if (pi.path[0])
    printf("\nprofile: %s\n", pi.path);
  else if (real)
    printf("\nprofile: (none: %s)\n", pi.problem);
  else if (replay[0])
    printf("\nprofile: (none: only simulated devices; %s replay%s the profile %s "
           "sim:profile=FILE names, whose models follow)\n",
           replay, strchr(replay, ',') ? "" : "s", strchr(replay, ',') ? "each one's" : "its");
  else
    printf("\nprofile: (none: simulated devices take theirs from sim:profile=FILE)\n");
  if (pi.loaded) {
    printf("  written %s, ", pi.created);
    print_age(pi.age_s);
    printf("\n");
  }
  /* Every device's model used, the problem is a note (a profile written
   * on another host whose devices match). */
  int unused = 0;
  for (int i = 0; i < pi.ndevices; i++)
    unused += !pi.dev[i].calibrated;
  if (pi.path[0] && pi.problem[0])
    printf("  %s: %s\n", !pi.loaded ? "not used" : unused ? "partly unused" : "note",
           pi.problem);
  /* The last column: a GEMM row's thin-block factors, a copy's or a
   * transpose's fitted model (it was headed "thin blocks" alone). */
  printf("%-10s %-5s %-4s %7s %8s %14s %11s %6s  %s\n", "device", "dtype", "pair", "samples",
         "R^2", "heldout median", "heldout max", "noise", "thin blocks, or model");
  char nb[32];
  for (int i = 0; i < pi.ndevices; i++) {
    const poas_device_fit *f = &pi.dev[i];
    char blocks[160];
    tool_block_text(f, blocks, sizeof blocks);
    if (!f->calibrated) {
      printf("%-10s %s\n", f->id,
             is_sim(ctx, f->id) ? "simulated: its settings are its model (exact)"
                                : "built-in estimate (not calibrated)");
      if (blocks[0]) /* block=N's, which no calibration chose */
        printf("%-10s %s\n", f->id, blocks);
      continue;
    }
    for (int dt = 0; dt < 2; dt++)
      for (int p = -1; p < 4; p++) {
        const poas_fit_info *g = p < 0 ? &f->gemm[dt] : &f->gemm_pair[dt][p];
        /* A dtype the calibration left out (--dtype s) plans on an
         * estimate; its rows were missing with no word. */
        if (p < 0 && !g->samples)
          printf("%-10s %-5s built-in estimate (not calibrated in this dtype: poas-calibrate "
                 "--dtype %s)\n",
                 f->id, dt ? "d" : "s", dt ? "d" : "s");
        if (!g->samples)
          continue;
        printf("%-10s %-5s %-4s %7d %8.5f %13.2f%% %10.2f%% %6s", f->id, dt ? "d" : "s",
               p < 0 ? "all" : pair_names[p], g->samples, g->r2, 100 * g->heldout_median,
               100 * g->heldout_max, tool_noise_text(g->timing_noise, nb, sizeof nb));
        if (g->thin_max > 0)
          printf("  %.2f-%.2fx", g->thin_min, g->thin_max);
        printf("\n");
      }
    for (int dir = 0; dir < 2; dir++) {
      const poas_fit_info *t = &f->transfer[dir];
      char model[128];
      tool_transfer_text(f, (poas_direction)dir, model, sizeof model);
      if (t->samples)
        printf("%-10s %-5s %-4s %7d %8.5f %13.2f%% %10.2f%% %6s  %s\n", f->id,
               dir ? "d2h" : "h2d", "", t->samples, t->r2, 100 * t->heldout_median,
               100 * t->heldout_max, tool_noise_text(t->timing_noise, nb, sizeof nb), model);
    }
    for (int dt = 0; dt < 2; dt++) {
      const poas_fit_info *t = &f->transpose[dt];
      char model[128];
      tool_transpose_text(f, (poas_dtype)dt, model, sizeof model);
      if (t->samples)
        printf("%-10s %-5s %-4s %7d %8.5f %13.2f%% %10.2f%% %6s  %s\n", f->id, "trans",
               dt ? "d" : "s", t->samples, t->r2, 100 * t->heldout_median,
               100 * t->heldout_max, tool_noise_text(t->timing_noise, nb, sizeof nb), model);
    }
    char cost[160];
    tool_run_cost_text(f, cost, sizeof cost);
    if (cost[0])
      printf("%-10s %s\n", f->id, cost);
    char threads[800];
    tool_threads_text(f, threads, sizeof threads);
    if (threads[0])
      printf("%-10s %s\n", f->id, threads);
    if (blocks[0])
      printf("%-10s %s\n", f->id, blocks);
  }
  for (int i = 0; i < pi.ndevices; i++)
    if (pi.dev[i].calibrated)
      tool_noise_warnings(stdout, "note: ", &pi.dev[i]);
  char ids[256];
  tool_estimated_ids(ctx, ids, sizeof ids);
  if (ids[0])
    printf("note: %s plan%s with rough built-in estimates: run poas-calibrate to measure "
           "this machine\n",
           ids, strchr(ids, ',') ? "" : "s");
}

static void print_table(poas_context *ctx) {
  int n = poas_device_count(ctx);
  printf("%-10s %-7s %-44s %10s %6s %s\n", "id", "kind", "name", "memory", "cores",
         "shares host cores");
  for (int i = 0; i < n; i++) {
    poas_device_info d;
    poas_device_get(ctx, i, &d);
    printf("%-10s %-7s %-44.44s %7.1f GiB %6d %s\n", d.id, poas_device_kind_name(d.kind), d.name,
           (double)d.memory_bytes / (1 << 30), d.cores, d.shares_host_cores ? "yes" : "no");
  }
}

int main(int argc, char **argv) {
  tool_std_ready();
  static const struct option longopts[] = {TOOL_LONGOPT_DEVICES, TOOL_LONGOPT_PROFILE,
                                           TOOL_LONGOPT_JSON, TOOL_LONGOPTS_END};
  poas_options opts;
  poas_options_init(&opts);
  int json = 0, c, status;
  const tool_cli cli = {
      .prog = "poas-info", .usage = usage, .argc = argc, .argv = argv, .longopts = longopts,
      .devices = &opts.devices, .profile = &opts.profile, .json = &json};
  while ((c = tool_getopt(&cli, "d:p:jhV")) != -1)
    if ((status = tool_shared_option(&cli, c, optarg)) != TOOL_GO_ON)
      return status;
  if ((status = tool_no_operands(&cli)) != TOOL_GO_ON)
    return status;
  poas_context *ctx;
  int rc = tool_context_open("poas-info", &opts, &ctx);
  if (rc)
    return rc;
  if (json)
    print_json(ctx);
  else {
    print_table(ctx);
    print_profile_table(ctx);
  }
  poas_finalize(ctx);
  return tool_stdout_status("poas-info", 0);
}
