/* test-gemm-cpu.c: the CPU backend (OpenBLAS) against the reference, with
 * all cores and with one thread. */
#include "gemm-cases.h"

TEST(cpu_all_threads) { return gemm_cases_run("cpu", 1); }
TEST(cpu_one_thread) { return gemm_cases_run("cpu:threads=1", 0); }
TEST(cpu_unpinned) { return gemm_cases_run("cpu:pin=0", 0); }

TEST_MAIN(TEST_ENTRY(cpu_all_threads), TEST_ENTRY(cpu_one_thread), TEST_ENTRY(cpu_unpinned))
