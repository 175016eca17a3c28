/* split.c: the solver. Units (rows or columns of C) are handed out in
 * granules. Each device's predicted time for n granules is its pipeline's
 * (pipeline.c), and is nondecreasing in n, so for a makespan T the most
 * granules a device can finish by T is well defined and grows with T. A
 * bisection on T finds the smallest T for which the devices together can
 * take every granule; the surplus at that T is trimmed from the slowest
 * devices and a local search moves single granules off the critical device
 * while that shortens the makespan. A device that gets no granule is left
 * out, with the reason in words.
 *
 * Before that, devices are screened (data type, memory, usable model) and
 * devices that compute on the host's cores compete for them: when their
 * cores together exceed the host's, every largest subset whose cores fit is
 * solved and the fastest kept, so the plan never counts throughput twice. */
#include "optimize/optimize.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Device memory left free for the runtime's own needs. */
#define MEMORY_MARGIN 0.9
/* Tiles per device share aimed at, so that copies overlap compute. */
#define PIPE_DEPTH 4
/* Devices sharing the host's cores whose subsets are enumerated. */
#define MAX_SHARING 12

/* The solver's view of one candidate device. Its pipeline is the smooth
 * model's (poas__pipe_init_search), whose time never falls as units are
 * added; fill_result reports the plan's times with the thin-block tables. */
typedef struct cand {
  int dev;        /* index in the input */
  poas__pipe pipe;
} cand;

typedef struct solver {
  const poas__opt_problem *p;
  int64_t total, granule, ngran;
  int ncand;
  cand c[POAS_MAX_DEVICES];
  int64_t n[POAS_MAX_DEVICES];       /* granules per candidate */
  /* Candidates that share the host's cores (when two or more do), and
   * their models before contention: every solve slows those of them that
   * compute together (apply_contention). */
  int ns;
  int sharing[MAX_SHARING];
  poas__device_model base[MAX_SHARING];
  double bar; /* the gain a device must bring to take part (gain_bar) */
} solver;

static const char *unit_name(const poas__opt_problem *p, poas__split_dim split) {
  return (split == POAS__SPLIT_ROWS) != (p->names_swapped != 0) ? "rows" : "columns";
}

/* Significant digits that print a and b apart, from 3 up to 9: a reason
 * once said a device alone took "245 ms, less than the 245 ms" of a plan. */
static int digits_apart(double a, double b) {
  int digits = 3;
  char x[32], y[32];
  for (; digits < 9; digits++) {
    snprintf(x, sizeof x, "%.*g", digits, a);
    snprintf(y, sizeof y, "%.*g", digits, b);
    if (strcmp(x, y) != 0)
      break;
  }
  return digits;
}

/* Predicted seconds for `g` granules on candidate i, by the smooth model
 * (never falling as g grows). */
static double cand_time(const solver *s, int i, int64_t g) {
  if (g <= 0)
    return 0;
  poas__pipe_time t;
  poas__pipe_eval(&s->c[i].pipe, POAS__MIN(g * s->granule, s->total), &t);
  return t.total_s;
}

/* ------------------------------------------------------------- screening */

static int time_ok(double t, int strictly_positive) {
  return isfinite(t) && (strictly_positive ? t > 0 : t >= 0);
}

/* Copies a device's model, replacing what is missing or unusable (NaN,
 * infinite, zero or negative times) with a conservative estimate. Returns
 * whether anything was replaced. */
static int usable_model(const poas__opt_device *d, const poas__opt_problem *p,
                        poas__device_model *out) {
  int replaced = 0;
  if (d->model)
    *out = *d->model;
  else
    memset(out, 0, sizeof *out);
  double g = d->model ? poas__model_gemm_time(out, p->dtype, p->transa, p->transb, 256, 256, 256)
                      : NAN;
  double g1 = d->model ? poas__model_gemm_time(out, p->dtype, p->transa, p->transb, 1, 1, 1) : NAN;
  if (!time_ok(g, 1) || !time_ok(g1, 0)) {
    for (int dt = 0; dt < 2; dt++)
      for (int pair = 0; pair < 4; pair++)
        poas__gemm_model_from_rate(&out->gemm[dt][pair], 1e9, 1e-4);
    replaced = 1;
  }
  if (!d->host_memory) {
    for (int dir = 0; dir < 2; dir++) {
      double t = poas__model_transfer_time(out, (poas_direction)dir, 1 << 20);
      if (!out->xfer[dir].valid || !time_ok(t, 1)) {
        out->xfer[dir] = (poas__transfer_model){.valid = 1, .latency = 1e-4, .bandwidth = 1e9};
        replaced = 1;
      }
    }
  }
  return replaced;
}

/* Bytes of A, B and C as stored. */
static double problem_bytes(const poas__opt_problem *p) {
  double es = (double)poas__dtype_size(p->dtype);
  return es * ((double)p->m * (double)p->n +
               (p->reads_ab ? (double)p->k * ((double)p->m + (double)p->n) : 0));
}

/* ---------------------------------------------- a GEMM call's scratch */

/* The temporary copies of the operands that one GEMM call on a device
 * allocates (poas__opt_device.scratch_pad: CLBlast's indirect kernel, see
 * devices/opencl/opencl.c), for a tile of t units: one buffer of
 * fixed + padded(t) x per_padded_unit elements, padded(t) being t rounded
 * up to scratch_pad. A call's k is 1 where A and B are not read (the
 * OpenCL backend scales C with a rank-1 update of zeros). Every tile's
 * operand and C are counted, their sides being multiples of 32 at best;
 * the shared operand only where it is not already in the kernel's layout:
 * held the way round its GEMM wants (wants_bt, adapt/ transposes it once)
 * with both sides whole multiples of scratch_pad, a multiple of every
 * work-group tile, it is not copied (a 4096^2 B is not, a 4000^2 B is,
 * on every call). */
typedef struct scratch {
  double fixed, per_padded_unit;
  int64_t pad;
  int64_t direct_units; /* tiles up to this many units run direct: no scratch */
} scratch;

static int has_scratch(const poas__opt_device *d) { return d->scratch_pad > 0; }

static scratch call_scratch(const poas__opt_device *d, const poas__opt_problem *p,
                            poas__split_dim split) {
  scratch sc = {0, 0, POAS__MAX(d->scratch_pad, 1), 0};
  int64_t k = p->reads_ab ? p->k : 1, other = split == POAS__SPLIT_ROWS ? p->n : p->m;
  int in_layout = p->reads_ab && d->wants_bt && k % sc.pad == 0 && other % sc.pad == 0;
  sc.fixed = in_layout ? 0 : poas__padded_elems(k, other, sc.pad);
  sc.per_padded_unit = poas__padded_elems(1, k, sc.pad) / (double)sc.pad +
                       poas__padded_elems(1, other, sc.pad) / (double)sc.pad;
  /* CLBlast runs a call direct when m n k is below scratch_min_mnk. */
  double direct = d->scratch_min_mnk > 0
                      ? ceil((double)d->scratch_min_mnk / ((double)k * (double)other)) - 1
                      : 0;
  sc.direct_units = (int64_t)fmin(fmax(direct, 0), (double)(INT64_MAX / 4));
  return sc;
}

/* The most units in a tile whose scratch stays within `limit` elements:
 * a whole multiple of the padding, or a tile that runs direct. */
static int64_t scratch_units_within(const scratch *sc, double limit) {
  double room = limit - sc->fixed;
  double blocks = room > 0 ? floor(room / (sc->per_padded_unit * (double)sc->pad)) : 0;
  int64_t units = (int64_t)fmin(blocks * (double)sc->pad, (double)(INT64_MAX / 4));
  return POAS__MAX(units, sc->direct_units);
}

/* The largest tile (in units) a copy device can hold with two buffers per
 * operand beside the shared operand, and one GEMM call's scratch; 0 when
 * not even one unit fits. One scratch is all a device holds however many
 * GEMMs are queued (the engine queues every tile of its open chunks at
 * once, 16 for a 4096^3 sgemm on opencl0): they run on one lane, whose
 * one buffer they share (devices/opencl/opencl.c, ocl_scratch). */
static int64_t tile_fit(const poas__opt_device *d, const poas__opt_problem *p,
                        poas__split_dim split) {
  /* A shared operand transposed on the device is held twice until the
   * transpose is done. */
  double shared = (double)poas__shared_bytes(p, split) *
                  (poas__shared_transposed(p, split, d->wants_bt) ? 2 : 1);
  double budget = (double)d->memory_bytes * MEMORY_MARGIN - shared;
  double es = (double)poas__dtype_size(p->dtype);
  double per_unit = 2.0 * es * ((p->reads_ab ? (double)p->k : 0) +
                                (double)(split == POAS__SPLIT_ROWS ? p->n : p->m));
  if (budget < per_unit)
    return 0;
  double t = floor(budget / per_unit);
  if (has_scratch(d)) {
    /* padded(t) <= t + pad - 1: a bound linear in t. */
    scratch sc = call_scratch(d, p, split);
    double fixed = es * (sc.fixed + (double)(sc.pad - 1) * sc.per_padded_unit);
    double with = budget > fixed ? floor((budget - fixed) / (per_unit + es * sc.per_padded_unit))
                                 : 0;
    t = fmax(with, fmin(t, (double)sc.direct_units));
  }
  return t > (double)INT64_MAX / 4 ? INT64_MAX / 4 : (int64_t)t;
}

/* a / b rounded up, for a >= 0 and b > 0, without the overflow of
 * (a + b - 1) / b near INT64_MAX. */
static int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

static int64_t auto_granule(int64_t total) {
  int64_t g = ceil_div(total, 256);
  if (g >= 32)
    g = (g + 31) / 32 * 32;
  return POAS__MAX(g, 1);
}

static int within_limits(const poas__opt_device *d, const poas__opt_problem *p,
                         poas__split_dim split, char *why, size_t cap);

/* Whether a copy device can take part in `split`: its memory holds the
 * shared operand and a tile, and each of their buffers is within its
 * limits on one (a shared B past them may leave a shared A within). */
static int copy_device_fits(const poas__opt_device *d, const poas__opt_problem *p,
                            poas__split_dim split) {
  return tile_fit(d, p, split) > 0 && within_limits(d, p, split, NULL, 0);
}

/* Rows when they move no more bytes than columns, counting the shared
 * operand once per copy device that can hold it; a split that lets more
 * devices take part wins first. */
static poas__split_dim choose_split(const poas__opt_device *d, int nd, const int *ok,
                                    const poas__opt_problem *p) {
  int fits[2] = {0, 0};
  for (int s = 0; s < 2; s++)
    for (int i = 0; i < nd; i++)
      if (ok[i] && (d[i].host_memory || copy_device_fits(&d[i], p, (poas__split_dim)s)))
        fits[s]++;
  if (fits[0] != fits[1])
    return fits[0] > fits[1] ? POAS__SPLIT_ROWS : POAS__SPLIT_COLS;
  int copies[2] = {0, 0};
  for (int s = 0; s < 2; s++)
    for (int i = 0; i < nd; i++)
      if (ok[i] && !d[i].host_memory && copy_device_fits(&d[i], p, (poas__split_dim)s))
        copies[s]++;
  double k = p->reads_ab ? (double)p->k : 0;
  double rows = copies[0] * k * (double)p->n + k * (double)p->m;
  double cols = copies[1] * k * (double)p->m + k * (double)p->n;
  return copies[0] + copies[1] > 0 && cols < rows ? POAS__SPLIT_COLS : POAS__SPLIT_ROWS;
}

