/* spec.c: parses a device selection ("cpu:threads=1,opencl0,sim:rate=1e11")
 * into entries. Only the shape is checked here (known kinds, key=value
 * settings); each backend checks its own keys and values when it opens the
 * device, so that a message can say which device rejected what.
 *
 * Blanks around the separators are forgiven: "cpu, opencl0" and
 * "cpu : threads = 1" read as "cpu,opencl0" and "cpu:threads=1", since
 * users type them so and a key ' threads' was refused as unknown. Each
 * part (device word, key, value) loses only its leading and trailing
 * blanks; blanks inside one stay, so "thr eads" is still an unknown key
 * and a sim:profile= path may hold spaces (though not begin or end with
 * one). Messages quote a part trimmed, which is still text as written. */
#include "core.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const known_kinds[] = {"cpu", "cuda", "opencl", "sim"};

static int fail(char *err, size_t errcap, const char *fmt, ...) POAS__PRINTF(3, 4);
static int fail(char *err, size_t errcap, const char *fmt, ...) {
  if (err && errcap) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errcap, fmt, ap);
    va_end(ap);
  }
  return POAS_ESPEC;
}

#define MAX_INDEX_DIGITS 4

/* Splits "opencl12" into kind "opencl" and index 12; "cpu" gives index -1.
 * Returns -1 for an unknown kind, -2 for an index of too many digits. */
static int parse_device_word(const char *word, poas__spec_entry *e) {
  size_t len = strlen(word), digits = 0;
  while (digits < len && isdigit((unsigned char)word[len - 1 - digits]))
    digits++;
  size_t kind_len = len - digits;
  if (kind_len == 0 || kind_len >= sizeof e->kind)
    return -1;
  memcpy(e->kind, word, kind_len);
  e->kind[kind_len] = '\0';
  int known = 0;
  for (size_t i = 0; i < POAS__ARRAY_LEN(known_kinds); i++)
    known |= strcmp(e->kind, known_kinds[i]) == 0;
  if (!known)
    return -1;
  if (digits > MAX_INDEX_DIGITS)
    return -2;
  e->index = -1;
  if (digits) {
    int64_t idx;
    if (poas__parse_int64(word + kind_len, 0, &idx) != 0)
      return -1;
    e->index = (int)idx;
  }
  return 0;
}

static int parse_entry(char *text, poas__spec_entry *e, char *err, size_t errcap) {
  memset(e, 0, sizeof *e);
  poas__strlcpy(e->text, text, sizeof e->text);
  /* Split by hand, not with strtok, so that an empty setting ("cpu:",
   * "cpu::threads=1") is reported instead of skipped. */
  char *rest = strchr(text, ':');
  if (rest)
    *rest++ = '\0';
  text = poas__trim(text);
  int word = parse_device_word(text, e);
  if (word == -2)
    return fail(err, errcap, "device index of '%s' too long (at most %d digits)", text,
                MAX_INDEX_DIGITS);
  if (word != 0)
    return fail(err, errcap,
                "unknown device '%s' (expected cpu, cuda, opencl or sim, "
                "optionally followed by an index)",
                text[0] ? text : e->text);
  for (char *kv = rest; kv; kv = rest) {
    if ((rest = strchr(kv, ':')) != NULL)
      *rest++ = '\0';
    kv = poas__trim(kv);
    if (!kv[0])
      return fail(err, errcap, "empty setting in '%s' (expected key=value after each ':')",
                  e->text);
    /* kv is trimmed at both ends, so only the blanks beside '=' remain;
     * it stays whole until it is known good, for the message. */
    char *eq = strchr(kv, '='), *key_end = eq, *value = eq ? eq + 1 : NULL;
    while (key_end && key_end > kv && isspace((unsigned char)key_end[-1]))
      key_end--;
    while (value && isspace((unsigned char)*value))
      value++;
    if (!eq || key_end == kv || !*value)
      return fail(err, errcap, "malformed setting '%s' in '%s' (expected key=value)", kv,
                  e->text);
    *key_end = '\0';
    if (e->nsettings == POAS__SPEC_MAX_SETTINGS)
      return fail(err, errcap, "too many settings in '%s' (at most %d), at '%s'", e->text,
                  POAS__SPEC_MAX_SETTINGS, kv);
    if (strlen(kv) >= sizeof e->key[0])
      return fail(err, errcap, "setting name '%s' too long (at most %zu characters)", kv,
                  sizeof e->key[0] - 1);
    for (int i = 0; i < e->nsettings; i++)
      if (strcmp(e->key[i], kv) == 0)
        return fail(err, errcap, "setting '%s' given twice in '%s'", kv, e->text);
    /* Cut short, a sim:profile= path named another file, which was then
     * reported missing under the shortened name. */
    size_t len = strlen(value);
    if (len >= sizeof e->value[0])
      return fail(err, errcap, "value of setting '%s' too long (%zu characters, at most %zu)", kv,
                  len, sizeof e->value[0] - 1);
    poas__strlcpy(e->key[e->nsettings], kv, sizeof e->key[0]);
    memcpy(e->value[e->nsettings], value, len + 1);
    e->nsettings++;
  }
  return 0;
}

