/* device-copy: what a pipeline's copies cost on a device with its own
 * memory, through its backend (for a CUDA device, the staged path POAS
 * really uses), contiguous against pitched (not a test: it times things).
 *
 * Calibration times contiguous copies only, and predictions use that rate
 * for every tile. A split's tiles are blocks of the operands: a block of r
 * rows of a column-major matrix of m rows is `cols` runs of r elements, m
 * elements apart. Written when multi-tile plans on an H100 took 1.1-1.5x
 * their predicted end-to-end time and one-tile plans about 1.0x; it showed
 * the runtime's pitched copies from pageable memory slower than staged ones
 * (device to host 1.65-2.4x at 4-7 MiB), and pitched copies are now staged
 * from 64 KiB (bench/results/gpu-pitched-copies-h100-2026-11-23.md).
 *
 * For each size it times, in GB/s of payload, H2D and D2H of one block
 *   contiguous       one run of the whole size
 *   pitched W        runs of W bytes, 2W apart on the host (half the rows
 *                    of a matrix twice as tall), for W = 2 KiB, 8 KiB, 64 KiB
 * each alone, and H2D and D2H at once on two lanes (as a pipeline's tiles
 * overlap them: each way's payload over the time both took). Each figure
 * is the median of 5 runs after a warm-up.
 *
 *   bench/device-copy [--devices SPEC] [SIZE ...]
 * Defaults: the first device with its own memory that POAS_DEVICES
 * selects, as the tools take their devices from it, else cuda0 when there
 * is one, else the first device with its own memory; sizes 16 64 256 MiB.
 * A size is MiB (1 to 4096), or KiB with a K (64K to 4096K, a multiple of
 * 64), at most 8 of them. SPEC may carry the device's settings
 * (cuda0:copy_threads=0: the CUDA runtime's own path, to compare with the
 * staged one), and so may POAS_DEVICES. Exit status: 0, 1 when a copy
 * failed or no such device, 2 on a usage error (a malformed SPEC or
 * POAS_DEVICES among them); a simulated device is refused (exit 1). */
#include "bench/cli.h"
#include "bench/timing.h"
#include "devices/device.h"
#include "poas.h"
#include "tools/context-open.h"
#include "tools/shared-options.h"
#include "tools/stdout-check.h"

#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REPS 5
#define MAX_SIZES 8
#define MAX_MIB 4096

typedef struct copy_job {
  poas__device *d;
  int lane, h2d;
  poas__mem mem;
  char *host;
  poas__copy2d shape;
  int rc;
} copy_job;

static int run_copy(copy_job *j) {
  poas__device *d = j->d;
  int rc = j->h2d ? d->be->copy_h2d(d, j->lane, j->mem, j->host, &j->shape)
                  : d->be->copy_d2h(d, j->lane, j->host, j->mem, &j->shape);
  return rc ? rc : d->be->lane_sync(d, j->lane);
}

static void *copy_thread(void *p) {
  copy_job *j = p;
  j->rc = run_copy(j);
  return NULL;
}

/* Median seconds of one copy (both jobs at once when `both`). */
static double timed(copy_job *a, copy_job *b, int both) {
  double t[REPS];
  for (int r = -1; r < REPS; r++) {
    double t0 = bench_now();
    if (both) {
      pthread_t th;
      if (pthread_create(&th, NULL, copy_thread, b) != 0) {
        fprintf(stderr, "device-copy: cannot start a thread\n");
        exit(1);
      }
      a->rc = run_copy(a);
      pthread_join(th, NULL);
    } else {
      a->rc = run_copy(a);
    }
    if (a->rc || (both && b->rc)) {
      fprintf(stderr, "device-copy: copy failed: %s\n", poas_error_detail());
      exit(1);
    }
    if (r >= 0)
      t[r] = bench_now() - t0;
  }
  return bench_median(t, REPS);
}

/* A size argument: whole MiB, or KiB with a K suffix (a multiple of 64,
 * so that every pitched layout's runs divide it). */
