/* args.h: checks of command-line values the tools and bench programs
 * share, so that each refuses the same things in the same words: whole
 * and decimal numbers written plainly, and option values that must name
 * something.
 * Header-only, as the other small tool helpers are. */
#ifndef POAS_TOOLS_ARGS_H
#define POAS_TOOLS_ARGS_H

#include "core/number.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* All of `text` as a whole decimal number from lo to hi, into *out; -1
 * for anything else. Plain digits with an optional '-' only: strtoll
 * alone would take " 5" and "+5", atoi "abc" as 0 and "5x" as 5. The
 * minus only where lo is negative: a size of "-0" is no size a user
 * means, and the tools refuse a minus where no negative value is one. */
static inline int tool_parse_int64(const char *text, int64_t lo, int64_t hi, int64_t *out) {
  const char *digits = text[0] == '-' && lo < 0 ? text + 1 : text;
  if (!isdigit((unsigned char)digits[0]))
    return -1;
  char *end;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (*end || errno || v < lo || v > hi)
    return -1;
  *out = v;
  return 0;
}

/* All of `text` as a finite decimal number from lo to hi, into *out; -1
 * for anything else. Written as the library reads settings
 * (core/number.h): "0.5", "-1", "2e-3", but not " 1", "+1", "0x1", "inf"
 * or "nan", which strtod alone would take. */
static inline int tool_parse_double(const char *text, double lo, double hi, double *out) {
  if (!poas__decimal_start(text))
    return -1;
  char *end;
  double v = strtod(text, &end); /* an underflow is a number all the same */
  if (*end || !(v >= lo && v <= hi))
    return -1;
  *out = v;
  return 0;
}

/* Whether `--devices VALUE` names devices. The library takes an empty
 * selection for none given ($POAS_DEVICES, else every device), and a
 * script that passed an unset variable would run on the whole machine:
 * prints why to stderr and returns 0 for an empty one. */
static inline int tool_devices_named(const char *prog, const char *value) {
  if (*value)
    return 1;
  fprintf(stderr, "%s: --devices '' names no device (leave the option out for $POAS_DEVICES, "
                  "else every device)\n",
          prog);
  return 0;
}

/* Whether `--OPTION VALUE` names a file. The library takes an empty
 * path for none given (the environment's, else the default), which is
 * not what an empty value asks for: prints why to stderr and returns 0
 * for one. */
static inline int tool_file_named(const char *prog, const char *option, const char *value) {
  if (*value)
    return 1;
  fprintf(stderr, "%s: --%s '' names no file\n", prog, option);
  return 0;
}

#endif /* POAS_TOOLS_ARGS_H */
