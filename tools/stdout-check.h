/* stdout-check.h: how the tools and bench programs end when their output
 * could not be written. A table or JSON sent to a full disk or a closed
 * pipe is otherwise lost while the program exits 0, and a script that
 * reads the output then trusts a truncated file. Header-only, so that the
 * bench programs that link nothing of POAS can use it too. */
#ifndef POAS_TOOLS_STDOUT_CHECK_H
#define POAS_TOOLS_STDOUT_CHECK_H

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Flushes f: 0, or the errno of the write that failed (EIO when an
 * earlier write failed and left no errno). */
static inline int tool_flush_errno(FILE *f) {
  errno = 0;
  if (fflush(f) == 0 && !ferror(f))
    return 0;
  return errno ? errno : EIO;
}

/* Flushes stdout; on a write error says so on stderr, naming the program
 * and the reason, and returns 1 (the tools' exit status for a failure),
 * else returns `status` unchanged. Call as `return tool_stdout_status(prog,
 * rc);` at the end of main. */
static inline int tool_stdout_status(const char *prog, int status) {
  int err = tool_flush_errno(stdout);
  if (!err)
    return status;
  fprintf(stderr, "%s: cannot write the output: %s\n", prog, strerror(err));
  return 1;
}

#endif
