/* builtin.c: the models used when no calibrated profile is available: a sim
 * device's own parameters (exact), else rough numbers from the device's
 * peak estimate. */
#include "devices/sim/sim.h"
#include "predict/predict.h"

#include <string.h>

void poas__predict_builtin(const poas__device *dev, poas__device_model *out) {
  memset(out, 0, sizeof *out);
  out->memory_bytes = dev->info.memory_bytes;
  poas__sim_params sp;
  if (poas__sim_get_params(dev, &sp) == 0) {
    out->source = POAS__MODEL_EXACT;
    for (int dt = 0; dt < 2; dt++)
      for (int pair = 0; pair < 4; pair++)
        poas__gemm_model_from_rate(&out->gemm[dt][pair], sp.rate[dt], sp.latency);
    for (int dir = 0; dir < 2; dir++)
      out->xfer[dir] = (poas__transfer_model){.valid = 1, .latency = sp.latency, .bandwidth = sp.bandwidth};
    return;
  }
  out->source = POAS__MODEL_BUILTIN;
  /* Half of peak is a conservative guess for a GEMM library. */
  for (int dt = 0; dt < 2; dt++) {
    double rate = 0.5e9 * (dev->info.peak_gflops[dt] > 0 ? dev->info.peak_gflops[dt] : 10.0);
    for (int pair = 0; pair < 4; pair++)
      poas__gemm_model_from_rate(&out->gemm[dt][pair], rate, 2e-5);
  }
  if (!dev->info.host_memory)
    for (int dir = 0; dir < 2; dir++)
      out->xfer[dir] = (poas__transfer_model){
          .valid = 1, .latency = 1e-5, .bandwidth = dev->info.shares_host_cores ? 5e9 : 1e10};
}
