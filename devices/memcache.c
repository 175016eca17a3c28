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
 * released.
 *
 * A GPU is one memory for every context of the process that opened it
 * (one context per thread is how a program calls from several threads),
 * and each context's cache parks up to half of it: on a fake GPU of 6
 * MiB, one context's sgemm of 700 left 2.6 MiB parked, and another
 * context's sgemm of 1000, which alone ran in 10 tiles, was planned into
 * the 3.4 MiB left and refused as too big (POAS_ETOOBIG). So the caches of
 * such devices are on one list for the process, and what one of them
 * parks counts as free to all the caches of its device: a failed
 * allocation releases every parked buffer of its device, any context's,
 * before it tries again, and poas__dev_available counts them all. */
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
  /* Set when attached, read-only after. */
  poas__device *dev;
  int shared;            /* on the process's list: other contexts may open its device */
  poas__memcache *next;  /* on that list; guarded by shared_lock */
};

/* The caches of the devices whose memory other contexts of the process
 * may share, whatever context opened them. Taken before a cache's lock,
 * never after, and held while another context's parked buffers go back to
 * its backend: that context's device cannot close meanwhile (detaching
 * its cache takes this lock first). */
static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static poas__memcache *shared_caches;

/* Whether two caches hold buffers of the same physical device: the same
 * backend's device of the same index (an OpenCL sub-device of cores=N has
 * its parent's). */
static int same_memory(const poas__memcache *a, const poas__memcache *b) {
  return a->dev->be == b->dev->be && a->dev->index == b->dev->index;
}

static void drain(poas__memcache *c);

int poas__memcache_attach(poas__device *d, int shared) {
  poas__memcache *c = calloc(1, sizeof *c);
  if (!c)
    return POAS_ENOMEM;
  pthread_mutex_init(&c->lock, NULL);
  c->dev = d;
  /* Host memory is the host's to manage: its parked buffers wait for no
   * other context's allocation. */
  c->shared = shared && !d->info.host_memory && d->info.memory_bytes;
  if (c->shared) {
    pthread_mutex_lock(&shared_lock);
    c->next = shared_caches;
    shared_caches = c;
    pthread_mutex_unlock(&shared_lock);
  }
  d->cache = c;
  return 0;
}

void poas__memcache_detach(poas__device *d) {
  poas__memcache *c = d->cache;
  if (!c)
    return;
  if (c->shared) {
    pthread_mutex_lock(&shared_lock);
    poas__memcache **at = &shared_caches;
    while (*at != c)
      at = &(*at)->next;
    *at = c->next;
    pthread_mutex_unlock(&shared_lock);
  }
  drain(c);
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

/* Gives every buffer parked in c back to its backend. A buffer in use is
 * out of the cache, not in it: only idle ones go. */
static void drain(poas__memcache *c) {
  for (;;) {
    poas__mem m;
    pthread_mutex_lock(&c->lock);
    int any = c->n > 0;
    if (any)
      take(c, c->n - 1, &m);
    pthread_mutex_unlock(&c->lock);
    if (!any)
      return;
    c->dev->be->mem_free(c->dev, m);
  }
}

/* Releases the parked buffers of c's device: those of every context's
 * cache of it where it is shared, else c's own. */
static void release_parked(poas__memcache *c) {
  if (!c->shared) {
    drain(c);
    return;
  }
  pthread_mutex_lock(&shared_lock);
  for (poas__memcache *o = shared_caches; o; o = o->next)
    if (same_memory(o, c))
      drain(o);
  pthread_mutex_unlock(&shared_lock);
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
  if (!c)
    return d->be->mem_alloc(d, bytes, out);
  /* A failure for memory is tried again below, and no warning until the
   * retry fails too: one that the retry fixed still warned, of a call that
   * then ran. Any other failure is said as it was. */
  int was = poas__failures_expected(1);
  int rc = d->be->mem_alloc(d, bytes, out);
  poas__failures_expected(was);
  if (rc && rc != POAS_ENOMEM && !was)
    poas__warn("%s", poas_error_detail());
  if (rc != POAS_ENOMEM)
    return rc;
  /* Tried again even where nothing is parked any more: an allocation on
   * another lane that failed at the same time may have just released it
   * all. Retried only where something was parked, the lane that came
   * second failed for memory the first had just made free, and the
   * device failed with it (a GEMM of two contexts on a 3 MiB fake GPU). */
  release_parked(c);
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

static size_t parked_bytes(poas__memcache *c) {
  pthread_mutex_lock(&c->lock);
  size_t bytes = c->bytes;
  pthread_mutex_unlock(&c->lock);
  return bytes;
}

int poas__dev_available(poas__device *d, uint64_t *bytes) {
  uint64_t now;
  if (!d->be->mem_available || d->be->mem_available(d, &now) != 0)
    return -1;
  poas__memcache *c = d->cache;
  if (c && c->shared) {
    /* Another context's parked buffers are free to this one as well: an
     * allocation that does not fit without them releases them. */
    pthread_mutex_lock(&shared_lock);
    for (poas__memcache *o = shared_caches; o; o = o->next)
      if (same_memory(o, c))
        now += parked_bytes(o);
    pthread_mutex_unlock(&shared_lock);
  } else if (c) {
    now += parked_bytes(c);
  }
  *bytes = now;
  return 0;
}

void poas__dev_trim(poas__device *d) {
  if (d->cache)
    release_parked(d->cache);
}
