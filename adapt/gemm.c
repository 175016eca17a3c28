/* gemm.c: the GEMM work source (see adapt.h). A unit's data in a stored
 * operand is either a segment of every column (rows of a column-major
 * matrix: "row segments") or a whole column; "part" describes which, so the
 * same code cuts A, B and C for both split dimensions and all transposes.
 *
 * Device state lives per device and per graph: the shared operand and the
 * two tile buffers of each operand are allocated by the first emit on a
 * device, reused by later ones (alternating buffers continue across emits)
 * and freed by finish(). A device whose GEMM wants B transposed
 * (gemm_wants_bt: CLBlast) gets the shared operand transposed once, on
 * the device, where it arrives the other way. A scheduler must send all of a device's emits to
 * one graph between two finish() calls. */
#include "adapt/adapt.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* How units of C map onto a stored column-major operand. */
typedef struct part {
  char *base;      /* the operand's host address */
  int64_t ld;      /* its leading dimension, in elements */
  int rowseg;      /* a unit is a row: a segment of each of `extent` columns */
  int64_t extent;  /* rowseg: stored columns; else: stored rows of a column */
} part;

typedef struct dev_state {
  const poas__graph *graph;   /* where its buffers below live */
  int shared, slot_in[2], slot_c[2]; /* buffer indices; -1: none yet */
  int c_whole, in_whole;      /* external buffers (keep_c, resident in); -1: none yet */
  int next_slot;
  int shared_ours;            /* the shared buffer is freed by finish() */
  int started;                /* a tile has been emitted on it in this graph */
  poas__pipe first, later;    /* with and without the shared operand's copy */
  /* Caller-owned device memory (poas__gemm_source_keep_c, _resident);
   * ptr NULL when unused. */
  poas__mem keep_c, res_in, res_shared;
} dev_state;

struct poas__gemm_source {
  poas__work_source ws;
  poas__gemm_call call;
  poas__opt_problem p;
  poas__split_dim split;
  size_t es;
  part in, c;                 /* the non-shared operand's part, and C's */
  int64_t in_cols;            /* stored columns of the non-shared operand */
  char *shared_base;          /* the shared operand as stored */
  int64_t shared_rows, shared_cols, shared_ld;
  int ndev;
  int host_memory[POAS_MAX_DEVICES];
  int64_t tile[POAS_MAX_DEVICES];
  poas__device_model model[POAS_MAX_DEVICES];
  dev_state dev[POAS_MAX_DEVICES];
  /* The caller's matrices as host buffers of the current graph. */
  const poas__graph *host_graph;
  int host_in, host_shared, host_c;
};

/* ------------------------------------------------------------ geometry */

static size_t part_offset(const part *pt, int64_t u, size_t es) {
  return pt->rowseg ? (size_t)u * es : (size_t)u * (size_t)pt->ld * es;
}

/* The host region of units [u0, u1) of a part. */
static poas__region host_region(const part *pt, int buf, int64_t u0, int64_t u1, size_t es) {
  if (pt->rowseg)
    return (poas__region){buf, 0, (size_t)pt->extent, (size_t)u0 * es, (size_t)u1 * es};
  return (poas__region){buf, (size_t)u0, (size_t)u1, 0, (size_t)pt->extent * es};
}

/* A device tile buffer for `tile` units of a part: its pitch and lines. */
static void tile_geometry(const part *pt, int64_t tile, size_t es, size_t *pitch, size_t *lines) {
  *pitch = pt->rowseg ? (size_t)tile * es : (size_t)pt->extent * es;
  *lines = pt->rowseg ? (size_t)pt->extent : (size_t)tile;
}

/* The region `units` units occupy at the start of a tile buffer. */
static poas__region tile_region(const part *pt, int buf, int64_t units, size_t es) {
  if (pt->rowseg)
    return (poas__region){buf, 0, (size_t)pt->extent, 0, (size_t)units * es};
  return (poas__region){buf, 0, (size_t)units, 0, (size_t)pt->extent * es};
}

