/* profile.c: reading, validating and writing profile files.
 *
 * The reader walks the JSON tree with a small cursor that knows the path
 * of the value it looks at ("devices[0].gemm.s.NN.coef[3]"), so every
 * complaint names the file, the field and what is wrong with it. Unknown
 * fields are refused too: a hand edit with a typo must not be ignored
 * quietly. Values are checked for type, finiteness and plausible ranges,
 * and each GEMM model must predict sane times for a few reference shapes,
 * so that a hand-edited coefficient cannot make the solver divide by
 * zero or by a negative. */
#include "models/profile.h"

#include "core/path.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

/* The feature list of the GEMM model, written into every profile: a file
 * fitted with other features is refused rather than misread. */
static const char gemm_features[] =
    "1, 2mnk, mn, mk, nk, 2nk*min(m,64), 2mk*min(n,64), 2k*pad16(m)*pad16(n)-2mnk";
static const char *const pair_names[4] = {"NN", "TN", "NT", "TT"};
static const char *const dir_names[3] = {"h2d", "d2h", NULL};
static const char *const kind_names[4] = {"cpu", "cuda", "opencl", "sim"};

/* ------------------------------------------------------------ fingerprint */

static void read_cpu_model(char *buf, size_t cap) {
  poas__strlcpy(buf, "unknown CPU", cap);
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f)
    return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) != 0)
      continue;
    const char *v = strchr(line, ':');
    if (!v)
      break;
    for (v++; *v == ' ' || *v == '\t'; v++)
      ;
    poas__strlcpy(buf, v, cap);
    buf[strcspn(buf, "\n")] = '\0';
    break;
  }
  fclose(f);
}

void poas__profile_fingerprint_host(poas__profile *p) {
  if (gethostname(p->host, sizeof p->host) != 0)
    poas__strlcpy(p->host, "localhost", sizeof p->host);
  p->host[sizeof p->host - 1] = '\0';
  read_cpu_model(p->cpu_model, sizeof p->cpu_model);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  p->cores = n > 0 ? (int)n : 1;
  const char *cfg = openblas_get_config();
  poas__strlcpy(p->blas, cfg ? cfg : "unknown BLAS", sizeof p->blas);
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(p->created, sizeof p->created, "%Y-%m-%dT%H:%M:%SZ", &tm);
  p->created_epoch = (double)now;
}

void poas__profile_device_identify(poas__profile_device *pd, const poas_device_info *info,
                                   const poas__gemm_decl *decl) {
  poas__strlcpy(pd->id, info->id, sizeof pd->id);
  pd->kind = info->kind;
  poas__strlcpy(pd->name, info->name, sizeof pd->name);
  poas__strlcpy(pd->driver, info->driver, sizeof pd->driver);
  pd->cores = info->cores;
  pd->memory_bytes = info->memory_bytes;
  pd->host_memory = info->host_memory != 0;
  pd->shares_host_cores = info->shares_host_cores != 0;
  pd->gemm_decl = *decl;
}

int poas__profile_device_matches(const poas__profile_device *pd, const poas_device_info *info,
                                 char *why, size_t cap) {
  if (pd->kind != info->kind) {
    snprintf(why, cap, "%s is a %s device here but a %s device in the profile", info->id,
             kind_names[info->kind & 3], kind_names[pd->kind & 3]);
  } else if (strcmp(pd->name, info->name) != 0) {
    snprintf(why, cap, "%s is '%s' here but '%s' in the profile", info->id, info->name, pd->name);
  } else if (strcmp(pd->driver, info->driver) != 0) {
    /* (A sim's lists its settings: "sim drate=4e+10".) */
    snprintf(why, cap, "%s has driver '%s' here but '%s' in the profile", info->id, info->driver,
             pd->driver);
  } else if (pd->cores != info->cores) {
    snprintf(why, cap, "%s uses %d core%s here but %d in the profile", info->id, info->cores,
             info->cores == 1 ? "" : "s", pd->cores);
  } else {
    return 1;
  }
  return 0;
}

int poas__profile_same_machine(const poas__profile *p, const poas__profile *here,
                               const poas_device_info *const devs[], int ndev, char *why,
                               size_t cap) {
  if (strcmp(p->cpu_model, here->cpu_model) != 0)
    snprintf(why, cap, "its CPU is '%s', this machine's '%s'", p->cpu_model, here->cpu_model);
  else if (p->cores != here->cores)
    snprintf(why, cap, "it has %d cores, this machine %d", p->cores, here->cores);
  else if (strcmp(p->blas, here->blas) != 0)
    snprintf(why, cap, "its BLAS is '%s', this machine's '%s'", p->blas, here->blas);
  else {
    for (int i = 0; i < ndev; i++) {
      const poas__profile_device *pd = poas__profile_find(p, devs[i]->id);
      if (pd && !poas__profile_device_matches(pd, devs[i], why, cap))
        return 0;
    }
    return 1;
  }
  return 0;
}

const poas__profile_device *poas__profile_find(const poas__profile *p, const char *id) {
  for (int i = 0; i < p->ndev; i++)
    if (strcmp(p->dev[i].id, id) == 0)
      return &p->dev[i];
  return NULL;
}

int poas__profile_default_path(char *buf, size_t cap) {
  const char *env = getenv("POAS_PROFILE");
  if (env && *env) {
    if (strlen(env) >= cap)
      return poas__fail(POAS_EINVAL, "POAS_PROFILE is %zu bytes, past the %zu a path may have",
                        strlen(env), cap - 1);
    poas__strlcpy(buf, env, cap);
    return 0;
  }
  char host[128];
  if (gethostname(host, sizeof host) != 0)
    poas__strlcpy(host, "localhost", sizeof host);
  host[sizeof host - 1] = '\0';
  const char *xdg = getenv("XDG_DATA_HOME");
  const char *home = getenv("HOME");
  int n;
  /* The XDG base directory spec: a relative XDG_DATA_HOME is invalid and
   * is ignored, rather than read against whatever folder a tool runs in. */
  if (xdg && xdg[0] == '/')
    n = snprintf(buf, cap, "%s/poas/%s.json", xdg, host);
  else if (home && *home)
    n = snprintf(buf, cap, "%s/.local/share/poas/%s.json", home, host);
  else
    return poas__fail(POAS_EPROFILE, "no profile path: neither POAS_PROFILE, XDG_DATA_HOME "
                                     "nor HOME is set");
  if (n < 0 || (size_t)n >= cap)
    return poas__fail(POAS_EINVAL, "profile path too long");
  return 0;
}

/* ----------------------------------------------------------------- reader */

/* The reader's state: the first problem found. */
typedef struct reader {
  char problem[400];
} reader;

static int complain(reader *r, const char *fmt, ...) POAS__PRINTF(2, 3);
static int complain(reader *r, const char *fmt, ...) {
  if (!r->problem[0]) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->problem, sizeof r->problem, fmt, ap);
    va_end(ap);
  }
  return -1;
}

static const char *type_name(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT:
    return "an object";
  case JSON_ARRAY:
    return "an array";
  case JSON_STRING:
    return "a string";
  case JSON_INTEGER:
  case JSON_REAL:
    return "a number";
  case JSON_TRUE:
  case JSON_FALSE:
    return "a boolean";
  case JSON_NULL:
    return "null";
  }
  return "something else";
}

/* Refuses keys of `obj` not in the NULL-terminated `known`. */
static int only_keys(reader *r, json_t *obj, const char *path, const char *const *known) {
  const char *key;
  json_t *v;
  json_object_foreach(obj, key, v) {
    int ok = 0;
    for (const char *const *k = known; !ok && *k; k++)
      ok = strcmp(key, *k) == 0;
    if (!ok)
      return complain(r, "unknown field '%s%s%s'", path, *path ? "." : "", key);
  }
  return 0;
}

/* The member `key` of `obj`, of JSON type `type`; NULL (with a complaint)
 * when missing or of another type, unless `optional` and missing. */
static json_t *member(reader *r, json_t *obj, const char *path, const char *key, json_type type,
                      const char *what, int optional) {
  json_t *v = json_object_get(obj, key);
  const char *dot = *path ? "." : "";
  if (!v) {
    if (!optional)
      complain(r, "missing field '%s%s%s'", path, dot, key);
    return NULL;
  }
  int ok = json_typeof(v) == type || (type == JSON_REAL && json_is_integer(v)) ||
           (type == JSON_TRUE && json_is_boolean(v));
  if (!ok) {
    complain(r, "field '%s%s%s' should be %s, not %s", path, dot, key, what, type_name(v));
    return NULL;
  }
  return v;
}

