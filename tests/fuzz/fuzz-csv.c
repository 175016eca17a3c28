/* fuzz-csv.c: libFuzzer entry for the CSV reader of `poas-bench plot`
 * (bench_read_csv_stream in bench/report.c), which users hand any file.
 * Each input is a whole file. It must give either rows that keep the
 * reader's promises, or -1 with a message that names the file and a
 * refusal that keeps the rows appended before it whole; never a crash,
 * a leak or undefined behaviour. The rows it accepts, written again by
 * poas-bench's own CSV writer (bench_csv_rows), must read back the same.
 * Built and run by run-fuzz.sh (FUZZ_TARGET=csv), not by make check. */
#include "bench/bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Few rows, so that an input reaches the refusal of one too many. */
#define CAP 16
#define NAME "fuzz.csv"

/* A number read from a field: NaN (empty) or finite. */
static int plain(double v) { return isnan(v) || isfinite(v); }

/* What a successful read promises about each row it appended. */
static void check_row(const bench_row *r) {
  if (r->m < 1 || r->n < 1 || r->k < 1 || (r->dtype != POAS_FLOAT32 && r->dtype != POAS_FLOAT64) ||
      (r->role != BENCH_DEVICE && r->role != BENCH_COEXEC && r->role != BENCH_BASELINE) ||
      !memchr(r->label, '\0', sizeof r->label) || !plain(r->seconds) || !plain(r->gflops) ||
      !plain(r->ideal_gflops) || !r->status || strcmp(r->status, "ok") != 0)
    abort();
}

/* `v` as bench_csv_rows writes it and the reader takes it back. */
static double written(double v) {
  char text[64];
  snprintf(text, sizeof text, "%.6g", v);
  return isnan(v) ? NAN : strtod(text, NULL);
}

/* Whether every number of rows[0..n) survives being written: a rate or a
 * time within a rounding of DBL_MAX is written as one past it, which the
 * reader rightly refuses. poas-bench measures none such. */
static int writable(const bench_row *rows, int n) {
  for (int i = 0; i < n; i++)
    if (!plain(written(rows[i].seconds)) || !plain(written(rows[i].gflops)) ||
        !plain(written(rows[i].ideal_gflops)))
      return 0;
  return 1;
}

static int same_number(double a, double b) { return isnan(a) ? isnan(b) : a == b; }

/* rows[0..n) written by bench_csv_header and bench_csv_rows, read again,
 * must come back field by field as written. */
static void round_trip(const bench_row *rows, int n) {
  static bench_row again[CAP];
  char *text = NULL, why[512] = "";
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  if (!out)
    return;
  if (bench_csv_header(out) != 0 || bench_csv_rows(out, rows, n) != 0 || fclose(out) != 0)
    abort();
  FILE *in = fmemopen(text, len, "r");
  int back = 0;
  if (!in || bench_read_csv_stream(in, NAME, again, CAP, &back, why, sizeof why) != 0 ||
      back != n)
    abort();
  for (int i = 0; i < n; i++) {
    const bench_row *a = &rows[i], *b = &again[i];
    if (a->m != b->m || a->n != b->n || a->k != b->k || a->dtype != b->dtype ||
        strcmp(a->label, b->label) != 0 || a->role != b->role || a->repeat != b->repeat ||
        !same_number(written(a->seconds), b->seconds) ||
        !same_number(written(a->gflops), b->gflops) ||
        !same_number(written(a->ideal_gflops), b->ideal_gflops))
      abort();
  }
  fclose(in);
  free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static bench_row rows[CAP];
  /* fmemopen reads NUL bytes as a file's, and takes no empty buffer. */
  char *copy = malloc(size + 1);
  if (!copy)
    return 0;
  memcpy(copy, data, size);
  copy[size] = '\0';
  FILE *f = fmemopen(copy, size ? size : 1, "r");
  if (!f) {
    free(copy);
    return 0;
  }
  if (size == 0)
    fgetc(f); /* the one byte given for an empty file, read past */
  char why[512] = "";
  int nrows = 0;
  int rc = bench_read_csv_stream(f, NAME, rows, CAP, &nrows, why, sizeof why);
  fclose(f);
  free(copy);
  if (nrows < 0 || nrows > CAP)
    abort();
  for (int i = 0; i < nrows; i++)
    check_row(&rows[i]);
  if (rc == -1) {
    if (strncmp(why, NAME, strlen(NAME)) != 0)
      abort();
  } else if (rc != 0) {
    abort();
  } else if (writable(rows, nrows)) {
    round_trip(rows, nrows);
  }
  return 0;
}
