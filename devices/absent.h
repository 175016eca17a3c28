/* absent.h: the hooks of a backend that was not built, shared by the
 * register files of the optional backends so that their tables stay
 * one-liners and the list of kinds is the same in every build. */
#ifndef POAS_ABSENT_H
#define POAS_ABSENT_H

#include "devices/device.h"

int poas__absent_count(void);
int poas__absent_open(int index, const poas__spec_entry *settings, poas__device **out, char *err,
                      size_t errcap);

#define POAS__ABSENT_BACKEND(kname, kkind)                                                 \
  {                                                                                        \
    .kind_name = kname, .kind = kkind, .built = 0, .count = poas__absent_count,            \
    .open = poas__absent_open                                                              \
  }

#endif /* POAS_ABSENT_H */
