/* optimize.h: the split solver. Given each device's models, memory and
 * sharing of the host's cores, and a GEMM problem, it decides which devices
 * take part and which rows (or columns) of C each computes, so that all
 * finish together and as early as the models allow, transfers included.
 * It is pure: numbers in, numbers out; it never calls a device.
 *
 * The time it predicts for a device is the time of the pipeline that adapt/
 * builds for it (poas__pipe below): the shared operand copied once, then
 * tiles whose copy-in, GEMM and copy-out overlap on three lanes with two
 * buffers per operand. adapt/ evaluates the same poas__pipe for its
 * predictions, so the plan and the run describe the same thing. */
#ifndef POAS_OPTIMIZE_H
#define POAS_OPTIMIZE_H

#include "models/model.h"

/* Which dimension of C the work units run along. Rows: each device takes a
 * block of rows of C and needs all of op(B) (the shared operand); columns:
 * a block of columns and all of op(A). */
typedef enum poas__split_dim { POAS__SPLIT_ROWS = 0, POAS__SPLIT_COLS = 1 } poas__split_dim;

/* The problem, column-major (after api/'s normalisation). */
typedef struct poas__opt_problem {
  poas_dtype dtype;
  poas_op transa, transb;
  int64_t m, n, k;
  int reads_c;        /* beta != 0: C is copied in as well as out */
  int reads_ab;       /* alpha != 0 and k > 0: A and B are used at all */
  int64_t granule;    /* units are handed out in multiples of this; 0: automatic */
  int64_t tile_max;   /* largest tile in units; 0: no limit but memory (tests) */
  int host_cores;     /* cores of the host, for devices that share them */
  double min_gain;    /* a device whose part shortens the predicted makespan
                         by less than this fraction is left out, or by less
                         than the devices' model errors when those are
                         larger (poas__opt_device.model_error); 0: none is */
  double engine_s;    /* what a run through the engine costs beyond the
                         models (several devices, or several tiles), where
                         one device with one tile runs on the caller's
                         thread; 0: nothing (the solver then stays exact) */
  int names_swapped;  /* the caller's rows are these columns (row-major call):
                         reasons name units as the caller sees them */
} poas__opt_problem;

/* One device as the solver sees it. */
typedef struct poas__opt_device {
  const char *id;
  const poas__device_model *model; /* NULL or unusable: a conservative estimate */
  uint64_t memory_bytes;           /* what it can allocate */
  int host_memory;                 /* computes on host memory: no copies */
  int shares_host_cores;
  int cores;
  int supports_dtype;              /* can compute the problem's dtype */
  /* NULL, or why the device can do no more work in this process
   * (poas__dev_lost): it is left out with that reason. */
  const char *lost;
  /* Its GEMM wants B transposed and A not, and it can transpose the shared
   * operand (poas__device.gemm_wants_bt). */
  int wants_bt;
  /* Largest tile of the non-shared operand, in bytes (poas__device.
   * gemm_tile_bytes); 0: memory alone limits it. */
  uint64_t tile_bytes_max;
  /* Units its GEMM computes in one block (poas__device.gemm_align): the
   * granule is made a multiple of it; 0 or 1: none. */
  int64_t unit_align;
  /* The most elements its GEMM indexes in one operand, each side rounded
   * up to index_pad (poas__device.gemm_max_elems, gemm_index_pad): the
   * shared operand must fit, and tiles are cut to fit; 0: no limit. */
  int64_t max_operand_elems;
  int64_t index_pad;
  /* The largest buffer it can allocate, in bytes (poas__device.
   * max_buffer_bytes): the shared operand must fit in one, and tiles are
   * cut so that each of their buffers does; 0: no limit. */
  uint64_t buffer_bytes_max;
  /* Its GEMM's temporary copies of the operands, per call (poas__device.
   * gemm_scratch_pad, gemm_scratch_min_mnk): one buffer, the GEMM lane's,
   * which every call queued on it shares, each side padded to
   * scratch_pad, counted against memory, buffer_bytes_max and
   * max_operand_elems (the buffer as a whole) for calls of m n k from
   * scratch_min_mnk on; scratch_pad 0: none. */
  int64_t scratch_pad;
  int64_t scratch_min_mnk;
  /* How far its GEMM model can be off for this dtype (calibration's
   * held-out median relative error); 0: not known. Raises the bar
   * min_gain sets, weighted by the device's share (gain_bar in split.c). */
  double model_error;
} poas__opt_device;