/* --------------------------------------------------------------- solving */

/* The most granules in [lo, hi] candidate i finishes by T (lo is known to
 * finish by T). */
static int64_t most_by(const solver *s, int i, double T, int64_t lo, int64_t hi) {
  /* The whole bracket first: the search below takes times never to fall
   * as granules grow, and where a model is flat over them (padded to 16
   * columns, 33 to 48 cost alike) rounding can put fewer a hair above all
   * of them. Searched alone, a device then took 46 of 48 granules even at
   * its own time for 48, and a plan of it alone failed with no reason. */
  if (lo < hi && cand_time(s, i, hi) <= T)
    return hi;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo + 1) / 2;
    if (cand_time(s, i, mid) <= T)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

static double makespan(const solver *s) {
  double t = 0;
  for (int i = 0; i < s->ncand; i++)
    t = fmax(t, cand_time(s, i, s->n[i]));
  return t;
}

/* Takes granules from the slowest devices until exactly ngran are given. */
static void trim(solver *s) {
  int64_t sum = 0;
  for (int i = 0; i < s->ncand; i++)
    sum += s->n[i];
  while (sum > s->ngran) {
    int worst = -1;
    double tw = -1;
    for (int i = 0; i < s->ncand; i++) {
      double t = s->n[i] > 0 ? cand_time(s, i, s->n[i]) : -1;
      if (t > tw)
        tw = t, worst = i;
    }
    if (worst < 0) /* no time to compare (NaN models): leave the shares be */
      break;
    s->n[worst]--, sum--;
  }
}

/* Moves single granules off the device that finishes last while that
 * shortens the makespan. */
static void improve(solver *s) {
  for (int round = 0; round < 4 * s->ncand; round++) {
    int worst = 0;
    double tw = -1, second = 0;
    for (int i = 0; i < s->ncand; i++) {
      double t = cand_time(s, i, s->n[i]);
      if (t > tw)
        second = fmax(second, tw), tw = t, worst = i;
      else
        second = fmax(second, t);
    }
    if (s->n[worst] == 0)
      return;
    double worst_after = cand_time(s, worst, s->n[worst] - 1);
    int best = -1;
    double best_t = tw;
    for (int i = 0; i < s->ncand; i++) {
      if (i == worst)
        continue;
      double t = fmax(fmax(worst_after, cand_time(s, i, s->n[i] + 1)), second);
      if (t < best_t * (1 - 1e-12))
        best_t = t, best = i;
    }
    if (best < 0)
      return;
    s->n[worst]--, s->n[best]++;
  }
}

/* Equalises finish times by bisection on the makespan; fills s->n. */
static double balance(solver *s) {
  int64_t nlo[POAS_MAX_DEVICES] = {0}, nhi[POAS_MAX_DEVICES], nmid[POAS_MAX_DEVICES];
  double hi = INFINITY;
  for (int i = 0; i < s->ncand; i++)
    hi = fmin(hi, cand_time(s, i, s->ngran));
  for (int i = 0; i < s->ncand; i++)
    nhi[i] = most_by(s, i, hi, 0, s->ngran);
  double lo = 0;
  for (int iter = 0; iter < 200 && hi - lo > 1e-9 * hi; iter++) {
    /* Once the two brackets differ by one granule on one device, every
     * time between them gives one or the other, and the answer is nhi:
     * halving further changes nothing. */
    int64_t gap = 0;
    for (int i = 0; i < s->ncand; i++)
      gap += nhi[i] - nlo[i];
    if (gap <= 1)
      break;
    double mid = 0.5 * (lo + hi);
    int64_t sum = 0;
    for (int i = 0; i < s->ncand; i++) {
      nmid[i] = most_by(s, i, mid, nlo[i], nhi[i]);
      sum += nmid[i];
    }
    if (sum >= s->ngran) {
      hi = mid;
      memcpy(nhi, nmid, sizeof nmid);
    } else {
      lo = mid;
      memcpy(nlo, nmid, sizeof nmid);
    }
  }
  memcpy(s->n, nhi, sizeof nhi);
  int64_t given = 0;
  for (int i = 0; i < s->ncand; i++)
    given += s->n[i];
  /* Only times that are not numbers can leave granules unplaced. */
  if (given < s->ngran)
    return INFINITY;
  trim(s);
  improve(s);
  return makespan(s);
}

/* ------------------------------------------------------------- the whole */

typedef struct screen {
  int ok[POAS_MAX_DEVICES];          /* may take part */
  int64_t tile[POAS_MAX_DEVICES];    /* units per tile; 0 when it cannot take part */
  /* Left out for what it adds, by times of the split then solved
   * (drop_marginal, alone_when_cheaper): its reason quotes them. */
  int judged[POAS_MAX_DEVICES];
  /* Devices left out for their limits on one buffer (within_limits),
   * rather than for their memory: the error then quotes their reasons. */
  int limited;
} screen;

/* The most units in a tile within the device's tile_bytes_max of the
 * non-shared operand (whole granules, at least one); INT64_MAX when it
 * has no such limit. */
static int64_t tile_cap(const poas__opt_device *d, const poas__opt_problem *p, int64_t granule) {
  if (!d->tile_bytes_max || !p->reads_ab || p->k <= 0)
    return INT64_MAX;
  int64_t units = (int64_t)(d->tile_bytes_max / ((uint64_t)p->k * poas__dtype_size(p->dtype)));
  return POAS__MAX(units / granule * granule, granule);
}

/* A device's limits on one operand's buffer: the elements its GEMM can
 * index (max_operand_elems, each side counted rounded up to index_pad),
 * and those its largest allocation holds (buffer_bytes_max: adapt/gemm.c
 * allocates the shared operand, its transpose, and each tile of the other
 * operand and of C, dense and unpadded). INFINITY: no such limit. */
static double index_limit(const poas__opt_device *d) {
  return d->max_operand_elems > 0 ? (double)d->max_operand_elems : INFINITY;
}

static double buffer_limit(const poas__opt_device *d, const poas__opt_problem *p) {
  return d->buffer_bytes_max > 0
             ? floor((double)d->buffer_bytes_max / (double)poas__dtype_size(p->dtype))
             : INFINITY;
}

/* The most units in a tile whose operands each stay within `limit`
 * elements, sides padded to `pad`: the non-shared operand's tile is
 * units x k, C's units x its other side. INT64_MAX with no limit; 0 when
 * not even one unit fits. */
static int64_t units_within(const poas__opt_problem *p, poas__split_dim split, double limit,
                            int64_t pad) {
  if (isinf(limit))
    return INT64_MAX;
  pad = POAS__MAX(pad, 1);
  int64_t cap = INT64_MAX;
  const int64_t across[2] = {p->reads_ab ? p->k : 0, split == POAS__SPLIT_ROWS ? p->n : p->m};
  for (int i = 0; i < 2; i++) {
    if (across[i] <= 0)
      continue;
    double side = poas__padded_elems(1, across[i], pad) / (double)pad; /* across[i], padded */
    double units = fmin(floor(limit / side), (double)(INT64_MAX / 4));
    cap = POAS__MIN(cap, (int64_t)units / pad * pad);
  }
  return cap;
}

/* Whether the shared operand (k x the split's other side), where the
 * problem reads one, stays within `limit` elements, sides padded to
 * `pad`. */
static int shared_within(const poas__opt_problem *p, poas__split_dim split, double limit,
                         int64_t pad) {
  return isinf(limit) || !p->reads_ab ||
         poas__padded_elems(p->k, split == POAS__SPLIT_ROWS ? p->n : p->m, pad) <= limit;
}

/* The most units in a tile whose GEMM call's scratch is one buffer the
 * device can allocate and its GEMM can index; INT64_MAX with no scratch
 * or no limit. CLBlast's copies of B and C lie at offsets after A's in
 * that one buffer, which its kernels take as int with their indices: the
 * scratch as a whole must stay within the index limit, not each copy (a
 * tile whose A and C copies were each within it had a scratch 16% past
 * it, test-optimize). */
static double scratch_limit(const poas__opt_device *d, const poas__opt_problem *p) {
  return fmin(buffer_limit(d, p), index_limit(d));
}

static int64_t scratch_cap(const poas__opt_device *d, const poas__opt_problem *p,
                           poas__split_dim split) {
  if (!has_scratch(d) || isinf(scratch_limit(d, p)))
    return INT64_MAX;
  scratch sc = call_scratch(d, p, split);
  return scratch_units_within(&sc, scratch_limit(d, p));
}

/* The most units in a tile within both limits (see index_limit), its
 * GEMM's scratch included. */
static int64_t limit_cap(const poas__opt_device *d, const poas__opt_problem *p,
                         poas__split_dim split) {
  int64_t cap = POAS__MIN(units_within(p, split, index_limit(d), d->index_pad),
                          units_within(p, split, buffer_limit(d, p), 1));
  return POAS__MIN(cap, scratch_cap(d, p, split));
}

/* Why the device cannot take the problem split this way for its limits
 * on one buffer, in why (which says nothing when it can); returns whether
 * it can. */
static int within_limits(const poas__opt_device *d, const poas__opt_problem *p,
                         poas__split_dim split, char *why, size_t cap) {
  double es = (double)poas__dtype_size(p->dtype), gib = 1073741824.0;
  double other = (double)(split == POAS__SPLIT_ROWS ? p->n : p->m);
  if (why && cap)
    why[0] = '\0';
  if (!shared_within(p, split, index_limit(d), d->index_pad) ||
      units_within(p, split, index_limit(d), d->index_pad) == 0) {
    if (why)
      snprintf(why, cap, "an operand is past the %lld elements its GEMM can index in one call",
               (long long)d->max_operand_elems);
    return 0;
  }
  if (!shared_within(p, split, buffer_limit(d, p), 1)) {
    if (why)
      snprintf(why, cap,
               "the shared operand alone needs %.3g GiB in one buffer, more than the %.3g GiB "
               "it can allocate at once",
               (double)poas__shared_bytes(p, split) / gib, (double)d->buffer_bytes_max / gib);
    return 0;
  }
  /* With the shared operand within it, a unit of either tile is too: only
   * a C alone (A and B unread) can get here. */
  if (units_within(p, split, buffer_limit(d, p), 1) == 0) {
    if (why)
      snprintf(why, cap, "each of C's %s needs %.3g GiB, more than the %.3g GiB it can allocate "
               "at once",
               unit_name(p, split), other * es / gib, (double)d->buffer_bytes_max / gib);
    return 0;
  }
  if (scratch_cap(d, p, split) == 0) {
    scratch sc = call_scratch(d, p, split);
    double need = sc.fixed + sc.per_padded_unit * (double)sc.pad;
    if (why && need > index_limit(d))
      snprintf(why, cap,
               "its GEMM's temporary copies of the operands, padded to blocks of %lld, need "
               "%.0f elements in one buffer for a single tile, past the %lld its GEMM can "
               "index in one call",
               (long long)sc.pad, need, (long long)d->max_operand_elems);
    else if (why)
      snprintf(why, cap,
               "its GEMM's temporary copies of the operands, padded to blocks of %lld, need "
               "%.3g GiB in one buffer for a single tile, more than the %.3g GiB it can "
               "allocate at once",
               (long long)sc.pad, es * need / gib, (double)d->buffer_bytes_max / gib);
    return 0;
  }
  return 1;
}

