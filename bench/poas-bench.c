/* poas-bench: measures what co-execution buys. `poas-bench gemm` runs, for
 * each size and data type, every selected device alone and then all of them
 * together through the public API, end to end (operands start and end in
 * host memory), beside the vendor libraries alone (OpenBLAS through cblas
 * with every core, CLBlast, cuBLAS with synchronous copies). Each
 * measurement is two warm-ups (one for a baseline, see WARMUPS) and then
 * the median of --repeat runs, taken in rounds that run every device set
 * and baseline once, each round in a new order (run_problem); every run's
 * result is checked numerically. The table, a CSV file and
 * optionally JSON and an SVG plot report rates, speedup over the best
 * single device, efficiency against the sum of the single-device rates,
 * and the predicted beside the measured time. Contexts stay open across
 * runs so that device start-up and profile loading are never timed. */
#include "config.h"

#include "bench/bench.h"
#include "bench/cli.h"
#include "bench/shapes.h"
#include "bench/timing.h"
#include "tools/context-open.h"
#include "tools/host-memory.h"
#include "tools/profile-note.h"
#include "tools/shared-options.h"
#include "tools/stdout-check.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define MAX_SHAPES 64
#define MAX_REPEAT 1000
#define DEFAULT_SIZES "512,1024,2048"
/* Warm-up runs before the timed ones: the first pays the one-time costs
 * (threads, pages, kernels), which a context does not learn from when they
 * made it slower than planned (api/run.c); a POAS device set, alone or
 * co-executed, runs a second, so that its timed runs are all planned with
 * what runs taught, as a program's calls after its first are. With one,
 * its first timed run was planned on the models alone: on the fixed core
 * budget, a 2048 sgemm whose PoCL part ran 1.25x its model was split for
 * the model, ran at a fill of 0.89 and was predicted 15.7% short, and as
 * the median of three it was the row (bench-ci-2core-cpu1-opencl1-
 * 20261127-054050); cpu0 alone, whose quick calibration ran 12% slow, read
 * +12.6% the same way in a README run. A baseline has no prediction, and
 * nothing it learns. */
#define WARMUPS 2
#define BASELINE_WARMUPS 1

/* Spread of a row's timed runs, (slowest - fastest) / median, above which
 * its note says how far they spread. */
#define SPREAD_FLAG 0.10

typedef struct options {
  bench_shape shapes[MAX_SHAPES];
  int nshapes;
  poas_dtype dtypes[2];
  int ndtypes;
  const char *devices;
  const char *baselines;
  int repeat;
  const char *csv;
  const char *plot;
  const char *profile;
  int json;
  double alone_limit; /* 0, or seconds beyond which a device alone runs a row block */
} options;

/* A set of POAS devices run as one: a single device or all of them. */
typedef struct devset {
  char label[256];
  poas_context *ctx;
  bench_role role;
  int has_sim; /* sim computes nothing: its results cannot be checked */
  int copies;  /* a device alone that copies operands to its own memory */
} devset;

typedef struct baseline_slot {
  const bench_baseline *b;
  void *state;
  char desc[256];
} baseline_slot;

typedef struct bench {
  options o;
  devset sets[POAS_MAX_DEVICES + 1];
  int nsets;
  poas_device_info devs[POAS_MAX_DEVICES];
  int ndevs;
  baseline_slot bl[3];
  int nbl;
  /* The baselines that did not open, each a line to say once the device
   * sets opened too: said at once, "cublas baseline left out" came before
   * the error that stopped the run (an unreadable --profile). */
  char bl_notes[3][320];
  int nbl_notes;
  bench_row *rows;
  int nrows;
  int step, nsteps; /* runs, warm-ups included, for the progress line */
  int tty;
} bench;

static const bench_baseline *const all_baselines[] = {
    &bench_baseline_cblas, &bench_baseline_clblast, &bench_baseline_cublas};

static void usage(FILE *f) {
  fprintf(f, "Usage: poas-bench gemm [OPTIONS]\n"
             "       poas-bench plot --plot FILE.svg CSV...\n"
             "Benchmark GEMM end to end on each device alone, on all of them co-executed,\n"
             "and on the vendor libraries alone; check every result.\n\n"
             "  -s, --sizes LIST      sizes n, comma-separated: at most "
             BENCH_XSTR(MAX_SHAPES) ", each 1 to\n"
             "                        1048576 (default " DEFAULT_SIZES ")\n"
             "  -S, --shape SHAPE     square (n x n x n, the default), tall (4n x n/4 x n),\n"
             "                        wide (n/4 x 4n x n), or a list MxNxK,... used instead\n"
             "                        of --sizes\n"
             "  -t, --dtype LIST      s, d or s,d (sd too; default s)\n"
             "  -d, --devices LIST    device selection, as POAS_DEVICES (default:\n"
             "                        $POAS_DEVICES, else every device); each device alone\n"
             "                        keeps its entry's settings\n"
             "  -b, --baselines LIST  cblas, clblast, cublas, all (default) or none\n"
             "  -r, --repeat N        timed runs, 1 to "
             BENCH_XSTR(MAX_REPEAT) " (default 5), after two warm-ups\n"
             "                        (the second planned with what the first taught; one\n"
             "                        for a baseline); the median is reported. The runs go\n"
             "                        in rounds, each device set and baseline once per\n"
             "                        round, so that a machine whose speed drifts slows\n"
             "                        them all alike\n"
             "  -c, --csv FILE        CSV output (default bench-DATE-TIME.csv)\n"
             "  -p, --plot FILE.svg   plot GFLOP/s against size through gnuplot, into a file\n"
             "                        other than the CSV\n"
             "      --profile FILE    calibration profile, as POAS_PROFILE (an error when it\n"
             "                        cannot be read)\n"
             "  -j, --json            print one JSON object on stdout; the table then goes\n"
             "                        to stderr\n"
             "  -a, --alone-limit S   a device alone whose run is predicted to take more than\n"
             "                        S seconds, or a baseline whose first 256 rows say it\n"
             "                        would, runs the first rows of A and C instead, as\n"
             "                        many as S seconds allow; its times are scaled to the\n"
             "                        whole problem (for one that copies to a device, along\n"
             "                        the line through that block and half of it, since B's\n"
             "                        copy costs the same for any rows) and its note says so\n"
             "                        (for sizes where a slow device alone would take minutes)\n"
             "  -h, --help            show this help\n"
             "  -V, --version         show the version\n\n"
             "The co-executed row's efficiency is its rate over the sum of the devices'\n"
             "rates alone. Its note splits it: each device's rate while it had work in\n"
             "the run against its rate alone (below 1: the devices slowed each other,\n"
             "or its part ran in more, thinner calls than alone), then fill, the run's\n"
             "rate over the sum of those busy rates (below 1: idle time and the run's\n"
             "own costs). The CSV and JSON carry the factors whose product is the\n"
             "efficiency: eff_used (the alone rates of the devices given work over\n"
             "all), eff_corun and eff_fill.\n\n"
             "A row whose timed runs spread by more than 10%% of their median says so in\n"
             "its note; the CSV and JSON carry every row's fastest_s and slowest_s.\n\n"
             "poas-bench plot draws the same plot from CSV files that earlier runs wrote\n"
             "(several runs' rows join, series by series), for results recorded on a\n"
             "machine without gnuplot.\n\n"
             "The CSV and the plot are written into new files beside their paths, which\n"
             "take their place when the run ends, so that a run that fails or is stopped\n"
             "leaves earlier ones as they were; one stopped by a signal (Ctrl-C) keeps\n"
             "the rows of the sizes it finished in CSV.partial. A path is followed\n"
             "through its symbolic links, and what it names must be nothing yet, an\n"
             "empty file or an earlier output of its kind (a poas-bench CSV, an SVG):\n"
             "a directory, a FIFO, a device (/dev/null too) or another file (a profile\n"
             "named with -p, which is --profile in the other tools) is refused before\n"
             "the run.\n\n"
             "The profile is --profile's, else POAS_PROFILE's, else the default path; one\n"
             "that either names and that cannot be read (missing, not a profile) is an\n"
             "error.\n\n"
             "Exit status: 0, 1 when a run failed, a result exceeded its error bound, an\n"
             "output could not be written, the named profile cannot be read or the host's\n"
             "memory cannot hold a size's operands (said before anything runs), 2 on a\n"
             "usage error (a malformed or empty --devices, a malformed POAS_DEVICES, an\n"
             "empty --csv, --plot or --profile among them).\n");
}

