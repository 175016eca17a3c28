/* pipeline.c: the predicted time of a device's part of a GEMM, for the
 * pipeline adapt/ builds: on a copy device, the shared operand goes first on
 * the copy-in lane, then tile after tile the copy-in of its part of the
 * other operand and of C (when C is read), the GEMM on the compute lane and
 * the copy-out of C on the copy-out lane. Each lane runs in order; with two
 * buffers per operand a tile's copy-in waits for the GEMM that read the same
 * buffer two tiles earlier, and its C buffer for the copy-out two tiles
 * earlier. The recurrence below is exactly that dependency structure.
 *
 * The state after each tile (ends of the copy-in lane and of the last two
 * GEMMs and copy-outs) is a max-plus linear function of the state before.
 * With identical tiles it becomes periodic with period 1 or 2 (every cycle
 * of the dependency graph holds one or two buffers) after a few tiles, so
 * the time of n tiles is a table lookup plus a multiple of the period.
 *
 * The maxima are POAS__MAX rather than libm's fmax, which is a call on
 * every step here (times are finite: models are checked before planning);
 * the planner evaluates this recurrence thousands of times a plan.
 *
 * A device that shares the host's cores (PoCL's CPU device) runs its copies
 * on the same threads as its kernels, so nothing overlaps there: its lanes
 * are one timeline. Predicting overlap for it was 25-40% optimistic on a
 * one-core PoCL device (2048^3 sgemm, end to end). */
#include "optimize/optimize.h"

#include <math.h>
#include <string.h>

enum { S_H2D = 0, S_G1, S_G2, S_O1, S_O2, S_N };

int64_t poas__split_units(const poas__opt_problem *p, poas__split_dim split) {
  return split == POAS__SPLIT_ROWS ? p->m : p->n;
}

uint64_t poas__shared_bytes(const poas__opt_problem *p, poas__split_dim split) {
  if (!p->reads_ab)
    return 0;
  uint64_t es = poas__dtype_size(p->dtype);
  int64_t other = split == POAS__SPLIT_ROWS ? p->n : p->m;
  return (uint64_t)p->k * (uint64_t)other * es;
}

int poas__tile_copies_both_ways(const poas__opt_problem *p, int first, int last) {
  if (!p->reads_ab && !p->reads_c)
    return 0;
  return (first ? 0 : POAS__BOTH_WAYS_IN) | (last ? 0 : POAS__BOTH_WAYS_OUT);
}

int poas__shared_transposed(const poas__opt_problem *p, poas__split_dim split, int wants_bt) {
  if (!wants_bt || !p->reads_ab)
    return 0;
  return split == POAS__SPLIT_ROWS ? p->transb == POAS_NO_TRANS : p->transa == POAS_TRANS;
}

void poas__flip_shared_op(poas__split_dim split, poas_op *transa, poas_op *transb) {
  poas_op *op = split == POAS__SPLIT_ROWS ? transb : transa;
  *op = *op == POAS_TRANS ? POAS_NO_TRANS : POAS_TRANS;
}

/* Bytes of one unit's part of the non-shared operand and of C. */
static void unit_bytes(const poas__opt_problem *p, poas__split_dim split, double *in, double *c) {
  double es = (double)poas__dtype_size(p->dtype);
  *in = p->reads_ab ? (double)p->k * es : 0;
  *c = (double)(split == POAS__SPLIT_ROWS ? p->n : p->m) * es;
}

static void tile_costs(const poas__opt_problem *p, poas__split_dim split,
                       const poas__device_model *dm, int host_memory, int smooth, int64_t units,
                       int both_ways, poas__tile_cost *out);

void poas__tile_costs(const poas__opt_problem *p, poas__split_dim split,
                      const poas__device_model *dm, int host_memory, int64_t units, int both_ways,
                      poas__tile_cost *out) {
  tile_costs(p, split, dm, host_memory, 0, units, both_ways, out);
}

static void tile_costs(const poas__opt_problem *p, poas__split_dim split,
                       const poas__device_model *dm, int host_memory, int smooth, int64_t units,
                       int both_ways, poas__tile_cost *out) {
  memset(out, 0, sizeof *out);
  if (units <= 0)
    return;
  int64_t k = p->reads_ab ? p->k : 0;
  int64_t m = split == POAS__SPLIT_ROWS ? units : p->m;
  int64_t n = split == POAS__SPLIT_ROWS ? p->n : units;
  out->gemm_s = (smooth ? poas__model_gemm_smooth : poas__model_gemm_time)(
      dm, p->dtype, p->transa, p->transb, m, n, k);
  if (host_memory)
    return;
  double in, c;
  unit_bytes(p, split, &in, &c);
  /* Copies that run while copies go the other way are each slower by the
   * device's duplex factor (poas__tile_copies_both_ways says which). */
  double dx = dm->duplex > 1 ? dm->duplex : 1;
  double in_x = both_ways & POAS__BOTH_WAYS_IN ? dx : 1;
  double out_x = both_ways & POAS__BOTH_WAYS_OUT ? dx : 1;
  if (p->reads_ab)
    out->in_s = in_x * poas__model_transfer_time(dm, POAS_H2D, in * (double)units);
  if (p->reads_c)
    out->c_s = in_x * poas__model_transfer_time(dm, POAS_H2D, c * (double)units);
  out->out_s = out_x * poas__model_transfer_time(dm, POAS_D2H, c * (double)units);
}

