/* opencl_register.c: the OpenCL backend's table when the backend is not
 * built (configure found no OpenCL loader or CLBlast, or was told
 * --without-opencl). When it is built, opencl.c defines the table. */
#include "config.h"
#include "devices/absent.h"

#if !POAS_HAVE_OPENCL
const poas__backend poas__backend_opencl = POAS__ABSENT_BACKEND("opencl", POAS_DEVICE_OPENCL);
#endif
