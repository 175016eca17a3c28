/* core.h: the ground floor every folder may use: logging, clocks, checked
 * arithmetic, small string helpers and the device-selection parser.
 * Nothing here knows about devices, models or plans. */
#ifndef POAS_CORE_H
#define POAS_CORE_H

/* config.h first: it defines _GNU_SOURCE before any system header. */
#include "config.h"
#include "poas.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define POAS__PRINTF(f, a) __attribute__((format(printf, f, a)))
#define POAS__UNUSED __attribute__((unused))
#else
#define POAS__PRINTF(f, a)
#define POAS__UNUSED
#endif

#define POAS__MIN(a, b) ((a) < (b) ? (a) : (b))
#define POAS__MAX(a, b) ((a) > (b) ? (a) : (b))
#define POAS__ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* The elements of a rows x cols operand once each side is rounded up to a
 * multiple of `pad` (1: none), as a GEMM library that copies operands into
 * whole blocks allocates and indexes them (devices/opencl/opencl.c). A
 * double: exact to 2^53, and it cannot wrap. */
static inline double poas__padded_elems(int64_t rows, int64_t cols, int64_t pad) {
  int64_t p = pad > 1 ? pad : 1;
  double r = (double)(rows / p + (rows % p != 0)), c = (double)(cols / p + (cols % p != 0));
  return r * (double)p * c * (double)p;
}
/* The pieces a device may run a GEMM in (poas__device.gemm_block, and
 * the OpenCL backend's block=N): a multiple of POAS__GEMM_BLOCK_STEP,
 * CLBlast's work-group tile on CPU devices, so that no piece but the last
 * of a side is padded, and at most POAS__GEMM_BLOCK_MAX, a piece that
 * already runs for seconds on any device met so far. */
#define POAS__GEMM_BLOCK_STEP 32
#define POAS__GEMM_BLOCK_MAX 8192

/* The block CLBlast's indirect GEMM computes C in on the devices POAS has
 * met (devices/opencl/opencl.c), which the OpenCL backend declares as
 * poas__device.gemm_align. */
#define POAS__OCL_GEMM_ALIGN 32

/* What a device declares to plans about its GEMM beyond its models: the
 * poas__device fields of the same names (gemm_wants_bt, gemm_align,
 * gemm_tile_bytes, max_buffer_bytes, gemm_max_elems, gemm_index_pad,
 * gemm_scratch_pad, gemm_scratch_min_mnk). Profiles record it, and a sim
 * that replays the device declares the same, so that its plans tile, pad
 * and transpose as the device's did. All 0 on the CPU and CUDA devices.
 * Here, on the ground, as devices/ and models/ both hold it. */
typedef struct poas__gemm_decl {
  int wants_bt;
  int align;
  uint64_t tile_bytes;
  uint64_t max_buffer_bytes;
  int64_t max_elems;
  int64_t index_pad;
  int64_t scratch_pad;
  int64_t scratch_min_mnk;
} poas__gemm_decl;

/* Short sides of C (rows or columns) up to which a host-thread device's
 * GEMM thread count is chosen per call (poas__device.threads_by_side, the
 * model's copy). */
#define POAS__FEW_SIDE 32

/* The short side of an m x n C when it is from 1 to `most`, else 0, and
 * which side it is (*side: 0 rows, 1 columns; columns on a tie). Thin-block
 * factors and per-call thread counts are both keyed on it. */
static inline int64_t poas__short_side(int64_t m, int64_t n, int64_t most, int *side) {
  *side = n <= m;
  int64_t s = *side ? n : m;
  return s >= 1 && s <= most ? s : 0;
}

/* The entry of a threads table (poas__device.threads_by_side, and the
 * model's copy) for an m x n C of dtype dt: 0 (all threads) unless its
 * shorter side, columns on a tie, is at most POAS__FEW_SIDE. */
static inline int poas__few_threads(const uint8_t t[2][2][POAS__FEW_SIDE + 1], poas_dtype dt,
                                    int64_t m, int64_t n) {
  int side;
  int64_t s = poas__short_side(m, n, POAS__FEW_SIDE, &side);
  return s ? t[dt == POAS_FLOAT64][side][s] : 0;
}

/* ---------------------------------------------------------------- logging */

enum { POAS__LOG_OFF = 0, POAS__LOG_WARN = 1, POAS__LOG_INFO = 2, POAS__LOG_DEBUG = 3 };

/* The process-wide log level: the most verbose of POAS_LOG's (read at
 * the first message, and again by poas__log_reread_env) and those held
 * now. A context whose options set a level holds it from poas_init to
 * poas_finalize (hold and release in pairs). Messages go to stderr
 * prefixed "poas: ", or bare to the program's handler
 * (poas_set_log_handler). */
void poas__log_reread_env(void);
void poas__log_hold(int level);
void poas__log_release(int level);
int poas__log_level(void);
void poas__log(int level, const char *fmt, ...) POAS__PRINTF(2, 3);
#define poas__warn(...) poas__log(POAS__LOG_WARN, __VA_ARGS__)
#define poas__info(...) poas__log(POAS__LOG_INFO, __VA_ARGS__)
#define poas__debug(...) poas__log(POAS__LOG_DEBUG, __VA_ARGS__)

/* Sets the thread's error detail (what poas_error_detail() returns) and
 * logs it at warning level; returns `err` so callers can `return
 * poas__fail(POAS_EIO, "...")`. poas__clear_detail() empties it. */
int poas__fail(int err, const char *fmt, ...) POAS__PRINTF(2, 3);
void poas__clear_detail(void);
/* While on (per thread), poas__fail still sets the detail but logs it only
 * at debug level: for probes whose failures are expected answers, such as
 * allocating until the device says no. Returns what it was, to put back
 * (probes nest). */