static poas__copy2d tile_copy(const part *pt, int64_t units, size_t dev_pitch, size_t es) {
  poas__copy2d c = {.host_pitch = (size_t)pt->ld * es, .dev_pitch = dev_pitch};
  c.width = pt->rowseg ? (size_t)units * es : (size_t)pt->extent * es;
  c.rows = pt->rowseg ? (size_t)pt->extent : (size_t)units;
  return c;
}

static poas__region whole(const poas__graph *g, int buf) {
  return (poas__region){buf, 0, g->buf[buf].lines, 0, g->buf[buf].pitch};
}

/* ------------------------------------------------------------- emitting */

static int add(poas__graph *g, const poas__ins *in) {
  int rc = poas__graph_add(g, in);
  return rc < 0 ? rc : 0;
}

static int add_host_buffer(poas__graph *g, const void *base, int64_t ld, int64_t cols,
                           size_t es) {
  poas__gbuf b = {.device = -1, .host = (void *)(uintptr_t)base, .pitch = (size_t)ld * es,
                  .lines = (size_t)POAS__MAX(cols, 1)};
  return poas__graph_add_buffer(g, &b);
}

/* Registers the caller's matrices in g, once per graph. */
static int host_buffers(poas__gemm_source *s, poas__graph *g) {
  if (s->host_graph == g && s->host_c < g->nbuf && g->buf[s->host_c].host == s->c.base)
    return 0;
  s->host_c = add_host_buffer(g, s->c.base, s->c.ld, s->p.n, s->es);
  s->host_in = s->host_shared = s->host_c;
  if (s->p.reads_ab) {
    s->host_in = add_host_buffer(g, s->in.base, s->in.ld, s->in_cols, s->es);
    s->host_shared = add_host_buffer(g, s->shared_base, s->shared_ld, s->shared_cols, s->es);
  }
  if (s->host_c < 0 || s->host_in < 0 || s->host_shared < 0)
    return POAS_ENOMEM;
  s->host_graph = g;
  return 0;
}

static int alloc_buffer(poas__graph *g, int device, size_t pitch, size_t lines, int chunk) {
  poas__gbuf b = {.device = device, .pitch = pitch, .lines = POAS__MAX(lines, 1)};
  int buf = poas__graph_add_buffer(g, &b);
  if (buf < 0)
    return buf;
  poas__ins in = {.kind = POAS__INS_ALLOC, .device = device, .lane = POAS__LANE_H2D,
                  .chunk = chunk, .naccess = 1};
  in.u.alloc.buf = buf;
  in.access[0] = (poas__access){whole(g, buf), POAS__WRITE};
  int rc = add(g, &in);
  return rc ? rc : buf;
}

static int copy_in(poas__graph *g, int device, int chunk, int dst, const char *src,
                   poas__copy2d shape, poas__region host, poas__region dev, double t) {
  poas__ins in = {.kind = POAS__INS_H2D, .device = device, .lane = POAS__LANE_H2D,
                  .chunk = chunk, .predicted_s = t, .bytes = shape.width * shape.rows,
                  .naccess = 2};
  in.u.h2d.dst_buf = dst, in.u.h2d.src = src, in.u.h2d.shape = shape;
  in.access[0] = (poas__access){host, POAS__READ};
  in.access[1] = (poas__access){dev, POAS__WRITE};
  return add(g, &in);
}

/* A buffer for device memory the caller owns (no ALLOC, no FREE). */
static int external_buffer(poas__graph *g, int device, poas__mem mem, size_t pitch,
                           size_t lines) {
  poas__gbuf b = {.device = device, .pitch = pitch, .lines = POAS__MAX(lines, 1), .mem = mem,
                  .external = 1};
  return poas__graph_add_buffer(g, &b);
}

/* Byte offset of unit u in a whole matrix stored dense on a device. */
static size_t dense_offset(const part *pt, int64_t u, int64_t stored_rows, size_t es) {
  return pt->rowseg ? (size_t)u * es : (size_t)u * (size_t)stored_rows * es;
}

/* Stored rows and columns of a part's whole matrix. */
static void part_dims(const part *pt, int64_t units, int64_t *rows, int64_t *cols) {
  *rows = pt->rowseg ? units : pt->extent;
  *cols = pt->rowseg ? pt->extent : units;
}

static int free_buffer(poas__graph *g, int device, int buf);