static int get_string(reader *r, json_t *obj, const char *path, const char *key, char *out,
                      size_t cap) {
  json_t *v = member(r, obj, path, key, JSON_STRING, "a string", 0);
  if (!v)
    return -1;
  if (json_string_length(v) >= cap || strlen(json_string_value(v)) != json_string_length(v))
    return complain(r, "field '%s%s%s' is too long or holds a NUL character", path,
                    *path ? "." : "", key);
  poas__strlcpy(out, json_string_value(v), cap);
  return 0;
}

/* A finite number in [lo, hi]. */
static int get_number(reader *r, json_t *obj, const char *path, const char *key, double lo,
                      double hi, double *out) {
  json_t *v = member(r, obj, path, key, JSON_REAL, "a number", 0);
  if (!v)
    return -1;
  double x = json_number_value(v);
  if (!isfinite(x) || x < lo || x > hi)
    return complain(r, "field '%s%s%s' is %g, outside [%g, %g]", path, *path ? "." : "", key, x,
                    lo, hi);
  *out = x;
  return 0;
}

/* An integer in [lo, hi]; a real with no fraction is refused too, since a
 * count written as 3.0 was not written by POAS. */
static int get_int(reader *r, json_t *obj, const char *path, const char *key, json_int_t lo,
                   json_int_t hi, json_int_t *out) {
  json_t *v = member(r, obj, path, key, JSON_INTEGER, "an integer", 0);
  if (!v)
    return -1;
  json_int_t x = json_integer_value(v);
  if (x < lo || x > hi)
    return complain(r, "field '%s%s%s' is %lld, outside [%lld, %lld]", path, *path ? "." : "",
                    key, (long long)x, (long long)lo, (long long)hi);
  *out = x;
  return 0;
}

static int read_fit(reader *r, json_t *obj, const char *path, poas__fit_stats *fit) {
  json_int_t samples;
  if (get_int(r, obj, path, "samples", 0, 100000000, &samples) ||
      get_number(r, obj, path, "r2", -1e6, 1, &fit->r2) ||
      get_number(r, obj, path, "heldout_median", 0, 1e6, &fit->heldout_median) ||
      get_number(r, obj, path, "heldout_max", 0, 1e6, &fit->heldout_max))
    return -1;
  if (fit->heldout_max < fit->heldout_median)
    return complain(r, "'%s': heldout_max is below heldout_median", path);
  /* Optional: profiles written before it was measured lack it. */
  fit->timing_noise = 0;
  if (json_object_get(obj, "timing_noise") &&
      get_number(r, obj, path, "timing_noise", 0, 100, &fit->timing_noise))
    return -1;
  fit->samples = (int)samples;
  return 0;
}

/* A GEMM model must predict a positive, finite time no faster than 10
 * Pflop/s and no slower than 1 Mflop/s plus a second (POAS__PROFILE_MAX_RATE,
 * POAS__PROFILE_MIN_RATE) for these shapes, the square, thin and flat blocks
 * that planning asks about. */
static int check_gemm_sane(reader *r, const poas__gemm_model *gm, const char *path) {
  static const int64_t shapes[][3] = {{64, 64, 64},     {1024, 1024, 1024}, {8192, 8192, 8192},
                                      {16, 4096, 4096}, {4096, 16, 4096},   {4096, 4096, 16}};
  poas__device_model dm = {0};
  dm.gemm[0][0] = *gm;
  for (size_t i = 0; i < POAS__ARRAY_LEN(shapes); i++) {
    int64_t m = shapes[i][0], n = shapes[i][1], k = shapes[i][2];
    double flops = 2.0 * (double)m * (double)n * (double)k;
    double t = poas__model_gemm_time(&dm, POAS_FLOAT32, POAS_NO_TRANS, POAS_NO_TRANS, m, n, k);
    if (!isfinite(t) || t < flops / POAS__PROFILE_MAX_RATE ||
        t > flops / POAS__PROFILE_MIN_RATE + 1)
      return complain(r, "'%s' predicts %g s for a %lldx%lldx%lld GEMM, which is absurd", path, t,
                      (long long)m, (long long)n, (long long)k);
  }
  return 0;
}

/* thin: {"rows": "F1 F2 ... F256", "cols": "..."}: the factors of 1 to
 * POAS__THIN_MAX rows and columns as one string each, with four
 * significant digits (a table is 4096 numbers a device: as JSON arrays
 * they were most of a profile's lines). Optional: profiles written before
 * the table have none. */
static const char *const thin_sides[] = {"rows", "cols", NULL};

/* {"rows": "F1 ... Fcount", "cols": "..."} into out[side][0..count-1],
 * each number in [lo, hi]. */
static int read_side_factors(reader *r, json_t *obj, const char *path, int count, double lo,
                             double hi, double *const out[2]) {
  if (only_keys(r, obj, path, thin_sides))
    return -1;
  for (int side = 0; side < 2; side++) {
    json_t *v = member(r, obj, path, thin_sides[side], JSON_STRING, "a string", 0);
    if (!v)
      return -1;
    const char *p = json_string_value(v);
    int n = 0;
    for (;;) {
      while (*p == ' ')
        p++;
      if (!*p)
        break;
      char *end;
      double x = strtod(p, &end);
      if (end == p || (*end && *end != ' '))
        return complain(r, "'%s.%s' holds '%.*s', not a number", path, thin_sides[side],
                        (int)POAS__MIN(strcspn(p, " "), 16), p);
      if (n == count)
        return complain(r, "'%s.%s' has more than %d numbers", path, thin_sides[side], count);
      if (!isfinite(x) || x < lo || x > hi)
        return complain(r, "'%s.%s' number %d is %g, outside [%g, %g]", path, thin_sides[side],
                        n + 1, x, lo, hi);
      out[side][n++] = x;
      p = end;
    }
    if (n != count)
      return complain(r, "'%s.%s' has %d numbers, expected %d", path, thin_sides[side], n,
                      count);
  }
  return 0;
}

static int read_thin(reader *r, json_t *obj, const char *path, const poas__thin_table **out) {
  poas__thin_table table;
  double *const sides[2] = {table.factor[0], table.factor[1]};
  if (read_side_factors(r, obj, path, POAS__THIN_MAX, POAS__THIN_FACTOR_MIN,
                        POAS__THIN_FACTOR_MAX, sides))
    return -1;
  if (!(*out = poas__thin_intern(&table)))
    return complain(r, "out of memory for '%s'", path);
  return 0;
}

/* The string read_side_factors reads: each of f's `count` factors with
 * four significant digits. */
static json_t *thin_side_json(const double *f, int count) {
  char buf[POAS__THIN_MAX * 12 + 1];
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < count && i < POAS__THIN_MAX; i++)
    len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%.4g", i ? " " : "", f[i]);
  return json_string(buf);
}

static int read_gemm_model(reader *r, json_t *obj, const char *path, poas__gemm_model *gm) {
  static const char *const known[] = {"coef",        "samples", "r2",   "heldout_median",
                                      "heldout_max", "thin",    "timing_noise", NULL};
  if (only_keys(r, obj, path, known))
    return -1;
  json_t *coef = member(r, obj, path, "coef", JSON_ARRAY, "an array", 0);
  if (!coef)
    return -1;
  if (json_array_size(coef) != POAS__GEMM_NFEAT)
    return complain(r, "'%s.coef' has %zu numbers, expected %d", path, json_array_size(coef),
                    POAS__GEMM_NFEAT);
  for (int i = 0; i < POAS__GEMM_NFEAT; i++) {
    json_t *c = json_array_get(coef, (size_t)i);
    if (!json_is_number(c))
      return complain(r, "'%s.coef[%d]' should be a number, not %s", path, i, type_name(c));
    double x = json_number_value(c);
    /* Every feature is at least 1 for a non-empty GEMM, so a coefficient
     * of more than a second per unit is nonsense; and calibration keeps
     * every one at 0 or more (a negative one, hand-edited, could take a
     * large GEMM's time to 0 past the shapes check_gemm_sane tries). */
    if (!isfinite(x) || x < 0 || x > 1)
      return complain(r, "'%s.coef[%d]' is %g, outside [0, 1] (seconds per unit of its feature)",
                      path, i, x);
    gm->coef[i] = x;
  }
  if (read_fit(r, obj, path, &gm->fit))
    return -1;
  gm->valid = 1;
  json_t *thin = member(r, obj, path, "thin", JSON_OBJECT, "an object", 1);
  char tp[300];
  snprintf(tp, sizeof tp, "%.280s.thin", path);
  if (r->problem[0] || (thin && read_thin(r, thin, tp, &gm->thin)))
    return -1;
  return check_gemm_sane(r, gm, path);
}

