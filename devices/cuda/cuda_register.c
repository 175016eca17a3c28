/* cuda_register.c: the CUDA backend's table when the backend is not built
 * (configure found no CUDA toolkit or was told --without-cuda). When it is
 * built, cuda.c defines the table and this file is empty. */
#include "config.h"
#include "devices/absent.h"

#if !POAS_HAVE_CUDA
const poas__backend poas__backend_cuda = POAS__ABSENT_BACKEND("cuda", POAS_DEVICE_CUDA);
#endif
