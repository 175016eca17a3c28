/* fit-text.c: see fit-text.h. */
#include "tools/fit-text.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Row and column counts a threads table lists: 1 to 32. */
#define FEW_COUNTS ((int)sizeof(((poas_device_fit *)0)->threads_by_rows[0]) - 1)

const char *tool_noise_text(double noise, char *buf, size_t cap) {
  if (noise > 0)
    snprintf(buf, cap, "%.2f%%", 100 * noise);
  else
    snprintf(buf, cap, "-");
  return buf;
}

/* A median 3% off on one timing is most of the CPU's 5% accuracy target,
 * and the 2-core CI VM read 2.3-3.5% on a day its speed drifted by 10%
 * (bench/results/timing-noise-ci-2core-2026-11-23.md). */
void tool_noise_warnings(FILE *f, const char *prefix, const poas_device_fit *fit) {
  for (int dt = 0; dt < 2; dt++) {
    const poas_fit_info *g = &fit->gemm[dt];
    if (!g->samples || !(g->timing_noise > TOOL_NOISY))
      continue;
    fprintf(f,
            "%s%s %sgemm: one timing of a calibration sample strayed a median %.1f%% from the "
            "sample's median: the machine was busy, and predictions can be no better than "
            "that; calibrate again when it is quiet\n",
            prefix, fit->id, dt ? "d" : "s", 100 * g->timing_noise);
  }
  /* The costs kept are the quick runs' (api/predict.c), but the rest of
   * the profile was measured on the same busy machine. */
  if (fit->run_cost_spread_s > POAS_RUN_COST_BUSY_S)
    fprintf(f,
            "%s%s: half the runs that timed its fixed cost took %.2f ms or more longer than "
            "its quicker ones, whose cost the profile keeps (%.0f us a run, %.0f us more "
            "through the engine): the machine was busy, and its other figures are a loaded "
            "machine's; calibrate again when it is quiet\n",
            prefix, fit->id, 1e3 * fit->run_cost_spread_s, 1e6 * fit->dispatch_s,
            1e6 * fit->engine_s);
  int cut = fit->sweep_passes > 0 && fit->sweep_passes < fit->sweep_planned;
  if (cut || fit->thin_skipped) {
    char what[160];
    if (!cut)
      snprintf(what, sizeof what, "its thin-block probes were left out");
    else
      snprintf(what, sizeof what, "its GEMM samples were timed in %d passes, not %d,%s",
               fit->sweep_passes, fit->sweep_planned,
               fit->thin_skipped ? " and its thin-block probes were left out," : "");
    fprintf(f,
            "%s%s: %s to keep to the calibration's time: the machine ran slowly, or building "
            "kernels took part of that time (a first calibration on this machine); calibrate "
            "again when it is quiet\n",
            prefix, fit->id, what);
  }
  tool_handoff_warning(f, prefix, fit);
}

void tool_took_text(const poas_calibration_result *r, char *buf, size_t cap) {
  double build = 0;
  for (int i = 0; i < r->ndevices; i++)
    build += r->dev[i].build_s;
  int len = snprintf(buf, cap, "took %.1f s", r->seconds);
  if (!(build >= 1) || len < 0 || (size_t)len >= cap)
    return;
  len += snprintf(buf + len, cap - (size_t)len, " (%.1f s of it building kernels:", build);
  for (int i = 0; i < r->ndevices && len > 0 && (size_t)len < cap; i++)
    if (r->dev[i].build_s >= 0.1)
      len += snprintf(buf + len, cap - (size_t)len, " %s %.1f s,", r->dev[i].id,
                      r->dev[i].build_s);
  if (len > 0 && (size_t)len < cap)
    snprintf(buf + len - 1, cap - (size_t)len + 1,
             "; a first run on this machine, or new drivers: the next calibration finds them "
             "built and measures more)");
}

/* The CI VM enters and leaves a state of slow hand-offs between threads
 * within seconds (bench/results/learned-shapes-ci-2core-2026-11-23.md);
 * a calibration that saw it, or saw it change, says so, with what the
 * user can do: calls on one thread do not depend on it. */
