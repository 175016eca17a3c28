/* gemm-call.h: a test GEMM as adapt/ and schedule/ take it (gemm-call.c). */
#ifndef POAS_TESTS_GEMM_CALL_H
#define POAS_TESTS_GEMM_CALL_H

#include "adapt/adapt.h"
#include "harness.h"

/* The column-major call of test GEMM t, as api/ normalises it (a row-major
 * GEMM is the transposed column-major one, with A and B swapped). */
poas__gemm_call test_gemm_call(const test_gemm *t);
/* The problem the planner sees for call c. */
poas__opt_problem test_gemm_problem(const poas__gemm_call *c);

#endif
