/* host-memory.h: the machine's physical memory, the bound poas-demo and
 * poas-bench hold their operands to before allocating them. Past it malloc
 * still succeeds where the kernel overcommits (3 x 16 GiB for n = 65536 on
 * a 23 GiB host), and filling the operands then wakes the OOM killer. The
 * physical memory is the machine's own, unlike MemAvailable, which moves
 * with the page cache and other processes: a size refused on a busy
 * machine would run on an idle one. Header-only. */
#ifndef POAS_TOOLS_HOST_MEMORY_H
#define POAS_TOOLS_HOST_MEMORY_H

#include <stdio.h>
#include <unistd.h>

/* Bytes of physical memory; 0 when the system does not say. */
static inline double tool_host_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? (double)pages * (double)page : 0;
}

/* Whether `need` bytes fit in the machine's memory (or it does not say how
 * much it has); when not, why[cap] says "X GiB, more than this machine's
 * Y GiB of memory". */
static inline int tool_memory_holds(double need, char *why, size_t cap) {
  double have = tool_host_memory(), gib = 1024.0 * 1024 * 1024;
  if (have == 0 || need <= have)
    return 1;
  snprintf(why, cap, "%.1f GiB, more than this machine's %.1f GiB of memory", need / gib,
           have / gib);
  return 0;
}

#endif
