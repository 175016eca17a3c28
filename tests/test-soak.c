/* test-soak.c: a randomized soak of co-execution through the public API.
 * From a seed it draws GEMM cases (device set, scheduling policy, dtype,
 * layout, transposes, shape, padding, alpha and beta, an injected
 * POAS_FAULT) and runs them synchronously, or as a batch of asynchronous
 * GEMMs that depend on each other through their matrices, with host tasks
 * that copy a GEMM's C between them. Whenever a call returns 0 its C must
 * match the reference; an error must be one the documentation allows, with
 * a detail; and the report must hold together. make check runs 40 cases of
 * seed 7 (a few seconds); POAS_SOAK_SEED and POAS_SOAK_CASES make it longer
 * (POAS_SOAK_VERBOSE=1 prints each case, 2 each report's devices and faults
 * too). POAS_SOAK_DEVICES replaces the device sets drawn from with others,
 * separated by ';' ("cuda0;cpu:threads=1,cuda0" on the fake CUDA of
 * test-cuda-fake.sh); every device of each must compute C. Where
 * FAKECUDA_FAIL is set, the fake fails CUDA calls under the soak's feet,
 * so that a CUDA device may fail as if POAS_FAULT had named it. A case
 * that does not finish within a minute fails the program, naming the
 * case. */
#include "harness.h"

#include <math.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

/* Device sets whose every device computes C (sims do not), unless
 * POAS_SOAK_DEVICES names others. */
static const char *const default_sets[] = {"cpu", "opencl0", "cpu,opencl0",
                                           "cpu:threads=1,opencl0:cores=1"};
enum { MAX_SETS = 8, SET_CHARS = 512 };
static const char *sets[MAX_SETS];
static int nsets;
static char set_names[SET_CHARS];
/* NULL: the default policy (guided). */
static const char *const policies[] = {NULL, "static", "guided", "dynamic"};
enum { NPOLICIES = sizeof policies / sizeof *policies };

/* Seconds a case may take before it is called a hang. Under ThreadSanitizer
 * a case's reference check reads C element by element after OpenBLAS's
 * own (uninstrumented) threads wrote it, and every read is a race the
 * suppressions then discard, at great cost: seed 3902's case 92 (a
 * 533 x 222 x 547 dgemm checked through a task's copy) took past 60 s
 * there in its check alone, with every POAS thread idle. */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer) /* clang's word for it */
#define CASE_SECONDS 900
#endif
#endif
#if defined(__SANITIZE_THREAD__) && !defined(CASE_SECONDS) /* gcc's */
#define CASE_SECONDS 900
#endif
#ifndef CASE_SECONDS
#define CASE_SECONDS 60
#endif
#define SOAK_STR(x) #x
#define SOAK_XSTR(x) SOAK_STR(x)

/* The case being run, for the alarm to name. */
static char current[512];

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "  hang: no progress for " SOAK_XSTR(CASE_SECONDS) " s in: ";
  ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
  w = write(STDERR_FILENO, current, strlen(current));
  w = write(STDERR_FILENO, "\n", 1);
  (void)w;
  _exit(1);
}


static uint64_t env_u64(const char *name, uint64_t dflt) {
  const char *v = getenv(name);
  return v && *v ? strtoull(v, NULL, 0) : dflt;
}

/* Contexts, opened on first use and kept, so that later cases meet what
 * earlier ones left (learned factors, copies kept on devices). */
static poas_context *ctxs[MAX_SETS][NPOLICIES];
static int set_ok[MAX_SETS]; /* 1 usable, -1 not, 0 not tried */
/* Each set's device ids and whether each is a cpu, in the context's
 * order, once it opened. */
static char set_ids[MAX_SETS][2][POAS_ID_LEN];
static poas_device_kind set_kind[MAX_SETS][2];
static int set_ndev[MAX_SETS];
/* FAKECUDA_FAIL is set: CUDA devices may fail without POAS_FAULT. */
static int cuda_may_fail;
static int verbose;
/* What the soak exercised, so that a soak that passes says how much it saw:
 * GEMMs run, runs that split C between devices, runs that recovered from an
 * injected fault, and the errors the documentation allows. */
static struct { uint64_t gemms, split, recovered, allowed, unrecoverable; } seen;

