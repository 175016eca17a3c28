/* poas-mpi-bench: one GEMM split across the nodes of an MPI job, each node
 * running its rows through POAS on every device it has. The method is
 * POAS's own, one level up: every rank predicts how fast its node runs the
 * problem (poas_plan_gemm_call, on its own calibrated profile: the default
 * path is named for the host), the rows of C are shared in proportion to
 * those rates, refined REFINE times by each rank's plan for its own block
 * (fixed costs, the shape of a thinner block), and each rank's GEMM is
 * timed beside its prediction.
 *
 * Rank 0 holds A, B and C in host memory, as an application would: it
 * scatters each rank's rows of A, broadcasts B and gathers the rows of C.
 * Those transfers are predicted from the links measured at start (a
 * ping-pong of a small and a large message between rank 0 and each rank:
 * latency and bandwidth) and reported apart, so the end-to-end prediction
 * is whole; the split itself weighs compute alone. The result is checked
 * on rank 0 against a random-vector projection (bench/verify.c), unless a
 * rank computed on simulated devices, which compute nothing.
 *
 * Every rank parses the same command line and every failure is agreed on
 * with a reduction, so a bad argument, a rank that cannot open its devices
 * or a node whose memory cannot hold its ranks' operands ends the whole
 * job with one exit status instead of a hang or the OOM killer; what
 * failed is said once, for all the ranks that have the same to say. */
#include "bench/bench.h"
#include "bench/cli.h"
#include "bench/timing.h"
#include "poas.h"
#include "tools/args.h"
#include "tools/context-open.h"
#include "tools/host-memory.h"
#include "tools/json-out.h"
#include "tools/profile-note.h"
#include "tools/shared-options.h"
#include "tools/stdout-check.h"

#include <getopt.h>
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROG "poas-mpi-bench"
#define MAX_PROBLEMS 32
/* The largest N of a square problem given as one number. */
#define MAX_SQUARE (1 << 20)
/* Rows are handed out in multiples of this; the rows left over go to the
 * fastest rank. */
#define GRANULE 32
/* Rounds of refining the split by each rank's plan for its own rows. */
#define REFINE 3
/* Elements per MPI call at most: MPI counts are ints. */
#define MPI_CHUNK ((int64_t)1 << 28)
/* Bytes of what one rank says through say_once, its lines together. */
#define SAY_MAX 1024

static void usage(FILE *f) {
  fprintf(f, "Usage: mpirun -np R " PROG " [--sizes LIST] [--dtype s|d] [--repeat N]\n"
             "                [--devices LIST] [--profile FILE] [--json]\n"
             "Runs row-major C = A B (beta = 0) split by rows across the ranks of an MPI job,\n"
             "each rank on every device of its node through POAS, with the rows shared by\n"
             "what each node's calibrated models predict for it. Rank 0 holds A, B and C:\n"
             "it scatters the rows of A, broadcasts B and gathers C; those transfers are\n"
             "predicted from each link's latency and bandwidth, measured at start.\n\n"
             "  -s, --sizes LIST    problems: N (square, N up to 1048576) or MxNxK,\n"
             "                      comma-separated, at most "
          BENCH_XSTR(MAX_PROBLEMS) " (default 1024)\n"
             "  -t, --dtype s|d     float32 (s, the default) or float64 (d)\n"
             "  -r, --repeat N      timed runs after a warm-up, median taken (1 to 1000,\n"
             "                      default 3)\n"
             "  -d, --devices LIST  each rank's device selection, as POAS_DEVICES\n"
             "  -p, --profile FILE  each rank's profile, as POAS_PROFILE (default: the\n"
             "                      node's own, $XDG_DATA_HOME/poas/<hostname>.json, else\n"
             "                      ~/.local/share/poas/<hostname>.json)\n"
             "  -j, --json          one JSON object on stdout, the table on stderr\n"
             "  -h, --help          show this help\n"
             "  -V, --version       show the version\n\n"
             "Exit status: 0; 1 when a rank cannot open its devices or read the profile\n"
             "named, a node's memory cannot hold its ranks' operands, a run failed, its\n"
             "result is wrong or the output cannot be written; 2 on a usage error. Every\n"
             "rank exits with the same status.\n");
}

typedef struct problem {
  int64_t m, n, k;
} problem;

typedef struct options {
  problem prob[MAX_PROBLEMS];
  int nprob;
  poas_dtype dtype;
  long repeat;
  int json;
  poas_options po;
} options;

/* One MPI job's view: this rank, the others, and this rank's context. */
typedef struct job {
  int rank, size;
  poas_context *ctx;
  int simulated; /* some rank selected a sim device (agreed at open) */
  char host[MPI_MAX_PROCESSOR_NAME];
  char devices[128]; /* its device ids, ","-joined */
  FILE *table;       /* stdout, or stderr under --json */
} job;

/* The link from rank 0 to a rank, measured at start: seconds per message
 * and bytes per second beyond it. */
typedef struct link_model {
  double latency, bandwidth;
} link_model;

/* What one problem came to, on rank 0. */
typedef struct outcome {
  int64_t *first, *count;        /* rows per rank */
  double *predicted, *measured;  /* each rank's GEMM: its report's prediction, median */
  double predicted_s, compute_s; /* the slowest rank's */
  double end_to_end_s, scatter_s, gather_s;
  /* The transfers and the whole, predicted from the links. */
  double predicted_scatter_s, predicted_gather_s, predicted_end_to_end_s;
  double num_error, bound;
  int checked;
} outcome;

/* -------------------------------------------------------------- options */

/* "N" (square, N up to MAX_SQUARE) or "MxNxK" into *p, each a whole number
 * written plainly (no spaces, no '+'); `text` is cut up. */
static int parse_problem(char *text, problem *p) {
  int64_t side[3];
  int sides = 0;
  for (char *rest = text, *t; (t = strsep(&rest, "x")) != NULL;)
    if (sides == 3 || tool_parse_int64(t, 1, INT64_MAX, &side[sides++]) != 0)
      return -1;
  if (sides == 1 && side[0] <= MAX_SQUARE)
    *p = (problem){side[0], side[0], side[0]};
  else if (sides == 3)
    *p = (problem){side[0], side[1], side[2]};
  else
    return -1;
  return 0;
}

