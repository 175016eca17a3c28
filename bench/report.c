/* report.c: what poas-bench writes: the table for people, the CSV and the
 * JSON object for scripts (same rows, same names), and the SVG plot drawn by
 * gnuplot; the files among them are written whole or not at all. Quantities
 * that do not apply are NaN in a row: "-" in the table, an empty CSV field,
 * null in JSON. */
#include "config.h"

#include "bench/bench.h"
#include "bench/cli.h"
#include "core/path.h"
#include "tools/json-out.h"
#include "tools/stdout-check.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

const char *bench_dtype_name(poas_dtype dtype) { return dtype == POAS_FLOAT64 ? "d" : "s"; }

const char *bench_role_name(bench_role role) {
  return role == BENCH_COEXEC ? "coexec" : role == BENCH_BASELINE ? "baseline" : "device";
}

/* --------------------------------------------------------------- table */

static const char *cell(char *buf, size_t cap, const char *fmt, double v) {
  if (!isfinite(v))
    return "-";
  snprintf(buf, cap, fmt, v);
  return buf;
}

void bench_table_header(FILE *f) {
  fprintf(f, "%-17s %-5s %-24s %9s %8s %7s %10s %10s %9s %9s  %s\n", "size", "dtype", "devices",
          "GFLOP/s", "speedup", "effic.", "pred. s", "meas. s", "pred.err", "num.err", "status");
}

int bench_table_rows(FILE *f, const bench_row *rows, int nrows) {
  for (int i = 0; i < nrows; i++) {
    const bench_row *r = &rows[i];
    char size[64], b[8][32];
    snprintf(size, sizeof size, "%lldx%lldx%lld", (long long)r->m, (long long)r->n,
             (long long)r->k);
    /* An error under 0.05% prints as 0.0%, not as the -0.0% a sim's
     * rounding residue of 1e-16 made. A NaN result is "nan": "-" is what
     * a row that was not checked shows. */
    double pred_error = fabs(r->pred_error) < 5e-4 ? 0 : r->pred_error;
    int nan_result = isnan(r->num_error) && strcmp(r->status, "inaccurate") == 0;
    fprintf(f, "%-17s %-5s %-24s %9s %8s %7s %10s %10s %9s %9s  %s%s%s\n", size,
            bench_dtype_name(r->dtype), r->label, cell(b[0], 32, "%.1f", r->gflops),
            cell(b[1], 32, "%.2fx", r->speedup), cell(b[2], 32, "%.2f", r->efficiency),
            cell(b[3], 32, "%.4g", r->predicted_s), cell(b[4], 32, "%.4g", r->seconds),
            cell(b[5], 32, "%+.1f%%", 100 * pred_error),
            nan_result ? "nan" : cell(b[6], 32, "%.1e", r->num_error), r->status,
            r->note[0] ? ": " : "", r->note);
  }
  return tool_flush_errno(f);
}

/* ----------------------------------------------------------------- CSV */

static const char *const columns[] = {
    "m",           "n",           "k",           "dtype",      "devices",
    "role",        "repeat",      "measured_s",  "gflops",     "speedup",
    "efficiency",  "ideal_gflops", "vs_cblas",   "predicted_s", "report_measured_s",
    "prediction_error", "numerical_error", "error_bound", "eff_used", "eff_corun",
    "eff_fill",    "fastest_s",   "slowest_s",  "status",      "note"};
enum { NCOLUMNS = sizeof columns / sizeof *columns, NNUMBERS = NCOLUMNS - 9 };

/* The numeric fields of a row, in column order from "measured_s". */
static void row_numbers(const bench_row *r, double out[NNUMBERS]) {
  double v[NNUMBERS] = {r->seconds,   r->gflops,     r->speedup,    r->efficiency,
                        r->ideal_gflops, r->vs_cblas, r->predicted_s, r->report_s,
                        r->pred_error, r->num_error,  r->num_bound,  r->used,
                        r->corun,     r->fill,       r->fastest_s,  r->slowest_s};
  memcpy(out, v, sizeof v);
}

int bench_csv_header(FILE *f) {
  for (int i = 0; i < NCOLUMNS; i++)
    fprintf(f, "%s%s", i ? "," : "", columns[i]);
  fputc('\n', f);
  return tool_flush_errno(f);
}

static void csv_text(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"')
      fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
}

