/* gemm-call.c: a test GEMM (harness.h) as the library's internal layers
 * take it, for the tests that drive adapt/ and schedule/ without the public
 * API: the column-major call api/ normalises it to, and the problem the
 * planner sees. */
#include "gemm-call.h"

poas__gemm_call test_gemm_call(const test_gemm *t) {
  poas__gemm_call c = {.dtype = t->dtype, .k = t->k, .alpha = t->alpha, .beta = t->beta};
  c.c = (poas__operand){poas__mem_host(t->C), 0, t->ldc};
  if (t->layout == POAS_COL_MAJOR) {
    c.transa = t->ta, c.transb = t->tb, c.m = t->m, c.n = t->n;
    c.a = (poas__operand){poas__mem_host(t->A), 0, t->lda};
    c.b = (poas__operand){poas__mem_host(t->B), 0, t->ldb};
  } else {
    c.transa = t->tb, c.transb = t->ta, c.m = t->n, c.n = t->m;
    c.a = (poas__operand){poas__mem_host(t->B), 0, t->ldb};
    c.b = (poas__operand){poas__mem_host(t->A), 0, t->lda};
  }
  return c;
}

poas__opt_problem test_gemm_problem(const poas__gemm_call *c) {
  return (poas__opt_problem){.dtype = c->dtype, .transa = c->transa, .transb = c->transb,
                             .m = c->m, .n = c->n, .k = c->k, .reads_c = c->beta != 0,
                             .reads_ab = c->k > 0 && c->alpha != 0};
}
