/* sim.c: a simulated device. Its operations take the time its parameters
 * say (latency + flops / rate, latency + bytes / bandwidth), times a
 * slowdown that lets tests make a device slower than its model, and times
 * a deterministic jitter that makes it as noisy as a busy machine. It
 * computes nothing, and allocates nothing real but where it replays a
 * device that computed on host memory (poas__sim_replay_device): there
 * its buffers are host memory, which callers of such devices may write.
 *
 * When every selected device is simulated (dev->virtual_time), nothing
 * sleeps: each lane keeps a virtual clock that operations advance and
 * events carry, so scheduling tests are fast and deterministic. Beside real
 * devices, operations sleep for their duration in the calling thread. */
#include "devices/sim/sim.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIM_LANES 3

typedef struct sim_state {
  poas__device dev;
  poas__sim_params p;
  char profile[POAS__SPEC_TOKEN];
  poas__sim_time_fn time_fn;
  void *time_user;
  void (*time_user_release)(void *user);
  pthread_mutex_t lock; /* guards the clocks and the allocation count */
  double clock[SIM_LANES];
  uint64_t allocated;
  uint64_t jitter_state; /* xorshift64* state of the jitter */
  int memory_given;      /* memory= was set: a replay keeps it */
  int shared_given;      /* shared= was set: a replay keeps it */
  int bt_given;          /* bt= was set: a replay keeps it */
  int align_given;       /* align= was set: a replay keeps it */
  double dispatch_s;     /* the replayed device's cost of a run */
  double dispatch_due;   /* that cost, while the run's first operation is to come */
  double duplex;         /* the replayed device's copies both ways at once; 0: none */
  double contention;     /* the replayed device's slowdown beside the others; 0: none */
  int beside;            /* this run computes beside other devices on the host's cores */
} sim_state;

static int sim_count(void) { return 0; }

/* Each number's range. The tops are far past any machine, and keep every
 * time a sim computes finite: slowdown=1e300 once wrote "ts":inf into a
 * trace, which no JSON reader takes. */
static const struct {
  const char *key;
  int suffixes;
  size_t offset;
  double min, max;
} sim_keys[] = {
    {"rate", 1, offsetof(poas__sim_params, rate[0]), 1e3, 1e21},
    {"drate", 1, offsetof(poas__sim_params, rate[1]), 1e3, 1e21},
    {"latency", 0, offsetof(poas__sim_params, latency), 0, 1e3},
    {"bandwidth", 1, offsetof(poas__sim_params, bandwidth), 1e3, 1e21},
    {"slowdown", 0, offsetof(poas__sim_params, slowdown), 1e-3, 1e6},
    {"roundtrip", 0, offsetof(poas__sim_params, roundtrip), 0, 1e9},
};

static int set_param(sim_state *s, const char *key, const char *value, char *err, size_t errcap) {
  if (strcmp(key, "memory") == 0) {
    int64_t v;
    if (poas__spec_int("sim", "memory, bytes such as 16Gi", value, 1, 1, INT64_MAX, &v, err,
                       errcap))
      return POAS_ESPEC;
    s->p.memory = (uint64_t)v;
    s->memory_given = 1;
    return 0;
  }
  if (strcmp(key, "shared") == 0) {
    int64_t v;
    if (poas__spec_int("sim", "shared", value, 0, 0, 1, &v, err, errcap))
      return POAS_ESPEC;
    s->p.shares_host_cores = (int)v;
    s->shared_given = 1;
    return 0;
  }
  int bt = strcmp(key, "bt") == 0;
  if (bt || strcmp(key, "align") == 0) {
    int64_t v;
    if (poas__spec_int("sim", bt ? "bt" : "align", value, 0, 0, bt ? 1 : POAS__GEMM_BLOCK_MAX, &v,
                       err, errcap))
      return POAS_ESPEC;
    if (bt)
      s->p.wants_bt = (int)v, s->bt_given = 1;
    else
      s->p.align = (int)v, s->align_given = 1;
    return 0;
  }
  if (strcmp(key, "jitter") == 0) {
    double v;
    if (poas__parse_double(value, 0, &v) || !(v >= 0 && v < 1)) {
      snprintf(err, errcap, "sim: bad value '%s' for jitter (a number in [0, 1))", value);
      return POAS_ESPEC;
    }
    s->p.jitter = v;
    return 0;
  }
  if (strcmp(key, "profile") == 0) {
    poas__strlcpy(s->profile, value, sizeof s->profile);
    s->p.profile = s->profile;
    return 0;
  }
  for (size_t i = 0; i < POAS__ARRAY_LEN(sim_keys); i++) {
    if (strcmp(key, sim_keys[i].key) != 0)
      continue;
    double v;
    if (poas__parse_double(value, sim_keys[i].suffixes, &v) || v < sim_keys[i].min ||
        v > sim_keys[i].max) {
      snprintf(err, errcap, "sim: bad value '%s' for %s (a number from %g to %g)", value, key,
               sim_keys[i].min, sim_keys[i].max);
      return POAS_ESPEC;
    }
    *(double *)((char *)&s->p + sim_keys[i].offset) = v;
    return 0;
  }
  snprintf(err, errcap,
           "sim: unknown setting '%s' (known: rate, drate, latency, bandwidth, memory, "
           "slowdown, roundtrip, jitter, shared, bt, align, profile)",
           key);
  return POAS_ESPEC;
}