int bench_csv_rows(FILE *f, const bench_row *rows, int nrows) {
  for (int i = 0; i < nrows; i++) {
    const bench_row *r = &rows[i];
    fprintf(f, "%lld,%lld,%lld,%s,%s,%s,%d", (long long)r->m, (long long)r->n, (long long)r->k,
            bench_dtype_name(r->dtype), r->label, bench_role_name(r->role), r->repeat);
    double v[NNUMBERS];
    row_numbers(r, v);
    for (int j = 0; j < NNUMBERS; j++) /* what is missing or has no value: empty */
      isfinite(v[j]) ? fprintf(f, ",%.6g", v[j]) : fputc(',', f);
    fprintf(f, ",%s,", r->status);
    csv_text(f, r->note);
    fputc('\n', f);
  }
  return tool_flush_errno(f);
}

/* ---------------------------------------------------------------- JSON */

static void json_row(FILE *f, const bench_row *r) {
  fprintf(f, "{\"m\": %lld, \"n\": %lld, \"k\": %lld, \"dtype\": \"%s\", \"devices\": ",
          (long long)r->m, (long long)r->n, (long long)r->k, bench_dtype_name(r->dtype));
  tool_json_string(f, r->label);
  fprintf(f, ", \"role\": \"%s\", \"repeat\": %d", bench_role_name(r->role), r->repeat);
  double v[NNUMBERS];
  row_numbers(r, v);
  for (int j = 0; j < NNUMBERS; j++) {
    fprintf(f, ", \"%s\": ", columns[7 + j]);
    /* JSON has no infinity: what has no value is null, as what is missing. */
    isfinite(v[j]) ? fprintf(f, "%.6g", v[j]) : fputs("null", f);
  }
  fprintf(f, ", \"status\": \"%s\", \"note\": ", r->status);
  tool_json_string(f, r->note);
  fputc('}', f);
}

int bench_json(FILE *f, const char *argv_line, const poas_device_info *devices, int ndevices,
               const char *const *baselines, int nbaselines, const bench_row *rows, int nrows,
               const char *csv_path, const char *plot_path) {
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  fprintf(f, "{\"tool\": \"poas-bench\", \"version\": ");
  tool_json_string(f, poas_version());
  fprintf(f, ", \"command\": ");
  tool_json_string(f, argv_line);
  fprintf(f, ", \"host\": ");
  tool_json_string(f, host);
  fprintf(f, ", \"devices\": [");
  for (int i = 0; i < ndevices; i++) {
    fprintf(f, "%s{\"id\": ", i ? ", " : "");
    tool_json_string(f, devices[i].id);
    fprintf(f, ", \"kind\": \"%s\", \"name\": ", poas_device_kind_name(devices[i].kind));
    tool_json_string(f, devices[i].name);
    fputc('}', f);
  }
  fprintf(f, "], \"baselines\": [");
  for (int i = 0; i < nbaselines; i++) {
    fputs(i ? ", " : "", f);
    tool_json_string(f, baselines[i]);
  }
  fprintf(f, "], \"csv\": ");
  tool_json_string(f, csv_path);
  fprintf(f, ", \"plot\": ");
  plot_path ? tool_json_string(f, plot_path) : (void)fputs("null", f);
  fprintf(f, ", \"rows\": [");
  for (int i = 0; i < nrows; i++) {
    fputs(i ? ",\n  " : "\n  ", f);
    json_row(f, &rows[i]);
  }
  fprintf(f, "\n]}\n");
  return tool_flush_errno(f);
}

/* ---------------------------------------------------------------- plot */

/* A problem's size on the plot's axis: n for a square one, the cube root
 * of m n k (the side of the square problem of equal work) otherwise. */
static double plot_size(const bench_row *r) {
  return cbrt((double)r->m * (double)r->n * (double)r->k);
}

static int same_series(const bench_row *a, const bench_row *b) {
  return a->dtype == b->dtype && strcmp(a->label, b->label) == 0;
}

/* Writes one series as a gnuplot datablock, points sorted by size. `ideal`
 * takes the co-executed rows' ideal rate instead of their own. Returns 0,
 * or -1 with nothing written when there is no memory to sort the points:
 * a series held 512 at most, and the points of CSVs joined past that were
 * left out of the plot without a word. */
