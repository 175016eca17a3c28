/* profile-note.h: what poas-plan and poas-demo say about the profile
 * behind their predictions, once, on stderr. A profile the user named
 * (--profile, or POAS_PROFILE) that cannot be read is an error: planning
 * on with built-in estimates, as they once did for a missing, empty or
 * truncated file, gave predictions that looked calibrated and were not.
 * That holds when only simulated devices are selected too, though the
 * library then reads no profile: a named one that can be read is said to
 * be unused. Without a profile, or with one that does not cover a device,
 * they say which devices' times are rough estimates (the devices
 * poas-bench names too, by the same rule). Header-only, over poas.h. */
#ifndef POAS_TOOLS_PROFILE_NOTE_H
#define POAS_TOOLS_PROFILE_NOTE_H

#include "poas.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether the library has said it already: with POAS_LOG at 1 or more it
 * warns that a missing or partial profile leaves rough estimates. */
static inline int tool_library_warns(void) {
  const char *level = getenv("POAS_LOG");
  return level && atoi(level) >= 1;
}

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

/* Says why the profile `named_by` names cannot be used; returns 1. */
static inline int tool_profile_refused(const char *prog, const char *named_by,
                                       const char *problem) {
  fprintf(stderr, "%s: the profile named by %s cannot be used: %s\n", prog, named_by, problem);
  return 1;
}

/* Whether the profile at `path`, named by `named_by`, is unreadable,
 * for a context that read none because all its devices are simulated. A
 * context over one CPU thread reads it as any context with a real device
 * does (where that context cannot open, the file goes unchecked). Returns
 * 1 after saying why when it cannot be read, else 0 after a note that it
 * is not used. */
static inline int tool_unread_profile_check(const char *prog, const char *path,
                                            const char *named_by) {
  static poas_profile_info pi;
  poas_options o;
  poas_options_init(&o);
  o.devices = "cpu:threads=1";
  o.profile = path;
  poas_context *probe;
  int bad = 0;
  if (poas_init(&probe, &o) == 0) {
    bad = poas_profile_get(probe, &pi) == 0 && !pi.created[0] && pi.problem[0];
    poas_finalize(probe);
  }
  if (bad)
    return tool_profile_refused(prog, named_by, pi.problem);
  fprintf(stderr,
          "%s: note: the profile named by %s is not used: every device selected is simulated, "
          "and a sim takes its model from its settings or sim:profile=FILE\n",
          prog, named_by);
  return 0;
}

/* Checks the context's profile. `named_by` says who named it ("--profile"
 * or "POAS_PROFILE"), NULL when it is the default path; `path` is the path
 * it named. Returns 1 after saying why when a named profile cannot be read
 * (missing, a directory, not a valid profile), else 0, after a note naming
 * the real devices that plan with built-in estimates, if any (sim devices'
 * own models are exact), or that a named profile is not used. */
static inline int tool_profile_check_path(const char *prog, const poas_context *ctx,
                                          const char *named_by, const char *path) {
  static poas_profile_info pi;
  if (poas_profile_get(ctx, &pi) != 0)
    return 0;
  /* A profile named, yet no path: every device is simulated, and the
   * library read none. */
  if (named_by && !pi.path[0])
    return path ? tool_unread_profile_check(prog, path, named_by) : 0;
  /* A profile that was read has a creation time, even when no device of
   * this machine matches it. */
  if (named_by && !pi.created[0] && pi.problem[0])
    return tool_profile_refused(prog, named_by, pi.problem);
  char ids[256];
  tool_estimated_ids(ctx, ids, sizeof ids);
  if (ids[0] && !tool_library_warns())
    fprintf(stderr,
            "%s: note: %s: the times of %s are rough built-in estimates (run poas-calibrate "
            "for accurate ones)\n",
            prog, pi.problem[0] ? pi.problem : "no calibrated model", ids);
  return 0;
}

/* tool_profile_check_path for a profile named by POAS_PROFILE, or by
 * nobody (named_by NULL), whose path is the environment's. A profile named
 * by --profile needs tool_profile_check_path, with the option's value. */
static inline int tool_profile_check(const char *prog, const poas_context *ctx,
                                     const char *named_by) {
  int env = named_by && strcmp(named_by, "POAS_PROFILE") == 0;
  return tool_profile_check_path(prog, ctx, named_by, env ? getenv("POAS_PROFILE") : NULL);
}

#endif
