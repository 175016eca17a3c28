/* fuzz-gemm.c: libFuzzer entry for the public GEMM calls (poas_sgemm,
 * poas_dgemm and their _async forms). An input is decoded into one call:
 * the dtype, layout and transposes (unknown values too), sizes (small,
 * empty, negative or near 64-bit overflow), leading dimensions (exact,
 * padded, one short, zero, huge), alpha and beta (0, 1, NaN, infinities),
 * NULL matrices and a context. What poas.h promises is then checked
 * against a model of its rules written here, apart from the library's:
 * the return code is one the arguments call for and the detail names the
 * argument; a refused call writes nothing; nothing outside what BLAS
 * semantics let a call touch is touched (each matrix is allocated to the
 * byte, for AddressSanitizer); and an accepted call on a real device
 * leaves in C what a double-precision triple loop gives, NaNs in C not
 * propagating when beta is 0.
 *
 * Calls whose matrices fit FUZZ_CAP bytes each run on a real context
 * (cpu:threads=1, or opencl0 where PoCL has one); larger valid ones run
 * on a simulated device with small buffers only, since a sim computes
 * nothing and touches no host memory (devices/sim/sim.c): the call must
 * then be refused or return without touching them. Contexts are opened
 * once per process. Built and run by run-fuzz.sh (FUZZ_TARGET=gemm), not
 * by make check. */
#include "poas.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The most bytes a matrix may need for the call to run on a real device. */
#define FUZZ_CAP (64 << 10)
/* The buffers a call past FUZZ_CAP gets, on the sim. */
#define FUZZ_SMALL 64

enum { CTX_CPU, CTX_OPENCL, CTX_SIM, NCTX };
static poas_context *ctxs[NCTX];

/* The call being made, as C, for FAIL and for FUZZ_GEMM_SHOW=1. */
static char shown[512];

/* Stops the run with what went wrong and the call; libFuzzer keeps the
 * input. */
#define FAIL(...)                                                                      \
  do {                                                                                 \
    fprintf(stderr, "fuzz-gemm: %s\nfuzz-gemm: ", shown);                               \
    fprintf(stderr, __VA_ARGS__);                                                      \
    fputc('\n', stderr);                                                               \
    abort();                                                                           \
  } while (0)

static poas_context *open_ctx(const char *devices) {
  poas_options o;
  poas_options_init(&o);
  o.devices = devices;
  o.no_profile = 1;
  o.no_adapt = 1; /* plans stay the same from run to run */
  o.log_level = 0;
  poas_context *ctx = NULL;
  return poas_init(&ctx, &o) == 0 ? ctx : NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  ctxs[CTX_CPU] = open_ctx("cpu:threads=1");
  ctxs[CTX_OPENCL] = open_ctx("opencl0");
  ctxs[CTX_SIM] = open_ctx("sim");
  if (!ctxs[CTX_CPU] || !ctxs[CTX_SIM])
    FAIL("cannot open the cpu:threads=1 and sim contexts: %s", poas_error_detail());
  if (!ctxs[CTX_OPENCL])
    ctxs[CTX_OPENCL] = ctxs[CTX_CPU];
  return 0;
}

/* ------------------------------------------------------------ decoding */

/* The input, read a byte at a time; past its end, zeros. */
typedef struct reader {
  const uint8_t *p;
  size_t n;
} reader;

static uint8_t byte(reader *r) {
  if (!r->n)
    return 0;
  r->n--;
  return *r->p++;
}

static uint64_t word(reader *r) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v = v << 8 | byte(r);
  return v;
}

/* Sizes and leading dimensions at the edges of 64-bit byte counts. */
static const int64_t huge[] = {
    INT64_MAX,          INT64_MAX / 2,      INT64_MAX / 4,         INT64_MAX / 4 + 1,
    INT64_MAX / 8,      INT64_MAX / 8 + 1,  INT64_MAX / 16,        (int64_t)1 << 31,
    (int64_t)1 << 32,   (int64_t)1 << 40,   3037000499,            3037000500,
    (int64_t)1 << 20,   (int64_t)1 << 28,   (int64_t)SIZE_MAX / 8 - 1, 100000,
};
#define NHUGE (sizeof huge / sizeof *huge)

