/* poas-plan: prints the plan POAS would run for a GEMM, without running
 * it: per device the rows or columns of C it takes, its tiles, the bytes it
 * moves and its predicted times; the predicted makespan; the devices left
 * out and why. As a table or, with --json, as one JSON object for scripts. */
#include "poas.h"
#include "tools/args.h"
#include "tools/context-open.h"
#include "tools/json-out.h"
#include "tools/profile-note.h"
#include "tools/shared-options.h"
#include "tools/stdout-check.h"

#include <float.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
  fprintf(f, "Usage: poas-plan --m M --n N --k K [--dtype s|d] [--beta B] [--devices LIST]\n"
             "                 [--profile FILE] [--json]\n"
             "Print the plan POAS would run for C = A B + beta C (m x k times k x n,\n"
             "row-major), without running it. With beta != 0 (the default, 1) C is read as\n"
             "well as written, so devices with their own memory copy it in too; --beta 0\n"
             "plans C = A B, which copies less.\n"
             "co-run is the factor a device's times carry for computing beside other devices\n"
             "that share the host's cores (the contention calibration measured).\n\n"
             "  -m, --m M            rows of C\n"
             "  -n, --n N            columns of C\n"
             "  -k, --k K            inner dimension\n"
             "  -t, --dtype s|d      float32 (s, the default) or float64 (d)\n"
             "  -b, --beta B         the call's beta (default 1; 0: C is not read)\n"
             "  -d, --devices LIST   device selection, as POAS_DEVICES (e.g. cpu,sim:rate=1e12)\n"
             "  -p, --profile FILE   calibration profile, as POAS_PROFILE (an error when it\n"
             "                       cannot be read; an empty name is refused)\n"
             "  -j, --json           print one JSON object instead of a table\n"
             "  -h, --help           show this help\n"
             "  -V, --version        show the version\n\n"
             "Exit status: 0, 1 when no plan can be made (a problem that fits nowhere, a\n"
             "profile that cannot be read) or the output cannot be written, 2 on a usage\n"
             "error (an empty --profile, a malformed --devices or POAS_DEVICES among them).\n");
}

/* Writes s to stdout as a JSON string. */
static void json_string(const char *s) { tool_json_string(stdout, s); }

static void print_json(const poas_plan *p, double beta) {
  printf("{\"dtype\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"beta\": %.17g, "
         "\"split\": \"%s\", \"granule\": %lld, \"makespan_s\": %.9g,\n \"devices\": [",
         p->dtype == POAS_FLOAT64 ? "d" : "s", (long long)p->m, (long long)p->n, (long long)p->k,
         beta, p->split == POAS_SPLIT_ROWS ? "rows" : "columns", (long long)p->granule,
         p->makespan_s);
  for (int i = 0; i < p->ndevices; i++) {
    const poas_plan_device *d = &p->dev[i];
    printf("%s\n  {\"id\": ", i ? "," : "");
    json_string(d->id);
    printf(", \"share\": %.9g, \"first\": %lld, \"count\": %lld, \"tile\": %lld, "
           "\"tiles\": %lld, \"bytes_h2d\": %llu, \"bytes_d2h\": %llu, \"compute_s\": %.9g, "
           "\"transfer_s\": %.9g, \"predicted_s\": %.9g, \"estimated\": %s, "
           "\"corun\": %.9g}",
           d->share, (long long)d->first, (long long)d->count, (long long)d->tile,
           (long long)d->tiles, (unsigned long long)d->bytes_h2d,
           (unsigned long long)d->bytes_d2h, d->compute_s, d->transfer_s, d->predicted_s,
           d->estimated ? "true" : "false", d->corun);
  }
  printf("],\n \"excluded\": [");
  for (int i = 0; i < p->nexcluded; i++) {
    printf("%s\n  {\"id\": ", i ? "," : "");
    json_string(p->excluded[i].id);
    printf(", \"reason\": ");
    json_string(p->excluded[i].reason);
    putchar('}');
  }
  printf("]}\n");
}

