/* shared-options.h: the options the tools and bench programs share,
 * handled in one place so that each says the same things in the same
 * words and with the same exit statuses: --devices/-d and --profile/-p
 * (values that must name something), --json/-j, --help/-h (the usage on
 * stdout, exit 0), --version/-V ("PROG (POAS) VERSION", exit 0), and any
 * option getopt_long refused (exit 2). Each program reads its options with
 * tool_getopt, keeps its own in its own switch and hands the answer to
 * tool_shared_option in its default case. Header-only, over poas.h. */
#ifndef POAS_TOOLS_SHARED_OPTIONS_H
#define POAS_TOOLS_SHARED_OPTIONS_H

#include "poas.h"
#include "tools/args.h"
#include "tools/stdout-check.h"

#include <getopt.h>
#include <stdio.h>

/* The shared options' entries of a getopt_long table. TOOL_LONGOPTS_END
 * comes last: --help, --version and the table's end. */
#define TOOL_LONGOPT_DEVICES {"devices", required_argument, NULL, 'd'}
#define TOOL_LONGOPT_PROFILE {"profile", required_argument, NULL, 'p'}
#define TOOL_LONGOPT_JSON {"json", no_argument, NULL, 'j'}
#define TOOL_LONGOPTS_END                                                                  \
  {"help", no_argument, NULL, 'h'}, {"version", no_argument, NULL, 'V'}, {NULL, 0, NULL, 0}

/* tool_shared_option's answer when the program reads on. */
#define TOOL_GO_ON (-1)

/* Where one program's shared options go, and how it speaks. */
typedef struct tool_cli {
  const char *prog;       /* in every message, and in --version's line */
  /* A subcommand's name ("gemm"), which a refused option's message adds to
   * prog ("poas-bench gemm: ...") so that it names the --help to read;
   * NULL for a program without subcommands. */
  const char *command;
  void (*usage)(FILE *f); /* the whole usage text, for --help */
  int argc;               /* the command line tool_getopt reads */
  char **argv;
  const struct option *longopts; /* getopt_long's, ending in TOOL_LONGOPTS_END */
  const char **devices; /* --devices's value; NULL where it is no option of prog */
  const char **profile; /* --profile's value; likewise */
  int *json;            /* set by --json; likewise */
  /* Says nothing, the statuses unchanged: poas-mpi-bench's ranks but rank
   * 0, which speaks for all. */
  int quiet;
  /* main checks stdout on its way out (tool_stdout_status), so --help and
   * --version leave it to that: a second check says a failed write twice. */
  int stdout_checked_later;
} tool_cli;

/* The program as a refused option's message and the --help to read name
 * it: prog, and its subcommand where it has one ("poas-bench gemm"). */
static inline char *tool_name(const tool_cli *cli) {
  static char name[64];
  snprintf(name, sizeof name, "%s%s%s", cli->prog, cli->command ? " " : "",
           cli->command ? cli->command : "");
  return name;
}

/* getopt_long over cli's command line and table. getopt says what it
 * refuses in its own words (and the C library's language), but names the
 * program by argv[0]: libtool's wrapper path in the build tree, a full
 * path when run so, where every other message of the tools says PROG. So
 * argv[0] names the program as the tools speak ("poas-bench gemm") while
 * getopt_long reads, and is given back after: getopt permutes the words
 * past it only, and poas-bench's JSON reports the command line as typed.
 * Quiet programs (poas-mpi-bench's other ranks) leave the saying off. */
static inline int tool_getopt(const tool_cli *cli, const char *optstring) {
  char *own = cli->argv[0];
  cli->argv[0] = tool_name(cli);
  opterr = !cli->quiet;
  int c = getopt_long(cli->argc, cli->argv, optstring, cli->longopts, NULL);
  cli->argv[0] = own;
  return c;
}

/* After a usage error's message: where to read more. */
static inline void tool_try_help(const tool_cli *cli) {
  fprintf(stderr, "Try '%s --help' for more information.\n", tool_name(cli));
}

/* Handles tool_getopt's answer `c` (with optarg `value`) as one of the
 * shared options. Returns TOOL_GO_ON once it took the value, else the exit
 * status to leave with: 0 after --help or --version (1 when stdout could
 * not take them, unless stdout_checked_later), 2 after a usage error,
 * said on stderr. Any `c` that is none of cli's options is getopt_long's
 * '?' for an option it refused and said it refused (tool_getopt): then
 * where to read more, rather than the whole usage, which buried the line
 * that said what was wrong. */
static inline int tool_shared_option(const tool_cli *cli, int c, const char *value) {
  switch (c) {
  case 'd':
    if (!cli->devices)
      break;
    /* An empty value is refused, and said why unless quiet. */
    if (cli->quiet ? !*value : !tool_devices_named(cli->prog, value))
      return 2;
    *cli->devices = value;
    return TOOL_GO_ON;
  case 'p':
    if (!cli->profile)
      break;
    if (cli->quiet ? !*value : !tool_file_named(cli->prog, "profile", value))
      return 2;
    *cli->profile = value;
    return TOOL_GO_ON;
  case 'j':
    if (!cli->json)
      break;
    *cli->json = 1;
    return TOOL_GO_ON;
  case 'h':
  case 'V':
    if (cli->quiet)
      return 0;
    if (c == 'h')
      cli->usage(stdout);
    else
      printf("%s (POAS) %s\n", cli->prog, poas_version());
    return cli->stdout_checked_later ? 0 : tool_stdout_status(cli->prog, 0);
  }
  if (!cli->quiet) /* getopt_long said what it refused */
    tool_try_help(cli);
  return 2;
}

/* After the options: the tools take no operands, and one left over is a
 * usage error, named, with where to read more, as a refused option is
 * (the whole usage below it buried it). Returns TOOL_GO_ON when none is
 * left, else 2. */
static inline int tool_no_operands(const tool_cli *cli) {
  if (optind >= cli->argc)
    return TOOL_GO_ON;
  if (!cli->quiet) {
    fprintf(stderr, "%s: unexpected argument '%s'\n", cli->prog, cli->argv[optind]);
    tool_try_help(cli);
  }
  return 2;
}

#endif /* POAS_TOOLS_SHARED_OPTIONS_H */