/* The length of the device word that starts an entry's text, less the
 * blanks before its ':' ("cpu :threads=1" gives 3). */
static int device_word_len(const char *text) {
  size_t len = strcspn(text, ":");
  while (len > 0 && isspace((unsigned char)text[len - 1]))
    len--;
  return (int)len;
}

/* Whether an earlier entry of `spec` names the same device as `e` ("cpu"
 * twice, or "opencl1" twice), which is then an error: a repeated kind
 * once selected nothing more while a repeated id was refused. Each "sim"
 * entry is a simulated device of its own, so sims may repeat. The message
 * quotes the device words as written: "cpu01,cpu001" once said "device
 * 'cpu1' selected twice", a word the selection does not hold. */
static int selected_before(const poas__spec *spec, const poas__spec_entry *e, char *err,
                           size_t errcap) {
  if (strcmp(e->kind, "sim") == 0)
    return 0;
  for (int i = 0; i < spec->nentries; i++) {
    const poas__spec_entry *first = &spec->entry[i];
    if (strcmp(first->kind, e->kind) != 0 || first->index != e->index)
      continue;
    if (err && errcap) {
      int len = device_word_len(e->text), first_len = device_word_len(first->text);
      if (len == first_len && strncmp(e->text, first->text, (size_t)len) == 0)
        snprintf(err, errcap, "device '%.*s' selected twice", len, e->text);
      else
        snprintf(err, errcap, "device '%.*s' selected twice (first as '%.*s')", len, e->text,
                 first_len, first->text);
    }
    return 1;
  }
  return 0;
}

int poas__spec_parse(const char *text, poas__spec *out, char *err, size_t errcap) {
  if (!text || !out)
    return fail(err, errcap, "%s", "no device selection given");
  char buf[4096];
  size_t len = strlen(text);
  if (len >= sizeof buf)
    return fail(err, errcap, "device selection too long (%zu characters, at most %zu)", len,
                sizeof buf - 1);
  poas__strlcpy(buf, text, sizeof buf);
  poas__spec spec = {0};
  /* Entries are split by hand, not with strtok, so that an empty entry
   * ("cpu,,opencl") is reported instead of skipped. */
  char *start = buf;
  for (;;) {
    char *comma = strchr(start, ',');
    if (comma)
      *comma = '\0';
    start = poas__trim(start);
    if (*start == '\0')
      return fail(err, errcap, "empty device entry (entry %d) in '%s'", spec.nentries + 1, text);
    if (spec.nentries == POAS__SPEC_MAX_ENTRIES)
      return fail(err, errcap, "more than %d device entries, from '%s'", POAS__SPEC_MAX_ENTRIES,
                  start);
    int rc = parse_entry(start, &spec.entry[spec.nentries], err, errcap);
    if (rc)
      return rc;
    if (selected_before(&spec, &spec.entry[spec.nentries], err, errcap))
      return POAS_ESPEC;
    spec.nentries++;
    if (!comma)
      break;
    start = comma + 1;
  }
  *out = spec;
  return 0;
}

int poas__spec_int(const char *who, const char *key, const char *value, int suffixes, int64_t lo,
                   int64_t hi, int64_t *out, char *err, size_t errcap) {
  int64_t v;
  if (poas__parse_int64(value, suffixes, &v) || v < lo || v > hi) {
    if (hi == INT64_MAX)
      snprintf(err, errcap, "%s: bad value '%s' for %s (at least %lld)", who, value, key,
               (long long)lo);
    else if (lo < hi && lo == hi - 1) /* hi - lo overflows for a lo far below 0 */
      snprintf(err, errcap, "%s: bad value '%s' for %s (%lld or %lld)", who, value, key,
               (long long)lo, (long long)hi);
    else
      snprintf(err, errcap, "%s: bad value '%s' for %s (%lld to %lld)", who, value, key,
               (long long)lo, (long long)hi);
    return POAS_ESPEC;
  }
  *out = v;
  return 0;
}

int poas__spec_ints(const char *who, const poas__spec_entry *e, const poas__int_setting *known,
                    int nknown, char *err, size_t errcap) {
  for (int i = 0; e && i < e->nsettings; i++) {
    int k = 0;
    while (k < nknown && strcmp(e->key[i], known[k].key) != 0)
      k++;
    if (k == nknown) {
      char names[128] = "";
      for (int j = 0; j < nknown; j++) {
        size_t len = strlen(names);
        snprintf(names + len, sizeof names - len, "%s%s", j ? ", " : "", known[j].key);
      }
      snprintf(err, errcap, "%s: unknown setting '%s' (known: %s)", who, e->key[i], names);
      return POAS_ESPEC;
    }
    int64_t v;
    if (poas__spec_int(who, known[k].key, e->value[i], 0, known[k].lo, known[k].hi, &v, err,
                       errcap))
      return POAS_ESPEC;
    *known[k].out = (int)v;
  }
  return 0;
}