static int parse_size(const char *text, size_t *bytes) {
  char num[32];
  size_t len = strlen(text);
  long v;
  if (len > 1 && len < sizeof num && (text[len - 1] == 'K' || text[len - 1] == 'k')) {
    memcpy(num, text, len - 1);
    num[len - 1] = 0;
    if (bench_parse_long(num, 64, (long)MAX_MIB, &v) || v % 64)
      return -1;
    *bytes = (size_t)v << 10;
    return 0;
  }
  if (bench_parse_long(text, 1, MAX_MIB, &v))
    return -1;
  *bytes = (size_t)v << 20;
  return 0;
}

static void usage(FILE *f) {
  fprintf(f,
          "Usage: device-copy [--devices SPEC] [SIZE ...]\n"
          "Time copies to and from a device with its own memory through its backend,\n"
          "contiguous and pitched (runs of 2, 8 and 64 KiB, twice that apart), each\n"
          "direction alone and both at once; GB/s of payload, median of %d.\n\n"
          "  -d, --devices SPEC  the device, with its settings if any (default: the\n"
          "                      first with its own memory that POAS_DEVICES selects,\n"
          "                      else cuda0, else the first with its own memory)\n"
          "  -h, --help          show this help\n"
          "  -V, --version       show the version\n\n"
          "Sizes default to 16 64 256 MiB (at most %d): MiB from 1 to %d, or KiB with\n"
          "a K suffix (64K to 4096K, multiples of 64).\n",
          REPS, MAX_SIZES, MAX_MIB);
}

/* The index of set's first device with memory of its own, or -1. */
static int first_with_memory(const poas__devset *set) {
  for (int i = 0; i < set->ndev; i++)
    if (!set->dev[i]->info.host_memory)
      return i;
  return -1;
}

