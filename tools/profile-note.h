/* profile-note.h: what poas-plan and poas-demo say about the profile
 * behind their predictions, once, on stderr. A profile the user named
 * (--profile, or POAS_PROFILE) that cannot be read is an error: planning
 * on with built-in estimates, as they once did for a missing, empty or
 * truncated file, gave predictions that looked calibrated and were not.
 * That holds when only simulated devices are selected too, which take no
 * model from it: a named one that can be read is said to be unused. Without a profile, or with one
 * that does not cover a device, they say which devices' times are rough estimates (the devices
 * poas-bench names too, by the same rule). Header-only, over poas.h. */
#ifndef POAS_TOOLS_PROFILE_NOTE_H
#define POAS_TOOLS_PROFILE_NOTE_H

#include "poas.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether the library has said it already: logging warnings, it warns
 * that a missing or partial profile leaves rough estimates. Asked of the
 * library, which reads POAS_LOG by its own rule: read here with atoi,
 * POAS_LOG=' 1' silenced both, and '.9e1' let both speak. */
static inline int tool_library_warns(void) { return poas_log_level() >= 1; }

/* The ids, ", "-joined into ids[cap], of the context's real devices
 * without a calibrated model, whose times are built-in estimates (a sim's
 * own model is exact); ids[0] == '\0' when there are none. */
static inline void tool_estimated_ids(const poas_context *ctx, char *ids, size_t cap) {
  ids[0] = '\0';
  int n = poas_device_count(ctx);
  for (int i = 0; i < n; i++) {
    poas_device_info d;
    if (poas_device_get(ctx, i, &d) != 0 || d.has_model || d.kind == POAS_DEVICE_SIM)
      continue;
    size_t len = strlen(ids);
    snprintf(ids + len, cap - len, "%s%s", len ? ", " : "", d.id);
  }
}

/* Whether every device of the context is simulated: a profile it was
 * named then gives no device a model. */
static inline int tool_only_sims(const poas_context *ctx) {
  int n = poas_device_count(ctx);
  for (int i = 0; i < n; i++) {
    poas_device_info d;
    if (poas_device_get(ctx, i, &d) == 0 && d.kind != POAS_DEVICE_SIM)
      return 0;
  }
  return 1;
}

/* Checks the context's profile. `option` is the tool's --profile (NULL:
 * not given, or a tool without one); a profile it names, else one
 * POAS_PROFILE names, is a named one, and the messages say which named
 * it. Returns 1 after saying why when a named profile cannot be read
 * (missing, a directory, not a valid profile), else 0, after a note
 * naming the real devices that plan with built-in estimates, if any (sim
 * devices' own models are exact), or that a named profile is read and not
 * used. All of it is said on `err`. */
static inline int tool_profile_check_to(FILE *err, const char *prog, const poas_context *ctx,
                                        const char *option) {
  const char *env = getenv("POAS_PROFILE");
  const char *named_by = option ? "--profile" : env && *env ? "POAS_PROFILE" : NULL;
  static poas_profile_info pi;
  if (poas_profile_get(ctx, &pi) != 0)
    return 0;
  /* A profile that was read has a creation time, even when no device of
   * this machine matches it. */
  if (named_by && !pi.created[0] && pi.problem[0]) {
    fprintf(err, "%s: the profile named by %s cannot be used: %s\n", prog, named_by, pi.problem);
    return 1;
  }
  if (named_by && pi.problem[0] && tool_only_sims(ctx)) {
    fprintf(err, "%s: note: the profile named by %s is not used: %s\n", prog, named_by, pi.problem);
    return 0;
  }
  char ids[256];
  tool_estimated_ids(ctx, ids, sizeof ids);
  if (ids[0] && !tool_library_warns())
    fprintf(err,
            "%s: note: %s: the times of %s are rough built-in estimates (run poas-calibrate "
            "for accurate ones)\n",
            prog, pi.problem[0] ? pi.problem : "no calibrated model", ids);
  return 0;
}

/* tool_profile_check_to, saying it on stderr. */
static inline int tool_profile_check(const char *prog, const poas_context *ctx,
                                     const char *option) {
  return tool_profile_check_to(stderr, prog, ctx, option);
}

#endif
