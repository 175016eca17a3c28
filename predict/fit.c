/* fit.c: weighted least squares for the GEMM and transfer models.
 *
 * Weights are 1/t^2, so what is minimised is the sum of squared relative
 * errors: a 2 ms thin block counts as much as a 2 s square. Columns are
 * scaled to unit size before GSL sees them (the features span twenty
 * orders of magnitude), and the truncated SVD drops directions the samples
 * do not determine instead of inventing huge cancelling coefficients.
 * Every feature costs time, so a negative coefficient is an artefact of
 * noise that would make some unmeasured shape predict nonsense: such a
 * feature is dropped and the rest refitted (a small backward elimination,
 * enough for eight features).
 *
 * Hold-out: samples marked held out are left out of the fit whose R^2 and
 * held-out errors are reported; the coefficients stored are then refitted
 * on all samples, so the reported errors are those of a slightly smaller
 * sample than the stored model saw (a mildly pessimistic estimate). */
#include "predict/predict.h"

#include <gsl/gsl_errno.h>
#include <gsl/gsl_multifit.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Least squares of y ~ X c with weights 1/y^2 over the rows `use` selects
 * and the columns `active` selects; coefficients of inactive columns are
 * 0. Returns 0, or POAS_EFIT when there are fewer rows than columns. */
static int wls_subset(const double *X, const double *y, const int *use, int nrows, int ncols,
                      const int *active, double *coef) {
  int nr = 0, nc = 0;
  for (int i = 0; i < nrows; i++)
    nr += use[i];
  for (int j = 0; j < ncols; j++)
    nc += active[j];
  memset(coef, 0, (size_t)ncols * sizeof *coef);
  if (nc == 0)
    return 0;
  if (nr < nc)
    return POAS_EFIT;
  gsl_matrix *A = gsl_matrix_alloc((size_t)nr, (size_t)nc);
  gsl_vector *w = gsl_vector_alloc((size_t)nr), *b = gsl_vector_alloc((size_t)nr);
  gsl_vector *c = gsl_vector_alloc((size_t)nc);
  gsl_matrix *cov = gsl_matrix_alloc((size_t)nc, (size_t)nc);
  gsl_multifit_linear_workspace *ws = gsl_multifit_linear_alloc((size_t)nr, (size_t)nc);
  double *scale = calloc((size_t)ncols, sizeof *scale);
  int rc = POAS_ENOMEM;
  if (!A || !w || !b || !c || !cov || !ws || !scale)
    goto out;
  for (int i = 0; i < nrows; i++)
    if (use[i])
      for (int j = 0; j < ncols; j++)
        scale[j] = fmax(scale[j], fabs(X[i * ncols + j]));
  for (int i = 0, r = 0; i < nrows; i++) {
    if (!use[i])
      continue;
    for (int j = 0, col = 0; j < ncols; j++)
      if (active[j])
        gsl_matrix_set(A, (size_t)r, (size_t)col++, scale[j] > 0 ? X[i * ncols + j] / scale[j] : 0);
    gsl_vector_set(w, (size_t)r, 1.0 / (y[i] * y[i]));
    gsl_vector_set(b, (size_t)r, y[i]);
    r++;
  }
  double chisq;
  size_t rank;
  /* GSL's default handler aborts; our inputs are checked, but a library
   * must not be able to abort its caller. */
  gsl_error_handler_t *old = gsl_set_error_handler_off();
  int grc = gsl_multifit_wlinear_tsvd(A, w, b, 1e-9, c, cov, &chisq, &rank, ws);
  gsl_set_error_handler(old);
  rc = grc ? POAS_EFIT : 0;
  for (int j = 0, col = 0; !rc && j < ncols; j++)
    if (active[j]) {
      coef[j] = scale[j] > 0 ? gsl_vector_get(c, (size_t)col) / scale[j] : 0;
      col++;
    }
out:
  free(scale);
  if (ws)
    gsl_multifit_linear_free(ws);
  gsl_matrix_free(cov);
  gsl_vector_free(c);
  gsl_vector_free(b);
  gsl_vector_free(w);
  gsl_matrix_free(A);
  return rc;
}

/* wls_subset with non-negative coefficients, by dropping the most
 * negative feature until none is negative. */
static int wls_nonneg(const double *X, const double *y, const int *use, int nrows, int ncols,
                      double *coef) {
  int active[POAS__GEMM_NFEAT];
  for (int j = 0; j < ncols; j++)
    active[j] = 1;
  for (;;) {
    int rc = wls_subset(X, y, use, nrows, ncols, active, coef);
    if (rc)
      return rc;
    int worst = -1;
    for (int j = 0; j < ncols; j++)
      if (coef[j] < 0 && (worst < 0 || coef[j] < coef[worst]))
        worst = j;
    if (worst < 0)
      return 0;
    active[worst] = 0;
  }
}

