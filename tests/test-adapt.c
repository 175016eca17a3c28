/* test-adapt.c: the GEMM work source. Its chunk graphs are executed in
 * order on the CPU device, both directly on host memory and through the
 * copy path (the CPU backend's buffers and copies, with tiles forced small),
 * for every layout, transpose and split dimension, and checked against a
 * reference and for covering each element of C exactly once. The time the
 * pipeline formula predicts is checked against a list schedule of the
 * emitted instructions themselves. */
#include "adapt/adapt.h"
#include "devices/device.h"
#include "gemm-call.h"
#include "harness.h"
#include "schedule/schedule.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void rate_model(poas__device_model *dm, double flops, double overhead, double latency,
                       double bandwidth) {
  const double rates[2] = {flops, flops};
  poas__device_model_from_rates(dm, POAS__MODEL_EXACT, rates, overhead, latency, bandwidth);
}

/* Runs a graph in order on one device, as the serial scheduler would. */
static int execute(poas__device *d, poas__graph *g) {
  for (int i = 0; i < g->nins; i++) {
    poas__ins *in = &g->ins[i];
    int rc = 0;
    switch (in->kind) {
    case POAS__INS_ALLOC:
      rc = d->be->mem_alloc(d, g->buf[in->u.alloc.buf].pitch * g->buf[in->u.alloc.buf].lines,
                            &g->buf[in->u.alloc.buf].mem);
      break;
    case POAS__INS_FREE:
      d->be->mem_free(d, g->buf[in->u.free.buf].mem);
      break;
    case POAS__INS_H2D:
      rc = d->be->copy_h2d(d, 0, g->buf[in->u.h2d.dst_buf].mem, in->u.h2d.src, &in->u.h2d.shape);
      break;
    case POAS__INS_D2H:
      rc = d->be->copy_d2h(d, 0, in->u.d2h.dst, g->buf[in->u.d2h.src_buf].mem, &in->u.d2h.shape);
      break;
    case POAS__INS_GEMM: {
      poas__gemm_call call = in->u.gemm.call;
      const poas__gbuf *a = &g->buf[in->u.gemm.a_buf], *b = &g->buf[in->u.gemm.b_buf],
                       *c = &g->buf[in->u.gemm.c_buf];
      call.a.mem = a->device < 0 ? poas__mem_host(a->host) : a->mem;
      call.b.mem = b->device < 0 ? poas__mem_host(b->host) : b->mem;
      call.c.mem = c->device < 0 ? poas__mem_host(c->host) : c->mem;
      rc = d->be->gemm(d, 0, &call);
      break;
    }
    case POAS__INS_TRANSPOSE: {
      poas__transpose_call call = in->u.transpose.call;
      call.src.mem = g->buf[in->u.transpose.src_buf].mem;
      call.dst.mem = g->buf[in->u.transpose.dst_buf].mem;
      rc = d->be->transpose(d, 0, &call);
      break;
    }
    case POAS__INS_HOST:
      rc = POAS_EINVAL;
      break;
    }
    if (rc)
      return rc;
  }
  return 0;
}

/* Counts, for each element of C (column-major m x n), the instructions
 * that write it in host memory; every count must be 1. */
static int covers_c_once(const poas__graph *g, const poas__gemm_call *c) {
  size_t es = poas__dtype_size(c->dtype);
  int *count = calloc((size_t)(c->m * c->n), sizeof *count);
  if (!count)
    return 0;
  for (int i = 0; i < g->nins; i++)
    for (int a = 0; a < g->ins[i].naccess; a++) {
      const poas__access *ac = &g->ins[i].access[a];
      const poas__gbuf *b = &g->buf[ac->region.buf];
      if (!(ac->mode & POAS__WRITE) || b->device >= 0 || b->host != c->c.mem.ptr)
        continue;
      for (size_t col = ac->region.line0; col < ac->region.line1; col++)
        for (size_t row = ac->region.byte0 / es; row < ac->region.byte1 / es; row++)
          count[col * (size_t)c->m + row]++;
    }
  int ok = 1;
  for (int64_t e = 0; e < c->m * c->n; e++)
    ok &= count[e] == 1;
  free(count);
  return ok;
}

