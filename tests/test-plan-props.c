/* test-plan-props.c: properties of the split solver on random realistic
 * device models. test-optimize checks the solver against an exhaustive
 * search on rate models (overhead + flops / rate), which are smooth and
 * monotone; a calibrated profile is messier: all eight GEMM coefficients
 * (the padded-flops one included, which makes a model flat over 16
 * columns), thin-block tables, thread tables and one-thread times, the
 * hand-off state's term, contention, duplex copies, transfer knees,
 * transposes, dispatch and engine costs. A flat stretch of such a model
 * once made the solver's search leave a device alone short of its work
 * ("no device can take part (cpu0: )", cc33083). Here each case draws 1 to
 * 8 devices with such models and a problem, and checks what every plan
 * must hold: a plan unless the problem truly fits nowhere (and then a
 * reason for every device), every unit placed once, tiles within the
 * plan's memory accounting, a makespan that is finite, positive and no
 * less than any device's own predicted time, a reason for every device
 * left out, and no plan slower than its fastest device alone beyond the
 * gain and the runtime's cost the solver allows. Some cases also go
 * through poas_plan_gemm_call on sim devices replaying a profile written
 * from the random models.
 *
 * make check runs 3000 cases of seed 1 (a few seconds); POAS_PLAN_PROPS_CASES
 * and POAS_PLAN_PROPS_SEED run others (POAS_PLAN_PROPS_VERBOSE=1 prints
 * each case). A failure names its case, which POAS_PLAN_PROPS_FIRST runs
 * alone. */
#include "harness.h"
#include "models/profile.h"
#include "optimize/optimize.h"

#include <math.h>
#include <string.h>

static double unit(uint64_t *s) { return (double)(test_rand(s) >> 11) / 9007199254740992.0; }
static int chance(uint64_t *s, double p) { return unit(s) < p; }
static double log_uniform(uint64_t *s, double lo, double hi) {
  return exp(log(lo) + (log(hi) - log(lo)) * unit(s));
}

static uint64_t env_u64(const char *name, uint64_t dflt) {
  const char *v = getenv(name);
  return v && *v ? strtoull(v, NULL, 0) : dflt;
}

/* ------------------------------------------------------- random models */

/* A coefficient of a feature other than the arithmetic, as calibration's
 * non-negative fits write them: often 0, sometimes tiny, mostly a ratio of
 * the arithmetic's from a thousandth to a few hundred (packing and C's
 * writes run at memory speed, 50x the flop's time per element on the CI
 * machine's profile). */
static double side_coef(uint64_t *s, double flop, double lo, double hi) {
  switch (test_pick(s, 6)) {
  case 0:
  case 1:
    return 0;
  case 2:
    return flop * log_uniform(s, 1e-9, 1e-6); /* a fit's dust */
  default:
    return flop * log_uniform(s, lo, hi);
  }
}

static void random_gemm(uint64_t *s, poas__gemm_model *gm, double flop) {
  memset(gm, 0, sizeof *gm);
  gm->valid = 1;
  double *c = gm->coef;
  c[0] = chance(s, 0.2) ? 0 : log_uniform(s, 1e-7, 2e-3);
  c[1] = flop * log_uniform(s, 0.8, 1.25);
  c[2] = side_coef(s, c[1], 1e-2, 200);
  c[3] = side_coef(s, c[1], 1e-2, 200);
  c[4] = side_coef(s, c[1], 1e-2, 200);
  c[5] = side_coef(s, c[1], 1e-3, 2);
  c[6] = side_coef(s, c[1], 1e-3, 2);
  /* The padded flops: none, a fit's dust, near the arithmetic's (33 to 48
   * columns then cost alike), or past it (capped there by the model). */
  switch (test_pick(s, 5)) {
  case 0:
    c[7] = 0;
    break;
  case 1:
    c[7] = 1e-20;
    break;
  case 2:
    c[7] = c[1] * log_uniform(s, 1e-3, 1);
    break;
  case 3:
    c[7] = c[1] * log_uniform(s, 0.9, 1.1);
    break;
  default:
    c[7] = c[1] * log_uniform(s, 1, 1e3);
  }
  gm->fit = (poas__fit_stats){.samples = 99, .r2 = 0.97, .heldout_median = unit(s) * 0.2,
                              .heldout_max = 0.5};
}

