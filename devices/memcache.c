/* memcache.c: the per-device cache of freed buffers (see device.h).
 * Buffers are matched by size: the smallest parked buffer that holds the
 * request and is at most twice its size, so a tiny request never pins a
 * large buffer. On a device with its own memory the match is tighter, at
 * most MEMCACHE_SLACK more than the request: a plan fills such a device
 * up to its margin (optimize/split.c, MEMORY_MARGIN: 90%), and a buffer
 * handed out larger than asked takes memory the plan counted on. With a
 * 400 KB buffer parked, a 1 MB sim's next GEMM took it for its 283 KB
 * shared operand, and its last tile then found no room: the device
 * failed, and the call with it, where the same GEMM alone ran. The cache
 * holds at most MEMCACHE_SLOTS buffers and, on a device with its own
 * memory, at most half of it; beyond that the oldest parked buffer is
 * released. */
#include "devices/device.h"

#include <stdlib.h>

#define MEMCACHE_SLOTS 32

/* Most a buffer handed out on a device with its own memory may exceed the
 * request by, as a fraction of it: 1/16, within the 1/9 that a plan's
 * 10% margin leaves (0.9 x 17/16 < 1) when every buffer it holds is one. */
#define MEMCACHE_SLACK 16

typedef struct parked {
  poas__mem mem;
  size_t bytes;
} parked;

struct poas__memcache {
  pthread_mutex_t lock;
  int n;
  size_t bytes;              /* parked in all */
  parked slot[MEMCACHE_SLOTS]; /* oldest first */
  /* Parked buffers handed out larger than asked, with their real sizes:
   * their users free them by the size they asked for, and parked by that
   * size, a buffer was then taken for a request a sixteenth smaller
   * again, and so on, ever further past MEMCACHE_SLACK (and past half on
   * host memory). */
  int nlent;
  parked lent[MEMCACHE_SLOTS];
};

int poas__memcache_attach(poas__device *d) {
  poas__memcache *c = calloc(1, sizeof *c);
  if (!c)
    return POAS_ENOMEM;
  pthread_mutex_init(&c->lock, NULL);
  d->cache = c;
  return 0;
}

void poas__memcache_detach(poas__device *d) {
  if (!d->cache)
    return;
  poas__dev_trim(d);
  pthread_mutex_destroy(&d->cache->lock);
  free(d->cache);
  d->cache = NULL;
}

static void take(poas__memcache *c, int i, poas__mem *out) {
  *out = c->slot[i].mem;
  c->bytes -= c->slot[i].bytes;
  for (int j = i + 1; j < c->n; j++)
    c->slot[j - 1] = c->slot[j];
  c->n--;
}

/* The real size of lent buffer `mem`, which it forgets; `asked` where it
 * was not lent larger than asked. Locked. */
static size_t returned(poas__memcache *c, poas__mem mem, size_t asked) {
  for (int i = 0; i < c->nlent; i++)
    if (c->lent[i].mem.ptr == mem.ptr) {
      size_t real = c->lent[i].bytes;
      c->lent[i] = c->lent[--c->nlent];
      return real;
    }
  return asked;
}

int poas__dev_alloc(poas__device *d, size_t bytes, poas__mem *out) {
  poas__memcache *c = d->cache;
  if (c) {
    pthread_mutex_lock(&c->lock);
    int best = -1;
    int own = !d->info.host_memory && d->info.memory_bytes;
    /* A buffer larger than asked only while its real size can be kept. */
    int can_lend = c->nlent < MEMCACHE_SLOTS;
    for (int i = 0; i < c->n; i++)
      if (c->slot[i].bytes >= bytes && (can_lend || c->slot[i].bytes == bytes) &&
          (own ? c->slot[i].bytes - bytes <= bytes / MEMCACHE_SLACK
               : c->slot[i].bytes / 2 <= bytes) &&
          (best < 0 || c->slot[i].bytes < c->slot[best].bytes))
        best = i;
    if (best >= 0 && c->slot[best].bytes > bytes)
      c->lent[c->nlent++] = c->slot[best];
    if (best >= 0)
      take(c, best, out);
    pthread_mutex_unlock(&c->lock);
    if (best >= 0)
      return 0;
  }
  int rc = d->be->mem_alloc(d, bytes, out);
  if (rc != POAS_ENOMEM || !c)
    return rc;
  /* Tried again even where nothing is parked any more: an allocation on
   * another lane that failed at the same time may have just released it
   * all. Retried only where something was parked, the lane that came
   * second failed for memory the first had just made free, and the
   * device failed with it (a GEMM of two contexts on a 3 MiB fake GPU). */
  poas__dev_trim(d);
  return d->be->mem_alloc(d, bytes, out);
}

void poas__dev_free(poas__device *d, poas__mem mem, size_t bytes) {
  poas__memcache *c = d->cache;
  if (!mem.ptr)
    return;
  if (!c) {
    d->be->mem_free(d, mem);
    return;
  }
  size_t cap = d->info.host_memory || !d->info.memory_bytes ? SIZE_MAX : d->info.memory_bytes / 2;
  parked evict[MEMCACHE_SLOTS + 1];
  int nevict = 0;
  pthread_mutex_lock(&c->lock);
  bytes = returned(c, mem, bytes);
  if (bytes > cap) {
    evict[nevict++] = (parked){mem, bytes};
  } else {
    while (c->n && (c->n == MEMCACHE_SLOTS || c->bytes + bytes > cap)) {
      evict[nevict].bytes = c->slot[0].bytes;
      take(c, 0, &evict[nevict].mem);
      nevict++;
    }
    c->slot[c->n++] = (parked){mem, bytes};
    c->bytes += bytes;
  }
  pthread_mutex_unlock(&c->lock);
  for (int i = 0; i < nevict; i++)
    d->be->mem_free(d, evict[i].mem);
}

void poas__dev_release(poas__device *d, poas__mem mem, size_t bytes, int failed) {
  if (!(failed && mem.ptr)) {
    poas__dev_free(d, mem, bytes);
    return;
  }
  /* Forgotten as lent too: the backend may hand out its address again. */
  if (d->cache) {
    pthread_mutex_lock(&d->cache->lock);
    returned(d->cache, mem, bytes);
    pthread_mutex_unlock(&d->cache->lock);
  }
  d->be->mem_free(d, mem);
}

int poas__dev_available(poas__device *d, uint64_t *bytes) {
  uint64_t now;
  if (!d->be->mem_available || d->be->mem_available(d, &now) != 0)
    return -1;
  poas__memcache *c = d->cache;
  if (c) {
    pthread_mutex_lock(&c->lock);
    now += c->bytes;
    pthread_mutex_unlock(&c->lock);
  }
  *bytes = now;
  return 0;
}

void poas__dev_trim(poas__device *d) {
  poas__memcache *c = d->cache;
  if (!c)
    return;
  for (;;) {
    poas__mem m;
    pthread_mutex_lock(&c->lock);
    int any = c->n > 0;
    if (any)
      take(c, c->n - 1, &m);
    pthread_mutex_unlock(&c->lock);
    if (!any)
      return;
    d->be->mem_free(d, m);
  }
}