/* A sim's settings when none are given; drate 0 stands for half the rate. */
static const poas__sim_params sim_defaults = {
    .rate = {1e11, 0},
    .latency = 1e-5,
    .bandwidth = 1e10,
    .slowdown = 1,
    .memory = (uint64_t)16 << 30,
};

static void append(char *buf, size_t cap, const char *fmt, ...) POAS__PRINTF(3, 4);
static void append(char *buf, size_t cap, const char *fmt, ...) {
  size_t n = strlen(buf);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + n, cap - n, fmt, ap);
  va_end(ap);
}

/* Appends " key=v" to buf, v in the fewest digits that read back as v: a
 * setting that differs in the last digit is another device. */
static void append_number(char *buf, size_t cap, const char *key, double v) {
  char digits[32];
  for (int d = 1; d <= 17; d++) {
    snprintf(digits, sizeof digits, "%.*g", d, v);
    if (strtod(digits, NULL) == v)
      break;
  }
  append(buf, cap, " %s=%s", key, digits);
}

/* The longest driver string: "sim", every number at 24 characters (the
 * longest %.17g) after the longest key, and the longest profile= value. */
#define SIM_DRIVER_MAX                                                                           \
  (sizeof "sim" + POAS__ARRAY_LEN(sim_keys) * (sizeof " bandwidth=" + 24) +                      \
   sizeof " memory=" + 24 + sizeof " jitter=" + 24 + sizeof " shared=1" + sizeof " bt=1" +       \
   sizeof " align=" + 24 + sizeof " profile=" + POAS__SPEC_TOKEN)
_Static_assert(SIM_DRIVER_MAX <= sizeof((poas_device_info *)0)->driver,
               "a sim's driver string holds all of its settings");

/* The driver string: "sim", then each setting whose value is not the
 * default, exactly ("sim drate=4e+10 shared=1"). Profiles compare it (with
 * the name) to tell whether an entry is this device, and every setting
 * changes what calibration measures: a sim of another drate that matched
 * kept the dgemm models fitted at the old one. Settings that make the
 * same device compare equal (drate=1e11 beside rate=2e11, its default);
 * the default sim is "sim", as it always was. A memory= given beside
 * profile= is said even at the default's 16 GiB: unset, a replay takes
 * the replayed device's memory, and the two read alike (helper-75). */
static void describe(const poas__sim_params *p, int memory_given, char *buf, size_t cap) {
  poas__strlcpy(buf, "sim", cap);
  for (size_t i = 0; i < POAS__ARRAY_LEN(sim_keys); i++) {
    double v = *(const double *)((const char *)p + sim_keys[i].offset);
    double unset = *(const double *)((const char *)&sim_defaults + sim_keys[i].offset);
    if (sim_keys[i].offset == offsetof(poas__sim_params, rate[1]))
      unset = p->rate[0] / 2;
    if (v != unset)
      append_number(buf, cap, sim_keys[i].key, v);
  }
  if (p->memory != sim_defaults.memory || (memory_given && p->profile))
    append(buf, cap, " memory=%llu", (unsigned long long)p->memory);
  if (p->jitter != sim_defaults.jitter)
    append_number(buf, cap, "jitter", p->jitter);
  if (p->shares_host_cores)
    append(buf, cap, " shared=1");
  if (p->wants_bt)
    append(buf, cap, " bt=1");
  if (p->align > 1)
    append(buf, cap, " align=%d", p->align);
  if (p->profile)
    append(buf, cap, " profile=%s", p->profile);
}