/* Whether a device that wants_bt gets the shared operand of `split`
 * transposed once per run (it arrives in the orientation its GEMM would
 * copy on every call): B shared (rows split) and not transposed, or A
 * shared (columns split) and transposed. Its GEMMs then read the
 * transposed copy with the opposite op. */
int poas__shared_transposed(const poas__opt_problem *p, poas__split_dim split, int wants_bt);
/* The ops of such a device's GEMMs: the shared operand's flipped (B's
 * for a rows split, A's for a columns split). */
void poas__flip_shared_op(poas__split_dim split, poas_op *transa, poas_op *transb);

/* What a device does for a number of units, as the pipeline predicts. */
typedef struct poas__pipe_time {
  double total_s;     /* from the first copy-in to the last copy-out */
  double compute_s;   /* sum of its GEMMs */
  double transfer_s;  /* sum of its copies (they overlap the GEMMs) */
  uint64_t bytes_h2d, bytes_d2h;
  int64_t tiles;
} poas__pipe_time;

#define POAS__PIPE_STEPS 40

/* A device's pipeline for one problem, split and tile size: the per-tile
 * costs and the state after each of the first whole tiles, so that the
 * time of any number of units costs a few operations (the state becomes
 * periodic after a few tiles; later ones are extrapolated). */
typedef struct poas__pipe {
  int host_memory, reads_c, reads_ab;
  int serial;            /* copies and GEMMs share one timeline (see pipeline.c) */
  int64_t tile;
  double shared_s;       /* copy of the shared operand; 0 when none */
  int transposed;        /* the shared operand is transposed (poas__shared_transposed) */
  double transpose_s;    /* its transpose on the device after the copy; 0 when none */
  uint64_t shared_bytes;
  double unit_in_bytes, unit_c_bytes; /* bytes of one unit's A/B part and C part */
  double t_in, t_c, t_gemm, t_out;    /* one whole tile's stage times, copying both ways */
  double t_in1, t_c1, t_out1;         /* its copies' times one way */
  int first;                          /* its first tile is the device's first */
  int nstates;                        /* states[0..nstates-1] computed */
  int periodic;                       /* states repeat with period 2 from the last */
  double period_shift;                /* what two more tiles add to every state */
  double states[POAS__PIPE_STEPS][5];
  /* The GEMM times are the smooth model's, without the thin-block table
   * (poas__pipe_init_search). */
  int smooth;
  /* For partial tiles: the model and the problem, with the ops its GEMMs
   * run with (poas__shared_transposed flips one). */
  const poas__device_model *model;
  poas__opt_problem prob;
  poas__split_dim split;
} poas__pipe;

/* Prepares the pipeline of device `dev` with model `dm` (already usable).
 * with_shared: the shared operand still has to be copied (the device's
 * first chunk, whose first tile is the device's first:
 * poas__tile_copies_both_ways). */
void poas__pipe_init(poas__pipe *pp, const poas__opt_problem *p, poas__split_dim split,
                     const poas__device_model *dm, const poas__opt_device *dev, int64_t tile,
                     int with_shared);
/* The same with the smooth GEMM model (no thin-block table), whose time
 * never falls as units are added: what the solver's searches need (a
 * bisection on a time that dips at 16 columns after 12 stopped short of
 * the whole problem). Plans report times from poas__pipe_init's. */
void poas__pipe_init_search(poas__pipe *pp, const poas__opt_problem *p, poas__split_dim split,
                            const poas__device_model *dm, const poas__opt_device *dev,
                            int64_t tile, int with_shared);