static int datablock(FILE *g, int id, const bench_row *rows, int nrows, const bench_row *first,
                     int ideal) {
  double *x = malloc(2 * sizeof *x * (size_t)nrows);
  if (!x)
    return -1;
  double *y = x + nrows;
  int np = 0;
  for (int i = 0; i < nrows; i++) {
    double v = ideal ? rows[i].ideal_gflops : rows[i].gflops;
    if (same_series(&rows[i], first) && !isnan(v))
      x[np] = plot_size(&rows[i]), y[np++] = v;
  }
  for (int i = 1; i < np; i++)
    for (int j = i; j > 0 && x[j - 1] > x[j]; j--) {
      double tx = x[j], ty = y[j];
      x[j] = x[j - 1], y[j] = y[j - 1], x[j - 1] = tx, y[j - 1] = ty;
    }
  fprintf(g, "$d%d << EOD\n", id);
  for (int i = 0; i < np; i++)
    fprintf(g, "%.6g %.6g\n", x[i], y[i]);
  fprintf(g, "EOD\n");
  free(x);
  return 0;
}

/* gnuplot's single-quoted strings escape a quote by doubling it. */
static void gp_string(FILE *g, const char *s) {
  fputc('\'', g);
  for (; *s; s++) {
    if (*s == '\'')
      fputc('\'', g);
    fputc(*s, g);
  }
  fputc('\'', g);
}

/* Whether row i is the first of its series. */
static int opens_series(const bench_row *rows, int i) {
  for (int j = 0; j < i; j++)
    if (same_series(&rows[j], &rows[i]))
      return 0;
  return 1;
}

/* Whether the plot draws row i's series (its ideal, with `ideal`): the
 * series opens at row i and one of its rows has that rate. A series with
 * none (a baseline whose every run failed) went to gnuplot as an empty
 * datablock, and gnuplot warned of it on stderr, into recorded runs. */
static int draws(const bench_row *rows, int nrows, int i, int ideal) {
  if (!opens_series(rows, i))
    return 0;
  for (int j = i; j < nrows; j++)
    if (same_series(&rows[j], &rows[i]) && !isnan(ideal ? rows[j].ideal_gflops : rows[j].gflops))
      return 1;
  return 0;
}

/* The spans of what the plot draws, sizes on x and rates on y (each row's
 * rate, and a co-executed row's ideal); lo > hi where nothing is drawn. */
static void plot_spans(const bench_row *rows, int nrows, double x[2], double y[2]) {
  x[0] = y[0] = INFINITY, x[1] = y[1] = -INFINITY;
  for (int i = 0; i < nrows; i++)
    for (int ideal = 0; ideal <= (rows[i].role == BENCH_COEXEC); ideal++) {
      double v = ideal ? rows[i].ideal_gflops : rows[i].gflops;
      if (isnan(v))
        continue;
      x[0] = fmin(x[0], plot_size(&rows[i])), x[1] = fmax(x[1], plot_size(&rows[i]));
      y[0] = fmin(y[0], v), y[1] = fmax(y[1], v);
    }
}

/* The data first, as datablocks $d0, $d1, ..., then one plot command over
 * them in the same order: a co-executed series is followed by its ideal.
 * Returns 0, or -1 when a datablock could not be written (no memory). */
static int plot_script(FILE *g, const char *path, const bench_row *rows, int nrows) {
  fprintf(g, "set terminal svg size 960,600 dynamic noenhanced font 'sans,12' background "
             "rgb 'white'\nset output ");
  gp_string(g, path);
  fprintf(g, "\nset title 'poas-bench gemm: end to end, operands in host memory'\n"
             "set xlabel 'size (n; cube root of m n k for other shapes)'\n"
             "set ylabel 'GFLOP/s'\nset logscale x 2\nset grid\nset key outside right top\n");
  /* One size only, or one rate (one point): gnuplot cannot scale an empty
   * range and says so on stderr, into recorded runs. x then takes half an
   * octave either side, y half the rate. */
  double x[2], y[2];
  plot_spans(rows, nrows, x, y);
  if (x[0] == x[1])
    fprintf(g, "set xrange [%.6g:%.6g]\n", x[0] / sqrt(2.0), x[1] * sqrt(2.0));
  if (y[0] == y[1]) {
    double d = y[0] != 0 ? fabs(y[0]) / 2 : 1;
    fprintf(g, "set yrange [%.6g:%.6g]\n", y[0] - d, y[1] + d);
  }
  int id = 0;
  for (int i = 0; i < nrows; i++)
    for (int ideal = 0; ideal <= (rows[i].role == BENCH_COEXEC); ideal++)
      if (draws(rows, nrows, i, ideal) && datablock(g, id++, rows, nrows, &rows[i], ideal))
        return -1;
  fprintf(g, "plot ");
  id = 0;
  for (int i = 0; i < nrows; i++)
    for (int ideal = 0; ideal <= (rows[i].role == BENCH_COEXEC); ideal++) {
      if (!draws(rows, nrows, i, ideal))
        continue;
      fprintf(g, "%s$d%d with %s title ", id ? ", " : "", id,
              ideal ? "lines dt 2 lw 2" : "linespoints lw 2 pt 7");
      char title[320];
      snprintf(title, sizeof title, "%s%s (%s)", ideal ? "ideal " : "", rows[i].label,
               bench_dtype_name(rows[i].dtype));
      gp_string(g, title);
      id++;
    }
  fprintf(g, "\n");
  return 0;
}