/* ------------------------------------------------------------- options */

static int parse_dtypes(const char *text, options *o) {
  static const struct {
    const char *text;
    int n;
    poas_dtype d[2];
  } known[] = {{"s", 1, {POAS_FLOAT32}},
               {"d", 1, {POAS_FLOAT64}},
               {"s,d", 2, {POAS_FLOAT32, POAS_FLOAT64}},
               {"d,s", 2, {POAS_FLOAT64, POAS_FLOAT32}},
               /* as poas-calibrate takes them */
               {"sd", 2, {POAS_FLOAT32, POAS_FLOAT64}},
               {"ds", 2, {POAS_FLOAT64, POAS_FLOAT32}}};
  for (size_t i = 0; i < sizeof known / sizeof *known; i++)
    if (strcmp(text, known[i].text) == 0) {
      o->ndtypes = known[i].n;
      memcpy(o->dtypes, known[i].d, sizeof o->dtypes);
      return 0;
    }
  return -1;
}

/* A bad value of one of gemm's options: says so, and returns 2. */
static int bad(const char *what, const char *value) {
  fprintf(stderr, "poas-bench: bad %s '%s' (see poas-bench gemm --help)\n", what, value);
  return 2;
}

/* Whether --plot's `name` is refused, said on stderr by `prog`, pointing to
 * `cmd`'s --help: a name gnuplot cannot take, or one that ends in another
 * format's extension. The plot is SVG whatever the name says: `--plot
 * x.png` wrote SVG into x.png, which image viewers then refused. Other
 * names are taken as they are (a folder's "run.2" holds no format). */
static int plot_name_bad(const char *prog, const char *cmd, const char *name) {
  static const char *const not_svg[] = {".png", ".jpg", ".jpeg", ".gif", ".bmp", ".tif", ".tiff",
                                        ".webp", ".pdf", ".eps", ".ps", ".csv", ".json"};
  const char *base = strrchr(name, '/');
  const char *dot = strrchr(base ? base + 1 : name, '.');
  const char *why = bench_plot_name_ok(name) ? NULL : "a name without quotes or newlines";
  for (size_t i = 0; !why && dot && i < sizeof not_svg / sizeof *not_svg; i++)
    if (strcasecmp(dot, not_svg[i]) == 0)
      why = "an SVG file: a name ending in .svg";
  if (why)
    fprintf(stderr, "%s: bad --plot (%s) '%s' (see %s --help)\n", prog, why, name, cmd);
  return why != NULL;
}

/* Parses `gemm`'s options: TOOL_GO_ON, or the exit status to leave with. */
static int parse_options(int argc, char **argv, options *o) {
  static const struct option longopts[] = {
      {"sizes", required_argument, NULL, 's'},       {"shape", required_argument, NULL, 'S'},
      {"dtype", required_argument, NULL, 't'},       TOOL_LONGOPT_DEVICES,
      {"baselines", required_argument, NULL, 'b'},   {"repeat", required_argument, NULL, 'r'},
      {"csv", required_argument, NULL, 'c'},         {"plot", required_argument, NULL, 'p'},
      {"profile", required_argument, NULL, 'P'},     TOOL_LONGOPT_JSON,
      {"alone-limit", required_argument, NULL, 'a'}, TOOL_LONGOPTS_END};
  /* -p is --plot here, and --profile has no letter; main checks stdout. */
  const tool_cli cli = {.prog = "poas-bench",
                        .command = "gemm",
                        .usage = usage,
                        .argc = argc,
                        .argv = argv,
                        .longopts = longopts,
                        .devices = &o->devices,
                        .json = &o->json,
                        .stdout_checked_later = 1};
  const char *sizes = NULL, *shape_arg = "square";
  int64_t v = 0;
  int c, status;
  o->ndtypes = 1, o->dtypes[0] = POAS_FLOAT32, o->repeat = 5, o->baselines = "all";
  while ((c = tool_getopt(&cli, "s:S:t:d:b:r:c:p:ja:hV")) != -1) {
    switch (c) {
    case 's': sizes = optarg; break;
    case 'S': shape_arg = optarg; break;
    case 't':
      if (parse_dtypes(optarg, o))
        return bad("--dtype", optarg);
      break;
    case 'b': o->baselines = optarg; break;
    case 'r':
      if (tool_parse_int64(optarg, 1, MAX_REPEAT, &v) != 0)
        return bad("--repeat (1 to 1000)", optarg);
      o->repeat = (int)v;
      break;
    case 'c':
      if (!tool_file_named("poas-bench", "csv", optarg))
        return 2;
      o->csv = optarg;
      break;
    case 'p':
      if (!tool_file_named("poas-bench", "plot", optarg))
        return 2;
      if (plot_name_bad("poas-bench", "poas-bench gemm", optarg))
        return 2;
      o->plot = optarg;
      break;
    case 'P':
      if (!tool_file_named("poas-bench", "profile", optarg))
        return 2;
      o->profile = optarg;
      break;
    case 'a':
      if (tool_parse_double(optarg, DBL_MIN, DBL_MAX, &o->alone_limit))
        return bad("--alone-limit (seconds > 0)", optarg);
      break;
    default:
      if ((status = tool_shared_option(&cli, c, optarg)) != TOOL_GO_ON)
        return status;
    }
  }
  if (optind < argc)
    return bad("argument", argv[optind]);
  int named = strcmp(shape_arg, "square") == 0 || strcmp(shape_arg, "tall") == 0 ||
              strcmp(shape_arg, "wide") == 0;
  /* The shape first: a misspelt name ("Tall") beside --sizes was taken for
   * a list of shapes and refused as giving both. */
  if (!named && bench_parse_shapes(shape_arg, NULL, o->shapes, MAX_SHAPES, &o->nshapes) != 0) {
    fprintf(stderr,
            "poas-bench: bad --shape '%s' (square, tall, wide or MxNxK,..., at most %d, "
            "each side 1 to 1048576)\n",
            shape_arg, MAX_SHAPES);
    return 2;
  }
  if (!named && sizes) {
    fprintf(stderr, "poas-bench: give --sizes or a list of MxNxK shapes, not both\n");
    return 2;
  }
  const char *list = sizes ? sizes : DEFAULT_SIZES;
  if (named && bench_parse_shapes(list, shape_arg, o->shapes, MAX_SHAPES, &o->nshapes) != 0) {
    char what[64];
    snprintf(what, sizeof what, "--sizes (at most %d, each 1 to 1048576)", MAX_SHAPES);
    return bad(what, sizes);
  }
  return TOOL_GO_ON;
}

/* ------------------------------------------------------------- devices */

/* The id that opens device d alone: its own, but sim0 for any simulated
 * one, since sims are numbered in the order a selection gives them and the
 * library refuses "sim1" as the first. */
