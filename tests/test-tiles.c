/* test-tiles.c: the GEMM work source's tiles, run by the real scheduler on
 * real devices from plans built by hand. The solver cuts a device's part
 * into tiles as large as its memory allows and hands out whole granules, so
 * the public API (test-soak) rarely meets a short last tile, a tile that
 * does not divide the part, or a granule that divides neither; test-adapt
 * runs fixed tiles of 4 serially on the cpu alone. Here each case draws its
 * plan: rows or columns split, granules of 1 to 5 units, tiles of 1 to 9,
 * shares between the devices (one of them possibly none), the scheduling
 * policy, C kept whole on a device or an operand resident there, and now
 * and then a fault injected part way through the run. Dtype, shape (k = 0
 * included), padding, alpha and beta (0 included, with C poisoned by NaN
 * so that beta = 0 must not read it) are drawn too; layout, transposes and
 * split direction go round in turn, so that every 16 cases meet all of
 * them. Results come only from devices that compute: cpu:threads=1, its
 * copy path forced for most cases, and PoCL's opencl0:cores=1 beside it
 * where there is one, unless POAS_TILES_DEVICES names another set of one
 * or two devices that compute (as "cuda0" or "cpu:threads=1,cuda0" on the
 * fake CUDA of test-cuda-fake.sh), which then replaces both; where
 * FAKECUDA_FAIL is set, a CUDA device may fail as if a fault named it (the
 * fake fails its calls, and after a sticky error it is lost for every later
 * case). Whenever a run returns 0, C must match the reference
 * and its padding be untouched; a failed run must be the POAS_EDEVICE the
 * scheduler documents, with a detail. make check runs 1000 cases of seed 1
 * on each device set (a few seconds); POAS_TILES_SEED and POAS_TILES_CASES
 * run others, POAS_TILES_FIRST starts at a given case (to replay one that
 * failed) and POAS_TILES_VERBOSE=1 prints each case. */
#include "adapt/adapt.h"
#include "devices/device.h"
#include "gemm-call.h"
#include "harness.h"
#include "schedule/schedule.h"

#include <string.h>

/* Cases per device set unless POAS_TILES_CASES says otherwise: about a
 * second on a 2-core machine. */
enum { DEFAULT_CASES = 1000 };

static uint64_t env_u64(const char *name, uint64_t dflt) {
  const char *v = getenv(name);
  return v && *v ? strtoull(v, NULL, 0) : dflt;
}

/* What the cases exercised, so that a run that passes says how much it saw,
 * and a change to the draws that stops covering something fails. */
static struct {
  int cases, short_tile, odd_granule, k0, alpha0, beta0, padded, keep_c, resident, idle_dev;
  int faults, recovered, refused;
} seen;

/* One drawn case: the problem, the plan and what goes with the run. */
typedef struct tiles_case {
  test_gemm t;
  poas__split_dim split;
  int64_t granule, tile[2];
  int share_quarters; /* device 0's share of the units, in quarters */
  int cpu_copies;     /* the cpu goes through the copy path */
  int keep_c;         /* C kept whole on the first copy device */
  char resident;      /* 'a' or 'b' resident there, or 0 */
  poas__policy policy;
  char fault[64];
} tiles_case;

/* Poisons C (and C0 alike) where beta = 0: it must not be read. */
static void poison_c(test_gemm *g) {
  if (g->beta != 0)
    return;
  size_t es = poas__dtype_size(g->dtype);
  int64_t outer = g->layout == POAS_COL_MAJOR ? g->n : g->m;
  int64_t inner = g->layout == POAS_COL_MAJOR ? g->m : g->n;
  for (int64_t o = 0; o < outer; o++) {
    test_poison((char *)g->C + (size_t)(o * g->ldc) * es, g->dtype, (size_t)inner);
    test_poison((char *)g->C0 + (size_t)(o * g->ldc) * es, g->dtype, (size_t)inner);
  }
}

/* A dimension of 1 to 90, now and then 1 itself. */
static int64_t draw_dim(uint64_t *s) { return test_pick(s, 8) == 0 ? 1 : 1 + test_pick(s, 90); }

/* A fault on one of the set's devices, at an operation early enough that
 * most runs reach it (a tile is about four operations). */
