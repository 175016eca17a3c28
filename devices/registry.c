/* registry.c: opens the devices a selection names, through the backend
 * tables, and keeps the mark of a device lost for good. This is the only
 * place that knows the list of backends. */
#include "devices/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const poas__backend *const backends[] = {
    &poas__backend_cpu, &poas__backend_cuda, &poas__backend_opencl, &poas__backend_sim};

const poas__backend *poas__backend_find(const char *kind_name) {
  for (size_t i = 0; i < POAS__ARRAY_LEN(backends); i++)
    if (strcmp(backends[i]->kind_name, kind_name) == 0)
      return backends[i];
  return NULL;
}

static int already_open(const poas__devset *set, const poas__backend *be, int index) {
  for (int i = 0; i < set->ndev; i++)
    if (set->dev[i]->be == be && set->dev[i]->index == index)
      return 1;
  return 0;
}

void poas__dev_gemm_decl(const poas__device *d, poas__gemm_decl *out) {
  *out = (poas__gemm_decl){.wants_bt = d->gemm_wants_bt,
                           .align = d->gemm_align,
                           .tile_bytes = d->gemm_tile_bytes,
                           .max_buffer_bytes = d->max_buffer_bytes,
                           .max_elems = d->gemm_max_elems,
                           .index_pad = d->gemm_index_pad,
                           .scratch_pad = d->gemm_scratch_pad,
                           .scratch_min_mnk = d->gemm_scratch_min_mnk};
}

void poas__dev_set_gemm_decl(poas__device *d, const poas__gemm_decl *in) {
  d->gemm_wants_bt = in->wants_bt;
  d->gemm_align = in->align;
  d->gemm_tile_bytes = in->tile_bytes;
  d->max_buffer_bytes = in->max_buffer_bytes;
  d->gemm_max_elems = in->max_elems;
  d->gemm_index_pad = in->index_pad;
  d->gemm_scratch_pad = in->scratch_pad;
  d->gemm_scratch_min_mnk = in->scratch_min_mnk;
}

int poas__dev_mark_lost(poas__device *d, const char *why) {
  int expected = 0;
  if (!atomic_compare_exchange_strong(&d->lost_state, &expected, 1))
    return 0;
  poas__strlcpy(d->lost_why, why, sizeof d->lost_why);
  atomic_store(&d->lost_state, 2);
  return 1;
}

const char *poas__dev_lost(const poas__device *d) {
  return atomic_load(&d->lost_state) == 2 ? d->lost_why : NULL;
}

/* Opens one device and appends it; `explicit_id` makes failure an error. */
static int open_one(poas__devset *set, const poas__backend *be, int index,
                    const poas__spec_entry *e, int explicit_id, char *err, size_t errcap) {
  if (set->ndev == POAS_MAX_DEVICES) {
    snprintf(err, errcap, "more than %d devices selected", POAS_MAX_DEVICES);
    return POAS_ESPEC;
  }
  poas__device *dev = NULL;
  char why[256] = "";
  int rc = be->open(index, e, &dev, why, sizeof why);
  if (rc == POAS_ESPEC) {
    snprintf(err, errcap, "%s", why);
    return rc;
  }
  if (rc) {
    /* A backend's open fails with POAS_ENOMEM only when host memory ran
     * out, which is no fault of the device: left out, it showed as "no
     * device found" (POAS_ENODEV), or as a context short of a device. */
    if (explicit_id || rc == POAS_ENOMEM) {
      snprintf(err, errcap, "%s%d could not be opened: %s", be->kind_name, index,
               why[0] ? why : poas_strerror(rc));
      return rc;
    }
    poas__warn("%s%d left out: %s", be->kind_name, index, why[0] ? why : poas_strerror(rc));
    return 0;
  }
  dev->be = be;
  dev->index = index;
  dev->cache = NULL;
  /* A real device of an index is the same device in every context that
   * opens it, its memory theirs together; each sim is a device of its
   * own. */
  if (poas__memcache_attach(dev, be != &poas__backend_sim)) {
    be->close(dev);
    snprintf(err, errcap, "out of memory opening %s%d", be->kind_name, index);
    return POAS_ENOMEM;
  }
  snprintf(dev->info.id, sizeof dev->info.id, "%s%d", be->kind_name, index);
  dev->info.kind = be->kind;
  set->dev[set->ndev++] = dev;
  return 0;
}