void tool_handoff_warning(FILE *f, const char *prefix, const poas_device_fit *fit) {
  double a = fit->handoff_start, b = fit->handoff_end;
  int timings = fit->handoff_timings, slow = fit->handoff_slow_timings;
  if (!(a > 0) || !(b > 0))
    return;
  int slow_a = a > POAS_HANDOFF_SLOW, slow_b = b > POAS_HANDOFF_SLOW;
  if (!slow_a && !slow_b && !(timings > 0 && slow > 0))
    return;
  char sweep[96] = "";
  if (timings > 0 && slow == timings)
    snprintf(sweep, sizeof sweep, ", in all %d of its GEMM sweep's timings", timings);
  else if (timings > 0)
    snprintf(sweep, sizeof sweep, ", and slow in %d of its GEMM sweep's %d timings", slow,
             timings);
  const char *fits;
  if (timings > 0) /* since the sweep fits one state (measure_gemm) */
    fits = 2 * slow > timings ? "fit the slow state, which most of them met"
                              : "fit the quick state, which most of them met";
  else
    fits = slow_a && slow_b ? "fit that slow state" : "mix the two states";
  /* What the slow state adds, in the dtypes where calibration could fit
   * it: plans that learn from runs follow the host into the other state
   * with it (api/run.c). */
  char extra[640] = "", adds[80] = "";
  const double *x = fit->handoff_extra;
  if (x[0] > 0 && x[1] > 0)
    snprintf(adds, sizeof adds, "%.2g ns per element of B to sgemm and %.2g to dgemm", 1e9 * x[0],
             1e9 * x[1]);
  else if (x[0] > 0 || x[1] > 0)
    snprintf(adds, sizeof adds, "%.2g ns per element of B to %sgemm", 1e9 * (x[0] + x[1]),
             x[1] > 0 ? "d" : "s");
  /* Where calibration saw the cores' cache-line round trip, plans probe
   * it for the state (api/run.c, handoff_probe), and calls of few rows
   * or columns may then run on one thread. */
  const double *ns = fit->handoff_latency_ns;
  char probe[400] = "", moved[200] = "";
  tool_threads_slow_text(fit, moved, sizeof moved);
  if (ns[0] > 0 && ns[1] > 0)
    snprintf(probe, sizeof probe,
             "; a cache line's round trip between its cores took %.0f ns in the quick state "
             "and %.0f in the slow one, and plans measure it to tell the state before a run%s%s",
             ns[0], ns[1], moved[0] ? ", and while it is slow run " : "", moved);
  if (adds[0])
    snprintf(extra, sizeof extra,
             " (the slow state adds %s; plans that learn from runs follow the host into the "
             "other state, at the strength the runs show%s)",
             adds, probe);
  fprintf(f,
          "%s%s: hand-offs between its threads were %s%s (a thin sgemm on all of them took "
          "%.2fx its time on one at the start, %.2fx at the end: another process or a VM's "
          "host held a core back); its models %s, and calls on several threads, thin ones "
          "most, run off them when that changes%s; calibrate again when the machine is quiet, "
          "or give the device threads=1 (cpu:threads=1), whose calls do not depend on it\n",
          prefix, fit->id,
          slow_a && slow_b && slow == timings ? "slow throughout its calibration"
          : slow_a && slow_b                  ? "slow at the start of its calibration and at the end"
          : slow_a ? "slow at the start of its calibration and quick at the end"
          : slow_b ? "quick at the start of its calibration and slow at the end"
                   : "quick at the start of its calibration and at the end",
          sweep, a, b, fits, extra);
}

void tool_run_cost_text(const poas_device_fit *f, char *buf, size_t cap) {
  if (cap)
    buf[0] = '\0';
  if (!(f->dispatch_s > 0) && !(f->engine_s > 0))
    return;
  int len = snprintf(buf, cap, "a run costs %.0f us beyond its GEMMs and copies",
                     1e6 * f->dispatch_s);
  if (f->engine_s > 0 && len > 0 && (size_t)len < cap)
    snprintf(buf + len, cap - (size_t)len, ", %.0f us more through the engine",
             1e6 * f->engine_s);
}

/* "WHAT in pieces: ..." or "WHAT in whole calls" for pieces of side b. */
static int block_clause(char *buf, size_t cap, const char *what, int b) {
  return b > 0 ? snprintf(buf, cap, "%s in pieces: C in %d x %d blocks, k in steps of %d", what,
                          b, b, b)
               : snprintf(buf, cap, "%s in whole calls", what);
}

void tool_block_text(const poas_device_fit *f, char *buf, size_t cap) {
  if (cap)
    buf[0] = '\0';
  const int *b = f->gemm_block;
  if (!(b[0] > 0) && !(b[1] > 0))
    return;
  if (b[0] == b[1]) {
    block_clause(buf, cap, "runs its GEMMs", b[0]);
    return;
  }
  int len = block_clause(buf, cap, "runs sgemm", b[0]);
  if (len > 0 && (size_t)len + 2 < cap)
    block_clause(buf + len, cap - (size_t)len, "; dgemm", b[1]);
}

/* v with two decimals, or in three significant digits where those would
 * round it to 0.00 and it is more than `least`: a link of 2 kB/s read
 * "0.00 GB/s", as if copies took all the time there is. */