/* The tile of a copy device that can hold `fit` units in a tile, for a
 * share of `share` units split by `split`, in whole granules of `granule`
 * where memory allows (alone: the only device with work). PIPE_DEPTH
 * tiles of its share overlap copies with GEMMs, but each tile pays a
 * copy's latency and a call's overhead more, which a small problem feels
 * (a 64^3 sgemm in four tiles on PoCL spent 180 us on the device where one
 * tile takes 70).
 * So of PIPE_DEPTH tiles, half as many, and so on down to two, the
 * pipeline model's best for the device's share; and one tile when that is
 * predicted within 2% of it, or, for a device planned alone, within
 * p->engine_s: a single device with a single tile runs on the caller's
 * thread without the engine (schedule/run.c), whose threads and hand-offs
 * cost about 0.1 ms a run on the CI machine and 0.45 ms on an H100 VM (a
 * 512^3 sgemm took 1.3 ms there in four tiles and 0.3 ms issued as one).
 *
 * Not more than PIPE_DEPTH tiles, though the model often predicts more to
 * be faster (the first tile's copies, which nothing hides, get shorter):
 * every tile adds instructions, whose hand-offs between the engine's
 * threads the model does not count, and on an H100 VM a 2048^3 sgemm ran
 * 9.4 ms in eight tiles against 6.1-6.7 ms in four. */
/* A cap on a device's tile (its memory's, its limits on one buffer),
 * rounded down to whole blocks of its GEMM (unit_align) where that leaves
 * one: a tile of 3157 rows, where the device computes 32 at a time, pays
 * for 3168 and leaves a ragged block on every tile. Below one block the
 * cap stands: a tile never holds more than memory does. */
static int64_t aligned_cap(const poas__opt_device *d, int64_t cap) {
  int64_t a = d->unit_align;
  return a > 1 && cap >= a ? cap / a * a : cap;
}

static int64_t device_tile(const poas__opt_device *d, const poas__opt_problem *p,
                           poas__split_dim split, int64_t granule, const poas__device_model *dm,
                           int64_t fit, int64_t share, int alone) {
  if (share <= 0)
    return 1;
  int64_t pick = 0, last = 0;
  double best = INFINITY, one = INFINITY;
  for (int64_t ntiles = PIPE_DEPTH; ntiles >= 1; ntiles /= 2) {
    /* Whole granules, within what memory holds (then rounded down). */
    int64_t t = ceil_div(share, ntiles);
    t = ceil_div(t, granule) * granule;
    if (t > fit)
      t = fit > granule ? fit / granule * granule : aligned_cap(d, fit);
    if (p->tile_max > 0)
      t = POAS__MIN(t, p->tile_max);
    t = POAS__MIN(t, tile_cap(d, p, granule));
    t = POAS__MIN(t, aligned_cap(d, limit_cap(d, p, split)));
    t = POAS__MAX(t, 1);
    if (t == last)
      continue; /* memory caps them all alike */
    last = t;
    poas__pipe pp;
    poas__pipe_time pt;
    poas__pipe_init(&pp, p, split, dm, d, t, 1);
    poas__pipe_eval(&pp, share, &pt);
    if (t >= share)
      one = pt.total_s;
    else if (pt.total_s < best)
      best = pt.total_s, pick = t;
  }
  if (!isfinite(best)) /* only one tile was tried, or none could be timed */
    return isfinite(one) ? share : 1;
  double slack = fmax(0.02 * best, alone ? p->engine_s : 0);
  return isfinite(one) && !(one > best + slack) ? share : pick;
}

/* A share of the units when ncand devices take even shares: the first
 * guess at a device's share, before the solve says what it is. */
static int64_t even_share(const poas__opt_result *r, int ncand) {
  return POAS__MIN(ceil_div(r->total_units, POAS__MAX(ncand, 1)), r->total_units);
}

/* Chooses the tiles of the copy devices still in sc->ok again for their
 * number: when devices are left out, the rest take larger shares, and
 * their tiles follow (the same device alone and left alone by a plan then
 * run the same pipeline). */
static void retile(const poas__opt_device *d, int nd, const poas__opt_problem *p,
                   const poas__opt_result *r, screen *sc) {
  int ncand = 0;
  for (int i = 0; i < nd; i++)
    ncand += sc->ok[i];
  for (int i = 0; i < nd; i++)
    if (sc->ok[i] && !d[i].host_memory)
      sc->tile[i] = device_tile(&d[i], p, r->split, r->granule, &r->model[i],
                                tile_fit(&d[i], p, r->split), even_share(r, ncand), ncand == 1);
}

/* The granule of a plan of `total` units on the candidates in ok: the
 * caller's, or one that hands out about 256 granules, made a whole
 * multiple of what each candidate's GEMM computes in one block (CLBlast
 * pads to 32-row blocks: a 72-row dgemm chunk took as long as a 96-row
 * one, 58 ms on one PoCL core). */
static int64_t plan_granule(const poas__opt_device *d, int nd, const int *ok,
                            const poas__opt_problem *p, int64_t total) {
  if (p->granule > 0)
    return p->granule;
  int64_t g = auto_granule(total);
  for (int i = 0; i < nd; i++)
    if (ok[i] && d[i].unit_align > 1 && g % d[i].unit_align)
      g = (g + d[i].unit_align - 1) / d[i].unit_align * d[i].unit_align;
  return g;
}

/* The granule of device dev's plan alone, as poas__optimize gives it
 * with that device alone: another candidate's blocks do not bind it. */
static int64_t alone_granule(const poas__opt_device *dev, const poas__opt_problem *p,
                             int64_t total) {
  const int one = 1;
  return plan_granule(dev, 1, &one, p, total);
}

/* Sets r's split, and its units and granule for the candidates in ok. */
static void set_split(const poas__opt_device *d, int nd, const int *ok,
                      const poas__opt_problem *p, poas__split_dim split, poas__opt_result *r) {
  r->split = split;
  r->total_units = poas__split_units(p, split);
  r->granule = plan_granule(d, nd, ok, p, r->total_units);
}

/* Marks devices that cannot take part at all, with their reasons. Returns
 * how many were left out for memory. */
static int screen_devices(const poas__opt_device *d, int nd, const poas__opt_problem *p,
                          poas__opt_result *r, screen *sc) {
  int too_big = 0;
  memset(sc, 0, sizeof *sc);
  for (int i = 0; i < nd; i++) {
    poas__opt_share *sh = &r->dev[i];
    sh->estimated = usable_model(&d[i], p, &r->model[i]);
    sh->corun = 1;
    sc->ok[i] = 0;
    if (d[i].lost)
      snprintf(sh->reason, sizeof sh->reason, "lost: %s", d[i].lost);
    else if (!d[i].supports_dtype)
      snprintf(sh->reason, sizeof sh->reason, "no %s support", poas__dtype_name(p->dtype));
    else
      /* A device computing on host memory computes on the caller's own
       * operands, which exist already: it needs no room for them. (Its
       * memory_bytes, what the host had free when it was measured, once
       * kept a 16-core CPU with 128 GiB of memory away from a 12 GiB
       * problem.) */
      sc->ok[i] = 1;
    sh->excluded = !sc->ok[i];
  }
  set_split(d, nd, sc->ok, p, choose_split(d, nd, sc->ok, p), r);
  /* An empty C gives no device work, so nothing is tiled; its other side
   * may be as long as int64 goes, which rounding tiles up would wrap. */
  if (p->m == 0 || p->n == 0)
    return too_big;
  int ncand = 0;
  for (int i = 0; i < nd; i++)
    ncand += sc->ok[i];
  for (int i = 0; i < nd; i++) {
    if (!sc->ok[i])
      continue;
    if (d[i].host_memory) {
      sc->tile[i] = r->total_units;
      continue;
    }
    int64_t fit = tile_fit(&d[i], p, r->split);
    if (fit == 0) {
      double need = (double)poas__shared_bytes(p, r->split) / MEMORY_MARGIN;
      snprintf(r->dev[i].reason, sizeof r->dev[i].reason,
               "problem does not fit in its memory (the shared operand alone needs %.3g GiB "
               "with room for two tiles, it has %.3g GiB)",
               need / 1073741824.0, (double)d[i].memory_bytes / 1073741824.0);
      sc->ok[i] = 0, r->dev[i].excluded = 1, too_big++;
      continue;
    }
    if (!within_limits(&d[i], p, r->split, r->dev[i].reason, sizeof r->dev[i].reason)) {
      sc->ok[i] = 0, r->dev[i].excluded = 1, too_big++, sc->limited++;
      continue;
    }
    sc->tile[i] = device_tile(&d[i], p, r->split, r->granule, &r->model[i], fit,
                              even_share(r, ncand), ncand == 1);
  }
  return too_big;
}

static void apply_contention(const poas__opt_device *d, const int *idx, int ns, unsigned mask,
                             const poas__device_model *base, poas__opt_result *r);

/* Solves with the candidates in `use`, each with its tile from sc;
 * returns the makespan and leaves the assignment in s. The models of the
 * devices sharing the host's cores are those of this subset: slowed by
 * contention when two or more of them are in it. */
static double solve_subset(solver *s, const poas__opt_device *d, int nd, const int *use,
                           const screen *sc, poas__opt_result *r) {
  unsigned mask = 0;
  /* s->ns never exceeds MAX_SHARING (sharing_devices); saying so here
   * also keeps GCC's bounds check from reading the shift as up to 32. */
  for (int j = 0; j < s->ns && j < MAX_SHARING; j++)
    mask |= (unsigned)(use[s->sharing[j]] != 0) << j;
  apply_contention(d, s->sharing, s->ns, mask, s->base, r);
  s->ncand = 0;
  for (int i = 0; i < nd; i++) {
    if (!use[i])
      continue;
    cand *c = &s->c[s->ncand++];
    c->dev = i;
    poas__pipe_init_search(&c->pipe, s->p, r->split, &r->model[i], &d[i], sc->tile[i], 1);
  }
  if (s->ncand == 0)
    return INFINITY;
  return balance(s);
}

/* solve_subset, then the tiles of each copy device's own share where they
 * differ from sc's, which were chosen for even shares: a device whose
 * share came out so much larger that it would run more than PIPE_DEPTH
 * tiles gets the tiles of its share (kept in its candidate's pipe), and
 * the balance is struck again. Else an H100 given 98.8% of a dgemm beside
 * the CPU kept the eight tiles of half the problem, which the pipeline
 * model predicts 12% faster than the four it has alone (more tiles than
 * that are what the model gets wrong, see device_tile); the CPU's 1.2%
 * then looked worth keeping, and run together the two ran 20-40% slower
 * than the GPU alone. The choice among devices sharing the cores uses
 * solve_subset alone: there the copy devices' tiles weigh alike on every
 * subset, and a second balance for each would cost planning time. */
