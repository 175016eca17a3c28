/* gemm-cases.h: the GEMM case matrix every backend's test runs: s and d,
 * both layouts, both transposes, alpha and beta including 0 and 1, padded
 * leading dimensions, thin, single-row and empty shapes. Outputs are
 * checked against a double-precision reference. */
#ifndef POAS_TEST_GEMM_CASES_H
#define POAS_TEST_GEMM_CASES_H

#include "harness.h"

/* Runs every case on a context opened with the selection `devices`;
 * returns 0, 1 on a wrong result, or TEST_SKIP when the selection finds
 * no device. `big` adds a few larger shapes (for co-execution). */
int gemm_cases_run(const char *devices, int big);

#endif