static poas_context *context_for(int set, int policy) {
  if (!ctxs[set][policy]) {
    poas_options o;
    poas_options_init(&o);
    o.devices = sets[set];
    o.no_profile = 1;
    o.sched = policies[policy];
    if (poas_init(&ctxs[set][policy], &o) != 0)
      ctxs[set][policy] = NULL;
  }
  return ctxs[set][policy];
}

/* The sets of POAS_SOAK_DEVICES, or the default ones. */
static int choose_sets(void) {
  const char *env = getenv("POAS_SOAK_DEVICES");
  if (!env || !*env) {
    for (nsets = 0; nsets < (int)(sizeof default_sets / sizeof *default_sets); nsets++)
      sets[nsets] = default_sets[nsets];
    return 0;
  }
  CHECK_MSG(strlen(env) < sizeof set_names, "POAS_SOAK_DEVICES is too long");
  snprintf(set_names, sizeof set_names, "%s", env);
  char *save = NULL;
  for (char *t = strtok_r(set_names, ";", &save); t; t = strtok_r(NULL, ";", &save)) {
    CHECK_MSG(nsets < MAX_SETS, "POAS_SOAK_DEVICES names more than %d sets", MAX_SETS);
    const char *comma = strchr(t, ',');
    CHECK_MSG(!comma || !strchr(comma + 1, ','), "'%s': at most two devices a set", t);
    sets[nsets++] = t;
  }
  CHECK_MSG(nsets > 0, "POAS_SOAK_DEVICES names no set");
  return 0;
}

/* Notes the ids and kinds of a set's devices. */
static void note_devices(int set, const poas_context *ctx) {
  set_ndev[set] = poas_device_count(ctx);
  for (int i = 0; i < set_ndev[set]; i++) {
    poas_device_info info;
    poas_device_get(ctx, i, &info);
    snprintf(set_ids[set][i], sizeof set_ids[set][i], "%s", info.id);
    set_kind[set][i] = info.kind;
  }
}

/* A usable set: its context opens with as many devices as it names. */
static int set_usable(int set) {
  if (!set_ok[set]) {
    poas_context *ctx = context_for(set, 0);
    int want = strchr(sets[set], ',') ? 2 : 1;
    set_ok[set] = ctx && poas_device_count(ctx) == want ? 1 : -1;
    if (set_ok[set] > 0)
      note_devices(set, ctx);
    if (set_ok[set] < 0)
      fprintf(stderr, "  note: '%s' not usable here (%s); its cases are skipped\n", sets[set],
              ctx ? "too few devices" : poas_error_detail());
  }
  return set_ok[set] > 0;
}

/* One GEMM of a case, with what the soak knows of it. */
typedef struct soak_gemm {
  test_gemm g;
  int owns_a, owns_c; /* A and C are its own allocations (else another's) */
  int sealed;         /* another GEMM already depends on its matrices */
  int source;         /* index of the GEMM whose C is its A, or -1 */
  int overwritten;    /* a later GEMM wrote its C: nothing to verify */
  void *b_saved;      /* B as it read it, where a later GEMM wrote B */
  void *snap;         /* C as a host task copied it right after the GEMM */
  size_t cbytes;
  poas_buffer *reg[2]; /* C and snap, registered for the copy */
  poas_task *task;
  int rc, known; /* its status, and whether it is known */
} soak_gemm;

static void soak_free(soak_gemm *s) {
  free(s->snap);
  if (!s->owns_a)
    s->g.A = NULL;
  if (!s->owns_c)
    s->g.C = NULL;
  test_gemm_free(&s->g);
}

/* Poisons C (and C0 alike) where beta = 0: it must not be read. */
static void poison_c(test_gemm *g) {
  if (g->beta != 0)
    return;
  size_t es = g->dtype == POAS_FLOAT32 ? 4 : 8;
  int64_t outer = g->layout == POAS_COL_MAJOR ? g->n : g->m;
  int64_t inner = g->layout == POAS_COL_MAJOR ? g->m : g->n;
  for (int64_t o = 0; o < outer; o++) {
    test_poison((char *)g->C + (size_t)(o * g->ldc) * es, g->dtype, (size_t)inner);
    test_poison((char *)g->C0 + (size_t)(o * g->ldc) * es, g->dtype, (size_t)inner);
  }
}