static double solve_tiled(solver *s, const poas__opt_device *d, int nd, const int *use,
                          const screen *sc, poas__opt_result *r) {
  double t = solve_subset(s, d, nd, use, sc, r);
  int working = 0, changed = 0;
  for (int ci = 0; ci < s->ncand; ci++)
    working += s->n[ci] > 0;
  for (int ci = 0; ci < s->ncand && isfinite(t); ci++) {
    int i = s->c[ci].dev;
    int64_t share = POAS__MIN(s->n[ci] * s->granule, s->total), now = s->c[ci].pipe.tile;
    /* The only device with work runs alone, and its tiles are then those
     * it has alone: one where the engine's cost outweighs what more would
     * gain (device_tile). Left with the tiles of an even share, a sim
     * beside a sim given nothing was planned in four tiles with the
     * engine's 0.5 ms: 0.96 ms for a 256^3 sgemm it ran in 0.44. */
    if (d[i].host_memory || share <= 0 ||
        (ceil_div(share, now) <= PIPE_DEPTH && !(working == 1 && now < share)))
      continue;
    int64_t tile = device_tile(&d[i], s->p, r->split, r->granule, &r->model[i],
                               tile_fit(&d[i], s->p, r->split), share, working == 1);
    if (tile != now) {
      poas__pipe_init_search(&s->c[ci].pipe, s->p, r->split, &r->model[i], &d[i], tile, 1);
      changed = 1;
    }
  }
  return changed ? balance(s) : t;
}

/* Devices that share the host's cores and are still candidates, when there
 * are two or more of them: then which of them take part is a choice, since
 * together they may need more cores than the host has, and even when they
 * fit they slow each other (poas__device_model.contention). */
static int sharing_devices(const poas__opt_device *d, int nd, const screen *sc,
                           int idx[MAX_SHARING]) {
  int ns = 0;
  for (int i = 0; i < nd && ns < MAX_SHARING; i++)
    if (sc->ok[i] && d[i].shares_host_cores)
      idx[ns++] = i;
  return ns >= 2 ? ns : 0;
}

/* Leaves out the candidates that share the host's cores past the first
 * MAX_SHARING: which of those take part is chosen among their subsets,
 * and one left out of them would compute beside them unchecked (13
 * one-core sims of shared=1 planned three on a two-core host). */
static void leave_out_unweighed(const poas__opt_device *d, int nd, screen *sc,
                                poas__opt_result *r) {
  int seen = 0;
  for (int i = 0; i < nd; i++) {
    if (!sc->ok[i] || !d[i].shares_host_cores || ++seen <= MAX_SHARING)
      continue;
    sc->ok[i] = 0;
    r->dev[i].excluded = 1;
    snprintf(r->dev[i].reason, sizeof r->dev[i].reason,
             "more than %d devices share the host's cores: the plan weighs the first %d of "
             "them listed",
             MAX_SHARING, MAX_SHARING);
  }
}

/* The cores the subset `mask` of the sharing devices needs. */
static int mask_cores(const poas__opt_device *d, const int *idx, int ns, unsigned mask) {
  int cores = 0;
  for (int j = 0; j < ns; j++)
    if (mask & (1u << j))
      cores += POAS__MAX(d[idx[j]].cores, 1);
  return cores;
}

/* Whether the subset `mask` can run at once: one device alone always can,
 * several only on disjoint cores. */
static int cores_fit(const poas__opt_device *d, const int *idx, int ns, unsigned mask,
                     int host_cores) {
  return __builtin_popcount(mask) == 1 || mask_cores(d, idx, ns, mask) <= host_cores;
}

/* Slows a model by a time factor: GEMMs and copies alike. */
static void slow_model(poas__device_model *m, double f) {
  for (int dt = 0; dt < 2; dt++)
    for (int pair = 0; pair < 4; pair++)
      for (int c = 0; c < POAS__GEMM_NFEAT; c++)
        m->gemm[dt][pair].coef[c] *= f;
  for (int dir = 0; dir < 2; dir++) {
    m->xfer[dir].latency *= f;
    m->xfer[dir].bandwidth /= f;
    m->xfer[dir].bandwidth_beyond /= f;
  }
}

static double contention_of(const poas__opt_device *d) {
  return d->model && d->model->contention > 1 ? d->model->contention : 1;
}

/* Sets the sharing devices' models for the subset `mask`: slowed by their
 * contention when more than one of them computes. */
static void apply_contention(const poas__opt_device *d, const int *idx, int ns, unsigned mask,
                             const poas__device_model *base, poas__opt_result *r) {
  int together = __builtin_popcount(mask) > 1;
  for (int j = 0; j < ns; j++) {
    r->model[idx[j]] = base[j];
    r->dev[idx[j]].corun = together && (mask & (1u << j)) ? contention_of(&d[idx[j]]) : 1;
    slow_model(&r->model[idx[j]], r->dev[idx[j]].corun);
  }
}

static void explain_sharing(const poas__opt_device *d, const int *idx, int ns, unsigned mask,
                            int host_cores, poas__opt_result *r) {
  char with[96] = "";
  double worst = 1;
  for (int j = 0; j < ns; j++)
    if (mask & (1u << j)) {
      size_t len = strlen(with);
      snprintf(with + len, sizeof with - len, "%s%s", len ? ", " : "", d[idx[j]].id);
      worst = fmax(worst, contention_of(&d[idx[j]]));
    }
  const char *verb = strchr(with, ',') ? "are" : "is";
  for (int j = 0; j < ns; j++) {
    if (mask & (1u << j))
      continue;
    poas__opt_share *sh = &r->dev[idx[j]];
    if (mask_cores(d, idx, ns, mask | (1u << j)) > host_cores)
      snprintf(sh->reason, sizeof sh->reason,
               "shares the host's %d cores with %s, which %s at least as fast on them",
               host_cores, with, verb);
    else
      snprintf(sh->reason, sizeof sh->reason,
               "would cost %s more than it adds: computing beside each other, the devices "
               "that share the host's cores run up to %.0f%% slower",
               with, 100 * (fmax(worst, contention_of(&d[idx[j]])) - 1));
    sh->excluded = 1;
  }
}

/* The makespan of the working devices once work moves between them unit
 * by unit rather than in granules, as the guided and dynamic tails move it
 * at run time. Each device's time near its share is taken as linear in its
 * units (its seconds per unit there by the smooth model, `slope`: the
 * tables' steps are not a rate), and the finishing times are equalised
 * over the same total: T = sum(t_i / s_i) / sum(1 / s_i). The latest
 * device can shed less than one granule (the solver's improve would have
 * moved a whole one), so T stays within that of makespan_s. With granules
 * of 32 columns, a one-core PoCL device's granule is 18 ms of a 2048
 * dgemm's 0.25 s: the plan's makespan was 2-4% above the runs'
 * (0.2582-0.2631 s predicted, 0.2529-0.2535 measured), this 0.2537. */
static double balanced_makespan(const solver *s, const poas__opt_result *r) {
  int working = 0;
  for (int ci = 0; ci < s->ncand; ci++)
    working += s->n[ci] > 0;
  if (working < 2)
    return r->makespan_s;
  double num = 0, den = 0, floor_t = 0;
  for (int ci = 0; ci < s->ncand; ci++) {
    if (s->n[ci] == 0)
      continue;
    int64_t g0 = POAS__MAX(s->n[ci] - 1, 1), g1 = POAS__MIN(s->n[ci] + 1, s->ngran);
    int64_t units = POAS__MIN(g1 * s->granule, s->total) - POAS__MIN(g0 * s->granule, s->total);
    double slope = units > 0 ? (cand_time(s, ci, g1) - cand_time(s, ci, g0)) / (double)units : 0;
    if (!(slope > 0) || !isfinite(slope))
      return r->makespan_s;
    double t = r->dev[s->c[ci].dev].time.total_s;
    num += t / slope, den += 1 / slope;
    if (t >= r->makespan_s)
      floor_t = fmax(floor_t, t - slope * (double)r->granule);
  }
  double T = num / den;
  return isfinite(T) ? fmin(fmax(T, floor_t), r->makespan_s) : r->makespan_s;
}

/* Writes into reason[cap] why candidate ci, which the solve gave no
 * work, is left out: its smallest share already takes longer than the
 * whole run on the others. */
static void no_work_reason(const solver *s, int ci, poas__split_dim split, char *reason,
                           size_t cap) {
  snprintf(reason, cap,
           "adds no speed: predicted %.3g s for its smallest useful share (%lld %s), not less "
           "than the whole run on the others",
           cand_time(s, ci, 1), (long long)POAS__MIN(s->granule, s->total),
           unit_name(s->p, split));
}

/* A device's reason, as poas__opt_share holds it. */
typedef char reason_text[sizeof ((poas__opt_share *)0)->reason];

/* Into why[i], for each candidate i the solve gave no work, the reason
 * fill_result would give it (no_work_reason); the others' untouched. Told
 * before a solve in another granule replaces the candidates, for devices
 * then left out with what the shares said of them. */
static void idle_reasons(const solver *s, poas__split_dim split, reason_text *why) {
  for (int ci = 0; ci < s->ncand; ci++)
    if (s->n[ci] == 0)
      no_work_reason(s, ci, split, why[s->c[ci].dev], sizeof why[0]);
}

/* Candidate ci's predicted time for `units` units as plans report it:
 * with the thin-block tables and the hand-off state's term, which the
 * solver's searches leave out (cand_time). */
static void reported_time(const solver *s, const poas__opt_device *d, const poas__opt_result *r,
                          int ci, int64_t units, poas__pipe_time *out) {
  int i = s->c[ci].dev;
  poas__pipe report;
  poas__pipe_init(&report, s->p, r->split, &r->model[i], &d[i], s->c[ci].pipe.tile, 1);
  poas__pipe_eval(&report, units, out);
}

/* The makespan fill_result would write for the assignment in s, the
 * engine's cost included where the plan runs through it. Plans are chosen
 * between on it, not on the smooth model's makespan: on the H100 profile
 * (models/profiles/nvidia-h100-80gb-16c.json) cpu0's 16-row sgemm takes
 * 1.37x its smooth model, and a 16 x 100 x 100 sgemm was planned on cpu0
 * alone, 0.0731 ms by the smooth model and reported 0.100 ms, where cuda0
 * alone takes 0.0736 (test-optimize). */
static double reported_makespan(const solver *s, const poas__opt_device *d,
                                const poas__opt_result *r) {
  int64_t u = 0;
  int working = 0, tiled = 0;
  double t = 0;
  for (int ci = 0; ci < s->ncand; ci++) {
    if (s->n[ci] == 0)
      continue;
    int64_t u1 = POAS__MIN(u + s->n[ci] * s->granule, s->total);
    poas__pipe_time pt;
    reported_time(s, d, r, ci, u1 - u, &pt);
    u = u1;
    working++;
    tiled |= pt.tiles > 1;
    t = fmax(t, pt.total_s);
  }
  return t + (working > 1 || tiled ? s->p->engine_s : 0);
}

