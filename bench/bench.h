/* bench.h: what the parts of poas-bench share: the problem every runner is
 * handed, the table of a vendor-library baseline, one result row, and the
 * verification and output functions. poas-bench stands on poas.h; only the
 * baseline files call vendor libraries, each behind a bench_baseline table
 * so that the main file never needs to know which ones were built. */
#ifndef POAS_BENCH_H
#define POAS_BENCH_H

#include "poas.h"

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* One GEMM C = A * B, row-major, no transposes, tight leading dimensions
 * (lda = k, ldb = n, ldc = n); all three in host memory, of `dtype`. */
typedef struct bench_problem {
  poas_dtype dtype;
  int64_t m, n, k;
  const void *a, *b;
  void *c;
} bench_problem;

/* What a baseline's gemm returns besides 0. */
enum { BENCH_UNSUPPORTED = 1, BENCH_FAILED = -1 };

/* A vendor library driven directly, end to end: operands start and end in
 * host memory and copies are part of the time. */
typedef struct bench_baseline {
  const char *name;
  /* Opens the library and its device. On success returns 0 and writes a
   * description of what it runs on into `desc`; when the baseline cannot run
   * on this machine or build, returns BENCH_UNSUPPORTED with the reason. */
  int (*open)(void **state, char *desc, size_t cap);
  /* Runs one problem; 0, BENCH_UNSUPPORTED (e.g. no double precision on the
   * device) or BENCH_FAILED, with the reason in `why`. */
  int (*gemm)(void *state, const bench_problem *p, char *why, size_t cap);
  void (*close)(void *state);
  /* 1 when a run copies the operands to a device and back: B's copy then
   * costs the same whatever rows A has, which scaling a row block's time
   * to the whole problem must not multiply (poas-bench --alone-limit). */
  int copies;
} bench_baseline;

extern const bench_baseline bench_baseline_cblas, bench_baseline_clblast, bench_baseline_cublas;

/* How quickly the host hands work between OpenBLAS's threads, to tell
 * which state a run met: the median time of the thin sgemm of
 * POAS_HANDOFF_M/N/K (whose threads synchronise often) on every core the
 * process may use and on one, alternated in blocks. On the CI VM the first took
 * 0.5 ms in one state and 1.5 ms in another, entered and left within
 * seconds, while the second stayed at 0.6 ms; larger calls on two threads
 * slowed 1.2x with it (bench/results/learned-shapes-ci-2core-2026-11-23.md).
 * Runs ~50 ms; threads 0 when it could not (no memory). In
 * baseline-cblas.c, beside the rest of what calls OpenBLAS directly. */
typedef struct bench_handoff {
  int threads;
  double all_s, one_s;
} bench_handoff;
void bench_handoff_probe(bench_handoff *out);
/* One line on f saying what the probe found `when` ("before", "after"),
 * and whether hand-offs were slow (all_s above POAS_HANDOFF_SLOW times
 * one_s); nothing on one core or when the probe could not run. */
void bench_handoff_print(FILE *f, const char *tool, const char *when, const bench_handoff *h);
/* The probe's state now, cheaply, to tag the timings of a run call by
 * call: a warm-up call of its sgemm on every core and on one, then a timed
 * call of each; returns the ratio of the two times (above
 * POAS_HANDOFF_SLOW: slow), 0 on one core or out of memory. About 2.5 ms
 * on the CI VM (1.2 ms of it spent while hand-offs are quick). */
double bench_handoff_now(void);

/* The role of a row in a size's group. */
typedef enum bench_role { BENCH_DEVICE, BENCH_COEXEC, BENCH_BASELINE } bench_role;

/* One (shape, dtype, device set) result. Quantities that do not apply are
 * NaN and are written as "-" in the table, empty in the CSV and null in
 * JSON. */
typedef struct bench_row {
  int64_t m, n, k;
  poas_dtype dtype;
  char label[256];
  bench_role role;
  int repeat;
  double seconds;        /* median end-to-end time */
  double gflops;         /* 2mnk / seconds */
  double speedup;        /* over the best single POAS device */
  double efficiency;     /* co-executed: gflops / ideal */
  double ideal_gflops;   /* co-executed: sum of the single-device rates */
  double vs_cblas;       /* gflops / the cblas baseline's */
  double predicted_s;    /* POAS: predicted makespan of the median run */
  double report_s;       /* POAS: makespan the library measured */
  double pred_error;     /* (predicted - seconds) / seconds */
  double num_error;      /* largest normalised error over the runs */
  double num_bound;
  /* Co-executed: where the efficiency went, as three factors whose product
   * it is (NaN elsewhere). used: the alone rates of the devices that
   * computed over the ideal (below 1 when the plan left one out). corun:
   * their rates beside each other (share of the work over time busy, in
   * the median run; the middle two pooled for an even count, as the
   * median time is their mean) over their alone rates: what contention
   * for memory, caches and clocks took. fill: the measured rate over those
   * co-run rates: what idle time, the engine and the tail took, the
   * schedule's part. */
  double used, corun, fill;
  double fastest_s, slowest_s; /* the timed runs' shortest and longest */
  int ndev;                                 /* the median run's devices, */
  poas_device_report dev[POAS_MAX_DEVICES]; /* as its report gave them */
  const char *status;    /* "ok", "inaccurate", "failed", "unsupported" */
  char note[256];
} bench_row;

/* ------------------------------------------------------------ verify.c */

size_t bench_dtype_size(poas_dtype dtype);
/* Fills n elements with deterministic values in [-1, 1) from `seed`. */
void bench_fill(void *x, poas_dtype dtype, size_t n, uint64_t seed);
/* Puts order[n] in a random order drawn from *state (deterministic for a
 * seed), as the benchmarks visit what they time. */
