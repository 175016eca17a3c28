/* test-core.c: error codes, number parsing, the device-selection parser,
 * what failures log, the parallel host copy, and the cache-line round
 * trip between two cores, and following a path's symbolic links. */
#include "core/core.h"
#include "core/hostcopy.h"
#include "core/path.h"
#include "core/roundtrip.h"
#include "harness.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The value of `key` in an entry, or NULL. */
static const char *setting(const poas__spec_entry *e, const char *key) {
  for (int i = 0; i < e->nsettings; i++)
    if (strcmp(e->key[i], key) == 0)
      return e->value[i];
  return NULL;
}

TEST(strerror_covers_every_code) {
#define XX(name, value, msg) \
  CHECK(strcmp(poas_strerror(value), msg) == 0); \
  CHECK(strcmp(poas_err_name(value), "POAS_" #name) == 0);
  POAS_ERRNO_MAP(XX)
#undef XX
  CHECK(strcmp(poas_strerror(0), "success") == 0);
  CHECK(strcmp(poas_strerror(-9999), "unknown error") == 0);
  return 0;
}

static void *worker_mark_seen(void *arg) {
  int *seen = arg;
  seen[0] = poas__thread_is_worker();
  poas__thread_mark_worker();
  seen[1] = poas__thread_is_worker();
  return NULL;
}

/* The worker mark (core.h) is the marked thread's alone: backends leave a
 * device current on a worker, and must put the caller's back on any other
 * thread, the one that marked none included. */
TEST(worker_mark_is_per_thread) {
  int seen[2] = {-1, -1};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, worker_mark_seen, seen) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  CHECK(seen[0] == 0 && seen[1] == 1);
  CHECK(poas__thread_is_worker() == 0);
  return 0;
}

TEST(parse_numbers) {
  double d;
  int64_t i;
  CHECK_OK(poas__parse_double("1e11", 0, &d));
  CHECK(d == 1e11);
  CHECK_OK(poas__parse_double("2.5G", 1, &d));
  CHECK(d == 2.5e9);
  CHECK_OK(poas__parse_int64("16Gi", 1, &i));
  CHECK(i == (int64_t)16 << 30);
  CHECK_RC(poas__parse_double("2.5G", 0, &d), POAS_EINVAL);
  CHECK_RC(poas__parse_double("abc", 1, &d), POAS_EINVAL);
  CHECK_RC(poas__parse_double("nan", 1, &d), POAS_EINVAL);
  CHECK_RC(poas__parse_double("1e400", 1, &d), POAS_EINVAL);
  CHECK_RC(poas__parse_int64("-3", 0, &i), POAS_EINVAL);
  CHECK_RC(poas__parse_int64("1.5", 0, &i), POAS_EINVAL);
  CHECK_RC(poas__parse_int64("", 0, &i), POAS_EINVAL);
  /* strtod's other forms are not settings. */
  CHECK_RC(poas__parse_int64("0x2", 0, &i), POAS_EINVAL);
  CHECK_RC(poas__parse_double("-0X1p3", 0, &d), POAS_EINVAL);
  CHECK_RC(poas__parse_int64(" 1", 0, &i), POAS_EINVAL);
  CHECK_RC(poas__parse_double("inf", 0, &d), POAS_EINVAL);
  CHECK_RC(poas__parse_double(".", 0, &d), POAS_EINVAL);
  CHECK_OK(poas__parse_double("-.5", 0, &d));
  CHECK(d == -0.5);
  /* A '+' is refused, as the tools refuse it (core/number.h is both's
   * rule); an underflow is a number, an overflow is not. */
  CHECK_RC(poas__parse_double("+1e11", 0, &d), POAS_EINVAL);
  CHECK_RC(poas__parse_int64("+1", 0, &i), POAS_EINVAL);
  CHECK_OK(poas__parse_double("1e-320", 0, &d));
  CHECK(d > 0 && d < 1e-300);
  CHECK_RC(poas__parse_double("-1e309", 0, &d), POAS_EINVAL);
  CHECK_OK(poas__parse_int64("2e3", 0, &i));
  CHECK(i == 2000);
  return 0;
}

/* A string that fits is copied whole; one cut short ends in "..." where
 * the caller is told of the cut, and in its last bytes that fit where not. */
TEST(copies_say_when_they_cut) {
  char buf[8];
  memset(buf, 'x', sizeof buf);
  poas__strlcpy_marked(buf, "1234567", sizeof buf);
  CHECK(strcmp(buf, "1234567") == 0);
  poas__strlcpy_marked(buf, "12345678", sizeof buf);
  CHECK_MSG(strcmp(buf, "1234...") == 0, "%s", buf);
  poas__strlcpy(buf, "12345678", sizeof buf);
  CHECK(strcmp(buf, "1234567") == 0);
  poas__strlcpy_marked(buf, NULL, sizeof buf);
  CHECK(buf[0] == '\0');
  return 0;
}

TEST(spec_parses_entries_and_settings) {
  static poas__spec s;
  char err[256];
  CHECK_OK(poas__spec_parse("cpu:threads=1, opencl0,sim:rate=1e11:bandwidth=2.5e10", &s, err,
                            sizeof err));
  CHECK(s.nentries == 3);
  CHECK(strcmp(s.entry[0].kind, "cpu") == 0 && s.entry[0].index == -1);
  CHECK(strcmp(setting(&s.entry[0], "threads"), "1") == 0);
  CHECK(strcmp(s.entry[1].kind, "opencl") == 0 && s.entry[1].index == 0);
  CHECK(s.entry[2].nsettings == 2);
  CHECK(strcmp(setting(&s.entry[2], "bandwidth"), "2.5e10") == 0);
  CHECK(setting(&s.entry[2], "latency") == NULL);
  return 0;
}

/* Every malformed selection is rejected with a message naming the token. */
TEST(spec_rejects_and_names_bad_tokens) {
  static const struct {
    const char *text, *token;
  } bad[] = {
      {"gpu0", "gpu0"},           {"cpu,,opencl", "empty"},     {"cpu:threads", "threads"},
      {"cpu:=4", "=4"},           {"sim:rate=", "rate="},       {"", "empty"},
      {"opencl0:x=1:x=2", "x"},   {"cuda99999", "cuda99999"},
  };
  static poas__spec s;
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char err[256] = "";
    CHECK_RC(poas__spec_parse(bad[i].text, &s, err, sizeof err), POAS_ESPEC);
    CHECK_MSG(strstr(err, bad[i].token) != NULL, "'%s' gave '%s'", bad[i].text, err);
  }
  return 0;
}