/* gemm: {"s": {"fit": {...}, "NN": {...}, ...}, "d": {...}}: each dtype
 * optional, but one must be there, and a dtype needs its NN model (the
 * other pairs fall back to it). */
static int read_gemm(reader *r, json_t *obj, const char *path, poas__device_model *dm) {
  static const char *const dtypes[] = {"s", "d", NULL};
  if (only_keys(r, obj, path, dtypes))
    return -1;
  int any = 0;
  for (int dt = 0; dt < 2; dt++) {
    char p[256];
    snprintf(p, sizeof p, "%.200s.%s", path, dtypes[dt]);
    json_t *d = member(r, obj, path, dtypes[dt], JSON_OBJECT, "an object", 1);
    if (!d) {
      if (r->problem[0])
        return -1;
      continue;
    }
    static const char *const known[] = {"fit", "NN", "TN", "NT", "TT", NULL};
    if (only_keys(r, d, p, known))
      return -1;
    json_t *fit = member(r, d, p, "fit", JSON_OBJECT, "an object", 0);
    if (!fit)
      return -1;
    char fp[300];
    snprintf(fp, sizeof fp, "%s.fit", p);
    static const char *const fit_keys[] = {"samples",     "r2",           "heldout_median",
                                           "heldout_max", "timing_noise", NULL};
    if (only_keys(r, fit, fp, fit_keys) || read_fit(r, fit, fp, &dm->gemm_fit[dt]))
      return -1;
    for (int pair = 0; pair < 4; pair++) {
      json_t *m = member(r, d, p, pair_names[pair], JSON_OBJECT, "an object", pair != 0);
      if (!m) {
        if (r->problem[0])
          return -1;
        continue;
      }
      char mp[300];
      snprintf(mp, sizeof mp, "%s.%s", p, pair_names[pair]);
      if (read_gemm_model(r, m, mp, &dm->gemm[dt][pair]))
        return -1;
    }
    any = 1;
  }
  if (!any)
    return complain(r, "'%s' has no model for s or d", path);
  return 0;
}

static int read_transfer_model(reader *r, json_t *obj, const char *path,
                               poas__transfer_model *tm) {
  static const char *const known[] = {"latency",        "bandwidth",   "knee_bytes",
                                      "bandwidth_beyond", "samples",   "r2",
                                      "heldout_median", "heldout_max", "timing_noise", NULL};
  if (only_keys(r, obj, path, known) ||
      get_number(r, obj, path, "latency", 0, 1, &tm->latency) ||
      get_number(r, obj, path, "bandwidth", 1e3, 1e14, &tm->bandwidth) ||
      read_fit(r, obj, path, &tm->fit))
    return -1;
  /* The knee is optional, and comes with its rate: both or neither. */
  tm->knee_bytes = tm->bandwidth_beyond = 0;
  int has_knee = json_object_get(obj, "knee_bytes") != NULL;
  if (has_knee != (json_object_get(obj, "bandwidth_beyond") != NULL))
    return complain(r, "'%s' needs knee_bytes and bandwidth_beyond together", path);
  if (has_knee && (get_number(r, obj, path, "knee_bytes", 1, 1e15, &tm->knee_bytes) ||
                   get_number(r, obj, path, "bandwidth_beyond", 1e3, 1e14,
                              &tm->bandwidth_beyond)))
    return -1;
  tm->valid = 1;
  return 0;
}

/* transfer: {"h2d": {"pageable": {...}, "pinned": {...}}, "d2h": {...}};
 * absent for devices that compute on host memory. */
static int read_transfer(reader *r, json_t *obj, const char *path, poas__device_model *dm) {
  if (only_keys(r, obj, path, dir_names))
    return -1;
  for (int dir = 0; dir < 2; dir++) {
    char p[256];
    snprintf(p, sizeof p, "%.200s.%s", path, dir_names[dir]);
    json_t *d = member(r, obj, path, dir_names[dir], JSON_OBJECT, "an object", 0);
    if (!d)
      return -1;
    static const char *const known[] = {"pageable", "pinned", NULL};
    if (only_keys(r, d, p, known))
      return -1;
    json_t *pg = member(r, d, p, "pageable", JSON_OBJECT, "an object", 0);
    char mp[300];
    snprintf(mp, sizeof mp, "%s.pageable", p);
    if (!pg || read_transfer_model(r, pg, mp, &dm->xfer[dir]))
      return -1;
    json_t *pn = member(r, d, p, "pinned", JSON_OBJECT, "an object", 1);
    snprintf(mp, sizeof mp, "%s.pinned", p);
    if (r->problem[0] || (pn && read_transfer_model(r, pn, mp, &dm->xfer_pinned[dir])))
      return -1;
  }
  return 0;
}

static int read_kind(reader *r, json_t *obj, const char *path, poas_device_kind *kind) {
  char k[16];
  if (get_string(r, obj, path, "kind", k, sizeof k))
    return -1;
  for (int i = 0; i < 4; i++)
    if (strcmp(k, kind_names[i]) == 0) {
      *kind = (poas_device_kind)i;
      return 0;
    }
  return complain(r, "'%s.kind' is '%s', not one of cpu, cuda, opencl, sim", path, k);
}

/* Optional: obj's boolean `key` into *out (1 or 0); where absent, *out
 * keeps what the caller put there. */
static int get_flag(reader *r, json_t *obj, const char *path, const char *key, int *out) {
  json_t *v = member(r, obj, path, key, JSON_TRUE, "true or false", 1);
  if (r->problem[0])
    return -1;
  if (v)
    *out = json_is_true(v);
  return 0;
}

/* Optional "gemm_declares": {"wants_bt": true, "align": 32, ...}, each
 * field optional (0 where absent), within what a device could declare:
 * blocks and pads up to POAS__GEMM_BLOCK_MAX, bytes up to 2^56 (as a
 * device's memory), counts of elements any that is not negative. */
static int read_gemm_decl(reader *r, json_t *obj, const char *path, poas__gemm_decl *d) {
  json_t *g = member(r, obj, path, "gemm_declares", JSON_OBJECT, "an object", 1);
  if (!g)
    return r->problem[0] ? -1 : 0;
  char p[300];
  snprintf(p, sizeof p, "%.280s.gemm_declares", path);
  static const char *const known[] = {"wants_bt",    "align",     "tile_bytes",
                                      "max_buffer_bytes", "max_elems", "index_pad",
                                      "scratch_pad", "scratch_min_mnk", NULL};
  if (only_keys(r, g, p, known))
    return -1;
  *d = (poas__gemm_decl){0};
  if (get_flag(r, g, p, "wants_bt", &d->wants_bt))
    return -1;
  static const struct {
    const char *key;
    json_int_t hi;
  } ints[] = {{"align", POAS__GEMM_BLOCK_MAX},       {"tile_bytes", (json_int_t)1 << 56},
              {"max_buffer_bytes", (json_int_t)1 << 56}, {"max_elems", INT64_MAX},
              {"index_pad", POAS__GEMM_BLOCK_MAX},   {"scratch_pad", POAS__GEMM_BLOCK_MAX},
              {"scratch_min_mnk", INT64_MAX}};
  json_int_t v[POAS__ARRAY_LEN(ints)] = {0};
  for (size_t i = 0; i < POAS__ARRAY_LEN(ints); i++)
    if (json_object_get(g, ints[i].key) && get_int(r, g, p, ints[i].key, 0, ints[i].hi, &v[i]))
      return -1;
  d->align = (int)v[0];
  d->tile_bytes = (uint64_t)v[1];
  d->max_buffer_bytes = (uint64_t)v[2];
  d->max_elems = v[3];
  d->index_pad = v[4];
  d->scratch_pad = v[5];
  d->scratch_min_mnk = v[6];
  return 0;
}