/* The problems of --sizes into o. strsep, not strtok: an empty entry
 * ("256,", ",256", "64,,128") is refused instead of skipped. The list is
 * cut up in a copy, so that a refusal quotes it whole. */
static int parse_sizes(const char *list, options *o) {
  char *copy = strdup(list);
  int rc = copy ? 0 : -1;
  o->nprob = 0;
  for (char *rest = copy, *t; !rc && (t = strsep(&rest, ",")) != NULL;)
    if (o->nprob == MAX_PROBLEMS || parse_problem(t, &o->prob[o->nprob++]) != 0)
      rc = -1;
  free(copy);
  return rc;
}

/* Returns TOOL_GO_ON (-1) to go on, else the exit status (0 after --help).
 * Only a rank that `speaks` says what is wrong with its command line. */
static int parse_options(int argc, char **argv, options *o, int speaks) {
  static const struct option longopts[] = {{"sizes", required_argument, NULL, 's'},
                                           {"dtype", required_argument, NULL, 't'},
                                           {"repeat", required_argument, NULL, 'r'},
                                           TOOL_LONGOPT_DEVICES, TOOL_LONGOPT_PROFILE,
                                           TOOL_LONGOPT_JSON, TOOL_LONGOPTS_END};
  memset(o, 0, sizeof *o);
  o->prob[0] = (problem){1024, 1024, 1024};
  o->nprob = 1;
  o->dtype = POAS_FLOAT32;
  o->repeat = 3;
  poas_options_init(&o->po);
  optind = 0; /* from the start, and getopt's state reset, on a second pass */
  /* Rank 0 checks stdout at the end, --help and --version included (main). */
  const tool_cli cli = {.prog = PROG,
                        .usage = usage,
                        .argc = argc,
                        .argv = argv,
                        .longopts = longopts,
                        .devices = &o->po.devices,
                        .profile = &o->po.profile,
                        .json = &o->json,
                        .quiet = !speaks,
                        .stdout_checked_later = 1};
  int c, status;
  while ((c = tool_getopt(&cli, "s:t:r:d:p:jhV")) != -1) {
    switch (c) {
    case 's':
      if (parse_sizes(optarg, o) != 0)
        return speaks ? bench_bad_arg(PROG, "--sizes", optarg) : 2;
      break;
    case 't':
      if (strcmp(optarg, "s") != 0 && strcmp(optarg, "d") != 0)
        return speaks ? bench_bad_arg(PROG, "--dtype (s or d)", optarg) : 2;
      o->dtype = optarg[0] == 'd' ? POAS_FLOAT64 : POAS_FLOAT32;
      break;
    case 'r':
      if (bench_parse_long(optarg, 1, 1000, &o->repeat) != 0)
        return speaks ? bench_bad_arg(PROG, "--repeat (1 to 1000)", optarg) : 2;
      break;
    default:
      if ((status = tool_shared_option(&cli, c, optarg)) != TOOL_GO_ON)
        return status;
    }
  }
  if (optind < argc)
    return speaks ? bench_bad_arg(PROG, "argument", argv[optind]) : 2;
  return TOOL_GO_ON;
}

