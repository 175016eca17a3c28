/* predict.h: what the library knows of each device's speed. At poas_init
 * the models come from the profile when it matches this machine, else from
 * built-in estimates (exact ones for sim devices). Calibration, which
 * measures devices and writes profiles, lives here too. */
#ifndef POAS_PREDICT_H
#define POAS_PREDICT_H

#include "devices/device.h"
#include "models/model.h"

/* What happened when models were attached to a context's devices. */
typedef struct poas__profile_status {
  int loaded;              /* a profile was read and used */
  char path[512];          /* the profile looked for (may not exist) */
  char problem[512];       /* why it was not used, in words; "" when used or absent */
  double age_s;            /* seconds since the profile was written */
} poas__profile_status;

/* Fills models[i] for each device of `set`: from the profile at
 * `profile_path` (NULL: the default path) unless `no_profile`, else a
 * built-in estimate. Never fails for a missing or mismatched profile (the
 * status says why); returns an error only for out-of-memory. */
int poas__predict_attach(const poas__devset *set, const char *profile_path, int no_profile,
                         poas__device_model models[], poas__profile_status *status);

/* A built-in estimate for one device: exact for sim devices, rough (from
 * peak estimates) for the others. */
void poas__predict_builtin(const poas__device *dev, poas__device_model *out);

#endif /* POAS_PREDICT_H */
