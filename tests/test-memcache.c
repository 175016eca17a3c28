/* test-memcache.c: the cache of parked device buffers (devices/memcache.c)
 * when several lanes, and the contexts of one process, allocate at once.
 * The devices are a backend of this file's own, whose devices of one index
 * draw on one pool of memory, as every context's cuda0 draws on one GPU;
 * each device stands for one context's open of it. The backend counts
 * what a cache must never do: free a buffer its user still holds, free
 * one twice, or free one through another device than the one that
 * allocated it (an OpenCL buffer's reservation belongs to its own
 * device). The cache's behaviour on one thread of one context is
 * test-sim's (device_memory_cache). */
#include "devices/device.h"
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define K ((size_t)1024)
#define POOL_BYTES (1024 * K)
/* Each test draws on pools of its own, so that one that fails midway
 * leaves the next its own memory. */
#define POOLS 7

/* One physical device's memory: what its buffers take. */
static struct {
  pthread_mutex_t lock;
  size_t used;
} pools[POOLS] = {{PTHREAD_MUTEX_INITIALIZER, 0}, {PTHREAD_MUTEX_INITIALIZER, 0},
                  {PTHREAD_MUTEX_INITIALIZER, 0}, {PTHREAD_MUTEX_INITIALIZER, 0},
                  {PTHREAD_MUTEX_INITIALIZER, 0}, {PTHREAD_MUTEX_INITIALIZER, 0},
                  {PTHREAD_MUTEX_INITIALIZER, 0}};

/* While above 0, a failed allocation waits at failures_met until as many
 * have failed as it was set to, as two lanes of a GEMM may fail at once. */
static atomic_int failures_to_meet;
static pthread_barrier_t failures_met;

/* What the cache did wrong, counted by the backend. */
static atomic_int misuse;

#define BLOCK_MAGIC 0x6d656d63u

/* A buffer: its header, then its bytes. `held` is set by the test while
 * it uses the buffer, between poas__dev_alloc and poas__dev_free. */
typedef struct block {
  unsigned magic;
  poas__device *owner;
  size_t bytes;
  atomic_int held;
} block;

static int pool_alloc(poas__device *d, size_t bytes, poas__mem *out) {
  int fits;
  pthread_mutex_lock(&pools[d->index].lock);
  fits = bytes <= POOL_BYTES - pools[d->index].used;
  if (fits)
    pools[d->index].used += bytes;
  pthread_mutex_unlock(&pools[d->index].lock);
  if (!fits && atomic_fetch_sub(&failures_to_meet, 1) > 0)
    pthread_barrier_wait(&failures_met);
  if (!fits)
    return poas__fail(POAS_ENOMEM, "pool%d: %zu bytes do not fit", d->index, bytes);
  block *b = malloc(sizeof *b + bytes);
  if (!b)
    abort();
  b->magic = BLOCK_MAGIC, b->owner = d, b->bytes = bytes;
  atomic_init(&b->held, 0);
  out->ptr = b;
  return 0;
}

static void pool_free(poas__device *d, poas__mem mem) {
  block *b = mem.ptr;
  if (b->magic != BLOCK_MAGIC || b->owner != d || atomic_load(&b->held)) {
    atomic_fetch_add(&misuse, 1);
    return;
  }
  b->magic = 0;
  pthread_mutex_lock(&pools[d->index].lock);
  pools[d->index].used -= b->bytes;
  pthread_mutex_unlock(&pools[d->index].lock);
  free(b);
}

static int pool_available(poas__device *d, uint64_t *bytes) {
  pthread_mutex_lock(&pools[d->index].lock);
  *bytes = POOL_BYTES - pools[d->index].used;
  pthread_mutex_unlock(&pools[d->index].lock);
  return 0;
}

static const poas__backend pool_backend = {
    .kind_name = "pool",
    .built = 1,
    .mem_alloc = pool_alloc,
    .mem_free = pool_free,
    .mem_available = pool_available,
};

/* One context's open of device `index`, its cache attached as the
 * registry attaches one; NULL when host memory ran out. */
static poas__device *open_pool(int index, int shared) {
  poas__device *d = calloc(1, sizeof *d);
  if (!d)
    return NULL;
  d->be = &pool_backend;
  d->index = index;
  d->nlanes = 1;
  d->info.memory_bytes = POOL_BYTES;
  if (poas__memcache_attach(d, shared)) {
    free(d);
    return NULL;
  }
  return d;
}

static void close_pool(poas__device *d) {
  poas__memcache_detach(d);
  free(d);
}

static size_t used(int index) {
  pthread_mutex_lock(&pools[index].lock);
  size_t u = pools[index].used;
  pthread_mutex_unlock(&pools[index].lock);
  return u;
}

static uint64_t available(poas__device *d) {
  uint64_t now = 0;
  return poas__dev_available(d, &now) == 0 ? now : 0;
}

static int hold(poas__device *d, size_t bytes, poas__mem *m) {
  int rc = poas__dev_alloc(d, bytes, m);
  if (rc == 0)
    atomic_store(&((block *)m->ptr)->held, 1);
  return rc;
}