/* Replaces the device's shared buffer by its transpose, computed on the
 * device's compute lane, and frees the original unless the caller owns it.
 * Once per run: CLBlast would otherwise copy it into that layout for every
 * chunk's call (2048 x 2048 doubles, 8 ms on one PoCL core, against
 * 25-50 ms for a 32- to 64-row chunk's GEMM). */
static int transpose_shared(poas__gemm_source *s, poas__graph *g, int device, int chunk) {
  dev_state *d = &s->dev[device];
  int t = alloc_buffer(g, device, (size_t)s->shared_cols * s->es, (size_t)s->shared_rows, chunk);
  if (t < 0)
    return t;
  poas__ins in = {.kind = POAS__INS_TRANSPOSE, .device = device, .lane = POAS__LANE_COMPUTE,
                  .chunk = chunk, .predicted_s = d->first.transpose_s, .naccess = 2};
  in.u.transpose.call = (poas__transpose_call){
      .dtype = s->p.dtype, .rows = s->shared_rows, .cols = s->shared_cols,
      .src = {{NULL}, 0, s->shared_rows}, .dst = {{NULL}, 0, s->shared_cols}};
  in.u.transpose.src_buf = d->shared, in.u.transpose.dst_buf = t;
  in.access[0] = (poas__access){whole(g, d->shared), POAS__READ};
  in.access[1] = (poas__access){whole(g, t), POAS__WRITE};
  int rc = add(g, &in);
  if (!rc && d->shared_ours)
    rc = free_buffer(g, device, d->shared);
  d->shared = t, d->shared_ours = 1;
  return rc;
}

/* Allocates and copies the shared operand, as stored, on first use, and
 * transposes it where the device wants it so. */
static int shared_operand(poas__gemm_source *s, poas__graph *g, int device, int chunk) {
  dev_state *d = &s->dev[device];
  if (d->shared >= 0 || !s->p.reads_ab)
    return 0;
  size_t pitch = (size_t)s->shared_rows * s->es;
  if (d->res_shared.ptr) {
    int ext = external_buffer(g, device, d->res_shared, pitch, (size_t)s->shared_cols);
    if (ext < 0)
      return ext;
    d->shared = ext, d->shared_ours = 0;
  } else {
    int buf = alloc_buffer(g, device, pitch, (size_t)s->shared_cols, chunk);
    if (buf < 0)
      return buf;
    d->shared = buf, d->shared_ours = 1;
    /* It goes in before anything comes out: one way (both_ways 0). */
    poas__copy2d shape = {.width = pitch, .rows = (size_t)s->shared_cols,
                          .host_pitch = (size_t)s->shared_ld * s->es, .dev_pitch = pitch};
    poas__region host = {s->host_shared, 0, (size_t)s->shared_cols, 0, pitch};
    int rc = copy_in(g, device, chunk, buf, s->shared_base, shape, host, whole(g, buf),
                     d->first.shared_s);
    if (rc)
      return rc;
  }
  return d->first.transposed ? transpose_shared(s, g, device, chunk) : 0;
}

/* The tile buffers of a slot, allocated on first use. */
static int slot_buffers(poas__gemm_source *s, poas__graph *g, int device, int slot, int chunk) {
  dev_state *d = &s->dev[device];
  size_t pitch, lines;
  int64_t rows, cols;
  if (s->p.reads_ab && d->res_in.ptr && d->in_whole < 0) {
    part_dims(&s->in, s->ws.total_units, &rows, &cols);
    if ((d->in_whole = external_buffer(g, device, d->res_in, (size_t)rows * s->es,
                                       (size_t)cols)) < 0)
      return d->in_whole;
  }
  if (d->keep_c.ptr && d->c_whole < 0) {
    part_dims(&s->c, s->ws.total_units, &rows, &cols);
    if ((d->c_whole = external_buffer(g, device, d->keep_c, (size_t)rows * s->es,
                                      (size_t)cols)) < 0)
      return d->c_whole;
  }
  if (s->p.reads_ab && !d->res_in.ptr && d->slot_in[slot] < 0) {
    tile_geometry(&s->in, s->tile[device], s->es, &pitch, &lines);
    if ((d->slot_in[slot] = alloc_buffer(g, device, pitch, lines, chunk)) < 0)
      return d->slot_in[slot];
  }
  if (!d->keep_c.ptr && d->slot_c[slot] < 0) {
    tile_geometry(&s->c, s->tile[device], s->es, &pitch, &lines);
    if ((d->slot_c[slot] = alloc_buffer(g, device, pitch, lines, chunk)) < 0)
      return d->slot_c[slot];
  }
  return 0;
}