int poas__failures_expected(int on);

/* ----------------------------------------------------------------- clocks */

/* Monotonic wall-clock seconds. */
double poas__now(void);
/* Waits `seconds` (no-op when <= 0), to within a few microseconds: it
 * sleeps, then spins the last 100 us on the clock. */
void poas__sleep(double seconds);

/* ---------------------------------------------------------------- threads */

/* Marks the calling thread as a worker of the library's own that serves
 * one device for its whole life (the scheduler's). A backend may leave
 * that device current on such a thread between calls, which is cheaper;
 * on any other thread, a caller's, it puts back what the caller had
 * current (devices/cuda/cuda.c), since a program with CUDA code of its own
 * must not find its current device changed by a GEMM. */
void poas__thread_mark_worker(void);
/* 1 on a thread poas__thread_mark_worker marked, 0 on any other. */
int poas__thread_is_worker(void);

/* ------------------------------------------------------------- arithmetic */

/* a*b into *out, or nonzero on int64 overflow or a negative operand. */
int poas__mul_overflow(int64_t a, int64_t b, int64_t *out);
/* The checks of a GEMM's shape, with or without its matrices (a call, a
 * plan, a prediction): a known dtype and transpose operations, sizes not
 * negative, and matrices whose bytes int64 and size_t can count (no larger
 * ones exist, and every size derived from them would wrap: a plan for
 * m = 2^63 - 1 once never ended; POAS_EINVAL). 0, or the error code,
 * failed with a detail starting with `who`. */
int poas__gemm_shape_check(const char *who, poas_dtype dtype, poas_op transa, poas_op transb,
                           int64_t m, int64_t n, int64_t k);
/* Bytes in one element of dtype (4 or 8), 0 for an unknown dtype. */
size_t poas__dtype_size(poas_dtype dtype);
/* "s" / "d" and "float32" / "float64". */
const char *poas__dtype_letter(poas_dtype dtype);
const char *poas__dtype_name(poas_dtype dtype);

/* ---------------------------------------------------------------- strings */

/* Copies src into dst[cap] always terminating; truncates. */
void poas__strlcpy(char *dst, const char *src, size_t cap);
/* The same, and a src cut short ends in "..." (cap of at least 4), so that
 * a reader of dst sees it is not the whole: for paths handed back to
 * callers. */
void poas__strlcpy_marked(char *dst, const char *src, size_t cap);
/* `s` without its leading and trailing blanks: cuts the trailing ones off
 * in place and returns where the rest starts. */
char *poas__trim(char *s);
/* Parses a whole string as a finite decimal double / non-negative int64
 * (exponents allowed: "1e11", and "2e3" as an int64; no spaces, no
 * hexadecimal); accepts suffixes k, M, G (powers of 1000) and Ki, Mi, Gi
 * (powers of 1024) when `suffixes` is nonzero. Returns 0 or POAS_EINVAL. */
int poas__parse_double(const char *s, int suffixes, double *out);
int poas__parse_int64(const char *s, int suffixes, int64_t *out);

/* ------------------------------------------------------ device selection */

#define POAS__SPEC_MAX_ENTRIES POAS_MAX_DEVICES
#define POAS__SPEC_MAX_SETTINGS 12
#define POAS__SPEC_TOKEN 160

/* One entry of a selection such as "cpu:threads=1" or "opencl0". */
typedef struct poas__spec_entry {
  char kind[16];           /* "cpu", "cuda", "opencl", "sim" */
  int index;               /* the N of "openclN"; -1 for "every device" */
  int nsettings;
  char key[POAS__SPEC_MAX_SETTINGS][32];
  char value[POAS__SPEC_MAX_SETTINGS][POAS__SPEC_TOKEN];
  char text[POAS__SPEC_TOKEN]; /* the entry as written, for messages */
} poas__spec_entry;

typedef struct poas__spec {
  int nentries;
  poas__spec_entry entry[POAS__SPEC_MAX_ENTRIES];
} poas__spec;

/* Parses a selection. On error returns POAS_ESPEC and writes a message that
 * names the bad token into err[errcap] (which may be NULL). Known kinds are
 * checked here, and that no device but a sim is named twice, and that no
 * value needs more than POAS__SPEC_TOKEN bytes; settings' keys and values
 * are checked by the backends. Device words, keys and values are kept
 * without the blanks around them. */
int poas__spec_parse(const char *text, poas__spec *out, char *err, size_t errcap);
/* Parses a device setting's value as an integer in [lo, hi] (size
 * suffixes when `suffixes`). On a bad value writes "<who>: bad value 'V'
 * for KEY (LO to HI)" to err and returns POAS_ESPEC, the backends' one
 * wording for it. */
int poas__spec_int(const char *who, const char *key, const char *value, int suffixes, int64_t lo,
                   int64_t hi, int64_t *out, char *err, size_t errcap);

/* One integer setting a backend knows: `key` sets *out, in [lo, hi]. */
typedef struct poas__int_setting {
  const char *key;
  int64_t lo, hi;
  int *out;
} poas__int_setting;

/* Applies an entry's settings (NULL: none) through a backend's table of
 * integer settings. A bad value is worded by poas__spec_int; an unknown
 * key gives "<who>: unknown setting 'K' (known: a, b)". POAS_ESPEC then. */
int poas__spec_ints(const char *who, const poas__spec_entry *e, const poas__int_setting *known,
                    int nknown, char *err, size_t errcap);

#endif /* POAS_CORE_H */
