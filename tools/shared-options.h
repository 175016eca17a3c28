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
#include <string.h>

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
  /* getopt_long's table, ending in TOOL_LONGOPTS_END: a refused long
   * option is named as it names it. */
  const struct option *longopts;
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

/* getopt_long over cli's command line and table, with getopt's own
 * messages off: those name the program by argv[0], which is libtool's
 * wrapper path in the build tree and a full path when run so, where every
 * other message of the tools says PROG. tool_shared_option says instead
 * what was refused. `optstring` opens with ':', so that a missing argument
 * comes back as ':', apart from the '?' of an unknown option and of a
 * value given to an option that takes none. */
static inline int tool_getopt(const tool_cli *cli, const char *optstring) {
  opterr = 0;
  return getopt_long(cli->argc, cli->argv, optstring, cli->longopts, NULL);
}

/* Whether a command-line word is a long option ("--name", "--name=value"),
 * not a bundle of short ones ("-qs"), nor the "--" that ends the options. */
static inline int tool_is_long(const char *word) {
  return word[0] == '-' && word[1] == '-' && word[2] != '\0';
}

/* The entry of `longopts` that getopt_long takes the long option `word`
 * for, as glibc picks it: the one named exactly so, else the first whose
 * name the word begins; NULL where none is. */
static inline const struct option *tool_long_option(const struct option *longopts,
                                                    const char *word) {
  const char *name = word + 2;
  size_t len = strcspn(name, "=");
  const struct option *first = NULL;
  for (const struct option *o = longopts; o->name; o++)
    if (strncmp(o->name, name, len) == 0) {
      if (!o->name[len])
        return o;
      if (!first)
        first = o;
    }
  return first;
}

/* Whether two entries are one option under two names: getopt_long takes
 * an abbreviation of both names for the first, where it refuses one of
 * two options as ambiguous. */
static inline int tool_same_option(const struct option *a, const struct option *b) {
  return a->has_arg == b->has_arg && a->flag == b->flag && a->val == b->val;
}

/* Says on stderr, in getopt's words, why getopt_long refused an option:
 * its answer `c` (':' for a missing argument, '?' for the rest), optind
 * past the word that held it and optopt the option's letter, or 0 for a
 * long option it knows none of or more than one by. A long option's word
 * is argv[optind - 1], which getopt_long always steps past; a short one's
 * letter is in optopt alone, as its bundle ("-Zq") may not yet be past. */
static inline void tool_say_refused(const tool_cli *cli, int c) {
  const char *word = cli->argv[optind - 1];
  const struct option *o = tool_is_long(word) ? tool_long_option(cli->longopts, word) : NULL;
  fprintf(stderr, "%s%s%s: ", cli->prog, cli->command ? " " : "", cli->command ? cli->command : "");
  if (c == ':' && o)
    fprintf(stderr, "option '--%s' requires an argument\n", o->name);
  else if (c == ':')
    fprintf(stderr, "option requires an argument -- '%c'\n", optopt);
  /* A value given to an option that takes none. The word before an
   * unknown letter in a bundle not yet past may be any earlier one, a long
   * option with its value among them, but not one that gives a value to
   * an option taking none under that letter: getopt_long refused that. */
  else if (optopt && o && o->has_arg == no_argument && o->val == optopt && strchr(word, '='))
    fprintf(stderr, "option '--%s' doesn't allow an argument\n", o->name);
  else if (optopt)
    fprintf(stderr, "invalid option -- '%c'\n", optopt);
  else if (!o)
    fprintf(stderr, "unrecognized option '%s'\n", word);
  else {
    /* Every other entry whose name the word begins, and which is not o
     * under another name, is one it could mean. */
    fprintf(stderr, "option '%s' is ambiguous; possibilities: '--%s'", word, o->name);
    size_t len = strcspn(word + 2, "=");
    for (const struct option *p = o + 1; p->name; p++)
      if (strncmp(p->name, word + 2, len) == 0 && !tool_same_option(o, p))
        fprintf(stderr, " '--%s'", p->name);
    fputc('\n', stderr);
  }
}

/* After a usage error's message: where to read more. */
static inline void tool_try_help(const tool_cli *cli) {
  fprintf(stderr, "Try '%s%s%s --help' for more information.\n", cli->prog,
          cli->command ? " " : "", cli->command ? cli->command : "");
}

/* Handles tool_getopt's answer `c` (with optarg `value`) as one of the
 * shared options. Returns TOOL_GO_ON once it took the value, else the exit
 * status to leave with: 0 after --help or --version (1 when stdout could
 * not take them, unless stdout_checked_later), 2 after a usage error,
 * said on stderr. Any `c` that is none of cli's options is getopt_long's
 * '?' or ':' for an option it refused: said in the program's name, with
 * where to read more rather than the whole usage, which buried the line
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
  if (!cli->quiet) {
    tool_say_refused(cli, c);
    tool_try_help(cli);
  }
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
