/* tasks-overhead.c: what the task runtime costs per task. Submits N empty
 * tasks, each with one access to one registered buffer, then waits for
 * all of them, and prints microseconds per task (submit + execute), like
 * StarPU's tasks_overhead example. Modes: R (independent readers: the
 * runtime's throughput) and RW (a chain: each task waits for the previous
 * one, so it also measures the hand-off between threads).
 *
 *   bench/tasks-overhead [N] [rounds]     (default 100000 tasks, 5 rounds)
 *
 * Prints the best and median round per mode. */
#include "bench/timing.h"
#include "poas.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void empty(void **buffers, void *arg) { (void)buffers, (void)arg; }

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 100000;
  int rounds = argc > 2 ? atoi(argv[2]) : 5;
  if (n < 1 || rounds < 1 || rounds > 100) {
    fprintf(stderr, "usage: %s [ntasks] [rounds]\n", argv[0]);
    return 2;
  }
  poas_options o;
  poas_options_init(&o);
  o.devices = "cpu";
  o.no_profile = 1;
  poas_context *ctx;
  int rc = poas_init(&ctx, &o);
  if (rc) {
    fprintf(stderr, "poas_init: %s: %s\n", poas_strerror(rc), poas_error_detail());
    return 1;
  }
  static char data[64];
  poas_buffer *buf;
  if ((rc = poas_buffer_register(ctx, data, sizeof data, &buf)) != 0) {
    fprintf(stderr, "poas_buffer_register: %s\n", poas_strerror(rc));
    return 1;
  }
  static const poas_access modes[] = {POAS_R, POAS_RW};
  static const char *const names[] = {"R", "RW"};
  for (int m = 0; m < 2; m++) {
    poas_task_desc d = {.cpu = empty, .naccess = 1};
    d.access[0] = (poas_task_access){buf, modes[m], 0, 0};
    double us[100];
    for (int r = 0; r < rounds; r++) {
      double t0 = bench_now();
      for (long i = 0; i < n && rc == 0; i++)
        rc = poas_task_submit(ctx, &d, NULL);
      poas_wait_all(ctx);
      us[r] = (bench_now() - t0) / (double)n * 1e6;
    }
    if (rc) {
      fprintf(stderr, "poas_task_submit: %s\n", poas_strerror(rc));
      return 1;
    }
    qsort(us, (size_t)rounds, sizeof *us, bench_cmp_double);
    printf("mode %-2s  %ld tasks x %d rounds: best %.3f us/task, median %.3f us/task\n",
           names[m], n, rounds, us[0], us[rounds / 2]);
  }
  poas_buffer_unregister(buf);
  poas_finalize(ctx);
  return 0;
}