/* A thin-block table: factors from 0.5 to 6 at random short sides, 1
 * elsewhere, or a factor at every side (calibration interpolates). */
static const poas__thin_table *random_thin(uint64_t *s) {
  poas__thin_table t;
  int dense = chance(s, 0.5);
  for (int side = 0; side < 2; side++)
    for (int i = 0; i < POAS__THIN_MAX; i++)
      t.factor[side][i] = dense || chance(s, 0.1) ? log_uniform(s, 0.5, 6) : 1;
  return poas__thin_intern(&t);
}

static void random_transfer(uint64_t *s, poas__transfer_model *tm, double bw_lo, double bw_hi) {
  *tm = (poas__transfer_model){.valid = 1, .latency = log_uniform(s, 1e-6, 2e-4),
                               .bandwidth = log_uniform(s, bw_lo, bw_hi)};
  if (chance(s, 0.5)) {
    tm->knee_bytes = log_uniform(s, 1 << 12, 1 << 28);
    tm->bandwidth_beyond = tm->bandwidth * log_uniform(s, 0.25, 3);
  }
  tm->fit = (poas__fit_stats){.samples = 13, .r2 = 0.97, .heldout_median = 0.1, .heldout_max = 0.4};
}

/* One device's model; `host` says whether it computes on host memory. */
static void random_model(uint64_t *s, poas__device_model *dm, int host, int smooth) {
  memset(dm, 0, sizeof *dm);
  dm->source = POAS__MODEL_CALIBRATED;
  double flop[2];
  flop[0] = 1 / log_uniform(s, 1e9, 6e13);
  flop[1] = flop[0] * log_uniform(s, 1, 64);
  for (int dt = 0; dt < 2; dt++) {
    for (int pair = 0; pair < 4; pair++) {
      if (pair > 0 && chance(s, 0.3))
        continue; /* not measured: the NN pair's stands in */
      random_gemm(s, &dm->gemm[dt][pair], flop[dt]);
      if (!smooth && chance(s, 0.35))
        dm->gemm[dt][pair].thin = random_thin(s);
    }
    dm->gemm_fit[dt] = dm->gemm[dt][0].fit;
  }
  if (!host) {
    for (int dir = 0; dir < 2; dir++)
      random_transfer(s, &dm->xfer[dir], 1e9, 6e10);
    for (int dt = 0; dt < 2; dt++)
      if (chance(s, 0.4))
        random_transfer(s, &dm->transpose[dt], 1e9, 3e10);
    dm->duplex = chance(s, 0.5) ? 0 : chance(s, 0.3) ? 1 : log_uniform(s, 1, 2.5);
  }
  dm->contention = chance(s, 0.4) ? 0 : chance(s, 0.3) ? 1 : log_uniform(s, 1, 3);
  dm->dispatch_s = chance(s, 0.3) ? 0 : log_uniform(s, 1e-7, 2e-4);
  dm->engine_s = chance(s, 0.3) ? 0 : log_uniform(s, 1e-6, 1e-3);
  for (int dt = 0; dt < 2; dt++) {
    int threads = chance(s, 0.4), one = chance(s, 0.5);
    for (int side = 0; side < 2; side++)
      for (int sd = 1; sd <= POAS__FEW_SIDE; sd++) {
        if (threads && chance(s, 0.5))
          dm->threads_by_side[dt][side][sd] = (uint8_t)(1 + test_pick(s, 16));
        if (one)
          dm->one_thread[dt][side][sd] =
              log_uniform(s, POAS__ONE_THREAD_MIN * 10, POAS__ONE_THREAD_MAX / 100);
      }
    if (chance(s, 0.4))
      dm->handoff_extra[dt] = log_uniform(s, 1e-13, 1e-9);
  }
  if (chance(s, 0.5)) {
    dm->handoff_timings = 1 + (int)test_pick(s, 400);
    dm->handoff_slow = (int)test_pick(s, dm->handoff_timings + 1);
    dm->handoff[0] = log_uniform(s, 0.5, 4), dm->handoff[1] = log_uniform(s, 0.5, 4);
  }
  static const double shifts[] = {0, 0, -1, 0.5, 1, 2.5, 6};
  dm->handoff_shift = smooth ? 0 : shifts[test_pick(s, 7)];
  dm->handoff_slow_now = !smooth && chance(s, 0.3);
  poas__threads_slow_table(dm);
}