static int read_fingerprint_device(reader *r, json_t *obj, const char *path,
                                   poas__profile_device *pd) {
  static const char *const known[] = {"id",    "kind",   "name",        "driver",
                                      "cores", "memory", "host_memory", "shares_host_cores",
                                      "gemm_declares", NULL};
  json_int_t cores, memory;
  if (only_keys(r, obj, path, known) || get_string(r, obj, path, "id", pd->id, sizeof pd->id) ||
      read_kind(r, obj, path, &pd->kind) ||
      get_string(r, obj, path, "name", pd->name, sizeof pd->name) ||
      get_string(r, obj, path, "driver", pd->driver, sizeof pd->driver) ||
      get_int(r, obj, path, "cores", 1, 1 << 20, &cores) ||
      get_int(r, obj, path, "memory", 0, (json_int_t)1 << 56, &memory))
    return -1;
  if (!pd->id[0])
    return complain(r, "'%s.id' is empty", path);
  pd->cores = (int)cores;
  pd->memory_bytes = (uint64_t)memory;
  /* Optional (since sims replay what a device declared): in a profile
   * written before, what its kind's backend always declares, the CPU
   * host memory and cores, a GPU neither and an OpenCL device no host
   * memory; unknown (-1) where devices of a kind differ (an OpenCL device
   * shares the host's cores only where it is a CPU device) or a sim's
   * settings decided. */
  int cpu = pd->kind == POAS_DEVICE_CPU, sim = pd->kind == POAS_DEVICE_SIM;
  pd->host_memory = cpu ? 1 : sim ? -1 : 0;
  pd->shares_host_cores = cpu ? 1 : pd->kind == POAS_DEVICE_CUDA ? 0 : -1;
  int ocl = pd->kind == POAS_DEVICE_OPENCL;
  pd->gemm_decl = (poas__gemm_decl){.wants_bt = ocl, .align = ocl ? POAS__OCL_GEMM_ALIGN : 0};
  return get_flag(r, obj, path, "host_memory", &pd->host_memory) ||
         get_flag(r, obj, path, "shares_host_cores", &pd->shares_host_cores) ||
         read_gemm_decl(r, obj, path, &pd->gemm_decl);
}

/* The profile's key for the threads of calls with few rows (side 0) or
 * columns (side 1), and what its entries count. */
static const char *const threads_keys[2] = {"threads_by_rows", "threads_by_cols"};
static const char *const side_counts[2] = {"row", "column"};

/* "threads_by_cols": {"s": {"12": 1, ...}, "d": {...}} (and
 * "threads_by_rows" alike): for a dtype, the threads a call whose C has
 * that many columns (rows) runs on, 1 to POAS__FEW_SIDE; counts not listed
 * run on all of the device's. */
static int read_threads_by_side(reader *r, json_t *obj, const char *path, int side,
                                poas__device_model *dm) {
  static const char *const dtypes[] = {"s", "d", NULL};
  if (only_keys(r, obj, path, dtypes))
    return -1;
  for (int dt = 0; dt < 2; dt++) {
    char p[256];
    snprintf(p, sizeof p, "%.200s.%s", path, dtypes[dt]);
    json_t *t = member(r, obj, path, dtypes[dt], JSON_OBJECT, "an object", 1);
    if (r->problem[0])
      return -1;
    const char *key;
    json_t *v;
    json_object_foreach(t, key, v) {
      char *end;
      long count = strtol(key, &end, 10);
      if (end == key || *end || key[0] == '0' || count < 1 || count > POAS__FEW_SIDE)
        return complain(r, "'%s' lists '%s', not a %s count from 1 to %d", p, key,
                        side_counts[side], POAS__FEW_SIDE);
      json_int_t threads;
      if (get_int(r, t, p, key, 1, 255, &threads))
        return -1;
      dm->threads_by_side[dt][side][count] = (uint8_t)threads;
    }
  }
  return 0;
}

/* Optional: obj's object `key` of the two numbers named names[0] and
 * names[1] (a NULL-terminated list), each optional and in [lo, hi], into
 * out[0] and out[1]; 0 where absent. */
static int read_pair(reader *r, json_t *obj, const char *path, const char *key,
                     const char *const names[], double lo, double hi, double out[2]) {
  out[0] = out[1] = 0;
  json_t *pair = member(r, obj, path, key, JSON_OBJECT, "an object", 1);
  if (r->problem[0])
    return -1;
  if (!pair)
    return 0;
  char p[320];
  snprintf(p, sizeof p, "%.280s.%s", path, key);
  if (only_keys(r, pair, p, names))
    return -1;
  for (int i = 0; i < 2; i++)
    if (json_object_get(pair, names[i]) && get_number(r, pair, p, names[i], lo, hi, &out[i]))
      return -1;
  return 0;
}

static int read_device_models(reader *r, json_t *obj, const char *path,
                              poas__profile_device *pd) {
  static const char *const known[] = {"id",         "name",       "memory_bytes", "gemm",
                                      "transfer",   "transpose",  "transpose_s",  "contention",
                                      "duplex",
                                      "dispatch_s", "engine_s",   "threads_by_cols",
                                      "threads_by_rows", "handoff_start", "handoff_end",
                                      "handoff_timings", "handoff_slow_timings",
                                      "handoff_extra", "handoff_latency_ns", "threads_one",
                                      "gemm_block", NULL};
  char id[POAS_ID_LEN], name[128];
  json_int_t memory;
  if (only_keys(r, obj, path, known) || get_string(r, obj, path, "id", id, sizeof id) ||
      get_string(r, obj, path, "name", name, sizeof name) ||
      get_int(r, obj, path, "memory_bytes", 0, (json_int_t)1 << 56, &memory))
    return -1;
  if (strcmp(id, pd->id) != 0 || strcmp(name, pd->name) != 0)
    return complain(r, "'%s' is '%s' ('%s') but the fingerprint lists '%s' ('%s') there", path,
                    id, name, pd->id, pd->name);
  poas__device_model *dm = &pd->model;
  dm->source = POAS__MODEL_CALIBRATED;
  dm->memory_bytes = (uint64_t)memory;
  char p[256];
  json_t *gemm = member(r, obj, path, "gemm", JSON_OBJECT, "an object", 0);
  snprintf(p, sizeof p, "%s.gemm", path);
  if (!gemm || read_gemm(r, gemm, p, dm))
    return -1;
  json_t *xfer = member(r, obj, path, "transfer", JSON_OBJECT, "an object", 1);
  snprintf(p, sizeof p, "%s.transfer", path);
  if (r->problem[0] || (xfer && read_transfer(r, xfer, p, dm)))
    return -1;
  /* Optional: devices whose GEMM wants B transposed: "transpose" for
   * doubles (calibrated since profiles had transfers), "transpose_s" for
   * floats (since 2026-11-24). */
  for (int dt = POAS_FLOAT64; dt >= POAS_FLOAT32; dt--) {
    const char *key = dt == POAS_FLOAT64 ? "transpose" : "transpose_s";
    json_t *tr = member(r, obj, path, key, JSON_OBJECT, "an object", 1);
    snprintf(p, sizeof p, "%s.%s", path, key);
    if (r->problem[0] || (tr && read_transfer_model(r, tr, p, &dm->transpose[dt])))
      return -1;
  }
  /* Optional: only profiles of devices calibrated together have it. */
  dm->contention = 1;
  if (json_object_get(obj, "contention") &&
      get_number(r, obj, path, "contention", 1, 10, &dm->contention))
    return -1;
  /* Optional: measured on devices that copy both ways at once (since
   * staged copies). */
  dm->duplex = 1;
  if (json_object_get(obj, "duplex") && get_number(r, obj, path, "duplex", 1, 10, &dm->duplex))
    return -1;
  /* Optional: devices with a choice of threads (since per-call thread
   * counts; rows since they were measured too). */
  memset(dm->threads_by_side, 0, sizeof dm->threads_by_side);
  for (int side = 0; side < 2; side++) {
    json_t *tbs = member(r, obj, path, threads_keys[side], JSON_OBJECT, "an object", 1);
    snprintf(p, sizeof p, "%s.%s", path, threads_keys[side]);
    if (r->problem[0] || (tbs && read_threads_by_side(r, tbs, p, side, dm)))
      return -1;
  }
  /* Optional: "threads_one": {"s": {"rows": "T1 ... T32", "cols": ...},
   * "d": ...}, seconds per element of the long operand, each dtype
   * optional (since calibration keeps each threads step call's time on
   * one thread). */
  memset(dm->one_thread, 0, sizeof dm->one_thread);
  json_t *one = member(r, obj, path, "threads_one", JSON_OBJECT, "an object", 1);
  if (r->problem[0])
    return -1;
  if (one) {
    static const char *const dtypes[] = {"s", "d", NULL};
    snprintf(p, sizeof p, "%s.threads_one", path);
    if (only_keys(r, one, p, dtypes))
      return -1;
    for (int dt = 0; dt < 2; dt++) {
      json_t *t = json_object_get(one, dtypes[dt]);
      char tp[300];
      snprintf(tp, sizeof tp, "%.280s.threads_one.%s", path, dtypes[dt]);
      if (t && !json_is_object(t))
        return complain(r, "'%s' is not an object", tp);
      if (t && read_side_factors(r, t, tp, POAS__FEW_SIDE, POAS__ONE_THREAD_MIN,
                                 POAS__ONE_THREAD_MAX,
                                 (double *const[2]){&dm->one_thread[dt][0][1],
                                                    &dm->one_thread[dt][1][1]}))
        return -1;
    }
  }
  /* Optional: profiles written before it was measured lack it. */
  dm->dispatch_s = 0;
  if (json_object_get(obj, "dispatch_s") &&
      get_number(r, obj, path, "dispatch_s", 0, 1, &dm->dispatch_s))
    return -1;
  dm->engine_s = 0;
  if (json_object_get(obj, "engine_s") &&
      get_number(r, obj, path, "engine_s", 0, 1, &dm->engine_s))
    return -1;
  /* Optional: devices with several threads, since calibration probes how
   * quickly work is handed between them (a ratio of two times). */
  static const char *const handoff_keys[2] = {"handoff_start", "handoff_end"};
  for (int i = 0; i < 2; i++) {
    dm->handoff[i] = 0;
    if (json_object_get(obj, handoff_keys[i]) &&
        get_number(r, obj, path, handoff_keys[i], 0.01, 100, &dm->handoff[i]))
      return -1;
  }
  /* Optional: since the GEMM sweep probes the state between its calls;
   * written as a pair. */
  json_int_t timings = 0, slow = 0;
  dm->handoff_timings = dm->handoff_slow = 0;
  if (json_object_get(obj, "handoff_timings") || json_object_get(obj, "handoff_slow_timings")) {
    if (get_int(r, obj, path, "handoff_timings", 1, 1 << 24, &timings) ||
        get_int(r, obj, path, "handoff_slow_timings", 0, timings, &slow))
      return -1;
    dm->handoff_timings = (int)timings;
    dm->handoff_slow = (int)slow;
  }
  /* Optional: "handoff_extra": {"s": seconds, "d": seconds}, each
   * optional, per element of B (measured since the sweep fits one state).
   * A microsecond per element would be a thousand times the CI VM's. */
  static const char *const dtypes[] = {"s", "d", NULL};
  if (read_pair(r, obj, path, "handoff_extra", dtypes, 0, 1e-6, dm->handoff_extra))
    return -1;
  /* Optional: "handoff_latency_ns": {"quick": ns, "slow": ns}, each
   * optional (a state calibration did not see has none). A cache line's
   * round trip between two cores takes tens to hundreds of nanoseconds;
   * ten milliseconds would be no reading. */
  static const char *const states[] = {"quick", "slow", NULL};
  if (read_pair(r, obj, path, "handoff_latency_ns", states, 1, 1e7, dm->handoff_latency_ns))
    return -1;
  /* Optional: "gemm_block": {"s": N, "d": N}, each optional, the pieces
   * calibration ran the device's GEMMs in (since it measures them); 0 or
   * absent for whole calls. */
  dm->gemm_block[0] = dm->gemm_block[1] = 0;
  json_t *blocks = member(r, obj, path, "gemm_block", JSON_OBJECT, "an object", 1);
  if (r->problem[0])
    return -1;
  if (!blocks)
    return 0;
  char bp[320];
  snprintf(bp, sizeof bp, "%.280s.gemm_block", path);
  if (only_keys(r, blocks, bp, dtypes))
    return -1;
  for (int dt = 0; dt < 2; dt++) {
    json_int_t side = 0;
    if (!json_object_get(blocks, dtypes[dt]))
      continue;
    if (get_int(r, blocks, bp, dtypes[dt], 0, POAS__GEMM_BLOCK_MAX, &side))
      return -1;
    if (side % POAS__GEMM_BLOCK_STEP)
      return complain(r, "field '%s.%s' is %lld, not a multiple of %d", bp, dtypes[dt],
                      (long long)side, POAS__GEMM_BLOCK_STEP);
    dm->gemm_block[dt] = (int)side;
  }
  return 0;
}