/* One case: the problem on cpu0, in place (copies 0), through copies
 * (host_memory = 0: copies 1) or through copies with the shared operand
 * transposed where a CLBlast device would want it (wants_bt: copies 2),
 * split along `split`, emitted as two ranges into one graph. */
static int run_case(poas__device *cpu, poas_dtype dt, poas_layout lay, poas_op ta, poas_op tb,
                    poas__split_dim split, int copies, double alpha, double beta) {
  test_gemm t;
  int bad = 1;
  if (test_gemm_alloc(&t, dt, lay, ta, tb, 37, 29, 13, 3, alpha, beta, 7) != 0)
    goto out;
  if (beta == 0) {
    int64_t outer = lay == POAS_COL_MAJOR ? t.n : t.m, inner = lay == POAS_COL_MAJOR ? t.m : t.n;
    for (int64_t o = 0; o < outer; o++) {
      test_poison((char *)t.C + (size_t)(o * t.ldc) * poas__dtype_size(dt), dt, (size_t)inner);
      test_poison((char *)t.C0 + (size_t)(o * t.ldc) * poas__dtype_size(dt), dt, (size_t)inner);
    }
  }
  poas__gemm_call call = test_gemm_call(&t);
  poas__opt_problem p = test_gemm_problem(&call);
  poas__device_model dm;
  rate_model(&dm, 1e10, 1e-5, 1e-5, 1e10);
  poas__opt_device dev = {.id = "cpu0", .model = &dm, .memory_bytes = (uint64_t)1 << 30,
                          .host_memory = !copies, .cores = 1, .supports_dtype = 1,
                          .wants_bt = copies == 2};
  poas__opt_result plan;
  memset(&plan, 0, sizeof plan);
  plan.split = split;
  plan.total_units = poas__split_units(&p, split);
  plan.granule = 1;
  plan.ndev = 1;
  plan.dev[0].tile = 4; /* many tiles, the last one short */
  plan.model[0] = dm;
  poas__gemm_source *src;
  poas__work_source *ws;
  char what[128];
  snprintf(what, sizeof what, "%s %s %c%c %s %s alpha=%g beta=%g", poas__dtype_letter(dt),
           lay == POAS_COL_MAJOR ? "col" : "row", ta == POAS_TRANS ? 'T' : 'N',
           tb == POAS_TRANS ? 'T' : 'N', split == POAS__SPLIT_ROWS ? "rows" : "cols",
           copies == 2 ? "copies, wants B^T" : copies ? "copies" : "in place", alpha, beta);
  if (poas__gemm_source_create(&call, &p, &dev, &plan, &src, &ws) != 0)
    goto out;
  poas__graph g;
  poas__graph_init(&g);
  int64_t cut = plan.total_units / 3;
  int rc = ws->emit(ws->user, &g, 0, 0, cut, 0);
  if (!rc)
    rc = ws->emit(ws->user, &g, 0, cut, plan.total_units, 1);
  if (!rc)
    rc = ws->finish(ws->user, &g, 0);
  int allocs = 0, frees = 0, transposes = 0;
  for (int i = 0; i < g.nins; i++)
    allocs += g.ins[i].kind == POAS__INS_ALLOC, frees += g.ins[i].kind == POAS__INS_FREE,
        transposes += g.ins[i].kind == POAS__INS_TRANSPOSE;
  int want_transposes = copies == 2 && poas__shared_transposed(&p, split, 1);
  if (rc)
    fprintf(stderr, "  %s: emit failed: %s\n", what, poas_err_name(rc));
  else if (transposes != want_transposes)
    fprintf(stderr, "  %s: %d transposes of the shared operand, not %d\n", what, transposes,
            want_transposes);
  else if (!covers_c_once(&g, &call))
    fprintf(stderr, "  %s: C not covered exactly once\n", what);
  else if (allocs != frees || (copies && allocs == 0) || (!copies && allocs != 0))
    fprintf(stderr, "  %s: %d allocations, %d frees\n", what, allocs, frees);
  else if ((rc = execute(cpu, &g)) != 0)
    fprintf(stderr, "  %s: execution failed: %s\n", what, poas_err_name(rc));
  else
    bad = test_gemm_verify(&t, what);
  poas__graph_free(&g);
  poas__gemm_source_destroy(src);
out:
  test_gemm_free(&t);
  return bad;
}

