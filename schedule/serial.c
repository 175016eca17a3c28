/* serial.c: the simplest scheduler: each device's planned range is emitted
 * and run in order, one instruction at a time, one device after another.
 * It is correct but co-executes nothing; it stands until the DAG runtime
 * replaces it. */
#include "devices/sim/sim.h"
#include "schedule/schedule.h"

#include <string.h>

int poas__policy_parse(const char *text, poas__policy *out) {
  static const char *const names[] = {"static", "guided", "dynamic"};
  for (int i = 0; i < 3; i++)
    if (text && strcmp(text, names[i]) == 0) {
      *out = (poas__policy)i;
      return 0;
    }
  return POAS_EINVAL;
}

const char *poas__policy_name(poas__policy p) {
  return p == POAS__SCHED_STATIC ? "static" : p == POAS__SCHED_DYNAMIC ? "dynamic" : "guided";
}

/* The memory an operand names: a host buffer's address or a device
 * buffer's allocation. */
static poas__mem buffer_mem(const poas__graph *g, int buf) {
  const poas__gbuf *b = &g->buf[buf];
  return b->device < 0 ? poas__mem_host(b->host) : b->mem;
}

static int run_ins(const poas__devset *set, poas__graph *g, const poas__ins *in,
                   poas_device_report *r) {
  poas__device *d = set->dev[in->device];
  int lane = in->lane % d->nlanes;
  switch (in->kind) {
  case POAS__INS_ALLOC: {
    poas__gbuf *b = &g->buf[in->u.alloc.buf];
    return d->be->mem_alloc(d, b->pitch * b->lines, &b->mem);
  }
  case POAS__INS_FREE:
    d->be->mem_free(d, g->buf[in->u.free.buf].mem);
    g->buf[in->u.free.buf].mem.ptr = NULL;
    return 0;
  case POAS__INS_H2D:
    r->bytes_h2d += in->bytes;
    return d->be->copy_h2d(d, lane, g->buf[in->u.h2d.dst_buf].mem, in->u.h2d.src,
                           &in->u.h2d.shape);
  case POAS__INS_D2H:
    r->bytes_d2h += in->bytes;
    return d->be->copy_d2h(d, lane, in->u.d2h.dst, g->buf[in->u.d2h.src_buf].mem,
                           &in->u.d2h.shape);
  case POAS__INS_GEMM: {
    poas__gemm_call call = in->u.gemm.call;
    call.a.mem = buffer_mem(g, in->u.gemm.a_buf);
    call.b.mem = buffer_mem(g, in->u.gemm.b_buf);
    call.c.mem = buffer_mem(g, in->u.gemm.c_buf);
    return d->be->gemm(d, lane, &call);
  }
  case POAS__INS_HOST:
    return in->u.host.fn(in->u.host.arg);
  }
  return POAS_EINVAL;
}

/* Device time: the virtual clock for simulated devices, else the wall. */
static double device_time(const poas__device *d) {
  if (!d->virtual_time)
    return poas__now();
  double t = 0;
  for (int l = 0; l < d->nlanes; l++)
    t = POAS__MAX(t, poas__sim_lane_clock(d, l));
  return t;
}

int poas__schedule_run(const poas__devset *set, poas__work_source *src,
                       const poas__sched_config *cfg, poas_report *report) {
  memset(report, 0, sizeof *report);
  report->ndevices = set->ndev;
  report->predicted_s = cfg->predicted_makespan_s;
  poas__strlcpy(report->policy, "static", sizeof report->policy);
  int rc = 0, chunk = 0;
  for (int i = 0; i < set->ndev && rc == 0; i++) {
    poas__device *d = set->dev[i];
    poas_device_report *r = &report->dev[i];
    poas__strlcpy(r->id, d->info.id, sizeof r->id);
    r->predicted_s = cfg->predicted_s[i];
    report->virtual_time = d->virtual_time;
    if (cfg->u1[i] <= cfg->u0[i])
      continue;
    poas__graph g;
    poas__graph_init(&g);
    rc = src->emit(src->user, &g, i, cfg->u0[i], cfg->u1[i], chunk++);
    if (!rc)
      rc = src->finish(src->user, &g, i);
    double t0 = device_time(d);
    for (int j = 0; rc == 0 && j < g.nins; j++) {
      rc = run_ins(set, &g, &g.ins[j], r);
      if (!rc)
        rc = poas__dev_sync_all(d);
    }
    r->measured_s = r->busy_s = device_time(d) - t0;
    r->chunks = 1;
    r->share = (double)(cfg->u1[i] - cfg->u0[i]) / (double)src->total_units;
    report->measured_s += r->measured_s;
    poas__graph_free(&g);
  }
  return rc;
}
