/* profile.h: the profile file: a machine's fingerprint and the calibrated
 * models of its devices, as versioned, human-readable JSON (jansson).
 * Reading validates everything (types, finiteness, ranges, required
 * fields, version) into a temporary and hands it over only when all of it
 * is sound, so a bad file is never half-loaded. */
#ifndef POAS_PROFILE_H
#define POAS_PROFILE_H

#include "models/model.h"

#define POAS__PROFILE_FORMAT "poas-profile"
#define POAS__PROFILE_VERSION 1
/* Larger files are refused before parsing: a real profile is a few KiB. */
#define POAS__PROFILE_MAX_BYTES (4u << 20)

/* One device of a profile: what identifies it (the fingerprint) and its
 * models. */
typedef struct poas__profile_device {
  char id[POAS_ID_LEN];
  poas_device_kind kind;
  char name[128];
  char driver[64];
  int cores;
  uint64_t memory_bytes;   /* the device's reported memory */
  poas__device_model model; /* source is POAS__MODEL_CALIBRATED */
} poas__profile_device;

typedef struct poas__profile {
  char host[128];
  char created[32];        /* ISO 8601, UTC */
  double created_epoch;    /* seconds since 1970 */
  char cpu_model[128];
  int cores;               /* online host cores */
  char blas[128];
  int ndev;
  poas__profile_device dev[POAS_MAX_DEVICES];
} poas__profile;

/* Fills the host part of a fingerprint (host name, CPU model, cores, BLAS)
 * and the creation time; devices are left as they are. */
void poas__profile_fingerprint_host(poas__profile *p);
/* Fills a profile device's identification from a device's info. */
void poas__profile_device_identify(poas__profile_device *pd, const poas_device_info *info);
/* Whether a profile device describes this device: 1 when kind, name,
 * driver and cores agree, else 0 with the first difference in why[cap]. */
int poas__profile_device_matches(const poas__profile_device *pd, const poas_device_info *info,
                                 char *why, size_t cap);
/* The device with this id, or NULL. */
const poas__profile_device *poas__profile_find(const poas__profile *p, const char *id);

/* Parses and validates a profile held in text[len]; `name` (the file, or
 * "<buffer>") starts every error message. On success *out is filled; on
 * error it is untouched and POAS_EPROFILE (or POAS_ENOMEM) is returned,
 * with the detail "NAME: problem". */
int poas__profile_parse(const char *text, size_t len, const char *name, poas__profile *out);
/* Reads and parses a file. POAS_EIO when it cannot be read (errno kept, so
 * callers can tell a missing file), POAS_EPROFILE when it is not a valid
 * profile. */
int poas__profile_load(const char *path, poas__profile *out);
/* Writes a profile as JSON, creating the parent directories; the file is
 * replaced atomically (written beside it, then renamed). */
int poas__profile_write(const char *path, const poas__profile *p);
/* The default profile path: $POAS_PROFILE, else
 * $XDG_DATA_HOME/poas/<hostname>.json, else ~/.local/share/poas/<hostname>.json. */
int poas__profile_default_path(char *buf, size_t cap);

#endif /* POAS_PROFILE_H */