/* Writes each device's range and predicted time from the assignment. */
static void fill_result(const solver *s, const poas__opt_device *d, const screen *sc,
                        poas__opt_result *r) {
  int64_t u = 0;
  r->makespan_s = 0;
  for (int i = 0; i < r->ndev; i++)
    r->dev[i].tile = sc->tile[i];
  for (int ci = 0; ci < s->ncand; ci++)
    r->dev[s->c[ci].dev].tile = s->c[ci].pipe.tile;
  for (int ci = 0; ci < s->ncand; ci++) {
    int i = s->c[ci].dev;
    poas__opt_share *sh = &r->dev[i];
    if (s->n[ci] == 0) {
      no_work_reason(s, ci, r->split, sh->reason, sizeof sh->reason);
      sh->excluded = 1;
      continue;
    }
    sh->u0 = u;
    sh->u1 = u = POAS__MIN(u + s->n[ci] * s->granule, s->total);
    reported_time(s, d, r, ci, sh->u1 - sh->u0, &sh->time);
  }
  /* A plan that is not one device with one tile runs through the engine
   * (schedule/run.c): its cost of a run counts in every working device's
   * time. Adding it to all of them leaves the balance as solved. */
  int working = 0, tiled = 0;
  for (int i = 0; i < r->ndev; i++)
    if (r->dev[i].u1 > r->dev[i].u0) {
      working++;
      tiled |= r->dev[i].time.tiles > 1;
    }
  double engine = working > 1 || tiled ? s->p->engine_s : 0;
  r->engine_s = engine;
  for (int i = 0; i < r->ndev; i++)
    if (r->dev[i].u1 > r->dev[i].u0) {
      r->dev[i].time.total_s += engine;
      r->makespan_s = fmax(r->makespan_s, r->dev[i].time.total_s);
    }
  r->balanced_s = balanced_makespan(s, r);
}

/* The models' error counted against a plan beyond p->min_gain: at most
 * MAX_GAIN_BAR (a noisy calibration must not switch devices off). */
#define MAX_GAIN_BAR 0.15

/* The fraction of the makespan a device must save to take part: p->min_gain,
 * or the devices' model errors when larger, each weighted by its share
 * against the largest one's (at most 1). The largest device's error moves
 * the makespan fully, and a plan with a small helper is then no more
 * certain to win than its gain says (an H100 whose model errs by 8% held
 * out, a 16-core CPU taking 5.6% of sgemm at n = 4096: the pair ran 7%
 * slower than the GPU alone). A helper's own error moves only its part,
 * and the runs' tails hand out the rest as devices finish: with the
 * plain maximum, one-core PoCL beside cpu:threads=1 (CI machine, s) was
 * left out at a predicted gain of 8.1% because its own held-out error
 * read 14% in a noisy calibration, while the CPU's read 3.4%, and the
 * pair then ran at 0.91-0.93 of the summed rates. */
static double gain_bar(const solver *s, const poas__opt_device *d) {
  const double floor_g = s->p->min_gain;
  if (floor_g <= 0)
    return floor_g;
  int64_t most = 0;
  for (int ci = 0; ci < s->ncand; ci++)
    most = POAS__MAX(most, s->n[ci]);
  double err = 0;
  for (int ci = 0; ci < s->ncand; ci++) {
    double e = d[s->c[ci].dev].model_error;
    if (s->n[ci] > 0 && e > 0)
      err = fmax(err, e * (double)s->n[ci] / (double)most);
  }
  return fmax(floor_g, fmin(err, MAX_GAIN_BAR));
}

/* Leaves out the devices with the smallest shares, together worth less than
 * s->bar of the makespan `t` they are part of; returns the makespan of
 * what is left, with its assignment in s. With balanced devices, taking
 * away a fraction F of the work's units makes the rest finish 1 / (1 - F)
 * later, so the devices left out may hold up to bar / (1 + bar)
 * of the units between them. That is decided from the shares alone and
 * checked with one solve, so planning stays one or two solves whatever the
 * number of devices (a re-solve per candidate made 8 devices cost 140 us). */
static double drop_marginal(solver *s, const poas__opt_device *d, int nd, screen *sc,
                            poas__opt_result *r, double t) {
  const double g = s->bar;
  if (g <= 0)
    return t;
  /* The devices with work, by share, smallest first. */
  int order[POAS_MAX_DEVICES], nw = 0;
  int64_t units[POAS_MAX_DEVICES] = {0};
  for (int ci = 0; ci < s->ncand; ci++)
    if (s->n[ci] > 0) {
      int dev = s->c[ci].dev, j = nw++;
      units[dev] = s->n[ci];
      for (; j > 0 && units[order[j - 1]] > units[dev]; j--)
        order[j] = order[j - 1];
      order[j] = dev;
    }
  double budget = g / (1 + g) * (double)s->ngran, gone = 0;
  int ndrop = 0;
  while (ndrop < nw - 1 && gone + (double)units[order[ndrop]] <= budget)
    gone += (double)units[order[ndrop++]];
  if (ndrop == 0)
    return t;
  for (int j = 0; j < ndrop; j++)
    sc->ok[order[j]] = 0;
  retile(d, nd, s->p, r, sc);
  double now = solve_tiled(s, d, nd, sc->ok, sc, r);
  /* The shares were an estimate: keep devices back, largest first, until
   * the makespan is within the gain (rarely needed). */
  while (ndrop > 0 && now > t * (1 + g)) {
    sc->ok[order[--ndrop]] = 1;
    retile(d, nd, s->p, r, sc);
    now = solve_tiled(s, d, nd, sc->ok, sc, r);
  }
  for (int j = 0; j < ndrop; j++) {
    poas__opt_share *sh = &r->dev[order[j]];
    sh->excluded = 1;
    sc->judged[order[j]] = 1;
    /* The solve without them can also come out shorter (their tiles'
     * fixed costs): that read "grows -21.5%". */
    double pct = 100.0 * (double)units[order[j]] / (double)s->ngran;
    const char *plural = ndrop == 1 ? "" : "s";
    if (now >= t)
      snprintf(sh->reason, sizeof sh->reason,
               "adds too little: %.1f%% of the work; without the %d device%s this small the "
               "predicted time grows %.1f%%, less than the %.0f%% the models can be off by",
               pct, ndrop, plural, 100 * (now - t) / t, 100 * g);
    else
      snprintf(sh->reason, sizeof sh->reason,
               "adds too little: %.1f%% of the work; without the %d device%s this small the "
               "predicted time shrinks %.1f%%",
               pct, ndrop, plural, 100 * (t - now) / t);
  }
  return now;
}

/* Hands out the units of r, and the solver's, in granules of g: those of
 * the candidates solved next (alone_time's for a device alone, the
 * working devices' for a plan of several). */
static void use_granule(solver *s, poas__opt_result *r, int64_t g) {
  r->granule = s->granule = g;
  s->total = r->total_units;
  s->ngran = ceil_div(s->total, g);
}

/* The plan of two or more devices solved again in the granule of those
 * given work, where that is faster; returns its makespan, the plan in s,
 * sc and r. set_split made the granule a whole multiple of every
 * candidate's blocks, and the candidates whose blocks set it may since
 * have been left out: given no work, dropped by drop_marginal, or by the
 * choice among the devices sharing the host's cores. Two GPUs beside a
 * device whose GEMM computes 32 rows at once, which gets none of a
 * 500 x 500 x 8192 sgemm, were given 256 and 244 rows, 0.382 ms; in their
 * own granule, 2, they take 250 each in 0.370 ms (test-optimize). Kept
 * only where faster: the granule sets the tiles too (device_tile), and
 * the coarser one's can be faster (the same GPUs take a 1000 x 4096 x
 * 4096 sgemm by columns in 1.869 ms in granules of 32, in 1.876 ms in
 * their own 16). The candidates given nothing are left out with the
 * reason the shares gave them, as drop_marginal leaves its devices out:
 * in a finer granule they could take a share their blocks do not fit. */
static double solve_in_working_granule(solver *s, const poas__opt_device *d, int nd,
                                       screen *sc, poas__opt_result *r, double t) {
  screen fine = *sc;
  int working = 0;
  memset(fine.ok, 0, sizeof fine.ok);
  for (int ci = 0; ci < s->ncand; ci++)
    if (s->n[ci] > 0)
      fine.ok[s->c[ci].dev] = 1, working++;
  const int64_t granule = r->granule;
  const int64_t g = plan_granule(d, nd, fine.ok, s->p, r->total_units);
  if (working < 2 || g == granule || !isfinite(t))
    return t;
  reason_text idle_why[POAS_MAX_DEVICES]; /* 6.4 KiB */
  idle_reasons(s, r->split, idle_why);
  use_granule(s, r, g);
  retile(d, nd, s->p, r, &fine);
  double now = solve_tiled(s, d, nd, fine.ok, &fine, r);
  if (!(now < t)) {
    use_granule(s, r, granule);
    solve_tiled(s, d, nd, sc->ok, sc, r); /* back to the plan in the candidates' granule */
    return t;
  }
  for (int i = 0; i < nd; i++)
    if (sc->ok[i] && !fine.ok[i]) {
      fine.judged[i] = 1, r->dev[i].excluded = 1;
      memcpy(r->dev[i].reason, idle_why[i], sizeof idle_why[i]);
    }
  *sc = fine;
  return now;
}

/* What the engine adds to device dev's run alone in tiles of `tile`
 * units: one tile of a copy device (or any run of a host-memory one) runs
 * on the caller's thread, more tiles through the engine (fill_result), so
 * the device alone pays `cost` too. Left out, 32 sims of a 4000^3 sgemm
 * were cut to one that ran it in four tiles, judged at 0.35 ms against
 * 0.27 ms plus 0.5 ms with the others, and then planned at 0.85 ms. */
static double alone_engine(const poas__opt_device *dev, int64_t tile, int64_t total,
                           double cost) {
  return !dev->host_memory && tile < total ? cost : 0;
}

/* Predicted seconds for the whole problem on device `dev` alone, with
 * the tiles it would have alone (a 1024^3 sgemm kept the CPU beside an
 * H100 when this was judged with the shared plan's eight tiles instead of
 * one), and its model without contention: it is alone, and its tiles are
 * chosen with the model they are timed with. Chosen with the model slowed
 * for computing beside the CPU (1.9x), a PoCL device whose GEMM is 5%
 * faster on 32 rows than on 64 was cut into two tiles of a 64 x 512 x 512
 * sgemm, 3.666 ms with the engine's 0.22, where in one it takes 3.434;
 * the CPU alone, 3.469 ms, was planned (test-optimize). alone_sc gets
 * the screen of that plan, *granule its granule: the device's own
 * (alone_granule), or the plan's where that is a whole multiple of the
 * device's blocks and its tiles cut in it are faster, the engine's cost
 * counted. Weighed in the plan's granule only, a device's tiles were
 * rounded to another's blocks: a 1 x 15 x 15097 dgemm by columns on a
 * device beside one whose GEMM computes 8 columns at once was weighed
 * alone in two tiles of 8 at 0.487 ms, where its own four tiles of 4 take
 * 0.455, and that other device was kept alone at 0.475 ms by rows
 * (test-plan-props, seed 2, case 16213). Weighed in its own only, the
 * H100 replay beside PoCL (granule 32) was cut into two tiles of 500 rows
 * of a 1000 x 8192 x 16 dgemm, 4.567 ms, where the plan's 512 and 488
 * take 4.543 (poas-plan). The time is the one its plan would report
 * (reported_makespan). */