static uint64_t random_memory(uint64_t *s) {
  switch (test_pick(s, 5)) {
  case 0:
    return (uint64_t)log_uniform(s, 1e3, 1e7); /* tiny */
  case 1:
    return (uint64_t)log_uniform(s, 1e7, 1e9);
  case 4:
    return (uint64_t)log_uniform(s, 1e11, 1e14); /* huge */
  default:
    return (uint64_t)log_uniform(s, 1e9, 1e11);
  }
}

/* ----------------------------------------------------- random problems */

static int64_t random_side(uint64_t *s) {
  static const int64_t edges[] = {1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 255, 256, 257};
  switch (test_pick(s, 4)) {
  case 0:
    return edges[test_pick(s, sizeof edges / sizeof *edges)];
  case 1:
    return 1 + test_pick(s, 300);
  case 2:
    return (int64_t)log_uniform(s, 1, 1e6);
  default:
    return (int64_t)log_uniform(s, 100, 2e4);
  }
}

typedef struct fuzz_case {
  int nd;
  char ids[POAS_MAX_DEVICES][16];
  poas__device_model model[POAS_MAX_DEVICES];
  poas__opt_device dev[POAS_MAX_DEVICES];
  poas__opt_problem prob;
} fuzz_case;

static void random_case(uint64_t *s, fuzz_case *c) {
  memset(c, 0, sizeof *c);
  c->nd = 1 + (int)test_pick(s, chance(s, 0.5) ? 3 : 8);
  int host_cores = 1 + (int)test_pick(s, 32);
  /* Models whose times are the smooth ones the solver searches on, so
   * that its plans can be weighed against each device alone. */
  int smooth = chance(s, 0.4);
  for (int i = 0; i < c->nd; i++) {
    poas__opt_device *d = &c->dev[i];
    int host = chance(s, 0.35);
    snprintf(c->ids[i], sizeof c->ids[i], "%s%d", host ? "cpu" : "acc", i);
    random_model(s, &c->model[i], host, smooth);
    d->id = c->ids[i];
    d->model = chance(s, 0.97) ? &c->model[i] : NULL;
    d->host_memory = host;
    d->shares_host_cores = host || chance(s, 0.2);
    d->cores = 1 + (int)test_pick(s, host_cores + 2);
    d->memory_bytes = random_memory(s);
    c->model[i].memory_bytes = d->memory_bytes;
    d->supports_dtype = chance(s, 0.95);
    d->lost = chance(s, 0.02) ? "a fault" : NULL;
    if (!host) {
      d->wants_bt = chance(s, 0.3);
      d->tile_bytes_max = chance(s, 0.2) ? (uint64_t)log_uniform(s, 1e4, 1e10) : 0;
      d->unit_align = chance(s, 0.2) ? 1 << test_pick(s, 6) : 0;
      if (chance(s, 0.2)) {
        d->max_operand_elems = (int64_t)log_uniform(s, 1e5, 3e9);
        d->index_pad = 1 << test_pick(s, 7);
      }
      d->buffer_bytes_max = chance(s, 0.2) ? (uint64_t)log_uniform(s, 1e5, 1e11) : 0;
      if (chance(s, 0.2)) {
        d->scratch_pad = 1 << test_pick(s, 8);
        d->scratch_min_mnk = chance(s, 0.5) ? (int64_t)log_uniform(s, 1e3, 1e9) : 0;
      }
    }
    d->model_error = chance(s, 0.5) ? 0 : log_uniform(s, 0.005, 0.4);
  }
  poas__opt_problem *p = &c->prob;
  p->dtype = chance(s, 0.5) ? POAS_FLOAT32 : POAS_FLOAT64;
  p->transa = chance(s, 0.5) ? POAS_TRANS : POAS_NO_TRANS;
  p->transb = chance(s, 0.5) ? POAS_TRANS : POAS_NO_TRANS;
  p->m = random_side(s), p->n = random_side(s), p->k = random_side(s);
  p->reads_c = chance(s, 0.5);
  p->reads_ab = chance(s, 0.95);
  p->granule = chance(s, 0.1) ? 1 + test_pick(s, 64) : 0;
  p->tile_max = chance(s, 0.1) ? 1 + test_pick(s, 4096) : 0;
  p->host_cores = host_cores;
  p->min_gain = chance(s, 0.3) ? 0 : chance(s, 0.5) ? 0.03 : log_uniform(s, 0.005, 0.2);
  p->engine_s = chance(s, 0.3) ? 0 : log_uniform(s, 1e-6, 2e-3);
  p->names_swapped = chance(s, 0.3);
}