static const char *alone_id(const poas_device_info *d) {
  return d->kind == POAS_DEVICE_SIM ? "sim0" : d->id;
}

/* The selection that opens device d[i] alone: its id with the settings of
 * the selection entry that opened it ("cpu:threads=1" gives
 * "cpu0:threads=1"). Entries open their devices in order, an id or a sim
 * entry one each and a bare kind every remaining device of that kind, so
 * walking the entries and the devices together pairs them. Blanks around
 * an entry and before its first ':' are dropped, as the library's parser
 * drops them (core/spec.c): "cpu, sim:..." otherwise paired no kind with
 * " sim:...", and "sim :..." none with "sim ", and ran sim0 alone without
 * its settings. The settings are passed on as written, blanks and all,
 * which the library reads alike. */
static void single_selections(const char *selection, const poas_device_info *d, int n,
                              char (*out)[512]) {
  for (int i = 0; i < n; i++)
    snprintf(out[i], sizeof out[i], "%s", alone_id(&d[i]));
  if (!selection)
    return;
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", selection);
  int pos = 0;
  char *save = NULL;
  for (char *e = strtok_r(buf, ",", &save); e && pos < n; e = strtok_r(NULL, ",", &save)) {
    while (isspace((unsigned char)*e))
      e++;
    for (char *end = e + strlen(e); end > e && isspace((unsigned char)end[-1]);)
      *--end = '\0';
    const char *settings = strchr(e, ':');
    size_t word = settings ? (size_t)(settings - e) : strlen(e);
    while (word > 0 && isspace((unsigned char)e[word - 1]))
      word--;
    size_t kind = word;
    while (kind > 0 && isdigit((unsigned char)e[kind - 1]))
      kind--;
    int one = kind < word || strncmp(e, "sim", kind) == 0;
    for (int count = 0; pos < n && !(one && count == 1); count++, pos++) {
      const char *k = poas_device_kind_name(d[pos].kind);
      if (strlen(k) != kind || strncmp(k, e, kind) != 0)
        break;
      snprintf(out[pos], sizeof out[pos], "%s%s", alone_id(&d[pos]), settings ? settings : "");
    }
  }
}

/* Whether poas_init's error `rc` is about the devices selected, so that
 * its message is best read beside the selection that asked for them. */
static int device_error(int rc) {
  return rc == POAS_ESPEC || rc == POAS_ENODEV || rc == POAS_EDEVICE;
}

/* Opens the devices of `selection` (NULL: POAS_DEVICES's, else every
 * device) with o's profile. */
static int open_context(const options *o, const char *selection, poas_context **ctx) {
  poas_options po;
  poas_options_init(&po);
  po.devices = selection;
  po.profile = o->profile;
  int rc = poas_init(ctx, &po);
  if (rc && !device_error(rc)) { /* POAS_SCHED, POAS_TRACE and the like: not the selection's */
    fprintf(stderr, "poas-bench: %s: %s\n", poas_strerror(rc), poas_error_detail());
    return rc;
  }
  if (rc) { /* named as the user gave it: --devices, POAS_DEVICES or neither */
    const char *from, *given = tool_devices_selection(o->devices, &from);
    const char *named = given ? from : "devices";
    const char *value = selection ? selection : given ? given : "(default)";
    fprintf(stderr, "poas-bench: %s '%s': %s: %s\n", named, value, poas_strerror(rc),
            poas_error_detail());
  }
  return rc;
}

/* Opens each device alone and, when there are several, all of them: 0,
 * or the POAS error code (POAS_EPROFILE for a named profile that cannot be
 * read). */
static int open_sets(bench *b) {
  poas_context *all;
  int rc = open_context(&b->o, b->o.devices, &all);
  if (rc)
    return rc;
  b->ndevs = poas_device_count(all);
  int has_sim = 0;
  for (int i = 0; i < b->ndevs; i++) {
    poas_device_get(all, i, &b->devs[i]);
    has_sim |= b->devs[i].kind == POAS_DEVICE_SIM;
  }
  /* The profile behind the predictions, checked as poas-plan checks it:
   * one that --profile or POAS_PROFILE names and that cannot be read is an
   * error, since running on built-in estimates would fill the prediction
   * columns with numbers that look calibrated and are not. Otherwise it
   * notes the real devices that plan with built-in estimates: their
   * predictions, shares and prediction errors are rough until runs have
   * taught the context better. */
  if (tool_profile_check("poas-bench", all, b->o.profile)) {
    poas_finalize(all);
    return POAS_EPROFILE;
  }
  if (b->ndevs == 1) {
    b->sets[0] = (devset){"", all, BENCH_DEVICE, has_sim, !b->devs[0].host_memory};
    snprintf(b->sets[0].label, sizeof b->sets[0].label, "%s", b->devs[0].id);
    b->nsets = 1;
    return 0;
  }
  char(*single)[512] = malloc(sizeof *single * (size_t)b->ndevs);
  if (!single) {
    poas_finalize(all);
    return POAS_ENOMEM;
  }
  const char *selection = tool_devices_selection(b->o.devices, NULL);
  single_selections(selection, b->devs, b->ndevs, single);
  devset *co = &b->sets[b->ndevs];
  *co = (devset){"", all, BENCH_COEXEC, has_sim, 0};
  for (int i = 0; i < b->ndevs; i++) {
    devset *s = &b->sets[i];
    *s = (devset){"", NULL, BENCH_DEVICE, b->devs[i].kind == POAS_DEVICE_SIM,
                  !b->devs[i].host_memory};
    snprintf(s->label, sizeof s->label, "%s", b->devs[i].id);
    size_t len = strlen(co->label);
    snprintf(co->label + len, sizeof co->label - len, "%s%s", i ? "+" : "", b->devs[i].id);
    if ((rc = open_context(&b->o, single[i], &s->ctx)) != 0) {
      for (int j = i - 1; j >= 0; j--)
        poas_finalize(b->sets[j].ctx);
      poas_finalize(all);
      free(single);
      return rc;
    }
  }
  free(single);
  b->nsets = b->ndevs + 1;
  return 0;
}

static int open_baselines(bench *b) {
  const char *list = b->o.baselines;
  if (strcmp(list, "none") == 0)
    return 0;
  char buf[256], *rest = buf;
  snprintf(buf, sizeof buf, "%s", list);
  int want[3] = {0, 0, 0};
  /* strsep, not strtok: an empty list or entry ("", "cblas,") is refused
   * instead of skipped, which made "" or "," mean none. */
  for (char *w; (w = strsep(&rest, ",")) != NULL;) {
    if (!*w)
      return bad("--baselines (an empty entry)", list);
    int found = 0;
    for (int i = 0; i < 3; i++)
      if (strcmp(w, "all") == 0 || strcmp(w, all_baselines[i]->name) == 0)
        want[i] = found = 1;
    if (!found)
      return bad("--baselines", w);
  }
  for (int i = 0; i < 3; i++) {
    if (!want[i])
      continue;
    baseline_slot *s = &b->bl[b->nbl];
    s->b = all_baselines[i];
    int rc = s->b->open(&s->state, s->desc, sizeof s->desc);
    if (rc == 0)
      b->nbl++;
    else { /* through a buffer of its own: gcc took desc, in *b too, for an overlap */
      char note[sizeof b->bl_notes[0]];
      snprintf(note, sizeof note, "poas-bench: %s baseline %s: %s\n", s->b->name,
               rc == BENCH_UNSUPPORTED ? "left out" : "failed", s->desc);
      memcpy(b->bl_notes[b->nbl_notes++], note, sizeof note);
    }
  }
  return 0;
}

