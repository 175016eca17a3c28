/* test-gemm-cpu.c: the CPU backend (OpenBLAS) against the reference, with
 * all cores and with one thread. */
#define _GNU_SOURCE /* pthread_getaffinity_np, CPU_EQUAL */
#include "gemm-cases.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

TEST(cpu_all_threads) { return gemm_cases_run("cpu", 1); }
TEST(cpu_one_thread) { return gemm_cases_run("cpu:threads=1", 0); }
TEST(cpu_unpinned) { return gemm_cases_run("cpu:pin=0", 0); }

/* A CPU-only GEMM runs on the caller's thread (schedule/run.c), and the CPU
 * device binds the thread that calls BLAS to its cores: the caller's own
 * binding must come back, here with the device on one core. */
TEST(caller_keeps_its_cpu_binding) {
  cpu_set_t before, after;
  CPU_ZERO(&before);
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  for (long i = 0; i < ncpu && i < CPU_SETSIZE; i++)
    CPU_SET((int)i, &before);
  if (ncpu < 2 || pthread_setaffinity_np(pthread_self(), sizeof before, &before) != 0)
    SKIP("one CPU, or no binding to every CPU: a binding to one core changes nothing");
  poas_context *ctx = test_open("cpu:threads=1");
  CHECK(ctx);
  float a[64 * 64], b[64 * 64], c[64 * 64];
  for (int i = 0; i < 64 * 64; i++)
    a[i] = b[i] = 1.0f, c[i] = NAN;
  CHECK_OK(poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 64, 64, 64, 1, a, 64, b,
                      64, 0, c, 64));
  CHECK(c[0] == 64 && c[64 * 64 - 1] == 64);
  CHECK(pthread_getaffinity_np(pthread_self(), sizeof after, &after) == 0);
  CHECK_MSG(CPU_EQUAL(&before, &after), "the caller's binding went from %d CPUs to %d",
            CPU_COUNT(&before), CPU_COUNT(&after));
  poas_finalize(ctx);
  return 0;
}

TEST_MAIN(TEST_ENTRY(cpu_all_threads), TEST_ENTRY(cpu_one_thread), TEST_ENTRY(cpu_unpinned),
          TEST_ENTRY(caller_keeps_its_cpu_binding))