static int read_fingerprint(reader *r, json_t *root, poas__profile *p) {
  json_t *fp = member(r, root, "", "fingerprint", JSON_OBJECT, "an object", 0);
  if (!fp)
    return -1;
  static const char *const known[] = {"cpu_model", "cores", "blas", "devices", NULL};
  json_int_t cores;
  if (only_keys(r, fp, "fingerprint", known) ||
      get_string(r, fp, "fingerprint", "cpu_model", p->cpu_model, sizeof p->cpu_model) ||
      get_int(r, fp, "fingerprint", "cores", 1, 1 << 20, &cores) ||
      get_string(r, fp, "fingerprint", "blas", p->blas, sizeof p->blas))
    return -1;
  p->cores = (int)cores;
  json_t *devs = member(r, fp, "fingerprint", "devices", JSON_ARRAY, "an array", 0);
  if (!devs)
    return -1;
  if (json_array_size(devs) > POAS_MAX_DEVICES)
    return complain(r, "'fingerprint.devices' lists %zu devices, more than %d",
                    json_array_size(devs), POAS_MAX_DEVICES);
  p->ndev = (int)json_array_size(devs);
  for (int i = 0; i < p->ndev; i++) {
    char path[64];
    snprintf(path, sizeof path, "fingerprint.devices[%d]", i);
    json_t *d = json_array_get(devs, (size_t)i);
    if (!json_is_object(d))
      return complain(r, "'%s' should be an object, not %s", path, type_name(d));
    if (read_fingerprint_device(r, d, path, &p->dev[i]))
      return -1;
    for (int j = 0; j < i; j++)
      if (strcmp(p->dev[j].id, p->dev[i].id) == 0)
        return complain(r, "device '%s' is listed twice", p->dev[i].id);
  }
  return 0;
}

static int read_profile(reader *r, json_t *root, poas__profile *p) {
  if (!json_is_object(root))
    return complain(r, "the top level should be an object, not %s", type_name(root));
  static const char *const known[] = {"format",  "version", "created",  "created_epoch",
                                      "host",    "gemm_features", "fingerprint", "devices", NULL};
  char format[32], features[128];
  json_int_t version;
  if (get_string(r, root, "", "format", format, sizeof format))
    return -1;
  if (strcmp(format, POAS__PROFILE_FORMAT) != 0)
    return complain(r, "format is '%s', not a POAS profile", format);
  if (get_int(r, root, "", "version", 0, INT32_MAX, &version))
    return -1;
  if (version > POAS__PROFILE_VERSION)
    return complain(r, "version %lld is from a later POAS (this one reads version %d)",
                    (long long)version, POAS__PROFILE_VERSION);
  if (version != POAS__PROFILE_VERSION)
    return complain(r, "version %lld is not supported (this POAS reads version %d); run "
                       "poas-calibrate again",
                    (long long)version, POAS__PROFILE_VERSION);
  if (only_keys(r, root, "", known) ||
      get_string(r, root, "", "created", p->created, sizeof p->created) ||
      get_number(r, root, "", "created_epoch", 0, 1e11, &p->created_epoch) ||
      get_string(r, root, "", "host", p->host, sizeof p->host) ||
      get_string(r, root, "", "gemm_features", features, sizeof features))
    return -1;
  if (strcmp(features, gemm_features) != 0)
    return complain(r, "its GEMM models use the features '%s', this POAS uses '%s'; run "
                       "poas-calibrate again",
                    features, gemm_features);
  if (read_fingerprint(r, root, p))
    return -1;
  json_t *devs = member(r, root, "", "devices", JSON_ARRAY, "an array", 0);
  if (!devs)
    return -1;
  if (json_array_size(devs) != (size_t)p->ndev)
    return complain(r, "'devices' has %zu entries but the fingerprint lists %d",
                    json_array_size(devs), p->ndev);
  for (int i = 0; i < p->ndev; i++) {
    char path[32];
    snprintf(path, sizeof path, "devices[%d]", i);
    json_t *d = json_array_get(devs, (size_t)i);
    if (!json_is_object(d))
      return complain(r, "'%s' should be an object, not %s", path, type_name(d));
    if (read_device_models(r, d, path, &p->dev[i]))
      return -1;
  }
  return 0;
}

/* Parses and validates text[len] into *out: 0, POAS_ENOMEM, or
 * POAS_EPROFILE with the problem, not naming the file, in problem[cap]. */
