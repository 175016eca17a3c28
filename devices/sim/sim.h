/* sim.h: what the sim backend tells the rest of the library about a
 * simulated device: the parameters its timings follow, so that the models
 * can describe it exactly (or, with slowdown, deliberately wrongly). */
#ifndef POAS_SIM_H
#define POAS_SIM_H

#include "devices/device.h"

typedef struct poas__sim_params {
  double rate[2];      /* flop/s by poas_dtype, as the model believes */
  double latency;      /* seconds added to every operation */
  double bandwidth;    /* host<->device bytes/s, each direction */
  double slowdown;     /* actual time = modelled time * slowdown */
  double roundtrip;    /* ns its handoff_latency reports, as a CPU's cores would
                          (core/roundtrip.h); 0: not measurable, the default */
  double jitter;       /* each operation's time also times 1 + jitter * u, u uniform
                          in [-1, 1) from a fixed seed: a machine busy with other work */
  uint64_t memory;     /* bytes it can allocate */
  int shares_host_cores;
  /* bt=1: its GEMM wants B transposed, as an OpenCL device's through
   * CLBlast (poas__device.gemm_wants_bt): plans transpose the shared
   * operand once on it, which it spends latency + bytes / bandwidth on.
   * align=N: it computes C in blocks of N rows and columns
   * (poas__device.gemm_align), and plans pad its chunks to them. */
  int wants_bt;
  int align;
  const char *profile; /* sim:profile=FILE, or NULL */
} poas__sim_params;

/* The parameters of a sim device; POAS_EINVAL when dev is not one. */
int poas__sim_get_params(const poas__device *dev, poas__sim_params *out);

/* Optional replay hook: when set (by the models layer for sim:profile=FILE)
 * a sim device's GEMM, transpose and copy times come from it instead of
 * rate and bandwidth: a GEMM's where gemm is set, a transpose's where
 * transpose is, else a copy's of copy_bytes in direction dir. Returns
 * seconds. */
typedef double (*poas__sim_time_fn)(void *user, const poas__gemm_call *gemm,
                                    const poas__transpose_call *transpose, size_t copy_bytes,
                                    poas_direction dir);
/* `release` (NULL: none) frees `user` when the device closes, or when
 * another hook replaces this one: a replay's hook holds its own copy of
 * the profile's models, which the context's may not stay (calibrating a
 * replay refits those). */
void poas__sim_set_time_fn(poas__device *dev, poas__sim_time_fn fn, void *user,
                           void (*release)(void *user));
/* What a replaying sim takes over from the device it replays, as that
 * device declared it (predict/attach.c, from the profile). */
typedef struct poas__sim_replay {
  /* What calibration could allocate on it, so that its plans tile as
   * that device's do (16 GiB against an H100's 77 cut a 32768^3 dgemm
   * into 6 tiles, not 4); unless memory= gave its own, or 0 (not known). */
  uint64_t memory;
  /* 1: it computed on host memory, as the cpu device does: the sim then
   * declares host_memory, has the one lane the cpu device has, and
   * allocates real host memory with no limit of its own, so that plans
   * give it no copies and it spends none. -1: not known (a sim's own). */
  int host_memory;
  /* 1: it computed on the host's cores (planned with the others that do,
   * their contention and the host's core count); unless shared= gave its
   * own, or -1 (not known). */
  int shares_host_cores;
  int cores; /* the cores or compute units it declared; 0: not known */
  /* Its runtime's cost of a run (poas__device_model.dispatch_s), which
   * plans add to its time: spent in virtual time once a run, with its
   * first operation (poas__sim_run_starts). */
  double dispatch_s;
  /* How much longer its copies take while copies go the other way
   * (poas__device_model.duplex; 1 or less: none): what plans add to a
   * pipeline's tile copies, spent on the copies marked both_ways. */
  double duplex;
  /* How much slower it computed and copied while the other devices that
   * share the host's cores computed beside it (poas__device_model.
   * contention; 1 or less: none): what plans multiply its times by when
   * they give work to two or more such devices. */
  double contention;
  /* What it declared to plans about its GEMM (the profile's): an OpenCL
   * device's B transposed, padded blocks and tile and buffer limits, so
   * that its plans transpose the shared operand once on it (the sim then
   * spends the profile's transpose model on that) and tile as its did. */
  poas__gemm_decl gemm;
} poas__sim_replay;
/* Makes dev declare what r says; before any allocation. */
void poas__sim_replay_device(poas__device *dev, const poas__sim_replay *r);

/* The virtual clock of a lane: seconds of simulated work since the device
 * opened. */
double poas__sim_lane_clock(const poas__device *dev, int lane);
/* Moves every lane's virtual clock on by `seconds` of work that is not
 * the device's own (the engine's threads and hand-offs, which a real run
 * spends and virtual time would otherwise not count). Nothing for a sim
 * in real time, whose run spends it for real. */
void poas__sim_advance(poas__device *dev, double seconds);
/* A run gives the device work (schedule/run.c): in virtual time, its
 * next operation, on whichever lane, also spends the replayed device's
 * dispatch_s, within the operation, so that the run's busy time holds
 * it as the plan's time does. Nothing for a sim in real time, whose run
 * spends its costs for real, or one that replays nothing. */
void poas__sim_run_starts(poas__device *dev);
/* 1: another device that shares the host's cores computes beside this
 * one, which shares them too (a run gives both work, or the contention
 * probe runs them together); then each of its operations takes the
 * replayed device's contention factor longer, as plans price it, until
 * this is called with 0 or the run ends. Nothing for a sim in real
 * time, which computes nothing on the host's cores. */
void poas__sim_beside(poas__device *dev, int beside);
/* The run is over: what poas__sim_run_starts and poas__sim_beside set no
 * longer applies. These three do nothing to a device that is not a sim
 * in virtual time, so a run calls them on every device. */
void poas__sim_run_ends(poas__device *dev);
/* Brings every lane's virtual clock to at least `t`: what is put on a
 * lane next starts no earlier (a lane ahead of t keeps its clock). */
void poas__sim_lanes_from(poas__device *dev, double t);

#endif /* POAS_SIM_H */