/* ------------------------------------------------------------- running */

/* One thing to time: a POAS device set or a baseline. */
typedef struct runner {
  const char *label;
  bench_role role;
  poas_context *ctx;
  baseline_slot *bl;
  int check;
  int copies; /* its runs copy B whole: a fixed cost per run (bench_baseline) */
} runner;

static int run_once(const runner *r, const bench_problem *p, char *why, size_t cap) {
  if (r->bl)
    return r->bl->b->gemm(r->bl->state, p, why, cap);
  int64_t m = p->m, n = p->n, k = p->k;
  int rc = p->dtype == POAS_FLOAT64
               ? poas_dgemm(r->ctx, POAS_ROW_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, m, n, k, 1.0,
                            p->a, k, p->b, n, 0.0, p->c, n)
               : poas_sgemm(r->ctx, POAS_ROW_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, m, n, k, 1.0f,
                            p->a, k, p->b, n, 0.0f, p->c, n);
  if (rc)
    snprintf(why, cap, "%s: %s", poas_strerror(rc), poas_error_detail());
  return rc == POAS_ENOTSUP ? BENCH_UNSUPPORTED : rc ? BENCH_FAILED : 0;
}

static void progress(const bench *b, const bench_problem *p, const char *label, int run) {
  if (!b->tty)
    return;
  char what[32];
  if (run < 0)
    snprintf(what, sizeof what, "warm-up");
  else
    snprintf(what, sizeof what, "round %d/%d", run + 1, b->o.repeat);
  fprintf(stderr, "\r\033[K[%d/%d] %lldx%lldx%lld %s %s %s", b->step, b->nsteps,
          (long long)p->m, (long long)p->n, (long long)p->k, bench_dtype_name(p->dtype), label,
          what);
  fflush(stderr);
}

static int by_time(const void *a, const void *b) {
  double x = ((const double *)a)[0], y = ((const double *)b)[0];
  return (x > y) - (x < y);
}

/* The median of n (time, predicted, reported, run) rows, by time; returns
 * the run whose time is the median (the lower of the middle two). */
static int median(double (*t)[4], int n, double out[3]) {
  qsort(t, (size_t)n, sizeof *t, by_time);
  for (int j = 0; j < 3; j++)
    out[j] = n % 2 ? t[n / 2][j] : (t[n / 2 - 1][j] + t[n / 2][j]) / 2;
  return (int)t[(n - 1) / 2][3];
}

/* Appends to the text in buf (of `cap` bytes), truncating. */
static void append(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t cap, const char *fmt, ...) {
  size_t len = strlen(buf);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + len, cap - len, fmt, ap);
  va_end(ap);
}

/* One runner's measurement of one problem, run by run: its problem (its
 * own m under --alone-limit), its row, and each timed run's (time,
 * predicted, reported, run) and, for a co-executed set, report. */
typedef struct measurement {
  runner r;
  bench_problem p;
  bench_row *row;
  double (*t)[4];
  poas_report *reports;
  double worst; /* largest numerical error over its runs */
  int done;     /* a run failed: no more runs */
  /* A runner that copies B and runs a row block also runs half that block
   * (scale_to_whole's line): its companion, whose row is its own. */
  struct measurement *half;
  bench_row own_row;
} measurement;

/* Run `run` of m (-1: the warm-up), its result checked. A failed run ends
 * the runner's measurement with its row's status saying so. */
static void measure_run(bench *b, measurement *m, const bench_reference *ref, int run) {
  bench_problem *p = &m->p;
  b->step++;
  if (m->done)
    return;
  progress(b, p, m->r.label, run);
  bench_poison(p->c, p->dtype, (size_t)(p->m * p->n));
  double t0 = bench_now();
  int rc = run_once(&m->r, p, m->row->note, sizeof m->row->note);
  double dt = bench_now() - t0, predicted = NAN, reported = NAN;
  if (rc) {
    m->row->status = rc == BENCH_UNSUPPORTED ? "unsupported" : "failed";
    m->done = 1;
    return;
  }
  poas_report rep = {0};
  if (m->r.ctx && poas_last_report(m->r.ctx, &rep) == 0) {
    dt = rep.virtual_time ? rep.measured_s : dt;
    predicted = rep.predicted_s > 0 ? rep.predicted_s : NAN;
    reported = rep.measured_s;
  }
  double e = m->r.check ? bench_error(ref, p) : 0;
  m->worst = isnan(e) || isnan(m->worst) ? NAN : fmax(e, m->worst);
  if (run >= 0) {
    m->t[run][0] = dt, m->t[run][1] = predicted, m->t[run][2] = reported, m->t[run][3] = run;
    if (m->reports)
      m->reports[run] = rep;
  }
}

/* The row of a measurement whose runs are all done: the median run's
 * times and, for a co-executed set, what each device did in it. */
static void measure_finish(const bench *b, measurement *m) {
  bench_row *row = m->row;
  if (m->done)
    return;
  double med[3];
  int middle = median(m->t, b->o.repeat, med);
  if (m->reports) {
    row->ndev = m->reports[middle].ndevices;
    memcpy(row->dev, m->reports[middle].dev, sizeof row->dev);
    /* An even count's median time is the mean of the middle two runs, so
     * the shares and busy times its efficiency factors divide are theirs
     * pooled too: set beside one of them, the other's luck read as
     * contention and idle time (two runs of one sim alone and
     * co-executed, the same calls, read busy 1.20 and fill 0.83). */
    const poas_report *upper = &m->reports[(int)m->t[b->o.repeat / 2][3]];
    for (int d = 0; upper != &m->reports[middle] && d < row->ndev; d++) {
      row->dev[d].share = (row->dev[d].share + upper->dev[d].share) / 2;
      row->dev[d].busy_s = (row->dev[d].busy_s + upper->dev[d].busy_s) / 2;
    }
  }
  row->seconds = med[0], row->predicted_s = med[1], row->report_s = med[2];
  /* median() left the runs sorted by time. */
  row->fastest_s = m->t[0][0], row->slowest_s = m->t[b->o.repeat - 1][0];
  row->gflops = 2.0 * (double)m->p.m * (double)m->p.n * (double)m->p.k / row->seconds / 1e9;
  row->pred_error = (row->predicted_s - row->seconds) / row->seconds;
  if (m->r.check) {
    row->num_error = m->worst;
    if (!(m->worst <= row->num_bound))
      row->status = "inaccurate";
  } else {
    snprintf(row->note, sizeof row->note, "sim computes nothing: not checked");
  }
  /* A row whose runs spread widely is flagged: its median, and any ratio
   * taken from it, is as uncertain as the machine was steady. */
  double lo = row->fastest_s / row->seconds, hi = row->slowest_s / row->seconds;
  if (hi - lo > SPREAD_FLAG)
    append(row->note, sizeof row->note, "%sruns took %.2f-%.2fx the median",
           row->note[0] ? "; " : "", lo, hi);
}

static bench_row new_row(const bench_problem *p, const runner *r, int repeat) {
  bench_row row = {.m = p->m, .n = p->n, .k = p->k, .dtype = p->dtype, .role = r->role,
                   .repeat = repeat, .status = "ok"};
  snprintf(row.label, sizeof row.label, "%s", r->label);
  row.seconds = row.gflops = row.speedup = row.efficiency = row.ideal_gflops = row.vs_cblas =
      row.predicted_s = row.report_s = row.pred_error = row.num_error = row.used = row.corun =
          row.fill = row.fastest_s = row.slowest_s = NAN;
  row.num_bound = bench_error_bound(p->dtype, p->n, p->k);
  return row;
}