/* Bytes of the stored matrix `rows` x `cols` with leading dimension ld. */
static size_t stored_bytes(const test_gemm *g, int64_t rows, int64_t cols, int64_t ld) {
  int64_t outer = g->layout == POAS_COL_MAJOR ? cols : rows;
  return (size_t)((outer > 0 ? outer : 1) * ld) * (g->dtype == POAS_FLOAT32 ? 4 : 8);
}

static int64_t draw_dim(uint64_t *s) {
  switch (test_pick(s, 10)) {
  case 0:
    return test_pick(s, 4); /* 0 to 3 */
  case 1:
    return 1;
  case 2:
  case 3:
    return 1 + test_pick(s, 40);
  default:
    return 1 + test_pick(s, 300);
  }
}

/* A shape large enough that the planner splits it between a one-thread
 * cpu and a one-core OpenCL device (as test-coexec's 640 x 576 x 256):
 * smaller ones run on one device, which the scheduling policy does not
 * change. Drawn for one GEMM in two on that pair, one in three on the other set
 * of two devices. */
static void draw_big(uint64_t *s, int set, int64_t dims[3]) {
  dims[0] = dims[1] = dims[2] = -1;
  if (!strchr(sets[set], ',') || test_pick(s, strchr(sets[set], ':') ? 2 : 3))
    return;
  dims[0] = 512 + test_pick(s, 257), dims[1] = 448 + test_pick(s, 193), dims[2] = 128 + test_pick(s, 129);
  if (test_pick(s, 2)) {
    int64_t t = dims[0];
    dims[0] = dims[1], dims[1] = t;
  }
}

static double draw_scalar(uint64_t *s, int beta) {
  static const double a[] = {1.0, 0.0, -0.5, 2.0, 0.25};
  static const double b[] = {0.0, 1.0, 0.5, -1.0, 0.0};
  return beta ? b[test_pick(s, 5)] : a[test_pick(s, 5)];
}

/* Draws the free parameters of one GEMM and allocates it; dims < 0 are
 * drawn. */
static int draw_gemm(uint64_t *s, soak_gemm *x, poas_dtype dt, poas_layout lay, int64_t m,
                     int64_t n, int64_t k, int64_t pad, poas_op ta, double beta) {
  memset(x, 0, sizeof *x);
  x->owns_a = x->owns_c = 1, x->source = -1, x->known = 1;
  poas_op tb = test_pick(s, 2) ? POAS_TRANS : POAS_NO_TRANS;
  double alpha = draw_scalar(s, 0);
  if (m < 0)
    m = draw_dim(s);
  if (n < 0)
    n = draw_dim(s);
  if (k < 0)
    k = test_pick(s, 10) == 0 ? 1 : draw_dim(s);
  if (test_gemm_alloc(&x->g, dt, lay, ta, tb, m, n, k, pad, alpha, beta, test_rand(s)) != 0)
    return -1;
  poison_c(&x->g);
  return 0;
}

static void describe(const test_gemm *g, char *buf, size_t cap) {
  snprintf(buf, cap, "%sgemm %s %c%c m=%lld n=%lld k=%lld ld=%lld,%lld,%lld alpha=%g beta=%g",
           g->dtype == POAS_FLOAT32 ? "s" : "d", g->layout == POAS_COL_MAJOR ? "col" : "row",
           g->ta == POAS_TRANS ? 'T' : 'N', g->tb == POAS_TRANS ? 'T' : 'N', (long long)g->m,
           (long long)g->n, (long long)g->k, (long long)g->lda, (long long)g->ldb,
           (long long)g->ldc, g->alpha, g->beta);
}

/* The fault spec drawn for a case ("" for none) and which of the set's
 * devices it fails, in the context's order. */
typedef struct fault {
  char spec[96];
  int fails[2]; /* 1: that device is made to fail */
} fault;

/* Appends "ID:after=N" to f's spec, N drawn early for a cpu (whose
 * operations are few and long) and anywhere in the first 60 otherwise. */
static void add_fault(uint64_t *s, fault *f, const char *id, int cpu) {
  size_t at = strlen(f->spec);
  int after = cpu ? (int)test_pick(s, test_pick(s, 4) ? 2 : 8)
                  : (int)test_pick(s, test_pick(s, 4) ? 12 : 60);
  snprintf(f->spec + at, sizeof f->spec - at, "%s%s:after=%d", at ? "," : "", id, after);
}

