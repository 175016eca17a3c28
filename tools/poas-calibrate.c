/* poas-calibrate: measures the devices, fits their models and writes the
 * profile poas_init loads. A thin tool over poas_calibrate(), which checks
 * the output before measuring and keeps what it does not measure of this
 * machine's profile there: on a terminal it draws a progress line (device,
 * step, bar); either way it ends with a summary table of each fit's
 * quality and a line on what of the old profile was kept or replaced. */
#include "poas.h"
#include "tools/args.h"
#include "tools/context-open.h"
#include "tools/fit-text.h"
#include "tools/shared-options.h"
#include "tools/stdout-check.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *f) {
  fprintf(f,
          "Usage: poas-calibrate [--quick] [--devices LIST] [--dtype s|d|sd|s,d] [--output FILE]\n"
          "Measure the devices and write the profile POAS uses to predict them.\n\n"
          "  -q, --quick         short sweep (about a minute) instead of the full one\n"
          "  -d, --devices LIST  devices to open, as POAS_DEVICES (default: $POAS_DEVICES,\n"
          "                      else all)\n"
          "  -t, --dtype T       s, d or sd (also s,d, as poas-bench takes it; default sd)\n"
          "  -o, --output FILE   profile to write (default: $POAS_PROFILE, else\n"
          "                      $XDG_DATA_HOME/poas/<hostname>.json, else\n"
          "                      ~/.local/share/poas/<hostname>.json); a profile of this\n"
          "                      machine there keeps the devices and dtypes not measured\n"
          "                      now, and a file that is not a profile is not replaced\n"
          "  -h, --help          show this help\n"
          "  -V, --version       show the version\n\n"
          "Exit status: 0, 1 when calibration fails or the profile or the summary cannot\n"
          "be written, 2 on a usage error (an empty --output, a malformed --devices or\n"
          "POAS_DEVICES among them).\n");
}

/* Redraws the progress line at most ten times a second, with the seconds
 * since the first call: a step can sit at one fraction for a while (PoCL
 * building its kernels on a machine's first calibration: 25 s). Sets the
 * int `drawn` points to once it has drawn, so that the line is ended only
 * where there is one. */
static void progress(void *drawn, const char *device, const char *step, double fraction) {
  static double first, last;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  double now = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
  if (first == 0)
    first = now;
  if (now - last < 0.1 && fraction < 1)
    return;
  last = now;
  enum { WIDTH = 30 };
  int filled = (int)(fraction * WIDTH + 0.5);
  char bar[WIDTH + 1];
  for (int i = 0; i < WIDTH; i++)
    bar[i] = i < filled ? '#' : '.';
  bar[WIDTH] = '\0';
  fprintf(stderr, "\r%-8s %-7s [%s] %3.0f%% %4.0f s", device, step, bar, 100 * fraction,
          now - first);
  fflush(stderr);
  *(int *)drawn = 1;
}

static int parse_dtype(const char *s, int *mask) {
  if (strcmp(s, "s") == 0)
    *mask = 1 << POAS_FLOAT32;
  else if (strcmp(s, "d") == 0)
    *mask = 1 << POAS_FLOAT64;
  else if (strcmp(s, "sd") == 0 || strcmp(s, "ds") == 0 || strcmp(s, "s,d") == 0 ||
           strcmp(s, "d,s") == 0) /* "s,d" as poas-bench takes it */
    *mask = 3;
  else
    return -1;
  return 0;
}

/* One line on the profile replaced: what of it was kept ("opencl0 (s,
 * d)": a device kept whole; "cpu0 d": a dtype of a device measured now),
 * or why nothing was. */
static void print_kept(const poas_calibration_result *r) {
  if (r->replaced[0])
    printf("replaced %s\n", r->replaced);
  if (!r->nkept)
    return;
  static const char *const dtypes[4] = {"", "s", "d", "s, d"};
  printf("kept from the existing profile:");
  for (int i = 0; i < r->nkept; i++) {
    const poas_kept_device *k = &r->kept[i];
    const char *dt = dtypes[k->dtypes & 3];
    if (k->measured)
      printf("%s %s %s", i ? "," : "", k->id, dt);
    else
      printf("%s %s%s%s%s", i ? "," : "", k->id, *dt ? " (" : "", dt, *dt ? ")" : "");
  }
  putchar('\n');
}

/* `output` is the profile's path as given: r->output holds 511 bytes of
 * it, and a longer one would be cut without a mark. */