/* ------------------------------------------------------------- checking */

static char describe_buf[4096];

static const char *describe(const fuzz_case *c) {
  const poas__opt_problem *p = &c->prob;
  int n = snprintf(describe_buf, sizeof describe_buf,
                   "%c %s%s %lld x %lld x %lld reads_c %d reads_ab %d granule %lld tile_max %lld "
                   "host_cores %d min_gain %g engine %g;",
                   p->dtype == POAS_FLOAT32 ? 's' : 'd', p->transa == POAS_TRANS ? "T" : "N",
                   p->transb == POAS_TRANS ? "T" : "N", (long long)p->m, (long long)p->n, (long long)p->k,
                   p->reads_c, p->reads_ab, (long long)p->granule, (long long)p->tile_max,
                   p->host_cores, p->min_gain, p->engine_s);
  for (int i = 0; i < c->nd && n < (int)sizeof describe_buf; i++) {
    const poas__opt_device *d = &c->dev[i];
    n += snprintf(describe_buf + n, sizeof describe_buf - (size_t)n,
                  " %s(mem %llu shared %d cores %d%s%s)", d->id,
                  (unsigned long long)d->memory_bytes, d->shares_host_cores, d->cores,
                  d->model ? "" : " no model", d->supports_dtype ? "" : " no dtype");
  }
  return describe_buf;
}

/* Whether device d can hold the problem split either way by memory alone
 * (no limits on one buffer, no scratch), as tile_fit counts it: the shared
 * operand (twice where transposed on the device) and two buffers of a
 * unit of the other operand and of C, within 90% of its memory. */
static int surely_fits(const poas__opt_device *d, const poas__opt_problem *p) {
  if (d->lost || !d->supports_dtype)
    return 0;
  if (d->host_memory)
    return 1;
  if (d->max_operand_elems || d->buffer_bytes_max || d->scratch_pad)
    return 0;
  double es = (double)poas__dtype_size(p->dtype);
  for (int split = 0; split < 2; split++) {
    double shared = (double)poas__shared_bytes(p, (poas__split_dim)split) *
                    (poas__shared_transposed(p, (poas__split_dim)split, d->wants_bt) ? 2 : 1);
    double unit_b = 2 * es * ((p->reads_ab ? (double)p->k : 0) +
                              (double)(split == POAS__SPLIT_ROWS ? p->n : p->m));
    /* A margin for rounding at the boundary. */
    if (shared + unit_b < 0.89 * (double)d->memory_bytes)
      return 1;
  }
  return 0;
}

/* The solver's makespan for device i alone, or INFINITY where it cannot
 * take the problem alone. */
static double alone_makespan(const fuzz_case *c, int i) {
  poas__opt_result *r = malloc(sizeof *r);
  if (!r)
    return INFINITY;
  double t = INFINITY;
  if (poas__optimize(&c->dev[i], 1, &c->prob, r) == 0)
    t = r->makespan_s;
  free(r);
  return t;
}