static int parse_profile(const char *text, size_t len, poas__profile *out, char *problem,
                         size_t cap) {
  /* A file is read only to one byte past the limit, so len says that it
   * is too large, not how large it is. */
  if (len > POAS__PROFILE_MAX_BYTES) {
    snprintf(problem, cap, "larger than the %u bytes a profile may hold",
             (unsigned)POAS__PROFILE_MAX_BYTES);
    return POAS_EPROFILE;
  }
  if (len == 0) { /* "not valid JSON ... near end of file" told less */
    snprintf(problem, cap, "the file is empty (a calibration that never finished?)");
    return POAS_EPROFILE;
  }
  json_error_t jerr;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!root) {
    snprintf(problem, cap, "not valid JSON (line %d, column %d: %s)", jerr.line, jerr.column,
             jerr.text);
    return POAS_EPROFILE;
  }
  poas__profile *tmp = calloc(1, sizeof *tmp);
  if (!tmp) {
    json_decref(root);
    return POAS_ENOMEM;
  }
  reader r = {0};
  int bad = read_profile(&r, root, tmp);
  json_decref(root);
  if (bad)
    snprintf(problem, cap, "%s", r.problem);
  else
    *out = *tmp;
  free(tmp);
  return bad ? POAS_EPROFILE : 0;
}

int poas__profile_parse(const char *text, size_t len, const char *name, poas__profile *out) {
  char problem[512];
  int rc = parse_profile(text, len, out, problem, sizeof problem);
  if (rc == POAS_EPROFILE)
    return poas__fail(rc, "%s: %s", name, problem);
  if (rc == POAS_ENOMEM)
    return poas__fail(rc, "%s: no memory to read the profile", name);
  return rc;
}

/* The first POAS__PROFILE_MAX_BYTES + 1 bytes of a file, into *text (to
 * free) and *len: POAS_EIO (errno kept) when it cannot be opened or read. */
static int read_text(const char *path, char **text, size_t *len) {
  /* Opened without waiting, then read as usual: a FIFO that no program
   * writes is read as empty rather than waited on for ever (fopen did),
   * while a pipe with a writer, as from the shell's <(...), is read
   * whole. */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  int flags = fd < 0 ? -1 : fcntl(fd, F_GETFL);
  FILE *f = flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0 ? NULL : fdopen(fd, "rb");
  if (!f) {
    int e = errno;
    if (fd >= 0)
      close(fd);
    poas__fail(POAS_EIO, "%s: %s", path, strerror(e));
    errno = e;
    return POAS_EIO;
  }
  char *buf = malloc(POAS__PROFILE_MAX_BYTES + 1);
  if (!buf) {
    fclose(f);
    return poas__fail(POAS_ENOMEM, "%s: no memory to read it", path);
  }
  *len = fread(buf, 1, POAS__PROFILE_MAX_BYTES + 1, f);
  int e = ferror(f) ? (errno ? errno : EIO) : 0;
  fclose(f);
  if (e) {
    free(buf);
    poas__fail(POAS_EIO, "%s: read error: %s", path, strerror(e));
    errno = e;
    return POAS_EIO;
  }
  *text = buf;
  return 0;
}

int poas__profile_load(const char *path, poas__profile *out) {
  char *text;
  size_t len;
  int rc = read_text(path, &text, &len);
  if (rc)
    return rc;
  rc = poas__profile_parse(text, len, path, out);
  free(text);
  return rc;
}

/* What text[len], which this POAS could not use, is: JSON that says it is a
 * POAS profile of a later format version than this one reads (one a newer
 * POAS wrote), one of this version or earlier, or something else. */
static poas__profile_found classify_unusable(const char *text, size_t len) {
  json_t *root = json_loadb(text, len, 0, NULL);
  json_t *format = json_object_get(root, "format"), *version = json_object_get(root, "version");
  poas__profile_found found = POAS__FOUND_OTHER;
  if (json_is_string(format) && strcmp(json_string_value(format), POAS__PROFILE_FORMAT) == 0)
    found = json_is_integer(version) && json_integer_value(version) > POAS__PROFILE_VERSION
                ? POAS__FOUND_NEWER
                : POAS__FOUND_UNUSABLE;
  json_decref(root);
  return found;
}

int poas__profile_examine(const char *path, poas__profile *out, poas__profile_found *found,
                          char *why, size_t cap) {
  *found = POAS__FOUND_NOTHING;
  why[0] = '\0';
  char *text;
  size_t len;
  /* A file not there yet is the usual answer (a first calibration), not
   * one to warn of; any other failure is said below. */
  int was = poas__failures_expected(1);
  int rc = read_text(path, &text, &len);
  poas__failures_expected(was);
  if (rc == POAS_EIO && errno == ENOENT) {
    poas__clear_detail();
    return 0;
  }
  if (rc == POAS_EIO)
    return poas__fail(POAS_EIO, "%s: cannot read it to see whether it is a profile: %s", path,
                      strerror(errno));
  if (rc)
    return rc;
  if (len > 0) {
    rc = parse_profile(text, len, out, why, cap);
    if (rc == 0)
      *found = POAS__FOUND_PROFILE;
    else if (rc == POAS_EPROFILE)
      *found = classify_unusable(text, len);
  }
  free(text);
  if (rc == POAS_ENOMEM)
    return poas__fail(rc, "%s: no memory to read it", path);
  return rc == POAS_EPROFILE ? 0 : rc;
}

/* ----------------------------------------------------------------- writer */

static json_t *fit_json(json_t *obj, const poas__fit_stats *fit) {
  json_object_set_new(obj, "samples", json_integer(fit->samples));
  json_object_set_new(obj, "r2", json_real(fit->r2));
  json_object_set_new(obj, "heldout_median", json_real(fit->heldout_median));
  json_object_set_new(obj, "heldout_max", json_real(fit->heldout_max));
  if (fit->timing_noise > 0)
    json_object_set_new(obj, "timing_noise", json_real(fit->timing_noise));
  return obj;
}

static json_t *gemm_json(const poas__device_model *dm) {
  json_t *g = json_object();
  for (int dt = 0; dt < 2; dt++) {
    if (!dm->gemm[dt][0].valid)
      continue;
    json_t *d = json_object();
    json_object_set_new(d, "fit", fit_json(json_object(), &dm->gemm_fit[dt]));
    for (int pair = 0; pair < 4; pair++) {
      const poas__gemm_model *gm = &dm->gemm[dt][pair];
      if (!gm->valid)
        continue;
      json_t *m = json_object(), *coef = json_array();
      for (int i = 0; i < POAS__GEMM_NFEAT; i++)
        json_array_append_new(coef, json_real(gm->coef[i]));
      json_object_set_new(m, "coef", coef);
      if (gm->thin) {
        json_t *t = json_object();
        for (int side = 0; side < 2; side++)
          json_object_set_new(t, thin_sides[side],
                              thin_side_json(gm->thin->factor[side], POAS__THIN_MAX));
        json_object_set_new(m, "thin", t);
      }
      json_object_set_new(d, pair_names[pair], fit_json(m, &gm->fit));
    }
    json_object_set_new(g, dt ? "d" : "s", d);
  }
  return g;
}

static json_t *transfer_model_json(const poas__transfer_model *tm) {
  json_t *m = json_object();
  json_object_set_new(m, "latency", json_real(tm->latency));
  json_object_set_new(m, "bandwidth", json_real(tm->bandwidth));
  if (tm->knee_bytes > 0) {
    json_object_set_new(m, "knee_bytes", json_real(tm->knee_bytes));
    json_object_set_new(m, "bandwidth_beyond", json_real(tm->bandwidth_beyond));
  }
  return fit_json(m, &tm->fit);
}

/* What read_pair reads: the numbers of `value` above 0 under their names,
 * nothing where neither is. */
static void write_pair(json_t *d, const char *key, const char *const names[2],
                       const double value[2]) {
  if (!(value[0] > 0) && !(value[1] > 0))
    return;
  json_t *x = json_object();
  for (int i = 0; i < 2; i++)
    if (value[i] > 0)
      json_object_set_new(x, names[i], json_real(value[i]));
  json_object_set_new(d, key, x);
}

