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
/* The flop rates a GEMM model may stand for: reading a profile refuses one
 * that predicts a time for any of the shapes planning asks about (up to
 * 8192^3) faster than the first or slower than the second plus a second,
 * as absurd. Calibration refuses a device slower than the floor before it
 * measures it (predict/calibrate.c). */
#define POAS__PROFILE_MAX_RATE 1e16
#define POAS__PROFILE_MIN_RATE 1e6

/* One device of a profile: what identifies it (the fingerprint) and its
 * models. */
typedef struct poas__profile_device {
  char id[POAS_ID_LEN];
  poas_device_kind kind;
  char name[128];
  char driver[sizeof((poas_device_info *)0)->driver];
  int cores;
  uint64_t memory_bytes;   /* the device's reported memory */
  /* What the device declared (poas_device_info): 1 where it computed on
   * host memory, or on the host's cores, else 0; -1 where the profile
   * does not say (one written before they were recorded, for a kind whose
   * devices differ: an OpenCL device, a sim). A sim that replays the
   * device declares the same (predict/attach.c). */
  int host_memory;
  int shares_host_cores;
  /* What it declared to plans about its GEMM ("gemm_declares"): in a
   * profile written before they were recorded, what its kind's backend
   * declares everywhere (an OpenCL device: B transposed, blocks of
   * POAS__OCL_GEMM_ALIGN) and 0 for the rest. */
  poas__gemm_decl gemm_decl;
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
/* Fills a profile device's identification from a device's info, and what
 * it declares to plans about its GEMM. */
void poas__profile_device_identify(poas__profile_device *pd, const poas_device_info *info,
                                   const poas__gemm_decl *decl);
/* Whether a profile device describes this device: 1 when kind, name,
 * driver and cores agree, else 0 with the first difference in why[cap]. */
int poas__profile_device_matches(const poas__profile_device *pd, const poas_device_info *info,
                                 char *why, size_t cap);
/* The device with this id, or NULL. */
const poas__profile_device *poas__profile_find(const poas__profile *p, const char *id);
/* Whether profile p was measured on the machine `here` fingerprints (CPU
 * model, cores, BLAS) with these devices, as far as the devices both list
 * tell: 1, or 0 with the first difference in why[cap]. */
int poas__profile_same_machine(const poas__profile *p, const poas__profile *here,
                               const poas_device_info *const devs[], int ndev, char *why,
                               size_t cap);

/* Parses and validates a profile held in text[len]; `name` (the file, or
 * "<buffer>") starts every error message. On success *out is filled; on
 * error it is untouched and POAS_EPROFILE (or POAS_ENOMEM) is returned,
 * with the detail "NAME: problem". */
int poas__profile_parse(const char *text, size_t len, const char *name, poas__profile *out);
/* Reads and parses a file. POAS_EIO when it cannot be read (errno kept, so
 * callers can tell a missing file), POAS_EPROFILE when it is not a valid
 * profile. */
int poas__profile_load(const char *path, poas__profile *out);
/* What a file about to be replaced holds (poas__profile_examine). */
typedef enum poas__profile_found {
  POAS__FOUND_NOTHING,  /* no file, or an empty one */
  POAS__FOUND_PROFILE,  /* a profile this POAS reads */
  POAS__FOUND_UNUSABLE, /* a POAS profile this POAS refuses (an earlier version, a bad field) */
  POAS__FOUND_NEWER,    /* a POAS profile of a later version than this POAS reads */
  POAS__FOUND_OTHER     /* something that is not a POAS profile */
} poas__profile_found;
/* Reads the file at `path` (links followed) to say what it holds: *out
 * gets a profile, why[cap] the problem (without the file's name) of a
 * file that is not a usable one. POAS_EIO when the file is there but
 * cannot be read. */
int poas__profile_examine(const char *path, poas__profile *out, poas__profile_found *found,
                          char *why, size_t cap);
/* Checks before anything is measured that a profile can be written to
 * `path`: follows the symbolic links it ends in (their final target, whose
 * path goes to target[cap], is the file replaced), refuses an existing
 * file that is not a regular one (POAS_EINVAL), creates the parent
 * folders and a file beside the target, which it removes (POAS_EIO, with
 * `path` and the reason, when it cannot). */
int poas__profile_check_writable(const char *path, char *target, size_t cap);
/* Writes a profile as JSON, creating the parent directories. The file
 * `path` ends at, once its symbolic links are followed, is replaced
 * atomically (written beside it, then renamed) and keeps its permissions;
 * one that is not a regular file is refused (POAS_EINVAL). Errors name
 * `path` and the reason. */
int poas__profile_write(const char *path, const poas__profile *p);
/* Whether the profile reader would take p, as poas__profile_write checks
 * it before writing: 0, or POAS_EFIT saying why not ("not used: this POAS
 * would refuse the profile on reading it: `name`: ..."). */
int poas__profile_check(const poas__profile *p, const char *name);
/* Holds the folder of the file `path` ends at (links followed) for one
 * writer at a time, for a read of what is there and the write that
 * replaces it: a descriptor to hand to poas__profile_unlock, or -1 where
 * the folder cannot be opened or locked (a file system without flock on
 * folders), and the writer then goes on unlocked. */
int poas__profile_lock(const char *path);
void poas__profile_unlock(int fd);
/* Nonzero: profiles are written as on a file system without O_TMPFILE
 * (their temporary file named from the start). For tests of that path;
 * set it while no profile is being written. */
extern int poas__profile_no_tmpfile;
/* The default profile path: $POAS_PROFILE, else
 * $XDG_DATA_HOME/poas/<hostname>.json (an absolute XDG_DATA_HOME: the XDG
 * spec has a relative one ignored), else ~/.local/share/poas/<hostname>.json. */
int poas__profile_default_path(char *buf, size_t cap);

#endif /* POAS_PROFILE_H */