void bench_shuffle(int *order, int n, uint64_t *state);
/* Sets n elements to NaN, so that elements a run leaves unwritten show. */
void bench_poison(void *x, poas_dtype dtype, size_t n);

/* The reference side of the projection check: z = A (B x) and the scale
 * |A| (|B| |x|), both in double, for one random vector x. */
typedef struct bench_reference {
  int64_t m, n;
  double *x, *z, *scale;
} bench_reference;

int bench_reference_init(bench_reference *ref, const bench_problem *p, uint64_t seed);
void bench_reference_free(bench_reference *ref);
/* The largest |(C x)_i - z_i| / scale_i over C's first p->m rows (at most
 * ref->m): NaN when C holds a NaN. */
double bench_error(const bench_reference *ref, const bench_problem *p);
/* The normalised error a correct GEMM on bench_fill's operands stays
 * within (see verify.c for why it is not simply k unit roundoffs). */
double bench_error_bound(poas_dtype dtype, int64_t n, int64_t k);

/* ------------------------------------------------------------ report.c */

/* The output sinks of a run. `table` is stdout, or stderr under --json. */
typedef struct bench_output {
  FILE *table;
  struct bench_file *csv;
  int json;
  int csv_err;   /* the errno of the CSV's first failed write, or 0 */
  int table_err; /* the same for the table */
} bench_output;

void bench_table_header(FILE *f);
/* The table's rows, flushed: 0, or the errno of a failed write. */
int bench_table_rows(FILE *f, const bench_row *rows, int nrows);
/* The CSV's header and rows, flushed: 0, or the errno of a failed write. */
int bench_csv_header(FILE *f);
int bench_csv_rows(FILE *f, const bench_row *rows, int nrows);
/* The JSON object of the whole run, to stdout, flushed: 0, or the errno
 * of a failed write. `devices` are the POAS devices of the co-executed
 * set, `baselines` the descriptions of the baselines that ran. */
int bench_json(FILE *f, const char *argv_line, const poas_device_info *devices, int ndevices,
               const char *const *baselines, int nbaselines, const bench_row *rows, int nrows,
               const char *csv_path, const char *plot_path);
/* An output file written whole or not at all: `f` writes a new file
 * beside `target`, the regular file its path names (symbolic links
 * followed), which takes target's place when closed. */
typedef struct bench_file {
  FILE *f;
  char target[PATH_MAX];
  char tmp[PATH_MAX + 32];
} bench_file;
/* What an output file holds, which an earlier file at its path must hold
 * too (or be empty) to be replaced. */
typedef enum bench_output_kind {
  BENCH_OUTPUT_CSV,     /* poas-bench's rows */
  BENCH_OUTPUT_TIMINGS, /* bench/accuracy's timed calls */
} bench_output_kind;
/* Opens the new file of an output of kind `what` named `path`: 0, or -1
 * with the reason in `why` (the path is the caller's to name), nothing
 * made. A path that exists and is not a regular file (a directory, a
 * FIFO, a device) is refused. A signal that ends the program removes the
 * new file, unless bench_file_keep_partial said what of it to keep. */
int bench_file_open(bench_file *bf, const char *path, bench_output_kind what, char *why,
                    size_t cap);
/* Marks what bf has written so far, `rows` rows flushed whole, as worth
 * keeping: a signal that ends the program from now on (SIGINT, SIGTERM,
 * SIGHUP) moves the new file, cut back to those rows, to TARGET.partial,
 * and says so on stderr, instead of removing it. The file at the target
 * stays as it was. A long run stopped by hand thus keeps the sizes it
 * finished; they were lost with the new file before. */
void bench_file_keep_partial(bench_file *bf, int rows);
/* Closes bf->f and, unless that or an earlier write failed (`err`, its
 * errno, or 0), renames the new file over the target (or, where the
 * target may be written but not replaced, copies it over): 0; else
 * removes it and returns the errno. */
int bench_file_close(bench_file *bf, int err);
/* Plots GFLOP/s against size through gnuplot into an SVG file, which
 * replaces an earlier one only once written whole, by the rules of
 * bench_file_open. Returns 0, or -1 with the reason in `why` (the path is
 * the caller's to name). */
int bench_plot(const char *path, const bench_row *rows, int nrows, char *why, size_t cap);
/* Whether gnuplot can take `path` as its output's name (no quotes or
 * newlines): checked with the arguments, a bad name being a usage error. */
int bench_plot_name_ok(const char *path);
/* Whether bench_plot could write `path` (gnuplot is there, the file is
 * one bench_file_open would replace, its folder takes a new file),
 * checked before a run so that a plot that cannot be written fails it at
 * once: 0, or -1 with the reason in `why`. */
int bench_plot_check(const char *path, char *why, size_t cap);
/* Whether two paths name the same file: the same file where both exist
 * (links and other names included), else the same name once their folders
 * are resolved. The plot must not be written over a CSV. */
int bench_same_file(const char *a, const char *b);
/* Appends the rows of a CSV that poas-bench wrote (what the plot needs:
 * shape, dtype, devices, role, time, rates) to rows[*nrows..cap). 0, or -1
 * with why[] saying which file and line is wrong. */
int bench_read_csv(const char *path, bench_row *rows, int cap, int *nrows, char *why,
                   size_t whycap);
/* The same from the open stream `f`, which `path` names in why[] (the
 * fuzzer tests/fuzz/fuzz-csv.c reads memory through it). */
int bench_read_csv_stream(FILE *f, const char *path, bench_row *rows, int cap, int *nrows,
                          char *why, size_t whycap);

const char *bench_dtype_name(poas_dtype dtype);
const char *bench_role_name(bench_role role);

#endif /* POAS_BENCH_H */
