/* cublas_api.c: loading cuBLAS on first use (cublas_api.h). */
#include "config.h"

#include "devices/cuda/cublas_api.h"

#include "core/core.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

poas__cublas_api poas__cublas;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int load_rc;
static char load_err[512];

/* A macro's expansion as a string: the symbol behind cublasCreate is
 * cublasCreate_v2. */
#define POAS__SYMBOL_NAME(name) POAS__SYMBOL_TEXT(name)
#define POAS__SYMBOL_TEXT(name) #name

int poas__cublas_resolve(void *lib, const char *loaded_as, poas__cublas_api *api, char *err,
                         size_t errcap) {
  const char *missing = NULL;
  /* dlsym returns void *; the cast to the function pointer type is what
   * POSIX prescribes for it. */
#define POAS__CUBLAS_RESOLVE(name)                                                                \
  if (!missing) {                                                                                 \
    void *sym = dlsym(lib, POAS__SYMBOL_NAME(name));                                              \
    if (sym)                                                                                      \
      memcpy(&api->name, &sym, sizeof sym);                                                       \
    else                                                                                          \
      missing = POAS__SYMBOL_NAME(name);                                                          \
  }
  POAS__CUBLAS_CALLS(POAS__CUBLAS_RESOLVE)
#undef POAS__CUBLAS_RESOLVE
  if (!missing)
    return 0;
  memset(api, 0, sizeof *api);
  /* The name it was loaded by says little when the dynamic linker picked
   * the file (a soname, through LD_LIBRARY_PATH or the cache): the file
   * is what the user has to replace. */
  struct link_map *map = NULL;
  const char *file = dlinfo(lib, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name[0]
                         ? map->l_name
                         : "a file the dynamic linker did not name";
  snprintf(err, errcap,
           "the cuBLAS loaded as %s (%s) has no %s, which POAS (built against cuBLAS "
           "%d.%d) calls: put a cuBLAS at least as new first on LD_LIBRARY_PATH",
           loaded_as, file, missing, CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR);
  return POAS_EDEVICE;
}

static void load(void) {
  static const char *const paths[] = {POAS_CUBLAS_SONAME, POAS_CUBLAS_PATH};
  void *lib = NULL;
  const char *loaded_as = NULL;
  char tried[sizeof load_err / 2] = "";
  for (size_t i = 0; !lib && i < POAS__ARRAY_LEN(paths); i++) {
    /* RTLD_LOCAL: its symbols serve these pointers only. */
    lib = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      loaded_as = paths[i];
    } else {
      const char *why = dlerror();
      if (!tried[0])
        snprintf(tried, sizeof tried, "%s", why ? why : paths[i]);
    }
  }
  if (!lib) {
    snprintf(load_err, sizeof load_err, "cuBLAS could not be loaded: %s", tried);
    load_rc = POAS_EDEVICE;
    return;
  }
  load_rc = poas__cublas_resolve(lib, loaded_as, &poas__cublas, load_err, sizeof load_err);
  if (load_rc)
    dlclose(lib);
  /* Loaded for good: kept until the process ends, as a linked library is. */
}

int poas__cublas_load(char *err, size_t errcap) {
  pthread_once(&load_once, load);
  if (load_rc && err && errcap)
    snprintf(err, errcap, "%s", load_err);
  return load_rc;
}
