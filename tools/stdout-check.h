/* stdout-check.h: how the tools and bench programs end when their output
 * could not be written. A table or JSON sent to a full disk or a closed
 * pipe is otherwise lost while the program exits 0, and a script that
 * reads the output then trusts a truncated file. Header-only, so that the
 * bench programs that link nothing of POAS can use it too. */
#ifndef POAS_TOOLS_STDOUT_CHECK_H
#define POAS_TOOLS_STDOUT_CHECK_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* Readies the standard streams, first thing in main, so that a closed
 * pipe or a closed descriptor is an error the tool reports rather than a
 * silent end or a write gone elsewhere:
 * - SIGPIPE is ignored: a write to a pipe whose reader has gone fails with
 *   EPIPE, which tool_stdout_status reports (exit 1), and the tool's own
 *   cleanup runs. The signal killed every tool without a word (exit 141),
 *   and poas-bench left its CSV's new file behind.
 * - A descriptor of 0, 1 or 2 that is closed is opened on /dev/null the
 *   other way round (stdin for writing, stdout and stderr for reading),
 *   so that any use of it fails: a file the tool opened later took the
 *   lowest free descriptor, and with `>&-` poas-bench's table went into
 *   its CSV, exit 0.
 * Programs it starts get SIGPIPE back (tool_child_signals). */
static inline void tool_std_ready(void) {
  signal(SIGPIPE, SIG_IGN);
  for (int fd = 0; fd <= 2; fd++) {
    if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
      continue;
    int got = open("/dev/null", fd == 0 ? O_WRONLY : O_RDONLY);
    if (got >= 0 && got != fd) {
      dup2(got, fd);
      close(got);
    }
  }
}

/* In a child about to exec another program: the signal dispositions that
 * program expects, which tool_std_ready changed. */
static inline void tool_child_signals(void) { signal(SIGPIPE, SIG_DFL); }

/* Why an earlier write to f failed, where stdio kept no errno: EPIPE
 * when f is a pipe whose reader has gone (poll reports POLLERR on its
 * write end), ENOSPC when it is a file on a file system with no block
 * left for it, a character device's own error where a write of nothing
 * to it fails (/dev/full's ENOSPC; it writes nothing, and a terminal
 * takes it as nothing), else EIO. A --help longer than stdio's buffer fails inside
 * printf, and the flush at the end then saw only the error flag: "Input/
 * output error" where the reader of a pipe had gone, or the disk was
 * full (poas-bench gemm --help into a full tmpfs). */
static inline int tool_lost_errno(FILE *f) {
  struct pollfd p = {fileno(f), POLLOUT, 0};
  struct stat st;
  struct statvfs vfs;
  if (p.fd < 0 || fstat(p.fd, &st) != 0)
    return EIO;
  if (S_ISFIFO(st.st_mode) && poll(&p, 1, 0) == 1 && (p.revents & POLLERR))
    return EPIPE;
  if (S_ISREG(st.st_mode) && fstatvfs(p.fd, &vfs) == 0 && vfs.f_bavail == 0)
    return ENOSPC;
  if (S_ISCHR(st.st_mode) && write(p.fd, "", 0) < 0 && errno != EINTR && errno != EAGAIN)
    return errno;
  return EIO;
}

/* Flushes f: 0, or the errno of the write that failed (tool_lost_errno
 * when an earlier write failed and left no errno). */
static inline int tool_flush_errno(FILE *f) {
  errno = 0;
  if (fflush(f) == 0 && !ferror(f))
    return 0;
  return errno ? errno : tool_lost_errno(f);
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