static void print_summary(const poas_calibration_result *r, const char *output) {
  /* The last column: a GEMM row's thin-block factors, a copy's or a
   * transpose's fitted model (it was headed "thin blocks" alone). */
  printf("%-8s %-5s %7s %8s %14s %11s %6s   %s\n", "device", "dtype", "samples", "R^2",
         "heldout median", "heldout max", "noise", "thin blocks, or model");
  char nb[32];
  for (int i = 0; i < r->ndevices; i++) {
    const poas_device_fit *f = &r->dev[i];
    for (int dt = 0; dt < 2; dt++) {
      const poas_fit_info *g = &f->gemm[dt];
      /* No table: calibration left them out, as worse on held-out samples,
       * or did not probe them, short of time. */
      char thin[64];
      snprintf(thin, sizeof thin, "none (%s)",
               f->thin_skipped ? "not probed, short of time" : "worse held out");
      if (g->thin_max > 0)
        snprintf(thin, sizeof thin, "%.2f-%.2fx", g->thin_min, g->thin_max);
      if (g->samples)
        printf("%-8s %-5s %7d %8.5f %13.2f%% %10.2f%% %6s   %s\n", f->id, dt ? "d" : "s",
               g->samples, g->r2, 100 * g->heldout_median, 100 * g->heldout_max,
               tool_noise_text(g->timing_noise, nb, sizeof nb), thin);
    }
    for (int dir = 0; dir < 2; dir++) {
      const poas_fit_info *t = &f->transfer[dir];
      char model[128];
      tool_transfer_text(f, (poas_direction)dir, model, sizeof model);
      if (t->samples)
        printf("%-8s %-5s %7d %8.5f %13.2f%% %10.2f%% %6s   %s\n", f->id, dir ? "d2h" : "h2d",
               t->samples, t->r2, 100 * t->heldout_median, 100 * t->heldout_max,
               tool_noise_text(t->timing_noise, nb, sizeof nb), model);
    }
    for (int dt = 0; dt < 2; dt++) {
      const poas_fit_info *t = &f->transpose[dt];
      char model[128];
      tool_transpose_text(f, (poas_dtype)dt, model, sizeof model);
      if (t->samples) /* "trans s" in the width of the dtype and samples columns */
        printf("%-8s trans %s %5d %8.5f %13.2f%% %10.2f%% %6s   %s\n", f->id, dt ? "d" : "s",
               t->samples, t->r2, 100 * t->heldout_median, 100 * t->heldout_max,
               tool_noise_text(t->timing_noise, nb, sizeof nb), model);
    }
    char cost[160];
    tool_run_cost_text(f, cost, sizeof cost);
    if (cost[0])
      printf("%-8s %s\n", f->id, cost);
    char threads[800];
    tool_threads_text(f, threads, sizeof threads);
    if (threads[0])
      printf("%-8s %s\n", f->id, threads);
    char blocks[160];
    tool_block_text(f, blocks, sizeof blocks);
    if (blocks[0])
      printf("%-8s %s\n", f->id, blocks);
  }
  print_kept(r);
  char took[512];
  tool_took_text(r, took, sizeof took);
  printf("%s; profile: %s\n", took, output);
  for (int i = 0; i < r->ndevices; i++)
    tool_noise_warnings(stderr, "poas-calibrate: ", &r->dev[i]);
}

int main(int argc, char **argv) {
  tool_std_ready();
  static const struct option longopts[] = {{"quick", no_argument, NULL, 'q'},
                                           TOOL_LONGOPT_DEVICES,
                                           {"dtype", required_argument, NULL, 't'},
                                           {"output", required_argument, NULL, 'o'},
                                           TOOL_LONGOPTS_END};
  poas_options opts;
  poas_options_init(&opts);
  opts.no_profile = 1; /* the old profile is about to be replaced */
  poas_calibrate_options co;
  poas_calibrate_options_init(&co);
  const char *output = NULL;
  int c, status;
  const tool_cli cli = {.prog = "poas-calibrate",
                        .usage = usage,
                        .argc = argc,
                        .argv = argv,
                        .longopts = longopts,
                        .devices = &opts.devices};
  while ((c = tool_getopt(&cli, "qd:t:o:hV")) != -1) {
    switch (c) {
    case 'q':
      co.quick = 1;
      break;
    case 't':
      if (parse_dtype(optarg, &co.dtypes)) {
        fprintf(stderr, "poas-calibrate: --dtype must be s, d or sd (or s,d), not '%s'\n",
                optarg);
        return 2;
      }
      break;
    case 'o':
      /* The library refuses it too, but as an error of the run (1), not of
       * the command line (2). */
      if (!tool_file_named("poas-calibrate", "output", optarg))
        return 2;
      output = optarg;
      break;
    default:
      if ((status = tool_shared_option(&cli, c, optarg)) != TOOL_GO_ON)
        return status;
    }
  }
  if ((status = tool_no_operands(&cli)) != TOOL_GO_ON)
    return status;
  char path[1024];
  if (!output) {
    int rc = poas_default_profile_path(path, sizeof path);
    if (rc) {
      fprintf(stderr, "poas-calibrate: %s: %s\n", poas_strerror(rc), poas_error_detail());
      return 1;
    }
    output = path;
  }
  co.output = output;
  int drawn = 0;
  if (isatty(STDERR_FILENO)) {
    co.progress = progress;
    co.progress_user = &drawn;
  }

  poas_context *ctx;
  int rc = tool_context_open("poas-calibrate", &opts, &ctx);
  if (rc)
    return rc;
  poas_calibration_result *res = malloc(sizeof *res);
  if (!res) {
    poas_finalize(ctx);
    fprintf(stderr, "poas-calibrate: out of memory\n");
    return 1;
  }
  rc = poas_calibrate(ctx, &co, res);
  if (drawn)
    fputc('\n', stderr);
  if (rc)
    fprintf(stderr, "poas-calibrate: %s: %s\n", poas_strerror(rc), poas_error_detail());
  else
    print_summary(res, output);
  free(res);
  poas_finalize(ctx);
  return tool_stdout_status("poas-calibrate", rc ? 1 : 0);
}
