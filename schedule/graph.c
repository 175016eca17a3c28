/* graph.c: growing instruction graphs, and the region test dependency
 * inference is built on. */
#include "schedule/graph.h"

#include <stdlib.h>
#include <string.h>

void poas__graph_init(poas__graph *g) { memset(g, 0, sizeof *g); }

void poas__graph_free(poas__graph *g) {
  free(g->buf);
  free(g->ins);
  memset(g, 0, sizeof *g);
}

/* Grows an array to hold one more element. */
static int grow(void **arr, int *cap, int n, size_t elem) {
  if (n < *cap)
    return 0;
  int ncap = *cap ? 2 * *cap : 16;
  void *p = realloc(*arr, (size_t)ncap * elem);
  if (!p)
    return POAS_ENOMEM;
  *arr = p;
  *cap = ncap;
  return 0;
}

int poas__graph_add_buffer(poas__graph *g, const poas__gbuf *b) {
  if (grow((void **)&g->buf, &g->cap_buf, g->nbuf, sizeof *g->buf))
    return POAS_ENOMEM;
  g->buf[g->nbuf] = *b;
  return g->nbuf++;
}

int poas__graph_add(poas__graph *g, const poas__ins *ins) {
  if (grow((void **)&g->ins, &g->cap_ins, g->nins, sizeof *g->ins))
    return POAS_ENOMEM;
  g->ins[g->nins] = *ins;
  return g->nins++;
}

int poas__region_overlap(const poas__region *a, const poas__region *b) {
  return a->buf == b->buf && a->line0 < b->line1 && b->line0 < a->line1 && a->byte0 < b->byte1 &&
         b->byte0 < a->byte1;
}
