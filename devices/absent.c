/* absent.c: a backend compiled out reports no devices; asking for one by
 * index is answered by the registry before open is ever called. */
#include "devices/absent.h"

#include <stdio.h>

int poas__absent_count(void) { return 0; }

int poas__absent_open(int index, const poas__spec_entry *settings, poas__device **out, char *err,
                      size_t errcap) {
  (void)index, (void)settings, (void)out;
  snprintf(err, errcap, "this backend was not built (see ./configure's summary)");
  return POAS_ENODEV;
}
