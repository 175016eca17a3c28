/* cli.h: what the bench programs share on their command lines: one
 * wording for a bad argument, the spellings of --help and --version, and
 * the tools' strict integer parser.
 * Header-only, like timing.h, since cuda-transfer links nothing of POAS. */
#ifndef POAS_BENCH_CLI_H
#define POAS_BENCH_CLI_H

#include "tools/args.h"

#include <stdio.h>
#include <string.h>

/* Prints "PROG: bad WHAT 'VALUE' (see PROG --help)" and returns 2, the
 * bench programs' exit status for a usage error. */
static inline int bench_bad_arg(const char *prog, const char *what, const char *value) {
  fprintf(stderr, "%s: bad %s '%s' (see %s --help)\n", prog, what, value, prog);
  return 2;
}

/* All of `text` as a whole decimal number from lo to hi, into *out; -1 for
 * anything else (tool_parse_int64's rules). */
static inline int bench_parse_long(const char *text, long lo, long hi, long *out) {
  int64_t v;
  if (tool_parse_int64(text, lo, hi, &v))
    return -1;
  *out = (long)v;
  return 0;
}

/* Whether `arg` asks for the usage text. */
static inline int bench_is_help(const char *arg) {
  return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0;
}

/* Whether `arg` asks for the version. */
static inline int bench_is_version(const char *arg) {
  return strcmp(arg, "--version") == 0 || strcmp(arg, "-V") == 0;
}

/* The text of a numeric macro, for messages that name a limit. */
#define BENCH_STR(x) #x
#define BENCH_XSTR(x) BENCH_STR(x)

/* Whether `arg` looks like an option rather than a (possibly negative)
 * number. */
static inline int bench_is_option(const char *arg) {
  return arg[0] == '-' && arg[1] && (arg[1] < '0' || arg[1] > '9');
}

#endif /* POAS_BENCH_CLI_H */
