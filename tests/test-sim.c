/* test-sim.c: the simulated device: settings, virtual time, memory limit.
 * These test the sim backend itself, which is a product feature; they
 * claim nothing about real devices. */
#include "api/context.h"
#include "devices/device.h"
#include "devices/sim/sim.h"
#include "harness.h"

#include <math.h>
#include <stdlib.h>
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
  poas__copy2d c = {1000, 10, 1000, 1000, 0, 0};
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
  /* Each number has a range whose top keeps every time finite: a slowdown
   * of 1e300 wrote "ts":inf into traces. The message gives the range. */
  static const char *const beyond[] = {"sim:slowdown=1e300", "sim:latency=1e4", "sim:rate=1e22",
                                       "sim:bandwidth=1e22", "sim:roundtrip=2e9"};
  for (size_t i = 0; i < sizeof beyond / sizeof *beyond; i++) {
    CHECK_RC(poas__devset_open(beyond[i], &set, err, sizeof err), POAS_ESPEC);
    CHECK_MSG(strstr(err, "(a number from "), "%s: %s", beyond[i], err);
  }
  CHECK_OK(poas__devset_open("sim:slowdown=1e6:latency=1e3:rate=1e21", &set, err, sizeof err));
  poas__devset_close(&set);
  return 0;
}

/* The registry's cache of freed device buffers (devices/memcache.c), on a
 * sim device whose 1 MiB budget makes what is parked visible. */
TEST(device_memory_cache) {
  poas__devset set;
  char err[256];
  CHECK_OK(poas__devset_open("sim:memory=1Mi", &set, err, sizeof err));
  poas__device *d = set.dev[0];
  const size_t K = 1024;
  poas__mem a, b, c;
  CHECK_OK(poas__dev_alloc(d, 256 * K, &a));
  void *a_ptr = a.ptr;
  poas__dev_free(d, a, 256 * K); /* parked */
  /* Fits, and on a device with its own memory at most a sixteenth more
   * than the request (memcache.c, MEMCACHE_SLACK). */
  CHECK_OK(poas__dev_alloc(d, 248 * K, &a));
  CHECK(a.ptr == a_ptr);
  CHECK_OK(poas__dev_alloc(d, 100 * K, &b));
  CHECK(b.ptr != a_ptr);
  poas__dev_free(d, a, 256 * K);
  poas__dev_free(d, b, 100 * K);
  /* Neither parked buffer: each is more than a sixteenth larger. */
  CHECK_OK(poas__dev_alloc(d, 200 * K, &c));
  CHECK(c.ptr != a_ptr && c.ptr != b.ptr);
  /* 356 KiB parked and 200 KiB in use: 800 KiB fits only once the cache
   * lets go of what it holds. */
  CHECK_OK(poas__dev_alloc(d, 800 * K, &b));
  /* More than half the device is never parked: freeing it makes room. */
  poas__dev_free(d, b, 800 * K);
  CHECK_OK(d->be->mem_alloc(d, 800 * K, &b));
  d->be->mem_free(d, b);
  poas__dev_free(d, c, 200 * K);
  poas__dev_trim(d);
  CHECK_OK(d->be->mem_alloc(d, 1024 * K, &b)); /* nothing parked any more */
  d->be->mem_free(d, b);
  /* A buffer handed out larger than asked is parked again at its real
   * size, not the size its user frees it by: parked as 241 KiB, the 256
   * KiB buffer went to a request of 227 KiB, 29 KiB past it. */
  CHECK_OK(poas__dev_alloc(d, 256 * K, &a));
  a_ptr = a.ptr;
  poas__dev_free(d, a, 256 * K);
  CHECK_OK(poas__dev_alloc(d, 241 * K, &a));
  CHECK(a.ptr == a_ptr);
  poas__dev_free(d, a, 241 * K);
  CHECK_OK(poas__dev_alloc(d, 227 * K, &b));
  CHECK(b.ptr != a_ptr);
  CHECK_OK(poas__dev_alloc(d, 250 * K, &a)); /* and it is still there at 256 */
  CHECK(a.ptr == a_ptr);
  poas__dev_free(d, a, 250 * K);
  poas__dev_free(d, b, 227 * K);
  poas__devset_close(&set);
  return 0;
}