static long counts[8];
enum { C_PLANNED, C_REFUSED, C_SHARED, C_ALONE_CHECKED, C_PUBLIC };

/* The plan r of case c, device by device, and each device alone. */
static void dump_plan(const fuzz_case *c, const poas__opt_result *r) {
  fprintf(stderr, "    split %s, granule %lld, makespan %.6g s, balanced %.6g s, engine %.3g s\n",
          r->split == POAS__SPLIT_ROWS ? "rows" : "columns", (long long)r->granule, r->makespan_s,
          r->balanced_s, r->engine_s);
  for (int i = 0; i < c->nd; i++) {
    const poas__opt_share *sh = &r->dev[i];
    fprintf(stderr, "    %s: [%lld, %lld) tile %lld (%lld tiles) %.6g s corun %.3g; alone %.6g s; %s\n",
            c->dev[i].id, (long long)sh->u0, (long long)sh->u1, (long long)sh->tile,
            (long long)sh->time.tiles, sh->time.total_s, sh->corun, alone_makespan(c, i),
            sh->reason);
  }
}

/* Checks one case; returns 0, or 1 with the failure on stderr. */
static int check_case(const fuzz_case *c, uint64_t id, poas__opt_result *r) {
  const poas__opt_problem *p = &c->prob;
  int nd = c->nd;
  int rc = poas__optimize(c->dev, nd, p, r);
#define FAIL(...)                                                                    \
  do {                                                                               \
    fprintf(stderr, "  case %llu: ", (unsigned long long)id);                       \
    fprintf(stderr, __VA_ARGS__);                                                    \
    fprintf(stderr, "\n    %s\n", describe(c));                                      \
    dump_plan(c, r);                                                                 \
    return 1;                                                                        \
  } while (0)
  if (rc != 0) {
    counts[C_REFUSED]++;
    if (rc != POAS_ETOOBIG && rc != POAS_ENODEV)
      FAIL("rc %d (%s): %s", rc, poas_err_name(rc), poas_error_detail());
    for (int i = 0; i < nd; i++) {
      if (!r->dev[i].reason[0])
        FAIL("refused (%s) with no reason for %s: %s", poas_err_name(rc), c->dev[i].id,
             poas_error_detail());
      if (surely_fits(&c->dev[i], p))
        FAIL("refused (%s) though %s fits: %s", poas_err_name(rc), c->dev[i].id,
             poas_error_detail());
    }
    return 0;
  }
  counts[C_PLANNED]++;
  if (p->m == 0 || p->n == 0)
    return 0;
  int64_t total = r->split == POAS__SPLIT_ROWS ? p->m : p->n;
  if (r->total_units != total)
    FAIL("total_units %lld, not %lld", (long long)r->total_units, (long long)total);
  /* Every unit once: the shares, in order of u0, tile [0, total). */
  int64_t at = 0;
  int working = 0;
  for (int pass = 0; pass < nd; pass++) {
    int next = -1;
    for (int i = 0; i < nd; i++)
      if (r->dev[i].u1 > r->dev[i].u0 && r->dev[i].u0 == at)
        next = i;
    if (next < 0)
      break;
    at = r->dev[next].u1;
    working++;
  }
  int with_work = 0;
  for (int i = 0; i < nd; i++)
    with_work += r->dev[i].u1 > r->dev[i].u0;
  if (at != total || with_work != working)
    FAIL("shares cover [0, %lld) with %d of %d working devices, not [0, %lld)", (long long)at,
         working, with_work, (long long)total);
  if (working == 0)
    FAIL("a plan with no device given work");
  counts[C_SHARED] += working > 1;
  double es = (double)poas__dtype_size(p->dtype), latest = 0;
  for (int i = 0; i < nd; i++) {
    const poas__opt_share *sh = &r->dev[i];
    const poas__opt_device *d = &c->dev[i];
    int64_t count = sh->u1 - sh->u0;
    if (count <= 0) {
      if (!sh->excluded || !sh->reason[0])
        FAIL("%s has no work, excluded %d, reason '%s'", d->id, sh->excluded, sh->reason);
      continue;
    }
    if (sh->excluded)
      FAIL("%s has work but is excluded: %s", d->id, sh->reason);
    if (d->lost || !d->supports_dtype)
      FAIL("%s has work but cannot take part", d->id);
    if (sh->tile <= 0)
      FAIL("%s has %lld units in tiles of %lld", d->id, (long long)count, (long long)sh->tile);
    int64_t tiles = (count + sh->tile - 1) / sh->tile;
    if (!d->host_memory && sh->time.tiles != tiles)
      FAIL("%s: %lld tiles of %lld for %lld units, not %lld", d->id, (long long)sh->time.tiles,
           (long long)sh->tile, (long long)count, (long long)tiles);
    if (!d->host_memory) {
      /* The plan's memory accounting (split.c, tile_fit): the shared
       * operand (twice while it is transposed) and two buffers per
       * operand of a tile. */
      int64_t tile = POAS__MIN(sh->tile, count);
      double shared = (double)poas__shared_bytes(p, r->split) *
                      (poas__shared_transposed(p, r->split, d->wants_bt) ? 2 : 1);
      double per_unit = 2 * es * ((p->reads_ab ? (double)p->k : 0) +
                                  (double)(r->split == POAS__SPLIT_ROWS ? p->n : p->m));
      if (shared + per_unit * (double)tile > 0.9 * (double)d->memory_bytes * (1 + 1e-12))
        FAIL("%s: tiles of %lld need %.4g bytes with the shared operand, past 90%% of its %llu",
             d->id, (long long)tile, shared + per_unit * (double)tile,
             (unsigned long long)d->memory_bytes);
      if (p->tile_max > 0 && sh->tile > p->tile_max && sh->tile > r->granule)
        FAIL("%s: tile %lld past tile_max %lld", d->id, (long long)sh->tile,
             (long long)p->tile_max);
    }
    /* Its time by the same models, for its own share. */
    poas__pipe pp;
    poas__pipe_time pt;
    poas__pipe_init(&pp, p, r->split, &r->model[i], d, d->host_memory ? count : sh->tile, 1);
    poas__pipe_eval(&pp, count, &pt);
    double t = pt.total_s + r->engine_s;
    /* Only a C scaled (A and B unread) may cost nothing, by a model that
     * charges nothing for writing C. */
    if (!isfinite(sh->time.total_s) || !(sh->time.total_s > 0 || !p->reads_ab))
      FAIL("%s: predicted %g s", d->id, sh->time.total_s);
    if (fabs(t - sh->time.total_s) > 1e-9 * t)
      FAIL("%s: predicted %.9g s, its models say %.9g s for %lld units", d->id,
           sh->time.total_s, t, (long long)count);
    latest = fmax(latest, t);
  }
  for (int i = 0; i < nd; i++)
    if (r->dev[i].excluded && !r->dev[i].reason[0])
      FAIL("%s left out with no reason", c->dev[i].id);
  if (!isfinite(r->makespan_s) || !(r->makespan_s > 0 || !p->reads_ab))
    FAIL("makespan %g s", r->makespan_s);
  if (r->makespan_s < latest * (1 - 1e-12))
    FAIL("makespan %.9g s below a device's %.9g s", r->makespan_s, latest);
  if (!isfinite(r->balanced_s) || !(r->balanced_s > 0 || !p->reads_ab) ||
      r->balanced_s > r->makespan_s * (1 + 1e-12))
    FAIL("balanced %.9g s beside makespan %.9g s", r->balanced_s, r->makespan_s);
  /* No slower than the fastest device alone, by the times plans report:
   * a plan of several devices must save the gain bar over it
   * (alone_when_cheaper), and a plan of one device must be it. The thin
   * tables and the hand-off state's term are not searched on (model.c),
   * but devices alone are weighed with them (split.c, reported_makespan;
   * seed 1's case 810 planned two devices at 25.3 ms, one of them alone
   * taking 8.3). With neither a gain nor an engine's cost the solver makes
   * no such check (alone_when_cheaper), and its tiles, chosen for even
   * shares, can leave a device with a large call overhead slower in two
   * tiles of the plan than alone in one. Plans of one device count too
   * (other_alone_when_faster; seed 1's case 2891 kept the slower of two
   * alone), each device weighed in its own granule (seed 2's case 16213,
   * a 1 x 15 x 15097 dgemm, weighed one in another's blocks of 8 columns
   * and kept a device 4% slower) and planned in its own tiles once the
   * plan has turned to the other split (known_cases). This allowed the
   * gain bar twice and the engine's cost, which hid plans 16% slower. */
  if (working >= 1 && (p->min_gain > 0 || p->engine_s > 0)) {
    double best = INFINITY;
    for (int i = 0; i < nd; i++)
      best = fmin(best, alone_makespan(c, i));
    counts[C_ALONE_CHECKED]++;
    if (r->balanced_s > best * (1 + 1e-9) + 1e-15)
      FAIL("plan of %d devices predicted %.6g s (balanced %.6g), the fastest alone %.6g s", working,
           r->makespan_s, r->balanced_s, best);
  }
  return 0;
#undef FAIL
}

