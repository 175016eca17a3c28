/* test-memcache.c: the cache of parked device buffers (devices/memcache.c)
 * when allocations fail at once. The devices are a backend of this file's
 * own, whose devices of one index draw on one pool of memory. The backend
 * counts what a cache must never do: free a buffer its user still holds,
 * free one twice, or free one through another device than the one that
 * allocated it. The cache's behaviour on one thread is test-sim's
 * (device_memory_cache). */
#include "devices/device.h"
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define K ((size_t)1024)
#define POOL_BYTES (1024 * K)
#define POOLS 1

/* One physical device's memory: what its buffers take. */
static struct {
  pthread_mutex_t lock;
  size_t used;
} pools[POOLS] = {{PTHREAD_MUTEX_INITIALIZER, 0}};

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

static const poas__backend pool_backend = {
    .kind_name = "pool",
    .built = 1,
    .mem_alloc = pool_alloc,
    .mem_free = pool_free,
};

/* Device `index`, its cache attached as the registry attaches one; NULL
 * when host memory ran out. */
static poas__device *open_pool(int index) {
  poas__device *d = calloc(1, sizeof *d);
  if (!d)
    return NULL;
  d->be = &pool_backend;
  d->index = index;
  d->nlanes = 1;
  d->info.memory_bytes = POOL_BYTES;
  if (poas__memcache_attach(d)) {
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

TEST(failures_at_once_both_retry) {
  poas__device *c = open_pool(0);
  CHECK(c);
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
  for (int i = 0; i < 2; i++)
    let_go(c, lane[i].m, 300 * K);
  c->be->mem_free(c, elsewhere);
  close_pool(c);
  CHECK(used(0) == 0);
  CHECK(atomic_load(&misuse) == 0);
  return 0;
}

TEST_MAIN(TEST_ENTRY(failures_at_once_both_retry))