/* A GEMM that fits a device in a fresh context fits it after another
 * GEMM too: the buffers the first left parked are not handed to the second
 * larger than it asked, past what its plan counted on. On a 1 MB sim, a
 * 400 x 500 x 14 sgemm parked a 400 KB tile; the 457 x 644 x 110 one took
 * it for its 283 KB shared operand, and its second tile found no room
 * (POAS_EDEVICE, every device failed). The sim computes nothing: only the
 * return codes and the faults are checked. */
TEST(gemm_after_gemm_fits_device_memory) {
  poas_context *ctx = test_open("sim:memory=1000000");
  CHECK(ctx);
  static float A[457 * 110], B[110 * 644], C[457 * 644];
  CHECK_OK(poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 400, 500, 14, 1.0f, A,
                      400, B, 14, 0.0f, C, 400));
  int rc = poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 457, 644, 110, 1.0f, A,
                      457, B, 110, 0.0f, C, 457);
  CHECK_MSG(rc == 0, "second sgemm: %s: %s", poas_err_name(rc), poas_error_detail());
  poas_report r;
  CHECK_OK(poas_last_report(ctx, &r));
  CHECK_MSG(r.faults == 0, "%d device failures", r.faults);
  poas_finalize(ctx);
  return 0;
}

/* Zeroed float operands of an m x n x k GEMM (a sim reads none of them). */
typedef struct operands {
  float *A, *B, *C;
} operands;

static int operands_alloc(operands *o, int64_t m, int64_t n, int64_t k) {
  o->A = calloc((size_t)(m * k), sizeof *o->A);
  o->B = calloc((size_t)(k * n), sizeof *o->B);
  o->C = calloc((size_t)(m * n), sizeof *o->C);
  return o->A && o->B && o->C ? 0 : POAS_ENOMEM;
}

static void operands_free(operands *o) { free(o->A), free(o->B), free(o->C); }

/* bt=1 and align=N make a sim declare what an OpenCL device declares:
 * B wanted transposed (its plan transposes the shared operand once on it,
 * and it spends latency + bytes / bandwidth on that, as its model prices
 * it) and C in blocks of N (its share a whole number of them); both in
 * its driver string, so that a profile of it is not another sim's. Under
 * static scheduling, in virtual time, it runs for exactly its plan's time
 * with the transpose. */
TEST(sim_declares_b_transposed_and_blocks) {
  poas__devset set;
  char err[256];
  CHECK_OK(poas__devset_open("sim:bt=1:align=96:latency=1e-4:bandwidth=1e9,sim", &set, err,
                             sizeof err));
  poas__device *d = set.dev[0];
  CHECK(d->gemm_wants_bt == 1 && d->gemm_align == 96);
  CHECK(set.dev[1]->gemm_wants_bt == 0 && set.dev[1]->gemm_align == 0);
  CHECK_MSG(strcmp(d->info.driver, "sim latency=0.0001 bandwidth=1e+09 bt=1 align=96") == 0,
            "%s", d->info.driver);
  /* A transpose of 1000 x 500 doubles: 1e-4 s + 4e6 bytes at 1e9 B/s. */
  poas__transpose_call t = {.dtype = POAS_FLOAT64, .rows = 1000, .cols = 500};
  CHECK_OK(d->be->transpose(d, 1, &t));
  CHECK_MSG(fabs(poas__sim_lane_clock(d, 1) - 0.0041) < 1e-12, "the transpose took %.9g s",
            poas__sim_lane_clock(d, 1));
  poas__devset_close(&set);
  static const char *const bad[] = {"sim:bt=2", "sim:align=-1", "sim:align=9000"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    CHECK_MSG(poas__devset_open(bad[i], &set, err, sizeof err) == POAS_ESPEC, "%s", bad[i]);
  poas_options o;
  poas_options_init(&o);
  o.devices = "sim:bt=1:align=96:rate=5e10,sim:rate=1e11";
  o.no_profile = 1;
  o.no_adapt = 1;
  o.sched = "static";
  poas_context *ctx = NULL;
  CHECK_OK(poas_init(&ctx, &o));
  enum { M = 2000, N = 1500, K = 700 };
  operands op;
  CHECK_OK(operands_alloc(&op, M, N, K));
  poas_plan plan;
  CHECK_OK(poas_plan_gemm_call(ctx, POAS_FLOAT32, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, M,
                               N, K, 1, 1, &plan));
  CHECK_MSG(plan.ndevices == 2 && plan.dev[0].count % 96 == 0 && plan.dev[0].count > 0,
            "%d devices, sim0 %lld rows or columns", plan.ndevices,
            (long long)plan.dev[0].count);
  CHECK_OK(poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, M, N, K, 1, op.A, M, op.B,
                      K, 1, op.C, M));
  poas_report r;
  CHECK_OK(poas_last_report(ctx, &r));
  for (int i = 0; i < 2; i++)
    CHECK_MSG(fabs(r.dev[i].measured_s - plan.dev[i].predicted_s) <=
                  1e-9 * plan.dev[i].predicted_s,
              "%s ran %.9g s, planned %.9g", r.dev[i].id, r.dev[i].measured_s,
              plan.dev[i].predicted_s);
  operands_free(&op);
  poas_finalize(ctx);
  return 0;
}