/* ----------------------------------------------- through the public API */

/* Writes the case's copy devices as a profile, for sims to replay. */
static int write_profile(const fuzz_case *c, const char *path, int *which, int *nw) {
  poas__profile *pf = calloc(1, sizeof *pf);
  if (!pf)
    return -1;
  poas__profile_fingerprint_host(pf);
  *nw = 0;
  for (int i = 0; i < c->nd && *nw < 4; i++) {
    if (c->dev[i].host_memory)
      continue;
    poas__profile_device *pd = &pf->dev[pf->ndev++];
    snprintf(pd->id, sizeof pd->id, "cuda%d", i);
    pd->kind = POAS_DEVICE_CUDA;
    snprintf(pd->name, sizeof pd->name, "Replayed %d", i);
    pd->cores = 100;
    pd->memory_bytes = c->dev[i].memory_bytes;
    pd->model = c->model[i];
    pd->model.handoff_shift = 0, pd->model.handoff_slow_now = 0;
    which[(*nw)++] = i;
  }
  int rc = pf->ndev ? poas__profile_write(path, pf) : 1;
  free(pf);
  return rc;
}

static int check_public(const fuzz_case *c, uint64_t id) {
  int which[4], nw;
  const char *path = test_tmp_path("replay.json");
  if (!path || write_profile(c, path, which, &nw) != 0)
    return 0;
  char spec[2048] = "";
  for (int j = 0; j < nw; j++) {
    size_t len = strlen(spec);
    snprintf(spec + len, sizeof spec - len, "%ssim:profile=%s#cuda%d%s", j ? "," : "", path,
             which[j], c->dev[which[j]].shares_host_cores ? ":shared=1" : "");
  }
  poas_context *ctx = test_open_unlearning(spec);
  if (!ctx) {
    fprintf(stderr, "  case %llu: no context on %s: %s\n", (unsigned long long)id, spec,
            poas_error_detail());
    return 1;
  }
  counts[C_PUBLIC]++;
  const poas__opt_problem *p = &c->prob;
  poas_plan plan;
  int rc = poas_plan_gemm_call(ctx, p->dtype, p->names_swapped ? POAS_ROW_MAJOR : POAS_COL_MAJOR,
                               p->transa, p->transb, p->m, p->n, p->k, p->reads_ab ? 1 : 0,
                               p->reads_c ? 1 : 0, &plan);
  int bad = 0;
  if (rc != 0) {
    const char *why = poas_error_detail();
    bad = (rc != POAS_ETOOBIG && rc != POAS_ENODEV) || !why || !*why ||
          strstr(why, ": )") || strstr(why, ": ;") || strstr(why, "predicts no finite time");
    if (bad)
      fprintf(stderr, "  case %llu: public plan rc %d (%s): %s\n", (unsigned long long)id, rc,
              poas_err_name(rc), why);
  } else {
    int64_t total = plan.split == POAS_SPLIT_ROWS ? plan.m : plan.n, at = 0;
    for (int j = 0; j < plan.ndevices; j++)
      at += plan.dev[j].count;
    bad = at != total || !isfinite(plan.makespan_s) || !(plan.makespan_s > 0) ||
          plan.ndevices + plan.nexcluded > nw;
    for (int j = 0; j < plan.nexcluded; j++)
      bad |= !plan.excluded[j].reason[0];
    if (bad)
      fprintf(stderr, "  case %llu: public plan covers %lld of %lld, makespan %g s, %d + %d devices\n",
              (unsigned long long)id, (long long)at, (long long)total, plan.makespan_s,
              plan.ndevices, plan.nexcluded);
  }
  if (bad)
    fprintf(stderr, "    %s\n    devices %s\n", describe(c), spec);
  poas_finalize(ctx);
  return bad;
}