static double alone_time(const solver *s, const poas__opt_device *d, const screen *sc,
                         const poas__opt_result *r, int dev, screen *alone_sc,
                         int64_t *granule) {
  *alone_sc = *sc;
  memset(alone_sc->ok, 0, sizeof alone_sc->ok);
  alone_sc->ok[dev] = 1;
  const poas__device_model *own = &r->model[dev];
  for (int j = 0; j < s->ns; j++)
    if (s->sharing[j] == dev)
      own = &s->base[j];
  /* A device on host memory runs one GEMM of the whole problem in any
   * granule. The plan's may have been set without this device (a turn
   * solves the candidates left, alone_after_turn), and not fit its
   * blocks. */
  const int64_t grains[2] = {alone_granule(&d[dev], s->p, r->total_units), r->granule};
  const int tries = d[dev].host_memory || grains[1] == grains[0] ||
                            (d[dev].unit_align > 1 && grains[1] % d[dev].unit_align)
                        ? 1
                        : 2;
  double best = INFINITY, best_engine = INFINITY;
  for (int j = 0; j < tries; j++) {
    int64_t tile = d[dev].host_memory
                       ? alone_sc->tile[dev]
                       : device_tile(&d[dev], s->p, r->split, grains[j], own,
                                     tile_fit(&d[dev], s->p, r->split), r->total_units, 1);
    poas__pipe pp;
    poas__pipe_time pt;
    poas__pipe_init(&pp, s->p, r->split, own, &d[dev], tile, 1); /* as plans report it */
    poas__pipe_eval(&pp, r->total_units, &pt);
    double with = pt.total_s + alone_engine(&d[dev], tile, r->total_units, s->p->engine_s);
    if (j == 0 || with < best_engine)
      best = pt.total_s, best_engine = with, *granule = grains[j], alone_sc->tile[dev] = tile;
  }
  return best;
}

/* The candidate of pool fastest alone split as r is, the engine's cost
 * counted where it runs in tiles (alone_engine): its index, or -1 where
 * pool holds none; *best gets its time, *alone_sc the screen of its plan
 * and *granule that plan's granule. A pipeline evaluation or two each,
 * no solve. */
static int fastest_alone(const solver *s, const poas__opt_device *d, int nd, const screen *sc,
                         const poas__opt_result *r, const int *pool, double *best,
                         screen *alone_sc, int64_t *granule) {
  int keep = -1;
  screen try_sc;
  *best = INFINITY;
  for (int i = 0; i < nd; i++) {
    if (!pool[i])
      continue;
    int64_t g;
    double ti = alone_time(s, d, sc, r, i, &try_sc, &g) +
                alone_engine(&d[i], try_sc.tile[i], r->total_units, s->p->engine_s);
    if (keep < 0 || ti < *best)
      keep = i, *best = ti, *alone_sc = try_sc, *granule = g;
  }
  return keep;
}

/* The plan is device keep alone: it takes part (again, where
 * drop_marginal left it out), and every other candidate of pool is left
 * out for `why`. */
static void keep_alone(int nd, const int *pool, int keep, const char *why, screen *sc,
                       poas__opt_result *r) {
  sc->ok[keep] = 1, sc->judged[keep] = 0;
  r->dev[keep].excluded = 0, r->dev[keep].reason[0] = '\0';
  for (int i = 0; i < nd; i++)
    if (pool[i] && i != keep) {
      sc->ok[i] = 0, sc->judged[i] = 1, r->dev[i].excluded = 1;
      snprintf(r->dev[i].reason, sizeof r->dev[i].reason, "%s", why);
    }
}

/* The candidates of pool that can take the problem split by `split` (one
 * that drop_marginal left out, or that a turn screened, may not) into
 * fits[]. */
static void pool_fitting(const poas__opt_device *d, int nd, const poas__opt_problem *p,
                         const int *pool, poas__split_dim split, int *fits) {
  for (int i = 0; i < nd; i++)
    fits[i] = pool[i] && (d[i].host_memory || copy_device_fits(&d[i], p, split));
}

/* The solve gave all the work to one device, `only`, but in the tiles
 * cut for even shares, where a device with a large cost per
 * call loses: a TN dgemm of 31 x 278 x 219 was planned on one device at
 * 0.600 ms where another alone takes 0.341, and a 55 x 33 x 133 one on a
 * device in two tiles at 0.151 ms where it takes 0.086 in its own
 * (test-plan-props). So the fastest of pool alone, each in its own tiles
 * and with the engine's cost where it runs in tiles, takes the plan when
 * it is faster: another device is kept alone (returns 1), or `only` keeps
 * the plan in its own tiles, the others as the solve left them (returns
 * 0, the plan solved again in sc), or alone where they take work back in
 * that solve and it comes out slower (returns 1). Where `only` is fastest
 * alone in a granule other than the plan's (its own, where another
 * candidate's blocks set the plan's), it is kept alone in that as another
 * would be (returns 1): beside the others, its tiles would be cut in
 * blocks that are not its own. Times are those plans report
 * (reported_makespan). */
static int other_alone_when_faster(solver *s, const poas__opt_device *d, int nd, screen *sc,
                                   const int *pool, poas__opt_result *r, int only) {
  const double now = reported_makespan(s, d, r);
  const int64_t granule = r->granule;
  int64_t alone_g;
  double best;
  screen alone_sc;
  int keep = fastest_alone(s, d, nd, sc, r, pool, &best, &alone_sc, &alone_g);
  if (keep < 0 || !(best < now))
    return 0;
  /* `only` kept alone: the others keep what left them out, the shares'
   * "adds no speed" where they were candidates (told before the solves
   * below replace the candidates), else the reason they had; "X alone is
   * predicted less than X alone" said nothing. */
  reason_text kept_why[POAS_MAX_DEVICES]; /* 6.4 KiB */
  const int keep_reasons = keep == only;
  for (int i = 0; keep_reasons && i < nd; i++) {
    kept_why[i][0] = '\0';
    if (pool[i] && i != only && r->dev[i].excluded)
      memcpy(kept_why[i], r->dev[i].reason, sizeof kept_why[i]);
  }
  if (keep_reasons) /* `only` has work: the candidates without are the others */
    idle_reasons(s, r->split, kept_why);
  if (keep == only && alone_g == granule) {
    /* The plan as it is, but in its device's own tiles. Solved again, the
     * others can take work back (the solve leaves the engine's cost out):
     * a 1430 x 271 x 257 sgemm then stayed on one device in four tiles by
     * rows, 1.76 ms with the engine's cost, where alone in one it takes
     * 0.48, and another device alone by columns, 0.74 ms, was planned
     * (test-plan-props, seed 3, case 793). */
    screen same = *sc;
    same.tile[only] = alone_sc.tile[only];
    if (isfinite(solve_tiled(s, d, nd, same.ok, &same, r)) && reported_makespan(s, d, r) < now) {
      *sc = same;
      return 0;
    }
  }
  use_granule(s, r, alone_g);
  double alone = solve_tiled(s, d, nd, alone_sc.ok, &alone_sc, r);
  if (isfinite(alone))
    alone = reported_makespan(s, d, r);
  if (!(alone < now)) {
    use_granule(s, r, granule);
    solve_tiled(s, d, nd, sc->ok, sc, r); /* back to the plan the shares gave */
    return 0;
  }
  char why[sizeof r->dev[0].reason];
  int digits = digits_apart(1e3 * alone, 1e3 * now);
  snprintf(why, sizeof why,
           "adds nothing: %s alone is predicted %.*g ms, less than the %.*g ms of %s alone in "
           "the tiles of an even share",
           d[keep].id, digits, 1e3 * alone, digits, 1e3 * now, d[only].id);
  *sc = alone_sc;
  keep_alone(nd, pool, keep, why, sc, r);
  for (int i = 0; keep_reasons && i < nd; i++)
    if (kept_why[i][0])
      memcpy(r->dev[i].reason, kept_why[i], sizeof kept_why[i]);
  return 1;
}

/* A plan with several devices runs through the engine, whose threads and
 * hand-offs cost about p->engine_s a run, and its devices disturb each
 * other (host memory bandwidth, the cores that drive a GPU's pageable
 * copies); one device alone with one tile runs on the caller's
 * thread. On an H100 VM, sgemm with the 16-core CPU beside the GPU was
 * predicted 14% faster at n = 512 and ran 17 times slower (7.2 ms against
 * 0.43 ms alone). So the others must save more than p->engine_s over the
 * fastest device alone, and then s->bar of the time: drop_marginal
 * judges that from the shares, which leave out the engine's cost and the
 * contention the others cause, so on the CI machine a one-core PoCL
 * device kept its 3.1% of a 512^3 sgemm beside the CPU, predicted to save
 * 0.6%, and the pair ran at 0.88x the CPU alone. That is checked from the
 * fastest device's time for the whole problem, and re-solved only when it
 * comes close. Returns whether it kept one device alone. */
static int alone_when_cheaper(solver *s, const poas__opt_device *d, int nd, screen *sc,
                              const int *pool, poas__opt_result *r) {
  int working = 0, only = -1;
  for (int ci = 0; ci < s->ncand; ci++)
    if (s->n[ci] > 0)
      working++, only = s->c[ci].dev;
  const double cost = s->p->engine_s, g = fmax(s->bar, 0);
  if (working == 1 && (cost > 0 || g > 0))
    return other_alone_when_faster(s, d, nd, sc, pool, r, only);
  if (working < 2 || (cost <= 0 && g <= 0))
    return 0;
  /* The fastest of the candidates alone, not the one with the largest
   * share: on a small problem shares tie (a 64^3 sgemm on sims of 1e11
   * and 1e12 flop/s split 32 : 32) and the first listed, the slower, was
   * kept. Every candidate of the plan before drop_marginal counts
   * (pool), given work or not: a fast device with a large fixed cost can
   * get none, or too little to keep, beside slow ones that share the work
   * in less than that cost, yet be the fastest alone (test-optimize: one
   * of two slow ones alone was kept at 0.52 ms, where it takes 0.39).
   * Fastest with the engine's cost where it runs in tiles: a device
   * behind a slow link, 4.48 ms alone in four tiles, was kept before one
   * at 4.52 ms in one tile, then found slower than the pair with the
   * engine's 1 ms (5.48 ms against 5.06), and the pair was planned, 12%
   * slower than the other alone (test-optimize). */
  double best;
  screen alone_sc;
  int64_t alone_g;
  int keep = fastest_alone(s, d, nd, sc, r, pool, &best, &alone_sc, &alone_g);
  /* The shared plan's time, the engine's cost in it, and its gain. */
  const double t = reported_makespan(s, d, r) - cost, bar = (t + cost) * (1 + g);
  if (!(best <= bar))
    return 0;
  const int64_t granule = r->granule;
  use_granule(s, r, alone_g);
  double alone = solve_tiled(s, d, nd, alone_sc.ok, &alone_sc, r);
  if (isfinite(alone))
    alone = reported_makespan(s, d, r);
  if (!(alone <= bar)) {
    use_granule(s, r, granule);
    solve_tiled(s, d, nd, sc->ok, sc, r); /* back to the shared plan */
    return 0;
  }
  char why[sizeof r->dev[0].reason];
  if (alone <= t)
    snprintf(why, sizeof why,
             "adds nothing: %s alone is predicted %.3g ms, no more than with the others",
             d[keep].id, 1e3 * alone);
  else if (alone <= t + cost)
    snprintf(why, sizeof why,
             "adds too little: %s alone is predicted %.3g ms, %.3g ms more than with the "
             "others, less than the %.2g ms a run on several devices costs the runtime",
             d[keep].id, 1e3 * alone, 1e3 * (alone - t), 1e3 * cost);
  else
    snprintf(why, sizeof why,
             "adds too little: %s alone is predicted %.3g ms, %.1f%% more than with the "
             "others (the runtime's cost and their slowing each other counted), less "
             "than the %.0f%% the models can be off by",
             d[keep].id, 1e3 * alone, 100 * (alone / (t + cost) - 1), 100 * g);
  keep_alone(nd, pool, keep, why, sc, r);
  return 1;
}