static void draw_fault(uint64_t *s, int set, fault *f) {
  memset(f, 0, sizeof *f);
  if (test_pick(s, 2))
    return;
  /* On a set of one device, now and then a device not in use too (cpu0,
   * or opencl0 beside a cpu): a fault naming it is ignored. */
  int n = set_ndev[set], which = n == 2 ? (int)test_pick(s, 5) : test_pick(s, 4) == 0 ? 2 : 0;
  /* 0, 3: the first device; 1, 4: the second; 2: both. */
  f->fails[0] = which != 1 && which != 4;
  f->fails[1] = n == 2 && which != 0 && which != 3;
  int first_cpu = set_kind[set][0] == POAS_DEVICE_CPU;
  const char *ids[2] = {set_ids[set][0], n == 2 ? set_ids[set][1] : first_cpu ? "opencl0" : "cpu0"};
  int cpu[2] = {first_cpu, n == 2 ? set_kind[set][1] == POAS_DEVICE_CPU : !first_cpu};
  int named[2] = {f->fails[0], which == 2};
  /* A cpu's entry first, as the sets' devices are listed. */
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < 2; i++)
      if (named[i] && cpu[i] == !pass)
        add_fault(s, f, ids[i], cpu[i]);
}

/* Whether device i of the set may fail in this case: POAS_FAULT names it,
 * or it is a CUDA device and the fake fails CUDA calls. */
static int may_fail(int set, const fault *f, int i) {
  return f->fails[i] || (cuda_may_fail && set_kind[set][i] == POAS_DEVICE_CUDA);
}

/* Whether an error `rc` is one the documentation allows for this GEMM:
 * POAS_EDEVICE when every device of the set may fail, or when one failed
 * in the middle of a copy back with beta != 0; POAS_ENODEV when every
 * device may fail and the fake fails CUDA calls (a lost device takes part
 * in no later plan); always with a detail. */
static int error_allowed(int rc, const char *detail, int set, const fault *f, double beta) {
  int any = 0, all = 1;
  for (int i = 0; i < set_ndev[set]; i++)
    any |= may_fail(set, f, i), all &= may_fail(set, f, i);
  if (rc == POAS_ENODEV && all && cuda_may_fail && detail && *detail) {
    seen.allowed++;
    return 1;
  }
  if (rc != POAS_EDEVICE || !detail || !*detail || !any)
    return 0;
  if (all) {
    seen.allowed++;
    return 1;
  }
  int ok = beta != 0 && strstr(detail, "cannot be recovered") != NULL;
  seen.allowed += ok, seen.unrecoverable += ok;
  return ok;
}

static int finite_nonneg(double x) { return isfinite(x) && x >= 0; }

/* The report of a GEMM that returned 0 (or, for `exact` 0, of whichever
 * GEMM of a batch ran last) holds together. */