/* Case i of seed into *c. */
static void case_of(uint64_t seed, uint64_t i, fuzz_case *c) {
  uint64_t s = seed * 0x100000001b3ull ^ (i * 0x9e3779b97f4a7c15ull);
  random_case(&s, c);
}

TEST(random_realistic_models_plan_soundly) {
  uint64_t seed = env_u64("POAS_PLAN_PROPS_SEED", 1);
  uint64_t cases = env_u64("POAS_PLAN_PROPS_CASES", 3000);
  uint64_t first = env_u64("POAS_PLAN_PROPS_FIRST", 0);
  uint64_t every = env_u64("POAS_PLAN_PROPS_PUBLIC_EVERY", 25);
  int verbose = (int)env_u64("POAS_PLAN_PROPS_VERBOSE", 0);
  fuzz_case *c = malloc(sizeof *c);
  poas__opt_result *r = malloc(sizeof *r);
  CHECK(c && r);
  int failed = 0;
  for (uint64_t i = first; i < first + cases && failed < 10; i++) {
    case_of(seed, i, c);
    if (verbose)
      fprintf(stderr, "  case %llu: %s\n", (unsigned long long)i, describe(c));
    failed += check_case(c, i, r);
    if (every && i % every == 0)
      failed += check_public(c, i);
  }
  fprintf(stderr,
          "  seed %llu, %llu cases: %ld planned (%ld on several devices, %ld weighed against "
          "each device alone), %ld refused, %ld through the public API\n",
          (unsigned long long)seed, (unsigned long long)cases, counts[C_PLANNED], counts[C_SHARED],
          counts[C_ALONE_CHECKED], counts[C_REFUSED], counts[C_PUBLIC]);
  free(c);
  free(r);
  CHECK(failed == 0);
  return 0;
}