/* Each refusal says what is wrong and where, in words of the selection as
 * written: among several entries, a bare "malformed setting 'threads'" did
 * not say which entry held it; "cuda99999" was an "unknown device" though
 * cuda is known; and "cpu01,cpu001" (one device written two ways) said
 * "device 'cpu1' selected twice", a word it does not hold, which the
 * fuzzer's check that messages quote the text (tests/fuzz/fuzz-spec.c)
 * turns into a crash. */
TEST(spec_refusals_say_what_and_where) {
  static const struct {
    const char *text, *message;
  } bad[] = {
      {"cpu,opencl0:threads",
       "malformed setting 'threads' in 'opencl0:threads' (expected key=value)"},
      {"sim,sim:x=1:x=2", "setting 'x' given twice in 'sim:x=1:x=2'"},
      {"cuda99999", "device index of 'cuda99999' too long (at most 4 digits)"},
      {"cpu01,cpu001", "device 'cpu001' selected twice (first as 'cpu01')"},
      {"cpu,cpu", "device 'cpu' selected twice"},
      {"opencl1:cores=2,opencl1", "device 'opencl1' selected twice"},
      {"cpu,,opencl", "empty device entry (entry 2) in 'cpu,,opencl'"},
      {"sim:a=1:b=1:c=1:d=1:e=1:f=1:g=1:h=1:i=1:j=1:k=1:l=1:m=1",
       "too many settings in 'sim:a=1:b=1:c=1:d=1:e=1:f=1:g=1:h=1:i=1:j=1:k=1:l=1:m=1' (at most "
       "12), at 'm'"},
      {"sim:abcdefghijklmnopqrstuvwxyz0123456=1",
       "setting name 'abcdefghijklmnopqrstuvwxyz0123456' too long (at most 31 characters)"},
  };
  static poas__spec s;
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char err[256] = "";
    CHECK_RC(poas__spec_parse(bad[i].text, &s, err, sizeof err), POAS_ESPEC);
    CHECK_MSG(strcmp(err, bad[i].message) == 0, "'%s' gave '%s'", bad[i].text, err);
  }
  /* Past the limits on the whole selection: the entry where it ran over. */
  char text[8192], err[256] = "";
  text[0] = '\0';
  for (int i = 0; i <= POAS__SPEC_MAX_ENTRIES; i++)
    snprintf(text + strlen(text), sizeof text - strlen(text), "%ssim:rate=%d", i ? "," : "",
             1000 + i);
  CHECK_RC(poas__spec_parse(text, &s, err, sizeof err), POAS_ESPEC);
  CHECK_MSG(strcmp(err, "more than 32 device entries, from 'sim:rate=1032'") == 0, "'%s'", err);
  memset(text, 'c', 5000);
  text[5000] = '\0';
  CHECK_RC(poas__spec_parse(text, &s, err, sizeof err), POAS_ESPEC);
  CHECK_MSG(strcmp(err, "device selection too long (5000 characters, at most 4095)") == 0, "'%s'",
            err);
  return 0;
}