static int64_t size_from(reader *r) {
  uint8_t b = byte(r);
  if (b < 200)
    return b % 33;
  if (b < 216)
    return huge[b % NHUGE];
  if (b < 224)
    return 33 + byte(r) % 300;
  if (b < 236)
    return (int64_t[]){-1, -2, INT64_MIN, -((int64_t)1 << 32)}[b % 4];
  return (int64_t)word(r);
}

/* A leading dimension for a matrix whose lines hold `run` elements. */
static int64_t ld_from(reader *r, int64_t run) {
  int64_t least = run > 1 ? run : 1;
  uint8_t b = byte(r) % 16;
  if (b < 8)
    return least;
  if (b < 11)
    return least < INT64_MAX - 8 ? least + 1 + byte(r) % 8 : least;
  if (b < 13)
    return least - 1;
  if (b == 13)
    return 0;
  if (b == 14)
    return huge[byte(r) % NHUGE];
  return (int64_t)word(r);
}

static int enum_from(reader *r, int good0, int good1, int bad0) {
  uint8_t b = byte(r) % 8;
  if (b < 3)
    return good0;
  if (b < 6)
    return good1;
  if (b == 6)
    return (int[]){0, -1, bad0, good0 - 1, good1 + 1, 1 << 30, INT32_MIN, 113}[byte(r) % 8];
  return (int)(uint32_t)word(r);
}

static double scalar_from(reader *r) {
  uint8_t b = byte(r) % 16;
  static const double table[] = {1, 0, -1, 0.5, -0.0, NAN, INFINITY, -INFINITY, 1e30, 1e-30};
  if (b < sizeof table / sizeof *table)
    return table[b];
  return ((int)byte(r) - 128) / 32.0;
}

/* One call, as the input gives it. */
typedef struct call {
  int dbl, async, ctx_null, which;
  poas_layout layout;
  poas_op ta, tb;
  int64_t m, n, k, ld[3];
  double alpha, beta;
  int null[3];
  uint8_t seed;
} call;

/* Matrix i (A, B, C) as stored: `lines` runs of `run` elements. */
static void stored(const call *c, int i, int64_t *run, int64_t *lines) {
  int64_t rows = i == 0 ? c->m : i == 1 ? c->k : c->m;
  int64_t cols = i == 0 ? c->k : i == 1 ? c->n : c->n;
  poas_op op = i == 0 ? c->ta : i == 1 ? c->tb : POAS_NO_TRANS;
  if (op == POAS_TRANS) {
    int64_t t = rows;
    rows = cols, cols = t;
  }
  int col = c->layout != POAS_ROW_MAJOR;
  *run = col ? rows : cols;
  *lines = col ? cols : rows;
}

static call decode(reader *r) {
  call c;
  uint8_t flags = byte(r);
  c.dbl = flags & 1;
  c.async = (flags >> 1) & 1;
  c.which = (flags >> 2) % 3;
  c.ctx_null = (flags >> 4) == 15;
  c.layout = (poas_layout)enum_from(r, POAS_COL_MAJOR, POAS_ROW_MAJOR, 111);
  c.ta = (poas_op)enum_from(r, POAS_NO_TRANS, POAS_TRANS, POAS_COL_MAJOR);
  c.tb = (poas_op)enum_from(r, POAS_NO_TRANS, POAS_TRANS, POAS_ROW_MAJOR);
  c.m = size_from(r);
  c.n = size_from(r);
  c.k = size_from(r);
  for (int i = 0; i < 3; i++) {
    int64_t run, lines;
    stored(&c, i, &run, &lines);
    c.ld[i] = ld_from(r, run);
  }
  c.alpha = scalar_from(r);
  c.beta = scalar_from(r);
  uint8_t nulls = byte(r);
  for (int i = 0; i < 3; i++)
    c.null[i] = nulls < 8 && (nulls >> i) & 1;
  c.seed = byte(r);
  return c;
}

