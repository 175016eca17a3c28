/* shared-options.h: the options the tools and bench programs share,
 * handled in one place so that each says the same things in the same
 * words and with the same exit statuses: --devices/-d and --profile/-p
 * (values that must name something), --json/-j, --help/-h (the usage on
 * stdout, exit 0), --version/-V ("PROG (POAS) VERSION", exit 0), and any
 * option getopt_long refused (exit 2). Each program's own switch keeps
 * its own options and hands getopt_long's answer to tool_shared_option
 * in its default case. Header-only, over poas.h. */
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
  void (*usage)(FILE *f); /* the whole usage text */
  const char **devices;   /* --devices's value; NULL where it is no option of prog */
  const char **profile;   /* --profile's value; likewise */
  int *json;              /* set by --json; likewise */
  /* A refused option: "Try 'PROG --help' for more information." instead of
   * the whole usage, as the programs built in the tree only (accuracy,
   * call-overhead, device-copy) have it; the installed ones print the
   * usage. */
  int try_help;
  /* Says nothing, the statuses unchanged: poas-mpi-bench's ranks but rank
   * 0, which speaks for all. */
  int quiet;
  /* main checks stdout on its way out (tool_stdout_status), so --help and
   * --version leave it to that: a second check says a failed write twice. */
  int stdout_checked_later;
} tool_cli;

/* Handles getopt_long's answer `c` (with optarg `value`) as one of the
 * shared options. Returns TOOL_GO_ON once it took the value, else the exit
 * status to leave with: 0 after --help or --version (1 when stdout could
 * not take them, unless stdout_checked_later), 2 after a usage error,
 * said on stderr. Any `c` that is none of cli's options (getopt_long's
 * '?', its message already said) is a usage error. */
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
  if (cli->quiet)
    return 2;
  if (cli->try_help)
    fprintf(stderr, "Try '%s --help' for more information.\n", cli->prog);
  else
    cli->usage(stderr);
  return 2;
}

/* After the options: the tools take no operands, and one left over is a
 * usage error, named, with the usage on stderr. Returns TOOL_GO_ON when
 * none is left, else 2. */
static inline int tool_no_operands(const tool_cli *cli, int argc, char **argv) {
  if (optind >= argc)
    return TOOL_GO_ON;
  if (!cli->quiet) {
    fprintf(stderr, "%s: unexpected argument '%s'\n", cli->prog, argv[optind]);
    cli->usage(stderr);
  }
  return 2;
}

#endif /* POAS_TOOLS_SHARED_OPTIONS_H */