static void draw_fault(uint64_t *s, const poas__devset *set, char *spec, size_t cap) {
  spec[0] = 0;
  if (test_pick(s, 4) != 0)
    return;
  int dev = (int)test_pick(s, set->ndev);
  snprintf(spec, cap, "%s:after=%d", set->dev[dev]->info.id, 1 + (int)test_pick(s, 24));
}

/* Case c of the run: layout, transposes and split from c's low bits, the
 * rest drawn from the case's own stream. */
static int draw_case(uint64_t *s, uint64_t c, const poas__devset *set, tiles_case *x) {
  memset(x, 0, sizeof *x);
  poas_layout lay = c & 1 ? POAS_ROW_MAJOR : POAS_COL_MAJOR;
  poas_op ta = c & 2 ? POAS_TRANS : POAS_NO_TRANS, tb = c & 4 ? POAS_TRANS : POAS_NO_TRANS;
  x->split = c & 8 ? POAS__SPLIT_COLS : POAS__SPLIT_ROWS;
  poas_dtype dt = test_pick(s, 2) ? POAS_FLOAT64 : POAS_FLOAT32;
  int64_t m = draw_dim(s), n = draw_dim(s), k = test_pick(s, 10) == 0 ? 0 : draw_dim(s);
  double alpha = test_pick(s, 6) == 0 ? 0 : 1.5, beta = test_pick(s, 3) == 0 ? 0 : 0.5;
  x->granule = 1 + test_pick(s, 5);
  x->tile[0] = 1 + test_pick(s, 9), x->tile[1] = 1 + test_pick(s, 9);
  x->share_quarters = set->ndev == 1 ? 4 : (int)test_pick(s, 5);
  x->cpu_copies = test_pick(s, 4) != 0;
  x->keep_c = test_pick(s, 3) == 0;
  x->resident = test_pick(s, 3) == 0 ? (test_pick(s, 2) ? 'a' : 'b') : 0;
  x->policy = (poas__policy)test_pick(s, 3);
  draw_fault(s, set, x->fault, sizeof x->fault);
  if (test_gemm_alloc(&x->t, dt, lay, ta, tb, m, n, k, test_pick(s, 4), alpha, beta,
                      test_rand(s)) != 0)
    return -1;
  poison_c(&x->t);
  return 0;
}

static void describe(const tiles_case *x, char *buf, size_t cap) {
  const test_gemm *t = &x->t;
  snprintf(buf, cap,
           "%s %s %c%c m=%lld n=%lld k=%lld ld=%lld,%lld,%lld alpha=%g beta=%g; %s granule=%lld "
           "tiles=%lld,%lld share=%d/4 %s%s%s%s %s%s%s",
           poas__dtype_letter(t->dtype), t->layout == POAS_COL_MAJOR ? "col" : "row",
           t->ta == POAS_TRANS ? 'T' : 'N', t->tb == POAS_TRANS ? 'T' : 'N', (long long)t->m,
           (long long)t->n, (long long)t->k, (long long)t->lda, (long long)t->ldb,
           (long long)t->ldc, t->alpha, t->beta, x->split == POAS__SPLIT_ROWS ? "rows" : "cols",
           (long long)x->granule, (long long)x->tile[0], (long long)x->tile[1],
           x->share_quarters, x->cpu_copies ? "cpu copies" : "cpu in place",
           x->keep_c ? ", keep C" : "", x->resident ? ", resident " : "",
           x->resident == 'a' ? "A" : x->resident == 'b' ? "B" : "", poas__policy_name(x->policy),
           x->fault[0] ? " POAS_FAULT=" : "", x->fault);
}

/* The plan: device 0 takes the first share_quarters quarters of the units,
 * device 1 the rest, each in its own tiles. */
static void make_plan(const tiles_case *x, const poas__devset *set, const poas__opt_problem *p,
                      const poas__device_model *dm, poas__opt_device *dev,
                      poas__opt_result *plan) {
  memset(plan, 0, sizeof *plan);
  plan->split = x->split;
  plan->total_units = poas__split_units(p, x->split);
  plan->granule = x->granule;
  plan->ndev = set->ndev;
  int64_t cut = plan->total_units * x->share_quarters / 4;
  for (int i = 0; i < set->ndev; i++) {
    const poas__device *d = set->dev[i];
    dev[i] = (poas__opt_device){.id = d->info.id, .model = dm, .memory_bytes = (uint64_t)1 << 30,
                                .host_memory = d->info.host_memory && !(i == 0 && x->cpu_copies),
                                .cores = 1, .supports_dtype = 1, .wants_bt = d->gemm_wants_bt};
    plan->model[i] = *dm;
    plan->dev[i].tile = x->tile[i];
    plan->dev[i].u0 = i == 0 ? 0 : cut;
    plan->dev[i].u1 = i == 0 ? cut : plan->total_units;
  }
}

