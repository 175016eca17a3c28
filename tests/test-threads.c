/* test-threads.c: the scheduler when threads cannot be started. The
 * program is linked with -Wl,--wrap=pthread_create and
 * --wrap=pthread_join (tests/local.am), so that the threads POAS's own
 * objects start and join go through the wrappers below, which fail the
 * creations asked for and count the rest: every thread started must be
 * joined by the time its engine is destroyed. */
#include "harness.h"
#include "schedule/engine.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

/* ------------------------------------------------------- the failing pthread */

/* pthread_create calls numbered from 1 since the last arm(); those from
 * fail_from to fail_to (0: none) fail. */
static atomic_int creates, fail_from, fail_to, started, joined;

int __real_pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *),
                          void *arg);
int __real_pthread_join(pthread_t th, void **ret);
int __wrap_pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *),
                          void *arg);
int __wrap_pthread_join(pthread_t th, void **ret);

int __wrap_pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *),
                          void *arg) {
  int n = atomic_fetch_add(&creates, 1) + 1;
  if (atomic_load(&fail_from) && n >= atomic_load(&fail_from) && n <= atomic_load(&fail_to))
    return EAGAIN;
  int rc = __real_pthread_create(th, attr, fn, arg);
  if (rc == 0)
    atomic_fetch_add(&started, 1);
  return rc;
}

int __wrap_pthread_join(pthread_t th, void **ret) {
  int rc = __real_pthread_join(th, ret);
  if (rc == 0)
    atomic_fetch_add(&joined, 1);
  return rc;
}

static void arm(int from, int to) {
  atomic_store(&creates, 0);
  atomic_store(&fail_to, to);
  atomic_store(&fail_from, from);
}

/* ------------------------------------------------------------ host calls */

typedef struct call {
  atomic_int ran, done, rc;
} call;

static int call_fn(void *arg) {
  atomic_store(&((call *)arg)->ran, 1);
  return 0;
}

static void call_done(void *arg, int rc) {
  call *c = arg;
  atomic_store(&c->rc, rc);
  atomic_store(&c->done, 1);
}

/* Runs one host call on the engine's host pool and waits for it. */
static void host_call(poas__engine *e, int buf, call *c) {
  poas__ins in = {.kind = POAS__INS_HOST, .device = POAS__HOST_ANY, .chunk = -1, .naccess = 1};
  in.access[0] = (poas__access){{buf, 0, 1, 0, 64}, POAS__RW};
  in.u.host.fn = call_fn;
  in.u.host.arg = c;
  poas__engine_lock(e);
  if (poas__engine_add(e, &in, call_done, c) >= 0)
    poas__engine_drain(e);
  poas__engine_unlock(e);
}

typedef struct fixture {
  poas__devset set;
  poas__engine *e;
  int buf;
  char mem[64];
} fixture;

static int fixture_open(fixture *f, int host_threads) {
  char err[256];
  if (poas__devset_open("sim", &f->set, err, sizeof err) != 0)
    return 1;
  poas__engine_config cfg = {.host_threads = host_threads};
  if (poas__engine_create(&f->set, &cfg, &f->e) != 0) {
    poas__devset_close(&f->set);
    return 1;
  }
  poas__gbuf b = {.device = -1, .host = f->mem, .pitch = sizeof f->mem, .lines = 1};
  poas__engine_lock(f->e);
  f->buf = poas__engine_add_buffer(f->e, &b);
  poas__engine_unlock(f->e);
  atomic_store(&started, 0);
  atomic_store(&joined, 0);
  return f->buf < 0;
}

static void fixture_close(fixture *f) {
  poas__engine_destroy(f->e);
  poas__devset_close(&f->set);
}

/* -------------------------------------------------------------------- tests */

/* No thread of the pool starts: its call is cancelled (POAS_ENOMEM), and
 * the next call starts the pool again and runs, where the pool was left
 * "started" with no thread and the call waited for ever. */
TEST(a_pool_that_started_no_thread_starts_again) {
  fixture f;
  CHECK(fixture_open(&f, 2) == 0);
  alarm(20); /* a call that waits for ever fails the test */
  call first = {0}, second = {0};
  arm(1, 2);
  host_call(f.e, f.buf, &first);
  arm(0, 0);
  host_call(f.e, f.buf, &second);
  fixture_close(&f);
  alarm(0);
  CHECK_RC(atomic_load(&first.rc), POAS_ENOMEM);
  CHECK(!atomic_load(&first.ran));
  CHECK(atomic_load(&second.done) && atomic_load(&second.ran));
  CHECK_RC(atomic_load(&second.rc), 0);
  CHECK_MSG(atomic_load(&joined) == atomic_load(&started), "%d threads started, %d joined",
            atomic_load(&started), atomic_load(&joined));
  return 0;
}

/* Some of the pool's threads start, the rest do not: those that did run
 * the calls, and are joined when the engine goes, where they were left
 * running into the freed engine. */
TEST(threads_started_before_a_failure_serve_and_are_joined) {
  fixture f;
  CHECK(fixture_open(&f, 3) == 0);
  alarm(20);
  call c = {0};
  arm(2, 3);
  host_call(f.e, f.buf, &c);
  arm(0, 0);
  fixture_close(&f);
  alarm(0);
  CHECK(atomic_load(&c.done) && atomic_load(&c.ran));
  CHECK_RC(atomic_load(&c.rc), 0);
  CHECK(atomic_load(&started) == 1);
  CHECK_MSG(atomic_load(&joined) == atomic_load(&started), "%d threads started, %d joined",
            atomic_load(&started), atomic_load(&joined));
  return 0;
}

TEST_MAIN(TEST_ENTRY(a_pool_that_started_no_thread_starts_again),
          TEST_ENTRY(threads_started_before_a_failure_serve_and_are_joined))