/* The two host blocks and the two device buffers, as far as they were made. */
static void release(poas__device *d, char *host[2], poas__mem mem[2]) {
  for (int i = 0; i < 2; i++) {
    if (mem[i].ptr)
      d->be->mem_free(d, mem[i]);
    free(host[i]);
  }
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {TOOL_LONGOPT_DEVICES, TOOL_LONGOPTS_END};
  const char *want = NULL;
  int c, status;
  const tool_cli cli = {.prog = "device-copy",
                        .usage = usage,
                        .argc = argc,
                        .argv = argv,
                        .longopts = longopts,
                        .devices = &want};
  tool_std_ready();
  while ((c = tool_getopt(&cli, "d:hV")) != -1)
    if ((status = tool_shared_option(&cli, c, optarg)) != TOOL_GO_ON)
      return status;
  size_t sizes[MAX_SIZES] = {(size_t)16 << 20, (size_t)64 << 20, (size_t)256 << 20};
  int nsizes = 3;
  if (optind < argc) {
    nsizes = 0;
    for (int i = optind; i < argc; i++) {
      if (nsizes == MAX_SIZES || parse_size(argv[i], &sizes[nsizes]))
        return bench_bad_arg("device-copy", "size (MiB from 1 to " BENCH_XSTR(MAX_MIB)
                             ", or KiB with a K, at most 8)", argv[i]);
      nsizes++;
    }
  }
  poas__devset set = {0};
  char err[256];
  const char *from, *given = tool_devices_selection(want, &from);
  int rc = given ? poas__devset_open(given, &set, err, sizeof err) : 0;
  if (given && (rc != 0 || set.ndev == 0)) {
    /* A malformed selection is the user's to fix, as in the tools. */
    fprintf(stderr, "device-copy: %s '%s': %s\n", from, given, err);
    return rc == POAS_ESPEC ? 2 : 1;
  }
  /* POAS_DEVICES is the machine's selection for co-execution, which
   * names the CPU too as often as not: its first device with its own
   * memory is the one to time, and where it has none (POAS_DEVICES=cpu),
   * the default's, as when it is not set. --devices names the device
   * itself. */
  if (given && !want && first_with_memory(&set) < 0) {
    poas__devset_close(&set);
    given = NULL;
  }
  if (!given) { /* the default: cuda0, else opencl0 */
    memset(&set, 0, sizeof set);
    if (poas__devset_open("cuda0", &set, err, sizeof err) != 0) {
      memset(&set, 0, sizeof set);
      if (poas__devset_open("opencl0", &set, err, sizeof err) != 0) {
        fprintf(stderr, "device-copy: no device with its own memory (%s)\n", err);
        return 1;
      }
    }
  }
  int first = want ? 0 : first_with_memory(&set);
  poas__device *d = set.dev[first < 0 ? 0 : first];
  if (d->info.host_memory) {
    fprintf(stderr, "device-copy: %s computes on host memory: it has no copies\n", d->info.id);
    poas__devset_close(&set);
    return 1;
  }
  /* A sim's copies take virtual time, no wall-clock time: timed here,
   * they read as some 17,000 GB/s. bench/accuracy refuses sims alike. */
  if (d->be == &poas__backend_sim) {
    fprintf(stderr,
            "device-copy: %s is simulated: its copies take virtual time and there is nothing "
            "to measure; give a real device with --devices\n",
            d->info.id);
    poas__devset_close(&set);
    return 1;
  }
  size_t top = sizes[0];
  for (int i = 1; i < nsizes; i++)
    top = POAS__MAX(top, sizes[i]);
  /* Host blocks twice the largest size (the pitched layout's span), two
   * of them for the two directions at once, touched before timing. */
  char *host[2] = {malloc(2 * top), malloc(2 * top)};
  poas__mem mem[2] = {{NULL}, {NULL}};
  if (!host[0] || !host[1] || d->be->mem_alloc(d, top, &mem[0]) ||
      d->be->mem_alloc(d, top, &mem[1])) {
    fprintf(stderr, "device-copy: out of memory for %g MiB blocks\n", (double)top / (1 << 20));
    release(d, host, mem);
    poas__devset_close(&set);
    return 1;
  }
  memset(host[0], 1, 2 * top);
  memset(host[1], 2, 2 * top);
  int lanes = d->nlanes;
  printf("device: %s (%s), %d lanes\n\n", d->info.id, d->info.name, lanes);
  printf("| MiB | layout | H2D GB/s | D2H GB/s | each way, both at once |\n");
  printf("|---:|---|---:|---:|---:|\n");
  static const size_t widths[] = {0, 2048, 8192, 65536};
  for (int i = 0; i < nsizes; i++) {
    size_t bytes = sizes[i];
    for (size_t w = 0; w < POAS__ARRAY_LEN(widths); w++) {
      poas__copy2d shape = {bytes, 1, bytes, bytes, 0, 0};
      if (widths[w])
        shape = (poas__copy2d){widths[w], bytes / widths[w], 2 * widths[w], widths[w], 0, 0};
      double payload = (double)(shape.width * shape.rows);
      copy_job in = {d, 0, 1, mem[0], host[0], shape, 0};
      copy_job out = {d, lanes > 2 ? 2 : lanes - 1, 0, mem[1], host[1], shape, 0};
      double h2d = timed(&in, NULL, 0), d2h = timed(&out, NULL, 0);
      double both = lanes > 1 ? timed(&in, &out, 1) : 0;
      char layout[32];
      if (widths[w])
        snprintf(layout, sizeof layout, "pitched %zu KiB", widths[w] >> 10);
      else
        snprintf(layout, sizeof layout, "contiguous");
      printf("| %g | %s | %.1f | %.1f |", (double)bytes / (1 << 20), layout, payload / h2d / 1e9,
             payload / d2h / 1e9);
      if (lanes > 1)
        printf(" %.1f |\n", payload / both / 1e9);
      else
        printf(" - |\n");
      fflush(stdout);
    }
  }
  release(d, host, mem);
  poas__devset_close(&set);
  return tool_stdout_status("device-copy", 0);
}