static int check_report(poas_context *ctx, int set, const test_gemm *g, const fault *f, int exact,
                        const char *what) {
  poas_report r;
  CHECK_MSG(poas_last_report(ctx, &r) == 0, "%s: no report: %s", what, poas_error_detail());
  if (exact)
    CHECK_MSG(r.m == g->m && r.n == g->n && r.k == g->k && r.dtype == g->dtype,
              "%s: the report is of a %lldx%lldx%lld GEMM", what, (long long)r.m, (long long)r.n,
              (long long)r.k);
  CHECK_MSG(r.ndevices >= 0 && r.ndevices <= POAS_MAX_DEVICES, "%s: %d devices", what, r.ndevices);
  CHECK_MSG(finite_nonneg(r.measured_s) && finite_nonneg(r.predicted_s), "%s: makespan %g, %g",
            what, r.measured_s, r.predicted_s);
  CHECK_MSG(!r.virtual_time, "%s: virtual time on real devices", what);
  if (r.m == 0 || r.n == 0) {
    CHECK_MSG(r.ndevices == 0 && r.faults == 0, "%s: empty C, %d devices, %d faults", what,
              r.ndevices, r.faults);
    return 0;
  }
  CHECK_MSG(r.ndevices >= 1, "%s: no device in the report", what);
  double shares = 0;
  int failed = 0;
  for (int d = 0; d < r.ndevices; d++) {
    const poas_device_report *v = &r.dev[d];
    int at = 0;
    while (at < set_ndev[set] && strcmp(v->id, set_ids[set][at]) != 0)
      at++;
    CHECK_MSG(at < set_ndev[set], "%s: device '%s' in the report", what, v->id);
    CHECK_MSG(v->share >= 0 && v->share <= 1.000001, "%s: %s's share %g", what, v->id, v->share);
    CHECK_MSG(finite_nonneg(v->measured_s) && finite_nonneg(v->busy_s) &&
                  finite_nonneg(v->idle_s) && finite_nonneg(v->predicted_s),
              "%s: %s's times: measured %g, busy %g, idle %g, predicted %g", what, v->id,
              v->measured_s, v->busy_s, v->idle_s, v->predicted_s);
    /* A device that failed in its only chunk keeps the share of that
     * chunk's tiles that reached C, with no chunk (poas.h). */
    CHECK_MSG(v->chunks >= 0 && (v->share == 0 || v->chunks > 0 || v->failed),
              "%s: %s: %d chunks, share %g", what, v->id, v->chunks, v->share);
    CHECK_MSG(v->failed == 0 || v->failed == 1, "%s: %s failed = %d", what, v->id, v->failed);
    CHECK_MSG(isfinite(v->learned) && v->learned > 0, "%s: %s learned %g", what, v->id, v->learned);
    if (v->failed)
      CHECK_MSG(may_fail(set, f, at), "%s: %s failed, not made to", what, v->id);
    failed += v->failed;
    shares += v->share;
  }
  int working = 0;
  for (int d = 0; d < r.ndevices; d++)
    working += r.dev[d].share > 0;
  seen.split += working > 1;
  seen.recovered += r.faults > 0;
  if (verbose > 1)
    fprintf(stderr, "    %d devices, %d working, %d faults\n", r.ndevices, working, r.faults);
  CHECK_MSG(fabs(shares - 1) < 1e-6, "%s: shares sum to %.9g", what, shares);
  CHECK_MSG(r.faults == failed, "%s: %d faults, %d devices marked failed", what, r.faults, failed);
  return 0;
}

static int run_sync(poas_context *ctx, int set, uint64_t *s, const fault *f, int64_t pad,
                    const char *head) {
  poas_dtype dt = test_pick(s, 2) ? POAS_FLOAT64 : POAS_FLOAT32;
  poas_layout lay = test_pick(s, 2) ? POAS_COL_MAJOR : POAS_ROW_MAJOR;
  poas_op ta = test_pick(s, 2) ? POAS_TRANS : POAS_NO_TRANS;
  soak_gemm x;
  int64_t d[3];
  draw_big(s, set, d);
  CHECK(draw_gemm(s, &x, dt, lay, d[0], d[1], d[2], pad, ta, draw_scalar(s, 1)) == 0);
  char what[400];
  describe(&x.g, what, sizeof what);
  snprintf(current, sizeof current, "%s, %s", head, what);
  if (verbose)
    fprintf(stderr, "  %s\n", current);
  if (f->spec[0])
    setenv("POAS_FAULT", f->spec, 1);
  int rc = test_gemm_run(ctx, &x.g);
  seen.gemms++;
  unsetenv("POAS_FAULT");
  int bad = 0;
  if (rc == 0)
    bad = test_gemm_verify(&x.g, current) || check_report(ctx, set, &x.g, f, 1, current);
  else if (!error_allowed(rc, poas_error_detail(), set, f, x.g.beta)) {
    fprintf(stderr, "  %s: %s: '%s'\n", current, poas_err_name(rc), poas_error_detail());
    bad = 1;
  }
  soak_free(&x);
  return bad;
}

/* The next GEMM of a batch, drawn to depend on an earlier one (not yet
 * depended on) where the draw says so: reading its C as A (read after
 * write), writing its C with beta = 0 (write after write), or writing its
 * B as C (write after read). */
