/* fuzz-spec.c: libFuzzer entry for the device-selection parser (the
 * POAS_DEVICES / --devices string, core/spec.c) and the integer settings
 * the backends read through it. Any string must give either a selection
 * whose every entry keeps the parser's promises, or POAS_ESPEC with a
 * message; never a crash, a leak or undefined behaviour. Built and run by
 * run-fuzz.sh (FUZZ_TARGET=spec), not by make check. */
#include "core/core.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const kinds[] = {"cpu", "cuda", "opencl", "sim"};

/* Whether s is terminated inside its cap bytes and not empty. */
static int held(const char *s, size_t cap) { return s[0] && memchr(s, '\0', cap) != NULL; }

/* Whether s begins or ends with a blank, which the parser trims off each
 * device word, key and value (blanks inside one are kept). */
static int padded(const char *s) {
  size_t len = strlen(s);
  return len && (isspace((unsigned char)s[0]) || isspace((unsigned char)s[len - 1]));
}

/* What a successful parse promises about each entry. */
static void check_entry(const poas__spec_entry *e) {
  int known = 0;
  for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
    known |= strcmp(e->kind, kinds[i]) == 0;
  if (!known || e->index < -1 || e->index > 9999 || e->nsettings < 0 ||
      e->nsettings > POAS__SPEC_MAX_SETTINGS || !held(e->text, sizeof e->text))
    abort();
  for (int i = 0; i < e->nsettings; i++) {
    if (!held(e->key[i], sizeof e->key[i]) || !held(e->value[i], sizeof e->value[i]))
      abort();
    /* The separators never end up inside a key or a value, nor the
     * blanks around them at either end. */
    if (strpbrk(e->key[i], ":,=") || strpbrk(e->value[i], ":,") || padded(e->key[i]) ||
        padded(e->value[i]))
      abort();
    for (int j = 0; j < i; j++)
      if (strcmp(e->key[i], e->key[j]) == 0)
        abort();
  }
}

/* The backends' readers of settings, over what the parser kept: the same
 * calls cpu/cuda/opencl (poas__spec_ints) and sim (poas__spec_int with
 * size suffixes) make, which must word every refusal. */
static void read_settings(const poas__spec_entry *e) {
  int threads = 0, pin = 0;
  const poas__int_setting known[] = {{"threads", 1, 64, &threads}, {"pin", 0, 1, &pin}};
  char err[256] = "";
  int rc = poas__spec_ints("cpu", e, known, 2, err, sizeof err);
  if (rc != 0 && (rc != POAS_ESPEC || !err[0]))
    abort();
  for (int i = 0; i < e->nsettings; i++) {
    int64_t v;
    err[0] = '\0';
    rc = poas__spec_int("sim", e->key[i], e->value[i], 1, 1, INT64_MAX, &v, err, sizeof err);
    if (rc == 0 ? v < 1 : (rc != POAS_ESPEC || !err[0]))
      abort();
  }
}

/* Whether a refusal names the bad part of the text: its first quoted token
 * is part of what was written (cut short by the buffer, it cannot be
 * checked). Only a selection too long as a whole quotes nothing. */
static int names_part_of(const char *err, const char *text) {
  if (strncmp(err, "device selection too long", 25) == 0)
    return 1;
  const char *open = strchr(err, '\'');
  if (!open)
    return 0;
  const char *close = strchr(open + 1, '\'');
  if (!close)
    return strlen(err) == 255;
  char token[256];
  size_t len = (size_t)(close - open - 1);
  memcpy(token, open + 1, len);
  token[len] = '\0';
  return strstr(text, token) != NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* An environment variable or an argument holds no NUL: the text ends at
   * the first. */
  char *text = malloc(size + 1);
  if (!text)
    return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  static poas__spec spec, again;
  char err[256] = "", small[8] = "";
  int rc = poas__spec_parse(text, &spec, err, sizeof err);
  /* Neither a missing nor a short message buffer changes the answer. */
  if (poas__spec_parse(text, &again, NULL, 0) != rc ||
      poas__spec_parse(text, &again, small, sizeof small) != rc)
    abort();
  if (rc == 0) {
    if (spec.nentries < 1 || spec.nentries > POAS__SPEC_MAX_ENTRIES)
      abort();
    for (int i = 0; i < spec.nentries; i++) {
      check_entry(&spec.entry[i]);
      read_settings(&spec.entry[i]);
    }
  } else if (rc != POAS_ESPEC || !names_part_of(err, text) || strlen(small) >= sizeof small) {
    abort();
  }
  free(text);
  return 0;
}
