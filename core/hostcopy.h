/* hostcopy.h: a 2-D host memory copy spread over a few threads. A GPU
 * backend stages pageable host memory through page-locked buffers with it:
 * one thread's memcpy (5-12 GB/s on the H100 VM) is what limits a copy
 * from pageable memory, and the PCIe link takes 55 GB/s from page-locked
 * memory, so several threads packing the staging buffers move the same
 * bytes two to three times faster (bench/results/staged-copies-*.md).
 *
 * A copier owns threads - 1 workers; the caller of poas__copier_run is the
 * last one. Runs on one copier must not overlap (each GPU lane that copies
 * has its own). Nothing here knows about devices. */
#ifndef POAS_HOSTCOPY_H
#define POAS_HOSTCOPY_H

#include <stddef.h>

typedef struct poas__copier poas__copier;

/* A copier of `threads` threads in all (1 to 64; 1 starts none). Returns
 * 0, POAS_EINVAL for a bad count, or POAS_ENOMEM when memory or a thread
 * could not be had (nothing is left behind then). */
int poas__copier_create(int threads, poas__copier **out);
/* Stops and joins the workers; NULL is a no-op. */
void poas__copier_destroy(poas__copier *c);
/* The copier's thread count. */
int poas__copier_threads(const poas__copier *c);
/* Copies `rows` runs of `width` bytes from src (runs `src_pitch` apart) to
 * dst (runs `dst_pitch` apart), splitting rows between the threads, or
 * each row's bytes when there are fewer rows than threads; returns when
 * every byte is copied. Small copies are done by the caller alone. The
 * ranges must not overlap. */
void poas__copier_run(poas__copier *c, void *dst, size_t dst_pitch, const void *src,
                      size_t src_pitch, size_t width, size_t rows);

#endif /* POAS_HOSTCOPY_H */