/* The predicted time and traffic of `units` units on the pipeline. */
void poas__pipe_eval(const poas__pipe *pp, int64_t units, poas__pipe_time *out);

/* The stage times of one tile of `units` units, as adapt/ emits them:
 * copy-in of its part of the non-shared operand, copy-in of C (when C is
 * read), GEMM, copy-out of C. Host-memory devices have only the GEMM. */
typedef struct poas__tile_cost {
  double in_s, c_s, gemm_s, out_s;
} poas__tile_cost;
void poas__tile_costs(const poas__opt_problem *p, poas__split_dim split,
                      const poas__device_model *dm, int host_memory, int64_t units, int both_ways,
                      poas__tile_cost *out);
/* Which of a tile's copies run while copies go the other way, each then
 * slower by the device's duplex factor (POAS__BOTH_WAYS_IN: its copy-ins,
 * _OUT: its copy-out); the rule plans price and adapt/ marks copies by
 * (poas__copy2d.both_ways). Nothing comes out before the device's first
 * tile (first) is in, so its copy-ins go one way, as the shared operand's
 * do; nothing of its chunk goes in once the chunk's last tile (last)
 * copies out, so that goes one way too (a later chunk's copy-ins, which
 * may run beside it, are priced both ways). Tiles between copy both ways
 * where anything is copied in. A single tile copies one way only. */
enum { POAS__BOTH_WAYS_IN = 1, POAS__BOTH_WAYS_OUT = 2 };
int poas__tile_copies_both_ways(const poas__opt_problem *p, int first, int last);
/* Bytes of the shared operand: op(B) for row blocks, op(A) for columns. */
uint64_t poas__shared_bytes(const poas__opt_problem *p, poas__split_dim split);
/* Units of C along the split dimension (m for rows, n for columns). */
int64_t poas__split_units(const poas__opt_problem *p, poas__split_dim split);

/* One device's part of a solution. */
typedef struct poas__opt_share {
  int64_t u0, u1;             /* its units [u0, u1); u0 == u1: no work */
  int64_t tile;               /* units per tile; 0 when it cannot hold one */
  poas__pipe_time time;       /* predicted for [u0, u1) */
  int excluded;               /* takes no part; reason says why */
  int estimated;              /* its model was unusable: a conservative guess */
  double corun;               /* the factor its model's times were multiplied by for
                                 computing beside other devices that share the
                                 host's cores (its model's contention); 1 when not */
  char reason[200];
} poas__opt_share;

typedef struct poas__opt_result {
  poas__split_dim split;
  int64_t total_units, granule;
  double makespan_s;  /* the latest device's time with the shares as given */
  /* The engine's cost of a run (poas__opt_problem.engine_s) where the plan
   * runs through the engine (several devices, or several tiles), added to
   * every working device's time; 0 where it runs on the caller's thread. */
  double engine_s;
  /* The makespan once the run has moved work between the devices unit by
   * unit, as the guided and dynamic tails do (balanced_makespan); at most
   * makespan_s, which holds whole granules. */
  double balanced_s;
  int ndev;
  /* dev[] and model[] past ndev are not written (poas__optimize). */
  poas__opt_share dev[POAS_MAX_DEVICES];
  /* The models actually used (a device's own, or the conservative estimate
   * that replaced an unusable one); adapt/ predicts with these. */
  poas__device_model model[POAS_MAX_DEVICES];
} poas__opt_result;

/* Solves the split. Returns 0; POAS_ETOOBIG (with a detail) when the
 * problem fits in no device's memory; POAS_ENODEV when no device can take
 * part for another reason (each device's reason is in *out either way);
 * POAS_EINVAL for a malformed input. */
int poas__optimize(const poas__opt_device *devs, int ndev, const poas__opt_problem *p,
                   poas__opt_result *out);

#endif /* POAS_OPTIMIZE_H */
