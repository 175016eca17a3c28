/* engine.h: the DAG runtime's core, shared by the GEMM runner (run.c) and
 * the task API (tasks.c). An engine owns one worker per device (plus a
 * pool of host threads for host calls that may run anywhere); instructions
 * are added one at a time, their dependencies inferred from the regions
 * they declare, and each worker runs its device's ready instructions on
 * the device's lanes.
 *
 * Ordering: a dependency between two lane operations (copy, gemm) of the
 * same asynchronous device is kept by the device itself, with an event and
 * lane_wait, so the successor may be submitted as soon as the predecessor
 * is; every other dependency (host calls, allocation, release, another
 * device) waits until the predecessor has completed on the host's side.
 *
 * Locking: one mutex guards everything below; run.c and tasks.c read these
 * structures only with it held (poas__engine_lock). Device calls are made
 * without it, on copies. */
#ifndef POAS_ENGINE_H
#define POAS_ENGINE_H

#include "schedule/graph.h"

#include <pthread.h>

/* ins.device for a host call that any host thread may run (the task API). */
#define POAS__HOST_ANY (-1)
/* Lanes an engine tells apart; a device with more has them folded. */
#define POAS__ENGINE_LANES 8

typedef enum poas__node_state {
  POAS__NODE_FREE = 0,  /* recycled slot */
  POAS__NODE_WAIT,      /* predecessors outstanding */
  POAS__NODE_READY,     /* in its worker's queue */
  POAS__NODE_RUNNING,   /* a worker is issuing it */
  POAS__NODE_SUBMITTED, /* on a lane, its event not yet seen complete */
  POAS__NODE_DONE,
  POAS__NODE_CANCELLED  /* its device failed before it completed */
} poas__node_state;

/* Called with the engine locked when a node finishes (rc 0: done). */
typedef void (*poas__node_done_fn)(void *arg, int rc);

typedef struct poas__node {
  poas__ins ins;
  poas__node_state state;
  unsigned gen;           /* bumped on recycling; access entries carry it */
  int npred;              /* unresolved predecessors */
  int nsucc, cap_succ;
  int *succ;              /* successor id << 1 | 1 when released at submission */
  int released_submit;    /* the submission-edge successors were released */
  int wait[POAS__ENGINE_LANES]; /* same-device predecessor to lane_wait on, per lane */
  uint64_t wait_seq[POAS__ENGINE_LANES];
  uint64_t seq;           /* order of its event's record on its device */
  uint64_t order;         /* the order it was added in: ready nodes run by it */
  poas__event ev;
  int has_ev;
  int ran;                /* it was issued to the device (for traces) */
  /* Its own operation failed (an injected fault among them): the error
   * that retired its device, where a cancelled node's came from another
   * (for traces). */
  int failed_here;
  int doomed;             /* out of memory adding it: cancelled instead of run */
  double t0, t1;          /* device clock at start and end */
  poas__node_done_fn done_fn;
  void *done_arg;
  int next_free;
} poas__node;

typedef struct poas__acc_entry {
  int node;
  unsigned gen;
  poas__access_mode mode;
  poas__region region;
} poas__acc_entry;

/* Accesses not known to be complete, kept apart by mode so that a reader
 * looks only at writers: many readers in flight cost nothing per new
 * reader. */
typedef struct poas__acc_list {
  int n, cap;
  poas__acc_entry *e;
} poas__acc_list;

typedef struct poas__ebuf {
  poas__gbuf desc;        /* desc.mem is set when its ALLOC ran */
  poas__acc_list writers, readers;
} poas__ebuf;

typedef enum poas__chunk_state {
  POAS__CHUNK_OPEN = 0,   /* instructions outstanding */
  POAS__CHUNK_COMPLETE,   /* every instruction finished (some maybe cancelled) */
  POAS__CHUNK_HANDLED     /* the runner has accounted for it */
} poas__chunk_state;

typedef struct poas__chunk {
  int device;
  int64_t u0, u1;
  int remaining;          /* unfinished nodes, + 1 until sealed */
  int cancelled;          /* some node was cancelled: the chunk must re-run */
  int host_written;       /* some node started writing host memory */
  poas__chunk_state state;
  double model_s;         /* the runner's predicted seconds for it (run.c) */
} poas__chunk;

typedef struct poas__engine poas__engine;