/* The GEMM of units [u0, u1): operands named by buffer, offset and ld. */
static poas__ins gemm_ins(const poas__gemm_source *s, int device, int chunk, int64_t units,
                          int a_buf, poas__operand a, int b_buf, poas__operand b, int c_buf,
                          poas__operand c) {
  poas__ins in = {.kind = POAS__INS_GEMM, .device = device, .lane = POAS__LANE_COMPUTE,
                  .chunk = chunk};
  poas__gemm_call call = s->call;
  if (s->split == POAS__SPLIT_ROWS)
    call.m = units;
  else
    call.n = units;
  if (s->dev[device].later.transposed)
    poas__flip_shared_op(s->split, &call.transa, &call.transb);
  if (!s->p.reads_ab) {
    /* Only beta * C: the operands are not read, so they alias C with
     * shapes any BLAS accepts for k = 0. */
    call.k = 0, call.transa = call.transb = POAS_NO_TRANS;
    a_buf = b_buf = c_buf, a = c, b = (poas__operand){c.mem, c.off, 1};
  }
  call.a = a, call.b = b, call.c = c;
  in.u.gemm.call = call;
  in.u.gemm.a_buf = a_buf, in.u.gemm.b_buf = b_buf, in.u.gemm.c_buf = c_buf;
  return in;
}

static int emit_host(poas__gemm_source *s, poas__graph *g, int device, int64_t u0, int64_t u1,
                     int chunk) {
  poas__operand in_op = {{NULL}, part_offset(&s->in, u0, s->es), s->in.ld};
  poas__operand sh_op = {{NULL}, 0, s->shared_ld};
  poas__operand c_op = {{NULL}, part_offset(&s->c, u0, s->es), s->c.ld};
  int rows = s->split == POAS__SPLIT_ROWS;
  poas__ins in = rows ? gemm_ins(s, device, chunk, u1 - u0, s->host_in, in_op, s->host_shared,
                                 sh_op, s->host_c, c_op)
                      : gemm_ins(s, device, chunk, u1 - u0, s->host_shared, sh_op, s->host_in,
                                 in_op, s->host_c, c_op);
  poas__pipe_time t;
  poas__pipe_eval(&s->dev[device].later, u1 - u0, &t);
  in.predicted_s = t.total_s;
  in.result_u0 = u0, in.result_u1 = u1;
  in.access[in.naccess++] =
      (poas__access){host_region(&s->c, s->host_c, u0, u1, s->es),
                     s->call.beta != 0 ? POAS__RW : POAS__WRITE};
  if (s->p.reads_ab) {
    in.access[in.naccess++] =
        (poas__access){host_region(&s->in, s->host_in, u0, u1, s->es), POAS__READ};
    in.access[in.naccess++] = (poas__access){whole(g, s->host_shared), POAS__READ};
  }
  return add(g, &in);
}

/* Where a tile of a part lives on the device: a slot buffer from its
 * start, or, for a whole matrix kept on the device, its place there. A
 * whole matrix on the device is stored as the part describes it, dense, so
 * its regions are cut as the host matrix's (host_region), only the leading
 * dimension differs. Tiles of a whole C touch disjoint regions, so no tile
 * waits for another to be copied out, as it would for a reused slot. */
typedef struct tile_place {
  int buf;
  poas__region region;
  size_t off;        /* byte offset of the tile's first element */
  int64_t ld;        /* elements */
} tile_place;

static tile_place place_tile(const poas__gemm_source *s, const poas__graph *g, const part *pt,
                             int whole_buf, int slot_buf, int64_t t0, int64_t t1) {
  tile_place tp;
  if (whole_buf >= 0) {
    int64_t rows, cols;
    part_dims(pt, s->ws.total_units, &rows, &cols);
    tp = (tile_place){whole_buf, host_region(pt, whole_buf, t0, t1, s->es),
                      dense_offset(pt, t0, rows, s->es), rows};
  } else {
    tp = (tile_place){slot_buf, tile_region(pt, slot_buf, t1 - t0, s->es), 0,
                      (int64_t)(g->buf[slot_buf].pitch / s->es)};
  }
  return tp;
}