static int draw_dependent(uint64_t *s, int set, soak_gemm *b, int i) {
  soak_gemm *x = &b[i];
  int prev = i > 0 && test_pick(s, 3) ? (int)test_pick(s, i) : -1;
  if (prev >= 0 && b[prev].sealed)
    prev = -1;
  const test_gemm *p = prev >= 0 ? &b[prev].g : NULL;
  if (!p) {
    poas_dtype dt = test_pick(s, 2) ? POAS_FLOAT64 : POAS_FLOAT32;
    poas_layout lay = test_pick(s, 2) ? POAS_COL_MAJOR : POAS_ROW_MAJOR;
    poas_op ta = test_pick(s, 2) ? POAS_TRANS : POAS_NO_TRANS;
    int64_t d[3];
    draw_big(s, set, d);
    return draw_gemm(s, x, dt, lay, d[0], d[1], d[2], test_pick(s, 3), ta, draw_scalar(s, 1));
  }
  /* Same dtype, layout and padding: the shared matrix's leading dimension
   * is then the one test_gemm_alloc gives the new GEMM's. */
  int64_t pad = p->ldc - (p->layout == POAS_COL_MAJOR ? p->m : p->n);
  if ((p->layout == POAS_COL_MAJOR ? p->m : p->n) < 1)
    pad = p->ldc - 1;
  b[prev].sealed = 1;
  switch (test_pick(s, 3)) {
  case 0: { /* read after write: A = prev's C */
    poas_op ta = test_pick(s, 2) ? POAS_TRANS : POAS_NO_TRANS;
    int64_t m = ta == POAS_NO_TRANS ? p->m : p->n, k = ta == POAS_NO_TRANS ? p->n : p->m;
    if (draw_gemm(s, x, p->dtype, p->layout, m, -1, k, pad, ta, draw_scalar(s, 1)) != 0)
      return -1;
    if (x->g.lda != p->ldc)
      return -1;
    free(x->g.A);
    x->g.A = p->C, x->owns_a = 0, x->source = prev;
    return 0;
  }
  case 1: /* write after write, C not read */
    if (draw_gemm(s, x, p->dtype, p->layout, p->m, p->n, -1, pad,
                  test_pick(s, 2) ? POAS_TRANS : POAS_NO_TRANS, 0) != 0)
      return -1;
    if (x->g.ldc != p->ldc)
      return -1;
    free(x->g.C);
    x->g.C = p->C, x->owns_c = 0;
    memcpy(x->g.C0, p->C0, stored_bytes(p, p->m, p->n, p->ldc));
    b[prev].overwritten = 1;
    return 0;
  default: { /* write after read: C = prev's B, as stored */
    int64_t br = p->tb == POAS_NO_TRANS ? p->k : p->n, bc = p->tb == POAS_NO_TRANS ? p->n : p->k;
    int64_t bpad = p->ldb - (p->layout == POAS_COL_MAJOR ? br : bc);
    if ((p->layout == POAS_COL_MAJOR ? br : bc) < 1)
      bpad = p->ldb - 1;
    if (draw_gemm(s, x, p->dtype, p->layout, br, bc, -1, bpad,
                  test_pick(s, 2) ? POAS_TRANS : POAS_NO_TRANS, draw_scalar(s, 1)) != 0)
      return -1;
    if (x->g.ldc != p->ldb)
      return -1;
    size_t bytes = stored_bytes(p, br, bc, p->ldb);
    free(x->g.C);
    x->g.C = p->B, x->owns_c = 0;
    memcpy(x->g.C0, p->B, bytes);
    b[prev].b_saved = x->g.C0; /* the new GEMM's C0 is prev's B as read */
    return 0;
  }
  }
}

static int submit(poas_context *ctx, soak_gemm *x, int handle) {
  const test_gemm *g = &x->g;
  poas_task **out = handle ? &x->task : NULL;
  if (g->dtype == POAS_FLOAT32)
    return poas_sgemm_async(ctx, g->layout, g->ta, g->tb, g->m, g->n, g->k, (float)g->alpha, g->A,
                            g->lda, g->B, g->ldb, (float)g->beta, g->C, g->ldc, out);
  return poas_dgemm_async(ctx, g->layout, g->ta, g->tb, g->m, g->n, g->k, g->alpha, g->A, g->lda,
                          g->B, g->ldb, g->beta, g->C, g->ldc, out);
}

enum { MAX_BATCH = 5 };

/* A host task's copy of a GEMM's C: ordered after the GEMM (it reads C)
 * and before later GEMMs that write C. */