/* One tile through the lanes: s is updated in place. */
static void step(double s[S_N], const poas__tile_cost *t, int reads_ab, int reads_c, int serial) {
  if (serial) {
    double start = POAS__MAX(s[S_H2D], POAS__MAX(s[S_G1], s[S_O1]));
    double end = start + (reads_ab ? t->in_s : 0) + (reads_c ? t->c_s : 0) + t->gemm_s + t->out_s;
    s[S_G2] = s[S_G1], s[S_O2] = s[S_O1];
    s[S_H2D] = s[S_G1] = s[S_O1] = end;
    return;
  }
  double ready = 0;
  if (reads_ab) {
    s[S_H2D] = POAS__MAX(s[S_H2D], s[S_G2]) + t->in_s;
    ready = s[S_H2D];
  }
  if (reads_c) {
    s[S_H2D] = POAS__MAX(s[S_H2D], s[S_O2]) + t->c_s;
    ready = s[S_H2D];
  } else {
    ready = POAS__MAX(ready, s[S_O2]);
  }
  double g = POAS__MAX(s[S_G1], ready) + t->gemm_s;
  double o = POAS__MAX(s[S_O1], g) + t->out_s;
  s[S_G2] = s[S_G1], s[S_G1] = g;
  s[S_O2] = s[S_O1], s[S_O1] = o;
}

/* Whether states a and b differ by the same amount in every component that
 * moves (the copy-in lane stands still when nothing is copied in). */
static int shifted_copy(const double a[S_N], const double b[S_N], int h2d_moves, double *shift) {
  double lo = INFINITY, hi = -INFINITY;
  for (int c = h2d_moves ? 0 : 1; c < S_N; c++) {
    double d = b[c] - a[c];
    lo = POAS__MIN(lo, d), hi = POAS__MAX(hi, d);
  }
  *shift = hi;
  return hi - lo <= 1e-12 * POAS__MAX(fabs(b[S_O1]), 1e-300);
}

static void pipe_init(poas__pipe *pp, const poas__opt_problem *p, poas__split_dim split,
                      const poas__device_model *dm, const poas__opt_device *dev, int64_t tile,
                      int with_shared, int smooth);

void poas__pipe_init(poas__pipe *pp, const poas__opt_problem *p, poas__split_dim split,
                     const poas__device_model *dm, const poas__opt_device *dev, int64_t tile,
                     int with_shared) {
  pipe_init(pp, p, split, dm, dev, tile, with_shared, 0);
}

void poas__pipe_init_search(poas__pipe *pp, const poas__opt_problem *p, poas__split_dim split,
                            const poas__device_model *dm, const poas__opt_device *dev,
                            int64_t tile, int with_shared) {
  pipe_init(pp, p, split, dm, dev, tile, with_shared, 1);
}

