/* harness.c: the test runner and the GEMM reference used by every test. */
#define _GNU_SOURCE /* pthread_setaffinity_np, CPU_SET */
#include "harness.h"

#include <cblas.h>
#include <errno.h>
#include <execinfo.h>
#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A test that crashes leaves its stack in the log (test-gemm-opencl's rare
 * SIGSEGV had left only exit 139; its stack found PoCL's worker releasing
 * an event after we had released the context, see opencl.c). Only where
 * nothing else handles the signal already, so a sanitizer's report
 * stays. */
static void on_crash(int sig) {
  static const char msg[] = "  crashed; the stack:\n";
  ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)w;
  void *frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
  signal(sig, SIG_DFL);
  raise(sig);
}

static void report_crashes(void) {
  static const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE};
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
    struct sigaction old;
    if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_DFL &&
        !(old.sa_flags & SA_SIGINFO))
      signal(sigs[i], on_crash);
  }
}

/* The folder test_tmp_path made, once it has been asked for. */
static char tmp_dir[64];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  if (remove(path) != 0)
    fprintf(stderr, "  could not remove %s: %s\n", path, strerror(errno));
  return 0;
}

/* A run that passed takes its files with it; one that failed leaves them
 * for whoever looks into it, and says where (POAS_TEST_KEEP=1 keeps them
 * always). */