typedef struct poas__worker {
  poas__engine *e;
  int index;              /* device index, or ndev for the host pool */
  poas__device *dev;      /* NULL for the host pool */
  int async;              /* lane operations complete through events */
  int nthreads, started;
  pthread_t *threads;
  pthread_cond_t cond;
  int sleeping, syncing;
  int *ready;             /* heap of ready node ids, the earliest added first */
  int rcount, rcap;
  int *inflight;          /* ring of submitted node ids, oldest first */
  int ihead, icount, icap;
  /* A device with several issuing threads (issue_threads): events are
   * recorded and numbered (seq) under record_lock, so that a later seq is a
   * later record on its lane, which is what note_lane_wait counts on when
   * it keeps only the latest predecessor of a lane. */
  pthread_mutex_t record_lock;
  uint64_t seq;
  int failed;             /* the error that retired it, 0 when alive */
  int64_t ops, fault_after; /* injected failure: op number fault_after fails */
  double t_start, t_last; /* device clock at the engine's start / last finish */
  double lane_end[POAS__ENGINE_LANES]; /* wall time each lane's last op was seen done */
  uint64_t bytes_h2d, bytes_d2h;
} poas__worker;

struct poas__engine {
  pthread_mutex_t lock;
  pthread_cond_t coord;   /* chunk completed, device failed, or all drained */
  const poas__devset *set;
  int ndev;
  int virtual_time;
  int recycle;            /* reuse finished nodes (the task API, whose nodes are
                           * host calls: no successor waits on their events) */
  int cancel_after_doom;  /* see poas__engine_config */
  int doomed;             /* with it, the error of the first node doomed */
  int stop;
  int coord_waiters;
  poas__worker w[POAS_MAX_DEVICES + 1];
  int nnodes, cap_nodes, free_node;
  poas__node *nodes;
  int nbufs, cap_bufs;
  poas__ebuf *bufs;
  int nchunks, cap_chunks;
  poas__chunk *chunks;
  int64_t pending;        /* nodes added and not finished */
  uint64_t added;         /* nodes added so far (poas__node.order) */
  int failures;           /* devices retired */
  double wall_start;
};

typedef struct poas__engine_config {
  int host_threads;       /* threads of the host pool (0: none until needed, then 1) */
  int recycle;
  /* A node doomed for want of memory (see poas__engine_add) cancels every
   * node not started yet, but for releases (FREE), which still run: the
   * GEMM runner's, whose later nodes would compute on or copy out what the
   * doomed one never produced, with or without an edge to it that says so
   * (one not recorded for want of memory). The task API's tasks run after
   * a failed one, as poas.h says, and it leaves this 0. */
  int cancel_after_doom;
  const char *fault_spec; /* "ID:after=N[,ID:after=N]" or NULL */
} poas__engine_config;

int poas__engine_create(const poas__devset *set, const poas__engine_config *cfg,
                        poas__engine **out);
/* Waits for every node, stops and joins the workers, releases device
 * memory the graph left allocated. */
void poas__engine_destroy(poas__engine *e);

void poas__engine_lock(poas__engine *e);
void poas__engine_unlock(poas__engine *e);
/* Sleeps until a chunk completes, a device fails or pending reaches 0.
 * Locked. */
void poas__engine_wait(poas__engine *e);
/* Waits until pending is 0. Locked. */
void poas__engine_drain(poas__engine *e);

/* The rest are called locked. A buffer's id is its index. */
int poas__engine_add_buffer(poas__engine *e, const poas__gbuf *b);
/* Opens a chunk; its nodes are added with ins.chunk set to the id
 * returned, then it is sealed. */
int poas__engine_chunk_open(poas__engine *e, int device, int64_t u0, int64_t u1);
void poas__engine_chunk_seal(poas__engine *e, int chunk);
/* Adds an instruction; returns its node id, or an error when it was not
 * added. If a dependency cannot be recorded (out of memory) the node is
 * still added but doomed: cancelled with that error when its turn comes,
 * so its done_fn always runs once. done_fn may be NULL. */
int poas__engine_add(poas__engine *e, const poas__ins *ins, poas__node_done_fn done_fn,
                     void *done_arg);

/* Whether the instruction writes host memory (a buffer of device -1). */
int poas__engine_writes_host(const poas__engine *e, const poas__ins *in);

/* A device's clock: the furthest virtual lane clock for simulated devices
 * in virtual time, else the wall. Not locked. */
double poas__engine_clock(const poas__engine *e, int device);

#endif /* POAS_ENGINE_H */