/* A tiled GEMM runs in virtual time as its plan predicts. With room for
 * two tiles of C, the pipeline copies each tile's operand and C in, in
 * tile order; the engine once submitted the nodes in the order they became
 * ready, so tile 3's operand went onto the copy-in lane before tile 2's C
 * and held it back until a GEMM ended: this 10-tile sgemm ran 17% over its
 * prediction (a 10-tile 16384 x 16384 x 64 one on 256 MiB, 13%). The sim
 * computes nothing: only its virtual times are checked. */
TEST(tiled_gemm_runs_as_planned) {
  poas_context *ctx = test_open("sim:rate=2e11:bandwidth=5e10:memory=16Mi");
  CHECK(ctx);
  enum { M = 4096, N = 4096, K = 16 };
  operands op;
  CHECK_OK(operands_alloc(&op, M, N, K));
  poas_plan plan;
  CHECK_OK(poas_plan_gemm_call(ctx, POAS_FLOAT32, POAS_ROW_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, M,
                               N, K, 1, 1, &plan));
  CHECK_MSG(plan.ndevices == 1 && plan.dev[0].tiles >= 8, "%d devices, %lld tiles",
            plan.ndevices, (long long)plan.dev[0].tiles);
  CHECK_OK(poas_sgemm(ctx, POAS_ROW_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, M, N, K, 1, op.A, K, op.B,
                      N, 1, op.C, N));
  poas_report r;
  CHECK_OK(poas_last_report(ctx, &r));
  double ratio = r.measured_s / r.predicted_s;
  CHECK_MSG(ratio > 0.99 && ratio < 1.01, "predicted %.6g s, ran %.6g s of virtual time (%.3fx)",
            r.predicted_s, r.measured_s, ratio);
  operands_free(&op);
  poas_finalize(ctx);
  return 0;
}

/* The makespan of one sgemm of 2000 x 2000 x 500 (beta = 1) on `devices`
 * under `policy`, in virtual time; a negative error where it failed. */
static double makespan_under(const char *devices, const char *policy, const operands *op) {
  poas_options o;
  poas_options_init(&o);
  o.devices = devices;
  o.no_profile = 1;
  o.no_adapt = 1;
  o.sched = policy;
  poas_context *ctx = NULL;
  int rc = poas_init(&ctx, &o);
  if (rc)
    return rc;
  rc = poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, 2000, 2000, 500, 1, op->A,
                  2000, op->B, 500, 1, op->C, 2000);
  poas_report r;
  if (!rc)
    rc = poas_last_report(ctx, &r);
  poas_finalize(ctx);
  return rc ? rc : r.measured_s;
}

/* With exact models (sims) the guided tail ends with the static plan. On
 * 24 sims of 1 to 24 GFLOP/s its last pool held fewer granules than there
 * were devices: the water level, which shares a pool out in fractions of
 * a granule, had every device find that the others would end it sooner
 * without it, all declined, and the forced hand-out gave each granule to
 * the device with the earliest clock, however slow: the run took 1.10x
 * static's time (1.13x on 32 sims). */
TEST(guided_with_many_exact_sims_ends_with_static) {
  char devices[512] = "";
  for (int d = 1; d <= 24; d++)
    snprintf(devices + strlen(devices), sizeof devices - strlen(devices), "%ssim:rate=%de9",
             d > 1 ? "," : "", d);
  operands op;
  CHECK_OK(operands_alloc(&op, 2000, 2000, 500));
  double st = makespan_under(devices, "static", &op), gu = makespan_under(devices, "guided", &op);
  operands_free(&op);
  CHECK(st > 0 && gu > 0);
  CHECK_MSG(gu <= st * 1.001, "guided %.6g s against static %.6g s (%.3fx)", gu, st, gu / st);
  return 0;
}