static void let_go(poas__device *d, poas__mem m, size_t bytes) {
  atomic_store(&((block *)m.ptr)->held, 0);
  poas__dev_free(d, m, bytes);
}

/* Two allocations of one device that fail at once (two lanes of a GEMM)
 * both retry: the first to release the parked buffers releases them all,
 * and the second finds none left, but the room it needed is there now.
 * Retrying only where something was parked, the second failed: a GEMM's
 * lane failed so on a 3 MiB fake GPU, and with it the call. */
typedef struct lane_alloc {
  poas__device *d;
  poas__mem m;
  int rc;
} lane_alloc;

static void *alloc_on_lane(void *arg) {
  lane_alloc *l = arg;
  l->rc = hold(l->d, 300 * K, &l->m);
  return NULL;
}

/* Warnings the library logs, counted. */
static atomic_int warnings;
static void count_warnings(void *user, int level, const char *message) {
  (void)user, (void)message;
  if (level <= 1)
    atomic_fetch_add(&warnings, 1);
}

TEST(failures_at_once_both_retry) {
  poas__device *c = open_pool(0, 1);
  CHECK(c);
  /* A failure the retry fixes is no warning: both lanes' first tries
   * warned, of allocations that then succeeded. */
  atomic_store(&warnings, 0);
  poas_set_log_handler(count_warnings, NULL);
  poas__log_hold(POAS__LOG_WARN);
  /* A parked buffer, more than a sixteenth larger than the lanes ask for
   * (so not handed to them), and one held elsewhere. */
  poas__mem m, elsewhere;
  CHECK_OK(hold(c, 400 * K, &m));
  let_go(c, m, 400 * K);
  CHECK_OK(c->be->mem_alloc(c, 400 * K, &elsewhere));
  CHECK(used(0) == 800 * K); /* 224 KiB free: neither 300 KiB fits */
  CHECK(pthread_barrier_init(&failures_met, NULL, 2) == 0);
  atomic_store(&failures_to_meet, 2);
  lane_alloc lane[2] = {{c, {NULL}, -1}, {c, {NULL}, -1}};
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    CHECK(pthread_create(&t[i], NULL, alloc_on_lane, &lane[i]) == 0);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  atomic_store(&failures_to_meet, 0);
  pthread_barrier_destroy(&failures_met);
  CHECK_MSG(lane[0].rc == 0 && lane[1].rc == 0, "the lanes' allocations returned %d and %d",
            lane[0].rc, lane[1].rc);
  int warned = atomic_load(&warnings);
  /* One that the retry cannot fix warns, once. */
  poas__mem none;
  CHECK_RC(hold(c, 2 * POOL_BYTES, &none), POAS_ENOMEM);
  poas__log_release(POAS__LOG_WARN);
  poas_set_log_handler(NULL, NULL);
  CHECK_MSG(warned == 0, "%d warnings of allocations the retry made", warned);
  CHECK_MSG(atomic_load(&warnings) == 1, "%d warnings of one that failed twice",
            atomic_load(&warnings) - warned);
  for (int i = 0; i < 2; i++)
    let_go(c, lane[i].m, 300 * K);
  c->be->mem_free(c, elsewhere);
  close_pool(c);
  CHECK(used(0) == 0);
  CHECK(atomic_load(&misuse) == 0);
  return 0;
}

/* Two contexts on one GPU: what one parked is free to the other, to plan
 * with and to allocate. Each context's cache parks up to half the device,
 * and a 6 MiB fake GPU that one context's buffers half filled had the
 * other's GEMM refused as too big (test-gemm-cuda,
 * cuda_contexts_share_parked_memory). */
TEST(other_contexts_parked_buffers_are_free) {
  poas__device *a = open_pool(1, 1), *b = open_pool(1, 1);
  CHECK(a && b);
  poas__mem m, big;
  CHECK_OK(hold(a, 400 * K, &m));
  let_go(a, m, 400 * K); /* parked in a's cache */
  CHECK(used(1) == 400 * K);
  CHECK_MSG(available(b) == POOL_BYTES, "b may allocate %llu of %zu",
            (unsigned long long)available(b), POOL_BYTES);
  CHECK_OK(hold(b, POOL_BYTES, &big));
  CHECK(used(1) == POOL_BYTES);
  /* a's cache let go of it: a allocates afresh, and finds no room. */
  CHECK(available(a) == 0);
  CHECK_RC(hold(a, 400 * K, &m), POAS_ENOMEM);
  let_go(b, big, POOL_BYTES); /* more than half the device: not parked */
  CHECK(used(1) == 0);
  close_pool(a);
  close_pool(b);
  CHECK(atomic_load(&misuse) == 0);
  return 0;
}

/* Trimming a device (calibration does, before it measures the memory a
 * device can allocate) releases what every context parked on it, and
 * nothing of another device's. */
