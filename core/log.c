/* log.c: the library's only printing. Silent unless POAS_LOG or the
 * context's options ask for messages, so a library call never writes to a
 * terminal the application owns; a program that installs a handler
 * (poas_set_log_handler) gets them instead of stderr. */
#include "core.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The level is the process's, as stderr is: the most verbose of
 * POAS_LOG's and those asked for by whoever holds one now (a context
 * whose options set one, from poas_init to poas_finalize). */
static int env_level = -1;            /* -1: not read from the environment yet */
static int held[POAS__LOG_DEBUG + 1]; /* how many hold each level */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

/* Where messages go: stderr (handler NULL) or the program's handler.
 * emit_lock is held while one message is written, to stderr or through
 * the handler: messages from threads at once come out whole and one at a
 * time, and once poas_set_log_handler returns, no call of the handler it
 * replaced is still running (the program may free what `user` points
 * to). */
static poas_log_fn handler;
static void *handler_user;
static pthread_mutex_t emit_lock = PTHREAD_MUTEX_INITIALIZER;
/* Set while this thread runs the handler, which holds emit_lock: a
 * message its own POAS calls make goes to stderr, and its
 * poas_set_log_handler takes effect, where taking the lock again hung
 * the thread for good (a handler must not call POAS, but one that does
 * is better told on stderr than by a hang). */
static _Thread_local int in_handler;

static int clamp_level(int level) { return POAS__MIN(POAS__MAX(level, 0), POAS__LOG_DEBUG); }

void poas__log_hold(int level) {
  pthread_mutex_lock(&log_lock);
  held[clamp_level(level)]++;
  pthread_mutex_unlock(&log_lock);
}

void poas__log_release(int level) {
  pthread_mutex_lock(&log_lock);
  if (held[clamp_level(level)] > 0)
    held[clamp_level(level)]--;
  pthread_mutex_unlock(&log_lock);
}

/* One message on stderr, "poas: " and the level's tag before it, in one
 * write of the stream (so whole beside other threads' output). */
static void to_stderr(int level, const char *text) {
  static const char *const tag[] = {"", "warning: ", "", "debug: "};
  fprintf(stderr, "poas: %s%s\n", tag[clamp_level(level)], text);
}

/* Writes one message: on stderr, or bare to the handler. */
static void emit(int level, const char *text) {
  if (in_handler) {
    to_stderr(level, text);
    return;
  }
  pthread_mutex_lock(&emit_lock);
  if (handler) {
    in_handler = 1;
    handler(handler_user, clamp_level(level), text);
    in_handler = 0;
  } else {
    to_stderr(level, text);
  }
  pthread_mutex_unlock(&emit_lock);
}

/* POAS_LOG's level; log_lock held. One that is not a number leaves the
 * library silent, and says so once per value, as a warning whatever the
 * level (into *told_now, for the caller to emit once log_lock is given
 * up): whoever set it asked for messages, and "debug" or " 1" used to
 * give none without a word. */
static int read_env_level(char *told_now, size_t cap) {
  static char told[64];
  const char *env = getenv("POAS_LOG");
  int64_t v = 0;
  if (!env || !*env)
    return 0;
  if (poas__parse_int64(env, 0, &v) == 0)
    return clamp_level((int)POAS__MIN(v, 3));
  if (strncmp(told, env, sizeof told - 1) != 0) {
    poas__strlcpy(told, env, sizeof told);
    snprintf(told_now, cap,
             "POAS_LOG='%s' is not a level (0 silent, 1 warnings, 2 info, 3 debug): logging "
             "stays off",
             env);
  }
  return 0;
}

/* poas_init reads every other variable again, and POAS_LOG with them: a
 * program that sets it between contexts is heard (it was once read for
 * the process's first message alone). */
void poas__log_reread_env(void) {
  char told[160] = "";
  pthread_mutex_lock(&log_lock);
  env_level = read_env_level(told, sizeof told);
  pthread_mutex_unlock(&log_lock);
  if (told[0])
    emit(POAS__LOG_WARN, told);
}

int poas__log_level(void) {
  char told[160] = "";
  pthread_mutex_lock(&log_lock);
  if (env_level < 0)
    env_level = read_env_level(told, sizeof told);
  int level = env_level;
  for (int l = level + 1; l <= POAS__LOG_DEBUG; l++)
    if (held[l] > 0)
      level = l;
  pthread_mutex_unlock(&log_lock);
  if (told[0])
    emit(POAS__LOG_WARN, told);
  return level;
}

void poas__log(int level, const char *fmt, ...) {
  if (level > poas__log_level())
    return;
  /* Most messages fit on the stack; a longer one (a plan's reasons for
   * many devices) is formatted again into the heap, and cut to the
   * stack's length only if that fails. */
  char line[1024], *text = line;
  va_list ap, again;
  va_start(ap, fmt);
  va_copy(again, ap);
  int len = vsnprintf(line, sizeof line, fmt, ap);
  if (len >= (int)sizeof line && (text = malloc((size_t)len + 1)) != NULL)
    vsnprintf(text, (size_t)len + 1, fmt, again);
  else
    text = line;
  va_end(again);
  va_end(ap);
  emit(level, text);
  if (text != line)
    free(text);
}

void poas_set_log_handler(poas_log_fn fn, void *user) {
  int locked = !in_handler; /* a handler's thread holds emit_lock already */
  if (locked)
    pthread_mutex_lock(&emit_lock);
  handler = fn;
  handler_user = fn ? user : NULL;
  if (locked)
    pthread_mutex_unlock(&emit_lock);
}

/* The detail behind the last error, per thread, as dlerror() does. */
static _Thread_local char error_detail[512];

const char *poas_error_detail(void) { return error_detail; }

void poas__clear_detail(void) { error_detail[0] = '\0'; }

static _Thread_local int failures_expected;

int poas__failures_expected(int on) {
  int was = failures_expected;
  failures_expected = on;
  return was;
}

int poas__fail(int err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(error_detail, sizeof error_detail, fmt, ap);
  va_end(ap);
  poas__log(failures_expected ? POAS__LOG_DEBUG : POAS__LOG_WARN, "%s", error_detail);
  return err;
}

int poas_log_level(void) { return poas__log_level(); }