static int sim_open(int index, const poas__spec_entry *e, poas__device **out, char *err,
                    size_t errcap) {
  sim_state *s = calloc(1, sizeof *s);
  if (!s)
    return POAS_ENOMEM;
  s->p = sim_defaults;
  s->jitter_state = 0x2545f4914f6cdd1dull + (uint64_t)index;
  for (int i = 0; e && i < e->nsettings; i++) {
    int rc = set_param(s, e->key[i], e->value[i], err, errcap);
    if (rc) {
      free(s);
      return rc;
    }
  }
  if (s->p.rate[POAS_FLOAT64] == 0)
    s->p.rate[POAS_FLOAT64] = s->p.rate[POAS_FLOAT32] / 2;
  pthread_mutex_init(&s->lock, NULL);
  poas_device_info *info = &s->dev.info;
  snprintf(info->name, sizeof info->name, "simulated device %d (%.3g flop/s)", index,
           s->p.rate[POAS_FLOAT32]);
  describe(&s->p, s->memory_given, info->driver, sizeof info->driver);
  info->memory_bytes = s->p.memory;
  info->cores = 1;
  info->shares_host_cores = s->p.shares_host_cores;
  s->dev.gemm_wants_bt = s->p.wants_bt;
  s->dev.gemm_align = s->p.align;
  info->peak_gflops[0] = s->p.rate[0] / 1e9;
  info->peak_gflops[1] = s->p.rate[1] / 1e9;
  s->dev.nlanes = SIM_LANES;
  s->dev.priv = s;
  *out = &s->dev;
  return 0;
}