/* The alone rate of device `id` among one size's rows; NaN if none. */
static double alone_gflops(const bench_row *rows, int n, const char *id) {
  for (int i = 0; i < n; i++)
    if (rows[i].role == BENCH_DEVICE && strcmp(rows[i].label, id) == 0)
      return rows[i].gflops;
  return NAN;
}

/* Splits a co-executed row's efficiency into used x corun x fill (see
 * bench_row) and says in its note how fast each device ran beside the
 * others, against alone. Left NaN when a device's alone rate or busy time
 * is missing. */
static void efficiency_factors(bench_row *co, const bench_row *rows, int n) {
  double flops = 2.0 * (double)co->m * (double)co->n * (double)co->k / 1e9;
  double alone_sum = 0, corun_sum = 0;
  char rates[sizeof co->note] = "", idle[sizeof co->note] = "", failed[sizeof co->note] = "",
       learned[sizeof co->note] = "";
  for (int i = 0; i < co->ndev; i++) {
    const poas_device_report *dr = &co->dev[i];
    if (dr->learned > 0 && fabs(dr->learned - 1) >= 0.01)
      append(learned, sizeof learned, "%s%s %.2f", learned[0] ? ", " : "", dr->id, dr->learned);
    if (dr->failed)
      append(failed, sizeof failed, "%s%s", failed[0] ? ", " : "", dr->id);
    if (!(dr->share > 0)) {
      if (!dr->failed)
        append(idle, sizeof idle, "%s%s", idle[0] ? ", " : "", dr->id);
      continue;
    }
    double alone = alone_gflops(rows, n, dr->id);
    if (!(alone > 0) || !(dr->busy_s > 0))
      return;
    double corun = dr->share * flops / dr->busy_s;
    alone_sum += alone, corun_sum += corun;
    append(rates, sizeof rates, "%s%s %.2f", rates[0] ? ", " : "", dr->id, corun / alone);
  }
  if (!(alone_sum > 0) || !(co->ideal_gflops > 0) || isnan(co->gflops))
    return;
  co->used = alone_sum / co->ideal_gflops;
  co->corun = corun_sum / alone_sum;
  co->fill = co->gflops / corun_sum;
  append(co->note, sizeof co->note, "%sbusy vs alone: %s; fill %.2f", co->note[0] ? "; " : "",
         rates, co->fill);
  if (idle[0])
    append(co->note, sizeof co->note, "; no work for %s", idle);
  if (failed[0])
    append(co->note, sizeof co->note, "; %s failed in the median run, its work moved", failed);
  if (learned[0])
    append(co->note, sizeof co->note, "; models scaled by what earlier runs taught: %s",
           learned);
}

/* The ratios inside one size's rows: they come from the same run. */
static void compare(bench_row *rows, int n) {
  double ideal = 0, cblas = NAN;
  const bench_row *best_row = NULL; /* the fastest device alone */
  for (int i = 0; i < n; i++) {
    if (rows[i].role == BENCH_DEVICE && !isnan(rows[i].gflops)) {
      if (!best_row || rows[i].gflops > best_row->gflops)
        best_row = &rows[i];
      ideal += rows[i].gflops;
    }
    if (rows[i].role == BENCH_BASELINE && strcmp(rows[i].label, "cblas") == 0)
      cblas = rows[i].gflops;
  }
  double best = best_row ? best_row->gflops : NAN;
  if (!best_row) /* no device ran alone: no ideal to measure against */
    ideal = NAN;
  /* A device that failed alone has no rate in the ideal, which is then
   * too low and the efficiency too high: the co-executed rows say so. */
  char missing[256] = "";
  for (int i = 0; i < n; i++)
    if (rows[i].role == BENCH_DEVICE && isnan(rows[i].gflops) && rows[i].status &&
        strcmp(rows[i].status, "unsupported") != 0)
      append(missing, sizeof missing, "%s%s", missing[0] ? ", " : "", rows[i].label);
  for (int i = 0; i < n; i++) {
    rows[i].speedup = rows[i].gflops / best;
    rows[i].vs_cblas = rows[i].gflops / cblas;
    if (rows[i].role == BENCH_COEXEC) {
      rows[i].ideal_gflops = ideal;
      rows[i].efficiency = rows[i].gflops / ideal;
      if (missing[0] && !isnan(ideal))
        append(rows[i].note, sizeof rows[i].note,
               "%sthe ideal leaves out %s, which had no rate alone: efficiency overstated",
               rows[i].note[0] ? "; " : "", missing);
      /* Co-execution must never lose to the best device alone: say so
       * where it did, first, rather than leave it to the speedup column,
       * and whether the loss is within what that device's own runs spread
       * (its slowest run took at least the co-executed median). */
      if (rows[i].speedup < 1) {
        /* Where the plan gave that device all the work, the two rows ran
         * the same calls: the gap is the machine's, between their runs. */
        int same = 0;
        for (int d = 0; d < rows[i].ndev; d++)
          same |= strcmp(rows[i].dev[d].id, best_row->label) == 0 && rows[i].dev[d].share >= 1;
        /* As many decimals as show it below 1 (up to 6): two read 1.00x
         * beside "slower". */
        int digits = 2;
        while (digits < 6 && rows[i].speedup >= 1 - 0.5 * pow(10, -digits))
          digits++;
        append(rows[i].note, sizeof rows[i].note, "%sslower than %s alone (%.*fx%s%s)",
               rows[i].note[0] ? "; " : "", best_row->label, digits, rows[i].speedup,
               best_row->slowest_s >= rows[i].seconds ? ", within its runs' spread" : "",
               same ? ", on the same plan: the machine moved between their runs" : "");
      }
      efficiency_factors(&rows[i], rows, n);
    }
  }
}

/* The first rows of p that take `limit` seconds at the rate that gives the
 * whole problem `whole` seconds: a multiple of 256, at least 256, at most
 * all of them. */
static int64_t rows_within(const bench_problem *p, double whole, double limit) {
  double rows = (double)p->m * limit / whole;
  int64_t block = ((int64_t)ceil(rows) + 255) / 256 * 256;
  return block < p->m ? block : p->m;
}

/* The rows of A and C a device alone runs: all of them, or with
 * --alone-limit, when its plan predicts more than the limit for the whole
 * problem, the first rows that fit in the limit (a multiple of 256, at
 * least 256). A row block of the full n and k is what a row split hands the
 * device when it co-executes, so its rate is the device's rate on this
 * problem, without minutes of waiting for a slow device at large sizes. */
static int64_t alone_rows(const bench *b, const runner *r, const bench_problem *p) {
  poas_plan plan;
  if (!(b->o.alone_limit > 0) || !r->ctx ||
      poas_plan_gemm_call(r->ctx, p->dtype, POAS_ROW_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, p->m,
                          p->n, p->k, 1, 0, &plan) != 0 ||
      !(plan.makespan_s > b->o.alone_limit))
    return p->m;
  return rows_within(p, plan.makespan_s, b->o.alone_limit);
}

/* The rows a baseline runs under --alone-limit. A baseline has no plan to
 * predict its time, so one untimed call on the first 256 rows (a row block
 * of the full n and k, at the library's rate on this problem) gives its
 * rate; when the whole problem would take more than the limit at that
 * rate, it runs the first rows the limit allows, like a device alone. The
 * probe's fixed costs only make the estimate longer, so a fast baseline is
 * never cut short by them unless it already runs near the limit. */