/* ------------------------------------------------------- what poas.h says */

/* The codes a call may return, each with what its detail must say. */
typedef struct allowed {
  int n;
  int code[16];
  char says[16][96];
} allowed;

static void allow(allowed *a, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void allow(allowed *a, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  a->code[a->n] = code;
  vsnprintf(a->says[a->n], sizeof a->says[a->n], fmt, ap);
  va_end(ap);
  a->n++;
}

/* Whether x * y * z (none negative, z > 0) exceeds `limit`: x * y in
 * 128 bits, which three factors could overflow. */
static int product_past(int64_t x, int64_t y, int64_t z, int64_t limit) {
  return (unsigned __int128)x * (unsigned __int128)y > (unsigned __int128)(limit / z);
}

/* The bytes a matrix's elements span, BLAS-wise: (lines - 1) ld + run
 * elements, none when it has none. Only for sizes and lds that passed. */
static unsigned __int128 span_bytes(int64_t run, int64_t lines, int64_t ld, size_t elem) {
  if (run <= 0 || lines <= 0)
    return 0;
  return ((unsigned __int128)(lines - 1) * (unsigned __int128)ld + (unsigned __int128)run) * elem;
}

static const char *const names[3] = {"A", "B", "C"};
static const char *const ld_names[3] = {"lda", "ldb", "ldc"};

/* Everything the call breaks, by poas.h's rules; none: it must succeed.
 * Where the rules leave room (a leading dimension whose lines take more
 * than INT64_MAX / 8 elements but fewer than INT64_MAX bytes, which the
 * library refuses for every dtype), either answer is allowed: *lenient. */
static allowed rules(const call *c, void *const mat[3], int *lenient) {
  allowed a = {0};
  size_t elem = c->dbl ? 8 : 4;
  *lenient = 0;
  if (c->ctx_null)
    allow(&a, POAS_ENULL, "ctx is NULL");
  if (c->layout != POAS_COL_MAJOR && c->layout != POAS_ROW_MAJOR)
    allow(&a, POAS_ELAYOUT, "layout value %d", (int)c->layout);
  if (c->ta != POAS_NO_TRANS && c->ta != POAS_TRANS)
    allow(&a, POAS_EOP, "transa value %d", (int)c->ta);
  if (c->tb != POAS_NO_TRANS && c->tb != POAS_TRANS)
    allow(&a, POAS_EOP, "transb value %d", (int)c->tb);
  if (a.n)
    return a; /* the shape means nothing without them */
  char sizes[80];
  snprintf(sizes, sizeof sizes, "m=%" PRId64 " n=%" PRId64 " k=%" PRId64, c->m, c->n, c->k);
  if (c->m < 0 || c->n < 0 || c->k < 0) {
    allow(&a, POAS_ESIZE, "%s", sizes);
    return a;
  }
  if (product_past(c->m, c->k, (int64_t)elem, INT64_MAX) ||
      product_past(c->k, c->n, (int64_t)elem, INT64_MAX) ||
      product_past(c->m, c->n, (int64_t)elem, INT64_MAX))
    allow(&a, POAS_EINVAL, "%s", sizes);
  int64_t run[3], lines[3];
  int lds_ok = 1;
  for (int i = 0; i < 3; i++) {
    stored(c, i, &run[i], &lines[i]);
    if (c->ld[i] < (run[i] > 1 ? run[i] : 1)) {
      allow(&a, POAS_ELD, "%s=%" PRId64, ld_names[i], c->ld[i]);
      lds_ok = 0;
    }
  }
  if (!lds_ok || a.n)
    return a;
  for (int i = 0; i < 3; i++) {
    int64_t whole = lines[i] > 1 ? lines[i] : 1;
    if (product_past(whole, c->ld[i], (int64_t)elem, INT64_MAX))
      allow(&a, POAS_EINVAL, "%s=%" PRId64, ld_names[i], c->ld[i]);
    else if (product_past(whole, c->ld[i], 8, INT64_MAX)) {
      allow(&a, POAS_EINVAL, "%s=%" PRId64, ld_names[i], c->ld[i]);
      *lenient = 1;
    }
  }
  if (a.n)
    return a;
  int c_used = c->m > 0 && c->n > 0;
  int ab_used = c_used && c->k > 0 && c->alpha != 0;
  if (c_used && !mat[2])
    allow(&a, POAS_ENULL, "C is NULL");
  for (int i = 0; ab_used && i < 2; i++)
    if (!mat[i])
      allow(&a, POAS_ENULL, "%s is NULL", names[i]);
  if (a.n)
    return a;
  /* The matrices are separate allocations; past FUZZ_CAP their spans, far
   * larger than the buffers, may meet, which the library may refuse. */
  unsigned __int128 c0 = (uintptr_t)mat[2], c1 = c0 + span_bytes(run[2], lines[2], c->ld[2], elem);
  for (int i = 0; ab_used && i < 2; i++) {
    unsigned __int128 x0 = (uintptr_t)mat[i], x1 = x0 + span_bytes(run[i], lines[i], c->ld[i], elem);
    if (c0 < x1 && x0 < c1) {
      allow(&a, POAS_EOVERLAP, "C overlaps %s", names[i]);
      *lenient = 1;
    }
  }
  return a;
}

/* ----------------------------------------------------------- the matrices */

/* Matrix i's bytes, or -1 past FUZZ_CAP or when its sizes or ld are bad. */
static int64_t needed(const call *c, int i) {
  int64_t run, lines;
  stored(c, i, &run, &lines);
  if (run < 0 || lines < 0 || c->ld[i] < (run > 1 ? run : 1) ||
      product_past(lines > 1 ? lines - 1 : 0, c->ld[i], 1, FUZZ_CAP) || run > FUZZ_CAP)
    return -1;
  unsigned __int128 b = span_bytes(run, lines, c->ld[i], c->dbl ? 8 : 4);
  return b <= FUZZ_CAP ? (int64_t)b : -1;
}

static double get(const call *c, const void *p, int64_t i) {
  return c->dbl ? ((const double *)p)[i] : ((const float *)p)[i];
}

static void put(const call *c, void *p, int64_t i, double v) {
  if (c->dbl)
    ((double *)p)[i] = v;
  else
    ((float *)p)[i] = (float)v;
}

/* Known values: small multiples of 1/8, so that products are exact. */
static void fill(const call *c, void *p, int64_t bytes, uint32_t seed) {
  int64_t count = bytes / (c->dbl ? 8 : 4);
  for (int64_t i = 0; i < count; i++) {
    seed = seed * 1664525u + 1013904223u;
    put(c, p, i, (double)((int)(seed >> 24) - 128) / 8.0);
  }
}

/* Element (r, col) of matrix i, whose (0, 0) is p, in the call's layout. */
static int64_t at(const call *c, int i, int64_t r, int64_t col) {
  return c->layout == POAS_COL_MAJOR ? r + col * c->ld[i] : r * c->ld[i] + col;
}

/* Checks C after an accepted call on a real device: every element of the
 * m x n result within a dtype-sized bound of the reference, and the
 * elements between its lines as they were, bit for bit. */
static void check_result(const call *c, void *const mat[3], const void *c0, int64_t cbytes) {
  double eps = c->dbl ? DBL_EPSILON : FLT_EPSILON, top = c->dbl ? DBL_MAX : FLT_MAX;
  size_t elem = c->dbl ? 8 : 4;
  char *inside = calloc((size_t)cbytes / elem + 1, 1);
  if (!inside)
    FAIL("out of memory");
  for (int64_t r = 0; c->n > 0 && r < c->m; r++)
    for (int64_t col = 0; col < c->n; col++) {
      int64_t ci = at(c, 2, r, col);
      inside[ci] = 1;
      double sum = 0, mag = 0;
      for (int64_t p = 0; c->alpha != 0 && p < c->k; p++) {
        double x = get(c, mat[0], c->ta == POAS_NO_TRANS ? at(c, 0, r, p) : at(c, 0, p, r));
        double y = get(c, mat[1], c->tb == POAS_NO_TRANS ? at(c, 1, p, col) : at(c, 1, col, p));
        sum += x * y, mag += fabs(x * y);
      }
      /* BLAS leaves alpha out with k = 0 and C unread with beta = 0. */
      double old = c->beta != 0 ? c->beta * get(c, c0, ci) : 0;
      double ab = c->k > 0 ? c->alpha * sum : 0, want = ab + old;
      double scale = (c->k > 0 ? fabs(c->alpha) * mag : 0) + fabs(old);
      double got = get(c, mat[2], ci);
      if (!isfinite(want) || !isfinite(scale) || scale > top / 4) {
        /* Infinities and overflow: only that the result is not finite
         * where the reference is not, and not NaN where it is +-inf
         * from finite operands, is certain; leave those alone. */
        if (!isfinite(want) && isfinite(got) && isfinite(scale))
          FAIL("C(%" PRId64 ",%" PRId64 ") = %g, reference %g", r, col, got, want);
        continue;
      }
      double bound = 4 * eps * ((double)c->k + 2) * scale + (c->dbl ? DBL_MIN : FLT_MIN);
      if (!(fabs(got - want) <= bound))
        FAIL("C(%" PRId64 ",%" PRId64 ") = %.9g, reference %.9g (bound %.3g), beta %g", r, col,
             got, want, bound, c->beta);
    }
  for (int64_t i = 0; i < cbytes / (int64_t)elem; i++)
    if (!inside[i] && memcmp((char *)mat[2] + i * elem, (const char *)c0 + i * elem, elem))
      FAIL("C's element %" PRId64 ", between its lines, was written", i);
  free(inside);
}

/* ----------------------------------------------------------------- a run */

static int gemm(const call *c, poas_context *ctx, void *const mat[3]) {
  poas_task *task = NULL;
  poas_task **out = c->async ? &task : NULL;
  int rc;
  if (c->dbl)
    rc = c->async ? poas_dgemm_async(ctx, c->layout, c->ta, c->tb, c->m, c->n, c->k, c->alpha,
                                     mat[0], c->ld[0], mat[1], c->ld[1], c->beta, mat[2],
                                     c->ld[2], out)
                  : poas_dgemm(ctx, c->layout, c->ta, c->tb, c->m, c->n, c->k, c->alpha, mat[0],
                               c->ld[0], mat[1], c->ld[1], c->beta, mat[2], c->ld[2]);
  else
    rc = c->async ? poas_sgemm_async(ctx, c->layout, c->ta, c->tb, c->m, c->n, c->k,
                                     (float)c->alpha, mat[0], c->ld[0], mat[1], c->ld[1],
                                     (float)c->beta, mat[2], c->ld[2], out)
                  : poas_sgemm(ctx, c->layout, c->ta, c->tb, c->m, c->n, c->k, (float)c->alpha,
                               mat[0], c->ld[0], mat[1], c->ld[1], (float)c->beta, mat[2],
                               c->ld[2]);
  if (c->async && rc == 0) {
    if (!task)
      FAIL("an accepted asynchronous call gave no task");
    rc = poas_task_wait(task);
  } else if (c->async && task) {
    FAIL("a refused asynchronous call gave a task");
  }
  return rc;
}

static void show(const call *c, void *const mat[3], int which) {
  static const char *const ctx_names[NCTX] = {"cpu:threads=1", "opencl0", "sim"};
  snprintf(shown, sizeof shown,
           "poas_%cgemm%s(%s, %d, %d, %d, m=%" PRId64 ", n=%" PRId64 ", k=%" PRId64
           ", alpha=%g, A%s, lda=%" PRId64 ", B%s, ldb=%" PRId64 ", beta=%g, C%s, ldc=%" PRId64 ")",
           c->dbl ? 'd' : 's', c->async ? "_async" : "", c->ctx_null ? "NULL" : ctx_names[which],
           (int)c->layout, (int)c->ta, (int)c->tb, c->m, c->n, c->k, c->alpha,
           mat[0] ? "" : "=NULL", c->ld[0], mat[1] ? "" : "=NULL", c->ld[1], c->beta,
           mat[2] ? "" : "=NULL", c->ld[2]);
  if (getenv("FUZZ_GEMM_SHOW"))
    fprintf(stderr, "fuzz-gemm: %s\n", shown);
}

/* Whether the code and detail are among those allowed. */
static int agrees(int rc, const char *detail, const allowed *a) {
  for (int i = 0; i < a->n; i++)
    if (rc == a->code[i] && strstr(detail, a->says[i]))
      return 1;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  reader r = {data, size};
  call c = decode(&r);
  if (!c.dbl) /* the values a float call sees */
    c.alpha = (float)c.alpha, c.beta = (float)c.beta;
  int64_t bytes[3];
  int small = 1;
  for (int i = 0; i < 3; i++)
    small &= (bytes[i] = needed(&c, i)) >= 0;
  /* Past the cap, the sim context and FUZZ_SMALL bytes a matrix. */
  void *mat[3] = {NULL, NULL, NULL}, *saved[3] = {NULL, NULL, NULL};
  for (int i = 0; i < 3; i++) {
    if (!small)
      bytes[i] = FUZZ_SMALL;
    saved[i] = malloc((size_t)bytes[i] + 1);
    mat[i] = c.null[i] ? NULL : malloc((size_t)bytes[i]);
    if (!saved[i] || (!c.null[i] && !mat[i]))
      FAIL("out of memory");
    if (mat[i]) {
      fill(&c, mat[i], bytes[i], c.seed * 3u + (uint32_t)i);
      /* With beta = 0, C must not be read: NaNs show a read. */
      if (i == 2 && c.beta == 0)
        for (int64_t e = 0; e < bytes[i] / (c.dbl ? 8 : 4); e++)
          put(&c, mat[i], e, NAN);
      memcpy(saved[i], mat[i], (size_t)bytes[i]);
    }
  }
  int lenient;
  allowed a = rules(&c, mat, &lenient);
  /* A call the rules refuse for certain may go to a real device at any
   * size: it must touch nothing there either. One they only let the
   * library refuse (spans that meet, say) may run: past the cap, on the
   * sim. */
  int which = small || (a.n && !lenient) ? c.which : CTX_SIM;
  poas_context *ctx = c.ctx_null ? NULL : ctxs[which];
  show(&c, mat, which);
  int rc = gemm(&c, ctx, mat);
  const char *detail = poas_error_detail();
  /* A sim may find a valid call too big for its memory. */
  int too_big = which == CTX_SIM && (rc == POAS_ETOOBIG || rc == POAS_ENOMEM);
  if (a.n && !agrees(rc, detail, &a) && !(lenient && (rc == 0 || too_big)))
    FAIL("returned %s '%s'; expected %s '%s'%s", poas_err_name(rc), detail,
         poas_err_name(a.code[0]), a.says[0], a.n > 1 ? " or another" : "");
  if (!a.n && rc != 0 && !too_big)
    FAIL("a valid call returned %s '%s'", poas_err_name(rc), detail);
  if (rc == 0 && detail[0])
    FAIL("a call that succeeded left the detail '%s'", detail);
  if (rc != 0 && !detail[0])
    FAIL("%s without a detail", poas_err_name(rc));
  for (int i = 0; i < 3; i++) {
    if (!mat[i])
      continue;
    int same = memcmp(mat[i], saved[i], (size_t)bytes[i]) == 0;
    if (!same && (i < 2 || rc != 0 || which == CTX_SIM))
      FAIL("%s was written by a call that %s", names[i],
           i < 2 ? "only reads it" : rc ? "was refused" : "ran on a sim");
  }
  if (rc == 0 && which != CTX_SIM && mat[2])
    check_result(&c, mat, saved[2], bytes[2]);
  for (int i = 0; i < 3; i++)
    free(mat[i]), free(saved[i]);
  return 0;
}