static void copy_task(void **buffers, void *arg) {
  memcpy(buffers[1], buffers[0], *(const size_t *)arg);
}

/* Submits copy_task from x's C into x->snap, without a handle. */
static int submit_copy(poas_context *ctx, soak_gemm *x) {
  x->cbytes = stored_bytes(&x->g, x->g.m, x->g.n, x->g.ldc);
  x->snap = malloc(x->cbytes);
  int rc = x->snap ? 0 : POAS_ENOMEM;
  if (!rc)
    rc = poas_buffer_register(ctx, x->g.C, x->cbytes, &x->reg[0]);
  if (!rc)
    rc = poas_buffer_register(ctx, x->snap, x->cbytes, &x->reg[1]);
  if (rc)
    return rc;
  poas_task_desc d = {.cpu = copy_task, .arg = &x->cbytes, .naccess = 2};
  d.access[0] = (poas_task_access){x->reg[0], POAS_R, 0, 0};
  d.access[1] = (poas_task_access){x->reg[1], POAS_W, 0, 0};
  return poas_task_submit(ctx, &d, NULL);
}

/* A batch of 2 to 5 asynchronous GEMMs on one context, some depending on
 * others, waited for by handle or by poas_wait_all; one synchronous GEMM
 * may run in the middle. */
static int run_async(poas_context *ctx, int set, uint64_t *s, const fault *f, const char *head) {
  soak_gemm b[MAX_BATCH];
  int n = 2 + (int)test_pick(s, MAX_BATCH - 1), bad = 0, drawn = 0;
  for (; drawn < n; drawn++)
    if (draw_dependent(s, set, b, drawn) != 0) {
      fprintf(stderr, "  %s: could not draw GEMM %d of the batch\n", head, drawn);
      soak_free(&b[drawn]);
      bad = 1;
      break;
    }
  size_t at = (size_t)snprintf(current, sizeof current, "%s, async batch:", head);
  for (int i = 0; i < drawn && at < sizeof current; i++) {
    char what[200];
    describe(&b[i].g, what, sizeof what);
    at += (size_t)snprintf(current + at, sizeof current - at, " [%d%s%s] %s;", i,
                           b[i].source >= 0 ? " A=C of earlier" : "",
                           b[i].owns_c ? "" : " C=earlier's", what);
  }
  if (verbose)
    fprintf(stderr, "  %s\n", current);
  if (f->spec[0])
    setenv("POAS_FAULT", f->spec, 1);
  int sync_at = test_pick(s, 3) == 0 ? (int)test_pick(s, drawn + 1) : -1, any_failed = 0;
  for (int i = 0; i < drawn && !bad; i++) {
    if (i == sync_at)
      bad |= run_sync(ctx, set, s, f, test_pick(s, 3), head);
    int handle = test_pick(s, 4) != 0;
    int rc = submit(ctx, &b[i], handle);
    seen.gemms++;
    if (rc != 0) {
      fprintf(stderr, "  %s: GEMM %d refused: %s: %s\n", current, i, poas_err_name(rc),
              poas_error_detail());
      bad = 1;
      for (int j = i; j < drawn; j++)
        b[j].known = 0, b[j].task = NULL;
      break;
    }
    b[i].known = handle;
    if (test_pick(s, 4) == 0 && (rc = submit_copy(ctx, &b[i])) != 0) {
      fprintf(stderr, "  %s: copy task after GEMM %d: %s: %s\n", current, i, poas_err_name(rc),
              poas_error_detail());
      bad = 1;
    }
  }
  /* Handles are waited for in a drawn order, not only submission's. */
  int first = (int)test_pick(s, drawn);
  for (int j = 0; j < drawn; j++) {
    soak_gemm *x = &b[(first + j) % drawn];
    if (!x->task)
      continue;
    x->rc = poas_task_wait(x->task);
    if (x->rc && !error_allowed(x->rc, poas_error_detail(), set, f, x->g.beta)) {
      fprintf(stderr, "  %s: GEMM %d: %s: '%s'\n", current, (int)(x - b), poas_err_name(x->rc),
              poas_error_detail());
      bad = 1;
    }
    any_failed |= x->rc != 0;
  }
  int all = poas_wait_all(ctx);
  char all_detail[256];
  snprintf(all_detail, sizeof all_detail, "%s", poas_error_detail());
  unsetenv("POAS_FAULT");
  for (int i = 0; i < drawn; i++)
    for (int j = 0; j < 2; j++)
      if (b[i].reg[j] && poas_buffer_unregister(b[i].reg[j]) != 0) {
        fprintf(stderr, "  %s: unregister: %s\n", current, poas_error_detail());
        bad = 1;
      }
  if (all != 0) {
    if (!error_allowed(all, all_detail, set, f, 1.0)) {
      fprintf(stderr, "  %s: wait_all: %s: '%s'\n", current, poas_err_name(all), all_detail);
      bad = 1;
    }
    any_failed = 1;
  }
  for (int i = 0; i < drawn; i++)
    if (!b[i].known && all != 0)
      b[i].rc = all; /* one of those without a handle failed, which is not known */
  for (int i = 0; i < drawn && !bad; i++) {
    soak_gemm *x = &b[i];
    int src = x->source;
    if (x->rc || (src >= 0 && b[src].rc))
      continue;
    char what[240];
    snprintf(what, sizeof what, "%s: GEMM %d", head, i);
    test_gemm v = x->g;
    if (x->b_saved)
      v.B = x->b_saved;
    if (!x->overwritten)
      bad |= test_gemm_verify(&v, what);
    if (x->snap) {
      v.C = x->snap;
      snprintf(what, sizeof what, "%s: GEMM %d's C as a task copied it", head, i);
      bad |= test_gemm_verify(&v, what);
    }
  }
  if (!bad && !any_failed)
    bad |= check_report(ctx, set, &b[0].g, f, 0, current);
  for (int i = 0; i < drawn; i++)
    soak_free(&b[i]);
  return bad;
}