TEST(chunk_graphs_compute_every_element_once) {
  poas__devset set;
  char err[256];
  CHECK_OK(poas__devset_open("cpu:threads=1", &set, err, sizeof err));
  int failures = 0, cases = 0;
  for (int dt = 0; dt < 2; dt++)
    for (int lay = 0; lay < 2; lay++)
      for (int tr = 0; tr < 4; tr++)
        for (int split = 0; split < 2; split++)
          for (int copies = 0; copies < 3; copies++)
            for (int ab = 0; ab < 3; ab++) {
              double alpha = ab == 2 ? 0 : 1.5, beta = ab == 0 ? 0 : 0.5;
              failures += run_case(set.dev[0], (poas_dtype)dt,
                                   lay ? POAS_ROW_MAJOR : POAS_COL_MAJOR,
                                   tr & 1 ? POAS_TRANS : POAS_NO_TRANS,
                                   tr & 2 ? POAS_TRANS : POAS_NO_TRANS, (poas__split_dim)split,
                                   copies, alpha, beta);
              cases++;
            }
  poas__devset_close(&set);
  fprintf(stderr, "  %d cases, %d wrong\n", cases, failures);
  CHECK(failures == 0);
  return 0;
}

/* ------------------------------------------ plan time = graph schedule */

/* The finish time of a graph on in-order lanes where an instruction starts
 * once its lane is free and every earlier instruction it conflicts with
 * (overlapping regions, one of them writing) has finished. */
static double list_schedule(const poas__graph *g) {
  double *end = calloc((size_t)g->nins, sizeof *end);
  double lane[3] = {0, 0, 0}, finish = 0;
  for (int j = 0; j < g->nins; j++) {
    const poas__ins *in = &g->ins[j];
    double ready = lane[in->lane];
    for (int i = 0; i < j; i++)
      for (int a = 0; a < g->ins[i].naccess; a++)
        for (int b = 0; b < in->naccess; b++)
          if (((g->ins[i].access[a].mode | in->access[b].mode) & POAS__WRITE) &&
              poas__region_overlap(&g->ins[i].access[a].region, &in->access[b].region))
            ready = fmax(ready, end[i]);
    end[j] = ready + in->predicted_s;
    lane[in->lane] = end[j];
    finish = fmax(finish, end[j]);
  }
  free(end);
  return finish;
}

