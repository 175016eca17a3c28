/* shapes.h: the problems poas-bench's --sizes and --shape name, read from
 * their lists: sizes ("512,1024") turned into square, tall or wide shapes,
 * or shapes written out ("64x128x256,..."). Header-only, like cli.h, so
 * that the fuzzer tests/fuzz/fuzz-args.c reads them as the tool does. */
#ifndef POAS_BENCH_SHAPES_H
#define POAS_BENCH_SHAPES_H

#include "tools/args.h"

#include <stdint.h>
#include <string.h>

/* The largest size or side a list may give. */
#define BENCH_MAX_SIDE (1 << 20)

typedef struct bench_shape {
  int64_t m, n, k;
} bench_shape;

/* The whole number from lo to hi that `s` opens with, plain digits as
 * tool_parse_int64 takes them, into *out: how many characters it takes,
 * or -1. What follows is the caller's ("64x128", "64,"). strtoll took
 * " 64" and "+64". */
static inline int bench_parse_count(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  char digits[32];
  size_t len = strspn(s, "0123456789");
  if (len == 0 || len >= sizeof digits)
    return -1;
  memcpy(digits, s, len);
  digits[len] = '\0';
  return tool_parse_int64(digits, lo, hi, out) ? -1 : (int)len;
}

/* "1024,2048" with a shape `kind` ("square", "tall" or "wide"), or
 * "MxNxK,..." when `kind` is NULL, into shapes[0..*n), at most `cap`: 0,
 * or -1 for a list that is empty, too long or malformed. */
static inline int bench_parse_shapes(const char *text, const char *kind, bench_shape *shapes,
                                     int cap, int *n) {
  *n = 0;
  for (const char *p = text; *p;) {
    bench_shape s;
    int64_t v[3];
    int parts = kind ? 1 : 3, used;
    for (int i = 0; i < parts; i++) {
      if ((used = bench_parse_count(p, 1, BENCH_MAX_SIDE, &v[i])) < 0)
        return -1;
      p += used;
      if (i + 1 < parts && *p++ != 'x')
        return -1;
    }
    if (!kind)
      s = (bench_shape){v[0], v[1], v[2]};
    else if (strcmp(kind, "tall") == 0)
      s = (bench_shape){4 * v[0], v[0] / 4 ? v[0] / 4 : 1, v[0]};
    else if (strcmp(kind, "wide") == 0)
      s = (bench_shape){v[0] / 4 ? v[0] / 4 : 1, 4 * v[0], v[0]};
    else
      s = (bench_shape){v[0], v[0], v[0]};
    if (*n == cap || (*p && *p != ','))
      return -1;
    shapes[(*n)++] = s;
    if (*p == ',' && !*++p)
      return -1; /* "64,": an empty last entry */
  }
  return *n ? 0 : -1;
}

#endif /* POAS_BENCH_SHAPES_H */
