/* harness.h: the test runner shared by every test program. Each program
 * defines its tests with TEST(name) and lists them in a TEST_LIST; the
 * runner runs them in order (or the one named on the command line), prints
 * one line per test and exits 0, 1, or 77 (automake's skip) when every test
 * skipped. */
#ifndef POAS_TEST_HARNESS_H
#define POAS_TEST_HARNESS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define TEST_SKIP 77

typedef int (*test_fn)(void);
typedef struct test_entry {
  const char *name;
  test_fn fn;
} test_entry;

#define TEST(name) static int test_##name(void)
#define TEST_ENTRY(name) {#name, test_##name}
#define TEST_MAIN(...)                                                  \
  int main(int argc, char **argv) {                                    \
    static const test_entry tests[] = {__VA_ARGS__};                    \
    return test_run_all(tests, sizeof tests / sizeof tests[0], argc, argv); \
  }

int test_run_all(const test_entry *tests, size_t n, int argc, char **argv);

/* Fails the current test with a message naming the file and line. */
#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "  %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      return 1;                                                                  \
    }                                                                            \
  } while (0)
#define CHECK_MSG(cond, ...)                                             \
  do {                                                                   \
    if (!(cond)) {                                                       \
      fprintf(stderr, "  %s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                      \
      fputc('\n', stderr);                                               \
      return 1;                                                          \
    }                                                                    \
  } while (0)
#define CHECK_RC(expr, want)                                                          \
  do {                                                                                \
    int rc_ = (expr);                                                                 \
    if (rc_ != (want)) {                                                              \
      fprintf(stderr, "  %s:%d: %s returned %d (%s), expected %d\n", __FILE__, __LINE__, \
              #expr, rc_, poas_err_name(rc_), (int)(want));                           \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)
#define CHECK_OK(expr) CHECK_RC(expr, 0)
#define SKIP(...)                          \
  do {                                     \
    fprintf(stderr, "  skip: " __VA_ARGS__); \
    fputc('\n', stderr);                   \
    return TEST_SKIP;                      \
  } while (0)

/* ------------------------------------------------ GEMM checking helpers */

#include "poas.h"

/* splitmix64, for randomized tests: each case draws from its own stream
 * (seeded by the run's seed and the case's number), so that one case's
 * draws do not move another's and a case replays alone. */
static inline uint64_t test_rand(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
/* A number from 0 to n - 1. */
static inline int64_t test_pick(uint64_t *s, int64_t n) {
  return (int64_t)(test_rand(s) % (uint64_t)n);
}

/* stderr into a temporary file while a test's messages are made, then
 * back (test_stderr_end), with what was written in text[cap]. log is NULL
 * or saved -1 where the file could not be made or stderr not kept: the
 * text is then empty. */
typedef struct test_stderr_capture {
  FILE *log;
  int saved; /* the real stderr */
} test_stderr_capture;
test_stderr_capture test_stderr_begin(void);
void test_stderr_end(test_stderr_capture c, char *text, size_t cap);

/* A context on `devices` (NULL: every device) with built-in models and no
 * profile; NULL when poas_init fails (poas_error_detail() says why). */
poas_context *test_open(const char *devices);
/* As test_open, with learning from runs off (POAS_ADAPT=0): every plan as
 * the models say. */
poas_context *test_open_unlearning(const char *devices);
/* Binds the calling thread to the last online CPU alone, as mpirun or
 * taskset binds a process to part of the machine, and returns its binding
 * before (to hand to test_restore_cpus); NULL, with nothing changed, when
 * there is one CPU or the last is not the thread's to bind to. */
void *test_bind_last_cpu(void);
/* Puts back the binding test_bind_last_cpu saved, and frees it; 0 or -1. */
int test_restore_cpus(void *saved);
/* `name` in a temporary folder made once per test program; NULL when it
 * cannot be made. The string is overwritten by the next call. The folder
 * goes when test_run_all ends without a failure (POAS_TEST_KEEP=1 keeps
 * it) and stays, named on stderr, when a test failed. */
const char *test_tmp_path(const char *name);
/* `rel` under the source tree ($top_srcdir, else "."); overwritten by the
 * next call. */
const char *test_src_path(const char *rel);

/* Deterministic pseudo-random numbers in [-1, 1). */
void test_fill(void *p, poas_dtype dtype, size_t count, uint64_t seed);
/* Fills with NaN so that anything left unwritten shows. */
void test_poison(void *p, poas_dtype dtype, size_t count);

/* A GEMM problem stored in the caller's layout, for tests. */
typedef struct test_gemm {
  poas_dtype dtype;
  poas_layout layout;
  poas_op ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  double alpha, beta;
  void *A, *B, *C, *C0; /* C0: C's initial contents, kept for the reference */
} test_gemm;

/* Allocates and fills A, B, C (C0 = C); lda etc. = minimal + pad. */
int test_gemm_alloc(test_gemm *g, poas_dtype dtype, poas_layout layout, poas_op ta, poas_op tb,
                    int64_t m, int64_t n, int64_t k, int64_t pad, double alpha, double beta,
                    uint64_t seed);
void test_gemm_free(test_gemm *g);
/* Runs the problem through poas_sgemm / poas_dgemm. */
int test_gemm_run(poas_context *ctx, const test_gemm *g);
/* Compares C with a double-precision reference computed from A, B and C0;
 * the bound is k * eps(dtype) * 4 * (|alpha| + |beta|)-scaled. Elements of
 * the padding (rows beyond m or columns beyond n of C) must be unchanged.
 * Returns 0 when within bounds, else prints the worst element and
 * returns 1. */
int test_gemm_verify(const test_gemm *g, const char *what);

#endif