/* One tile [t0, t1) on a copy device, in buffer slot `slot`. */
static int emit_tile(poas__gemm_source *s, poas__graph *g, int device, int64_t t0, int64_t t1,
                     int slot, int chunk, int last) {
  dev_state *d = &s->dev[device];
  int64_t units = t1 - t0;
  /* As the plan times them (a sim spends the duplex factor on them). */
  int both_ways = poas__tile_copies_both_ways(&d->later.prob, !d->started, last);
  d->started = 1;
  poas__tile_cost cost;
  poas__tile_costs(&d->later.prob, s->split, &s->model[device], 0, units, both_ways, &cost);
  tile_place c = place_tile(s, g, &s->c, d->keep_c.ptr ? d->c_whole : -1, d->slot_c[slot], t0,
                            t1);
  poas__region c_host = host_region(&s->c, s->host_c, t0, t1, s->es);
  poas__copy2d c_shape = tile_copy(&s->c, units, (size_t)c.ld * s->es, s->es);
  c_shape.dev_off = c.off;
  c_shape.both_ways = !!(both_ways & POAS__BOTH_WAYS_IN);
  int rc = 0;
  tile_place in = {-1, {0}, 0, 0};
  if (s->p.reads_ab) {
    in = place_tile(s, g, &s->in, d->res_in.ptr ? d->in_whole : -1, d->slot_in[slot], t0, t1);
    poas__copy2d in_shape = tile_copy(&s->in, units, (size_t)in.ld * s->es, s->es);
    in_shape.both_ways = !!(both_ways & POAS__BOTH_WAYS_IN);
    if (!d->res_in.ptr)
      rc = copy_in(g, device, chunk, in.buf, s->in.base + part_offset(&s->in, t0, s->es),
                   in_shape, host_region(&s->in, s->host_in, t0, t1, s->es), in.region,
                   cost.in_s);
  }
  if (!rc && s->p.reads_c)
    rc = copy_in(g, device, chunk, c.buf, s->c.base + part_offset(&s->c, t0, s->es), c_shape,
                 c_host, c.region, cost.c_s);
  if (rc)
    return rc;

  poas__operand c_op = {{NULL}, c.off, c.ld};
  poas__ins gi;
  if (s->p.reads_ab) {
    poas__operand in_op = {{NULL}, in.off, in.ld};
    poas__operand sh_op = {{NULL}, 0, d->later.transposed ? s->shared_cols : s->shared_rows};
    gi = s->split == POAS__SPLIT_ROWS
             ? gemm_ins(s, device, chunk, units, in.buf, in_op, d->shared, sh_op, c.buf, c_op)
             : gemm_ins(s, device, chunk, units, d->shared, sh_op, in.buf, in_op, c.buf, c_op);
    gi.access[gi.naccess++] = (poas__access){in.region, POAS__READ};
    gi.access[gi.naccess++] = (poas__access){whole(g, d->shared), POAS__READ};
  } else {
    gi = gemm_ins(s, device, chunk, units, c.buf, c_op, c.buf, c_op, c.buf, c_op);
  }
  gi.predicted_s = cost.gemm_s;
  gi.access[gi.naccess++] = (poas__access){c.region, s->p.reads_c ? POAS__RW : POAS__WRITE};
  if ((rc = add(g, &gi)) != 0)
    return rc;

  poas__ins out = {.kind = POAS__INS_D2H, .device = device, .lane = POAS__LANE_D2H,
                   .chunk = chunk, .predicted_s = cost.out_s, .naccess = 2};
  out.result_u0 = t0, out.result_u1 = t1; /* the tile is final in C once copied */
  out.u.d2h.dst = s->c.base + part_offset(&s->c, t0, s->es);
  out.u.d2h.src_buf = c.buf;
  out.u.d2h.shape = c_shape;
  out.u.d2h.shape.both_ways = !!(both_ways & POAS__BOTH_WAYS_OUT);
  out.bytes = c_shape.width * c_shape.rows;
  out.access[0] = (poas__access){c.region, POAS__READ};
  out.access[1] = (poas__access){c_host, POAS__WRITE};
  return add(g, &out);
}