/* The worst exit status of all ranks: every rank leaves with the same. */
static int agree(int status) {
  int worst = status;
  MPI_Allreduce(&status, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

/* --------------------------------------------------------------- the job */

/* "rank R" or "ranks A-B, C" for the ranks r with in[r] set. */
static void rank_list(const char *in, int size, char *out, size_t cap) {
  int n = 0;
  for (int r = 0; r < size; r++)
    n += in[r] != 0;
  size_t len = (size_t)snprintf(out, cap, "rank%s", n == 1 ? "" : "s");
  const char *sep = " ";
  for (int r = 0; r < size && len < cap; r++) {
    if (!in[r])
      continue;
    int last = r;
    while (last + 1 < size && in[last + 1])
      last++;
    len += (size_t)(last > r ? snprintf(out + len, cap - len, "%s%d-%d", sep, r, last)
                             : snprintf(out + len, cap - len, "%s%d", sep, r));
    sep = ", ";
    r = last;
  }
}

/* Says `said`'s lines on stderr, each opening PROG " (who): " where it
 * opened PROG ": ". */
static void say_as(const char *who, const char *said) {
  for (const char *line = said; *line;) {
    size_t len = strcspn(line, "\n");
    if (strncmp(line, PROG ": ", strlen(PROG ": ")) == 0)
      line += strlen(PROG ": "), len -= strlen(PROG ": ");
    fprintf(stderr, PROG " (%s): %.*s\n", who, (int)len, line);
    line += len + (line[len] == '\n');
  }
}

/* The library's warnings on this rank (POAS_LOG=1 and up), held for the
 * next say_once, which says them after its own text: printed by each
 * rank, a warning all the ranks met (a device left out, a profile's
 * problem) came once per rank. Info and debug messages differ from rank
 * to rank (times, shares) and come as they are made, on this rank's
 * stderr, named for it. The library calls hear_library one message at a
 * time, from its own threads too; library_lock keeps say_once's taking of
 * them out of its way. */
static pthread_mutex_t library_lock = PTHREAD_MUTEX_INITIALIZER;
static char library_said[SAY_MAX];
static size_t library_len;

/* Says the warnings held on this rank (library_said) at once, on its own
 * stderr, each line named for the rank as say_once would name it, and
 * forgets them. For warnings past what say_once gathers (SAY_MAX), which
 * were cut mid-line and the rest dropped: a device's fault beside 19
 * others' filled it. Called with library_lock held. */
static void say_held_here(const job *j) {
  char rank[32];
  snprintf(rank, sizeof rank, "rank %d", j->rank);
  say_as(rank, library_said);
  library_len = 0, library_said[0] = '\0';
}

static void hear_library(void *user, int level, const char *message) {
  const job *j = user;
  if (level > 1) {
    fprintf(stderr, "poas (rank %d): %s%s\n", j->rank, level == 3 ? "debug: " : "", message);
    return;
  }
  pthread_mutex_lock(&library_lock);
  size_t room = sizeof library_said - library_len;
  int n = snprintf(library_said + library_len, room, PROG ": poas: warning: %s\n", message);
  if (n > 0 && (size_t)n < room) {
    library_len += (size_t)n;
  } else {
    /* No room for it whole: what is held and this one are said now, in
     * the order they came. */
    library_said[library_len] = '\0';
    say_held_here(j);
    fprintf(stderr, PROG " (rank %d): poas: warning: %s\n", j->rank, message);
  }
  pthread_mutex_unlock(&library_lock);
}

/* Says each rank's `text` (its lines each opening PROG ": "; "" says
 * nothing) on rank 0's stderr, once for all the ranks whose text is the
 * same, each line then opening PROG " (ranks 0-2): ". Every rank once said
 * its own, and a job whose ranks all had the same --devices, profile or
 * fault said it once per rank: 64 lines alike for 64 ranks. The library's
 * warnings since the last say_once follow the text (hear_library).
 * Collective. */
static void say_once(const job *j, const char *text) {
  char mine[SAY_MAX];
  pthread_mutex_lock(&library_lock);
  /* Text and held warnings gathered together only where they fit whole. */
  if (strlen(text) + library_len >= sizeof mine)
    say_held_here(j);
  snprintf(mine, sizeof mine, "%s%s", text, library_said);
  library_len = 0, library_said[0] = '\0';
  pthread_mutex_unlock(&library_lock);
  char *all = j->rank == 0 ? malloc((size_t)j->size * SAY_MAX) : NULL;
  char *done = j->rank == 0 ? calloc((size_t)j->size, 1) : NULL,
       *same = j->rank == 0 ? calloc((size_t)j->size, 1) : NULL;
  int gathered = j->rank != 0 || (all && done && same);
  MPI_Bcast(&gathered, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (!gathered) /* no memory on rank 0: each rank says its own */
    fputs(mine, stderr);
  else
    MPI_Gather(mine, SAY_MAX, MPI_CHAR, all, SAY_MAX, MPI_CHAR, 0, MPI_COMM_WORLD);
  for (int r = 0; gathered && j->rank == 0 && r < j->size; r++) {
    const char *said = all + (size_t)r * SAY_MAX;
    if (done[r] || !said[0])
      continue;
    for (int o = 0; o < j->size; o++)
      done[o] |= same[o] = o >= r && strcmp(said, all + (size_t)o * SAY_MAX) == 0;
    char ranks[128];
    rank_list(same, j->size, ranks, sizeof ranks);
    say_as(ranks, said);
  }
  free(same), free(done), free(all);
}

/* Opens this rank's context and checks its profile, what they say said
 * once for the ranks that say the same (say_once). Collective. */
static int open_job(job *j, const options *o) {
  char *said = NULL;
  size_t said_len = 0;
  FILE *err = open_memstream(&said, &said_len);
  int status = tool_context_open_to(err ? err : stderr, PROG, &o->po, &j->ctx);
  if (!status && tool_profile_check_to(err ? err : stderr, PROG, j->ctx, o->po.profile))
    status = 1;
  if (err)
    fclose(err);
  say_once(j, said ? said : "");
  free(said);
  for (int d = 0; !status && d < poas_device_count(j->ctx); d++) {
    poas_device_info info;
    if (poas_device_get(j->ctx, d, &info) != 0)
      continue;
    j->simulated |= info.kind == POAS_DEVICE_SIM;
    size_t len = strlen(j->devices);
    snprintf(j->devices + len, sizeof j->devices - len, "%s%s", len ? "," : "", info.id);
  }
  return status;
}

/* Rows for each rank in proportion to rate[] (rows per second, one of
 * them at least above 0), in whole granules: each rank its share rounded
 * down, then each granule left to the rank that would end it soonest at
 * its rate; the rows past the last whole granule to the fastest rank. A
 * rank with rate 0 gets none. The granules left once went by largest
 * remainder, which gave a rank of a hundredth of another's rate (its
 * share 0.63 of a granule of 32 rows) a granule that took it 0.028 s, where the
 * other would have ended all 2048 rows in 0.020. */
static void share_rows(int64_t m, const double *rate, int size, int64_t *first, int64_t *count) {
  double total = 0;
  for (int r = 0; r < size; r++)
    total += rate[r];
  int64_t granules = m / GRANULE, given = 0;
  for (int r = 0; r < size; r++) {
    count[r] = (int64_t)((double)granules * rate[r] / total);
    given += count[r];
  }
  for (; given < granules; given++) {
    int best = -1;
    for (int r = 0; r < size; r++)
      if (rate[r] > 0 && (best < 0 || (double)(count[r] + 1) / rate[r] <
                                          (double)(count[best] + 1) / rate[best]))
        best = r;
    count[best]++;
  }
  int64_t at = 0;
  for (int r = 0; r < size; r++) {
    count[r] *= GRANULE;
    first[r] = at;
    at += count[r];
  }
  int fastest = 0;
  for (int r = 1; r < size; r++)
    if (rate[r] > rate[fastest])
      fastest = r;
  count[fastest] += m - at;
  for (int r = fastest + 1; r < size; r++)
    first[r] += m - at;
}

/* This rank's predicted seconds for rows x n x k (0 rows: 0), or a
 * negative POAS error. */
static double predict_rows(const job *j, const options *o, int64_t rows, const problem *p) {
  if (rows == 0)
    return 0;
  poas_plan plan;
  int rc = poas_plan_gemm_call(j->ctx, o->dtype, POAS_ROW_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, rows,
                               p->n, p->k, 1, 0, &plan);
  return rc ? rc : plan.makespan_s;
}

/* The split: rates from each rank's plan for the whole problem, then again
 * from its plan for the rows the last split gave it, REFINE times: a
 * rank's fixed costs (B's copy to its devices, the runtime's) weigh more
 * in a smaller block, and each round moves the split nearer to where all
 * ranks' plans end together. A rank without a plan takes no rows; when no
 * rank has one, the problem is not run: every rank once took an even
 * share it could not run, each said "it takes no rows", and then that its
 * GEMM failed. Collective; 0, or 1 when no rank can plan (agreed). */
static int plan_split(const job *j, const options *o, const problem *p, int64_t *first,
                      int64_t *count) {
  int size = j->size;
  /* A node whose memory cannot hold the whole problem may still hold its
   * share: its rate then comes from an even share's plan. */
  int64_t probe_rows = p->m;
  double mine = predict_rows(j, o, probe_rows, p);
  if (mine == POAS_ETOOBIG && size > 1) {
    probe_rows = (p->m + size - 1) / size;
    mine = predict_rows(j, o, probe_rows, p);
  }
  double *rate = malloc(sizeof(double) * (size_t)size);
  if (agree(!rate)) {
    free(rate);
    return 1;
  }
  double my_rate = mine > 0 ? (double)probe_rows / mine : 0;
  MPI_Allgather(&my_rate, 1, MPI_DOUBLE, rate, 1, MPI_DOUBLE, MPI_COMM_WORLD);
  int planned = 0;
  for (int r = 0; r < size; r++)
    planned |= rate[r] > 0;
  char said[SAY_MAX] = "";
  if (mine < 0)
    snprintf(said, sizeof said, PROG ": no plan for %lld x %lld x %lld: %s: %s%s\n",
             (long long)p->m, (long long)p->n, (long long)p->k, poas_strerror((int)mine),
             poas_error_detail(), planned ? "; it takes no rows" : "");
  say_once(j, said);
  if (!planned) {
    free(rate);
    return 1;
  }
  share_rows(p->m, rate, size, first, count);
  for (int round = 0; round < REFINE; round++) {
    double t = predict_rows(j, o, count[j->rank], p);
    my_rate = t > 0 ? (double)count[j->rank] / t : my_rate;
    MPI_Allgather(&my_rate, 1, MPI_DOUBLE, rate, 1, MPI_DOUBLE, MPI_COMM_WORLD);
    share_rows(p->m, rate, size, first, count);
  }
  free(rate);
  return 0;
}

/* Broadcasts `count` contiguous elements of `type` from rank 0, in pieces
 * whose counts fit an int. */
static void bcast_all(void *buf, int64_t count, MPI_Datatype type, size_t elem, MPI_Comm comm) {
  for (int64_t at = 0; at < count; at += MPI_CHUNK) {
    int64_t piece = count - at < MPI_CHUNK ? count - at : MPI_CHUNK;
    MPI_Bcast((char *)buf + (size_t)at * elem, (int)piece, type, 0, comm);
  }
}

/* Timings of one run on this rank. */
typedef struct run_times {
  double scatter, gemm, total;
  double gemm_wall; /* gemm on the wall clock (a simulated one's is not) */
  double predicted; /* its report's prediction */
  int rc;
} run_times;

/* One run: rows of A out, B out, each rank's GEMM, rows of C back. A row
 * of A (k elements) and one of C (n) are MPI types, so counts are rows.
 * Collective. */
static run_times run_once(const job *j, const options *o, const problem *p, const int64_t *first,
                          const int64_t *count, void *a, void *b, void *c) {
  size_t elem = bench_dtype_size(o->dtype);
  MPI_Datatype scalar = o->dtype == POAS_FLOAT64 ? MPI_DOUBLE : MPI_FLOAT, arow, crow;
  MPI_Type_contiguous((int)p->k, scalar, &arow);
  MPI_Type_contiguous((int)p->n, scalar, &crow);
  MPI_Type_commit(&arow);
  MPI_Type_commit(&crow);
  int *counts = malloc(sizeof(int) * (size_t)j->size),
      *displs = malloc(sizeof(int) * (size_t)j->size);
  run_times t = {0};
  /* Agreed, so that no rank waits in a scatter the others left. */
  if (agree(!counts || !displs)) {
    free(displs), free(counts);
    MPI_Type_free(&crow);
    MPI_Type_free(&arow);
    t.rc = POAS_ENOMEM;
    return t;
  }
  for (int r = 0; r < j->size; r++)
    counts[r] = (int)count[r], displs[r] = (int)first[r];
  /* B goes only to the ranks that use it: rank 0 and those with rows. */
  MPI_Comm users;
  MPI_Comm_split(MPI_COMM_WORLD, j->rank == 0 || count[j->rank] > 0 ? 0 : MPI_UNDEFINED, j->rank,
                 &users);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  if (j->rank == 0)
    MPI_Scatterv(a, counts, displs, arow, MPI_IN_PLACE, counts[0], arow, 0, MPI_COMM_WORLD);
  else
    MPI_Scatterv(NULL, NULL, NULL, arow, a, counts[j->rank], arow, 0, MPI_COMM_WORLD);
  if (users != MPI_COMM_NULL)
    bcast_all(b, p->k * p->n, scalar, elem, users);
  double t1 = MPI_Wtime();
  int64_t rows = count[j->rank];
  if (rows > 0) {
    t.rc = o->dtype == POAS_FLOAT64
               ? poas_dgemm(j->ctx, POAS_ROW_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, rows, p->n, p->k,
                            1.0, a, p->k, b, p->n, 0.0, c, p->n)
               : poas_sgemm(j->ctx, POAS_ROW_MAJOR, POAS_NO_TRANS, POAS_NO_TRANS, rows, p->n, p->k,
                            1.0f, a, p->k, b, p->n, 0.0f, c, p->n);
  }
  double t2 = MPI_Wtime();
  t.gemm_wall = t2 - t1;
  poas_report rep;
  if (rows > 0 && !t.rc && poas_last_report(j->ctx, &rep) == 0) {
    t.predicted = rep.predicted_s;
    /* Simulated devices compute nothing, in virtual time: their GEMM
     * takes the report's seconds. */
    if (rep.virtual_time)
      t2 = t1 + rep.measured_s;
  }
  if (j->rank == 0)
    MPI_Gatherv(MPI_IN_PLACE, counts[0], crow, c, counts, displs, crow, 0, MPI_COMM_WORLD);
  else
    MPI_Gatherv(c, counts[j->rank], crow, NULL, NULL, NULL, crow, 0, MPI_COMM_WORLD);
  double t3 = MPI_Wtime();
  t.scatter = t1 - t0, t.gemm = t2 - t1, t.total = t3 - t0;
  if (users != MPI_COMM_NULL)
    MPI_Comm_free(&users);
  free(displs), free(counts);
  MPI_Type_free(&crow);
  MPI_Type_free(&arow);
  return t;
}

/* Whether the problem's rows, columns and pieces fit MPI's int counts. */
static int fits_mpi(const problem *p) {
  return p->m <= INT32_MAX && p->n <= INT32_MAX && p->k <= INT32_MAX;
}

/* Messages of the link probe, and round trips timed of each (median). */
#define LINK_SMALL 8
#define LINK_LARGE (4 << 20)
#define LINK_ROUNDS 7

/* The median round trip, halved, of `bytes` between rank 0 and rank r. */
static double one_way(const job *j, int r, char *buf, int bytes) {
  double t[LINK_ROUNDS];
  for (int i = 0; i < LINK_ROUNDS; i++) {
    if (j->rank == 0) {
      double t0 = MPI_Wtime();
      MPI_Send(buf, bytes, MPI_CHAR, r, 0, MPI_COMM_WORLD);
      MPI_Recv(buf, bytes, MPI_CHAR, r, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      t[i] = (MPI_Wtime() - t0) / 2;
    } else {
      MPI_Recv(buf, bytes, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buf, bytes, MPI_CHAR, 0, 0, MPI_COMM_WORLD);
      t[i] = 0;
    }
  }
  return bench_median(t, LINK_ROUNDS);
}

/* Measures the link from rank 0 to every other rank into links[r] (on rank
 * 0): a small message's time is the latency, and the large one's time past
 * it gives the bandwidth. Collective; 0, or 1 when out of memory (agreed). */
static int measure_links(const job *j, link_model *links) {
  char *buf = calloc(LINK_LARGE, 1);
  if (agree(!buf)) {
    free(buf);
    return 1;
  }
  for (int r = 1; r < j->size; r++) {
    if (j->rank != 0 && j->rank != r)
      continue;
    double small = one_way(j, r, buf, LINK_SMALL), large = one_way(j, r, buf, LINK_LARGE);
    if (j->rank == 0) {
      links[r].latency = small;
      links[r].bandwidth = large > small ? (LINK_LARGE - LINK_SMALL) / (large - small) : 0;
    }
  }
  free(buf);
  return 0;
}

/* Seconds to move `bytes` over link l (an unmeasured link: none). */
static double link_time(const link_model *l, double bytes) {
  return l->bandwidth > 0 ? l->latency + bytes / l->bandwidth : 0;
}

/* The transfers' predicted seconds, on rank 0: the scatter and the gather
 * go rank by rank from rank 0; the broadcast of B, a tree, takes
 * ceil(log2(ranks)) sends of B over the slowest link. */
static void predict_transfers(const job *j, const link_model *links, const problem *p,
                              const int64_t *count, size_t elem, outcome *out) {
  double scatter = 0, gather = 0, slowest_b = 0;
  int depth = 0;
  while ((1 << depth) < j->size)
    depth++;
  for (int r = 1; r < j->size; r++) {
    if (count[r]) {
      scatter += link_time(&links[r], (double)(count[r] * p->k) * (double)elem);
      gather += link_time(&links[r], (double)(count[r] * p->n) * (double)elem);
      slowest_b = fmax(slowest_b, link_time(&links[r], (double)(p->k * p->n) * (double)elem));
    }
  }
  out->predicted_scatter_s = scatter + depth * slowest_b;
  out->predicted_gather_s = gather;
  out->predicted_end_to_end_s = out->predicted_scatter_s + out->predicted_s + gather;
}

static void outcome_free(outcome *out) {
  free(out->first), free(out->count), free(out->predicted), free(out->measured);
  memset(out, 0, sizeof *out);
}

/* Says why the ranks' runs that failed did (say_once); returns 1 on every
 * rank when any did. Collective. */
static int say_failed(const job *j, int rc) {
  char said[SAY_MAX] = "";
  if (rc)
    snprintf(said, sizeof said, PROG ": gemm failed: %s: %s\n", poas_strerror(rc),
             poas_error_detail());
  say_once(j, said);
  return agree(rc != 0);
}

/* Rows of A and C this rank holds: rank 0 all of them, the others theirs. */
static int64_t held_rows(const job *j, const problem *p, const int64_t *count) {
  return j->rank == 0 ? p->m : count[j->rank];
}

/* Bytes this rank allocates for a problem split by count[]: its rows of A
 * and C, all of B, and the element past each buffer that keeps a rank
 * without rows from allocating nothing; on rank 0 also the check's
 * vectors of doubles (bench_reference_init: x and |x|, n each; A B x and
 * its scale, m each; B x and |B| |x|, k each), which outweigh A and C
 * when n and k are a few. */
static double held_bytes(const job *j, const options *o, const problem *p, const int64_t *count) {
  double rows = (double)held_rows(j, p, count), m = (double)p->m, n = (double)p->n,
         k = (double)p->k;
  double operands = (rows * k + k * n + rows * n + 3) * (double)bench_dtype_size(o->dtype);
  return operands + (j->rank == 0 ? sizeof(double) * 2 * (m + n + k) : 0);
}

/* Whether every node's memory holds what its ranks allocate for a problem
 * split by count[] (tool_memory_holds): past the machine's memory malloc
 * may still succeed, and filling the operands then wakes the OOM killer.
 * Every rank holds all of B beside its rows (held_bytes), and the ranks of
 * one node share its memory. The node's first rank says why not.
 * Collective; returns the status all ranks agreed on: 1, not a usage
 * error, since the same problem runs on larger nodes. */
static int operands_fit(const job *j, const options *o, const problem *p, const int64_t *count) {
  MPI_Comm node;
  int node_rank, node_size;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, j->rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &node_rank);
  MPI_Comm_size(node, &node_size);
  double mine = held_bytes(j, o, p, count), need = 0;
  MPI_Allreduce(&mine, &need, 1, MPI_DOUBLE, MPI_SUM, node);
  MPI_Comm_free(&node);
  char why[128];
  int fits = tool_memory_holds(need, why, sizeof why);
  if (!fits && node_rank == 0)
    fprintf(stderr,
            PROG " (rank %d): %lld x %lld x %lld: the operands held on %s (%d rank%s) need %s\n",
            j->rank, (long long)p->m, (long long)p->n, (long long)p->k, j->host, node_size,
            node_size == 1 ? "" : "s", why);
  return agree(!fits);
}

/* Runs one problem: the split, the operands, a warm-up, the timed runs and
 * the check. Collective; fills *out on rank 0 (its arrays on every rank).
 * Returns the exit status all ranks agreed on. */
static int run_problem(const job *j, const options *o, const problem *p, const link_model *links,
                       outcome *out) {
  int size = j->size, rank = j->rank;
  memset(out, 0, sizeof *out);
  out->first = calloc((size_t)size, sizeof *out->first);
  out->count = calloc((size_t)size, sizeof *out->count);
  out->predicted = calloc((size_t)size, sizeof *out->predicted);
  out->measured = calloc((size_t)size, sizeof *out->measured);
  double *gemm = calloc((size_t)o->repeat, sizeof *gemm);
  double *total = calloc((size_t)o->repeat, sizeof *total);
  double *gather = calloc((size_t)o->repeat, sizeof *gather);
  double *scatter = calloc((size_t)o->repeat, sizeof *scatter);
  int status = out->first && out->count && out->predicted && out->measured && gemm && total &&
                       gather && scatter
                   ? 0
                   : 1;
  if (!fits_mpi(p)) {
    if (rank == 0)
      fprintf(stderr, PROG ": %lld x %lld x %lld: a side past 2^31 - 1 does not fit MPI's counts\n",
              (long long)p->m, (long long)p->n, (long long)p->k);
    status = 1;
  }
  void *a = NULL, *b = NULL, *c = NULL;
  bench_reference ref = {0};
  bench_problem bp = {o->dtype, p->m, p->n, p->k, NULL, NULL, NULL};
  if (agree(status) || plan_split(j, o, p, out->first, out->count) != 0 ||
      operands_fit(j, o, p, out->count) != 0) {
    status = 1;
  } else {
    size_t elem = bench_dtype_size(o->dtype);
    int64_t rows = held_rows(j, p, out->count);
    /* At least one element each: a rank without rows still takes part. */
    a = malloc(elem * (size_t)(rows * p->k + 1));
    b = malloc(elem * (size_t)(p->k * p->n + 1));
    c = malloc(elem * (size_t)(rows * p->n + 1));
    status = a && b && c ? 0 : 1;
    if (!status && rank == 0) {
      bench_fill(a, o->dtype, (size_t)(p->m * p->k), 1);
      bench_fill(b, o->dtype, (size_t)(p->k * p->n), 2);
      bp.a = a, bp.b = b, bp.c = c;
      status = bench_reference_init(&ref, &bp, 3) == 0 ? 0 : 1;
    }
    say_once(j, status ? PROG ": no memory for the operands\n" : "");
  }
  if (agree(status)) {
    status = 1;
    goto done;
  }
  /* A warm-up: threads started, pages touched, kernels built. */
  run_times t = run_once(j, o, p, out->first, out->count, a, b, c);
  if (say_failed(j, t.rc)) {
    status = 1;
    goto done;
  }
  double my_predicted = 0;
  int64_t my_rows = held_rows(j, p, out->count);
  for (long r = 0; r < o->repeat; r++) {
    /* Every rank's C, not rank 0's alone: the others' held the warm-up's
     * right rows, and a GEMM of theirs that returned without computing
     * would have sent those back and passed the check. */
    bench_poison(c, o->dtype, (size_t)(my_rows * p->n));
    t = run_once(j, o, p, out->first, out->count, a, b, c);
    if (say_failed(j, t.rc)) {
      status = 1;
      goto done;
    }
    /* Rank r ends its GEMM scatter + gemm after the barrier (its own
     * clock: MPI_Wtime is not one clock across hosts); what rank 0 waits
     * past the last of them is the gather. */
    /* The latest of each over the ranks, in one reduction: the GEMM's end
     * on the wall clock and in the GEMM's own time (virtual for a
     * simulated one), and the scatter. */
    double mine[3] = {t.scatter + t.gemm_wall, t.scatter + t.gemm, t.scatter}, last[3] = {0};
    MPI_Reduce(mine, last, 3, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    gemm[r] = t.gemm, scatter[r] = last[2];
    /* At least 0: the ranks leave the barrier microseconds apart, and a
     * rank that left it first counts those in its own end, so that a
     * gather shorter than them came out negative (-1.3e-06 s for 1 x 1 x 1
     * on three ranks, rank 1's one row of C the only one sent). */
    gather[r] = fmax(0, t.total - last[0]);
    /* The whole: the last GEMM's end in the GEMMs' own time, then the
     * gather. The same as the wall clock's t.total for real devices; for
     * simulated ones, whose GEMMs take virtual time, the wall clock's
     * total once stood for it (a 271 s compute ended to end in 1.2 s). */
    total[r] = last[1] + gather[r];
    my_predicted = t.predicted;
  }
  double my_gemm = out->count[rank] ? bench_median(gemm, (int)o->repeat) : 0;
  MPI_Gather(&my_gemm, 1, MPI_DOUBLE, out->measured, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  /* The prediction each rank's last run made (its report: its models as
   * that run had them, learning included). */
  MPI_Gather(&my_predicted, 1, MPI_DOUBLE, out->predicted, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    for (int r = 0; r < size; r++) {
      out->predicted_s = fmax(out->predicted_s, out->predicted[r]);
      out->compute_s = fmax(out->compute_s, out->measured[r]);
    }
    predict_transfers(j, links, p, out->count, bench_dtype_size(o->dtype), out);
    out->end_to_end_s = bench_median(total, (int)o->repeat);
    out->scatter_s = bench_median(scatter, (int)o->repeat);
    out->gather_s = bench_median(gather, (int)o->repeat);
    out->bound = bench_error_bound(o->dtype, p->n, p->k);
    out->checked = !j->simulated;
    out->num_error = out->checked ? bench_error(&ref, &bp) : NAN;
    if (out->checked && !(out->num_error <= out->bound)) {
      fprintf(stderr, PROG ": %lld x %lld x %lld: numerical error %.2g past its bound %.2g\n",
              (long long)p->m, (long long)p->n, (long long)p->k, out->num_error, out->bound);
      status = 1;
    }
  }
  status = agree(status);
done:
  bench_reference_free(&ref);
  free(a), free(b), free(c);
  free(scatter), free(gather), free(total), free(gemm);
  return status;
}

/* ---------------------------------------------------------------- output */

static double rel_error(double predicted, double measured) {
  return measured > 0 && predicted > 0 ? (predicted - measured) / measured : NAN;
}

/* The table of one problem; a blank line parts it from the one before
 * (`first`: there is none, and the output opens with the table). */
static void print_table(const job *j, const options *o, const problem *p, const outcome *out,
                        char (*hosts)[MPI_MAX_PROCESSOR_NAME], char (*devices)[128], int first) {
  FILE *f = j->table;
  double flops = 2.0 * (double)p->m * (double)p->n * (double)p->k;
  fprintf(f, "%s%sgemm %lld x %lld x %lld on %d rank%s\n", first ? "" : "\n",
          o->dtype == POAS_FLOAT64 ? "d" : "s",
          (long long)p->m, (long long)p->n, (long long)p->k, j->size, j->size == 1 ? "" : "s");
  fprintf(f, "%4s  %-16s %-24s %-19s %6s %10s %10s %9s\n", "rank", "host", "devices", "rows",
          "share", "pred. s", "meas. s", "pred.err");
  for (int r = 0; r < j->size; r++) {
    fprintf(f, "%4d  %-16.16s %-24.24s ", r, hosts[r], devices[r]);
    if (!out->count[r]) {
      fprintf(f, "%-19s %5.1f%% %10s %10s %9s\n", "-", 0.0, "-", "-", "-");
      continue;
    }
    char rows[40];
    snprintf(rows, sizeof rows, "%lld-%lld", (long long)out->first[r],
             (long long)(out->first[r] + out->count[r] - 1));
    fprintf(f, "%-19s %5.1f%% %10.4g %10.4g %+8.1f%%\n", rows,
            100.0 * (double)out->count[r] / (double)p->m, out->predicted[r], out->measured[r],
            100 * rel_error(out->predicted[r], out->measured[r]));
  }
  fprintf(f, "compute: predicted %.4g s, measured %.4g s (the slowest rank), error %+.1f%%\n",
          out->predicted_s, out->compute_s, 100 * rel_error(out->predicted_s, out->compute_s));
  fprintf(f, "end to end: %.4g s, %.1f GFLOP/s, predicted %.4g s, error %+.1f%%\n",
          out->end_to_end_s, flops / out->end_to_end_s / 1e9, out->predicted_end_to_end_s,
          100 * rel_error(out->predicted_end_to_end_s, out->end_to_end_s));
  fprintf(f,
          "  A's rows and B out %.3g s (predicted %.3g s), C's rows back %.3g s (predicted "
          "%.3g s)\n",
          out->scatter_s, out->predicted_scatter_s, out->gather_s, out->predicted_gather_s);
  if (out->checked)
    fprintf(f, "numerical error %.2g (bound %.2g): %s\n", out->num_error, out->bound,
            out->num_error <= out->bound ? "ok" : "WRONG");
  else
    fprintf(f, "result not checked: a rank computed on simulated devices, which compute "
               "nothing (their GEMM times are their reports' virtual seconds)\n");
}

static void json_number(double v) {
  if (isfinite(v))
    printf("%.9g", v);
  else
    printf("null");
}

/* `, "name": value`, a number or null. */
static void json_field(const char *name, double v) {
  printf(", \"%s\": ", name);
  json_number(v);
}

static void print_json(const job *j, const options *o, const problem *prob, const outcome *outs,
                       int n, char (*hosts)[MPI_MAX_PROCESSOR_NAME], char (*devices)[128],
                       const link_model *links) {
  printf("{\"ranks\": %d, \"dtype\": \"%s\", \"repeat\": %ld, \"links\": [", j->size,
         o->dtype == POAS_FLOAT64 ? "d" : "s", o->repeat);
  for (int r = 1; r < j->size; r++) {
    printf("%s{\"rank\": %d", r > 1 ? ", " : "", r);
    json_field("latency_s", links[r].latency);
    json_field("bandwidth", links[r].bandwidth);
    printf("}");
  }
  printf("],\n \"problems\": [");
  for (int i = 0; i < n; i++) {
    const outcome *out = &outs[i];
    const problem *p = &prob[i];
    double flops = 2.0 * (double)p->m * (double)p->n * (double)p->k;
    printf("%s\n {\"m\": %lld, \"n\": %lld, \"k\": %lld, \"split\": [", i ? "," : "",
           (long long)p->m, (long long)p->n, (long long)p->k);
    for (int r = 0; r < j->size; r++) {
      printf("%s\n  {\"rank\": %d, \"host\": ", r ? "," : "", r);
      tool_json_string(stdout, hosts[r]);
      printf(", \"devices\": ");
      tool_json_string(stdout, devices[r]);
      printf(", \"first\": %lld, \"count\": %lld", (long long)out->first[r],
             (long long)out->count[r]);
      json_field("predicted_s", out->predicted[r]);
      json_field("measured_s", out->measured[r]);
      json_field("prediction_error", rel_error(out->predicted[r], out->measured[r]));
      printf("}");
    }
    printf("]\n ");
    json_field("predicted_s", out->predicted_s);
    json_field("compute_s", out->compute_s);
    json_field("prediction_error", rel_error(out->predicted_s, out->compute_s));
    json_field("end_to_end_s", out->end_to_end_s);
    json_field("gflops", flops / out->end_to_end_s / 1e9);
    json_field("predicted_end_to_end_s", out->predicted_end_to_end_s);
    json_field("scatter_s", out->scatter_s);
    json_field("predicted_scatter_s", out->predicted_scatter_s);
    json_field("gather_s", out->gather_s);
    json_field("predicted_gather_s", out->predicted_gather_s);
    json_field("numerical_error", out->num_error);
    json_field("error_bound", out->bound);
    printf(", \"checked\": %s}", out->checked ? "true" : "false");
  }
  printf("]}\n");
}

/* -1 when this rank's problems (--sizes, --dtype, --repeat) are rank 0's,
 * else 2, said by this rank. An MPMD job gives each rank its own command
 * line, and its --devices and --profile may differ; but a rank that sized
 * its buffers for other problems, or ran another number of times, took
 * part in collectives that did not match rank 0's: a heap overrun ("--sizes
 * 256" beside "--sizes 128") or a hang (--repeat 1 beside --repeat 3).
 * Collective. */
static int same_problems(const options *o, int rank) {
  int64_t mine[3 + 3 * MAX_PROBLEMS] = {o->nprob, o->dtype, o->repeat};
  int64_t first[3 + 3 * MAX_PROBLEMS];
  for (int i = 0; i < o->nprob; i++) {
    mine[3 + 3 * i] = o->prob[i].m;
    mine[4 + 3 * i] = o->prob[i].n;
    mine[5 + 3 * i] = o->prob[i].k;
  }
  memcpy(first, mine, sizeof first);
  MPI_Bcast(first, 3 + 3 * MAX_PROBLEMS, MPI_INT64_T, 0, MPI_COMM_WORLD);
  if (memcmp(first, mine, sizeof first) == 0)
    return -1;
  fprintf(stderr,
          PROG " (rank %d): its --sizes, --dtype or --repeat differ from rank 0's: every rank "
               "must run the same problems\n",
          rank);
  return 2;
}

/* The command line's status, the same on every rank: -1 to go on, else
 * the exit status. Ranks of one program see the same arguments, and rank 0
 * alone speaks for them; but an MPMD job (`mpirun -np 1 A : -np 1 A
 * --bogus`) gives each its own, and a rank that stopped at its own bad
 * option left the others waiting in run_job's collectives for good, with
 * nothing said. So all ranks agree on the worst status before any goes on,
 * and a rank whose command line failed where rank 0's did not says why. */
static int agreed_options(int argc, char **argv, options *o, int rank) {
  int status = parse_options(argc, argv, o, rank == 0);
  int first = status;
  MPI_Bcast(&first, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (rank != 0 && status >= 0 && (first < 0 || (status > 0 && first == 0)))
    parse_options(argc, argv, o, 1);
  status = agree(status);
  return status < 0 ? agree(same_problems(o, rank)) : status;
}

/* Everything past the command line: the devices, the links, each problem
 * and the output. Collective; returns the status all ranks agreed on. */
static int run_job(job *j, const options *o) {
  j->table = o->json ? stderr : stdout;
  int status = agree(open_job(j, o));
  j->simulated = agree(j->simulated); /* any rank's sims leave the result unchecked */
  char(*hosts)[MPI_MAX_PROCESSOR_NAME] = calloc((size_t)j->size, sizeof *hosts);
  char(*devices)[128] = calloc((size_t)j->size, sizeof *devices);
  outcome *outs = calloc((size_t)o->nprob, sizeof *outs);
  link_model *links = calloc((size_t)j->size, sizeof *links);
  if (agree(!hosts || !devices || !outs || !links))
    status = 1;
  if (!status)
    status = measure_links(j, links);
  if (!status) {
    MPI_Gather(j->host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts, MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
               0, MPI_COMM_WORLD);
    MPI_Gather(j->devices, 128, MPI_CHAR, devices, 128, MPI_CHAR, 0, MPI_COMM_WORLD);
  }
  int done = 0;
  for (; !status && done < o->nprob; done++) {
    status = run_problem(j, o, &o->prob[done], links, &outs[done]);
    if (!status && j->rank == 0)
      print_table(j, o, &o->prob[done], &outs[done], hosts, devices, done == 0);
  }
  if (!status && j->rank == 0 && o->json)
    print_json(j, o, o->prob, outs, done, hosts, devices, links);
  for (int i = 0; outs && i < o->nprob; i++)
    outcome_free(&outs[i]);
  free(links), free(outs), free(devices), free(hosts);
  poas_finalize(j->ctx);
  return status;
}

int main(int argc, char **argv) {
  tool_std_ready();
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  job j = {0};
  MPI_Comm_rank(MPI_COMM_WORLD, &j.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &j.size);
  int len = 0;
  MPI_Get_processor_name(j.host, &len);
  options o;
  int status = agreed_options(argc, argv, &o, j.rank);
  poas_set_log_handler(hear_library, &j);
  if (status == TOOL_GO_ON)
    status = run_job(&j, &o);
  say_once(&j, ""); /* the library's warnings since the last (finalize's among them) */
  poas_set_log_handler(NULL, NULL);
  /* Rank 0 alone writes to stdout, --help and --version included: output
   * lost to a full disk or a closed pipe fails the job. Under mpirun, rank
   * 0 writes to mpirun, which writes the output on: a failure there is
   * mpirun's to report, and Open MPI's exits 0. */
  if (j.rank == 0)
    status = tool_stdout_status(PROG, status);
  status = agree(status);
  MPI_Finalize();
  return status;
}