static int64_t baseline_rows(const bench *b, const runner *r, const bench_problem *p) {
  if (!(b->o.alone_limit > 0) || p->m <= 256)
    return p->m;
  bench_problem probe = *p;
  probe.m = 256;
  char why[256];
  double t0 = bench_now();
  if (run_once(r, &probe, why, sizeof why) != 0)
    return p->m; /* the real run says what failed */
  double whole = (bench_now() - t0) * (double)p->m / 256.0;
  if (!(whole > b->o.alone_limit))
    return p->m;
  return rows_within(p, whole, b->o.alone_limit);
}

/* A row measured on `rows` of the problem's m rows: its times become the
 * whole problem's, and its note says what ran, as an inclusive range of
 * rows (0..255 for 256). Without `half` (NULL), at the same rate per row.
 * With it, the same runner's row on half as many rows, the times are
 * extrapolated along the line through the two: a runner that copies B
 * whole to a device pays that copy once per run whatever rows A has, and
 * scaling it with the rows made the H100's cuBLAS with synchronous copies
 * read 3.6 TFLOP/s at sgemm 32768^3 from a block of 1024 rows, where the
 * whole problem ran at 24.8. */
static void scale_to_whole(bench_row *row, const bench_row *half, const bench_problem *p,
                           int64_t rows) {
  double r = (double)rows, m = (double)p->m;
  /* What the line through (r/2, at_half) and (r, at_r) says of m rows. */
#define ALONG_LINE(at_r, at_half) ((at_r) + ((at_r) - (at_half)) / (r / 2) * (m - r))
  double whole = half ? ALONG_LINE(row->seconds, half->seconds) : NAN;
  double fixed = half ? 2 * half->seconds - row->seconds : NAN; /* the line at 0 rows */
  /* A line that does not rise with the rows, or that says the rows cost
   * more than the whole run (a negative fixed part), is noise: then the
   * same rate. */
  int line = half && half->seconds > 0 && row->seconds > half->seconds && fixed >= 0;
  double f = line ? whole / row->seconds : m / r;
  if (line) {
    row->predicted_s = ALONG_LINE(row->predicted_s, half->predicted_s);
    row->report_s = ALONG_LINE(row->report_s, half->report_s);
  } else {
    row->predicted_s *= f, row->report_s *= f;
  }
#undef ALONG_LINE
  row->seconds *= f, row->fastest_s *= f, row->slowest_s *= f;
  row->gflops = 2.0 * m * (double)p->n * (double)p->k / row->seconds / 1e9;
  row->pred_error = (row->predicted_s - row->seconds) / row->seconds;
  if (line)
    append(row->note, sizeof row->note,
           "%srows 0..%lld and 0..%lld of %lld measured (--alone-limit), times extrapolated "
           "along their line (%.3g s per run whatever the rows)",
           row->note[0] ? "; " : "", (long long)rows - 1, (long long)(rows / 2) - 1,
           (long long)p->m, fixed);
  else
    append(row->note, sizeof row->note,
           "%srows 0..%lld of %lld measured (--alone-limit), times scaled by %.2f",
           row->note[0] ? "; " : "", (long long)rows - 1, (long long)p->m, f);
}

/* The warm-up runs of r before its timed ones (see WARMUPS). */
static int warmups(const runner *r) {
  return r->role == BENCH_BASELINE ? BASELINE_WARMUPS : WARMUPS;
}

/* Runner i of the device sets then the baselines. */
static runner runner_of(bench *b, int i) {
  if (i < b->nsets)
    return (runner){b->sets[i].label, b->sets[i].role, b->sets[i].ctx, NULL, !b->sets[i].has_sim,
                    b->sets[i].copies};
  const baseline_slot *bl = &b->bl[i - b->nsets];
  return (runner){bl->b->name, BENCH_BASELINE, NULL, &b->bl[i - b->nsets], 1, bl->b->copies};
}

/* A problem that cannot run: one failed row per runner, saying why, so
 * that the output still says what was not measured. */
static void skip_problem(bench *b, const bench_problem *p, const char *why) {
  for (int i = 0; i < b->nsets + b->nbl; i++) {
    runner r = runner_of(b, i);
    b->step += b->o.repeat + warmups(&r);
    bench_row *row = &b->rows[b->nrows++];
    *row = new_row(p, &r, b->o.repeat);
    row->status = "failed";
    snprintf(row->note, sizeof row->note, "%s", why);
  }
}

static void free_measurements(measurement *ms, int n) {
  for (int i = 0; ms && i < n; i++)
    free(ms[i].t), free(ms[i].reports);
  free(ms);
}

/* Runs every device set and baseline on one problem; its rows are appended
 * to b->rows. Each runner has its warm-up, then the timed runs go in
 * rounds, every runner once per round, the first of each round moving on
 * by one: a machine whose speed drifts while the problem runs (a shared VM,
 * a GPU whose clock follows its load, PoCL's rate on the CI VM moving 2x
 * within minutes) then slows every runner alike, and the ratios between
 * them (speedup, efficiency, against cblas) stay side by side instead of
 * taking the drift between one runner's runs and the next's. */
static void run_problem(bench *b, const bench_problem *p, const bench_reference *ref) {
  int first = b->nrows, n = b->nsets + b->nbl, total = n;
  /* The runners, then their companions (at most one each), and the order
   * of a round. */
  measurement *ms = calloc((size_t)(2 * n), sizeof *ms);
  int *order = malloc((size_t)(2 * n) * sizeof *order);
  int ok = ms && order;
  for (int i = 0; ok && i < n; i++) {
    measurement *m = &ms[i];
    m->r = runner_of(b, i);
    m->p = *p;
    m->row = &b->rows[b->nrows++];
    *m->row = new_row(p, &m->r, b->o.repeat);
    if (m->r.role == BENCH_DEVICE)
      m->p.m = alone_rows(b, &m->r, p);
    else if (m->r.role == BENCH_BASELINE)
      m->p.m = baseline_rows(b, &m->r, p);
    if (m->p.m < p->m && m->r.copies) {
      measurement *h = m->half = &ms[total++];
      h->r = m->r;
      h->p = m->p;
      h->p.m /= 2;
      h->row = &h->own_row;
      *h->row = new_row(&h->p, &h->r, b->o.repeat);
      b->nsteps += b->o.repeat + warmups(&h->r);
    }
  }
  for (int i = 0; ok && i < total; i++) {
    measurement *m = &ms[i];
    m->t = malloc((size_t)b->o.repeat * sizeof *m->t);
    if (m->r.role == BENCH_COEXEC)
      m->reports = calloc((size_t)b->o.repeat, sizeof *m->reports);
    ok = m->t && (m->r.role != BENCH_COEXEC || m->reports);
  }
  if (!ok) {
    free(order);
    free_measurements(ms, 2 * n);
    b->nrows = first;
    skip_problem(b, p, "out of host memory for the timings");
    return;
  }
  for (int i = 0; i < total; i++)
    for (int w = 0; w < warmups(&ms[i].r); w++)
      measure_run(b, &ms[i], ref, -1);
  /* Each round in a new order: whatever a run leaves behind (an OpenCL
   * driver's threads winding down, caches, pages) then falls on a
   * different runner each round. Rounds that only rotated one order kept
   * every runner behind the same one: the cpu device always ran right
   * after CLBlast, cblas after the co-executed run. */
  uint64_t seed = 1;
  for (int j = 0; j < total; j++)
    order[j] = j;
  for (int run = 0; run < b->o.repeat; run++) {
    bench_shuffle(order, total, &seed);
    for (int j = 0; j < total; j++)
      measure_run(b, &ms[order[j]], ref, run);
  }
  free(order);
  for (int i = 0; i < total; i++)
    measure_finish(b, &ms[i]);
  for (int i = 0; i < n; i++) {
    measurement *m = &ms[i];
    const bench_row *half = m->half && !m->half->done ? m->half->row : NULL;
    /* The half block's results were checked too, and its row is not
     * printed: a wrong one counts against the row it helped time. */
    if (half && m->r.check) {
      /* fmax would drop a NaN, which must fail the row as it is. */
      m->row->num_error = isnan(m->row->num_error) || isnan(half->num_error)
                              ? NAN
                              : fmax(m->row->num_error, half->num_error);
      if (strcmp(half->status, "inaccurate") == 0)
        m->row->status = "inaccurate";
    }
    if (m->p.m < p->m && !isnan(m->row->seconds))
      scale_to_whole(m->row, half, p, m->p.m);
  }
  free_measurements(ms, 2 * n);
  compare(b->rows + first, b->nrows - first);
}