static void sim_close(poas__device *dev) {
  sim_state *s = dev->priv;
  if (s->time_user_release)
    s->time_user_release(s->time_user);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

int poas__sim_get_params(const poas__device *dev, poas__sim_params *out) {
  if (!dev || dev->be != &poas__backend_sim)
    return POAS_EINVAL;
  *out = ((const sim_state *)dev->priv)->p;
  return 0;
}

void poas__sim_set_time_fn(poas__device *dev, poas__sim_time_fn fn, void *user,
                           void (*release)(void *user)) {
  sim_state *s = dev->priv;
  if (s->time_user_release)
    s->time_user_release(s->time_user);
  s->time_fn = fn;
  s->time_user = user;
  s->time_user_release = release;
}

void poas__sim_replay_device(poas__device *dev, const poas__sim_replay *r) {
  sim_state *s = dev->priv;
  pthread_mutex_lock(&s->lock);
  if (!s->memory_given && r->memory) {
    s->p.memory = r->memory;
    dev->info.memory_bytes = r->memory;
  }
  if (r->host_memory == 1) {
    /* The cpu device's one lane is its calling thread (devices/cpu). */
    dev->info.host_memory = 1;
    dev->nlanes = 1;
  }
  if (!s->shared_given && r->shares_host_cores >= 0)
    dev->info.shares_host_cores = r->shares_host_cores;
  if (r->cores > 0)
    dev->info.cores = r->cores;
  poas__dev_set_gemm_decl(dev, &r->gemm);
  if (s->bt_given)
    dev->gemm_wants_bt = s->p.wants_bt;
  if (s->align_given)
    dev->gemm_align = s->p.align;
  s->dispatch_s = r->dispatch_s;
  s->duplex = r->duplex;
  s->contention = r->contention;
  pthread_mutex_unlock(&s->lock);
}

/* dev's state where it is a sim in virtual time, which the run-time
 * costs below apply to; NULL for any other device, or a sim in real time. */
static sim_state *in_virtual_time(poas__device *dev) {
  return dev->be == &poas__backend_sim && dev->virtual_time ? dev->priv : NULL;
}

void poas__sim_run_starts(poas__device *dev) {
  sim_state *s = in_virtual_time(dev);
  if (!s)
    return;
  pthread_mutex_lock(&s->lock);
  s->dispatch_due = s->dispatch_s;
  pthread_mutex_unlock(&s->lock);
}

void poas__sim_beside(poas__device *dev, int beside) {
  sim_state *s = in_virtual_time(dev);
  if (!s)
    return;
  pthread_mutex_lock(&s->lock);
  s->beside = beside;
  pthread_mutex_unlock(&s->lock);
}

void poas__sim_run_ends(poas__device *dev) {
  sim_state *s = in_virtual_time(dev);
  if (!s)
    return;
  pthread_mutex_lock(&s->lock);
  s->dispatch_due = 0;
  s->beside = 0;
  pthread_mutex_unlock(&s->lock);
}

double poas__sim_lane_clock(const poas__device *dev, int lane) {
  sim_state *s = dev->priv;
  pthread_mutex_lock(&s->lock);
  double t = s->clock[lane];
  pthread_mutex_unlock(&s->lock);
  return t;
}

void poas__sim_advance(poas__device *dev, double seconds) {
  sim_state *s = dev->priv;
  if (!dev->virtual_time || !(seconds > 0))
    return;
  pthread_mutex_lock(&s->lock);
  for (int l = 0; l < SIM_LANES; l++)
    s->clock[l] += seconds;
  pthread_mutex_unlock(&s->lock);
}

void poas__sim_lanes_from(poas__device *dev, double t) {
  sim_state *s = dev->priv;
  if (!dev->virtual_time)
    return;
  pthread_mutex_lock(&s->lock);
  for (int l = 0; l < SIM_LANES; l++)
    if (s->clock[l] < t)
      s->clock[l] = t;
  pthread_mutex_unlock(&s->lock);
}

/* Spends `seconds` of device time on a lane: virtually, or by sleeping;
 * beside the other devices on the host's cores, the replayed device's
 * contention factor longer, but not its dispatch, as plans slow its GEMMs
 * and copies and not its runtime's cost (optimize/split.c, slow_model);
 * the first operation of a run, the run's dispatch too (slowed alike:
 * slowdown makes the whole device slower than its model). */
static int spend(poas__device *dev, int lane, double seconds) {
  sim_state *s = dev->priv;
  if (lane < 0 || lane >= SIM_LANES)
    return POAS_EINVAL;
  pthread_mutex_lock(&s->lock);
  if (s->beside && s->contention > 1)
    seconds *= s->contention;
  seconds += s->dispatch_due;
  s->dispatch_due = 0;
  pthread_mutex_unlock(&s->lock);
  seconds *= s->p.slowdown;
  if (s->p.jitter > 0) { /* the state is shared by the lanes */
    pthread_mutex_lock(&s->lock);
    uint64_t *x = &s->jitter_state;
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    double u = (double)((*x * 2685821657736338717ull) >> 11) * 0x1.0p-52 - 1.0;
    pthread_mutex_unlock(&s->lock);
    seconds *= 1 + s->p.jitter * u;
  }
  if (!dev->virtual_time)
    poas__sleep(seconds);
  pthread_mutex_lock(&s->lock);
  s->clock[lane] += seconds;
  pthread_mutex_unlock(&s->lock);
  return 0;
}

static int sim_mem_alloc(poas__device *dev, size_t bytes, poas__mem *out) {
  sim_state *s = dev->priv;
  if (dev->info.host_memory) {
    /* Host memory, as the cpu device's: what a caller of a host_memory
     * device may write (calibration fills its operands), with no limit
     * but the host's. */
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
      return POAS_ENOMEM;
    out->ptr = p;
    return 0;
  }
  pthread_mutex_lock(&s->lock);
  int rc = POAS_ENOMEM;
  if (bytes <= s->p.memory - s->allocated) {
    s->allocated += bytes;
    /* The handle is a small header holding the size, so mem_free can
     * return it to the budget; nothing of the size itself is allocated. */
    out->ptr = malloc(sizeof(size_t));
    if (out->ptr) {
      *(size_t *)out->ptr = bytes;
      rc = 0;
    } else {
      s->allocated -= bytes;
    }
  }
  pthread_mutex_unlock(&s->lock);
  return rc;
}

static void sim_mem_free(poas__device *dev, poas__mem mem) {
  sim_state *s = dev->priv;
  if (!mem.ptr)
    return;
  if (dev->info.host_memory) {
    free(mem.ptr);
    return;
  }
  pthread_mutex_lock(&s->lock);
  s->allocated -= *(size_t *)mem.ptr;
  pthread_mutex_unlock(&s->lock);
  free(mem.ptr);
}

static int sim_mem_available(poas__device *dev, uint64_t *bytes) {
  sim_state *s = dev->priv;
  if (dev->info.host_memory) /* as the cpu device, which cannot tell */
    return POAS_EINVAL;
  pthread_mutex_lock(&s->lock);
  *bytes = s->p.memory - s->allocated;
  pthread_mutex_unlock(&s->lock);
  return 0;
}

/* A copy's time; a pipeline's tile copy, which runs while copies go the
 * other way, is the replayed device's duplex factor longer, as plans
 * time it (optimize/pipeline.c). */
static double copy_time(sim_state *s, const poas__copy2d *c, poas_direction dir) {
  size_t bytes = c->width * c->rows;
  double t = s->time_fn ? s->time_fn(s->time_user, NULL, NULL, bytes, dir)
                        : s->p.latency + (double)bytes / s->p.bandwidth;
  return c->both_ways && s->duplex > 1 ? t * s->duplex : t;
}

static int sim_copy_h2d(poas__device *dev, int lane, poas__mem dst, const void *src,
                        const poas__copy2d *c) {
  (void)dst, (void)src;
  return spend(dev, lane, copy_time(dev->priv, c, POAS_H2D));
}

static int sim_copy_d2h(poas__device *dev, int lane, void *dst, poas__mem src,
                        const poas__copy2d *c) {
  (void)dst, (void)src;
  return spend(dev, lane, copy_time(dev->priv, c, POAS_D2H));
}

static int sim_gemm(poas__device *dev, int lane, const poas__gemm_call *g) {
  sim_state *s = dev->priv;
  double t = s->time_fn ? s->time_fn(s->time_user, g, NULL, 0, POAS_H2D)
                        : s->p.latency + 2.0 * (double)g->m * (double)g->n * (double)g->k /
                                             s->p.rate[g->dtype == POAS_FLOAT64];
  return spend(dev, lane, t);
}

/* A replay of a device whose GEMM wants B transposed (an OpenCL one)
 * transposes the shared operand as plans price it: the profile's
 * transpose model; a sim's own, at its copies' latency and bandwidth. */
static int sim_transpose(poas__device *dev, int lane, const poas__transpose_call *t) {
  sim_state *s = dev->priv;
  double bytes = (double)t->rows * (double)t->cols * (double)poas__dtype_size(t->dtype);
  double secs = s->time_fn ? s->time_fn(s->time_user, NULL, t, 0, POAS_H2D)
                           : s->p.latency + bytes / s->p.bandwidth;
  return spend(dev, lane, secs);
}

static int sim_event_create(poas__device *dev, poas__event *ev) {
  memset(ev, 0, sizeof *ev);
  ev->dev = dev;
  return 0;
}

static int sim_event_record(poas__device *dev, int lane, poas__event *ev) {
  ev->u.vtime = poas__sim_lane_clock(dev, lane);
  ev->wall = poas__now();
  ev->recorded = 1;
  return 0;
}

static int sim_lane_wait(poas__device *dev, int lane, poas__event *ev) {
  sim_state *s = dev->priv;
  pthread_mutex_lock(&s->lock);
  if (ev->u.vtime > s->clock[lane])
    s->clock[lane] = ev->u.vtime;
  pthread_mutex_unlock(&s->lock);
  return 0;
}

static int sim_event_sync(poas__device *dev, poas__event *ev) {
  (void)dev, (void)ev;
  return 0;
}

static void sim_event_destroy(poas__device *dev, poas__event *ev) { (void)dev, (void)ev; }

static int sim_lane_sync(poas__device *dev, int lane) {
  (void)dev, (void)lane;
  return 0;
}

/* What a replayed CPU's cores would show (sim:roundtrip=NS), for tests of
 * plans that probe the hand-off state. */
static double sim_handoff_latency(poas__device *dev) {
  sim_state *s = dev->priv;
  return s->p.roundtrip;
}

const poas__backend poas__backend_sim = {
    .kind_name = "sim",
    .kind = POAS_DEVICE_SIM,
    .built = 1,
    .count = sim_count,
    .open = sim_open,
    .close = sim_close,
    .mem_alloc = sim_mem_alloc,
    .mem_free = sim_mem_free,
    .mem_available = sim_mem_available,
    .copy_h2d = sim_copy_h2d,
    .copy_d2h = sim_copy_d2h,
    .gemm = sim_gemm,
    .transpose = sim_transpose,
    .event_create = sim_event_create,
    .event_record = sim_event_record,
    .lane_wait = sim_lane_wait,
    .event_sync = sim_event_sync,
    .event_destroy = sim_event_destroy,
    .lane_sync = sim_lane_sync,
    .handoff_latency = sim_handoff_latency,
};