static void pipe_init(poas__pipe *pp, const poas__opt_problem *p, poas__split_dim split,
                      const poas__device_model *dm, const poas__opt_device *dev, int64_t tile,
                      int with_shared, int smooth) {
  memset(pp, 0, sizeof *pp);
  pp->smooth = smooth;
  int host_memory = dev->host_memory;
  pp->host_memory = host_memory;
  pp->serial = dev->shares_host_cores && !host_memory;
  pp->reads_c = p->reads_c;
  pp->reads_ab = p->reads_ab;
  pp->tile = tile > 0 ? tile : 1;
  pp->model = dm;
  pp->prob = *p;
  pp->split = split;
  if (host_memory)
    return;
  pp->transposed = poas__shared_transposed(p, split, dev->wants_bt);
  if (pp->transposed)
    poas__flip_shared_op(split, &pp->prob.transa, &pp->prob.transb);
  unit_bytes(p, split, &pp->unit_in_bytes, &pp->unit_c_bytes);
  if (with_shared && p->reads_ab) {
    pp->shared_bytes = poas__shared_bytes(p, split);
    pp->shared_s = poas__model_transfer_time(dm, POAS_H2D, (double)pp->shared_bytes);
    if (pp->transposed)
      pp->transpose_s = poas__model_transpose_time(dm, p->dtype, (double)pp->shared_bytes);
  }
  /* Tiles between the first and the last copy both ways; the device's
   * first tile copies in before anything comes out (the last tile, which
   * copies out after everything went in, is stepped by poas__pipe_eval). */
  pp->first = with_shared;
  poas__tile_cost t, t1;
  int both_ways = poas__tile_copies_both_ways(p, 0, 0);
  tile_costs(&pp->prob, split, dm, 0, smooth, pp->tile, both_ways, &t);
  /* The one-way copies are the same copies without the duplex factor
   * (tile_costs multiplies by it): not evaluated again, since the tile's
   * GEMM model is most of a pipeline's set-up, and the solver sets up
   * many (tile_costs twice took a solve of eight devices from 59 to 68
   * us, bench/optimize-bench). */
  double dx = dm->duplex > 1 ? dm->duplex : 1;
  t1 = t;
  if (both_ways & POAS__BOTH_WAYS_IN)
    t1.in_s /= dx, t1.c_s /= dx;
  if (both_ways & POAS__BOTH_WAYS_OUT)
    t1.out_s /= dx;
  pp->t_in = t.in_s, pp->t_c = t.c_s, pp->t_gemm = t.gemm_s, pp->t_out = t.out_s;
  pp->t_in1 = t1.in_s, pp->t_c1 = t1.c_s, pp->t_out1 = t1.out_s;
  poas__tile_cost first = t;
  if (pp->first)
    first.in_s = t1.in_s, first.c_s = t1.c_s;
  /* The transpose holds the compute lane once the shared operand is in. */
  double s[S_N] = {pp->shared_s, pp->shared_s + pp->transpose_s, 0, 0, 0};
  memcpy(pp->states[0], s, sizeof s);
  int h2d_moves = p->reads_ab || p->reads_c;
  for (int j = 1; j < POAS__PIPE_STEPS; j++) {
    step(s, j == 1 ? &first : &t, p->reads_ab, p->reads_c, pp->serial);
    memcpy(pp->states[j], s, sizeof s);
    pp->nstates = j + 1;
    if (j >= 3 && shifted_copy(pp->states[j - 2], s, h2d_moves, &pp->period_shift)) {
      pp->periodic = 1;
      return;
    }
  }
  /* Not settled within the table: extrapolate with the largest shift of
   * the last period, which errs towards a later finish. */
  shifted_copy(pp->states[POAS__PIPE_STEPS - 3], pp->states[POAS__PIPE_STEPS - 1], h2d_moves,
               &pp->period_shift);
  pp->periodic = 1;
}

/* The state after `tiles` whole tiles. */
static void state_after(const poas__pipe *pp, int64_t tiles, double s[S_N]) {
  int64_t last = pp->nstates - 1;
  if (tiles <= last) {
    memcpy(s, pp->states[tiles], sizeof(double) * S_N);
    return;
  }
  int64_t base = last - ((tiles - last) & 1);
  double periods = (double)((tiles - base) / 2);
  for (int c = 0; c < S_N; c++)
    s[c] = pp->states[base][c] + periods * pp->period_shift;
  if (!pp->reads_ab && !pp->reads_c)
    s[S_H2D] = pp->states[base][S_H2D];
}

void poas__pipe_eval(const poas__pipe *pp, int64_t units, poas__pipe_time *out) {
  memset(out, 0, sizeof *out);
  if (units <= 0)
    return;
  if (pp->host_memory) {
    poas__tile_cost t;
    tile_costs(&pp->prob, pp->split, pp->model, 1, pp->smooth, units, 0, &t);
    out->total_s = out->compute_s = t.gemm_s;
    out->total_s += pp->model->dispatch_s;
    out->tiles = 1;
    return;
  }
  /* The tiles before the last from the table, then the last, whose
   * copy-out runs after everything went in (one way). */
  int64_t whole = units / pp->tile, rest = units % pp->tile;
  int64_t before = rest > 0 ? whole : whole - 1;
  double s[S_N];
  state_after(pp, before, s);
  double compute = pp->transpose_s + (double)before * pp->t_gemm;
  double transfer = pp->shared_s + (double)before * (pp->t_in + pp->t_c + pp->t_out);
  if (pp->first && before > 0)
    transfer -= (pp->t_in - pp->t_in1) + (pp->t_c - pp->t_c1);
  poas__tile_cost t;
  int both_ways = poas__tile_copies_both_ways(&pp->prob, pp->first && before == 0, 1);
  if (rest > 0) {
    tile_costs(&pp->prob, pp->split, pp->model, 0, pp->smooth, rest, both_ways, &t);
  } else {
    t = (poas__tile_cost){pp->t_in, pp->t_c, pp->t_gemm, pp->t_out1};
    if (!(both_ways & POAS__BOTH_WAYS_IN))
      t.in_s = pp->t_in1, t.c_s = pp->t_c1;
  }
  step(s, &t, pp->reads_ab, pp->reads_c, pp->serial);
  compute += t.gemm_s;
  transfer += t.in_s + t.c_s + t.out_s;
  out->total_s = s[S_O1] + pp->model->dispatch_s;
  out->compute_s = compute;
  out->transfer_s = transfer;
  out->tiles = whole + (rest > 0);
  out->bytes_h2d = pp->shared_bytes +
                   (uint64_t)((double)units * (pp->unit_in_bytes + (pp->reads_c ? pp->unit_c_bytes : 0)));
  out->bytes_d2h = (uint64_t)((double)units * pp->unit_c_bytes);
}