/* Forgets a device's buffers (after finish, or when a new graph starts). */
static void reset_device(dev_state *d, const poas__graph *g) {
  d->graph = g;
  d->shared = -1;
  d->shared_ours = 0;
  d->slot_in[0] = d->slot_in[1] = d->slot_c[0] = d->slot_c[1] = -1;
  d->c_whole = d->in_whole = -1;
  d->next_slot = 0;
  d->started = 0;
}

static int runs_on(void *user, int device) {
  const poas__gemm_source *s = user;
  return device >= 0 && device < s->ndev && (s->host_memory[device] || s->tile[device] > 0);
}

static int emit(void *user, poas__graph *g, int device, int64_t u0, int64_t u1, int chunk) {
  poas__gemm_source *s = user;
  if (device < 0 || device >= s->ndev || u0 < 0 || u1 > s->ws.total_units)
    return poas__fail(POAS_ERANGE, "adapt: emit of units [%lld, %lld) on device %d out of range",
                      (long long)u0, (long long)u1, device);
  if (u1 <= u0)
    return 0;
  int rc = host_buffers(s, g);
  if (rc)
    return rc;
  if (s->host_memory[device])
    return emit_host(s, g, device, u0, u1, chunk);
  if (s->tile[device] <= 0)
    return poas__fail(POAS_ETOOBIG, "adapt: device %d cannot hold a single tile", device);
  dev_state *d = &s->dev[device];
  if (d->graph != g)
    reset_device(d, g);
  if ((rc = shared_operand(s, g, device, chunk)) != 0)
    return rc;
  for (int64_t t0 = u0; t0 < u1; t0 += s->tile[device]) {
    int slot = d->next_slot;
    d->next_slot ^= 1;
    if ((rc = slot_buffers(s, g, device, slot, chunk)) != 0)
      return rc;
    int64_t t1 = POAS__MIN(u1, t0 + s->tile[device]);
    if ((rc = emit_tile(s, g, device, t0, t1, slot, chunk, t1 == u1)))
      return rc;
  }
  return 0;
}

static int free_buffer(poas__graph *g, int device, int buf) {
  if (buf < 0)
    return 0;
  poas__ins in = {.kind = POAS__INS_FREE, .device = device, .lane = POAS__LANE_D2H, .chunk = -1,
                  .naccess = 1};
  in.u.free.buf = buf;
  in.access[0] = (poas__access){whole(g, buf), POAS__WRITE};
  return add(g, &in);
}

static int finish(void *user, poas__graph *g, int device) {
  poas__gemm_source *s = user;
  if (device < 0 || device >= s->ndev)
    return POAS_ERANGE;
  dev_state *d = &s->dev[device];
  int rc = 0;
  if (d->graph == g) {
    /* Caller-owned memory (a resident shared operand) is not freed. */
    int bufs[5] = {d->shared_ours ? d->shared : -1, d->slot_in[0], d->slot_in[1],
                   d->slot_c[0], d->slot_c[1]};
    for (int i = 0; i < 5 && !rc; i++)
      rc = free_buffer(g, device, bufs[i]);
  }
  reset_device(d, NULL);
  return rc;
}

static double predict(void *user, int device, int64_t u0, int64_t u1) {
  poas__gemm_source *s = user;
  if (device < 0 || device >= s->ndev || u1 <= u0)
    return 0;
  const dev_state *d = &s->dev[device];
  poas__pipe_time t;
  poas__pipe_eval(d->started ? &d->later : &d->first, u1 - u0, &t);
  return t.total_s;
}

/* ----------------------------------------------------------- lifecycle */

