/* schedule.h: running work on devices. api/ hands the scheduler a work
 * source (from adapt/), each device's static range of units from the plan
 * (optimize/) and the policy; the scheduler emits, orders and runs the
 * instructions, and reports what happened beside what was predicted. */
#ifndef POAS_SCHEDULE_H
#define POAS_SCHEDULE_H

#include "schedule/graph.h"

typedef enum poas__policy {
  POAS__SCHED_STATIC = 0,  /* every device runs exactly its planned range */
  POAS__SCHED_GUIDED = 1,  /* most of the plan statically, the rest on demand */
  POAS__SCHED_DYNAMIC = 2  /* everything on demand, in shrinking chunks */
} poas__policy;

/* Parses "static", "guided", "dynamic"; POAS_EINVAL otherwise. */
int poas__policy_parse(const char *text, poas__policy *out);
const char *poas__policy_name(poas__policy p);

/* The longest fault spec poas__fault_parse takes, its terminating null
 * included. */
#define POAS__FAULT_SPEC_MAX 512

/* Parses a fault spec ("ID:after=N[,ID:after=N]", POAS_FAULT) against a
 * device set into after[i] (-1: none), warning of an ID not in the set.
 * With set NULL (after may be NULL too) it checks the form alone, as
 * poas_init does, so that a malformed POAS_FAULT fails at once instead of
 * at the first GEMM. POAS_EINVAL with a message naming the bad entry. */
int poas__fault_parse(const char *spec, const poas__devset *set, int64_t after[]);

typedef struct poas__sched_config {
  poas__policy policy;
  const char *trace_path;         /* Chrome trace output, or NULL */
  const char *fault_spec;         /* as POAS_FAULT ("": none); NULL: $POAS_FAULT */
  /* The plan: device i takes units [u0[i], u1[i]) (u0 == u1: no work), is
   * predicted to take predicted_s[i], and processes units at rate[i] per
   * second (0 when the device takes no part). */
  int64_t u0[POAS_MAX_DEVICES], u1[POAS_MAX_DEVICES];
  double predicted_s[POAS_MAX_DEVICES];
  double rate[POAS_MAX_DEVICES];
  double predicted_makespan_s;
  /* Tiles the plan cuts each device's part into (0: not known). */
  int64_t tiles[POAS_MAX_DEVICES];
  /* How far off its model device i typically runs: the held-out median
   * relative error of its calibration for this dtype; 0 when not known
   * (estimates, exact sim models). Sizes a minor device's guided tail. */
  double model_error[POAS_MAX_DEVICES];
  /* Through the engine even when the plan could run on the caller's
   * thread (calibration measures what the engine costs). */
  int no_inline;
  /* Where given, set to 1 when the trace could not be written, and the
   * run's status and detail stay the run's own; NULL: a trace that could
   * not be written fails the run with POAS_EIO. */
  int *trace_failed;
  /* What the plan charged each device it gave work for a run through the
   * engine (poas__opt_result.engine_s). Simulated devices in virtual time
   * spend it at the run's start, as real devices spend it in threads and
   * hand-offs, so that a replayed machine runs as it was planned. */
  double engine_s;
} poas__sched_config;

/* Runs all of src's units on the devices of `set` and fills, in *report,
 * ndevices, dev[] (per device: id, share, chunks, predicted, measured,
 * busy, idle, bytes, failed), predicted_s, measured_s, faults,
 * virtual_time and policy. The caller fills the problem fields and
 * gflops.
 *
 * Policies: static emits each planned range as one chunk; guided emits
 * most of each range up front (70% for a device holding an equal share,
 * more for a larger one; for a smaller one 50%, or what its model's known
 * error calls for, 50% to 90%) and hands out the rest in
 * chunks to whichever device runs out first: the device's share of what
 * is left, shared by the models' times corrected by what each device has
 * measured so far in the run (half that share until one of its chunks has
 * completed and measured it), whole granules; a chunk a device would
 * finish after another could is left to that other. Every second range
 * keeps its tail at its start, so that neighbours' tails touch and the
 * two devices take the pool between them from either end, each next to
 * what it holds. Dynamic hands out everything that way. A plan with no
 * ranges runs dynamically on every device.
 *
 * Measured times come from the devices' clocks: virtual seconds when every
 * device is simulated (the run is then deterministic), else wall seconds
 * from the start of the run; busy is the union of a device's instruction
 * intervals on all its lanes (for asynchronous real devices an upper
 * bound: an operation ends when its event is seen complete).
 * In virtual time, an order between two devices (through host memory) is
 * kept but does not carry virtual time from one to the other; GEMM chunks
 * do not need it.
 *
 * Faults: cfg->fault_spec, else $POAS_FAULT, "ID:after=N[,...]" makes
 * device ID's operation number N (from 0, counting every instruction but
 * releases) fail before it starts. A device whose operation fails is
 * retired; its chunks that did not complete are emitted again on the
 * others (on the devices the plan left out that the source can run on,
 * once every device it used has failed), but for the units their
 * completed instructions finished in host memory (ins.result_u0/u1),
 * which count for the failed device. An instruction that wrote host
 * memory and did not finish a declared range leaves its part unknown: run
 * again when the source is rerunnable, else POAS_EDEVICE (applying its
 * update twice would be wrong). Every device failed: POAS_EDEVICE.
 *
 * Trace: cfg->trace_path, else $POAS_TRACE, gets a Chrome trace of the run
 * (chrome://tracing, ui.perfetto.dev): pid = device, tid = lane, one "X"
 * event per instruction with args device, chunk, bytes, predicted_us and
 * state, and a GEMM's m, n and k. Each run overwrites the file. */
int poas__schedule_run(const poas__devset *set, poas__work_source *src,
                       const poas__sched_config *cfg, poas_report *report);

#endif /* POAS_SCHEDULE_H */
