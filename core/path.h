/* path.h: the file a path really names, for the code that replaces files
 * in place (models/profile.c writes profiles, bench/report.c poas-bench's
 * CSV and plot): the symbolic links the path ends in are followed, so that
 * the file they lead to is replaced rather than the link, and a file that
 * is not a regular one is named for what it is. Header-only and POSIX-only,
 * with no other part of the library behind it, so that the tools, which
 * stand on poas.h alone, share it with the library. */
#ifndef POAS_CORE_PATH_H
#define POAS_CORE_PATH_H

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* How many links deep a path is followed, as the kernel's own limit. */
#define POAS__LINK_HOPS 40

/* `path` with the symbolic links it ends in followed, into target[cap]: a
 * link's target, whether it exists or not; a relative link is taken from
 * the folder the link is in. 0, or the errno of why not: ENAMETOOLONG for
 * a path or target that does not fit, ELOOP past POAS__LINK_HOPS links,
 * readlink's own for a link that cannot be read (target then names it). */
static inline int poas__follow_links(const char *path, char *target, size_t cap) {
  size_t len = strlen(path);
  if (len >= cap)
    return ENAMETOOLONG;
  memcpy(target, path, len + 1);
  for (int hops = 0; hops < POAS__LINK_HOPS; hops++) {
    struct stat st;
    if (lstat(target, &st) != 0 || !S_ISLNK(st.st_mode))
      return 0;
    char link[PATH_MAX];
    ssize_t n = readlink(target, link, sizeof link);
    if (n < 0)
      return errno;
    if ((size_t)n >= sizeof link)
      return ENAMETOOLONG;
    link[n] = '\0';
    const char *slash = strrchr(target, '/');
    size_t keep = link[0] == '/' || !slash ? 0 : (size_t)(slash - target) + 1;
    if (keep + (size_t)n >= cap)
      return ENAMETOOLONG;
    memcpy(target + keep, link, (size_t)n + 1);
  }
  return ELOOP;
}

/* What a file of `mode` that is not a regular file is, for messages. */
static inline const char *poas__file_type(mode_t mode) {
  return S_ISDIR(mode)    ? "a directory"
         : S_ISFIFO(mode) ? "a FIFO"
         : S_ISCHR(mode)  ? "a character device"
         : S_ISBLK(mode)  ? "a block device"
         : S_ISSOCK(mode) ? "a socket"
                          : "something else";
}

#endif /* POAS_CORE_PATH_H */
