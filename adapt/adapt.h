/* adapt.h: a GEMM and its split turned into instructions. The work source
 * below hands the scheduler, for any range of units (rows or columns of C)
 * on any device, the instructions computing it:
 * - on a device that computes on host memory, one GEMM on the caller's
 *   matrices, in place;
 * - on any other device, the shared operand (op(B) for row blocks, op(A)
 *   for column blocks) allocated and copied once, then tiles cut to fit the
 *   device's memory with two buffers per operand, each tile a copy-in of its
 *   part of the other operand and of C (when beta != 0), a GEMM and a
 *   copy-out of C, so that copies overlap compute.
 * Every instruction declares the buffer regions it reads and writes; the
 * scheduler derives the order from those alone. Each element of C belongs
 * to exactly one tile, so beta is applied exactly once.
 *
 * The source predicts a range's time with the same pipeline optimize/ used
 * to plan it (poas__pipe), from the same models. */
#ifndef POAS_ADAPT_H
#define POAS_ADAPT_H

#include "optimize/optimize.h"
#include "schedule/graph.h"

typedef struct poas__gemm_source poas__gemm_source;

/* Creates the work source of a planned GEMM. `call` is the column-major
 * problem on host memory (operand mem fields are host addresses, offsets
 * 0, lds the caller's); `p` and `devs` are what the solver was given and
 * `plan` what it returned. The source keeps copies of all of it; the
 * caller's matrices must stay valid until the run ends. *out is the
 * source's poas__work_source, valid until poas__gemm_source_destroy.
 * Returns 0 or POAS_ENOMEM. */
int poas__gemm_source_create(const poas__gemm_call *call, const poas__opt_problem *p,
                             const poas__opt_device *devs, const poas__opt_result *plan,
                             poas__gemm_source **src, poas__work_source **out);
void poas__gemm_source_destroy(poas__gemm_source *src);

/* Device memory kept across runs (api/'s resident matrices), handed to a
 * source before its run. A matrix on a device is stored dense and
 * column-major: its stored rows times the element size apart per column.
 *
 * keep_c: C is computed into `mem` whole on `device` (m x n, ld = m) and
 * copied out from there, rather than through two tile buffers, so that it
 * is still on the device after the run.
 * resident: operand 'a' or 'b' is already on `device` in `mem`, as the
 * caller stores it (its stored rows and columns): tiles read it there and
 * nothing copies it in.
 * The source never allocates or frees such memory. POAS_EINVAL for a
 * device that computes on host memory or a bad operand name. */
int poas__gemm_source_keep_c(poas__gemm_source *src, int device, poas__mem mem);
int poas__gemm_source_resident(poas__gemm_source *src, int device, char operand, poas__mem mem);

#endif /* POAS_ADAPT_H */
