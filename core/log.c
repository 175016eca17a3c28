/* log.c: the library's only printing. Silent unless POAS_LOG or the
 * context's options ask for messages, so a library call never writes to a
 * terminal the application owns. */
#include "core.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static int log_level = -1; /* -1: not read from the environment yet */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

void poas__log_set_level(int level) {
  pthread_mutex_lock(&log_lock);
  log_level = level < 0 ? 0 : level;
  pthread_mutex_unlock(&log_lock);
}

int poas__log_level(void) {
  pthread_mutex_lock(&log_lock);
  if (log_level < 0) {
    const char *env = getenv("POAS_LOG");
    int64_t v = 0;
    log_level = (env && poas__parse_int64(env, 0, &v) == 0) ? (int)POAS__MIN(v, 3) : 0;
  }
  int level = log_level;
  pthread_mutex_unlock(&log_lock);
  return level;
}

void poas__log(int level, const char *fmt, ...) {
  if (level > poas__log_level())
    return;
  static const char *const tag[] = {"", "warning: ", "", "debug: "};
  va_list ap;
  va_start(ap, fmt);
  flockfile(stderr);
  fprintf(stderr, "poas: %s", tag[POAS__MIN(POAS__MAX(level, 0), 3)]);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  funlockfile(stderr);
  va_end(ap);
}

/* The detail behind the last error, per thread, as dlerror() does. */
static _Thread_local char error_detail[512];

const char *poas_error_detail(void) { return error_detail; }

void poas__clear_detail(void) { error_detail[0] = '\0'; }

static _Thread_local int failures_expected;

void poas__failures_expected(int on) { failures_expected = on; }

int poas__fail(int err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(error_detail, sizeof error_detail, fmt, ap);
  va_end(ap);
  poas__log(failures_expected ? POAS__LOG_DEBUG : POAS__LOG_WARN, "%s", error_detail);
  return err;
}
