/* verify.c: operands and the numerical check of poas-bench. A full
 * reference product would cost as much as the benchmark itself, so a result
 * is checked by projection, as BLIS's test suite does: C x is compared with
 * A (B x) for one random vector x, in double, and the difference of each
 * row is normalised by |A| (|B| |x|), the scale the classical error bound of
 * GEMM is stated in. This costs three passes over the matrices. */
#include "bench/bench.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

size_t bench_dtype_size(poas_dtype dtype) {
  return dtype == POAS_FLOAT64 ? sizeof(double) : sizeof(float);
}

/* splitmix64: a small generator whose stream depends only on the seed, so
 * that every run of the benchmark multiplies the same matrices. */
static uint64_t next_random(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double uniform(uint64_t *state) {
  return (double)(next_random(state) >> 11) * 0x1.0p-53 * 2.0 - 1.0;
}

void bench_fill(void *x, poas_dtype dtype, size_t n, uint64_t seed) {
  uint64_t state = seed;
  if (dtype == POAS_FLOAT64)
    for (size_t i = 0; i < n; i++)
      ((double *)x)[i] = uniform(&state);
  else
    for (size_t i = 0; i < n; i++)
      ((float *)x)[i] = (float)uniform(&state);
}

void bench_shuffle(int *order, int n, uint64_t *state) {
  for (int i = n - 1; i > 0; i--) { /* Fisher-Yates */
    int j = (int)(next_random(state) % (uint64_t)(i + 1));
    int tmp = order[i];
    order[i] = order[j], order[j] = tmp;
  }
}

void bench_poison(void *x, poas_dtype dtype, size_t n) {
  if (dtype == POAS_FLOAT64)
    for (size_t i = 0; i < n; i++)
      ((double *)x)[i] = NAN;
  else
    for (size_t i = 0; i < n; i++)
      ((float *)x)[i] = NAN;
}

static double element(const void *x, poas_dtype dtype, size_t i) {
  return dtype == POAS_FLOAT64 ? ((const double *)x)[i] : (double)((const float *)x)[i];
}

/* y = M v and, when `abs_y` is given, abs_y = |M| |v|, for a rows x cols
 * row-major M of `dtype`. */
static void matvec(const void *M, poas_dtype dtype, int64_t rows, int64_t cols, const double *v,
                   const double *abs_v, double *y, double *abs_y) {
  for (int64_t i = 0; i < rows; i++) {
    double s = 0, a = 0;
    size_t row = (size_t)i * (size_t)cols;
    for (int64_t j = 0; j < cols; j++) {
      double e = element(M, dtype, row + (size_t)j);
      s += e * v[j];
      if (abs_y)
        a += fabs(e) * abs_v[j];
    }
    y[i] = s;
    if (abs_y)
      abs_y[i] = a;
  }
}

int bench_reference_init(bench_reference *ref, const bench_problem *p, uint64_t seed) {
  int64_t m = p->m, n = p->n, k = p->k;
  ref->m = m, ref->n = n;
  ref->x = malloc(sizeof(double) * (size_t)n);
  ref->z = malloc(sizeof(double) * (size_t)m);
  ref->scale = malloc(sizeof(double) * (size_t)m);
  double *abs_x = malloc(sizeof(double) * (size_t)n);
  double *bx = malloc(sizeof(double) * (size_t)k), *abs_bx = malloc(sizeof(double) * (size_t)k);
  int ok = ref->x && ref->z && ref->scale && abs_x && bx && abs_bx;
  if (ok) {
    uint64_t state = seed;
    for (int64_t j = 0; j < n; j++) {
      ref->x[j] = uniform(&state);
      abs_x[j] = fabs(ref->x[j]);
    }
    matvec(p->b, p->dtype, k, n, ref->x, abs_x, bx, abs_bx);
    matvec(p->a, p->dtype, m, k, bx, abs_bx, ref->z, ref->scale);
  }
  free(abs_bx), free(bx), free(abs_x);
  if (!ok) {
    bench_reference_free(ref);
    return -1;
  }
  return 0;
}

void bench_reference_free(bench_reference *ref) {
  free(ref->scale), free(ref->z), free(ref->x);
  ref->scale = ref->z = ref->x = NULL;
}

double bench_error(const bench_reference *ref, const bench_problem *p) {
  double worst = 0;
  /* A run of the first rows only (poas-bench --alone-limit) is checked on
   * those rows. */
  int64_t rows = p->m < ref->m ? p->m : ref->m;
  for (int64_t i = 0; i < rows; i++) {
    double y = 0;
    size_t row = (size_t)i * (size_t)ref->n;
    for (int64_t j = 0; j < ref->n; j++)
      y += element(p->c, p->dtype, row + (size_t)j) * ref->x[j];
    double diff = fabs(y - ref->z[i]);
    double e = ref->scale[i] > 0 ? diff / ref->scale[i] : diff;
    if (isnan(e))
      return NAN;
    if (e > worst)
      worst = e;
  }
  return worst;
}

/* Two bounds, the smaller applies. The classical one is rigorous: the GEMM
 * contributes at most k unit roundoffs of its dtype and the check's own
 * sums in double about n + k of double's. It grows with k, though, and at
 * large sizes would hide a wrong row. The operands here are uniform in
 * [-1, 1], so rounding errors cancel like a random walk and the normalised
 * error of a correct GEMM stays near u / sqrt(n) (measured: at most 0.7 u
 * from n = 16 to 4096, float and double); 16 u, widened by sqrt(k / n) for
 * the worst-case growth of the sums, keeps a wide margin above that while
 * still catching a wrong row at any size and one wrong element up to about
 * n = 4096 in float (further in double). */
double bench_error_bound(poas_dtype dtype, int64_t n, int64_t k) {
  double u = dtype == POAS_FLOAT64 ? DBL_EPSILON / 2 : FLT_EPSILON / 2;
  double classical = 2.0 * (double)(k + 1) * u + 2.0 * (double)(n + k) * (DBL_EPSILON / 2);
  double typical = 16.0 * u * sqrt(fmax(1.0, (double)k / (double)n));
  return fmin(classical, typical);
}
