/* fuzz-args.c: libFuzzer entry for the tools' readers of numbers and
 * lists on the command line: tool_parse_int64 and tool_parse_double
 * (tools/args.h, behind every numeric option of the tools and bench
 * programs), bench_parse_long (bench/cli.h) and poas-bench's --sizes and
 * --shape lists (bench_parse_shapes, bench/shapes.h). Each is held to a
 * plain restatement of what its comment promises, written here without
 * strtoll's or strtod's leniency, so that any text the two disagree on
 * (a number taken that should not be, or refused that should not be) is
 * a finding, as is a crash or undefined behaviour.
 * The first byte of an input picks the reader and its bounds; the rest,
 * up to a NUL, is the argument. Built and run by run-fuzz.sh
 * (FUZZ_TARGET=args), not by make check. */
#include "bench/cli.h"
#include "bench/shapes.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The bounds the tools pass, and a few around zero. */
static const int64_t int_bounds[][2] = {
    {1, 1000}, {0, INT64_MAX}, {1, INT64_MAX}, {1, 1 << 20}, {-5, 5}, {INT64_MIN, INT64_MAX},
    {1, 65536}, {-1, 0}};
static const double real_bounds[][2] = {{-DBL_MAX, DBL_MAX}, {DBL_MIN, DBL_MAX}, {0, 1}};
static const char *const kinds[] = {"square", "tall", "wide", NULL};

enum { NINT = sizeof int_bounds / sizeof *int_bounds };
enum { NREAL = sizeof real_bounds / sizeof *real_bounds };

static int digit(char c) { return c >= '0' && c <= '9'; }

/* Whether s[0..len) is a whole number from lo to hi, written as plain
 * digits with a minus only where lo < 0, into *out. */
static int whole(const char *s, size_t len, int64_t lo, int64_t hi, int64_t *out) {
  int negative = len > 0 && s[0] == '-' && lo < 0;
  size_t i = negative ? 1 : 0;
  if (i == len)
    return 0;
  __int128 v = 0;
  for (; i < len; i++) {
    if (!digit(s[i]))
      return 0;
    v = v * 10 + (s[i] - '0');
    if (v > (__int128)INT64_MAX + 1)
      return 0;
  }
  v = negative ? -v : v;
  if (v < lo || v > hi)
    return 0;
  *out = (int64_t)v;
  return 1;
}

/* Whether s is a decimal number as core/number.h describes it: an
 * optional minus, digits with an optional point (or a point and digits),
 * and an optional exponent; nothing else, before or after. */
static int decimal(const char *s) {
  size_t i = s[0] == '-', before = 0, after = 0;
  while (digit(s[i]))
    i++, before++;
  if (s[i] == '.')
    for (i++; digit(s[i]); i++)
      after++;
  if (before + after == 0)
    return 0;
  if (s[i] == 'e' || s[i] == 'E') {
    i++;
    if (s[i] == '+' || s[i] == '-')
      i++;
    if (!digit(s[i]))
      return 0;
    while (digit(s[i]))
      i++;
  }
  return s[i] == '\0';
}

static void check_int(const char *text, int64_t lo, int64_t hi) {
  int64_t got = 0, want = 0;
  int took = tool_parse_int64(text, lo, hi, &got) == 0;
  if (took != whole(text, strlen(text), lo, hi, &want) || (took && got != want))
    abort();
  long as_long = 0;
  int long_took = bench_parse_long(text, (long)lo, (long)hi, &as_long) == 0;
  if (long_took != took || (took && as_long != want))
    abort();
}

static void check_real(const char *text, double lo, double hi) {
  double got = 0;
  int took = tool_parse_double(text, lo, hi, &got) == 0;
  /* strtod decides the value; the form is what is checked. */
  double v = decimal(text) ? strtod(text, NULL) : NAN;
  int want = v >= lo && v <= hi;
  if (took != want || (took && got != v))
    abort();
}

/* The list restated: entries between commas, none empty, at most `cap`;
 * each one size (a kind given) or three sides joined by 'x', each side at
 * most 31 digits and from 1 to BENCH_MAX_SIDE. */
static int list(const char *text, const char *kind, bench_shape *out, int cap, int *n) {
  *n = 0;
  if (!*text)
    return 0;
  for (const char *entry = text;;) {
    size_t len = strcspn(entry, ","), used = 0;
    int64_t v[3];
    int parts = kind ? 1 : 3;
    for (int i = 0; i < parts; i++) {
      const char *side = entry + used, *x = memchr(side, 'x', len - used);
      int last = i + 1 == parts;
      if (!last && !x)
        return 0;
      size_t end = last ? len - used : (size_t)(x - side);
      if (end >= 32 || !whole(side, end, 1, BENCH_MAX_SIDE, &v[i]))
        return 0;
      used += end + 1;
    }
    if (*n == cap)
      return 0;
    int64_t quarter = v[0] / 4 ? v[0] / 4 : 1;
    if (!kind)
      out[*n] = (bench_shape){v[0], v[1], v[2]};
    else if (strcmp(kind, "tall") == 0)
      out[*n] = (bench_shape){4 * v[0], quarter, v[0]};
    else if (strcmp(kind, "wide") == 0)
      out[*n] = (bench_shape){quarter, 4 * v[0], v[0]};
    else
      out[*n] = (bench_shape){v[0], v[0], v[0]};
    (*n)++;
    if (!entry[len])
      return 1;
    entry += len + 1;
  }
}

static void check_shapes(const char *text, const char *kind, int cap) {
  static bench_shape got[64], want[64];
  int ngot = -1, nwant = 0;
  int took = bench_parse_shapes(text, kind, got, cap, &ngot) == 0;
  if (took != list(text, kind, want, cap, &nwant) || ngot < 0 || ngot > cap)
    abort();
  if (took && (ngot != nwant || memcmp(got, want, sizeof *got * (size_t)ngot) != 0))
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  /* An argument holds no NUL: the text ends at the first. */
  char *text = malloc(size);
  if (!text)
    return 0;
  memcpy(text, data + 1, size - 1);
  text[size - 1] = '\0';
  unsigned pick = data[0];
  if (pick < 0x40)
    check_int(text, int_bounds[pick % NINT][0], int_bounds[pick % NINT][1]);
  else if (pick < 0x80)
    check_real(text, real_bounds[pick % NREAL][0], real_bounds[pick % NREAL][1]);
  else /* poas-bench's 64, and a few to reach the refusal of one too many */
    check_shapes(text, kinds[pick % 4], pick < 0xc0 ? 64 : 1 + (int)(pick % 3));
  free(text);
  return 0;
}