/* Device memory a case hands the source (kept C, a resident operand),
 * freed after the run. */
typedef struct held {
  poas__device *dev;
  poas__mem mem;
  size_t bytes;
} held;

/* `rows` x `cols` column-major elements from host (ld elements apart per
 * column; NULL: NaN) into a new dense buffer on d. */
static int upload(poas__device *d, poas_dtype dt, int64_t rows, int64_t cols, const void *host,
                  int64_t ld, held *h) {
  size_t es = poas__dtype_size(dt), bytes = (size_t)(rows * cols) * es;
  void *nan = NULL;
  if (!host) {
    if (!(nan = malloc(bytes)))
      return POAS_ENOMEM;
    test_poison(nan, dt, (size_t)(rows * cols));
    host = nan, ld = rows;
  }
  int rc = poas__dev_alloc(d, bytes, &h->mem);
  h->dev = rc ? NULL : d, h->bytes = bytes;
  poas__copy2d shape = {(size_t)rows * es, (size_t)cols, (size_t)ld * es, (size_t)rows * es, 0, 0};
  if (!rc)
    rc = d->be->copy_h2d(d, 0, h->mem, host, &shape);
  if (!rc)
    rc = d->be->lane_sync(d, 0);
  free(nan);
  return rc;
}

/* The stored rows and columns of operand 'a' or 'b' of a column-major
 * call. */
static void stored_dims(const poas__gemm_call *c, char op, int64_t *rows, int64_t *cols) {
  int64_t outer = op == 'a' ? c->m : c->n;
  int notrans = (op == 'a' ? c->transa : c->transb) == POAS_NO_TRANS;
  int64_t first = op == 'a' ? outer : c->k, second = op == 'a' ? c->k : outer;
  *rows = notrans ? first : second;
  *cols = notrans ? second : first;
}

/* Kept C (poisoned: the source must copy C in where beta != 0 and must not
 * read it otherwise) and a resident operand, on the first device of the
 * plan that copies and has a share. */
static int hand_memory(const tiles_case *x, const poas__devset *set, const poas__opt_device *dev,
                       const poas__opt_result *plan, const poas__gemm_call *call,
                       poas__gemm_source *src, held h[2]) {
  int i = 0;
  while (i < set->ndev && (dev[i].host_memory || plan->dev[i].u1 == plan->dev[i].u0))
    i++;
  if (i == set->ndev)
    return 0;
  int rc = 0;
  if (x->keep_c && !(rc = upload(set->dev[i], call->dtype, call->m, call->n, NULL, 0, &h[0]))) {
    rc = poas__gemm_source_keep_c(src, i, h[0].mem);
    seen.keep_c++;
  }
  if (rc || !x->resident || call->k == 0)
    return rc;
  const poas__operand *o = x->resident == 'a' ? &call->a : &call->b;
  int64_t rows, cols;
  stored_dims(call, x->resident, &rows, &cols);
  if (!(rc = upload(set->dev[i], call->dtype, rows, cols, o->mem.ptr, o->ld, &h[1]))) {
    rc = poas__gemm_source_resident(src, i, x->resident, h[1].mem);
    seen.resident++;
  }
  return rc;
}

/* The scheduler's view of the plan: the ranges, and rates that make no
 * device look faster than another. */
static poas__sched_config config_of(const tiles_case *x, const poas__opt_result *plan) {
  poas__sched_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.policy = x->policy;
  cfg.fault_spec = x->fault;
  for (int i = 0; i < plan->ndev; i++) {
    cfg.u0[i] = plan->dev[i].u0, cfg.u1[i] = plan->dev[i].u1;
    cfg.rate[i] = cfg.u1[i] > cfg.u0[i] ? 1e3 : 0;
    cfg.predicted_s[i] = 0.01;
  }
  cfg.predicted_makespan_s = 0.01;
  return cfg;
}