int bench_plot_name_ok(const char *path) { return !strchr(path, '\'') && !strchr(path, '\n'); }

/* ------------------------------------------------------- output files */

/* An output (the CSV, the plot) is written into a new file beside the one
 * it replaces, which takes that file's place only once written whole: a
 * run that fails or is stopped leaves an earlier output as it was. Only a
 * regular file is replaced, reached through the symbolic links its path
 * ends in, as models/profile.c writes a profile: renamed over a FIFO or a
 * device, the output had replaced it with a regular file (as root,
 * --plot /dev/null would have taken /dev/null away), and over a link, the
 * link itself, leaving the file it named as it was. */

/* What an output is, to tell a file of its own kind: its name in
 * messages, and how such a file starts. */
typedef struct output_kind {
  const char *name;      /* with its article */
  const char *starts[3]; /* NULL-terminated */
} output_kind;

static const output_kind csv_kind = {"a poas-bench CSV", {"m,n,k,", NULL}};
static const output_kind plot_kind = {"an SVG plot", {"<?xml", "<svg", NULL}};
static const output_kind timings_kind = {"a bench/accuracy timings CSV", {"dtype,op,m,", NULL}};

/* Whether the regular file `target` is empty or starts as `kind`'s files
 * do. An output replaces nothing else: -p is --plot in poas-bench but
 * --profile in the other tools, and `poas-bench gemm -p profile.json`
 * wrote an SVG over the profile. */