static json_t *device_json(const poas__profile_device *pd) {
  json_t *d = json_object();
  json_object_set_new(d, "id", json_string(pd->id));
  json_object_set_new(d, "name", json_string(pd->name));
  json_object_set_new(d, "memory_bytes", json_integer((json_int_t)pd->model.memory_bytes));
  json_object_set_new(d, "gemm", gemm_json(&pd->model));
  if (pd->model.xfer[0].valid && pd->model.xfer[1].valid) {
    json_t *t = json_object();
    for (int dir = 0; dir < 2; dir++) {
      json_t *x = json_object();
      json_object_set_new(x, "pageable", transfer_model_json(&pd->model.xfer[dir]));
      if (pd->model.xfer_pinned[dir].valid)
        json_object_set_new(x, "pinned", transfer_model_json(&pd->model.xfer_pinned[dir]));
      json_object_set_new(t, dir_names[dir], x);
    }
    json_object_set_new(d, "transfer", t);
  }
  if (pd->model.transpose[POAS_FLOAT64].valid)
    json_object_set_new(d, "transpose", transfer_model_json(&pd->model.transpose[POAS_FLOAT64]));
  if (pd->model.transpose[POAS_FLOAT32].valid)
    json_object_set_new(d, "transpose_s", transfer_model_json(&pd->model.transpose[POAS_FLOAT32]));
  if (pd->model.contention > 1)
    json_object_set_new(d, "contention", json_real(pd->model.contention));
  if (pd->model.duplex > 1)
    json_object_set_new(d, "duplex", json_real(pd->model.duplex));
  for (int side = 0; side < 2; side++) {
    json_t *tbs = json_object();
    for (int dt = 0; dt < 2; dt++) {
      json_t *t = json_object();
      for (int n = 1; n <= POAS__FEW_SIDE; n++)
        if (pd->model.threads_by_side[dt][side][n] > 0) {
          char key[8];
          snprintf(key, sizeof key, "%d", n);
          json_object_set_new(t, key, json_integer(pd->model.threads_by_side[dt][side][n]));
        }
      if (json_object_size(t))
        json_object_set_new(tbs, dt ? "d" : "s", t);
      else
        json_decref(t);
    }
    if (json_object_size(tbs))
      json_object_set_new(d, threads_keys[side], tbs);
    else
      json_decref(tbs);
  }
  json_t *one = json_object();
  for (int dt = 0; dt < 2; dt++) {
    const double(*f)[POAS__FEW_SIDE + 1] = pd->model.one_thread[dt];
    int all = 1;
    for (int side = 0; side < 2; side++)
      for (int s = 1; s <= POAS__FEW_SIDE; s++)
        all = all && f[side][s] > 0;
    if (!all)
      continue;
    json_t *t = json_object();
    for (int side = 0; side < 2; side++)
      json_object_set_new(t, thin_sides[side], thin_side_json(&f[side][1], POAS__FEW_SIDE));
    json_object_set_new(one, dt ? "d" : "s", t);
  }
  if (json_object_size(one))
    json_object_set_new(d, "threads_one", one);
  else
    json_decref(one);
  if (pd->model.dispatch_s > 0)
    json_object_set_new(d, "dispatch_s", json_real(pd->model.dispatch_s));
  if (pd->model.engine_s > 0)
    json_object_set_new(d, "engine_s", json_real(pd->model.engine_s));
  if (pd->model.handoff[0] > 0 && pd->model.handoff[1] > 0) {
    json_object_set_new(d, "handoff_start", json_real(pd->model.handoff[0]));
    json_object_set_new(d, "handoff_end", json_real(pd->model.handoff[1]));
  }
  if (pd->model.handoff_timings > 0) {
    json_object_set_new(d, "handoff_timings", json_integer(pd->model.handoff_timings));
    json_object_set_new(d, "handoff_slow_timings", json_integer(pd->model.handoff_slow));
  }
  static const char *const dtypes[2] = {"s", "d"}, *const states[2] = {"quick", "slow"};
  write_pair(d, "handoff_extra", dtypes, pd->model.handoff_extra);
  write_pair(d, "handoff_latency_ns", states, pd->model.handoff_latency_ns);
  if (pd->model.gemm_block[0] > 0 || pd->model.gemm_block[1] > 0) {
    json_t *blocks = json_object();
    for (int dt = 0; dt < 2; dt++)
      if (pd->model.gemm_block[dt] > 0)
        json_object_set_new(blocks, dtypes[dt], json_integer(pd->model.gemm_block[dt]));
    json_object_set_new(d, "gemm_block", blocks);
  }
  return d;
}

/* A device's GEMM declarations, the fields it declared (not 0); NULL when
 * it declared none (the CPU and CUDA devices). */
static json_t *gemm_decl_json(const poas__gemm_decl *g) {
  json_t *o = json_object();
  if (g->wants_bt)
    json_object_set_new(o, "wants_bt", json_true());
  const struct {
    const char *key;
    int64_t v;
  } ints[] = {{"align", g->align},
              {"tile_bytes", (int64_t)g->tile_bytes},
              {"max_buffer_bytes", (int64_t)g->max_buffer_bytes},
              {"max_elems", g->max_elems},
              {"index_pad", g->index_pad},
              {"scratch_pad", g->scratch_pad},
              {"scratch_min_mnk", g->scratch_min_mnk}};
  for (size_t i = 0; i < POAS__ARRAY_LEN(ints); i++)
    if (ints[i].v)
      json_object_set_new(o, ints[i].key, json_integer((json_int_t)ints[i].v));
  if (json_object_size(o))
    return o;
  json_decref(o);
  return NULL;
}

static json_t *profile_json(const poas__profile *p) {
  json_t *root = json_object();
  json_object_set_new(root, "format", json_string(POAS__PROFILE_FORMAT));
  json_object_set_new(root, "version", json_integer(POAS__PROFILE_VERSION));
  json_object_set_new(root, "created", json_string(p->created));
  json_object_set_new(root, "created_epoch", json_real(p->created_epoch));
  json_object_set_new(root, "host", json_string(p->host));
  json_object_set_new(root, "gemm_features", json_string(gemm_features));
  json_t *fp = json_object(), *fpdevs = json_array(), *devs = json_array();
  json_object_set_new(fp, "cpu_model", json_string(p->cpu_model));
  json_object_set_new(fp, "cores", json_integer(p->cores));
  json_object_set_new(fp, "blas", json_string(p->blas));
  for (int i = 0; i < p->ndev; i++) {
    const poas__profile_device *pd = &p->dev[i];
    json_t *d = json_object();
    json_object_set_new(d, "id", json_string(pd->id));
    json_object_set_new(d, "kind", json_string(kind_names[pd->kind & 3]));
    json_object_set_new(d, "name", json_string(pd->name));
    json_object_set_new(d, "driver", json_string(pd->driver));
    json_object_set_new(d, "cores", json_integer(pd->cores));
    json_object_set_new(d, "memory", json_integer((json_int_t)pd->memory_bytes));
    if (pd->host_memory >= 0)
      json_object_set_new(d, "host_memory", json_boolean(pd->host_memory));
    if (pd->shares_host_cores >= 0)
      json_object_set_new(d, "shares_host_cores", json_boolean(pd->shares_host_cores));
    json_t *decl = gemm_decl_json(&pd->gemm_decl);
    if (decl)
      json_object_set_new(d, "gemm_declares", decl);
    json_array_append_new(fpdevs, d);
    json_array_append_new(devs, device_json(pd));
  }
  json_object_set_new(fp, "devices", fpdevs);
  json_object_set_new(root, "fingerprint", fp);
  json_object_set_new(root, "devices", devs);
  return root;
}

/* Profiles are replaced, never written in place: the new text goes to a
 * file beside the one it replaces, which is then renamed over it, so that
 * a reader never sees half a profile. What is replaced is the file the
 * path names in the end: a symbolic link is followed (replacing the link
 * itself would leave its target as it was and the link gone), and
 * anything other than a regular file is refused (a device node renamed
 * over became a regular file). */

/* mkdir -p of the directory part of `target`; `path` (the caller's name
 * for it) starts the message. */
static int make_parents(const char *path, const char *target) {
  char dir[1024];
  poas__strlcpy(dir, target, sizeof dir);
  for (char *s = dir + 1; *s; s++) {
    if (*s != '/')
      continue;
    *s = '\0';
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
      return poas__fail(POAS_EIO, "%s: cannot create directory %s: %s", path, dir,
                        strerror(errno));
    *s = '/';
  }
  return 0;
}

/* `path` with the symbolic links it ends in followed, into target[cap],
 * as poas__follow_links does, its errors said of the profile's path. */
static int follow_links(const char *path, char *target, size_t cap) {
  if (strlen(path) >= cap)
    return poas__fail(POAS_EINVAL, "%s: profile path too long", path);
  int err = poas__follow_links(path, target, cap);
  if (err == ENAMETOOLONG)
    return poas__fail(POAS_EINVAL, "%s: profile path too long once links are followed", path);
  if (err == ELOOP)
    return poas__fail(POAS_EIO, "%s: too many levels of symbolic links", path);
  if (err)
    return poas__fail(POAS_EIO, "%s: cannot read the link %s: %s", path, target, strerror(err));
  return 0;
}