/* Blanks around ',', ':' and '=' are forgiven, as users type them: a key
 * ' threads' once reached the cpu backend, which refused it as unknown.
 * Blanks inside a part stay (a path may hold them), and a refusal quotes
 * the part as written, less the blanks around it. */
TEST(spec_forgives_blanks_around_separators) {
  static poas__spec s;
  char err[256] = "";
  CHECK_OK(poas__spec_parse(" cpu : threads = 1 ,\topencl0 , sim:profile= my file.json :rate=1e11",
                            &s, err, sizeof err));
  CHECK_MSG(s.nentries == 3, "%d entries", s.nentries);
  CHECK(strcmp(s.entry[0].kind, "cpu") == 0 && s.entry[0].index == -1);
  CHECK_MSG(s.entry[0].nsettings == 1 && strcmp(s.entry[0].key[0], "threads") == 0 &&
                strcmp(s.entry[0].value[0], "1") == 0,
            "key '%s' value '%s'", s.entry[0].key[0], s.entry[0].value[0]);
  CHECK(strcmp(s.entry[1].kind, "opencl") == 0 && s.entry[1].index == 0);
  CHECK(strcmp(setting(&s.entry[2], "profile"), "my file.json") == 0);
  CHECK(strcmp(setting(&s.entry[2], "rate"), "1e11") == 0);
  /* The cpu backend's own check of what the parser kept. */
  int threads = 0;
  const poas__int_setting known[] = {{"threads", 1, 64, &threads}};
  CHECK_OK(poas__spec_ints("cpu", &s.entry[0], known, 1, err, sizeof err));
  CHECK(threads == 1);

  static const struct {
    const char *text, *message;
  } bad[] = {
      {"cpu:thr eads=1", "cpu: unknown setting 'thr eads' (known: threads)"},
      {"cpu: threads =", "malformed setting 'threads =' in 'cpu: threads =' (expected key=value)"},
      {"cpu: = 1", "malformed setting '= 1' in 'cpu: = 1' (expected key=value)"},
      {"cpu: :threads=1", "empty setting in 'cpu: :threads=1' (expected key=value after each ':')"},
      {"gp u0 :x=1", "unknown device 'gp u0' (expected cpu, cuda, opencl or sim, optionally "
                     "followed by an index)"},
      {"cpu , cpu :threads=1", "device 'cpu' selected twice"},
      {"cpu:x=1: x =2", "setting 'x' given twice in 'cpu:x=1: x =2'"},
      {"cpu, ,opencl", "empty device entry (entry 2) in 'cpu, ,opencl'"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    err[0] = '\0';
    int rc = poas__spec_parse(bad[i].text, &s, err, sizeof err);
    if (rc == 0)
      rc = poas__spec_ints("cpu", &s.entry[0], known, 1, err, sizeof err);
    CHECK_RC(rc, POAS_ESPEC);
    CHECK_MSG(strcmp(err, bad[i].message) == 0, "'%s' gave '%s'", bad[i].text, err);
  }
  return 0;
}

/* A range whose low end is far below 0 is worded without computing
 * hi - lo, which overflowed (undefined behaviour; UBSan stops on it). */
TEST(spec_int_words_wide_ranges) {
  char err[256] = "";
  int64_t v = 0;
  CHECK_RC(poas__spec_int("sim", "x", "9", 0, INT64_MIN, 5, &v, err, sizeof err), POAS_ESPEC);
  CHECK_MSG(strcmp(err, "sim: bad value '9' for x (-9223372036854775808 to 5)") == 0, "%s", err);
  CHECK_RC(poas__spec_int("sim", "x", "9", 0, INT64_MIN, INT64_MIN + 1, &v, err, sizeof err),
           POAS_ESPEC);
  CHECK_MSG(strstr(err, "(-9223372036854775808 or -9223372036854775807)"), "%s", err);
  CHECK_RC(poas__spec_int("sim", "x", "2", 0, 0, 1, &v, err, sizeof err), POAS_ESPEC);
  CHECK_MSG(strstr(err, "(0 or 1)"), "%s", err);
  CHECK_OK(poas__spec_int("sim", "x", "3", 0, INT64_MIN, 5, &v, err, sizeof err));
  CHECK(v == 3);
  return 0;
}

/* A device named twice is refused alike, as a kind or as an id; sims, each
 * entry a device of its own, may repeat. */
TEST(spec_refuses_a_device_named_twice) {
  static const char *const twice[] = {"cpu,cpu", "cpu0,cpu0", "opencl:x=1, opencl",
                                      "cuda1,cpu,cuda1"};
  static poas__spec s;
  for (size_t i = 0; i < sizeof twice / sizeof *twice; i++) {
    char err[256] = "";
    CHECK_RC(poas__spec_parse(twice[i], &s, err, sizeof err), POAS_ESPEC);
    CHECK_MSG(strstr(err, "selected twice"), "'%s' gave '%s'", twice[i], err);
  }
  char err[256] = "";
  CHECK_OK(poas__spec_parse("sim,sim:rate=1e12,sim", &s, err, sizeof err));
  CHECK(s.nentries == 3);
  CHECK_OK(poas__spec_parse("cpu0,cpu,opencl1,opencl0", &s, err, sizeof err));
  return 0;
}

/* A value is kept whole or refused: cut short, a sim:profile= path named
 * another file, reported missing under the shortened name. */
TEST(spec_refuses_values_too_long_to_keep) {
  static poas__spec s;
  char text[POAS__SPEC_TOKEN + 64], err[256] = "";
  for (size_t len = POAS__SPEC_TOKEN - 1; len <= POAS__SPEC_TOKEN; len++) {
    int n = snprintf(text, sizeof text, "sim:profile=");
    memset(text + n, 'p', len);
    text[n + len] = '\0';
    int rc = poas__spec_parse(text, &s, err, sizeof err);
    if (len < POAS__SPEC_TOKEN) {
      CHECK_OK(rc);
      CHECK(strcmp(setting(&s.entry[0], "profile"), text + n) == 0);
    } else {
      CHECK_RC(rc, POAS_ESPEC);
      CHECK_MSG(strstr(err, "'profile' too long"), "'%s'", err);
    }
  }
  return 0;
}

/* A message longer than the logger's line buffer reaches a handler
 * whole (a plan's reasons for many devices run past 1 KiB), and the
 * level a message is made at goes with it. */
static void keep_message(void *user, int level, const char *message) {
  char **kept = user;
  free(*kept);
  *kept = malloc(strlen(message) + 3);
  if (*kept)
    sprintf(*kept, "%d:%s", level, message);
}

TEST(long_messages_reach_the_handler_whole) {
  char *kept = NULL, word[3000];
  memset(word, 'x', sizeof word - 1);
  word[sizeof word - 1] = '\0';
  poas_set_log_handler(keep_message, &kept);
  poas__log_hold(POAS__LOG_INFO);
  poas__info("%s|%d", word, 7);
  poas__debug("made only at level 3");
  poas__log_release(POAS__LOG_INFO);
  poas_set_log_handler(NULL, NULL);
  CHECK(kept != NULL);
  CHECK_MSG(strncmp(kept, "2:", 2) == 0 && strlen(kept) == 2 + sizeof word - 1 + 2 &&
                strcmp(kept + strlen(kept) - 2, "|7") == 0,
            "kept %zu characters", kept ? strlen(kept) : 0);
  free(kept);
  return 0;
}

/* A handler that logs, as a POAS call from it would, then takes itself
 * out: what it says goes to stderr, and the next message there too. */
static void log_from_the_handler(void *user, int level, const char *message) {
  (void)level, (void)message;
  ++*(int *)user;
  poas__warn("said inside the handler");
  poas_set_log_handler(NULL, NULL);
}

/* A handler must not call POAS, but one that does is told on stderr: its
 * thread held the handler's lock, and a message from the handler, or
 * poas_set_log_handler, waited on it for good. alarm turns that hang into
 * this test's failure. */
TEST(a_handler_that_logs_does_not_hang) {
  int calls = 0;
  test_stderr_capture c = test_stderr_begin();
  CHECK(c.log && c.saved >= 0);
  alarm(30);
  poas_set_log_handler(log_from_the_handler, &calls);
  poas__log_hold(POAS__LOG_WARN);
  poas__warn("to the handler");
  poas__warn("after it");
  poas__log_release(POAS__LOG_WARN);
  alarm(0);
  char text[512];
  test_stderr_end(c, text, sizeof text);
  CHECK_MSG(calls == 1, "the handler ran %d times", calls);
  CHECK_MSG(strstr(text, "poas: warning: said inside the handler\n") &&
                strstr(text, "poas: warning: after it\n") && !strstr(text, "to the handler"),
            "stderr: '%s'", text);
  return 0;
}

/* A failure a probe expects (the allocation that ends a memory probe)
 * sets the detail but is no warning; any other failure still warns. */
TEST(expected_failures_are_not_warnings) {
  test_stderr_capture c = test_stderr_begin();
  CHECK(c.log && c.saved >= 0);
  poas__log_hold(POAS__LOG_WARN);
  poas__failures_expected(1);
  int rc1 = poas__fail(POAS_ENOMEM, "expected: out of memory");
  char detail1[64];
  snprintf(detail1, sizeof detail1, "%s", poas_error_detail());
  poas__failures_expected(0);
  int rc2 = poas__fail(POAS_EIO, "unexpected: cannot read");
  char text[512];
  test_stderr_end(c, text, sizeof text);
  poas__log_release(POAS__LOG_WARN);
  CHECK(rc1 == POAS_ENOMEM && rc2 == POAS_EIO);
  CHECK(strcmp(detail1, "expected: out of memory") == 0);
  CHECK_MSG(strstr(text, "expected: out of memory") == NULL, "logged: %s", text);
  CHECK_MSG(strstr(text, "warning: unexpected: cannot read") != NULL, "logged: %s", text);
  return 0;
}

/* Every 2-D shape the copier splits differently (rows between threads,
 * each row's bytes between threads when rows are fewer, one flat run, a
 * copy small enough for the caller alone), with thread counts that do and
 * do not divide them: every byte of the block arrives, and the bytes
 * between the destination's runs keep their poison. */
TEST(host_copy_moves_every_byte_of_a_block) {
  static const struct {
    size_t width, rows, src_pitch, dst_pitch;
  } blocks[] = {
      {1000, 3000, 1024, 1100}, /* many pitched rows */
      {300001, 2, 300032, 300100}, /* fewer rows than threads: rows split in bytes */
      {3u << 20, 1, 3u << 20, 3u << 20}, /* one flat run */
      {(3u << 20) + 77, 1, 0, 0},         /* one flat run of an odd length */
      {100, 7, 128, 100},                 /* small: the caller alone */
      /* Widths whose share per thread, rounded down, is whole cache lines
       * and leaves a remainder: a quarter of a 2049^2 float operand (4
       * threads), and rows of 384 j + 4 bytes (6 threads), whose tails the
       * slices once missed. */
      {4198401, 1, 0, 0},
      {384 * 700 + 4, 2, 384 * 700 + 64, 384 * 700 + 4},
  };
  static const int threads[] = {1, 3, 4, 6};
  size_t cap = (size_t)8 << 20;
  unsigned char *src = malloc(cap), *dst = malloc(cap);
  CHECK(src && dst);
  for (size_t i = 0; i < cap; i++)
    src[i] = (unsigned char)(i * 131 + i / 4099);
  for (size_t t = 0; t < POAS__ARRAY_LEN(threads); t++) {
    poas__copier *c;
    CHECK(poas__copier_create(threads[t], &c) == 0);
    CHECK(poas__copier_threads(c) == threads[t]);
    for (size_t b = 0; b < POAS__ARRAY_LEN(blocks); b++) {
      size_t w = blocks[b].width, rows = blocks[b].rows;
      size_t sp = rows == 1 ? w : blocks[b].src_pitch, dp = rows == 1 ? w : blocks[b].dst_pitch;
      CHECK(sp * rows <= cap && dp * rows <= cap);
      memset(dst, 0xAB, cap);
      poas__copier_run(c, dst, dp, src + 5, sp, w, rows);
      size_t wrong = 0, poison_lost = 0;
      for (size_t r = 0; r < rows; r++) {
        for (size_t x = 0; x < w; x++)
          wrong += dst[r * dp + x] != src[5 + r * sp + x];
        for (size_t x = w; x < dp && r * dp + x < cap; x++)
          poison_lost += dst[r * dp + x] != 0xAB;
      }
      poison_lost += dst[dp * rows] != 0xAB && dp * rows < cap;
      CHECK_MSG(wrong == 0 && poison_lost == 0,
                "%d threads, %zu x %zu block: %zu bytes wrong, %zu poisoned bytes written",
                threads[t], rows, w, wrong, poison_lost);
    }
    poas__copier_destroy(c);
  }
  free(src);
  free(dst);
  poas__copier *none = NULL;
  CHECK(poas__copier_create(0, &none) == POAS_EINVAL && none == NULL);
  CHECK(poas__copier_create(65, &none) == POAS_EINVAL && none == NULL);
  poas__copier_destroy(NULL);
  return 0;
}

/* The round trip refuses what it cannot measure, measures between two
 * cores the process may use, and gives the caller its binding back (no
 * bound on the time: the machines are shared). */
TEST(roundtrip_measures_and_gives_the_thread_back) {
  CHECK(poas__roundtrip_ns(0, 0) == 0);
  CHECK(poas__roundtrip_ns(-1, 0) == 0);
  CHECK(poas__roundtrip_ns(0, CPU_SETSIZE) == 0);
  cpu_set_t before, after;
  CHECK(pthread_getaffinity_np(pthread_self(), sizeof before, &before) == 0);
  int cpus[2], n = 0;
  for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
    if (CPU_ISSET(c, &before))
      cpus[n++] = c;
  if (n < 2) {
    printf("# one cpu: nothing to measure between\n");
    return 0;
  }
  double ns = poas__roundtrip_ns(cpus[0], cpus[1]);
  CHECK_MSG(ns > 0 && isfinite(ns), "round trip %g ns", ns);
  CHECK(pthread_getaffinity_np(pthread_self(), sizeof after, &after) == 0);
  CHECK(CPU_EQUAL(&before, &after));
  return 0;
}

/* The file a path names through its links (core/path.h): a relative link
 * is taken from its own folder, a chain is followed to its end whether the
 * end exists or not, and a loop, a path too long and a non-link come back
 * as the errno the profile writer and poas-bench turn into messages. */
TEST(follow_links_finds_the_file_a_path_names) {
  char dir[] = "/tmp/poas-path-XXXXXX", path[256], target[512], small[8];
  CHECK(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/sub", dir);
  CHECK(mkdir(path, 0755) == 0);
  snprintf(path, sizeof path, "%s/sub/link", dir);
  CHECK(symlink("../end.json", path) == 0); /* relative to sub/ */
  snprintf(path, sizeof path, "%s/first", dir);
  CHECK(symlink("sub/link", path) == 0);
  CHECK(poas__follow_links(path, target, sizeof target) == 0);
  char want[512];
  snprintf(want, sizeof want, "%s/sub/../end.json", dir);
  CHECK_MSG(strcmp(target, want) == 0, "%s, not %s", target, want);
  snprintf(path, sizeof path, "%s/plain", dir); /* no file yet: itself */
  CHECK(poas__follow_links(path, target, sizeof target) == 0);
  CHECK(strcmp(target, path) == 0);
  snprintf(path, sizeof path, "%s/a", dir);
  CHECK(symlink("b", path) == 0);
  snprintf(path, sizeof path, "%s/b", dir);
  CHECK(symlink("a", path) == 0);
  CHECK(poas__follow_links(path, target, sizeof target) == ELOOP);
  CHECK(poas__follow_links(path, small, sizeof small) == ENAMETOOLONG);
  CHECK(strcmp(poas__file_type(S_IFDIR), "a directory") == 0);
  CHECK(strcmp(poas__file_type(S_IFIFO), "a FIFO") == 0);
  static const char *const names[] = {"sub/link", "first", "a", "b", "sub"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    CHECK(i + 1 < sizeof names / sizeof *names ? unlink(path) == 0 : rmdir(path) == 0);
  }
  CHECK(rmdir(dir) == 0);
  return 0;
}

TEST_MAIN(TEST_ENTRY(strerror_covers_every_code), TEST_ENTRY(worker_mark_is_per_thread),
          TEST_ENTRY(parse_numbers),
          TEST_ENTRY(copies_say_when_they_cut),
          TEST_ENTRY(spec_parses_entries_and_settings),
          TEST_ENTRY(spec_rejects_and_names_bad_tokens),
          TEST_ENTRY(spec_refusals_say_what_and_where),
          TEST_ENTRY(spec_forgives_blanks_around_separators),
          TEST_ENTRY(spec_int_words_wide_ranges),
          TEST_ENTRY(spec_refuses_a_device_named_twice),
          TEST_ENTRY(spec_refuses_values_too_long_to_keep),
          TEST_ENTRY(expected_failures_are_not_warnings),
          TEST_ENTRY(long_messages_reach_the_handler_whole),
          TEST_ENTRY(a_handler_that_logs_does_not_hang),
          TEST_ENTRY(host_copy_moves_every_byte_of_a_block),
          TEST_ENTRY(roundtrip_measures_and_gives_the_thread_back),
          TEST_ENTRY(follow_links_finds_the_file_a_path_names))