/* Whether the host's memory (tool_host_memory) can hold the operands of
 * every shape in every dtype asked for; says on stderr which it cannot.
 * Checked before the run, which otherwise failed such a shape's rows only
 * after opening everything. Not a usage error: the same sizes run on a
 * larger machine. */
static int shapes_fit(const options *o) {
  int fit = 1;
  for (int i = 0; i < o->nshapes; i++)
    for (int j = 0; j < o->ndtypes; j++) {
      const bench_shape *s = &o->shapes[i];
      double need = ((double)s->m * (double)s->k + (double)s->k * (double)s->n +
                     (double)s->m * (double)s->n) *
                    (double)bench_dtype_size(o->dtypes[j]);
      char why[128];
      if (tool_memory_holds(need, why, sizeof why))
        continue;
      fprintf(stderr, "poas-bench: %lldx%lldx%lld %s: A, B and C need %s\n", (long long)s->m,
              (long long)s->n, (long long)s->k, bench_dtype_name(o->dtypes[j]), why);
      fit = 0;
    }
  return fit;
}

static void run_shape(bench *b, bench_shape s, poas_dtype dtype, bench_output *out) {
  size_t es = bench_dtype_size(dtype);
  bench_problem p = {dtype, s.m, s.n, s.k, NULL, NULL, NULL};
  void *a = malloc((size_t)(s.m * s.k) * es), *bm = malloc((size_t)(s.k * s.n) * es),
       *c = malloc((size_t)(s.m * s.n) * es);
  bench_reference ref = {0};
  int first = b->nrows;
  p.a = a, p.b = bm, p.c = c;
  if (a && bm && c) {
    bench_fill(a, dtype, (size_t)(s.m * s.k), 11);
    bench_fill(bm, dtype, (size_t)(s.k * s.n), 12);
  }
  if (a && bm && c && bench_reference_init(&ref, &p, 13) == 0) {
    run_problem(b, &p, &ref);
    bench_reference_free(&ref);
  } else {
    skip_problem(b, &p, "out of host memory for the operands");
  }
  free(c), free(bm), free(a);
  if (b->tty)
    fprintf(stderr, "\r\033[K");
  int err = bench_table_rows(out->table, b->rows + first, b->nrows - first);
  out->table_err = out->table_err ? out->table_err : err;
  err = bench_csv_rows(out->csv->f, b->rows + first, b->nrows - first);
  out->csv_err = out->csv_err ? out->csv_err : err;
  if (!out->csv_err) /* a stop from here on keeps them */
    bench_file_keep_partial(out->csv, b->nrows);
}

/* --------------------------------------------------------------- main */

static void close_all(bench *b) {
  for (int i = b->nsets - 1; i >= 0; i--)
    poas_finalize(b->sets[i].ctx);
  for (int i = b->nbl - 1; i >= 0; i--)
    b->bl[i].b->close(b->bl[i].state);
}

/* Closes the CSV, which then takes the place of the file at `path`; 0, or
 * -1 having said on stderr why it could not be written (a full disk: the
 * run's rows are lost, and the file at `path` is left as it was rather
 * than what was written of them). `err` is the errno of an earlier failed
 * write, or 0. */
static int close_csv(bench_file *csv, const char *path, int err) {
  if ((err = bench_file_close(csv, err)) != 0)
    fprintf(stderr, "poas-bench: cannot write the CSV %s: %s\n", path, strerror(err));
  return err ? -1 : 0;
}

/* Says why stdout could not be written, from `err`, the errno of the
 * first flush of it that failed (0: none), and returns whether it did.
 * glibc drops what a failed flush held: tool_stdout_status's flush at
 * exit then finds nothing to write, only the error flag, and said
 * "Input/output error" for a full disk. The flag is cleared once the
 * real reason is said, so that it is said once. */
static int stdout_lost(int err) {
  if (!err)
    return 0;
  fprintf(stderr, "poas-bench: cannot write the output: %s\n", strerror(err));
  clearerr(stdout);
  return 1;
}

static void default_csv_name(char *buf, size_t cap) {
  time_t t = time(NULL);
  struct tm tm;
  localtime_r(&t, &tm);
  strftime(buf, cap, "bench-%Y%m%d-%H%M%S.csv", &tm);
}

/* Says which rows failed or exceeded their bound; returns how many. */
static int report_failures(const bench *b) {
  int bad_rows = 0;
  for (int i = 0; i < b->nrows; i++) {
    const bench_row *r = &b->rows[i];
    if (strcmp(r->status, "inaccurate") == 0)
      fprintf(stderr, "poas-bench: %lldx%lldx%lld %s %s: numerical error %.2e exceeds %.2e\n",
              (long long)r->m, (long long)r->n, (long long)r->k, bench_dtype_name(r->dtype),
              r->label, r->num_error, r->num_bound);
    else if (strcmp(r->status, "failed") == 0)
      fprintf(stderr, "poas-bench: %lldx%lldx%lld %s %s failed: %s\n", (long long)r->m,
              (long long)r->n, (long long)r->k, bench_dtype_name(r->dtype), r->label, r->note);
    else
      continue;
    bad_rows++;
  }
  return bad_rows;
}

/* The JSON object on stdout: 0, or the errno of a failed write. */
static int write_json(const bench *b, int argc, char **argv, const char *csv, const char *plot) {
  char line[2048] = "";
  size_t len = 0;
  for (int i = 0; i < argc && len < sizeof line; i++)
    len += (size_t)snprintf(line + len, sizeof line - len, "%s%s", i ? " " : "",
                            i ? argv[i] : "poas-bench");
  const char *descs[3];
  char text[3][300];
  for (int i = 0; i < b->nbl; i++) {
    snprintf(text[i], sizeof text[i], "%s: %s", b->bl[i].b->name, b->bl[i].desc);
    descs[i] = text[i];
  }
  return bench_json(stdout, line, b->devs, b->ndevs, descs, b->nbl, b->rows, b->nrows, csv, plot);
}

/* Whether the SVG `plot` would be written over the CSV `csv`, which is
 * then said on stderr: a usage error. */
static int plot_over_csv(const char *prog, const char *plot, const char *csv) {
  if (!bench_same_file(plot, csv))
    return 0;
  fprintf(stderr, "%s: --plot %s is the same file as the CSV %s\n", prog, plot, csv);
  return 1;
}