/* Whether device i of the set is a CUDA device whose calls FAKECUDA_FAIL
 * fails. */
static int fake_fails(const poas__devset *set, int i) {
  const char *fake = getenv("FAKECUDA_FAIL");
  return fake && *fake && set->dev[i]->info.kind == POAS_DEVICE_CUDA;
}

/* Whether device i of the set may fail in case x: a fault names it, or
 * the fake fails its calls. */
static int may_fail(const tiles_case *x, const poas__devset *set, int i) {
  size_t idlen = strlen(set->dev[i]->info.id);
  int named = strncmp(x->fault, set->dev[i]->info.id, idlen) == 0 && x->fault[idlen] == ':';
  return named || fake_fails(set, i);
}

/* A failed run is POAS_EDEVICE with a detail, and only where a device may
 * fail: where all may, as on a set of one device, which has no other to
 * recover on, or where a copy back was cut short with beta != 0 (applying
 * the update again would be wrong). A fault names one device, so on two
 * the other must recover. */
static int failure_allowed(int rc, const tiles_case *x, const poas__devset *set) {
  const char *detail = poas_error_detail();
  int any = 0, all = 1;
  for (int i = 0; i < set->ndev; i++)
    any |= may_fail(x, set, i), all &= may_fail(x, set, i);
  if (rc != POAS_EDEVICE || !any || !detail || !*detail)
    return 0;
  return all || (x->t.beta != 0 && strstr(detail, "cannot be recovered") != NULL);
}

/* Counts what a case exercised. */
static void count(const tiles_case *x, const poas__opt_device *dev, const poas__opt_result *plan) {
  seen.cases++;
  for (int i = 0; i < plan->ndev; i++) {
    int64_t len = plan->dev[i].u1 - plan->dev[i].u0;
    seen.short_tile += !dev[i].host_memory && len > 0 && len % x->tile[i] != 0;
    seen.idle_dev += len == 0;
  }
  seen.odd_granule += plan->total_units % x->granule != 0;
  seen.k0 += x->t.k == 0;
  seen.alpha0 += x->t.alpha == 0;
  seen.beta0 += x->t.beta == 0;
  seen.padded += x->t.ldc > (x->t.layout == POAS_COL_MAJOR ? x->t.m : x->t.n);
  seen.faults += x->fault[0] != 0;
}

/* Runs a drawn case through the source and the scheduler and checks it:
 * 0 when right, 1 when not. */
static int run_case(const poas__devset *set, tiles_case *x, const char *what) {
  poas__gemm_call call = test_gemm_call(&x->t);
  poas__opt_problem p = test_gemm_problem(&call);
  poas__device_model dm;
  const double rates[2] = {1e10, 1e10};
  poas__device_model_from_rates(&dm, POAS__MODEL_EXACT, rates, 1e-5, 1e-5, 1e10);
  poas__opt_device dev[POAS_MAX_DEVICES];
  poas__opt_result plan;
  make_plan(x, set, &p, &dm, dev, &plan);
  count(x, dev, &plan);
  poas__gemm_source *src;
  poas__work_source *ws;
  if (poas__gemm_source_create(&call, &p, dev, &plan, &src, &ws) != 0) {
    fprintf(stderr, "  %s: source: %s\n", what, poas_error_detail());
    return 1;
  }
  poas__sched_config cfg = config_of(x, &plan);
  held h[2] = {{NULL}, {NULL}};
  int rc = hand_memory(x, set, dev, &plan, &call, src, h), bad = 0;
  poas_report rep;
  memset(&rep, 0, sizeof rep);
  if (rc == POAS_EDEVICE && (fake_fails(set, 0) || (set->ndev > 1 && fake_fails(set, 1)))) {
    seen.refused++; /* the device to hold them failed or was lost */
  } else if (rc) {
    fprintf(stderr, "  %s: device memory: %s: %s\n", what, poas_err_name(rc), poas_error_detail());
    bad = 1;
  } else if ((rc = poas__schedule_run(set, ws, &cfg, &rep)) == 0) {
    bad = test_gemm_verify(&x->t, what);
    seen.recovered += rep.faults > 0;
  } else if (failure_allowed(rc, x, set)) {
    seen.refused++;
  } else {
    fprintf(stderr, "  %s: %s: '%s'\n", what, poas_err_name(rc), poas_error_detail());
    bad = 1;
  }
  for (int j = 0; j < 2; j++)
    if (h[j].dev)
      poas__dev_free(h[j].dev, h[j].mem, h[j].bytes);
  poas__gemm_source_destroy(src);
  return bad;
}