static const char *amount_text(double v, double least, char *buf, size_t cap) {
  snprintf(buf, cap, fabs(v) >= 0.005 || fabs(v) <= least ? "%.2f" : "%.3g", v);
  return buf;
}

/* A latency under a nanosecond is the fit's rounding: a sim of latency 0
 * fits 1e-18 s. */
#define LEAST_US 1e-3

static void rate_text(double latency, double bandwidth, double knee, double beyond, char *buf,
                      size_t cap) {
  char us[32], gbs[32];
  int len = snprintf(buf, cap, "%s us + %s GB/s",
                     amount_text(1e6 * latency, LEAST_US, us, sizeof us),
                     amount_text(bandwidth / 1e9, 0, gbs, sizeof gbs));
  if (knee > 0 && len > 0 && (size_t)len < cap)
    snprintf(buf + len, cap - (size_t)len, ", %s GB/s past %.0f MiB",
             amount_text(beyond / 1e9, 0, gbs, sizeof gbs), knee / 1048576);
}

void tool_transfer_text(const poas_device_fit *f, poas_direction dir, char *buf, size_t cap) {
  rate_text(f->latency_s[dir], f->bandwidth[dir], f->knee_bytes[dir], f->bandwidth_beyond[dir],
            buf, cap);
  size_t len = strlen(buf);
  if (f->duplex > 1 && len < cap)
    snprintf(buf + len, cap - len, "; %.2fx while copying both ways", f->duplex);
}

void tool_transpose_text(const poas_device_fit *f, poas_dtype dtype, char *buf, size_t cap) {
  rate_text(f->transpose_latency_s[dtype], f->transpose_bandwidth[dtype],
            f->transpose_knee_bytes[dtype], f->transpose_bandwidth_beyond[dtype], buf, cap);
}

/* Appends to buf, truncating. */
static void add(char *buf, size_t cap, const char *text) {
  size_t len = strlen(buf);
  if (len < cap)
    snprintf(buf + len, cap - len, "%s", text);
}

/* Appends to buf, for each dtype and side, the counts n whose entry
 * in[n] is `want` while except[n] is not (except may be NULL), as ranges:
 * "sgemm of 1-26, 28, 32 rows on 1 thread", clauses joined by "; ". */
static void counts_clause(char *buf, size_t cap, const unsigned char *const in[2][2],
                          const unsigned char *const except[2][2], int want) {
  static const char *const sides[2] = {"rows", "columns"};
  for (int dt = 0; dt < 2; dt++)
    for (int side = 0; side < 2; side++) {
      const unsigned char *by = in[dt][side], *other = except ? except[dt][side] : NULL;
      char list[160] = "";
      for (int n = 1; n <= FEW_COUNTS; n++) {
        if (by[n] != want || (other && other[n] == want))
          continue;
        int last = n;
        while (last + 1 <= FEW_COUNTS && by[last + 1] == want &&
               !(other && other[last + 1] == want))
          last++;
        char item[24];
        snprintf(item, sizeof item, "%s%d", list[0] ? ", " : "", n);
        add(list, sizeof list, item);
        if (last > n) {
          snprintf(item, sizeof item, "-%d", last);
          add(list, sizeof list, item);
        }
        n = last;
      }
      if (!list[0])
        continue;
      char head[64];
      snprintf(head, sizeof head, "%s%cgemm of ", buf[0] ? "; " : "", dt ? 'd' : 's');
      add(buf, cap, head);
      add(buf, cap, list);
      snprintf(head, sizeof head, " %s on %d thread%s", sides[side], want, want == 1 ? "" : "s");
      add(buf, cap, head);
    }
}

void tool_threads_tables(const poas_device_fit *f, int slow, const unsigned char *out[2][2]) {
  for (int dt = 0; dt < 2; dt++) {
    out[dt][0] = slow ? f->threads_slow_by_rows[dt] : f->threads_by_rows[dt];
    out[dt][1] = slow ? f->threads_slow_by_cols[dt] : f->threads_by_cols[dt];
  }
}

void tool_threads_slow_text(const poas_device_fit *f, char *buf, size_t cap) {
  if (cap)
    buf[0] = '\0';
  const unsigned char *slow[2][2], *by[2][2];
  tool_threads_tables(f, 1, slow);
  tool_threads_tables(f, 0, by);
  counts_clause(buf, cap, slow, by, 1);
}

void tool_threads_text(const poas_device_fit *f, char *buf, size_t cap) {
  if (cap)
    buf[0] = '\0';
  const unsigned char *by[2][2];
  tool_threads_tables(f, 0, by);
  /* One clause per thread count used. */
  for (int t = 1; t < 256; t++)
    counts_clause(buf, cap, by, NULL, t);
}
