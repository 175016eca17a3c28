/* test-threads.c: the scheduler when threads cannot be started. The
 * program is linked with -Wl,--wrap=pthread_create and
 * --wrap=pthread_join (tests/local.am), so that the threads POAS's own
 * objects start and join go through the wrappers below, which fail the
 * creations asked for and count the rest: every thread started must be
 * joined by the time its engine is destroyed. */
#include "harness.h"
#include "schedule/engine.h"
#include "schedule/schedule.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------- the failing pthread */

/* pthread_create calls numbered from 1 since the last arm(); those from
 * fail_from to fail_to (0: none) fail. */
static atomic_int creates, fail_from, fail_to, started, joined, refused;

int __real_pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *),
                          void *arg);
int __real_pthread_join(pthread_t th, void **ret);
int __wrap_pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *),
                          void *arg);
int __wrap_pthread_join(pthread_t th, void **ret);

int __wrap_pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *),
                          void *arg) {
  int n = atomic_fetch_add(&creates, 1) + 1;
  if (atomic_load(&fail_from) && n >= atomic_load(&fail_from) && n <= atomic_load(&fail_to)) {
    atomic_fetch_add(&refused, 1);
    return EAGAIN;
  }
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
  atomic_store(&refused, 0);
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

/* A run whose host pool cannot start (a node doomed for want of memory)
 * while both its devices fail, in real time (cpu0 and sim0; in virtual
 * time one device runs at a time): cpu0's host call fails once sim0's is
 * running, its successor on the host pool is then doomed (the pool's one
 * thread refused), and sim0's call fails after that. The run reported
 * POAS_EDEVICE, "every device failed", when the doom had left it no way
 * to finish on any device: POAS_ENOMEM is the error. */
static atomic_int second_running;

/* Waits (up to 10 s, so that a wrong order fails instead of hanging)
 * until *flag is set. */
static void wait_for(atomic_int *flag) {
  for (int i = 0; i < 10000 && !atomic_load(flag); i++)
    usleep(1000);
}

static int first_call(void *arg) {
  (void)arg;
  wait_for(&second_running);
  return poas__fail(POAS_EDEVICE, "cpu0's call fails");
}

static int second_call(void *arg) {
  (void)arg;
  atomic_store(&second_running, 1);
  wait_for(&refused);
  return poas__fail(POAS_EDEVICE, "sim0's call fails");
}

static int later_call(void *arg) {
  (void)arg;
  return poas__fail(POAS_EDEVICE, "a later call fails");
}

static int never_runs(void *arg) {
  atomic_store((atomic_int *)arg, 1);
  return 0;
}

static atomic_int pool_ran;

static int doom_emit(void *user, poas__graph *g, int device, int64_t u0, int64_t u1, int chunk) {
  (void)u0, (void)u1;
  static char mem[64];
  poas__gbuf b = {.device = -1, .host = mem, .pitch = sizeof mem, .lines = 1};
  if (g->nbuf == 0 && poas__graph_add_buffer(g, &b) < 0)
    return POAS_ENOMEM;
  int *emits = user;
  poas__ins in = {.kind = POAS__INS_HOST, .device = device, .chunk = chunk, .naccess = 1};
  /* Each device its half of mem: sim1's call must not wait for sim0's. */
  size_t lo = (size_t)device * sizeof mem / 2;
  in.access[0] = (poas__access){{0, 0, 1, lo, lo + sizeof mem / 2}, POAS__RW};
  /* Only the first chunk of each device is the scenario; later ones (the
   * failed device's units handed on) fail at once. */
  in.u.host.fn = emits[device]++ ? later_call : device == 0 ? first_call : second_call;
  in.u.host.arg = &pool_ran;
  if (poas__graph_add(g, &in) < 0)
    return POAS_ENOMEM;
  if (device != 0 || emits[0] > 1)
    return 0;
  in.device = POAS__HOST_ANY, in.u.host.fn = never_runs;
  return poas__graph_add(g, &in) < 0 ? POAS_ENOMEM : 0;
}

TEST(a_doom_while_every_device_fails_is_out_of_memory) {
  poas__devset set;
  char err[256];
  CHECK(poas__devset_open("cpu,sim", &set, err, sizeof err) == 0);
  int emits[2] = {0, 0};
  poas__work_source src = {.user = emits, .total_units = 100, .granule = 10, .emit = doom_emit,
                           .rerunnable = 1};
  poas__sched_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.policy = POAS__SCHED_STATIC;
  cfg.fault_spec = "";
  cfg.u0[0] = 0, cfg.u1[0] = 50, cfg.u0[1] = 50, cfg.u1[1] = 100;
  cfg.rate[0] = cfg.rate[1] = 1e6;
  cfg.predicted_s[0] = cfg.predicted_s[1] = cfg.predicted_makespan_s = 50e-6;
  atomic_store(&second_running, 0);
  atomic_store(&pool_ran, 0);
  alarm(60);
  /* The devices' workers start first (creates 1 and 2), the host pool's
   * one thread when cpu0's call has failed (3). */
  arm(3, 3);
  poas_report rep;
  int rc = poas__schedule_run(&set, &src, &cfg, &rep);
  int nrefused = atomic_load(&refused), ncreates = atomic_load(&creates);
  arm(0, 0);
  alarm(0);
  poas__devset_close(&set);
  CHECK_MSG(nrefused == 1, "%d thread creations refused of %d (%s: %s)", nrefused, ncreates,
            poas_err_name(rc), poas_error_detail());
  CHECK_MSG(!atomic_load(&pool_ran), "the pool ran, %d creations", ncreates);
  CHECK_MSG(rc == POAS_ENOMEM && strstr(poas_error_detail(), "out of memory") &&
                strstr(poas_error_detail(), "every device failed"),
            "%s: %s", poas_err_name(rc), poas_error_detail());
  return 0;
}

TEST_MAIN(TEST_ENTRY(a_pool_that_started_no_thread_starts_again),
          TEST_ENTRY(threads_started_before_a_failure_serve_and_are_joined),
          TEST_ENTRY(a_doom_while_every_device_fails_is_out_of_memory))