static double predict_row(const double *x, const double *coef, int ncols) {
  double t = 0;
  for (int j = 0; j < ncols; j++)
    t += coef[j] * x[j];
  return t;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double poas__median(double *v, int n) {
  if (n <= 0)
    return 0;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double poas__timing_noise(double *t, int n) {
  if (n < 3)
    return 0;
  double med = poas__median(t, n);
  if (!(med > 0))
    return 0;
  for (int i = 0; i < n; i++)
    t[i] = fabs(t[i] - med) / med;
  return poas__median(t, n);
}

/* The value a tenth of the way up v[n] (sorts v); 0 when n is 0. */
static double low_quantile(double *v, int n) {
  if (n <= 0)
    return 0;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return v[(n - 1) / 10];
}

/* A fixed cost is a floor: what a run takes beyond it is the machine's,
 * a thread that waited for a core or a timer's slack, and only ever
 * adds. So the estimate is a low quantile, not the median, which took
 * what a busy machine added to most runs: on the 2-core CI VM with one
 * core spinning, runs through the engine cost 150-250 us more than on the
 * caller's thread in a quiet moment and 1.3-6.2 ms (a scheduler tick of
 * 4 ms, mostly) in 16 of 21 pairs, and the median made engine_s 2.0 and
 * 4.0 ms, where a quiet machine gives 33-56 us; the planner then added
 * that to every plan on several devices or tiles. A tenth of the way up,
 * not the least, since the model's error for the tiny GEMM moves single
 * runs a few microseconds either way. The engine's part is taken from
 * the pairs' differences: the two runs of a pair saw the same machine,
 * and the model's error for the GEMM (PoCL's over-predicts it by 20-30
 * us, and plain runs came out below 0) is in both. */
poas__run_cost poas__run_costs(const double *plain, const double *engine, int n) {
  poas__run_cost c = {0, 0, 0};
  if (n <= 0 || n > POAS__RUN_COST_MAX)
    return c;
  double p[POAS__RUN_COST_MAX], d[POAS__RUN_COST_MAX];
  for (int r = 0; r < n; r++)
    p[r] = plain[r], d[r] = engine[r] - plain[r];
  double dispatch = low_quantile(p, n), extra = low_quantile(d, n);
  c.spread_s = POAS__MAX(poas__median(p, n) - dispatch, poas__median(d, n) - extra);
  c.dispatch_s = POAS__MIN(POAS__MAX(dispatch, 0), 0.1);
  c.engine_s = POAS__MIN(POAS__MAX(extra, 0), 0.1);
  return c;
}

/* Relative error of a prediction; a prediction of 0 or less is 100% off. */
static double rel_error(double predicted, double measured) {
  return predicted > 0 ? fabs(predicted - measured) / measured : 1.0;
}

int poas__fit_linear(const double *X, const double *y, const int *heldout, int nrows, int ncols,
                     double *coef, double *train_coef, poas__fit_accum *acc,
                     poas__fit_stats *stats) {
  *stats = (poas__fit_stats){0}; /* timing_noise is the caller's to set */
  if (ncols > POAS__GEMM_NFEAT || ncols < 1)
    return POAS_EINVAL;
  /* A time of 0 weighs infinitely (1/y^2) and a NaN anything: GSL then
   * returned NaN coefficients, which no check below refused (NaN < 0 is
   * false), and R^2 came out 1. */
  for (int i = 0; i < nrows; i++)
    if (!(y[i] > 0) || !isfinite(y[i]))
      return poas__fail(POAS_EFIT, "fit: sample %d's time is %g, not a positive number", i, y[i]);
  int *use = calloc((size_t)nrows + 1, sizeof *use);
  double *herr = calloc((size_t)nrows + 1, sizeof *herr);
  int rc = POAS_ENOMEM;
  if (!use || !herr)
    goto out;
  int nheld = 0;
  for (int i = 0; i < nrows; i++)
    use[i] = !heldout[i];
  double train[POAS__GEMM_NFEAT];
  rc = wls_nonneg(X, y, use, nrows, ncols, train);
  if (rc)
    goto out;
  /* Weighted R^2 on the training rows: 1 - sum(w r^2) / sum(w (y - ybar_w)^2). */
  double sw = 0, swy = 0, ss_res = 0, ss_tot = 0;
  for (int i = 0; i < nrows; i++)
    if (use[i]) {
      sw += 1 / (y[i] * y[i]);
      swy += 1 / y[i];
    }
  double ybar = sw > 0 ? swy / sw : 0;
  for (int i = 0; i < nrows; i++) {
    double p = predict_row(X + i * ncols, train, ncols);
    if (use[i]) {
      ss_res += (p - y[i]) * (p - y[i]) / (y[i] * y[i]);
      ss_tot += (y[i] - ybar) * (y[i] - ybar) / (y[i] * y[i]);
    } else {
      herr[nheld++] = rel_error(p, y[i]);
    }
  }
  stats->samples = nrows;
  stats->r2 = ss_tot > 0 ? 1 - ss_res / ss_tot : 1;
  stats->heldout_max = 0;
  for (int i = 0; i < nheld; i++) {
    stats->heldout_max = fmax(stats->heldout_max, herr[i]);
    if (acc && acc->nerr < POAS__FIT_ACCUM_MAX)
      acc->err[acc->nerr++] = herr[i];
  }
  if (acc) {
    acc->samples += nrows;
    acc->ss_res += ss_res;
    acc->ss_tot += ss_tot;
  }
  stats->heldout_median = poas__median(herr, nheld);
  if (train_coef)
    memcpy(train_coef, train, (size_t)ncols * sizeof *train);
  for (int i = 0; i < nrows; i++)
    use[i] = 1;
  rc = wls_nonneg(X, y, use, nrows, ncols, coef);
out:
  free(herr);
  free(use);
  return rc;
}

void poas__fit_accum_stats(poas__fit_accum *acc, poas__fit_stats *stats) {
  *stats = (poas__fit_stats){0};
  stats->samples = acc->samples;
  stats->r2 = acc->ss_tot > 0 ? 1 - acc->ss_res / acc->ss_tot : 1;
  stats->heldout_max = 0;
  for (int i = 0; i < acc->nerr; i++)
    stats->heldout_max = fmax(stats->heldout_max, acc->err[i]);
  stats->heldout_median = poas__median(acc->err, acc->nerr);
}