/* Runs the cases of POAS_TILES_SEED on a device set that opened. */
static int run_cases(const poas__devset *set, const char *name) {
  uint64_t seed = env_u64("POAS_TILES_SEED", 1);
  uint64_t cases = env_u64("POAS_TILES_CASES", DEFAULT_CASES);
  uint64_t first = env_u64("POAS_TILES_FIRST", 0);
  int verbose = (int)env_u64("POAS_TILES_VERBOSE", 0), failed = 0;
  for (uint64_t c = first; c < first + cases && failed < 10; c++) {
    uint64_t st = seed * 0x100000001b3ull ^ (c * 0x9e3779b97f4a7c15ull);
    tiles_case x;
    CHECK_MSG(draw_case(&st, c, set, &x) == 0, "case %llu: no memory", (unsigned long long)c);
    char what[512];
    int at = snprintf(what, sizeof what, "'%s' seed %llu case %llu: ", name,
                      (unsigned long long)seed, (unsigned long long)c);
    describe(&x, what + at, sizeof what - (size_t)at);
    if (verbose)
      fprintf(stderr, "  %s\n", what);
    failed += run_case(set, &x, what);
    test_gemm_free(&x.t);
  }
  return failed;
}

/* Prints what the cases saw and, for a run of the default length or
 * longer, checks that they saw everything the file promises. */
static int report_seen(const char *name) {
  fprintf(stderr,
          "  '%s': %d cases: %d short last tiles, %d granules not dividing, %d idle devices, "
          "k = 0 %d, alpha = 0 %d, beta = 0 %d, padded C %d, kept C %d, resident %d; %d faults, "
          "%d recovered, %d failed cleanly\n",
          name, seen.cases, seen.short_tile, seen.odd_granule, seen.idle_dev, seen.k0,
          seen.alpha0, seen.beta0, seen.padded, seen.keep_c, seen.resident, seen.faults,
          seen.recovered, seen.refused);
  if (env_u64("POAS_TILES_CASES", DEFAULT_CASES) < DEFAULT_CASES)
    return 0;
  CHECK(seen.short_tile && seen.odd_granule && seen.k0 && seen.alpha0 && seen.beta0);
  CHECK(seen.padded && seen.keep_c && seen.resident && seen.faults);
  CHECK(seen.recovered || seen.refused);
  return 0;
}

/* Opens `name`, runs the cases on it and closes it; skips where the set
 * does not open with `ndev` devices. POAS_TILES_DEVICES, where set, is run
 * in place of the first set (with as many devices as it opens, one or
 * two) and the others skip. */
static int run_set(const char *name, int ndev) {
  const char *named = getenv("POAS_TILES_DEVICES");
  if (named && *named) {
    if (ndev > 1)
      SKIP("POAS_TILES_DEVICES names the set");
    name = named, ndev = strchr(named, ',') ? 2 : 1;
  }
  poas__devset set;
  char err[256];
  if (poas__devset_open(name, &set, err, sizeof err) != 0)
    SKIP("'%s' does not open: %s", name, err);
  if (set.ndev != ndev) {
    poas__devset_close(&set);
    SKIP("'%s' opened with %d devices, not %d", name, set.ndev, ndev);
  }
  memset(&seen, 0, sizeof seen);
  int failed = run_cases(&set, name);
  poas__devset_close(&set);
  CHECK_MSG(failed == 0, "%d cases wrong", failed);
  return report_seen(name);
}

TEST(tiles_on_the_cpu) { return run_set("cpu:threads=1", 1); }

/* PoCL beside the cpu: two devices share the units, and a fault on one
 * must be recovered on the other. */
TEST(tiles_on_the_cpu_and_opencl) { return run_set("cpu:threads=1,opencl0:cores=1", 2); }

TEST_MAIN(TEST_ENTRY(tiles_on_the_cpu), TEST_ENTRY(tiles_on_the_cpu_and_opencl))