/* The tiles of the devices screened in (sc_was) for the split now in r,
 * chosen as retile chooses them for ncand candidates; 0 for a copy device
 * that cannot hold a tile of it. */
static void tiles_for_split(const poas__opt_device *d, int nd, const poas__opt_problem *p,
                            const poas__opt_result *r, const screen *sc_was, int ncand,
                            screen *sc) {
  for (int i = 0; i < nd; i++) {
    int64_t fit = sc_was->tile[i] > 0 && !d[i].host_memory ? tile_fit(&d[i], p, r->split) : 0;
    sc->tile[i] = sc_was->tile[i] <= 0 ? 0
                  : d[i].host_memory   ? r->total_units
                  : fit > 0 ? device_tile(&d[i], p, r->split, r->granule, &r->model[i], fit,
                                          even_share(r, ncand), ncand == 1 && sc->ok[i])
                            : 0;
  }
}

/* The reasons of the devices left out for what they add (sc->judged),
 * once the plan turned from split `was` to the split in r: they quoted
 * times and gains of the plans split as `was`, which this plan does not
 * hold ("gpu alone is predicted 48.4 ms" beside a plan of the GPU alone
 * at 39 ms), and say where they were judged instead. */
static void rejudged_reasons(int nd, const poas__opt_problem *p, const screen *sc,
                             poas__split_dim was, poas__opt_result *r) {
  for (int i = 0; i < nd; i++) {
    if (!sc->judged[i] || !r->dev[i].excluded)
      continue;
    /* The verdict stays: a device that added no speed at all was once
     * said to have gained less than the models' error allows. */
    char *reason = r->dev[i].reason;
    const char *verdict = strncmp(reason, "adds no speed:", 14) == 0 ? "adds no speed"
                          : strncmp(reason, "adds nothing:", 13) == 0 ? "adds nothing"
                                                                       : NULL;
    if (verdict)
      snprintf(reason, sizeof r->dev[i].reason,
               "%s: left out split by %s, where it added nothing; the plan was then split by "
               "%s, predicted faster",
               verdict, unit_name(p, was), unit_name(p, r->split));
    else
      snprintf(reason, sizeof r->dev[i].reason,
               "adds too little: left out split by %s, where it gained less than the models' "
               "error and the runtime's cost allow; the plan was then split by %s, predicted "
               "faster",
               unit_name(p, was), unit_name(p, r->split));
  }
}

/* The alone check (alone_when_cheaper) made again once the plan r has
 * turned to the other split, with sc the screen of that split: the shared
 * plan was weighed against the devices alone split the old way, and turning
 * can speed one of them alone more than it speeds the pair. A 64 x 4096 x
 * 256 sgemm on a GPU beside a slow CPU, with the engine's 0.1 ms, turned
 * from rows (the GPU alone 2.00 ms) to columns, where the pair was planned
 * at 1.99 ms and the GPU alone by columns takes 1.94 (test-optimize). The
 * candidates are those of pool that can take the problem split the new way
 * (one that drop_marginal left out may not); the reasons of the others then
 * quote the device alone split as the plan is. */
static void alone_after_turn(solver *s, const poas__opt_device *d, int nd, screen *sc,
                             const int *pool, poas__opt_result *r) {
  int fits[POAS_MAX_DEVICES];
  pool_fitting(d, nd, s->p, pool, r->split, fits);
  /* fill_result writes the shares of the plan's candidates alone. */
  if (alone_when_cheaper(s, d, nd, sc, fits, r))
    for (int i = 0; i < nd; i++)
      if (!sc->ok[i]) {
        r->dev[i].u0 = r->dev[i].u1 = 0;
        memset(&r->dev[i].time, 0, sizeof r->dev[i].time);
      }
  /* Kept or not, a plan of one device may have been solved again in its
   * own tiles (other_alone_when_faster returns 0 then), and r must say so:
   * left as the turn filled it, a 257 x 232 x 14060 dgemm kept one device
   * in two tiles of 116 columns at 8.83 ms, where its own 144 and 88 take
   * 7.59 (test-plan-props, seed 2, case 5731). */
  fill_result(s, d, sc, r);
}

/* The gain below which the other direction is not solved for. */
#define DIRECTION_GAIN 0.01

/* Whether some device with work in the plan `was` (of total_was units)
 * is predicted more than DIRECTION_GAIN faster at the same fraction of
 * the work split as r is now, with the tiles it would have there. When
 * none is, no plan split that way is more than about that much faster
 * (every one gives some device at least its fraction), and the solve
 * that would tell is left out: it costs as much as the plan's first (for
 * eight devices, 21 us beside 23). */
static int other_may_win(const poas__opt_device *d, int nd, const poas__opt_problem *p,
                         const poas__opt_result *r, const poas__opt_share *was,
                         int64_t total_was) {
  int working = 0;
  for (int i = 0; i < nd; i++)
    working += was[i].u1 > was[i].u0;
  for (int i = 0; i < nd; i++) {
    if (!(was[i].u1 > was[i].u0))
      continue;
    double f = (double)(was[i].u1 - was[i].u0) / (double)total_was;
    int64_t units = POAS__MIN(POAS__MAX((int64_t)ceil(f * (double)r->total_units), 1),
                              r->total_units);
    int64_t tile = d[i].host_memory ? r->total_units
                                    : device_tile(&d[i], p, r->split, r->granule,
                                                  &r->model[i], tile_fit(&d[i], p, r->split),
                                                  units, working == 1);
    poas__pipe pp;
    poas__pipe_time pt;
    poas__pipe_init(&pp, p, r->split, &r->model[i], &d[i], tile, 1);
    poas__pipe_eval(&pp, units, &pt);
    double engine = working > 1 || pt.tiles > 1 ? p->engine_s : 0;
    if (pt.total_s + engine < (1 - DIRECTION_GAIN) * was[i].time.total_s)
      return 1;
  }
  return 0;
}

/* The plan r (filled from s and sc) against the same candidates split the
 * other way, and the faster of the two by the models left in r.
 * choose_split picks the direction before any solve, from the bytes each
 * would copy with every device screened in; the solve then leaves devices
 * out, and bytes are not time either: a 1 x 4096 x 4096 sgemm (row-major)
 * on one H100 (models/profiles/nvidia-h100-80gb-16c.json) was planned by
 * columns, its 64 MiB of B copied in one 4096-column tile, at 2.54 ms,
 * where by rows it is B that is shared, copied whole, and predicted 2.35
 * ms. A second solve of the candidates left, and no more: the choices of
 * devices stand as made, but for the check that one of them alone is not
 * cheaper (alone_after_turn). The candidates keep their models (the same
 * subset of the devices sharing the host's cores computes), so only the
 * shares and their times change. Compared on balanced_s, which leaves out
 * the rounding to granules that differ between the directions. */
static void faster_direction(solver *s, const poas__opt_device *d, int nd, const screen *sc,
                             const int *pool, poas__opt_result *r) {
  const poas__opt_problem *p = s->p;
  poas__split_dim other = r->split == POAS__SPLIT_ROWS ? POAS__SPLIT_COLS : POAS__SPLIT_ROWS;
  int ncand = 0, copies = 0;
  for (int i = 0; i < nd; i++)
    if (sc->ok[i]) {
      ncand++;
      copies += !d[i].host_memory;
      /* Left out the other way for its memory or its limits on one
       * buffer, it would change the choice of devices. */
      if (!d[i].host_memory && !copy_device_fits(&d[i], p, other))
        return;
    }
  /* One device on host memory runs one GEMM of the whole problem either
   * way. */
  if (ncand == 0 || (ncand == 1 && copies == 0))
    return;
  poas__opt_result head;
  poas__opt_share was[POAS_MAX_DEVICES];
  memcpy(&head, r, offsetof(poas__opt_result, dev));
  memcpy(was, r->dev, (size_t)nd * sizeof *was);
  screen sc_other = *sc;
  set_split(d, nd, sc->ok, p, other, r);
  if (!other_may_win(d, nd, p, r, was, head.total_units)) {
    memcpy(r, &head, offsetof(poas__opt_result, dev));
    return;
  }
  tiles_for_split(d, nd, p, r, sc, ncand, &sc_other);
  s->total = r->total_units, s->granule = r->granule, s->ngran = ceil_div(s->total, s->granule);
  double t = solve_tiled(s, d, nd, sc->ok, &sc_other, r);
  if (isfinite(t)) {
    /* What fill_result wrote for the candidates it writes again. */
    for (int i = 0; i < nd; i++)
      if (sc->ok[i]) {
        r->dev[i].u0 = r->dev[i].u1 = 0;
        memset(&r->dev[i].time, 0, sizeof r->dev[i].time);
        r->dev[i].excluded = 0, r->dev[i].reason[0] = 0;
      }
    fill_result(s, d, &sc_other, r);
    if (r->balanced_s < head.balanced_s) {
      rejudged_reasons(nd, p, sc, head.split, r);
      alone_after_turn(s, d, nd, &sc_other, pool, r);
      return;
    }
  }
  memcpy(r, &head, offsetof(poas__opt_result, dev));
  memcpy(r->dev, was, (size_t)nd * sizeof *was);
}

/* The plan r, its split settled, against each candidate of pool alone
 * split the other way, that candidate's best plan when faster: the alone
 * checks before weighed each alone split as the plan then was, and a plan
 * that keeps its split was never weighed against the other. A plan of two
 * or more devices must save s->bar over it (alone_when_cheaper), and one
 * device alone must be slower. This runs last because the shared plan
 * split the other way, solved by faster_direction, may be faster than
 * both: weighed before it, a device alone that way would have stood in
 * for a faster shared plan. A 64 x 1024 x 32 sgemm with the engine's 0.1
 * ms was planned by rows on a GPU and a slow CPU at 1.10 ms, where the
 * GPU alone by columns takes 1.05 (test-optimize). Compared on
 * balanced_s, as faster_direction compares. The plan is the alone one
 * only where its filled times say it is faster; else r is restored. */
