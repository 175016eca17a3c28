/* test-coexec.c: co-executed GEMM through the public API on the CPU and
 * an OpenCL device at once: every case of the GEMM matrix (s and d, both
 * layouts, every transpose pair, alpha/beta 0 and 1, padding, thin and
 * empty shapes, plus larger shapes that are split between the devices).
 * Skips where no OpenCL device is present. */
#include "gemm-cases.h"

TEST(coexec_cpu_opencl_gemm_cases) {
  poas_options o;
  poas_options_init(&o);
  o.devices = "cpu,opencl";
  o.no_profile = 1;
  poas_context *ctx = NULL;
  if (poas_init(&ctx, &o) != 0)
    SKIP("no context for cpu,opencl: %s", poas_error_detail());
  int n = poas_device_count(ctx);
  poas_finalize(ctx);
  if (n < 2)
    SKIP("no OpenCL device beside the CPU");
  return gemm_cases_run("cpu,opencl", 1);
}

TEST_MAIN(TEST_ENTRY(coexec_cpu_opencl_gemm_cases))