/* When the plan's only device fails, the devices it left out take over,
 * but not one whose memory holds not one tile: sim0 was enlisted with the
 * others and its first chunk failed the run with POAS_ETOOBIG ("cannot
 * hold a single tile"), though sim2 could run it all. With no other
 * device left, every device has failed: POAS_EDEVICE. */
TEST(failed_work_skips_a_device_that_holds_no_tile) {
  enum { N = 512 }; /* B alone, 1 MiB, is past sim0's memory */
  operands op;
  CHECK_OK(operands_alloc(&op, N, N, N));
  static const char *const sets[] = {"sim:memory=1Mi,sim:rate=1e12,sim:rate=1e9",
                                     "sim:memory=1Mi,sim:rate=1e12"};
  for (int i = 0; i < 2; i++) {
    poas_context *ctx = test_open_unlearning(sets[i]);
    CHECK(ctx);
    poas_plan plan;
    CHECK_OK(poas_plan_gemm_call(ctx, POAS_FLOAT32, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS,
                                 N, N, N, 1, 0, &plan));
    CHECK(plan.ndevices == 1 && strcmp(plan.dev[0].id, "sim1") == 0);
    setenv("POAS_FAULT", "sim1:after=1", 1);
    int rc = poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, N, N, N, 1, op.A, N,
                        op.B, N, 0, op.C, N);
    unsetenv("POAS_FAULT");
    if (i == 0) {
      CHECK_MSG(rc == 0, "%s: %s", poas_err_name(rc), poas_error_detail());
      poas_report r;
      CHECK_OK(poas_last_report(ctx, &r));
      CHECK(r.faults == 1 && r.dev[1].failed && !r.dev[0].failed && !r.dev[2].failed);
      CHECK(r.dev[0].share == 0 && r.dev[2].share == 1);
    } else {
      CHECK_MSG(rc == POAS_EDEVICE, "%s: %s", poas_err_name(rc), poas_error_detail());
    }
    poas_finalize(ctx);
  }
  operands_free(&op);
  return 0;
}

/* A plan takes no more of a device's memory than it could allocate now:
 * with 12 of a sim's 16 MiB held elsewhere (another process on a GPU), a
 * GEMM whose C needs 8 MiB was planned in one tile of the total, and the
 * run failed (every device failed, here the only one). The sim computes
 * nothing: the plan and the run's status are checked. */
TEST(plans_fit_the_memory_left_now) {
  poas_context *ctx = test_open("sim:memory=16Mi");
  CHECK(ctx);
  poas__device *d = ctx->devices.dev[0];
  poas__mem taken;
  CHECK_OK(d->be->mem_alloc(d, 12u << 20, &taken)); /* not through the cache: someone else's */
  uint64_t now = 0;
  CHECK(poas__dev_available(d, &now) == 0 && now == 4u << 20);
  enum { M = 1024, N = 2048, K = 16 };
  operands op;
  CHECK_OK(operands_alloc(&op, M, N, K));
  poas_plan plan;
  CHECK_OK(poas_plan_gemm_call(ctx, POAS_FLOAT32, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, M,
                               N, K, 1, 0, &plan));
  CHECK_MSG(plan.ndevices == 1 && plan.dev[0].tiles > 2, "%d devices, %lld tiles",
            plan.ndevices, (long long)plan.dev[0].tiles);
  int rc = poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, M, N, K, 1, op.A, M, op.B,
                      K, 0, op.C, M);
  CHECK_MSG(rc == 0, "%s: %s", poas_err_name(rc), poas_error_detail());
  d->be->mem_free(d, taken);
  operands_free(&op);
  poas_finalize(ctx);
  return 0;
}

/* A device its backend marked lost (a CUDA context corrupted by an
 * illegal address: devices/cuda/cuda.c) is planned out with the reason it
 * was lost, and the GEMM runs on the others instead of failing on it on
 * every call. The first reason given is the one kept. The sims compute
 * nothing: plans and return codes are checked. */