static int holds_own_kind(const char *target, const output_kind *kind) {
  char head[16] = "";
  int fd = open(target, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return 1; /* not readable: what replacing it meets is said then */
  ssize_t n = read(fd, head, sizeof head - 1);
  close(fd);
  if (n <= 0)
    return n == 0;
  head[n] = '\0';
  for (int i = 0; kind->starts[i]; i++)
    if (strncmp(head, kind->starts[i], strlen(kind->starts[i])) == 0)
      return 1;
  return 0;
}

/* The file an output named `path` replaces, into target[cap]: 0, or -1
 * with why[whycap] saying why it may not be replaced (something other
 * than a regular file; a file its owner made read-only; a file of
 * another kind than `kind`). */
static int output_target(const char *path, const output_kind *kind, char *target, size_t cap,
                         char *why, size_t whycap) {
  struct stat st, at_target;
  int err = poas__follow_links(path, target, cap);
  /* stat() of the path itself follows what a link's text cannot name:
   * /dev/stdout's /proc link to a pipe reads "pipe:[N]", which followed
   * as a name led nowhere, and the FIFO was refused as "No such file". */
  int exists = stat(path, &st) == 0;
  if (exists && !S_ISREG(st.st_mode)) {
    if (!err && strcmp(path, target) == 0)
      snprintf(why, whycap, "it is %s, not a regular file", poas__file_type(st.st_mode));
    else if (!err && stat(target, &at_target) == 0)
      snprintf(why, whycap, "it links to %s, which is %s, not a regular file", target,
               poas__file_type(st.st_mode));
    else
      snprintf(why, whycap, "it leads to %s, not a regular file", poas__file_type(st.st_mode));
    return -1;
  }
  if (!err && exists && access(target, W_OK) != 0)
    err = errno;
  if (err) {
    snprintf(why, whycap, "%s", strerror(err));
    return -1;
  }
  if (exists && !holds_own_kind(target, kind)) {
    snprintf(why, whycap,
             "it holds something other than %s, which it would replace (only such a file, "
             "or an empty one, is replaced)%s",
             kind->name,
             kind == &plot_kind ? "; -p is --plot here, and the profile --profile" : "");
    return -1;
  }
  return 0;
}

/* Makes an empty file beside `target`, named into tmp[cap], to take
 * target's place once written: its descriptor, or -1 with errno set.
 * Named by the process, not by mkstemp, so that it has the permissions of
 * a new file rather than 0600, or those of the file it replaces. */
static int make_temp(const char *target, char *tmp, size_t cap) {
  struct stat st;
  int replaces = stat(target, &st) == 0;
  /* The name is the target's, cut short where the suffix would take it
   * past the longest name a folder holds: a CSV named with 244 characters
   * or more was refused as "File name too long". */
  const char *slash = strrchr(target, '/');
  size_t folder = slash ? (size_t)(slash - target) + 1 : 0, name = strlen(target + folder);
  int keep = (int)(folder + (name > NAME_MAX - 32 ? NAME_MAX - 32 : name));
  for (int i = 0; i < 100; i++) {
    if ((size_t)snprintf(tmp, cap, "%.*s.%ld-%d.tmp", keep, target, (long)getpid(), i) >= cap) {
      errno = ENAMETOOLONG;
      return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0 && replaces)
      (void)fchmod(fd, st.st_mode & 0777);
    if (fd >= 0 || errno != EEXIST)
      return fd;
  }
  errno = EEXIST;
  return -1;
}

/* Whether make_temp can make its file beside `target`: 0, or the errno. */
static int can_make_temp(const char *target) {
  char tmp[PATH_MAX + 32];
  int fd = make_temp(target, tmp, sizeof tmp);
  if (fd < 0)
    return errno;
  close(fd);
  unlink(tmp);
  return 0;
}

/* The new file being written, which a signal that ends the program
 * removes, so that a stopped run leaves nothing beside the file it was to
 * replace; or, once bench_file_keep_partial has marked rows in it, moves
 * to its kept name, cut back to the bytes marked (a row half written when
 * the signal came goes), saying so. The handler may only make
 * async-signal-safe calls and may come at any point, so what it reads is
 * one of two slots, the one `keep` names (-1: none): a new mark is written
 * into the other slot and then named, with a signal fence between, so that
 * the handler finds a slot whole (an earlier mark, or the new one). */
typedef struct kept {
  int fd;
  off_t bytes;
  char name[PATH_MAX + 16], msg[PATH_MAX + 128];
  size_t msg_len;
} kept;

static const char *volatile pending;
static volatile sig_atomic_t keep = -1;
static kept keeps[2];

static void remove_pending(int sig) {
  int saved = errno, k = keep;
  if (pending && k >= 0 && ftruncate(keeps[k].fd, keeps[k].bytes) == 0 &&
      rename(pending, keeps[k].name) == 0)
    (void)!write(STDERR_FILENO, keeps[k].msg, keeps[k].msg_len);
  else if (pending)
    unlink(pending);
  errno = saved;
  raise(sig); /* its disposition is the default again (SA_RESETHAND) */
}

/* Makes `tmp` the file a signal removes (NULL: none). Signals ignored
 * when the program started (nohup's SIGHUP) stay ignored. */
static void set_pending(const char *tmp) {
  static const int signals[] = {SIGHUP, SIGINT, SIGTERM};
  keep = -1;
  pending = tmp;
  for (size_t i = 0; tmp && i < sizeof signals / sizeof *signals; i++) {
    struct sigaction old, sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = remove_pending;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    if (sigaction(signals[i], NULL, &old) == 0 && old.sa_handler == SIG_DFL)
      sigaction(signals[i], &sa, NULL);
  }
}

int bench_file_open(bench_file *bf, const char *path, bench_output_kind what, char *why,
                    size_t cap) {
  int fd, err;
  const output_kind *kind = what == BENCH_OUTPUT_TIMINGS ? &timings_kind : &csv_kind;
  if (output_target(path, kind, bf->target, sizeof bf->target, why, cap) != 0)
    return -1;
  if ((fd = make_temp(bf->target, bf->tmp, sizeof bf->tmp)) < 0 || !(bf->f = fdopen(fd, "w"))) {
    err = errno;
    if (fd >= 0)
      close(fd), unlink(bf->tmp);
    snprintf(why, cap, "%s", strerror(err));
    return -1;
  }
  set_pending(bf->tmp);
  return 0;
}

void bench_file_keep_partial(bench_file *bf, int rows) {
  off_t at = ftello(bf->f);
  if (pending != bf->tmp || at < 0 || fflush(bf->f) != 0)
    return;
  kept *k = &keeps[keep == 0 ? 1 : 0]; /* the slot the handler does not read */
  char name[sizeof k->name];
  if ((size_t)snprintf(name, sizeof name, "%s.partial", bf->target) >= sizeof name)
    return; /* no name to keep it under: removed, as before */
  memcpy(k->name, name, sizeof name);
  k->fd = fileno(bf->f);
  k->bytes = at;
  struct stat st;
  int earlier = stat(bf->target, &st) == 0;
  int len = snprintf(k->msg, sizeof k->msg,
                     "\npoas-bench: stopped: the %d row%s finished %s kept in %s%s%s%s\n", rows,
                     rows == 1 ? "" : "s", rows == 1 ? "is" : "are", name, earlier ? " (" : "", earlier ? bf->target : "",
                     earlier ? " is left as it was)" : "");
  k->msg_len = len < 0 ? 0 : (size_t)len < sizeof k->msg ? (size_t)len : sizeof k->msg - 1;
  atomic_signal_fence(memory_order_release);
  keep = (sig_atomic_t)(k - keeps);
}

/* Copies the file `from` over the regular file `to`, truncating it: 0, or
 * the errno. */
static int copy_over(const char *from, const char *to) {
  int in = open(from, O_RDONLY | O_CLOEXEC), out = -1, err = 0;
  if (in < 0 || (out = open(to, O_WRONLY | O_TRUNC | O_CLOEXEC)) < 0)
    err = errno;
  char buf[1 << 16];
  ssize_t n = 0;
  while (!err && (n = read(in, buf, sizeof buf)) > 0)
    for (ssize_t done = 0, w; !err && done < n; done += w)
      if ((w = write(out, buf + done, (size_t)(n - done))) < 0)
        err = errno;
  if (!err && n < 0)
    err = errno;
  if (out >= 0 && close(out) != 0 && !err)
    err = errno;
  if (in >= 0)
    close(in);
  return err;
}

/* Puts the new file `tmp` in the place of `target`: 0, or the errno. A
 * file the user may write but not replace (another's, in a sticky folder
 * such as /tmp: rename() is refused) is written over in place, as outputs
 * were before they were renamed, so that a run's results are not lost to
 * it after its minutes of measuring. `tmp` is gone either way. */
static int replace_with(const char *tmp, const char *target) {
  int err = 0;
  if (rename(tmp, target) != 0)
    err = errno == EPERM || errno == EACCES ? copy_over(tmp, target) : errno;
  unlink(tmp); /* once renamed, no file by that name */
  return err;
}

int bench_file_close(bench_file *bf, int err) {
  /* Once closed, the descriptor is no longer the file's: the handler must
   * not truncate whatever takes the number next (copy_over's files). */
  keep = -1;
  if (fclose(bf->f) != 0 && !err)
    err = errno;
  if (!err)
    err = replace_with(bf->tmp, bf->target);
  else
    unlink(bf->tmp);
  set_pending(NULL);
  return err;
}

/* The file the plot named `path` replaces, into target[cap], once
 * checked: 0, or -1 with the reason in why[whycap]. */
static int plot_target(const char *path, char *target, size_t cap, char *why, size_t whycap) {
  int err;
  if (!POAS_GNUPLOT[0])
    snprintf(why, whycap, "gnuplot was not found when POAS was configured");
  else if (!bench_plot_name_ok(path))
    snprintf(why, whycap, "the plot's file name may not hold quotes or newlines");
  else if (output_target(path, &plot_kind, target, cap, why, whycap) != 0)
    return -1;
  else if (!bench_plot_name_ok(target))
    snprintf(why, whycap, "it links to a name gnuplot cannot take (quotes or newlines)");
  else if ((err = can_make_temp(target)) != 0)
    snprintf(why, whycap, "%s", strerror(err));
  else
    return 0;
  return -1;
}

int bench_plot_check(const char *path, char *why, size_t cap) {
  char target[PATH_MAX];
  return plot_target(path, target, sizeof target, why, cap);
}

/* `path` with its folder resolved (links, ".", ".."), into out[cap], to
 * compare names of files that may not exist yet; "" when the folder
 * cannot be resolved. */
static void resolved_name(const char *path, char *out, size_t cap) {
  const char *slash = strrchr(path, '/');
  char dir[PATH_MAX], real[PATH_MAX];
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else
    snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
  if (!realpath(dir, real)) {
    out[0] = '\0';
    return;
  }
  snprintf(out, cap, "%s/%s", real, slash ? slash + 1 : path);
}

int bench_same_file(const char *a, const char *b) {
  struct stat sa, sb;
  if (stat(a, &sa) == 0 && stat(b, &sb) == 0)
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  /* The files outputs would replace, links followed as bench_file_open
   * follows them: a plot through a link to a CSV not yet written was
   * once written over that CSV. */
  char ta[PATH_MAX], tb[PATH_MAX], ra[2 * PATH_MAX], rb[2 * PATH_MAX];
  resolved_name(poas__follow_links(a, ta, sizeof ta) ? a : ta, ra, sizeof ra);
  resolved_name(poas__follow_links(b, tb, sizeof tb) ? b : tb, rb, sizeof rb);
  return ra[0] && strcmp(ra, rb) == 0;
}

/* Runs gnuplot on the script of the plot. Its stdout is /dev/null: a
 * gnuplot that cannot open the file named by `set output` writes the SVG
 * to its stdout instead, which is ours, and it would have corrupted the
 * table or the JSON there. */
static int run_gnuplot(const char *path, const bench_row *rows, int nrows, char *why,
                       size_t cap) {
  int fd[2];
  if (pipe(fd) != 0) {
    snprintf(why, cap, "cannot make a pipe to gnuplot: %s", strerror(errno));
    return -1;
  }
  pid_t pid = fork();
  if (pid == 0) {
    int null = open("/dev/null", O_WRONLY);
    if (null < 0 || dup2(null, STDOUT_FILENO) < 0 || dup2(fd[0], STDIN_FILENO) < 0)
      _exit(127);
    close(null), close(fd[0]), close(fd[1]);
    tool_child_signals();
    execl(POAS_GNUPLOT, "gnuplot", (char *)NULL);
    _exit(127);
  }
  close(fd[0]);
  FILE *g = pid > 0 ? fdopen(fd[1], "w") : NULL;
  if (!g) {
    close(fd[1]);
    if (pid > 0)
      waitpid(pid, NULL, 0);
    snprintf(why, cap, "cannot start %s", POAS_GNUPLOT);
    return -1;
  }
  int script = plot_script(g, path, rows, nrows);
  fclose(g);
  int status, waited = waitpid(pid, &status, 0) == pid;
  if (script != 0) {
    snprintf(why, cap, "no memory for the plot's data");
    return -1;
  }
  if (!waited || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    snprintf(why, cap, "%s failed", POAS_GNUPLOT);
    return -1;
  }
  return 0;
}

/* gnuplot writes into a file beside the one it replaces, which takes its
 * place only once written: told to write `path` itself, a gnuplot that
 * failed had already truncated an earlier plot there to nothing. */
int bench_plot(const char *path, const bench_row *rows, int nrows, char *why, size_t cap) {
  char target[PATH_MAX], tmp[PATH_MAX + 32];
  int fd;
  if (plot_target(path, target, sizeof target, why, cap) != 0)
    return -1;
  /* Rows whose runs all failed have no rate: gnuplot, handed no point,
   * failed with "x range is invalid" on stderr, and the plot was said to
   * be gnuplot's failure. */
  double x[2], y[2];
  plot_spans(rows, nrows, x, y);
  if (!(x[0] <= x[1])) {
    snprintf(why, cap, "no row has a measured rate to plot (their runs failed)");
    return -1;
  }
  if ((fd = make_temp(target, tmp, sizeof tmp)) < 0) {
    snprintf(why, cap, "%s", strerror(errno));
    return -1;
  }
  close(fd);
  set_pending(tmp);
  int rc = run_gnuplot(tmp, rows, nrows, why, cap);
  /* gnuplot can exit 0 having written nothing where it was told to. */
  struct stat st;
  if (rc == 0 && (stat(tmp, &st) != 0 || st.st_size == 0)) {
    snprintf(why, cap, "%s wrote nothing to it", POAS_GNUPLOT);
    rc = -1;
  }
  int err;
  if (rc == 0 && (err = replace_with(tmp, target)) != 0) {
    snprintf(why, cap, "%s", strerror(err));
    rc = -1;
  }
  if (rc != 0)
    unlink(tmp);
  set_pending(NULL);
  return rc;
}

/* ------------------------------------------------------------ CSV input */

/* Splits one CSV line in place at commas outside double quotes; returns the
 * number of fields. */
static int csv_split(char *line, char **field, int cap) {
  int n = 0, quoted = 0;
  field[n++] = line;
  for (char *p = line; *p; p++) {
    if (*p == '"')
      quoted = !quoted;
    else if (*p == ',' && !quoted && n < cap) {
      *p = 0;
      field[n++] = p + 1;
    } else if (*p == '\n' || *p == '\r') {
      *p = 0;
      break;
    }
  }
  return n;
}

/* A time or rate field into *out: NaN where it is empty (no value), else
 * a finite decimal number as bench_csv_rows writes it; -1 for anything
 * else ("abc" was read as 0, and "inf" or "nan" left gnuplot nothing to
 * scale). */
static int csv_number(const char *s, double *out) {
  if (!*s) {
    *out = NAN;
    return 0;
  }
  return tool_parse_double(s, -DBL_MAX, DBL_MAX, out);
}

/* A row's role, its sixth field: 0, or -1 for no role poas-bench writes
 * (anything was read as a device's). */
static int csv_role(const char *s, bench_role *out) {
  for (bench_role r = BENCH_DEVICE; r <= BENCH_BASELINE; r++)
    if (strcmp(s, bench_role_name(r)) == 0) {
      *out = r;
      return 0;
    }
  return -1;
}

/* A row's m, n and k, its first three fields, each a whole number from 1:
 * 0, or -1 for one that is not ("abc" was read as 0, "64x" as 64). */
static int csv_shape(char *const *fld, int64_t out[3]) {
  for (int i = 0; i < 3; i++) {
    long v;
    if (bench_parse_long(fld[i], 1, LONG_MAX, &v) != 0)
      return -1;
    out[i] = v;
  }
  return 0;
}

int bench_read_csv_stream(FILE *f, const char *path, bench_row *rows, int cap, int *nrows,
                          char *why, size_t whycap) {
  /* Lines of any length: a row's notes grow with its devices, and a
   * line past a fixed buffer was read as two, the second malformed. */
  char *line = NULL;
  size_t linecap = 0;
  int lineno = 0, rc = 0;
  while (getline(&line, &linecap, f) > 0) {
    char *fld[32];
    lineno++;
    int nf = csv_split(line, fld, 32);
    /* Files written before the eff_* columns have 20 fields; those read
     * here sit at the same positions in both. */
    if (lineno == 1) {
      if (strcmp(fld[0], "m") != 0 || nf < 20) {
        snprintf(why, whycap, "%s: not a poas-bench CSV (its header differs)", path);
        rc = -1;
        break;
      }
      continue;
    }
    int64_t mnk[3];
    bench_role role;
    double seconds, gflops, ideal;
    /* A device set's name longer than a row holds (none poas-bench
     * writes) is refused: cut short, two sets were drawn as one, and a
     * cut inside its quotes left the rest of the row quoted. */
    if (nf < 20 || strlen(fld[4]) >= sizeof rows->label ||
        (strcmp(fld[3], "s") != 0 && strcmp(fld[3], "d") != 0) ||
        csv_shape(fld, mnk) != 0 || csv_role(fld[5], &role) != 0 ||
        csv_number(fld[7], &seconds) != 0 || csv_number(fld[8], &gflops) != 0 ||
        csv_number(fld[11], &ideal) != 0) {
      snprintf(why, whycap, "%s:%d: malformed row", path, lineno);
      rc = -1;
      break;
    }
    if (*nrows == cap) {
      snprintf(why, whycap, "%s: more than %d rows in all", path, cap);
      rc = -1;
      break;
    }
    bench_row *r = &rows[(*nrows)++];
    memset(r, 0, sizeof *r);
    r->m = mnk[0], r->n = mnk[1], r->k = mnk[2];
    r->dtype = fld[3][0] == 'd' ? POAS_FLOAT64 : POAS_FLOAT32;
    snprintf(r->label, sizeof r->label, "%s", fld[4]);
    r->role = role;
    r->repeat = atoi(fld[6]);
    r->seconds = seconds, r->gflops = gflops, r->ideal_gflops = ideal;
    r->status = "ok";
  }
  /* A folder opens, and says what it is only when read. */
  if (rc == 0 && ferror(f)) {
    snprintf(why, whycap, "%s: %s", path, strerror(errno));
    rc = -1;
  }
  free(line);
  return rc;
}

int bench_read_csv(const char *path, bench_row *rows, int cap, int *nrows, char *why,
                   size_t whycap) {
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(why, whycap, "%s: %s", path, strerror(errno));
    return -1;
  }
  int rc = bench_read_csv_stream(f, path, rows, cap, nrows, why, whycap);
  fclose(f);
  return rc;
}
