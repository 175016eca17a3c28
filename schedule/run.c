/* run.c: poas__schedule_run, one co-executed run of a work source on an
 * engine. The plan's ranges are emitted up front (all of them under
 * static; all but a tail under guided; none under dynamic); the rest sits
 * in a pool of unit intervals that is handed out in chunks to whichever
 * device runs out of work first, sized by the device's share of the pool
 * at the rates the models predict, corrected by what each device has
 * measured in this run (chunk_size), and cut next to the range the device
 * already holds (give_next). A device that fails is retired and its
 * unfinished chunks go back to the pool.
 *
 * "Runs out first" is decided on the devices' clocks: with real devices,
 * the first worker to finish its chunks asks; in virtual time (every
 * device simulated) the runner waits until every device is idle and gives
 * the next chunk to the one whose virtual clock is earliest, so a run is
 * deterministic and reproduces what real devices would do. */
#define _GNU_SOURCE /* pthread_getaffinity_np */
#include "devices/sim/sim.h"
#include "schedule/engine.h"
#include "schedule/schedule.h"

#include <pthread.h>
#include <sched.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Fraction of each planned range left to the guided tail (tail_fraction).
 * A device holding less than an equal share of the plan leaves half: its
 * up-front part then ends by the predicted makespan even when it runs
 * twice slower than its model (the others absorb the rest); a one-core
 * PoCL device beside the CPU has run 1.3-1.5x off. Where calibration
 * measured how far off its model is (cfg->model_error, the held-out
 * median e), it leaves 1 - 1/(1 + TAIL_ERRORS e), between
 * GUIDED_TAIL_MINOR_MIN and half: its up-front part ends in time unless
 * it runs slower than about the 90th percentile of its errors (2.5 times
 * the median of half-normal errors). A thinner tail is fewer, larger
 * calls: one-core PoCL beside the CPU (held-out medians 9% and 12%,
 * tails 0.18 and 0.23) ran a 2048 sgemm 1.06-1.09x faster than the CPU
 * alone with a tail of 0.25, against 1.04-1.06x with 0.5, over four
 * alternated rounds (dgemm 1.13-1.15x and 1.12-1.15x). A device holding an
 * equal share leaves 0.3, and a larger one less, in proportion to what the
 * others hold: its tail is cut into more, thinner calls, each packing all
 * of the shared operand again, and the others could absorb little of its
 * error anyway. (With the CPU holding 92% of a 2048 sgemm beside one-core
 * PoCL, its 0.3 tail cost 5-6%: static ran at 0.98-0.99 of the summed
 * rates, guided at 0.92-0.94.) Where its error is known and covers all
 * its time (it copies nothing: the CPU; a GPU's copies are not in its
 * GEMM model's error, and a GPU has not been measured this way), it
 * leaves no more than the others can take of its 90th-percentile overrun,
 * TAIL_ERRORS e (1 - share) / share, and none when that is under one
 * chunk (MIN_CHUNK_TIME_FRACTION): the CPU holding 84-91% of a 2048 gemm
 * beside one-core PoCL (held-out median 3.4-5.2%) then ran it in one call
 * instead of two, and the pair ran 1.012x (sgemm, faster in 28 of 40
 * alternated rounds) and 1.018x (dgemm, 31 of 40) as fast as with a tail
 * of 0.05-0.1. */
#define GUIDED_TAIL 0.3
#define GUIDED_TAIL_MINOR 0.5
#define GUIDED_TAIL_MINOR_MIN 0.1
#define TAIL_ERRORS 2.5
/* Smallest chunk handed out on demand, as the time it takes the device,
 * in a fraction of the predicted makespan: below it the per-call overhead
 * and thin-block inefficiency of a BLAS call cost more than the balance
 * gained (OpenBLAS at n = 2048 cut into 8 halving chunks ran ~15% slower
 * than in one call). It is a time, not a count of units, because a count
 * that suits a fast device is far too much for a slow one: 3% of 4096
 * columns kept a one-core PoCL device busy for 0.4 s after the CPU had
 * finished. */
#define MIN_CHUNK_TIME_FRACTION 0.02

int poas__policy_parse(const char *text, poas__policy *out) {
  static const char *const names[] = {"static", "guided", "dynamic"};
  for (int i = 0; i < 3; i++)
    if (text && strcmp(text, names[i]) == 0) {
      *out = (poas__policy)i;
      return 0;
    }
  return POAS_EINVAL;
}

const char *poas__policy_name(poas__policy p) {
  return p == POAS__SCHED_STATIC ? "static" : p == POAS__SCHED_DYNAMIC ? "dynamic" : "guided";
}

typedef struct interval {
  int64_t a, b;
} interval;

typedef struct runner {
  const poas__devset *set;
  poas__work_source *src;
  const poas__sched_config *cfg;
  poas__engine *e;
  poas__graph g;
  int seen_buf, seen_ins;       /* graph entries already given to the engine */
  interval *pool;
  int npool, cap_pool;
  int part[POAS_MAX_DEVICES];   /* takes part in this run */
  int emitted[POAS_MAX_DEVICES];
  int open[POAS_MAX_DEVICES];   /* chunks given and not complete */
  /* In virtual time, the device's clock (the sim's own, not dev_time's)
   * when it was last given a chunk (give): its next chunk starts no
   * earlier. */
  double given_at[POAS_MAX_DEVICES];
  int chunks[POAS_MAX_DEVICES];
  int64_t units[POAS_MAX_DEVICES];
  double weight[POAS_MAX_DEVICES];
  int64_t min_chunk[POAS_MAX_DEVICES]; /* units; see MIN_CHUNK_TIME_FRACTION */
  /* What the tail's sizing learns as chunks complete (see model_s and
   * correction): the device's seconds with a chunk open, up to its last
   * completion; when its current stretch of open chunks was last
   * accounted for; the model's seconds for its completed and its open
   * chunks (each chunk's is in its poas__chunk). */
  double busy_s[POAS_MAX_DEVICES];
  double busy_from[POAS_MAX_DEVICES];
  double done_model_s[POAS_MAX_DEVICES];
  double open_model_s[POAS_MAX_DEVICES];
  /* The units [held0, held1) device d holds as one range: its static
   * part, grown by the tail chunks it took next to it. Its next chunk is
   * taken from the pool where it touches this range, so that two devices
   * eat the pool between them from either end and neither is left with a
   * sliver to run as one more call. */
  int64_t held0[POAS_MAX_DEVICES], held1[POAS_MAX_DEVICES];
  int force;                    /* chunk_size never declines */
  int handled;                  /* chunks accounted for */
  int rc;                       /* first fatal error */
} runner;

static int pool_add(runner *r, int64_t a, int64_t b) {
  if (b <= a)
    return 0;
  if (r->npool == r->cap_pool) {
    int ncap = r->cap_pool ? 2 * r->cap_pool : 16;
    interval *p = realloc(r->pool, (size_t)ncap * sizeof *p);
    if (!p)
      return POAS_ENOMEM;
    r->pool = p, r->cap_pool = ncap;
  }
  r->pool[r->npool++] = (interval){a, b};
  return 0;
}

static int64_t pool_units(const runner *r) {
  int64_t n = 0;
  for (int i = 0; i < r->npool; i++)
    n += r->pool[i].b - r->pool[i].a;
  return n;
}

static int alive(const runner *r, int d) { return r->part[d] && !r->e->w[d].failed; }

/* Hands the engine what emit appended to the graph since last time. Locked. */
static int ingest(runner *r) {
  for (; r->seen_buf < r->g.nbuf; r->seen_buf++)
    if (poas__engine_add_buffer(r->e, &r->g.buf[r->seen_buf]) != r->seen_buf)
      return POAS_ENOMEM;
  for (; r->seen_ins < r->g.nins; r->seen_ins++) {
    int id = poas__engine_add(r->e, &r->g.ins[r->seen_ins], NULL, NULL);
    if (id < 0)
      return id;
  }
  return 0;
}

/* Device d's clock from the engine's start (simulated devices each have
 * their own origin). */
static double dev_time(const runner *r, int d) {
  return poas__engine_clock(r->e, d) - r->e->w[d].t_start;
}

/* The model's seconds for `units` units on device d, as the next chunk
 * would be emitted (the source's predict, else the plan's rate); 0 when
 * neither is known. */
static double model_s(const runner *r, int d, int64_t units) {
  double t = r->src->predict ? r->src->predict(r->src->user, d, 0, units) : 0;
  if (t > 0)
    return t;
  return r->cfg->rate[d] > 0 ? (double)units / r->cfg->rate[d] : 0;
}

/* How far device d runs off its model in this run: its seconds with a
 * chunk open over the model's seconds for the chunks it completed (copies
 * and queueing included), 1 until one completes. Measured beats modelled
 * here because the tail exists to absorb the models' error: a one-core
 * PoCL device predicted at 12 s for sgemm n = 4096 ran it in 15-16 s. */
static double correction(const runner *r, int d) {
  if (r->done_model_s[d] > 0 && r->busy_s[d] > 0)
    return r->busy_s[d] / r->done_model_s[d];
  return 1;
}

/* When device d is expected to finish the chunks it holds, on its clock. */
static double ready_at(const runner *r, int d) {
  double now = dev_time(r, d);
  if (r->open[d] == 0)
    return now;
  double left = r->open_model_s[d] * correction(r, d) - (now - r->busy_from[d]);
  return now + POAS__MAX(left, 0);
}

/* Emits units [a, b) on device d as one chunk. Locked on entry and exit;
 * the source runs unlocked. */
static int give(runner *r, int d, int64_t a, int64_t b) {
  /* Before emit: the first chunk on a device carries the shared operand. */
  double model = model_s(r, d, b - a);
  /* In virtual time a chunk is given once every device is idle (hand_out),
   * where a real asynchronous device is given its next chunk while it
   * still runs one (its lookahead), so that copies overlap compute: the
   * chunk starts no earlier than the device's clock when it was given the
   * one before. Left at an idle copy lane's own clock, a tail chunk's
   * copies ran up to chunks before it was given, and the tail's correction
   * then measured the device faster than it ran (sims of slowdown 1.2
   * corrected to 0.886). */
  if (r->e->virtual_time) {
    /* On the sim's own clock, as poas__sim_lanes_from takes it: dev_time
     * is the run's, which starts at 0 only on a context's first GEMM. */
    poas__sim_lanes_from(r->set->dev[d], r->given_at[d]);
    r->given_at[d] = poas__engine_clock(r->e, d);
  }
  int chunk = poas__engine_chunk_open(r->e, d, a, b);
  if (chunk < 0)
    return chunk;
  r->e->chunks[chunk].model_s = model;
  if (r->open[d] == 0)
    r->busy_from[d] = dev_time(r, d);
  r->open[d]++;
  r->open_model_s[d] += model;
  r->emitted[d] = 1;
  poas__engine_unlock(r->e);
  int rc = r->src->emit(r->src->user, &r->g, d, a, b, chunk);
  poas__engine_lock(r->e);
  if (rc) {
    /* A half-emitted chunk is dropped: its instructions never run. */
    r->g.nins = r->seen_ins;
    r->e->chunks[chunk].cancelled = 1;
  } else {
    rc = ingest(r);
  }
  poas__engine_chunk_seal(r->e, chunk);
  return rc;
}

/* The time at which the devices order[0..m) (by readiness), each
 * starting when ready and working at its rate, finish `pool` units
 * together, leaving out device `skip` (-1: none): they join in order of
 * readiness until the ones working by then absorb the pool. Infinite when
 * no device is left. */
static double water_level(const int *order, int m, const double *rate, const double *ready,
                          double pool, int skip) {
  double sum_rate = 0, sum_work = 0, level = INFINITY;
  for (int k = 0; k < m; k++) {
    int i = order[k];
    if (i == skip)
      continue;
    sum_rate += rate[i];
    sum_work += rate[i] * ready[i];
    level = (pool + sum_work) / sum_rate;
    int next = k + 1 < m && order[k + 1] == skip ? k + 2 : k + 1;
    if (next >= m || level <= ready[order[next]])
      break;
  }
  return level;
}

/* The largest whole number of granules g below `n` that device d,
 * ready at `ready` and running `corr` times its model, finishes by `by`;
 * 0 when not even one granule does. */
static int64_t largest_by(const runner *r, int d, double ready, double corr, double by, int64_t g,
                          int64_t n) {
  int64_t lo = 0, hi = (n - 1) / g; /* in granules: lo fits (or is 0), hi + 1 does not */
  while (lo < hi) {
    int64_t mid = lo + (hi - lo + 1) / 2;
    if (ready + model_s(r, d, mid * g) * corr <= by)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo * g;
}

/* Whether device d, ready at ready[d] and running corr[d] times its
 * model, would finish `units` units no later than any other alive device
 * would. */
static int finishes_first(const runner *r, int d, const double *ready, const double *corr,
                          int64_t units) {
  double end = ready[d] + model_s(r, d, units) * corr[d];
  for (int i = 0; i < r->set->ndev; i++)
    if (i != d && alive(r, i) && ready[i] + model_s(r, i, units) * corr[i] < end)
      return 0;
  return 1;
}

/* The size of the next chunk for device d, in units; 0 when d should not
 * take one now.
 *
 * With every alive device's model known, the pool is shared out by
 * water-filling on the devices' corrected rates: `level` is the time at
 * which the devices, each starting when it is ready, would finish the
 * pool together, and d's share is what it processes by then. It takes
 * that share once a chunk of its own has completed and measured how far
 * it runs off its model, half of it before (the guided halving, so that a
 * later chunk can still correct), at least min_chunk and one granule,
 * never more than the share. (Halving once the correction is known cost
 * a call more per device, each packing the shared operand again: in a
 * 2048 sgemm beside the CPU, one-core PoCL ran at 0.86-0.89 of its alone
 * rate with its part in four calls, at 1.0-1.09 in two.) It takes all of
 * the pool when the others' part is under one of d's smallest chunks. A
 * chunk that would end past the level (a share sized by rates leaves out
 * the cost of a call) is cut to the most granules that end by it; if not
 * one does, or the chunk is the whole pool, d takes it only if it ends
 * before the others would finish the whole pool without d. So a slow
 * device does not take the last pieces that a fast one would finish first
 * (a one-core PoCL device once took 16-column tail chunks of 50 ms each
 * that the CPU beside it would have done in 5, and ended 80 ms after it),
 * nor stands idle while the others have more than they can finish by
 * then: when a chunk past the level was declined whole because another
 * device would finish it sooner on its own, PoCL, 0.6 ms past the level
 * with 72 columns of a 2048 dgemm, waited 95 ms while the CPU ran all 176
 * columns left, 19 ms past the level. (25 runs of that 2048 dgemm beside
 * the CPU, alternated: median 257.2 ms before the cut, 252.4 with it.)
 *
 * Without models (no plan and no predict) it is half of d's weighted
 * share of the pool, at least min_chunk, as the guided policy has always
 * done. */
static int64_t chunk_size(const runner *r, int d) {
  int ndev = r->set->ndev;
  int64_t g = POAS__MAX(r->src->granule, 1), pool = pool_units(r);
  double rate[POAS_MAX_DEVICES], ready[POAS_MAX_DEVICES], corr[POAS_MAX_DEVICES];
  int known = 1;
  for (int i = 0; i < ndev; i++) {
    if (!alive(r, i))
      continue;
    corr[i] = correction(r, i);
    double t = model_s(r, i, pool) * corr[i];
    if (!(t > 0)) {
      known = 0;
      continue;
    }
    rate[i] = (double)pool / t;
    ready[i] = ready_at(r, i);
  }
  if (!known) {
    double wsum = 0;
    for (int i = 0; i < ndev; i++)
      if (alive(r, i))
        wsum += r->weight[i];
    double want = (double)pool * (wsum > 0 ? r->weight[d] / wsum : 1) / 2;
    int64_t n = ((int64_t)ceil(POAS__MAX(want, (double)r->min_chunk[d])) + g - 1) / g * g;
    return POAS__MAX(n, g);
  }
  int order[POAS_MAX_DEVICES], m = 0;
  for (int i = 0; i < ndev; i++) {
    if (!alive(r, i))
      continue;
    int j = m++;
    for (; j > 0 && ready[order[j - 1]] > ready[i]; j--)
      order[j] = order[j - 1];
    order[j] = i;
  }
  double level = water_level(order, m, rate, ready, (double)pool, -1);
  double share = rate[d] * POAS__MAX(level - ready[d], 0);
  double part = r->done_model_s[d] > 0 ? share : share / 2;
  double want = POAS__MIN(POAS__MAX(part, (double)r->min_chunk[d]), share);
  int64_t n = POAS__MAX((int64_t)floor(want / (double)g) * g, g);
  if ((double)pool - share < (double)r->min_chunk[d])
    n = pool;
  n = POAS__MIN(n, pool);
  double end = ready[d] + model_s(r, d, n) * corr[d];
  int declined = 0;
  if (end > level && !r->force) {
    int64_t fit = n < pool ? largest_by(r, d, ready[d], corr[d], level, g, n) : 0;
    if (fit > 0)
      n = fit, end = ready[d] + model_s(r, d, n) * corr[d];
    else if (end > water_level(order, m, rate, ready, (double)pool, d)) {
      /* The level shares the pool out in fractions of a granule, which a
       * pool of fewer granules than devices cannot be: every device then
       * found the others would end it sooner without it, all declined,
       * and the forced hand-out gave the next granule to the earliest
       * clock, however slow (of 27 sims, one of 7 GFLOP/s ended 16%
       * past the others). The device that finishes a granule first
       * takes one. */
      int64_t one = POAS__MIN(g, pool);
      if (finishes_first(r, d, ready, corr, one))
        n = one, end = ready[d] + model_s(r, d, n) * corr[d];
      else
        declined = 1;
    }
  }
  poas__debug("tail: %s at %.4f s: pool %lld, level %.4f s, share %.1f (ready %.4f s, x%.3f "
              "the model), %lld units to end at %.4f s%s",
              r->set->dev[d]->info.id, dev_time(r, d), (long long)pool, level, share, ready[d],
              corr[d], (long long)n, end,
              declined ? ": declined, the others end the pool sooner without it" : "");
  return declined ? 0 : n;
}

/* Takes up to `want` units from pool interval i at its low end (up) or
 * its high end (down); returns how many it took. Leaves empty intervals in
 * place (pool_compact removes them). */
static int64_t pool_cut(runner *r, int i, int64_t want, int up, int64_t *a, int64_t *b) {
  interval *iv = &r->pool[i];
  int64_t n = POAS__MIN(want, iv->b - iv->a);
  if (up)
    *a = iv->a, *b = iv->a + n, iv->a += n;
  else
    *a = iv->b - n, *b = iv->b, iv->b -= n;
  return n;
}

static void pool_compact(runner *r) {
  int k = 0;
  for (int i = 0; i < r->npool; i++)
    if (r->pool[i].b > r->pool[i].a)
      r->pool[k++] = r->pool[i];
  r->npool = k;
}

/* The pool interval that touches [at, at) from above (up: it starts at
 * `at`) or from below (it ends there); -1 if none. */
static int pool_touching(const runner *r, int64_t at, int up) {
  for (int i = 0; i < r->npool; i++)
    if (r->pool[i].b > r->pool[i].a && (up ? r->pool[i].a == at : r->pool[i].b == at))
      return i;
  return -1;
}

/* Gives device d the next chunk from the pool: next to the range it holds
 * when the pool touches it, taken from the touching end (its own tail
 * always does until it is gone: start() plans it next to the static part,
 * and held0/held1 grow only into what touches them), else from the start
 * of the largest interval. A chunk larger than
 * its interval runs on into the one that touches the interval's far end
 * (the neighbour's tail, planned next to this one). Sets *gave when it
 * gave one (d may decline: chunk_size). Locked. */
static int give_next(runner *r, int d, int *gave) {
  *gave = 0;
  int up = 1, pick = pool_touching(r, r->held1[d], 1);
  if (pick < 0 && (pick = pool_touching(r, r->held0[d], 0)) >= 0)
    up = 0;
  for (int i = 0; pick < 0 && i < r->npool; i++)
    if (pick < 0 || r->pool[i].b - r->pool[i].a > r->pool[pick].b - r->pool[pick].a)
      pick = i;
  if (pick < 0)
    return 0;
  int64_t size = chunk_size(r, d);
  if (size <= 0)
    return 0;
  int64_t a, b, a2, b2;
  int64_t got = pool_cut(r, pick, size, up, &a, &b);
  int next = got < size ? pool_touching(r, up ? b : a, up) : -1;
  if (next >= 0) {
    pool_cut(r, next, size - got, up, &a2, &b2);
    a = POAS__MIN(a, a2), b = POAS__MAX(b, b2);
  }
  pool_compact(r);
  if (a == r->held1[d])
    r->held1[d] = b;
  else if (b == r->held0[d])
    r->held0[d] = a;
  else if (r->held0[d] == r->held1[d])
    r->held0[d] = a, r->held1[d] = b;
  *gave = 1;
  return give(r, d, a, b);
}

static int interval_cmp(const void *x, const void *y) {
  const interval *a = x, *b = y;
  return (a->a > b->a) - (a->a < b->a);
}

/* A chunk that failed after its device had started writing host memory:
 * the units its completed instructions finished there (ins.result_u0/u1)
 * count for that device, and the rest go back to the pool. An instruction
 * that ran and wrote host memory without finishing a declared range (it
 * failed, or declares none) left part of the result in an unknown state:
 * that part is run again only when the source is rerunnable; otherwise the
 * run fails, as applying its update twice would be wrong. Locked. */
static int salvage(runner *r, int c) {
  poas__engine *e = r->e;
  const poas__chunk *ch = &e->chunks[c];
  interval *done = NULL;
  int ndone = 0, cap = 0, unknown = 0;
  for (int id = 0; id < e->nnodes; id++) {
    const poas__node *nd = &e->nodes[id];
    if (nd->ins.chunk != c || !nd->ran)
      continue;
    if (nd->state == POAS__NODE_DONE && nd->ins.result_u1 > nd->ins.result_u0) {
      if (ndone == cap) {
        int ncap = cap ? 2 * cap : 16;
        interval *p = realloc(done, (size_t)ncap * sizeof *p);
        if (!p) {
          free(done);
          return POAS_ENOMEM;
        }
        done = p, cap = ncap;
      }
      done[ndone++] = (interval){nd->ins.result_u0, nd->ins.result_u1};
    } else if (poas__engine_writes_host(e, &nd->ins)) {
      unknown = 1;
    }
  }
  if (unknown && !r->src->rerunnable) {
    free(done);
    return poas__fail(POAS_EDEVICE,
                      "%s failed with part of units [%lld, %lld) written back, in a state not "
                      "known; the result cannot be recovered",
                      r->set->dev[ch->device]->info.id, (long long)ch->u0, (long long)ch->u1);
  }
  if (ndone > 1)
    qsort(done, (size_t)ndone, sizeof *done, interval_cmp);
  int64_t at = ch->u0;
  int rc = 0;
  for (int i = 0; i < ndone && !rc; i++) {
    int64_t a = POAS__MAX(done[i].a, at), b = POAS__MIN(done[i].b, ch->u1);
    if (b <= a)
      continue;
    rc = pool_add(r, at, a);
    r->units[ch->device] += b - a;
    at = b;
  }
  free(done);
  return rc ? rc : pool_add(r, at, ch->u1);
}

/* Accounts for completed chunks: done ones count for their device, failed
 * ones go back to the pool (but for what they finished in host memory:
 * salvage). Locked. */
static void collect(runner *r) {
  poas__engine *e = r->e;
  for (int c = 0; c < e->nchunks; c++) {
    poas__chunk *ch = &e->chunks[c];
    if (ch->state != POAS__CHUNK_COMPLETE)
      continue;
    ch->state = POAS__CHUNK_HANDLED;
    int d = ch->device;
    r->open[d]--;
    r->open_model_s[d] -= ch->model_s;
    if (!ch->cancelled)
      r->done_model_s[d] += ch->model_s;
    /* The device has had a chunk open since busy_from, up to its last
     * completion (a later chunk's copies may already be done: the stretch
     * goes on either way). */
    double t = r->e->w[d].t_last - r->e->w[d].t_start;
    if (t > r->busy_from[d]) {
      r->busy_s[d] += t - r->busy_from[d];
      r->busy_from[d] = t;
    }
    if (!ch->cancelled) {
      r->units[ch->device] += ch->u1 - ch->u0;
      r->chunks[ch->device]++;
    } else if (!r->e->w[ch->device].failed) {
      /* Cancelled on a healthy device: the runtime ran out of memory. */
      if (!r->rc)
        r->rc = poas__fail(POAS_ENOMEM, "schedule: out of memory recording dependencies");
    } else {
      int rc = ch->host_written ? salvage(r, c) : pool_add(r, ch->u0, ch->u1);
      if (rc && !r->rc)
        r->rc = rc;
    }
  }
}

static int any_open(const runner *r) {
  for (int i = 0; i < r->set->ndev; i++)
    if (r->open[i])
      return 1;
  return 0;
}

/* One round of hand-out: in virtual time one chunk to the idle device with
 * the earliest clock once all are idle; else a chunk to every device that
 * has run out (an asynchronous device keeps one chunk queued so that its
 * copies overlap its compute). Returns whether it gave anything. Locked. */
static int hand_out(runner *r) {
  int ndev = r->set->ndev, gave = 0;
  if (r->npool == 0)
    return 0;
  if (r->e->virtual_time) {
    if (any_open(r))
      return 0;
    /* Earliest clock first; one that declines passes to the next. */
    int asked[POAS_MAX_DEVICES] = {0};
    for (;;) {
      int best = -1;
      for (int d = 0; d < ndev; d++)
        if (alive(r, d) && !asked[d] && (best < 0 || dev_time(r, d) < dev_time(r, best)))
          best = d;
      if (best < 0)
        return gave;
      asked[best] = 1;
      int rc = give_next(r, best, &gave);
      if (rc && !r->rc)
        r->rc = rc;
      if (gave || rc)
        return 1;
    }
  }
  for (int d = 0; d < ndev && r->npool; d++) {
    int lookahead = r->e->w[d].async ? 1 : 0;
    if (!alive(r, d) || r->open[d] > lookahead)
      continue;
    int one = 0, rc = give_next(r, d, &one);
    if (rc && !r->rc)
      r->rc = rc;
    gave |= one || rc;
  }
  return gave;
}

static int any_alive(const runner *r) {
  for (int d = 0; d < r->set->ndev; d++)
    if (alive(r, d))
      return 1;
  return 0;
}

/* When every device of the plan has failed, the devices it left out take
 * over what is left (a GPU that fails mid-run leaves its work to the CPU
 * that the plan did not need), as far as they can run it: the work source
 * can emit on every device of the set that can hold its work (runs_on),
 * and C ends in host memory whoever computes it; a device lost for good
 * (poas__dev_lost) is no help, nor one whose memory holds not one tile
 * (enlisted, its first chunk failed the run with POAS_ETOOBIG while
 * another left out could have taken it). Returns how many were enlisted.
 * Locked. */
static int enlist_bystanders(runner *r) {
  int n = 0;
  for (int d = 0; d < r->set->ndev; d++)
    if (!r->part[d] && !r->e->w[d].failed && !poas__dev_lost(r->set->dev[d]) &&
        (!r->src->runs_on || r->src->runs_on(r->src->user, d))) {
      r->part[d] = 1;
      n++;
      poas__warn("%s takes over the work of the failed devices", r->set->dev[d]->info.id);
    }
  return n;
}

/* The part of a planned range left to the guided tail, for a device
 * holding `share` of the units among `participants` devices, whose GEMM
 * model is typically `error` off (0: not known; see GUIDED_TAIL), and
 * which copies nothing (copies_nothing: its GEMMs are all its time). */
static double tail_fraction(double share, int participants, double error, int copies_nothing) {
  double equal = 1.0 / participants;
  if (share < equal && error > 0)
    return POAS__MIN(POAS__MAX(1 - 1 / (1 + TAIL_ERRORS * error), GUIDED_TAIL_MINOR_MIN),
                     GUIDED_TAIL_MINOR);
  if (share < equal)
    return GUIDED_TAIL_MINOR;
  double tail = GUIDED_TAIL * (1 - share) / (1 - equal);
  return error > 0 && copies_nothing
             ? POAS__MIN(tail, TAIL_ERRORS * error * (1 - share) / share)
             : tail;
}

/* Sets who takes part and the pool, and emits the static parts. Locked. */
static int start(runner *r) {
  const poas__sched_config *cfg = r->cfg;
  int ndev = r->set->ndev, planned = 0;
  int64_t covered = 0;
  for (int d = 0; d < ndev; d++)
    if (cfg->u1[d] > cfg->u0[d]) {
      if (cfg->u0[d] < 0 || cfg->u1[d] > r->src->total_units)
        return poas__fail(POAS_EINVAL, "plan range [%lld, %lld) outside [0, %lld)",
                          (long long)cfg->u0[d], (long long)cfg->u1[d],
                          (long long)r->src->total_units);
      covered += cfg->u1[d] - cfg->u0[d];
      planned = 1;
    }
  if (planned && covered != r->src->total_units)
    return poas__fail(POAS_EINVAL, "the plan covers %lld of %lld units", (long long)covered,
                      (long long)r->src->total_units);
  /* Within [0, total) and summing to it, ranges that do not overlap cover
   * every unit once: two that overlapped, with a gap elsewhere, ran some
   * units twice and others never, and the run returned 0 (helper-73). */
  for (int d = 0; d < ndev; d++)
    for (int i = d + 1; i < ndev; i++)
      if (cfg->u1[d] > cfg->u0[d] && cfg->u1[i] > cfg->u0[i] && cfg->u0[d] < cfg->u1[i] &&
          cfg->u0[i] < cfg->u1[d])
        return poas__fail(POAS_EINVAL,
                          "plan ranges [%lld, %lld) of %s and [%lld, %lld) of %s overlap",
                          (long long)cfg->u0[d], (long long)cfg->u1[d], r->set->dev[d]->info.id,
                          (long long)cfg->u0[i], (long long)cfg->u1[i], r->set->dev[i]->info.id);
  /* Without a plan every device takes part, weighted by rate or equally. */
  for (int d = 0; d < ndev; d++) {
    r->part[d] = planned ? (cfg->u1[d] > cfg->u0[d] || cfg->rate[d] > 0) : 1;
    r->weight[d] = cfg->rate[d] > 0 ? cfg->rate[d] : 1;
  }
  for (int d = 0; d < ndev; d++)
    r->min_chunk[d] =
        (int64_t)(cfg->rate[d] * cfg->predicted_makespan_s * MIN_CHUNK_TIME_FRACTION);
  if (!planned)
    return pool_add(r, 0, r->src->total_units);
  int64_t g = POAS__MAX(r->src->granule, 1);
  /* With one device in the plan there is nothing to balance: cutting its
   * range into chunks would only slow it down. */
  int participants = 0;
  for (int d = 0; d < ndev; d++)
    participants += cfg->u1[d] > cfg->u0[d];
  for (int d = 0; d < ndev; d++) {
    int64_t u0 = cfg->u0[d], u1 = cfg->u1[d];
    if (u1 <= u0)
      continue;
    int64_t kept = u1 - u0; /* units of its static part */
    if (participants > 1 && cfg->policy == POAS__SCHED_DYNAMIC)
      kept = 0;
    else if (participants > 1 && cfg->policy == POAS__SCHED_GUIDED) {
      double tail = tail_fraction((double)(u1 - u0) / (double)r->src->total_units, participants,
                                  cfg->model_error[d], r->set->dev[d]->info.host_memory);
      kept = (int64_t)((double)(u1 - u0) * (1 - tail)) / g * g;
      /* A tail under one chunk would be one more call, and no balance. */
      if (u1 - u0 - kept < r->min_chunk[d])
        kept = u1 - u0;
    }
    /* Ranges follow each other in device order; every second one (by
     * position) keeps its static part at its end, so that its tail
     * touches the tail of the range before it and the two make one
     * stretch of pool (see held0). Split points stay whole granules. */
    int rank = 0;
    for (int i = 0; i < ndev; i++)
      rank += cfg->u1[i] > cfg->u0[i] && cfg->u0[i] < u0;
    int64_t s0 = u0, s1 = u0 + kept;
    if (rank % 2 == 1 && kept < u1 - u0) {
      s0 = POAS__MIN(u0 + (u1 - u0 - kept + g - 1) / g * g, u1);
      s1 = u1;
    }
    r->held0[d] = s0, r->held1[d] = s1;
    int rc = pool_add(r, u0, s0);
    if (!rc)
      rc = pool_add(r, s1, u1);
    if (!rc && s1 > s0)
      rc = give(r, d, s0, s1);
    if (rc)
      return rc;
  }
  return 0;
}

/* POAS_EDEVICE, "every device failed", with what each device of the plan
 * failed of: one that failed only for want of memory when it took over
 * another's work (a GPU that other contexts' buffers had filled) read as
 * failed like the one that had the fault. When a node was doomed for want
 * of host memory, the run could not have finished on any device: that is
 * the error (POAS_ENOMEM), the devices' failures its detail. It read
 * "every device failed" when the doomed node's device failed as well, its
 * cancelled chunk handed back as a failed device's. So is a run whose
 * devices all failed for want of memory, host or device: nothing failed
 * but memory (a run on one device whose host staging could not be
 * allocated read POAS_EDEVICE). Locked. */
static int fail_all(const runner *r) {
  char why[512] = "";
  size_t len = 0;
  int failed = 0, for_memory = 0;
  for (int d = 0; d < r->set->ndev; d++) {
    int rc = r->part[d] ? r->e->w[d].failed : 0;
    if (!rc)
      continue;
    failed++;
    for_memory += rc == POAS_ENOMEM;
    if (len < sizeof why)
      len += (size_t)snprintf(why + len, sizeof why - len, "%s%s (%s)", len ? ", " : ": ",
                              r->set->dev[d]->info.id, poas_strerror(rc));
  }
  if (r->e->doomed)
    return poas__fail(POAS_ENOMEM, "schedule: out of memory recording dependencies, and "
                      "every device failed as well%s", why);
  if (failed && for_memory == failed)
    return poas__fail(POAS_ENOMEM, "every device ran out of memory%s", why);
  return poas__fail(POAS_EDEVICE, "every device failed%s", why);
}

/* Runs to completion. Locked. */
static void drive(runner *r) {
  for (;;) {
    collect(r);
    if (r->rc)
      return;
    if (r->npool == 0 && !any_open(r))
      return;
    if (!any_alive(r) && !enlist_bystanders(r)) {
      r->rc = fail_all(r);
      return;
    }
    if (hand_out(r))
      continue;
    if (!any_open(r)) {
      /* Everyone declined and nothing will complete to change that (it
       * should not happen: the device that would finish a granule first
       * always takes it). Hand the next chunk out regardless. */
      r->force = 1;
      hand_out(r);
      r->force = 0;
      continue;
    }
    poas__engine_wait(r->e);
  }
}

/* Releases what the source keeps on each surviving device. Locked. */
static void finish_devices(runner *r) {
  for (int d = 0; d < r->set->ndev && !r->rc; d++) {
    if (!r->emitted[d] || r->e->w[d].failed || !r->src->finish)
      continue;
    poas__engine_unlock(r->e);
    int rc = r->src->finish(r->src->user, &r->g, d);
    poas__engine_lock(r->e);
    r->rc = rc ? rc : ingest(r);
  }
}

/* Seconds of device d with work on some lane: the union of its
 * instructions' intervals. */
static double busy_time(const poas__engine *e, int d) {
  int n = 0;
  double(*iv)[2] = malloc((size_t)(e->nnodes ? e->nnodes : 1) * sizeof *iv);
  if (!iv)
    return 0;
  for (int i = 0; i < e->nnodes; i++)
    if (e->nodes[i].ins.device == d && e->nodes[i].ran && e->nodes[i].t1 > e->nodes[i].t0)
      iv[n][0] = e->nodes[i].t0, iv[n][1] = e->nodes[i].t1, n++;
  /* Insertion sort by start: runs have few instructions per device. */
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && iv[j][0] < iv[j - 1][0]; j--) {
      double t0 = iv[j][0], t1 = iv[j][1];
      iv[j][0] = iv[j - 1][0], iv[j][1] = iv[j - 1][1];
      iv[j - 1][0] = t0, iv[j - 1][1] = t1;
    }
  double busy = 0, end = -1e300;
  for (int i = 0; i < n; i++) {
    double s = POAS__MAX(iv[i][0], end);
    if (iv[i][1] > s)
      busy += iv[i][1] - s;
    end = POAS__MAX(end, iv[i][1]);
  }
  free(iv);
  return busy;
}

static void fill_report(const runner *r, poas_report *rep) {
  const poas__engine *e = r->e;
  rep->ndevices = r->set->ndev;
  rep->predicted_s = r->cfg->predicted_makespan_s;
  rep->virtual_time = e->virtual_time;
  rep->faults = e->failures;
  poas__strlcpy(rep->policy, poas__policy_name(r->cfg->policy), sizeof rep->policy);
  for (int d = 0; d < r->set->ndev; d++) {
    const poas__worker *w = &e->w[d];
    poas_device_report *dr = &rep->dev[d];
    poas__strlcpy(dr->id, r->set->dev[d]->info.id, sizeof dr->id);
    dr->predicted_s = r->cfg->predicted_s[d];
    dr->share = r->src->total_units ? (double)r->units[d] / (double)r->src->total_units : 0;
    dr->chunks = r->chunks[d];
    double start = r->set->dev[d]->virtual_time ? w->t_start : e->wall_start;
    dr->measured_s = r->emitted[d] ? POAS__MAX(w->t_last - start, 0) : 0;
    dr->busy_s = POAS__MIN(busy_time(e, d), dr->measured_s);
    dr->idle_s = dr->measured_s - dr->busy_s;
    dr->bytes_h2d = w->bytes_h2d;
    dr->bytes_d2h = w->bytes_d2h;
    dr->failed = w->failed != 0;
    rep->measured_s = POAS__MAX(rep->measured_s, dr->measured_s);
  }
}

static const char *kind_name(poas__ins_kind k) {
  static const char *const names[] = {"alloc", "free", "h2d", "d2h", "gemm", "host", "transpose"};
  return (unsigned)k < POAS__ARRAY_LEN(names) ? names[k] : "?";
}

/* Writes the run as a Chrome trace: one process per device, one thread
 * per lane, one complete event per instruction that ran or failed, in
 * microseconds from the device's start (virtual time for simulated
 * devices), its state done, failed or cancelled. */
static int write_trace(const runner *r, const char *path) {
  const poas__engine *e = r->e;
  FILE *f = fopen(path, "w");
  if (!f)
    return poas__fail(POAS_EIO, "cannot write trace %s: %s", path, strerror(errno));
  fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
  const char *sep = "";
  for (int d = 0; d < r->set->ndev; d++) {
    fprintf(f, "%s{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"args\":{\"name\":\"%s\"}}",
            sep, d, r->set->dev[d]->info.id);
    sep = ",\n";
  }
  for (int i = 0; i < e->nnodes; i++) {
    const poas__node *n = &e->nodes[i];
    /* What ran, and the operation that failed its device, run or not (an
     * injected fault is never issued). */
    if (!(n->ran || n->failed_here) || n->ins.device < 0)
      continue;
    int d = n->ins.device;
    double start = r->set->dev[d]->virtual_time ? e->w[d].t_start : e->wall_start;
    int lanes = POAS__MIN(r->set->dev[d]->nlanes, POAS__ENGINE_LANES);
    /* A GEMM's shape, so that a slow call can be told from a big one. */
    char shape[96] = "";
    if (n->ins.kind == POAS__INS_GEMM) {
      const poas__gemm_call *c = &n->ins.u.gemm.call;
      snprintf(shape, sizeof shape, ",\"m\":%lld,\"n\":%lld,\"k\":%lld", (long long)c->m,
               (long long)c->n, (long long)c->k);
    }
    fprintf(f,
            "%s{\"ph\":\"X\",\"name\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
            "\"args\":{\"device\":\"%s\",\"chunk\":%d,\"bytes\":%llu,\"predicted_us\":%.3f,"
            "\"state\":\"%s\"%s}}",
            sep, kind_name(n->ins.kind), d, (n->ins.lane < 0 ? 0 : n->ins.lane) % lanes,
            (n->t0 - start) * 1e6, POAS__MAX(n->t1 - n->t0, 0) * 1e6, r->set->dev[d]->info.id,
            n->ins.chunk, (unsigned long long)n->ins.bytes, n->ins.predicted_s * 1e6,
            n->failed_here                ? "failed"
            : n->state == POAS__NODE_DONE ? "done"
                                          : "cancelled",
            shape);
  }
  fprintf(f, "\n]}\n");
  return fclose(f) == 0 ? 0
                        : poas__fail(POAS_EIO, "cannot write trace %s: %s", path, strerror(errno));
}

/* One device's instructions, in the order emitted, from the calling
 * thread, every copy and GEMM on lane 0 (a device's lane runs in order, so
 * emission order is dependency order); then one wait for the lane. Buffers
 * go back to the device's cache only after that wait, so that no other
 * run can be handed one the lane still reads. Sets *wrote once host memory
 * may have been written (a copy out, or a GEMM into the caller's C), and
 * adds the bytes copied each way. */
static int run_serial(poas__device *d, int dev, poas__graph *g, int *wrote, uint64_t bytes[2]) {
  int rc = 0;
  for (int i = 0; !rc && i < g->nins; i++) {
    poas__ins *in = &g->ins[i];
    switch (in->kind) {
    case POAS__INS_ALLOC: {
      poas__gbuf *b = &g->buf[in->u.alloc.buf];
      rc = poas__dev_alloc(d, b->pitch * b->lines, &b->mem);
      break;
    }
    case POAS__INS_FREE:
      break; /* after the wait */
    case POAS__INS_H2D:
      rc = d->be->copy_h2d(d, 0, g->buf[in->u.h2d.dst_buf].mem, in->u.h2d.src, &in->u.h2d.shape);
      bytes[0] += in->bytes;
      break;
    case POAS__INS_D2H:
      *wrote = 1;
      rc = d->be->copy_d2h(d, 0, in->u.d2h.dst, g->buf[in->u.d2h.src_buf].mem, &in->u.d2h.shape);
      bytes[1] += in->bytes;
      break;
    case POAS__INS_GEMM: {
      poas__gemm_call call = in->u.gemm.call;
      const int bufs[3] = {in->u.gemm.a_buf, in->u.gemm.b_buf, in->u.gemm.c_buf};
      poas__mem *mem[3] = {&call.a.mem, &call.b.mem, &call.c.mem};
      for (int j = 0; j < 3; j++) {
        const poas__gbuf *b = &g->buf[bufs[j]];
        *mem[j] = b->device == dev ? b->mem : poas__mem_host(b->host);
      }
      *wrote |= g->buf[bufs[2]].device != dev;
      rc = d->be->gemm(d, 0, &call);
      break;
    }
    case POAS__INS_TRANSPOSE: {
      poas__transpose_call call = in->u.transpose.call;
      call.src.mem = g->buf[in->u.transpose.src_buf].mem;
      call.dst.mem = g->buf[in->u.transpose.dst_buf].mem;
      rc = d->be->transpose ? d->be->transpose(d, 0, &call) : POAS_ENOTSUP;
      break;
    }
    case POAS__INS_HOST:
      rc = POAS_EINVAL; /* not emitted here: run_inline checked */
      break;
    }
  }
  int src = d->be->lane_sync(d, 0);
  rc = rc ? rc : src;
  for (int b = 0; b < g->nbuf; b++)
    if (g->buf[b].device == dev && !g->buf[b].external && g->buf[b].mem.ptr) {
      poas__dev_release(d, g->buf[b].mem, g->buf[b].pitch * g->buf[b].lines, rc != 0);
      g->buf[b].mem.ptr = NULL;
    }
  return rc;
}

/* A plan that gives all the work to one device runs on the calling thread
 * when nothing in it can overlap: the engine's threads and hand-offs cost
 * about 40 us a call on the CI machine's CPU and 450 us on an H100 VM
 * (64^3 sgemm: 490 us a call against 43 us for the same copies and GEMM
 * issued directly), more than a small GEMM itself. That is a device on
 * host memory (the work source emits it host GEMMs only), or one with its
 * own memory given a single tile (copies in, one GEMM, copy out: a chain).
 * Anything else, a trace or an injected fault takes the engine. Returns 1
 * when it ran (rc in *rc), 0 when the engine must: also when the device
 * failed before writing any host memory, so that the engine moves the work
 * elsewhere as it would have. */
static int run_inline(const poas__devset *set, poas__work_source *src,
                      const poas__sched_config *cfg, const char *fault, const char *trace,
                      poas_report *report, int *rc) {
  int dev = -1;
  for (int d = 0; d < set->ndev; d++)
    if (cfg->u1[d] > cfg->u0[d]) {
      if (dev >= 0)
        return 0;
      dev = d;
    }
  if (dev < 0 || (fault && *fault) || (trace && *trace) || cfg->no_inline)
    return 0;
  poas__device *d = set->dev[dev];
  /* Several tiles are known not to be a chain before anything is emitted;
   * the emitted GEMMs are counted below all the same. */
  if (d->virtual_time || (!d->info.host_memory && cfg->tiles[dev] > 1))
    return 0;
  poas__graph g;
  poas__graph_init(&g);
  int ok = src->emit(src->user, &g, dev, cfg->u0[dev], cfg->u1[dev], 0) == 0 &&
           (!src->finish || src->finish(src->user, &g, dev) == 0);
  int gemms = 0;
  for (int i = 0; ok && i < g.nins; i++) {
    gemms += g.ins[i].kind == POAS__INS_GEMM;
    ok = g.ins[i].kind != POAS__INS_HOST && g.ins[i].device == dev &&
         (d->info.host_memory || gemms <= 1);
  }
  if (!ok) {
    poas__graph_free(&g);
    poas__clear_detail();
    return 0;
  }
  /* The CPU device on fewer cores than the process has binds the thread
   * that calls BLAS to them: that is the caller's thread here, which gets
   * its own binding back. */
  cpu_set_t mask;
  int have_mask =
      d->binds_caller && pthread_getaffinity_np(pthread_self(), sizeof mask, &mask) == 0;
  uint64_t bytes[2] = {0, 0};
  int wrote = 0;
  double t0 = poas__now();
  *rc = run_serial(d, dev, &g, &wrote, bytes);
  double t = poas__now() - t0;
  if (have_mask)
    pthread_setaffinity_np(pthread_self(), sizeof mask, &mask);
  if (*rc && !wrote) {
    poas__warn("%s failed (%s): its work moves to the other devices", d->info.id,
               poas_strerror(*rc));
    poas__graph_free(&g);
    return 0;
  }
  memset(report, 0, sizeof *report);
  report->ndevices = set->ndev;
  report->predicted_s = cfg->predicted_makespan_s;
  report->measured_s = t;
  poas__strlcpy(report->policy, poas__policy_name(cfg->policy), sizeof report->policy);
  for (int k = 0; k < set->ndev; k++) {
    poas_device_report *dr = &report->dev[k];
    poas__strlcpy(dr->id, set->dev[k]->info.id, sizeof dr->id);
    dr->predicted_s = cfg->predicted_s[k];
    if (k == dev) {
      dr->share = src->total_units ? (double)(cfg->u1[k] - cfg->u0[k]) / (double)src->total_units
                                   : 0;
      dr->chunks = 1;
      dr->measured_s = dr->busy_s = t;
      dr->bytes_h2d = bytes[0];
      dr->bytes_d2h = bytes[1];
      dr->failed = *rc != 0;
    }
  }
  poas__graph_free(&g);
  return 1;
}

int poas__schedule_run(const poas__devset *set, poas__work_source *src,
                       const poas__sched_config *cfg, poas_report *report) {
  if (!set || !src || !cfg || !report || !src->emit || src->total_units < 0)
    return poas__fail(POAS_EINVAL, "schedule: bad arguments");
  runner r;
  memset(&r, 0, sizeof r);
  r.set = set, r.src = src, r.cfg = cfg;
  poas__graph_init(&r.g);
  const char *fault = cfg->fault_spec ? cfg->fault_spec : getenv("POAS_FAULT");
  const char *trace = cfg->trace_path ? cfg->trace_path : getenv("POAS_TRACE");
  int inline_rc;
  if (run_inline(set, src, cfg, fault, trace, report, &inline_rc))
    return inline_rc;
  poas__engine_config ecfg = {
      .host_threads = 1, .recycle = 0, .cancel_after_doom = 1, .fault_spec = fault};
  int rc = poas__engine_create(set, &ecfg, &r.e);
  if (rc)
    return rc;
  /* Devices on the host's cores that compute together slow each other,
   * as plans price it: in virtual time, the sims say so. */
  int sharing = 0;
  for (int d = 0; d < set->ndev; d++)
    sharing += cfg->u1[d] > cfg->u0[d] && set->dev[d]->info.shares_host_cores;
  for (int d = 0; r.e->virtual_time && d < set->ndev; d++)
    if (cfg->u1[d] > cfg->u0[d]) {
      poas__sim_advance(set->dev[d], cfg->engine_s);
      poas__sim_run_starts(set->dev[d]);
      poas__sim_beside(set->dev[d], sharing >= 2 && set->dev[d]->info.shares_host_cores);
    }
  poas__engine_lock(r.e);
  r.rc = start(&r);
  if (!r.rc)
    drive(&r);
  if (!r.rc)
    finish_devices(&r);
  /* The run's own detail outlives what comes after: the trace's, which
   * says why the trace is missing, and the teardown's, which frees memory
   * and events on a device that may be lost and fails again there ("lost
   * earlier in this process"), where the run failed for another reason
   * (a result that cannot be recovered). */
  char run_detail[512];
  poas__strlcpy(run_detail, r.rc ? poas_error_detail() : "", sizeof run_detail);
  poas__engine_drain(r.e);
  poas__engine_unlock(r.e);
  memset(report, 0, sizeof *report);
  fill_report(&r, report);
  rc = r.rc;
  int trace_missing = 0;
  if (trace && *trace) {
    int trc = write_trace(&r, trace);
    if (trc && cfg->trace_failed) {
      *cfg->trace_failed = 1;
      trace_missing = 1;
      poas__warn("%s", poas_error_detail());
    } else if (trc && !rc) {
      rc = trc;
    }
  }
  for (int d = 0; d < set->ndev; d++)
    poas__sim_run_ends(set->dev[d]);
  poas__engine_destroy(r.e);
  poas__graph_free(&r.g);
  free(r.pool);
  if (r.rc) {
    /* Already logged when the run failed. */
    int was = poas__failures_expected(1);
    poas__fail(r.rc, "%s", run_detail);
    poas__failures_expected(was);
  } else if (trace_missing) {
    poas__clear_detail();
  }
  return rc;
}