/* Cases of other seeds that failed, checked in every run. */
static const struct {
  uint64_t seed, id;
} known_cases[] = {
    /* A 257 x 232 x 14060 dgemm turned to columns, where one device was
     * planned alone in the two tiles of 116 cut for even shares, 8.83 ms,
     * after its own tiles of 144 and 88 (7.59 ms) had been solved for. */
    {2, 5731},
    /* A 1430 x 271 x 257 sgemm left by rows on one device in four tiles,
     * 1.76 ms with the engine's cost (solved again in its own tiles beside
     * the others, they took work back), then planned on another device
     * alone by columns, 0.74 ms, where the first alone in one tile takes
     * 0.48. */
    {3, 793},
};

TEST(known_cases_plan_soundly) {
  fuzz_case *c = malloc(sizeof *c);
  poas__opt_result *r = malloc(sizeof *r);
  CHECK(c && r);
  int failed = 0;
  for (size_t j = 0; j < sizeof known_cases / sizeof *known_cases; j++) {
    case_of(known_cases[j].seed, known_cases[j].id, c);
    failed += check_case(c, known_cases[j].id, r);
  }
  free(c);
  free(r);
  CHECK(failed == 0);
  return 0;
}

TEST_MAIN(TEST_ENTRY(random_realistic_models_plan_soundly), TEST_ENTRY(known_cases_plan_soundly))
