/* error.c: messages and names for the POAS_E* codes, generated from the one
 * list in poas.h, and the library's version string. */
#include "core.h"

#define POAS__STR2(x) #x
#define POAS__STR(x) POAS__STR2(x)

const char *poas_strerror(int err) {
  switch (err) {
  case POAS_OK:
    return "success";
#define POAS__ERRNO_MSG(name, value, msg) \
  case value:                             \
    return msg;
    POAS_ERRNO_MAP(POAS__ERRNO_MSG)
#undef POAS__ERRNO_MSG
  default:
    return "unknown error";
  }
}

const char *poas_err_name(int err) {
  switch (err) {
  case POAS_OK:
    return "POAS_OK";
#define POAS__ERRNO_NAME(name, value, msg) \
  case value:                              \
    return "POAS_" #name;
    POAS_ERRNO_MAP(POAS__ERRNO_NAME)
#undef POAS__ERRNO_NAME
  default:
    return "POAS_UNKNOWN";
  }
}

const char *poas_version(void) {
  return POAS__STR(POAS_VERSION_MAJOR) "." POAS__STR(POAS_VERSION_MINOR) "." POAS__STR(
      POAS_VERSION_PATCH);
}

const char *poas_device_kind_name(poas_device_kind kind) {
  switch (kind) {
  case POAS_DEVICE_CPU:
    return "cpu";
  case POAS_DEVICE_CUDA:
    return "cuda";
  case POAS_DEVICE_OPENCL:
    return "opencl";
  case POAS_DEVICE_SIM:
    return "sim";
  }
  return "unknown";
}