static int open_entry(poas__devset *set, const poas__spec_entry *e, int *sim_next, char *err,
                      size_t errcap) {
  const poas__backend *be = poas__backend_find(e->kind);
  if (be == &poas__backend_sim) {
    /* Each "sim" entry is a device of its own, numbered in order: "sim3"
     * as the first would be sim0, and a name that says otherwise. */
    if (e->index >= 0 && e->index != *sim_next) {
      snprintf(err, errcap,
               "device '%s': simulated devices are numbered in the order given, and "
               "this one is sim%d",
               e->text, *sim_next);
      return POAS_ESPEC;
    }
    return open_one(set, be, (*sim_next)++, e, 1, err, errcap);
  }
  int n = be->count();
  if (n < 0) {
    snprintf(err, errcap, "device '%s': no memory to list the %s devices", e->text,
             be->kind_name);
    return n;
  }
  if (e->index >= 0) {
    if (e->index >= n) {
      snprintf(err, errcap, "device '%s' not found: %d %s device%s present%s", e->text, n,
               be->kind_name, n == 1 ? "" : "s", be->built ? "" : " (backend not built)");
      return POAS_ENODEV;
    }
    if (already_open(set, be, e->index)) {
      snprintf(err, errcap, "device '%s' selected twice", e->text);
      return POAS_ESPEC;
    }
    return open_one(set, be, e->index, e, 1, err, errcap);
  }
  int fresh = 0;
  for (int i = 0; i < n; i++) {
    if (already_open(set, be, i))
      continue;
    fresh++;
    int rc = open_one(set, be, i, e, 0, err, errcap);
    if (rc)
      return rc;
  }
  /* "cuda0:x=1,cuda" gives the other GPUs the defaults; where there are
   * none, settings on the kind would be dropped without a word. */
  if (n > 0 && fresh == 0 && e->nsettings > 0) {
    snprintf(err, errcap,
             "the settings of '%s' apply to no device: every %s device is named "
             "before it",
             e->text, be->kind_name);
    return POAS_ESPEC;
  }
  return 0;
}

int poas__devset_open(const char *selection, poas__devset *out, char *err, size_t errcap) {
  poas__spec *spec = calloc(1, sizeof *spec);
  if (!spec) {
    /* The caller passes err on as the error's detail, which must not be
     * empty. */
    snprintf(err, errcap, "no memory to parse the device selection");
    return POAS_ENOMEM;
  }
  int rc = poas__spec_parse(selection ? selection : "cpu,cuda,opencl", spec, err, errcap);
  poas__devset set = {0};
  int sim_next = 0;
  for (int i = 0; rc == 0 && i < spec->nentries; i++)
    rc = open_entry(&set, &spec->entry[i], &sim_next, err, errcap);
  free(spec);
  if (rc == 0 && set.ndev == 0) {
    snprintf(err, errcap, "no device found for selection '%s'",
             selection ? selection : "cpu,cuda,opencl");
    rc = POAS_ENODEV;
  }
  if (rc) {
    poas__devset_close(&set);
    return rc;
  }
  /* Simulated devices run in virtual time only when nothing real runs
   * beside them; otherwise they must take real time to be comparable. */
  int all_sim = 1;
  for (int i = 0; i < set.ndev; i++)
    all_sim &= set.dev[i]->be == &poas__backend_sim;
  for (int i = 0; i < set.ndev; i++)
    set.dev[i]->virtual_time = all_sim;
  *out = set;
  return 0;
}

void poas__devset_close(poas__devset *set) {
  for (int i = set->ndev - 1; i >= 0; i--) {
    poas__memcache_detach(set->dev[i]);
    set->dev[i]->be->close(set->dev[i]);
  }
  set->ndev = 0;
}
