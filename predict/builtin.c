/* builtin.c: the models used when no calibrated profile is available: a sim
 * device's own parameters (exact), else rough numbers from the device's
 * peak estimate. */
#include "devices/sim/sim.h"
#include "predict/predict.h"


void poas__predict_builtin(const poas__device *dev, poas__device_model *out) {
  poas__sim_params sp;
  if (poas__sim_get_params(dev, &sp) == 0) {
    poas__device_model_from_rates(out, POAS__MODEL_EXACT, sp.rate, sp.latency, sp.latency,
                                  sp.bandwidth);
  } else {
    /* Half of peak is a conservative guess for a GEMM library. */
    double rate[2];
    for (int dt = 0; dt < 2; dt++)
      rate[dt] = 0.5e9 * (dev->info.peak_gflops[dt] > 0 ? dev->info.peak_gflops[dt] : 10.0);
    double bandwidth = dev->info.host_memory ? 0 : dev->info.shares_host_cores ? 5e9 : 1e10;
    poas__device_model_from_rates(out, POAS__MODEL_BUILTIN, rate, 2e-5, 1e-5, bandwidth);
  }
  out->memory_bytes = dev->info.memory_bytes;
}
