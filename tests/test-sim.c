/* test-sim.c: the simulated device: settings, virtual time, memory limit.
 * These test the sim backend itself, which is a product feature; they
 * claim nothing about real devices. */
#include "devices/device.h"
#include "devices/sim/sim.h"
#include "harness.h"

#include <math.h>
#include <string.h>

TEST(sim_virtual_time_follows_parameters) {
  poas__devset set;
  char err[256];
  CHECK_OK(poas__devset_open("sim:rate=1e6:latency=0:bandwidth=1e3:memory=1Mi", &set, err,
                             sizeof err));
  poas__device *d = set.dev[0];
  CHECK(d->virtual_time == 1);
  CHECK(strcmp(d->info.id, "sim0") == 0);
  poas__mem mem;
  CHECK_OK(d->be->mem_alloc(d, 1 << 19, &mem));
  poas__mem too_much;
  CHECK_RC(d->be->mem_alloc(d, 1 << 20, &too_much), POAS_ENOMEM);
  double t0 = poas__now();
  poas__copy2d c = {1000, 10, 1000, 1000, 0};
  CHECK_OK(d->be->copy_h2d(d, 0, mem, NULL, &c)); /* 1e4 bytes at 1e3 B/s = 10 s */
  poas__event ev;
  CHECK_OK(d->be->event_create(d, &ev));
  CHECK_OK(d->be->event_record(d, 0, &ev));
  CHECK(fabs(ev.u.vtime - 10) < 1e-9);
  CHECK_OK(d->be->lane_wait(d, 1, &ev));
  poas__gemm_call g = {.dtype = POAS_FLOAT32, .m = 100, .n = 100, .k = 50};
  CHECK_OK(d->be->gemm(d, 1, &g)); /* 1e6 flop at 1e6 = 1 s, after the copy */
  CHECK(fabs(poas__sim_lane_clock(d, 1) - 11) < 1e-9);
  /* Nothing slept: 11 s of device time passed in far less wall time, by a
   * margin no load on a shared machine can close. */
  CHECK(poas__now() - t0 < 5);
  d->be->mem_free(d, mem);
  CHECK_OK(d->be->mem_alloc(d, 1 << 20, &mem));
  d->be->mem_free(d, mem);
  d->be->event_destroy(d, &ev);
  poas__devset_close(&set);
  return 0;
}

TEST(sim_beside_real_device_takes_real_time) {
  poas__devset set;
  char err[256];
  CHECK_OK(poas__devset_open("cpu,sim:rate=1e9:latency=0", &set, err, sizeof err));
  CHECK(set.ndev == 2 && set.dev[1]->virtual_time == 0);
  poas__device *d = set.dev[1];
  poas__gemm_call g = {.dtype = POAS_FLOAT32, .m = 100, .n = 100, .k = 100}; /* 2 ms */
  double t0 = poas__now();
  CHECK_OK(d->be->gemm(d, 0, &g));
  CHECK(poas__now() - t0 >= 0.002);
  poas__devset_close(&set);
  return 0;
}

TEST(sim_slowdown_and_ids) {
  poas__devset set;
  char err[256];
  CHECK_OK(poas__devset_open("sim:rate=1e9:latency=0,sim:rate=1e9:latency=0:slowdown=2", &set,
                             err, sizeof err));
  CHECK(set.ndev == 2 && strcmp(set.dev[1]->info.id, "sim1") == 0);
  poas__gemm_call g = {.dtype = POAS_FLOAT32, .m = 100, .n = 100, .k = 100};
  CHECK_OK(set.dev[0]->be->gemm(set.dev[0], 0, &g));
  CHECK_OK(set.dev[1]->be->gemm(set.dev[1], 0, &g));
  CHECK(fabs(poas__sim_lane_clock(set.dev[1], 0) - 2 * poas__sim_lane_clock(set.dev[0], 0)) <
        1e-12);
  poas__sim_params p;
  CHECK_OK(poas__sim_get_params(set.dev[1], &p));
  CHECK(p.slowdown == 2 && p.rate[1] == 5e8);
  poas__devset_close(&set);
  return 0;
}

TEST_MAIN(TEST_ENTRY(sim_virtual_time_follows_parameters),
          TEST_ENTRY(sim_beside_real_device_takes_real_time), TEST_ENTRY(sim_slowdown_and_ids))