static void print_table(const poas_plan *p, double beta) {
  if (p->m == 0 || p->n == 0) {
    printf("%sgemm m=%lld n=%lld k=%lld: C is empty, nothing to plan or run\n",
           p->dtype == POAS_FLOAT64 ? "d" : "s", (long long)p->m, (long long)p->n, (long long)p->k);
    return;
  }
  const char *unit = p->split == POAS_SPLIT_ROWS ? "rows" : "columns";
  printf("%sgemm m=%lld n=%lld k=%lld beta=%g: split by %s (granule %lld), predicted makespan "
         "%.4g s\n\n",
         p->dtype == POAS_FLOAT64 ? "d" : "s", (long long)p->m, (long long)p->n, (long long)p->k,
         beta, unit, (long long)p->granule, p->makespan_s);
  printf("%-10s %-21s %7s %6s %7s %10s %10s %10s %10s %11s %7s\n", "device", unit, "share",
         "tiles", "tile", "H2D MiB", "D2H MiB", "compute s", "transfer s", "predicted s",
         "co-run");
  for (int i = 0; i < p->ndevices; i++) {
    const poas_plan_device *d = &p->dev[i];
    char range[48];
    snprintf(range, sizeof range, "%lld-%lld", (long long)d->first,
             (long long)(d->first + d->count - 1));
    printf("%-10s %-21s %6.1f%% %6lld %7lld %10.1f %10.1f %10.4g %10.4g %11.4g %6.3fx%s\n",
           d->id, range, 100 * d->share, (long long)d->tiles, (long long)d->tile,
           (double)d->bytes_h2d / 1048576.0, (double)d->bytes_d2h / 1048576.0, d->compute_s,
           d->transfer_s, d->predicted_s, d->corun,
           d->estimated ? "  (no calibrated model: estimate)" : "");
  }
  double latest = 0;
  for (int i = 0; i < p->ndevices; i++)
    latest = latest > p->dev[i].predicted_s ? latest : p->dev[i].predicted_s;
  if (p->makespan_s < latest)
    printf("\nThe shares are whole granules; the run hands out its last %s in smaller\n"
           "pieces, so the devices finish together at the makespan, not at %.4g s.\n",
           unit, latest);
  if (p->nexcluded) {
    printf("\nleft out:\n");
    for (int i = 0; i < p->nexcluded; i++)
      printf("  %-10s %s\n", p->excluded[i].id, p->excluded[i].reason);
  }
}

/* A size argument: a whole non-negative number. */
static int parse_size(const char *name, const char *text, int64_t *out) {
  if (tool_parse_int64(text, 0, INT64_MAX, out)) {
    fprintf(stderr, "poas-plan: bad value '%s' for --%s (a whole number >= 0)\n", text, name);
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  tool_std_ready();
  static const struct option longopts[] = {{"m", required_argument, NULL, 'm'},
                                           {"n", required_argument, NULL, 'n'},
                                           {"k", required_argument, NULL, 'k'},
                                           {"dtype", required_argument, NULL, 't'},
                                           {"beta", required_argument, NULL, 'b'},
                                           TOOL_LONGOPT_DEVICES, TOOL_LONGOPT_PROFILE,
                                           TOOL_LONGOPT_JSON, TOOL_LONGOPTS_END};
  poas_options opts;
  poas_options_init(&opts);
  int64_t m = -1, n = -1, k = -1;
  poas_dtype dtype = POAS_FLOAT32;
  double beta = 1;
  int json = 0, c, status;
  const tool_cli cli = {
      .prog = "poas-plan", .usage = usage, .argc = argc, .argv = argv, .longopts = longopts,
      .devices = &opts.devices, .profile = &opts.profile, .json = &json};
  while ((c = tool_getopt(&cli, "m:n:k:t:b:d:p:jhV")) != -1) {
    switch (c) {
    case 'm':
    case 'n':
    case 'k':
      if (parse_size(c == 'm' ? "m" : c == 'n' ? "n" : "k", optarg,
                     c == 'm' ? &m : c == 'n' ? &n : &k))
        return 2;
      break;
    case 't':
      if (strcmp(optarg, "s") != 0 && strcmp(optarg, "d") != 0) {
        fprintf(stderr, "poas-plan: bad value '%s' for --dtype (s or d)\n", optarg);
        return 2;
      }
      dtype = optarg[0] == 'd' ? POAS_FLOAT64 : POAS_FLOAT32;
      break;
    case 'b':
      if (tool_parse_double(optarg, -DBL_MAX, DBL_MAX, &beta)) {
        fprintf(stderr, "poas-plan: bad value '%s' for --beta (a finite number)\n", optarg);
        return 2;
      }
      break;
    default:
      if ((status = tool_shared_option(&cli, c, optarg)) != TOOL_GO_ON)
        return status;
    }
  }
  if ((status = tool_no_operands(&cli)) != TOOL_GO_ON)
    return status;
  if (m < 0 || n < 0 || k < 0) {
    fprintf(stderr, "poas-plan: --m, --n and --k are required\n");
    tool_try_help(&cli);
    return 2;
  }
  poas_context *ctx;
  int rc = tool_context_open("poas-plan", &opts, &ctx);
  if (rc)
    return rc;
  if (tool_profile_check("poas-plan", ctx, opts.profile)) {
    poas_finalize(ctx);
    return 1;
  }
  poas_plan *plan = malloc(sizeof *plan);
  if (!plan) {
    poas_finalize(ctx);
    fprintf(stderr, "poas-plan: out of memory\n");
    return 1;
  }
  rc = poas_plan_gemm_call(ctx, dtype, POAS_ROW_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, m, n, k, 1,
                           beta, plan);
  if (rc)
    fprintf(stderr, "poas-plan: %s: %s\n", poas_strerror(rc), poas_error_detail());
  else if (json)
    print_json(plan, beta);
  else
    print_table(plan, beta);
  free(plan);
  poas_finalize(ctx);
  return tool_stdout_status("poas-plan", rc ? 1 : 0);
}