TEST(a_lost_device_is_planned_out_with_its_reason) {
  poas_context *ctx = test_open("sim:rate=1e9:latency=0,sim:rate=1e9:latency=0");
  CHECK(ctx);
  enum { M = 512, N = 512, K = 512 };
  poas_plan plan;
  CHECK_OK(poas_plan_gemm_call(ctx, POAS_FLOAT32, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, M,
                               N, K, 1, 0, &plan));
  CHECK_MSG(plan.ndevices == 2, "%d devices before", plan.ndevices);
  poas__device *d = ctx->devices.dev[1];
  CHECK(poas__dev_lost(d) == NULL);
  CHECK(poas__dev_mark_lost(d, "cudaErrorIllegalAddress in a test"));
  CHECK(!poas__dev_mark_lost(d, "a later error"));
  CHECK(poas__dev_lost(d) && strcmp(poas__dev_lost(d), "cudaErrorIllegalAddress in a test") == 0);
  CHECK_OK(poas_plan_gemm_call(ctx, POAS_FLOAT32, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, M,
                               N, K, 1, 0, &plan));
  CHECK_MSG(plan.ndevices == 1 && strcmp(plan.dev[0].id, "sim0") == 0, "%d devices after",
            plan.ndevices);
  CHECK(plan.nexcluded == 1 && strcmp(plan.excluded[0].id, "sim1") == 0);
  CHECK_MSG(strstr(plan.excluded[0].reason, "lost: cudaErrorIllegalAddress in a test"), "'%s'",
            plan.excluded[0].reason);
  operands op;
  CHECK_OK(operands_alloc(&op, M, N, K));
  int rc = poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, M, N, K, 1, op.A, M, op.B,
                      K, 0, op.C, M);
  CHECK_MSG(rc == 0, "%s: %s", poas_err_name(rc), poas_error_detail());
  poas_report rep;
  CHECK_OK(poas_last_report(ctx, &rep));
  CHECK(rep.dev[1].share == 0 && !rep.dev[1].failed);
  operands_free(&op);
  poas_finalize(ctx);
  return 0;
}

/* A plan splits the way its models predict faster for the devices it
 * keeps, not the way that copies fewer bytes. For one device the bytes
 * tie (the shared operand once, the other in tiles), and the solver took
 * rows: here B, 128 MiB, copied whole before the first GEMM, where split
 * by columns only A's 8 MiB is, and B's columns stream in under the GEMMs
 * (predicted 48.9 ms by rows, 39.5 ms by columns). The sim computes nothing:
 * the plan and the run's virtual time are checked. */
TEST(a_plan_splits_the_way_predicted_faster) {
  poas_context *ctx = test_open("sim:rate=1e12:latency=0:bandwidth=1e10");
  CHECK(ctx);
  enum { M = 512, N = 8192, K = 4096 };
  operands op;
  CHECK_OK(operands_alloc(&op, M, N, K));
  poas_plan plan;
  CHECK_OK(poas_plan_gemm_call(ctx, POAS_FLOAT32, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, M,
                               N, K, 1, 0, &plan));
  CHECK_MSG(plan.ndevices == 1 && plan.split == POAS_SPLIT_COLS,
            "%d devices, split by %s, predicted %.4g s", plan.ndevices,
            plan.split == POAS_SPLIT_COLS ? "columns" : "rows", plan.makespan_s);
  CHECK_OK(poas_sgemm(ctx, POAS_COL_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, M, N, K, 1, op.A, M, op.B,
                      K, 0, op.C, M));
  poas_report r;
  CHECK_OK(poas_last_report(ctx, &r));
  /* B alone takes 13.4 ms to copy and the GEMM 34.4 ms to compute: a run
   * by rows cannot end before 47.8. */
  CHECK_MSG(r.measured_s < 0.045 && fabs(r.measured_s / r.predicted_s - 1) < 0.02,
            "predicted %.4g s, ran %.4g s of virtual time", r.predicted_s, r.measured_s);
  operands_free(&op);
  poas_finalize(ctx);
  return 0;
}

TEST_MAIN(TEST_ENTRY(sim_virtual_time_follows_parameters), TEST_ENTRY(device_memory_cache),
          TEST_ENTRY(gemm_after_gemm_fits_device_memory), TEST_ENTRY(tiled_gemm_runs_as_planned),
          TEST_ENTRY(plans_fit_the_memory_left_now),
          TEST_ENTRY(guided_with_many_exact_sims_ends_with_static),
          TEST_ENTRY(failed_work_skips_a_device_that_holds_no_tile),
          TEST_ENTRY(a_lost_device_is_planned_out_with_its_reason),
          TEST_ENTRY(a_plan_splits_the_way_predicted_faster),
          TEST_ENTRY(sim_beside_real_device_takes_real_time), TEST_ENTRY(sim_slowdown_and_ids),
          TEST_ENTRY(sim_declares_b_transposed_and_blocks))