static void tmp_dir_done(int failed) {
  if (!tmp_dir[0])
    return;
  const char *keep = getenv("POAS_TEST_KEEP");
  if (failed || (keep && *keep && strcmp(keep, "0") != 0))
    fprintf(stderr, "  the test's files are kept in %s\n", tmp_dir);
  else
    nftw(tmp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int test_run_all(const test_entry *tests, size_t n, int argc, char **argv) {
  int failed = 0, passed = 0, skipped = 0;
  report_crashes();
  for (size_t i = 0; i < n; i++) {
    if (argc > 1 && strcmp(argv[1], tests[i].name) != 0)
      continue;
    fprintf(stderr, "--- %s\n", tests[i].name);
    int rc = tests[i].fn();
    const char *verdict = rc == 0 ? "ok" : rc == TEST_SKIP ? "skip" : "FAIL";
    printf("%s %s\n", verdict, tests[i].name);
    fflush(stdout);
    if (rc == 0)
      passed++;
    else if (rc == TEST_SKIP)
      skipped++;
    else
      failed++;
  }
  printf("# %d passed, %d failed, %d skipped\n", passed, failed, skipped);
  tmp_dir_done(failed);
  if (failed)
    return 1;
  return passed == 0 && skipped > 0 ? TEST_SKIP : 0;
}

static poas_context *open_with(const char *devices, int no_adapt) {
  poas_options o;
  poas_options_init(&o);
  o.devices = devices;
  o.no_profile = 1;
  o.no_adapt = no_adapt;
  poas_context *ctx = NULL;
  return poas_init(&ctx, &o) == 0 ? ctx : NULL;
}

poas_context *test_open(const char *devices) { return open_with(devices, 0); }

poas_context *test_open_unlearning(const char *devices) { return open_with(devices, 1); }

const char *test_tmp_path(const char *name) {
  static char path[256];
  if (!tmp_dir[0]) {
    strcpy(tmp_dir, "/tmp/poas-test-XXXXXX");
    if (!mkdtemp(tmp_dir)) {
      tmp_dir[0] = '\0';
      return NULL;
    }
  }
  snprintf(path, sizeof path, "%s/%s", tmp_dir, name);
  return path;
}

const char *test_src_path(const char *rel) {
  static char path[1024];
  const char *top = getenv("top_srcdir");
  snprintf(path, sizeof path, "%s/%s", top ? top : ".", rel);
  return path;
}

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void test_fill(void *p, poas_dtype dtype, size_t count, uint64_t seed) {
  for (size_t i = 0; i < count; i++) {
    double v = (double)(splitmix(&seed) >> 11) / 9007199254740992.0 * 2.0 - 1.0;
    if (dtype == POAS_FLOAT32)
      ((float *)p)[i] = (float)v;
    else
      ((double *)p)[i] = v;
  }
}

void test_poison(void *p, poas_dtype dtype, size_t count) {
  for (size_t i = 0; i < count; i++) {
    if (dtype == POAS_FLOAT32)
      ((float *)p)[i] = NAN;
    else
      ((double *)p)[i] = NAN;
  }
}

static double get(const void *p, poas_dtype dtype, size_t i) {
  return dtype == POAS_FLOAT32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

/* Element (r, c) of a matrix stored in `layout` with leading dim ld. */
static size_t at(poas_layout layout, int64_t r, int64_t c, int64_t ld) {
  return layout == POAS_COL_MAJOR ? (size_t)(c * ld + r) : (size_t)(r * ld + c);
}

/* Stored rows and columns in the caller's layout. */
static void stored(poas_layout layout, poas_op op, int64_t rows, int64_t cols, int64_t *sr,
                   int64_t *sc) {
  int64_t r = op == POAS_NO_TRANS ? rows : cols, c = op == POAS_NO_TRANS ? cols : rows;
  /* In row-major storage, "rows" of storage are the matrix rows. */
  *sr = r, *sc = c;
  (void)layout;
}

static int64_t ld_min(poas_layout layout, int64_t r, int64_t c) {
  int64_t v = layout == POAS_COL_MAJOR ? r : c;
  return v > 1 ? v : 1;
}

static size_t extent(poas_layout layout, int64_t r, int64_t c, int64_t ld) {
  int64_t outer = layout == POAS_COL_MAJOR ? c : r;
  return (size_t)((outer > 0 ? outer : 1) * ld);
}

int test_gemm_alloc(test_gemm *g, poas_dtype dtype, poas_layout layout, poas_op ta, poas_op tb,
                    int64_t m, int64_t n, int64_t k, int64_t pad, double alpha, double beta,
                    uint64_t seed) {
  memset(g, 0, sizeof *g);
  g->dtype = dtype, g->layout = layout, g->ta = ta, g->tb = tb;
  g->m = m, g->n = n, g->k = k, g->alpha = alpha, g->beta = beta;
  int64_t ar, ac, br, bc;
  stored(layout, ta, m, k, &ar, &ac);
  stored(layout, tb, k, n, &br, &bc);
  g->lda = ld_min(layout, ar, ac) + pad;
  g->ldb = ld_min(layout, br, bc) + pad;
  g->ldc = ld_min(layout, m, n) + pad;
  size_t es = dtype == POAS_FLOAT32 ? 4 : 8;
  size_t na = extent(layout, ar, ac, g->lda), nb = extent(layout, br, bc, g->ldb),
         nc = extent(layout, m, n, g->ldc);
  g->A = malloc(na * es), g->B = malloc(nb * es), g->C = malloc(nc * es), g->C0 = malloc(nc * es);
  if (!g->A || !g->B || !g->C || !g->C0)
    return -1;
  test_fill(g->A, dtype, na, seed);
  test_fill(g->B, dtype, nb, seed + 1);
  test_fill(g->C, dtype, nc, seed + 2);
  memcpy(g->C0, g->C, nc * es);
  return 0;
}

void test_gemm_free(test_gemm *g) {
  free(g->A), free(g->B), free(g->C), free(g->C0);
  memset(g, 0, sizeof *g);
}

int test_gemm_run(poas_context *ctx, const test_gemm *g) {
  if (g->dtype == POAS_FLOAT32)
    return poas_sgemm(ctx, g->layout, g->ta, g->tb, g->m, g->n, g->k, (float)g->alpha, g->A,
                      g->lda, g->B, g->ldb, (float)g->beta, g->C, g->ldc);
  return poas_dgemm(ctx, g->layout, g->ta, g->tb, g->m, g->n, g->k, g->alpha, g->A, g->lda,
                    g->B, g->ldb, g->beta, g->C, g->ldc);
}

int test_gemm_verify(const test_gemm *g, const char *what) {
  double eps = g->dtype == POAS_FLOAT32 ? 5.96e-8 : 1.11e-16;
  double worst = 0;
  int64_t wr = -1, wc = -1;
  double wgot = 0, wwant = 0;
  int64_t outer = g->layout == POAS_COL_MAJOR ? g->n : g->m;
  int64_t inner_total = g->ldc;
  for (int64_t o = 0; o < (outer > 0 ? outer : 0); o++) {
    for (int64_t i = 0; i < inner_total; i++) {
      int64_t r = g->layout == POAS_COL_MAJOR ? i : o, c = g->layout == POAS_COL_MAJOR ? o : i;
      size_t idx = (size_t)(o * g->ldc + i);
      double got = get(g->C, g->dtype, idx), c0 = get(g->C0, g->dtype, idx);
      if (r >= g->m || c >= g->n) {
        /* Padding: must be untouched, bit for bit. */
        size_t es = g->dtype == POAS_FLOAT32 ? 4 : 8;
        if (memcmp((const char *)g->C + idx * es, (const char *)g->C0 + idx * es, es) != 0) {
          fprintf(stderr, "  %s: padding of C changed at (%lld,%lld)\n", what, (long long)r,
                  (long long)c);
          return 1;
        }
        continue;
      }
      double sum = 0, mag = 0;
      for (int64_t p = 0; p < g->k; p++) {
        int64_t ar = g->ta == POAS_NO_TRANS ? r : p, ac = g->ta == POAS_NO_TRANS ? p : r;
        int64_t br = g->tb == POAS_NO_TRANS ? p : c, bc = g->tb == POAS_NO_TRANS ? c : p;
        double a = get(g->A, g->dtype, at(g->layout, ar, ac, g->lda));
        double b = get(g->B, g->dtype, at(g->layout, br, bc, g->ldb));
        sum += a * b;
        mag += fabs(a * b);
      }
      double bc0 = g->beta != 0 ? g->beta * c0 : 0; /* C is not read when beta is 0 */
      double want = g->alpha * sum + bc0;
      double bound = 4.0 * eps * ((double)g->k + 2) * (fabs(g->alpha) * mag + fabs(bc0)) +
                     1e-300;
      double err = fabs(got - want);
      if (!(err <= bound)) {
        if (!(err / bound <= worst)) {
          worst = isnan(err) ? INFINITY : err / bound;
          wr = r, wc = c, wgot = got, wwant = want;
        }
      }
    }
  }
  if (wr >= 0) {
    fprintf(stderr, "  %s: C(%lld,%lld) = %.9g, reference %.9g (error %.3g x bound)\n", what,
            (long long)wr, (long long)wc, wgot, wwant, worst);
    return 1;
  }
  return 0;
}

void *test_bind_last_cpu(void) {
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t *saved = malloc(sizeof *saved), last;
  if (!saved || ncpu < 2 || ncpu > CPU_SETSIZE ||
      pthread_getaffinity_np(pthread_self(), sizeof *saved, saved) != 0 ||
      !CPU_ISSET((int)ncpu - 1, saved)) {
    free(saved);
    return NULL;
  }
  CPU_ZERO(&last);
  CPU_SET((int)ncpu - 1, &last);
  if (pthread_setaffinity_np(pthread_self(), sizeof last, &last) != 0) {
    free(saved);
    return NULL;
  }
  return saved;
}

int test_restore_cpus(void *saved) {
  int rc = pthread_setaffinity_np(pthread_self(), sizeof(cpu_set_t), saved) == 0 ? 0 : -1;
  free(saved);
  return rc;
}

test_stderr_capture test_stderr_begin(void) {
  test_stderr_capture c = {tmpfile(), -1};
  fflush(stderr);
  if (c.log && (c.saved = dup(STDERR_FILENO)) >= 0 && dup2(fileno(c.log), STDERR_FILENO) < 0) {
    close(c.saved);
    c.saved = -1;
  }
  return c;
}

void test_stderr_end(test_stderr_capture c, char *text, size_t cap) {
  text[0] = '\0';
  fflush(stderr);
  if (c.saved >= 0) {
    dup2(c.saved, STDERR_FILENO);
    close(c.saved);
  }
  if (!c.log)
    return;
  rewind(c.log);
  size_t got = c.saved >= 0 ? fread(text, 1, cap - 1, c.log) : 0;
  text[got] = '\0';
  fclose(c.log);
}
