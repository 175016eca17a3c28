/* context-open.h: how the tools open their context and say why they
 * could not. A malformed device selection is a usage error, exit 2, as
 * poas-bench has it; the message names where the selection came from,
 * --devices or POAS_DEVICES, since a POAS_DEVICES left in the environment
 * otherwise reads as a fault in a command line that has none.
 * Header-only, over poas.h. */
#ifndef POAS_TOOLS_CONTEXT_OPEN_H
#define POAS_TOOLS_CONTEXT_OPEN_H

#include "poas.h"

#include <stdio.h>
#include <stdlib.h>

/* The device selection in effect for `devices`, a --devices value (NULL:
 * none given): it, else $POAS_DEVICES where that is set and not empty, as
 * poas_init reads it, else NULL for every device. When `from` is not NULL,
 * *from names where the selection came from, for messages: "--devices",
 * "POAS_DEVICES", or NULL. */
static inline const char *tool_devices_selection(const char *devices, const char **from) {
  const char *env = getenv("POAS_DEVICES");
  const char *selection = devices ? devices : env && *env ? env : NULL;
  if (from)
    *from = devices ? "--devices" : selection ? "POAS_DEVICES" : NULL;
  return selection;
}

/* Opens *ctx with opts. Returns 0, or after saying why on `err` the exit
 * status to leave with: 2 when the selection the user gave is malformed,
 * 1 for any other failure. poas-mpi-bench says it into a buffer of its
 * own, so that one message shared by many ranks is said once. */
static inline int tool_context_open_to(FILE *err, const char *prog, const poas_options *opts,
                                       poas_context **ctx) {
  int rc = poas_init(ctx, opts);
  if (!rc)
    return 0;
  const char *from, *selection = tool_devices_selection(opts->devices, &from);
  if (rc != POAS_ESPEC || !selection) {
    fprintf(err, "%s: %s: %s\n", prog, poas_strerror(rc), poas_error_detail());
    return 1;
  }
  fprintf(err, "%s: %s '%s': %s: %s\n", prog, from, selection, poas_strerror(rc),
          poas_error_detail());
  return 2;
}

/* tool_context_open_to, saying why on stderr. */
static inline int tool_context_open(const char *prog, const poas_options *opts,
                                    poas_context **ctx) {
  return tool_context_open_to(stderr, prog, opts, ctx);
}

#endif
