/* hostcopy.c: the parallel 2-D host copy (hostcopy.h). Workers sleep on a
 * condition variable between runs; a run is one generation: the caller
 * publishes the block, wakes the workers, copies its own share and waits
 * until every worker has reported its share done. A wake-up costs a few
 * microseconds, against the milliseconds a staging buffer of megabytes
 * takes to fill, and small copies skip the workers altogether. */
#include "core/hostcopy.h"

#include "core/core.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_THREADS 64
/* Below this many bytes one thread copies: waking the others costs more
 * than it saves. */
#define SOLO_BYTES ((size_t)256 << 10)

typedef struct block {
  char *dst;
  const char *src;
  size_t dst_pitch, src_pitch, width, rows;
} block;

struct poas__copier {
  int threads;
  pthread_t worker[MAX_THREADS];
  int nworkers;
  pthread_mutex_t lock;
  pthread_cond_t wake, done;
  block job;
  unsigned long generation;
  int pending; /* workers that have not finished this generation */
  int quit;
};

typedef struct worker_arg {
  poas__copier *c;
  int share; /* this worker's share of a job: 1 .. threads-1; the caller has 0 */
} worker_arg;

/* Copies share `share` of `threads` of block b: a range of rows, or of
 * every row's bytes when there are fewer rows than threads. Slices are
 * whole cache lines so that two threads never write the same line. */
static void copy_share(const block *b, int share, int threads) {
  if (b->rows >= (size_t)threads) {
    size_t r0 = b->rows * (size_t)share / (size_t)threads;
    size_t r1 = b->rows * (size_t)(share + 1) / (size_t)threads;
    for (size_t r = r0; r < r1; r++)
      memcpy(b->dst + r * b->dst_pitch, b->src + r * b->src_pitch, b->width);
    return;
  }
  /* Each slice is the ceiling of width / threads, rounded up to whole
   * lines: from the floor, a width such as 4198401 bytes (a 2049^2 float
   * operand's quarter) on 4 threads left the last byte of every row
   * uncopied, whenever the floor was already whole lines. */
  size_t per = ((b->width + (size_t)threads - 1) / (size_t)threads + 63) / 64 * 64;
  size_t off = per * (size_t)share;
  if (off >= b->width)
    return;
  size_t len = POAS__MIN(per, b->width - off);
  for (size_t r = 0; r < b->rows; r++)
    memcpy(b->dst + r * b->dst_pitch + off, b->src + r * b->src_pitch + off, len);
}

static void *worker_main(void *p) {
  worker_arg *a = p;
  poas__copier *c = a->c;
  int share = a->share;
  free(a);
  unsigned long seen = 0;
  pthread_mutex_lock(&c->lock);
  for (;;) {
    while (c->generation == seen && !c->quit)
      pthread_cond_wait(&c->wake, &c->lock);
    if (c->quit)
      break;
    seen = c->generation;
    block b = c->job;
    pthread_mutex_unlock(&c->lock);
    copy_share(&b, share, c->threads);
    pthread_mutex_lock(&c->lock);
    if (--c->pending == 0)
      pthread_cond_signal(&c->done);
  }
  pthread_mutex_unlock(&c->lock);
  return NULL;
}

void poas__copier_destroy(poas__copier *c) {
  if (!c)
    return;
  pthread_mutex_lock(&c->lock);
  c->quit = 1;
  pthread_cond_broadcast(&c->wake);
  pthread_mutex_unlock(&c->lock);
  for (int i = 0; i < c->nworkers; i++)
    pthread_join(c->worker[i], NULL);
  pthread_cond_destroy(&c->done);
  pthread_cond_destroy(&c->wake);
  pthread_mutex_destroy(&c->lock);
  free(c);
}

int poas__copier_create(int threads, poas__copier **out) {
  *out = NULL;
  if (threads < 1 || threads > MAX_THREADS)
    return poas__fail(POAS_EINVAL, "host copy: %d threads (1 to %d)", threads, MAX_THREADS);
  poas__copier *c = calloc(1, sizeof *c);
  if (!c)
    return poas__fail(POAS_ENOMEM, "host copy: no memory for the copier");
  c->threads = threads;
  pthread_mutex_init(&c->lock, NULL);
  pthread_cond_init(&c->wake, NULL);
  pthread_cond_init(&c->done, NULL);
  for (int i = 1; i < threads; i++) {
    worker_arg *a = malloc(sizeof *a);
    if (a)
      *a = (worker_arg){c, i};
    if (!a || pthread_create(&c->worker[c->nworkers], NULL, worker_main, a) != 0) {
      free(a);
      poas__copier_destroy(c);
      return poas__fail(POAS_ENOMEM, "host copy: could not start thread %d of %d", i + 1,
                        threads);
    }
    c->nworkers++;
  }
  *out = c;
  return 0;
}

int poas__copier_threads(const poas__copier *c) { return c->threads; }

void poas__copier_run(poas__copier *c, void *dst, size_t dst_pitch, const void *src,
                      size_t src_pitch, size_t width, size_t rows) {
  block b = {dst, src, dst_pitch, src_pitch, width, rows};
  if (width == 0 || rows == 0)
    return;
  if (c->threads == 1 || width * rows < SOLO_BYTES) {
    copy_share(&b, 0, 1);
    return;
  }
  pthread_mutex_lock(&c->lock);
  c->job = b;
  c->pending = c->nworkers;
  c->generation++;
  pthread_cond_broadcast(&c->wake);
  pthread_mutex_unlock(&c->lock);
  copy_share(&b, 0, c->threads);
  pthread_mutex_lock(&c->lock);
  while (c->pending > 0)
    pthread_cond_wait(&c->done, &c->lock);
  pthread_mutex_unlock(&c->lock);
}
