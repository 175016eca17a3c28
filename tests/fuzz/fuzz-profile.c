/* fuzz-profile.c: libFuzzer entry for the profile loader. Any byte string
 * must give either a profile or POAS_EPROFILE with a message naming the
 * buffer; never a crash, a leak or undefined behaviour. Built and run by
 * run-fuzz.sh, not by make check. */
#include "models/profile.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static poas__profile p;
  int rc = poas__profile_parse((const char *)data, size, "<fuzz>", &p);
  if (rc != 0 && rc != POAS_EPROFILE && rc != POAS_ENOMEM)
    abort();
  if (rc == POAS_EPROFILE && strncmp(poas_error_detail(), "<fuzz>: ", 8) != 0)
    abort();
  return 0;
}