int poas__profile_no_tmpfile;

/* A name beside `target` for a file a profile is written to first, into
 * tmp[cap], that no other writer is given: the process id tells processes
 * apart, and a count of the whole process the writers within it. Two
 * threads writing one profile once shared "PROFILE.tmp.PID", each
 * truncating what the other wrote, and the second rename found no file. */
static void temp_path(const char *target, char *tmp, size_t cap) {
  static atomic_uint count;
  snprintf(tmp, cap, "%s.tmp.%ld.%u", target, (long)getpid(), atomic_fetch_add(&count, 1));
}

/* How many names temp_path may give before a writer gives up: a name can
 * be taken already by what an earlier process of the same id left, or by
 * a process of another PID namespace writing in the same folder. */
#define TEMP_TRIES 64

/* Creates a new file of `mode` under a name of temp_path's, which goes to
 * tmp[cap]: a descriptor, or -1 with errno set. A name taken is passed
 * over: opening it was writing into another writer's file. */
static int create_temp(const char *target, char *tmp, size_t cap, mode_t mode) {
  for (int i = 0; i < TEMP_TRIES; i++) {
    temp_path(target, tmp, cap);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd >= 0 || errno != EEXIST)
      return fd;
  }
  return -1;
}

/* The folder of `target`, for messages. */
static void folder_of(const char *target, char *dir, size_t cap) {
  const char *slash = strrchr(target, '/');
  if (!slash)
    poas__strlcpy(dir, ".", cap);
  else if (slash == target)
    poas__strlcpy(dir, "/", cap);
  else
    snprintf(dir, cap, "%.*s", (int)(slash - target), target);
}

/* Follows the links, refuses what is not a regular file and creates the
 * parent folders. */
static int prepare_target(const char *path, char *target, size_t cap) {
  /* "" would pass every check below (its temporary file lands in the
   * working folder) and fail only at the rename, after the measuring. */
  if (!*path)
    return poas__fail(POAS_EINVAL, "the profile's path is empty: it names no file");
  int rc = follow_links(path, target, cap);
  if (rc)
    return rc;
  struct stat st;
  if (stat(target, &st) == 0 && !S_ISREG(st.st_mode)) {
    if (strcmp(path, target) == 0)
      return poas__fail(POAS_EINVAL, "%s is %s, not a regular file: a profile is only written "
                                     "to a regular file", path, poas__file_type(st.st_mode));
    return poas__fail(POAS_EINVAL, "%s links to %s, which is %s, not a regular file: a profile "
                                   "is only written to a regular file",
                      path, target, poas__file_type(st.st_mode));
  }
  return make_parents(path, target);
}

int poas__profile_check_writable(const char *path, char *target, size_t cap) {
  int rc = prepare_target(path, target, cap);
  if (rc)
    return rc;
  char tmp[1100], dir[1024];
  int fd = create_temp(target, tmp, sizeof tmp, 0600);
  if (fd < 0) {
    int e = errno;
    folder_of(target, dir, sizeof dir);
    return poas__fail(POAS_EIO, "%s: cannot write a file in %s: %s", path, dir, strerror(e));
  }
  close(fd);
  unlink(tmp);
  return 0;
}

/* Gives fd the permissions `mode` (none: -1, a new file's), writes text to
 * it and syncs it: 0 or an errno. */
static int write_all(int fd, int mode, const char *text) {
  int e = mode >= 0 && fchmod(fd, (mode_t)mode) != 0 ? errno : 0;
  for (size_t len = strlen(text), done = 0; !e && done < len;) {
    ssize_t n = write(fd, text + done, len - done);
    if (n < 0 && errno != EINTR)
      e = errno;
    else if (n > 0)
      done += (size_t)n;
  }
  /* Some file systems report a full disk only here. */
  if (!e && fsync(fd) != 0 && errno != EINVAL)
    e = errno;
  return e;
}

#ifdef O_TMPFILE
/* Gives the file `fd`, made without a name, one of temp_path's, which
 * goes to tmp[cap]: whether it has one. A name taken is passed over, as
 * in create_temp. */
static int name_temp(int fd, const char *target, char *tmp, size_t cap) {
  char proc[64];
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
  for (int i = 0; i < TEMP_TRIES; i++) {
    temp_path(target, tmp, cap);
    if (linkat(AT_FDCWD, proc, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW) == 0)
      return 1;
    if (errno != EEXIST)
      return 0;
  }
  return 0;
}
#endif

/* Writes text to a new file beside `target`, named in tmp[cap], with the
 * permissions of the file it is to replace (0644, less the umask, for a
 * new one): 0, or an errno and no file left behind. Where the file system
 * makes files without a name (O_TMPFILE), the file gets its name only
 * once written and synced: a program stopped by a signal while it writes
 * (the sync can take seconds on a network file system) then leaves
 * nothing behind, where the file once stayed beside the profile for good.
 * Elsewhere, or without /proc to name it through, it has its name from
 * the start. */
static int write_file(const char *target, const char *text, char *tmp, size_t cap) {
  struct stat st;
  int mode = stat(target, &st) == 0 ? (int)(st.st_mode & 07777) : -1;
  int fd, e;
#ifdef O_TMPFILE
  char dir[1024];
  folder_of(target, dir, sizeof dir);
  fd = poas__profile_no_tmpfile ? -1 : open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
  if (fd >= 0) {
    e = write_all(fd, mode, text);
    int named = !e && name_temp(fd, target, tmp, cap);
    if (close(fd) != 0 && !e)
      e = errno;
    if (named && e)
      unlink(tmp);
    if (named || e)
      return e;
  }
#endif
  fd = create_temp(target, tmp, cap, 0644);
  if (fd < 0)
    return errno;
  e = write_all(fd, mode, text);
  if (close(fd) != 0 && !e)
    e = errno;
  if (e)
    unlink(tmp);
  return e;
}

/* A lock on the folder, not on the file: the file is replaced by a
 * rename, and a lock on the file replaced would not hold the next writer
 * back. flock's locks belong to an open of the folder, so that two
 * threads of one process exclude each other as two processes do. */
int poas__profile_lock(const char *path) {
  char target[1024], dir[1024];
  if (strlen(path) >= sizeof target || poas__follow_links(path, target, sizeof target) != 0)
    return -1;
  folder_of(target, dir, sizeof dir);
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  while (flock(fd, LOCK_EX) != 0)
    if (errno != EINTR) {
      close(fd);
      return -1;
    }
  return fd;
}

void poas__profile_unlock(int fd) {
  if (fd >= 0)
    close(fd);
}

/* The profile p as the JSON text a file holds, read back by the reader's
 * own checks (as `name`): the text to free, or NULL with *rc set
 * (POAS_EFIT, prefixed by `what`, where the reader refuses it). */
static char *checked_text(const poas__profile *p, const char *name, const char *what, int *rc) {
  json_t *root = profile_json(p);
  char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(17)) : NULL;
  json_decref(root);
  poas__profile *check = text ? malloc(sizeof *check) : NULL;
  if (!check) {
    free(text);
    *rc = poas__fail(POAS_ENOMEM, "%s: no memory to write the profile", name);
    return NULL;
  }
  *rc = poas__profile_parse(text, strlen(text), name, check);
  free(check);
  if (*rc) {
    char why[512];
    poas__strlcpy(why, poas_error_detail(), sizeof why);
    free(text);
    *rc = poas__fail(*rc == POAS_EPROFILE ? POAS_EFIT : *rc,
                     "%s: this POAS would refuse the profile on reading it: %s", what, why);
    return NULL;
  }
  return text;
}

int poas__profile_check(const poas__profile *p, const char *name) {
  int rc;
  free(checked_text(p, name, "not used", &rc));
  return rc;
}

int poas__profile_write(const char *path, const poas__profile *p) {
  char target[1024];
  int rc = prepare_target(path, target, sizeof target);
  if (rc)
    return rc;
  /* What is written is read back first, by the reader's own checks: a sim
   * calibrated at 1e3 flop/s wrote models that every later read refused
   * as absurd, and the file had replaced a usable one. */
  char *text = checked_text(p, path, "not written", &rc);
  if (!text)
    return rc;
  char tmp[1100];
  int e = write_file(target, text, tmp, sizeof tmp);
  free(text);
  if (!e && rename(tmp, target) != 0) {
    e = errno;
    unlink(tmp);
  }
  if (e)
    return poas__fail(POAS_EIO, "%s: cannot write the profile: %s", path, strerror(e));
  return 0;
}
