/* roundtrip.c: the round trip of a cache line between two host cores (see
 * roundtrip.h). The caller and a helper take turns incrementing one
 * counter: the caller makes it odd, the helper even, and each waits
 * spinning for the other's turn, so every trip moves the line over and
 * back. */
#include "core/roundtrip.h"

#include "core/core.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#define WARM_TRIPS 8
#define ROUNDTRIP_BLOCKS 4

typedef struct bouncer {
  _Alignas(64) atomic_long turn; /* odd: the helper's turn; -1: stop */
} bouncer;

static void *helper_main(void *arg) {
  bouncer *b = arg;
  for (;;) {
    long t = atomic_load_explicit(&b->turn, memory_order_acquire);
    if (t < 0)
      return NULL;
    if (t & 1)
      atomic_store_explicit(&b->turn, t + 1, memory_order_release);
  }
}

/* One trip: hand the line over and wait until it comes back. */
static void trip(bouncer *b) {
  long t = atomic_load_explicit(&b->turn, memory_order_relaxed);
  atomic_store_explicit(&b->turn, t + 1, memory_order_release);
  while (atomic_load_explicit(&b->turn, memory_order_acquire) == t + 1)
    ;
}

double poas__roundtrip_ns(int cpu_a, int cpu_b) {
  if (cpu_a == cpu_b || cpu_a < 0 || cpu_b < 0 || cpu_a >= CPU_SETSIZE || cpu_b >= CPU_SETSIZE)
    return 0;
  cpu_set_t kept, on_a, on_b;
  if (pthread_getaffinity_np(pthread_self(), sizeof kept, &kept) != 0)
    return 0;
  CPU_ZERO(&on_a);
  CPU_SET(cpu_a, &on_a);
  CPU_ZERO(&on_b);
  CPU_SET(cpu_b, &on_b);
  if (pthread_setaffinity_np(pthread_self(), sizeof on_a, &on_a) != 0)
    return 0;
  /* The helper starts on cpu_b: started here and moved there itself, it
   * would wait for the spinning caller's core first (4 ms on the CI VM, a
   * scheduler tick). */
  bouncer b;
  atomic_init(&b.turn, 0);
  pthread_attr_t attr;
  pthread_t helper;
  int started = 0;
  if (pthread_attr_init(&attr) == 0) {
    started = pthread_attr_setaffinity_np(&attr, sizeof on_b, &on_b) == 0 &&
              pthread_create(&helper, &attr, helper_main, &b) == 0;
    pthread_attr_destroy(&attr);
  }
  double ns = 0;
  if (started) {
    for (int i = 0; i < WARM_TRIPS; i++)
      trip(&b);
    /* The quickest block: a trip that waited for another thread on one of
     * the cores (OpenBLAS's workers spin a while after each call) is not
     * the host's doing. */
    for (int blk = 0; blk < ROUNDTRIP_BLOCKS; blk++) {
      double t0 = poas__now();
      for (int i = 0; i < POAS__ROUNDTRIPS / ROUNDTRIP_BLOCKS; i++)
        trip(&b);
      double block_ns = (poas__now() - t0) * 1e9 / (POAS__ROUNDTRIPS / ROUNDTRIP_BLOCKS);
      ns = blk == 0 || block_ns < ns ? block_ns : ns;
    }
    atomic_store_explicit(&b.turn, -1, memory_order_release);
    pthread_join(helper, NULL);
  }
  pthread_setaffinity_np(pthread_self(), sizeof kept, &kept);
  return ns;
}
