/* util.c: clocks, the worker mark of threads, checked arithmetic and
 * number parsing shared by every folder. */
#include "core.h"
#include "number.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double poas__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The last stretch of a wait that is spun on the clock rather than slept:
 * nanosleep overshoots by its timer slack, 50 us by default on Linux, so
 * a simulated device in real time slept 50 us for every 1 us copy, and
 * its calibration once found no bandwidth at all (every copy the same
 * length) and a run through the engine no dearer than one without. */
#define SPIN_S 100e-6

void poas__sleep(double seconds) {
  if (!(seconds > 0))
    return;
  double end = poas__now() + seconds, nap = seconds - SPIN_S;
  if (nap > 0) {
    struct timespec ts = {(time_t)nap, (long)((nap - (double)(time_t)nap) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
      ;
  }
  while (poas__now() < end)
    ;
}

static _Thread_local int thread_is_worker;

void poas__thread_mark_worker(void) { thread_is_worker = 1; }

int poas__thread_is_worker(void) { return thread_is_worker; }

int poas__mul_overflow(int64_t a, int64_t b, int64_t *out) {
  if (a < 0 || b < 0)
    return 1;
  return __builtin_mul_overflow(a, b, out);
}

/* Bytes of a rows x cols matrix of `elem`-byte elements into *out, or
 * nonzero when they overflow int64 or size_t. */
static int matrix_bytes_overflow(int64_t rows, int64_t cols, size_t elem, int64_t *out) {
  int64_t count;
  if (poas__mul_overflow(rows, cols, &count) || poas__mul_overflow(count, (int64_t)elem, out))
    return 1;
#if SIZE_MAX < INT64_MAX
  if ((uint64_t)*out > SIZE_MAX)
    return 1;
#endif
  return 0;
}

/* Whether an m x n x k GEMM's matrices (op(A) m x k, op(B) k x n, C
 * m x n; sizes not negative) hold more bytes than int64 and size_t count;
 * when they do, fails with POAS_EINVAL, naming the sizes. */
static int gemm_sizes_overflow(const char *who, poas_dtype dtype, int64_t m, int64_t n,
                               int64_t k) {
  const struct {
    const char *name;
    int64_t rows, cols;
  } mat[3] = {{"A (m x k)", m, k}, {"B (k x n)", k, n}, {"C (m x n)", m, n}};
  size_t elem = poas__dtype_size(dtype);
  for (int i = 0; i < 3; i++) {
    int64_t bytes;
    if (matrix_bytes_overflow(mat[i].rows, mat[i].cols, elem, &bytes)) {
      poas__fail(POAS_EINVAL,
                 "%s: sizes too large (m=%lld n=%lld k=%lld): the bytes of %s, in %zu-byte "
                 "elements, overflow a 64-bit size",
                 who, (long long)m, (long long)n, (long long)k, mat[i].name, elem);
      return 1;
    }
  }
  return 0;
}

int poas__gemm_shape_check(const char *who, poas_dtype dtype, poas_op transa, poas_op transb,
                           int64_t m, int64_t n, int64_t k) {
  if (poas__dtype_size(dtype) == 0)
    return poas__fail(POAS_EDTYPE, "%s: unknown dtype %d", who, (int)dtype);
  if (transa != POAS_NO_TRANS && transa != POAS_TRANS)
    return poas__fail(POAS_EOP, "%s: unknown transa value %d", who, (int)transa);
  if (transb != POAS_NO_TRANS && transb != POAS_TRANS)
    return poas__fail(POAS_EOP, "%s: unknown transb value %d", who, (int)transb);
  if (m < 0 || n < 0 || k < 0)
    return poas__fail(POAS_ESIZE, "%s: negative size (m=%lld n=%lld k=%lld)", who, (long long)m,
                      (long long)n, (long long)k);
  return gemm_sizes_overflow(who, dtype, m, n, k) ? POAS_EINVAL : 0;
}

size_t poas__dtype_size(poas_dtype dtype) {
  switch (dtype) {
  case POAS_FLOAT32:
    return 4;
  case POAS_FLOAT64:
    return 8;
  }
  return 0;
}

const char *poas__dtype_letter(poas_dtype dtype) { return dtype == POAS_FLOAT64 ? "d" : "s"; }

const char *poas__dtype_name(poas_dtype dtype) {
  return dtype == POAS_FLOAT64 ? "float64" : "float32";
}

void poas__strlcpy(char *dst, const char *src, size_t cap) {
  if (cap == 0)
    return;
  size_t n = src ? strlen(src) : 0;
  if (n >= cap)
    n = cap - 1;
  if (n)
    memcpy(dst, src, n);
  dst[n] = '\0';
}

void poas__strlcpy_marked(char *dst, const char *src, size_t cap) {
  poas__strlcpy(dst, src, cap);
  if (src && cap >= 4 && strlen(src) >= cap)
    memcpy(dst + cap - 4, "...", 4);
}

char *poas__trim(char *s) {
  while (isspace((unsigned char)*s))
    s++;
  for (char *end = s + strlen(s); end > s && isspace((unsigned char)end[-1]);)
    *--end = '\0';
  return s;
}

/* Multiplier for a size suffix, or 0 when the suffix is not one. */
static double suffix_scale(const char *s) {
  static const struct {
    const char *text;
    double scale;
  } table[] = {{"", 1},          {"k", 1e3},          {"K", 1e3},
               {"M", 1e6},       {"G", 1e9},          {"T", 1e12},
               {"Ki", 1024.0},   {"Mi", 1048576.0},   {"Gi", 1073741824.0},
               {"Ti", 1099511627776.0}};
  for (size_t i = 0; i < POAS__ARRAY_LEN(table); i++)
    if (strcmp(s, table[i].text) == 0)
      return table[i].scale;
  return 0;
}

int poas__parse_double(const char *s, int suffixes, double *out) {
  if (!s || !poas__decimal_start(s))
    return POAS_EINVAL;
  char *end = NULL;
  double v = strtod(s, &end); /* past DBL_MAX: HUGE_VAL, refused below */
  if (end == s)
    return POAS_EINVAL;
  double scale = suffixes ? suffix_scale(end) : (*end ? 0 : 1);
  if (scale == 0 || !isfinite(v * scale))
    return POAS_EINVAL;
  *out = v * scale;
  return 0;
}

int poas__parse_int64(const char *s, int suffixes, int64_t *out) {
  double v;
  if (poas__parse_double(s, suffixes, &v) != 0 || v < 0 || v > 9.2e18 || v != floor(v))
    return POAS_EINVAL;
  *out = (int64_t)v;
  return 0;
}
