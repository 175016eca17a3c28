/* fit-text.c: see fit-text.h. */
#include "tools/fit-text.h"

#include <stdio.h>

void tool_transfer_text(const poas_device_fit *f, poas_direction dir, char *buf, size_t cap) {
  int len = snprintf(buf, cap, "%.2f us + %.2f GB/s", 1e6 * f->latency_s[dir],
                     f->bandwidth[dir] / 1e9);
  if (f->knee_bytes[dir] > 0 && len > 0 && (size_t)len < cap)
    snprintf(buf + len, cap - (size_t)len, ", %.2f GB/s past %.0f MiB",
             f->bandwidth_beyond[dir] / 1e9, f->knee_bytes[dir] / 1048576);
}