TEST(trim_releases_every_contexts_parked_buffers) {
  poas__device *a = open_pool(5, 1), *b = open_pool(5, 1), *other = open_pool(6, 1);
  CHECK(a && b && other);
  poas__mem m;
  CHECK_OK(hold(a, 300 * K, &m));
  let_go(a, m, 300 * K);
  CHECK_OK(hold(other, 200 * K, &m));
  let_go(other, m, 200 * K);
  CHECK(used(5) == 300 * K && used(6) == 200 * K);
  poas__dev_trim(b);
  CHECK_MSG(used(5) == 0, "%zu bytes still parked on b's device", used(5));
  CHECK(used(6) == 200 * K);
  close_pool(other);
  close_pool(b);
  close_pool(a);
  CHECK(used(5) == 0 && used(6) == 0);
  CHECK(atomic_load(&misuse) == 0);
  return 0;
}

/* Only idle buffers go, and only those of the same device: a buffer one
 * context holds stays its own, a device of another index keeps what it
 * parked, and so does a device no other context can open (a sim: shared
 * 0). */
TEST(only_idle_buffers_of_the_same_device_go) {
  poas__device *a = open_pool(2, 1), *b = open_pool(2, 1), *other = open_pool(3, 1);
  poas__device *own = open_pool(2, 0);
  CHECK(a && b && other && own);
  poas__mem held, m;
  CHECK_OK(hold(a, 300 * K, &held));
  CHECK_OK(hold(other, 300 * K, &m));
  let_go(other, m, 300 * K);
  CHECK_OK(hold(own, 200 * K, &m));
  let_go(own, m, 200 * K);
  /* Neither a's held buffer nor the one the unshared device parked is free
   * to b, nor does b's failure release either. */
  CHECK(available(b) == POOL_BYTES - 300 * K - 200 * K);
  CHECK_RC(hold(b, POOL_BYTES - 300 * K, &m), POAS_ENOMEM);
  CHECK(used(2) == 500 * K && used(3) == 300 * K);
  CHECK(atomic_load(&misuse) == 0);
  /* Once a lets go of its buffer, it is parked, and free to b. */
  let_go(a, held, 300 * K);
  CHECK_OK(hold(b, POOL_BYTES - 200 * K, &m));
  let_go(b, m, POOL_BYTES - 200 * K);
  CHECK(used(3) == 300 * K);
  close_pool(own);
  close_pool(other);
  close_pool(b);
  close_pool(a);
  CHECK(used(2) == 0 && used(3) == 0);
  CHECK(atomic_load(&misuse) == 0);
  return 0;
}

/* Contexts on threads of their own, one device each, allocating and
 * freeing at once while others close and open: no buffer is freed while
 * held, twice or by the wrong device, and what they all parked is free to
 * a context that comes after (the list of caches survives the churn). A
 * failed allocation is no error here: the others' held buffers may fill
 * the device. */
#define CHURN_THREADS 4
#define CHURN_ROUNDS 400

static void *churn(void *arg) {
  uint64_t seed = (uint64_t)(uintptr_t)arg;
  poas__device *d = open_pool(4, 1);
  if (!d)
    return (void *)1;
  for (int r = 0; r < CHURN_ROUNDS; r++) {
    size_t bytes[2] = {(size_t)(16 + test_pick(&seed, 200)) * K,
                       (size_t)(16 + test_pick(&seed, 200)) * K};
    poas__mem m[2];
    int ok[2];
    for (int i = 0; i < 2; i++)
      ok[i] = hold(d, bytes[i], &m[i]) == 0;
    for (int i = 0; i < 2; i++)
      if (ok[i])
        let_go(d, m[i], bytes[i]);
    if (r % 100 == 49) { /* a context that closes, and another that opens */
      close_pool(d);
      if (!(d = open_pool(4, 1)))
        return (void *)1;
    }
  }
  poas__clear_detail();
  return d; /* still open, its buffers parked */
}

TEST(contexts_on_threads_share_the_device_safely) {
  pthread_t t[CHURN_THREADS];
  for (int i = 0; i < CHURN_THREADS; i++)
    CHECK(pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)(i + 1)) == 0);
  poas__device *left[CHURN_THREADS];
  int bad = 0;
  for (int i = 0; i < CHURN_THREADS; i++) {
    void *r;
    pthread_join(t[i], &r);
    left[i] = r;
    bad |= r == NULL || r == (void *)1;
  }
  CHECK(!bad);
  CHECK(atomic_load(&misuse) == 0);
  CHECK(used(4) > 0); /* what they parked */
  poas__device *late = open_pool(4, 1);
  CHECK(late);
  CHECK(available(late) == POOL_BYTES);
  poas__mem m;
  CHECK_OK(hold(late, POOL_BYTES, &m));
  let_go(late, m, POOL_BYTES);
  close_pool(late);
  for (int i = 0; i < CHURN_THREADS; i++)
    close_pool(left[i]);
  CHECK(used(4) == 0);
  CHECK(atomic_load(&misuse) == 0);
  return 0;
}

TEST_MAIN(TEST_ENTRY(failures_at_once_both_retry),
          TEST_ENTRY(other_contexts_parked_buffers_are_free),
          TEST_ENTRY(trim_releases_every_contexts_parked_buffers),
          TEST_ENTRY(only_idle_buffers_of_the_same_device_go),
          TEST_ENTRY(contexts_on_threads_share_the_device_safely))
