/* graph.h: the data handed from adapt/ to schedule/. An instruction graph
 * is a list of instructions (alloc, copy-in, gemm, transpose, copy-out,
 * free, host call) on devices, each declaring which regions of which buffers it reads
 * and writes; the scheduler infers the dependencies from those accesses
 * and runs the instructions on the devices' lanes.
 *
 * Work is pulled, not pushed: adapt/ implements a poas__work_source whose
 * emit() appends the instructions for a range of work units (rows or
 * columns of C) on one device. The scheduler emits each device's static
 * share up front and the remainder on demand (the guided and dynamic
 * policies), and re-emits a failed device's unfinished ranges on the
 * others. */
#ifndef POAS_GRAPH_H
#define POAS_GRAPH_H

#include "devices/device.h"

/* Lane hints: a backend with fewer lanes folds them (lane % nlanes). */
enum { POAS__LANE_H2D = 0, POAS__LANE_COMPUTE = 1, POAS__LANE_D2H = 2 };

/* A buffer: host memory (device == -1; the caller's matrices) or device
 * memory allocated by an ALLOC instruction. Regions are rectangles in its
 * 2-D view: `lines` lines of `pitch` bytes (a column-major matrix's columns,
 * ld * element size apart). */
typedef struct poas__gbuf {
  int device;          /* index in the devset, -1 for host memory */
  void *host;          /* base address when device == -1 */
  size_t pitch;        /* bytes from one line to the next */
  size_t lines;        /* number of lines */
  poas__mem mem;       /* device memory, set when the ALLOC runs */
  int external;        /* device memory the caller owns: mem is set from the
                        * start, and no instruction allocates or frees it */
} poas__gbuf;

/* Lines [line0, line1) and bytes [byte0, byte1) of each line of a buffer. */
typedef struct poas__region {
  int buf;
  size_t line0, line1, byte0, byte1;
} poas__region;

typedef enum poas__access_mode { POAS__READ = 1, POAS__WRITE = 2, POAS__RW = 3 } poas__access_mode;

typedef struct poas__access {
  poas__region region;
  poas__access_mode mode;
} poas__access;

typedef enum poas__ins_kind {
  POAS__INS_ALLOC,  /* allocate buf (size pitch * lines) on its device */
  POAS__INS_FREE,   /* free buf */
  POAS__INS_H2D,    /* copy host -> buf */
  POAS__INS_D2H,    /* copy buf -> host */
  POAS__INS_GEMM,   /* gemm on buffers (host buffers for host_memory devices) */
  POAS__INS_HOST,   /* a host function, for the task API */
  POAS__INS_TRANSPOSE /* dst buf = src buf transposed, on the device */
} poas__ins_kind;

/* A task's accesses (POAS_TASK_MAX_ACCESS) and the devices' region. */
#define POAS__MAX_ACCESS 5

typedef struct poas__ins {
  poas__ins_kind kind;
  int device;          /* index in the devset (the host call's device too;
                        * -1: a host call any host thread may run) */
  int lane;            /* POAS__LANE_* hint */
  int chunk;           /* work chunk it belongs to; -1 for none */
  /* The units [result_u0, result_u1) of its chunk whose final result is in
   * host memory once it completes (a tile's copy out, a GEMM on host
   * memory); equal: none. When the chunk's device fails, the units its
   * completed instructions finished are kept, and only the rest run again. */
  int64_t result_u0, result_u1;
  double predicted_s;  /* the model's time for it, for traces */
  uint64_t bytes;      /* bytes a copy moves */
  int naccess;
  poas__access access[POAS__MAX_ACCESS];
  union {
    struct {
      int buf;
    } alloc, free;
    struct {
      int dst_buf;     /* device buffer */
      const void *src; /* host address of the block's first byte */
      poas__copy2d shape;
    } h2d;
    struct {
      void *dst;       /* host address of the block's first byte */
      int src_buf;
      poas__copy2d shape;
    } d2h;
    struct {
      /* call.a/b/c.mem are filled at run time from the buffers;
       * call.*.off and .ld are the adapter's. */
      poas__gemm_call call;
      int a_buf, b_buf, c_buf;
    } gemm;
    struct {
      /* call.src/dst.mem are filled at run time from the buffers. */
      poas__transpose_call call;
      int src_buf, dst_buf;
    } transpose;
    struct {
      int (*fn)(void *arg);
      void *arg;
    } host;
  } u;
} poas__ins;

typedef struct poas__graph {
  int nbuf, cap_buf;
  poas__gbuf *buf;
  int nins, cap_ins;
  poas__ins *ins;
} poas__graph;

void poas__graph_init(poas__graph *g);
void poas__graph_free(poas__graph *g);
/* Appends; returns the new index or POAS_ENOMEM. */
int poas__graph_add_buffer(poas__graph *g, const poas__gbuf *b);
int poas__graph_add(poas__graph *g, const poas__ins *ins);
/* Whether two regions intersect (same buffer, overlapping rectangles). */
int poas__region_overlap(const poas__region *a, const poas__region *b);

/* A source of work in units (rows or columns of C). */
typedef struct poas__work_source {
  void *user;
  int64_t total_units;
  int64_t granule;     /* ranges handed out are multiples of this, but the last */
  /* 1: a range's instructions overwrite the host memory they write and
   * read none of it (a GEMM with beta = 0), so a range whose device failed
   * while writing part of its result to host memory can run again
   * elsewhere; 0: it may read what it writes (beta != 0), and running that
   * part twice would apply its update twice (parts that instructions
   * finished, ins.result_u0/u1, are kept either way). */
  int rerunnable;
  /* Appends to g the instructions computing units [u0, u1) on device
   * `device`, tagged with chunk id `chunk`; the source may reuse buffers
   * it emitted earlier on that device (the shared operand). Returns 0 or
   * an error. */
  int (*emit)(void *user, poas__graph *g, int device, int64_t u0, int64_t u1, int chunk);
  /* Appends the instructions that release what the source left on device
   * `device` (shared operands); called once per device at the end. */
  int (*finish)(void *user, poas__graph *g, int device);
  /* Predicted seconds for units [u0, u1) on device, as emit would build
   * them (for the guided policy's sizing and for traces). */
  double (*predict)(void *user, int device, int64_t u0, int64_t u1);
  /* Whether emit can put units on `device` at all (a GEMM's device whose
   * memory holds not one tile cannot); NULL: every device can. The
   * scheduler asks it of the devices the plan left out before they take
   * over from failed ones. */
  int (*runs_on)(void *user, int device);
} poas__work_source;

#endif /* POAS_GRAPH_H */