TEST(planned_time_is_the_time_of_the_emitted_pipeline) {
  static char host[1]; /* the matrices are never touched */
  int checked = 0;
  for (int trial = 0; trial < 48; trial++) {
    poas__device_model dm[3];
    rate_model(&dm[0], 5e12, 2e-5, 1e-5, 1.2e10);
    rate_model(&dm[1], 1e12, 1e-5, 5e-6, 3e9 * (1 + trial % 5));
    if (trial % 2) /* else its transposes take its copy-in model's time */
      for (int dt = 0; dt < 2; dt++)
        dm[1].transpose[dt] = (poas__transfer_model){.valid = 1, .latency = 2e-5, .bandwidth = 4e9};
    rate_model(&dm[2], 2e11, 1e-5, 0, 1e30);
    poas__opt_device d[3] = {
        {.id = "gpu", .model = &dm[0], .memory_bytes = (uint64_t)(64 + 32 * trial) << 20,
         .cores = 1, .supports_dtype = 1},
        {.id = "acc", .model = &dm[1], .memory_bytes = (uint64_t)1 << 30, .cores = 1,
         .supports_dtype = 1, .wants_bt = trial % 3 != 1},
        {.id = "cpu", .model = &dm[2], .memory_bytes = (uint64_t)1 << 40, .host_memory = 1,
         .cores = 1, .supports_dtype = 1}};
    poas__gemm_call call = {.dtype = (poas_dtype)(trial % 2),
                            .transa = trial & 2 ? POAS_TRANS : POAS_NO_TRANS,
                            .transb = trial & 4 ? POAS_TRANS : POAS_NO_TRANS,
                            .m = 3000 + 977 * (trial % 7),
                            .n = 2000 + 1511 * (trial % 5),
                            .k = trial % 11 == 0  ? 0
                                 : trial % 4 == 1 ? 40 + 7 * trial /* copy-bound */
                                                  : 1000 + 313 * trial,
                            .alpha = trial % 13 == 0 ? 0 : 1,
                            .beta = trial % 3 == 0 ? 0 : 1};
    call.a = call.b = call.c = (poas__operand){poas__mem_host(host), 0, 100000};
    poas__opt_problem p = test_gemm_problem(&call);
    p.host_cores = 16;
    poas__opt_result r;
    CHECK_OK(poas__optimize(d, 3, &p, &r));
    poas__gemm_source *src;
    poas__work_source *ws;
    CHECK_OK(poas__gemm_source_create(&call, &p, d, &r, &src, &ws));
    for (int i = 0; i < 3; i++) {
      if (r.dev[i].u1 <= r.dev[i].u0)
        continue;
      double predicted = ws->predict(ws->user, i, r.dev[i].u0, r.dev[i].u1);
      poas__graph g;
      poas__graph_init(&g);
      CHECK_OK(ws->emit(ws->user, &g, i, r.dev[i].u0, r.dev[i].u1, 0));
      CHECK_OK(ws->finish(ws->user, &g, i));
      double scheduled = list_schedule(&g);
      poas__graph_free(&g);
      CHECK_MSG(fabs(scheduled - r.dev[i].time.total_s) <= 1e-9 * scheduled &&
                    predicted == r.dev[i].time.total_s,
                "trial %d device %d: plan %.9g s, source %.9g s, graph %.9g s (%lld tiles)",
                trial, i, r.dev[i].time.total_s, predicted, scheduled,
                (long long)r.dev[i].time.tiles);
      checked++;
    }
    poas__gemm_source_destroy(src);
  }
  fprintf(stderr, "  %d device pipelines checked\n", checked);
  return 0;
}

/* The serial scheduler runs a source end to end on the CPU device. */
TEST(scheduler_runs_the_source) {
  poas__devset set;
  char err[256];
  CHECK_OK(poas__devset_open("cpu:threads=1", &set, err, sizeof err));
  test_gemm t;
  CHECK_OK(test_gemm_alloc(&t, POAS_FLOAT64, POAS_ROW_MAJOR, POAS_TRANS, POAS_NO_TRANS, 70, 50,
                           30, 2, 1.0, 0.5, 3));
  poas__gemm_call call = test_gemm_call(&t);
  poas__opt_problem p = test_gemm_problem(&call);
  p.tile_max = 8;
  poas__device_model dm;
  rate_model(&dm, 1e10, 1e-5, 1e-5, 1e10);
  poas__opt_device dev = {.id = "cpu0", .model = &dm, .memory_bytes = (uint64_t)1 << 30,
                          .cores = 1, .supports_dtype = 1};
  poas__opt_result r;
  CHECK_OK(poas__optimize(&dev, 1, &p, &r));
  CHECK(r.dev[0].time.tiles > 4);
  poas__gemm_source *src;
  poas__work_source *ws;
  CHECK_OK(poas__gemm_source_create(&call, &p, &dev, &r, &src, &ws));
  poas__sched_config cfg = {.policy = POAS__SCHED_STATIC};
  cfg.u0[0] = r.dev[0].u0, cfg.u1[0] = r.dev[0].u1;
  cfg.predicted_s[0] = r.dev[0].time.total_s;
  poas_report rep;
  CHECK_OK(poas__schedule_run(&set, ws, &cfg, &rep));
  CHECK(rep.dev[0].bytes_h2d == r.dev[0].time.bytes_h2d);
  CHECK(rep.dev[0].bytes_d2h == r.dev[0].time.bytes_d2h);
  CHECK(test_gemm_verify(&t, "serial scheduler, copy path") == 0);
  poas__gemm_source_destroy(src);
  test_gemm_free(&t);
  poas__devset_close(&set);
  return 0;
}

TEST_MAIN(TEST_ENTRY(chunk_graphs_compute_every_element_once),
          TEST_ENTRY(planned_time_is_the_time_of_the_emitted_pipeline),
          TEST_ENTRY(scheduler_runs_the_source))