/* `poas-bench gemm ...`: argv[1] is "gemm", whose options follow. */
static int gemm_main(int argc, char **argv) {
  static bench b;
  int rc = parse_options(argc - 1, argv + 1, &b.o);
  if (rc != TOOL_GO_ON)
    return rc;
  char csv_name[64];
  const char *csv_path = b.o.csv;
  if (!csv_path) {
    default_csv_name(csv_name, sizeof csv_name);
    csv_path = csv_name;
  }
  if (b.o.plot && plot_over_csv("poas-bench", b.o.plot, csv_path))
    return 2;
  /* Sizes the host cannot hold are refused before the devices open: a
   * GPU's or a cold PoCL's opening alone can take seconds. */
  if (!shapes_fit(&b.o))
    return 1;
  /* The baselines open first: cblas records the process's CPU mask before
   * any POAS device has bound a thread. The CSV's new file is made only
   * once the run can start, so that a bad argument leaves nothing behind. */
  if ((rc = open_baselines(&b)) == 0 && (rc = open_sets(&b)) != 0)
    rc = rc == POAS_ESPEC ? 2 : 1; /* a malformed selection is a usage error */
  if (rc) {
    close_all(&b);
    return rc;
  }
  for (int i = 0; i < b.nbl_notes; i++)
    fputs(b.bl_notes[i], stderr);
  /* What would fail the run after its minutes of measuring is checked
   * before it: the operands of every size (above), then the outputs
   * written at the end, the plot and the CSV, whose new file is made here. An earlier
   * CSV stays as it was until the run ends. */
  char why[256];
  int err;
  if (b.o.plot && bench_plot_check(b.o.plot, why, sizeof why) != 0) {
    fprintf(stderr, "poas-bench: cannot write the plot %s: %s\n", b.o.plot, why);
    close_all(&b);
    return 1;
  }
  bench_file csv;
  if (bench_file_open(&csv, csv_path, BENCH_OUTPUT_CSV, why, sizeof why) != 0) {
    fprintf(stderr, "poas-bench: cannot write the CSV %s: %s\n", csv_path, why);
    close_all(&b);
    return 1;
  }
  bench_output out = {b.o.json ? stderr : stdout, &csv, b.o.json, 0, 0};
  b.tty = isatty(STDERR_FILENO);
  int nrows = b.o.nshapes * b.o.ndtypes * (b.nsets + b.nbl);
  for (int i = 0; i < b.nsets + b.nbl; i++) {
    runner r = runner_of(&b, i);
    b.nsteps += b.o.nshapes * b.o.ndtypes * (b.o.repeat + warmups(&r));
  }
  b.rows = calloc((size_t)nrows, sizeof *b.rows);
  if (!b.rows) {
    fprintf(stderr, "poas-bench: out of memory\n");
    close_all(&b);
    bench_file_close(&csv, ENOMEM);
    return 1;
  }
  /* A CSV that takes no header (a full disk) would take no rows either. */
  if ((err = bench_csv_header(out.csv->f)) != 0) {
    close_all(&b);
    close_csv(&csv, csv_path, err);
    free(b.rows);
    return 1;
  }
  /* The host's state before and after, since a run's ratios depend on it
   * and it can change while they are taken; not where nothing real runs
   * (sims alone, no baseline), whose times the host's state does not touch. */
  int real = b.nbl > 0;
  for (int i = 0; i < b.ndevs; i++)
    real |= b.devs[i].kind != POAS_DEVICE_SIM;
  bench_handoff handoff;
  if (real) {
    bench_handoff_probe(&handoff);
    bench_handoff_print(stderr, "poas-bench", "before", &handoff);
  }
  bench_table_header(out.table);
  for (int i = 0; i < b.o.nshapes; i++)
    for (int j = 0; j < b.o.ndtypes; j++)
      run_shape(&b, b.o.shapes[i], b.o.dtypes[j], &out);
  if (real) {
    bench_handoff_probe(&handoff);
    bench_handoff_print(stderr, "poas-bench", "after", &handoff);
  }
  close_all(&b);
  int csv_failed = close_csv(&csv, csv_path, out.csv_err) != 0;
  const char *plot = b.o.plot;
  int plot_failed = plot && bench_plot(plot, b.rows, b.nrows, why, sizeof why) != 0;
  if (plot_failed) {
    fprintf(stderr, "poas-bench: cannot write the plot %s: %s\n", plot, why);
    plot = NULL;
  }
  int json_err = b.o.json ? write_json(&b, argc, argv, csv_path, plot) : 0;
  int failures = report_failures(&b);
  free(b.rows);
  int lost = stdout_lost(b.o.json ? json_err : out.table_err);
  return failures || csv_failed || plot_failed || lost ? 1 : 0;
}

static void plot_usage(FILE *f) {
  fprintf(f, "Usage: poas-bench plot --plot FILE.svg CSV...\n"
             "Plot GFLOP/s against size again from CSVs that poas-bench gemm wrote (one line\n"
             "per device set, the ideal dashed), through gnuplot; the runs of several CSVs\n"
             "join series by series.\n\n"
             "  -p, --plot FILE.svg   the plot to write, a file other than the CSVs\n"
             "  -h, --help            show this help\n"
             "  -V, --version         show the version\n\n"
             "Exit status: 0 when the plot was written, 1 when a CSV could not be read or\n"
             "the plot written, 2 on a usage error.\n");
}

/* `poas-bench plot --plot FILE.svg CSV...`: argv[1] is "plot", whose
 * options and CSV files follow. */
static int plot_main(int argc, char **argv) {
  static const struct option longopts[] = {{"plot", required_argument, NULL, 'p'},
                                           TOOL_LONGOPTS_END};
  static bench_row rows[4096];
  const char *out = NULL;
  int nrows = 0, c, status;
  char why[512];
  argc--, argv++;
  /* Its version is poas-bench's, and main checks stdout. */
  const tool_cli cli = {.prog = "poas-bench",
                        .command = "plot",
                        .usage = plot_usage,
                        .argc = argc,
                        .argv = argv,
                        .longopts = longopts,
                        .stdout_checked_later = 1};
  while ((c = tool_getopt(&cli, "p:hV")) != -1) {
    if (c == 'p')
      out = optarg;
    else if ((status = tool_shared_option(&cli, c, optarg)) != TOOL_GO_ON)
      return status;
  }
  if (!out || optind == argc) {
    fprintf(stderr, "poas-bench plot: need --plot FILE.svg and at least one CSV\n");
    return 2;
  }
  if (!tool_file_named("poas-bench plot", "plot", out))
    return 2;
  if (plot_name_bad("poas-bench plot", "poas-bench plot", out))
    return 2;
  for (int i = optind; i < argc; i++)
    if (plot_over_csv("poas-bench plot", out, argv[i]))
      return 2;
  for (int i = optind; i < argc; i++) {
    int before = nrows;
    if (bench_read_csv(argv[i], rows, 4096, &nrows, why, sizeof why) != 0) {
      fprintf(stderr, "poas-bench plot: %s\n", why);
      return 1;
    }
    if (nrows == before) {
      fprintf(stderr, "poas-bench plot: no rows to plot in %s\n", argv[i]);
      return 1;
    }
  }
  if (bench_plot(out, rows, nrows, why, sizeof why) != 0) {
    fprintf(stderr, "poas-bench plot: cannot write the plot %s: %s\n", out, why);
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  tool_std_ready();
  const char *cmd = argc > 1 ? argv[1] : "";
  if (strcmp(cmd, "gemm") == 0)
    return tool_stdout_status("poas-bench", gemm_main(argc, argv));
  if (strcmp(cmd, "plot") == 0)
    return tool_stdout_status("poas-bench", plot_main(argc, argv));
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
    usage(stdout);
    return tool_stdout_status("poas-bench", 0);
  }
  if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0) {
    printf("poas-bench (POAS) %s\n", poas_version());
    return tool_stdout_status("poas-bench", 0);
  }
  fprintf(stderr, "poas-bench: %s%s%s (the commands are gemm and plot; see poas-bench --help)\n",
          *cmd ? "unknown command '" : "no command given", cmd, *cmd ? "'" : "");
  return 2;
}