TEST(soak_random_gemms_with_faults) {
  uint64_t seed = env_u64("POAS_SOAK_SEED", 7), cases = env_u64("POAS_SOAK_CASES", 40);
  verbose = (int)env_u64("POAS_SOAK_VERBOSE", 0);
  const char *fake_fail = getenv("FAKECUDA_FAIL");
  cuda_may_fail = fake_fail && *fake_fail;
  if (choose_sets() != 0)
    return 1;
  signal(SIGALRM, on_alarm);
  int usable = 0;
  for (int set = 0; set < nsets; set++)
    usable += set_usable(set);
  if (!usable)
    SKIP("no device set opens: %s", poas_error_detail());
  int bad = 0;
  uint64_t ran = 0;
  for (uint64_t c = 0; c < cases && !bad; c++) {
    uint64_t st = seed * 0x100000001b3ull + c, *s = &st;
    int set = (int)test_pick(s, nsets), policy = (int)test_pick(s, NPOLICIES);
    if (!set_usable(set))
      continue;
    poas_context *ctx = context_for(set, policy);
    CHECK_MSG(ctx, "%s: %s", sets[set], poas_error_detail());
    fault f;
    draw_fault(s, set, &f);
    char head[200];
    snprintf(head, sizeof head, "seed %llu case %llu: '%s' %s%s%s", (unsigned long long)seed,
             (unsigned long long)c, sets[set], policies[policy] ? policies[policy] : "default",
             f.spec[0] ? " POAS_FAULT=" : "", f.spec);
    alarm(CASE_SECONDS);
    bad =
        test_pick(s, 3) ? run_sync(ctx, set, s, &f, test_pick(s, 3), head) : run_async(ctx, set, s, &f, head);
    alarm(0);
    ran++;
  }
  for (int set = 0; set < nsets; set++)
    for (int p = 0; p < NPOLICIES; p++)
      poas_finalize(ctxs[set][p]);
  fprintf(stderr,
          "  seed %llu: %llu cases, %llu GEMMs; %llu split, %llu recovered from a fault, %llu "
          "allowed errors (%llu a copy back cut short)\n",
          (unsigned long long)seed, (unsigned long long)ran, (unsigned long long)seen.gemms,
          (unsigned long long)seen.split, (unsigned long long)seen.recovered,
          (unsigned long long)seen.allowed, (unsigned long long)seen.unrecoverable);
  return bad;
}

TEST_MAIN(TEST_ENTRY(soak_random_gemms_with_faults))