static void alone_other_way(solver *s, const poas__opt_device *d, int nd, screen *sc,
                            const int *pool, poas__opt_result *r) {
  const poas__opt_problem *p = s->p;
  const double cost = p->engine_s, g = fmax(s->bar, 0);
  int working = 0, candidates = 0, copies = 0;
  for (int i = 0; i < nd; i++) {
    working += r->dev[i].u1 > r->dev[i].u0;
    candidates += pool[i];
    copies += pool[i] && !d[i].host_memory;
  }
  /* One device on host memory runs one GEMM of the whole problem either
   * way (and a plan on the CPU alone spent 0.1 us more here). */
  if (working == 0 || (cost <= 0 && g <= 0) || (candidates == 1 && copies == 0))
    return;
  const double plan = r->balanced_s, bar = working > 1 ? plan * (1 + g) : plan;
  const poas__split_dim was = r->split;
  poas__opt_result head;
  poas__opt_share shares[POAS_MAX_DEVICES];
  poas__device_model models[MAX_SHARING];
  memcpy(&head, r, offsetof(poas__opt_result, dev));
  memcpy(shares, r->dev, (size_t)nd * sizeof *shares);
  for (int j = 0; j < s->ns; j++)
    models[j] = r->model[s->sharing[j]];
  set_split(d, nd, pool, p, was == POAS__SPLIT_ROWS ? POAS__SPLIT_COLS : POAS__SPLIT_ROWS, r);
  screen other = *sc, alone_sc;
  tiles_for_split(d, nd, p, r, sc, 1, &other);
  int fits[POAS_MAX_DEVICES];
  pool_fitting(d, nd, p, pool, r->split, fits);
  double best;
  int64_t alone_g;
  int keep = fastest_alone(s, d, nd, &other, r, fits, &best, &alone_sc, &alone_g);
  if (keep >= 0 && best < bar) {
    use_granule(s, r, alone_g);
    solve_tiled(s, d, nd, alone_sc.ok, &alone_sc, r);
    for (int i = 0; i < nd; i++) {
      r->dev[i].u0 = r->dev[i].u1 = 0;
      memset(&r->dev[i].time, 0, sizeof r->dev[i].time);
    }
    r->dev[keep].excluded = 0;
    fill_result(s, d, &alone_sc, r);
    if (r->balanced_s < bar) {
      const double alone = r->makespan_s;
      char why[sizeof r->dev[0].reason];
      int digits = digits_apart(1e3 * alone, 1e3 * plan);
      if (alone < plan)
        snprintf(why, sizeof why,
                 "adds nothing: %s alone is predicted %.*g ms split by %s, less than the %.*g "
                 "ms of the plan split by %s",
                 d[keep].id, digits, 1e3 * alone, unit_name(p, r->split), digits, 1e3 * plan,
                 unit_name(p, was));
      else
        snprintf(why, sizeof why,
                 "adds too little: %s alone is predicted %.3g ms split by %s, %.1f%% more "
                 "than the plan split by %s, less than the %.0f%% the models can be off by",
                 d[keep].id, 1e3 * alone, unit_name(p, r->split), 100 * (alone / plan - 1),
                 unit_name(p, was), 100 * g);
      *sc = alone_sc;
      keep_alone(nd, pool, keep, why, sc, r);
      return;
    }
  }
  memcpy(r, &head, offsetof(poas__opt_result, dev));
  memcpy(r->dev, shares, (size_t)nd * sizeof *shares);
  for (int j = 0; j < s->ns; j++)
    r->model[s->sharing[j]] = models[j];
}

static int fail_everywhere(const poas__opt_device *d, int nd, const poas__opt_problem *p,
                           int too_big, int limited, const poas__opt_result *r) {
  /* Every device's reason, which both errors but memory's quote. */
  char why[512] = "";
  double device = 0;
  for (int i = 0; i < nd; i++) {
    device = fmax(device, (double)d[i].memory_bytes);
    size_t len = strlen(why);
    /* A device screened in that still has no reason failed the solve:
     * its model gave no time that places the work. */
    snprintf(why + len, sizeof why - len, "%s%s: %s", i ? "; " : "", d[i].id,
             r->dev[i].reason[0] ? r->dev[i].reason
                                 : "its model predicts no finite time for this problem");
  }
  if (too_big == 0)
    return poas__fail(POAS_ENODEV, "plan: no device can take part (%s)", nd ? why : "none given");
  /* Only devices with their own memory can be too small (see
   * screen_devices): for their memory, or for their limits on one buffer
   * (within_limits), whose reasons then say which. */
  if (limited)
    return poas__fail(POAS_ETOOBIG, "plan: the problem fits nowhere: A, B and C need %.3g GiB (%s)",
                      problem_bytes(p) / 1073741824.0, why);
  return poas__fail(POAS_ETOOBIG,
                    "plan: the problem fits nowhere: A, B and C need %.3g GiB; the largest "
                    "device memory, %.3g GiB, cannot hold the shared operand and two tiles",
                    problem_bytes(p) / 1073741824.0, device / 1073741824.0);
}

/* Copies the plan src into dst, its devices' shares and models as far as
 * nd (past it they are not written). */
static void copy_result(poas__opt_result *dst, const poas__opt_result *src, int nd) {
  memcpy(dst, src, offsetof(poas__opt_result, dev));
  memcpy(dst->dev, src->dev, (size_t)nd * sizeof *src->dev);
  memcpy(dst->model, src->model, (size_t)nd * sizeof *src->model);
}

/* The alone check (alone_when_cheaper) weighs the shared plan split as the
 * solve left it, and a device it keeps alone is never weighed against the
 * shared plan split the other way, which faster_direction then turns the
 * lone device alone: a 4096^3 dgemm on cpu:threads=1 and opencl0:cores=1
 * of the CI machine's profile went to cpu0 alone (2.544 s; "no more than
 * with the others", shared by columns as plans report it), where shared
 * by rows it is planned at 2.271 s (poas-plan). So the shared plan, as it was before the
 * check (s, sc and shared, copies), is turned and checked as the plan was,
 * and replaces the alone plan `out` where it is faster by the gain a
 * shared plan must bring (s->bar); one that ends alone itself, faster. */
static void shared_turned_when_faster(solver *s, const poas__opt_device *d, int nd, screen *sc,
                                      const int *pool, poas__opt_result *shared,
                                      poas__opt_result *out) {
  fill_result(s, d, sc, shared);
  faster_direction(s, d, nd, sc, pool, shared);
  alone_other_way(s, d, nd, sc, pool, shared);
  int working = 0;
  for (int i = 0; i < nd; i++)
    working += shared->dev[i].u1 > shared->dev[i].u0;
  double need = working > 1 ? 1 + fmax(s->bar, 0) : 1;
  if (shared->balanced_s * need < out->balanced_s)
    copy_result(out, shared, nd);
}

int poas__optimize(const poas__opt_device *d, int nd, const poas__opt_problem *p,
                   poas__opt_result *out) {
  if (!d || !p || !out || nd < 0 || nd > POAS_MAX_DEVICES || p->m < 0 || p->n < 0 || p->k < 0 ||
      poas__dtype_size(p->dtype) == 0)
    return poas__fail(POAS_EINVAL, "plan: malformed solver input");
  /* Only what nd devices use: all POAS_MAX_DEVICES entries, models
   * included, are 104 KB (see adapt/gemm.c, poas__gemm_source_create). */
  memset(out, 0, offsetof(poas__opt_result, dev));
  memset(out->dev, 0, (size_t)nd * sizeof out->dev[0]);
  memset(out->model, 0, (size_t)nd * sizeof out->model[0]);
  out->ndev = nd;
  screen sc;
  int too_big = screen_devices(d, nd, p, out, &sc);
  if (out->total_units == 0 || p->m == 0 || p->n == 0)
    return 0;
  /* Only the scalars are set: the arrays (a pipeline per candidate, 60
   * KiB) are filled before they are read, and zeroing them took 0.5 us of
   * the 2.2 a 64^3 sgemm's plan took on the CI machine. */
  solver s;
  s.p = p, s.total = out->total_units, s.granule = out->granule;
  s.ncand = s.ns = 0;
  s.ngran = ceil_div(s.total, s.granule);

  leave_out_unweighed(d, nd, &sc, out);
  /* The candidates each weighed alone (alone_when_cheaper and the checks
   * after it): every device screened in, those the choice among the
   * devices sharing the host's cores leaves out included. That choice
   * solves each subset with tiles cut for even shares of all the
   * candidates, and a PoCL device with a 1.5 ms cost per call, judged in
   * three tiles, lost to the CPU beside a GPU (2.8 ms) and was never
   * weighed alone, where it takes 1.6 ms in one tile (test-optimize). One
   * device alone always fits the host's cores. */
  int pool[POAS_MAX_DEVICES];
  memcpy(pool, sc.ok, sizeof pool);
  int *idx = s.sharing;
  int ns = s.ns = sharing_devices(d, nd, &sc, idx);
  for (int j = 0; j < ns; j++)
    s.base[j] = out->model[idx[j]];
  if (ns > 0) {
    unsigned best_mask = 0;
    double best = INFINITY;
    for (unsigned mask = (1u << ns) - 1; mask > 0; mask--) {
      if (!cores_fit(d, idx, ns, mask, p->host_cores))
        continue;
      int use[POAS_MAX_DEVICES];
      memcpy(use, sc.ok, sizeof use);
      for (int j = 0; j < ns; j++)
        use[idx[j]] = (mask >> j) & 1;
      double t = solve_subset(&s, d, nd, use, &sc, out);
      if (t < best)
        best = t, best_mask = mask;
    }
    explain_sharing(d, idx, ns, best_mask, p->host_cores, out);
    for (int j = 0; j < ns; j++)
      sc.ok[idx[j]] = (best_mask >> j) & 1;
  }
  double t = solve_tiled(&s, d, nd, sc.ok, &sc, out);
  if (!isfinite(t))
    return fail_everywhere(d, nd, p, too_big, sc.limited, out);
  s.bar = gain_bar(&s, d);
  t = drop_marginal(&s, d, nd, &sc, out, t);
  t = solve_in_working_granule(&s, d, nd, &sc, out, t);
  /* The shared plan as it stands, for shared_turned_when_faster; none
   * where the alone check cannot keep one device alone (no engine cost
   * and no gain to bring: alone_when_cheaper). */
  solver s_shared;
  screen sc_shared;
  poas__opt_result *shared = NULL;
  if (p->engine_s > 0 || s.bar > 0) {
    s_shared = s, sc_shared = sc;
    if ((shared = malloc(sizeof *shared)) != NULL)
      copy_result(shared, out, nd);
  }
  int kept_alone = alone_when_cheaper(&s, d, nd, &sc, pool, out);
  fill_result(&s, d, &sc, out);
  faster_direction(&s, d, nd, &sc, pool, out);
  alone_other_way(&s, d, nd, &sc, pool, out);
  if (kept_alone && shared)
    shared_turned_when_faster(&s_shared, d, nd, &sc_shared, pool, shared, out);
  free(shared);
  return 0;
}