/* Fills the parts from the problem and the split. */
static void describe(poas__gemm_source *s) {
  const poas__gemm_call *c = &s->call;
  char *a = c->a.mem.ptr, *b = c->b.mem.ptr;
  int64_t ar = c->transa == POAS_NO_TRANS ? c->m : c->k, ac = c->transa == POAS_NO_TRANS ? c->k : c->m;
  int64_t br = c->transb == POAS_NO_TRANS ? c->k : c->n, bc = c->transb == POAS_NO_TRANS ? c->n : c->k;
  s->c = (part){c->c.mem.ptr, c->c.ld, s->split == POAS__SPLIT_ROWS,
                s->split == POAS__SPLIT_ROWS ? c->n : c->m};
  if (s->split == POAS__SPLIT_ROWS) {
    s->in = (part){a, c->a.ld, c->transa == POAS_NO_TRANS, c->k};
    s->in_cols = ac;
    s->shared_base = b, s->shared_rows = br, s->shared_cols = bc, s->shared_ld = c->b.ld;
  } else {
    s->in = (part){b, c->b.ld, c->transb == POAS_TRANS, c->k};
    s->in_cols = bc;
    s->shared_base = a, s->shared_rows = ar, s->shared_cols = ac, s->shared_ld = c->a.ld;
  }
}

int poas__gemm_source_create(const poas__gemm_call *call, const poas__opt_problem *p,
                             const poas__opt_device *devs, const poas__opt_result *plan,
                             poas__gemm_source **src, poas__work_source **out) {
  /* Cleared only as far as plan->ndev devices go: all POAS_MAX_DEVICES
   * entries are over 200 KB. Clearing them, with the plan's and the
   * solver's (api/run.c, optimize/split.c), took 3.7-4 us of a 16^3
   * sgemm's 11 us on the CI machine. Nothing reads an entry past ndev. */
  poas__gemm_source *s = malloc(sizeof *s);
  if (!s)
    return poas__fail(POAS_ENOMEM, "adapt: no memory for the GEMM's chunks");
  memset(s, 0, offsetof(poas__gemm_source, host_memory));
  memset(&s->host_graph, 0, sizeof *s - offsetof(poas__gemm_source, host_graph));
  s->call = *call;
  s->p = *p;
  s->split = plan->split;
  s->es = poas__dtype_size(p->dtype);
  s->ndev = plan->ndev;
  describe(s);
  for (int i = 0; i < s->ndev; i++) {
    memset(&s->dev[i], 0, sizeof s->dev[i]);
    s->host_memory[i] = devs[i].host_memory;
    s->tile[i] = plan->dev[i].tile;
    s->model[i] = plan->model[i];
    poas__pipe_init(&s->dev[i].first, p, s->split, &s->model[i], &devs[i],
                    s->tile[i], 1);
    poas__pipe_init(&s->dev[i].later, p, s->split, &s->model[i], &devs[i],
                    s->tile[i], 0);
    reset_device(&s->dev[i], NULL);
  }
  s->ws = (poas__work_source){.user = s, .total_units = plan->total_units,
                              .granule = plan->granule, .emit = emit, .finish = finish,
                              .predict = predict, .runs_on = runs_on};
  /* With beta = 0 nothing reads C: a chunk whose device failed after some
   * of its tiles reached C computes them again elsewhere, to the same
   * values. */
  s->ws.rerunnable = call->beta == 0;
  *src = s;
  *out = &s->ws;
  return 0;
}

void poas__gemm_source_destroy(poas__gemm_source *s) { free(s); }

int poas__gemm_source_keep_c(poas__gemm_source *s, int device, poas__mem mem) {
  if (device < 0 || device >= s->ndev || s->host_memory[device] || !mem.ptr)
    return poas__fail(POAS_EINVAL, "adapt: keep_c on device %d", device);
  s->dev[device].keep_c = mem;
  return 0;
}

int poas__gemm_source_resident(poas__gemm_source *s, int device, char operand, poas__mem mem) {
  if (device < 0 || device >= s->ndev || s->host_memory[device] || !mem.ptr ||
      (operand != 'a' && operand != 'b'))
    return poas__fail(POAS_EINVAL, "adapt: resident operand '%c' on device %d", operand, device);
  /* Row blocks stream A and share B; column blocks stream B and share A. */
  int streamed = (operand == 'a') == (s->split == POAS__SPLIT_ROWS);
  if (streamed)
    s->dev[device].res_in = mem;
  else
    s->dev[device].res_shared = mem;
  return 0;
}
