/* tasks-overhead.c: what the task runtime costs per task. Submits N empty
 * tasks, each with one access to one registered buffer, then waits for
 * all of them, and prints microseconds per task (submit + execute), like
 * StarPU's tasks_overhead example. Modes: R (independent readers: the
 * runtime's throughput) and RW (a chain: each task waits for the previous
 * one, so it also measures the hand-off between threads).
 *
 *   bench/tasks-overhead [N] [rounds]     (default 100000 tasks, 5 rounds)
 *   bench/tasks-overhead --help           (or -h: the usage text)
 *   bench/tasks-overhead --version        (or -V)
 *
 * Prints the best and median round per mode. */
#include "bench/cli.h"
#include "bench/timing.h"
#include "poas.h"
#include "tools/stdout-check.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define MAX_ROUNDS 100

static void empty(void **buffers, void *arg) { (void)buffers, (void)arg; }

static void usage(FILE *f) {
  fprintf(f,
          "Usage: tasks-overhead [NTASKS] [ROUNDS]\n"
          "Time the task runtime per task: NTASKS empty tasks on one buffer, as readers\n"
          "(mode R) and as a chain of writers (mode RW); print the best and median round.\n\n"
          "  NTASKS      tasks per round (default 100000)\n"
          "  ROUNDS      rounds per mode, 1 to %d (default 5)\n"
          "  -h, --help     show this help\n"
          "  -V, --version  show the version\n",
          MAX_ROUNDS);
}

static int bad(const char *what, const char *value) {
  return bench_bad_arg("tasks-overhead", what, value);
}

int main(int argc, char **argv) {
  const char *pos[2] = {NULL, NULL};
  int npos = 0;
  tool_std_ready();
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (bench_is_help(a)) {
      usage(stdout);
      return tool_stdout_status("tasks-overhead", 0);
    }
    if (bench_is_version(a)) {
      printf("tasks-overhead (POAS) %s\n", poas_version());
      return tool_stdout_status("tasks-overhead", 0);
    }
    if (bench_is_option(a))
      return bad("option", a);
    if (npos == 2)
      return bad("argument", a);
    pos[npos++] = a;
  }
  long n = 100000, nr = 5;
  if (pos[0] && bench_parse_long(pos[0], 1, LONG_MAX, &n))
    return bad("ntasks (1 or more)", pos[0]);
  if (pos[1] && bench_parse_long(pos[1], 1, MAX_ROUNDS, &nr))
    return bad("rounds (1 to " BENCH_XSTR(MAX_ROUNDS) ")", pos[1]);
  int rounds = (int)nr;
  poas_options o;
  poas_options_init(&o);
  o.devices = "cpu";
  o.no_profile = 1;
  poas_context *ctx;
  int rc = poas_init(&ctx, &o);
  if (rc) {
    fprintf(stderr, "tasks-overhead: %s: %s\n", poas_strerror(rc), poas_error_detail());
    return 1;
  }
  static char data[64];
  poas_buffer *buf;
  if ((rc = poas_buffer_register(ctx, data, sizeof data, &buf)) != 0) {
    fprintf(stderr, "tasks-overhead: poas_buffer_register: %s: %s\n", poas_strerror(rc),
            poas_error_detail());
    return 1;
  }
  static const poas_access modes[] = {POAS_R, POAS_RW};
  static const char *const names[] = {"R", "RW"};
  for (int m = 0; m < 2; m++) {
    poas_task_desc d = {.cpu = empty, .naccess = 1};
    d.access[0] = (poas_task_access){buf, modes[m], 0, 0};
    double us[MAX_ROUNDS];
    for (int r = 0; r < rounds; r++) {
      double t0 = bench_now();
      for (long i = 0; i < n && rc == 0; i++)
        rc = poas_task_submit(ctx, &d, NULL);
      poas_wait_all(ctx);
      us[r] = (bench_now() - t0) / (double)n * 1e6;
    }
    if (rc) {
      fprintf(stderr, "tasks-overhead: poas_task_submit: %s\n", poas_strerror(rc));
      return 1;
    }
    qsort(us, (size_t)rounds, sizeof *us, bench_cmp_double);
    printf("mode %-2s  %ld tasks x %d rounds: best %.3f us/task, median %.3f us/task\n",
           names[m], n, rounds, us[0], us[rounds / 2]);
  }
  poas_buffer_unregister(buf);
  poas_finalize(ctx);
  return tool_stdout_status("tasks-overhead", 0);
}
