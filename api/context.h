/* context.h: the inside of a poas_context, shared by the files of api/.
 * The phases below api/ never see this struct: api/ hands each of them the
 * pieces it needs. */
#ifndef POAS_CONTEXT_H
#define POAS_CONTEXT_H

#include "devices/device.h"
#include "models/model.h"
#include "optimize/optimize.h"
#include "poas.h"
#include "predict/predict.h"
#include "schedule/schedule.h"

/* A GEMM normalised to column-major, after validation: what the phases
 * below api/ work on. Row-major calls are turned into this by swapping the
 * operands (C^T = op(B)^T op(A)^T). */
typedef struct poas__gemm_problem {
  poas_dtype dtype;
  poas_op transa, transb;
  int64_t m, n, k;
  double alpha, beta;
  const void *a, *b;
  void *c;
  int64_t lda, ldb, ldc;
  int row_major;           /* the caller's layout was row-major (m, n swapped) */
} poas__gemm_problem;

/* Sets p's layout, transposes and sizes from a call in either layout,
 * swapping the operands' roles for row-major (pointers and leading
 * dimensions are the caller's business). POAS_ELAYOUT for a bad layout. */
int poas__gemm_shape(poas__gemm_problem *p, poas_layout layout, poas_op transa, poas_op transb,
                     int64_t m, int64_t n, int64_t k);

struct poas_context {
  poas__devset devices;
  poas__device_model models[POAS_MAX_DEVICES]; /* models[i] for devices.dev[i] */
  poas__profile_status profile;
  poas__policy sched;      /* from options, POAS_SCHED, else guided */
  char *trace_path;        /* NULL: no trace */
  int has_report;
  poas_report report;
  struct poas__tasks *tasks;  /* the task runtime, from the first task on */
  poas_buffer *buffers;       /* registered buffers, released at finalize */
};

/* Runs a validated, normalised GEMM on the context's devices and fills
 * ctx->report. */
int poas__gemm_run(poas_context *ctx, const poas__gemm_problem *p);

/* What the solver was given for a problem on the context's devices, and
 * what it returned: the one path from a problem to a plan, shared by
 * poas__gemm_run and poas_plan_gemm. */
typedef struct poas__gemm_plan {
  poas__opt_problem prob;
  poas__opt_device dev[POAS_MAX_DEVICES];
  poas__opt_result res;
} poas__gemm_plan;

/* Plans a normalised problem (p's pointers are not used). */
int poas__gemm_plan_make(poas_context *ctx, const poas__gemm_problem *p, poas__gemm_plan *out);

/* The context's task runtime, started on first use (api/tasks.c). */
int poas__context_tasks(poas_context *ctx, struct poas__tasks **out);
/* Stops the task runtime after its tasks and releases registered buffers;
 * for poas_finalize. */
void poas__context_tasks_close(poas_context *ctx);

#endif /* POAS_CONTEXT_H */
