/* joulestep SPANK plugin: the `tuned` policy file (tuned= plugstack key),
 * written by `joulestep model dvfs --save` (format: docs/models.md, "Policy
 * file"). Functions return 0 or a negative errno, fill err with a message
 * that says what is allowed, and never log (the caller does). */
#ifndef JS_TUNED_H
#define JS_TUNED_H

#include <stddef.h>

#include "js_parse.h"

#define JS_TUNED_MAX_BYTES 65536

/* Pure: the file's JSON text (len bytes, need not be NUL-terminated) into
 * p (type JS_POL_TUNED, map = phases.KIND.ratio) and node_model ("" when
 * absent or null). Requires "format": "joulestep-policy", "version": 1 and
 * 1..JS_MAX_MAP phases with kinds [a-z0-9_-]{1,32} and ratios in (0, 1];
 * unknown keys are ignored, "policy" too (phases is authoritative). On
 * error (-EINVAL) p and node_model are unchanged. */
int js_tuned_parse(const char *text, size_t len, struct js_policy *p, char *node_model,
		   size_t nmlen, char *err, size_t errlen);

/* Read a policy file the plugin may trust: open O_NOFOLLOW|O_CLOEXEC, then
 * fstat: a regular file owned by root and not group/world-writable, at most
 * max_bytes. On success *text (malloc'd, caller frees) holds *len bytes.
 * -errno of the failing call, -ELOOP for a symlink, -EPERM for a file a
 * user could control, -EFBIG, -EAGAIN when it grew while being read. Shared
 * by the tuned= and auto= files (js_auto.h). */
int js_rootfile_read(const char *path, size_t max_bytes, char **text, size_t *len, char *err,
		     size_t errlen);

/* Read path (open O_NOFOLLOW|O_CLOEXEC, then fstat: a regular file owned by
 * root and not group/world-writable, at most JS_TUNED_MAX_BYTES) and
 * js_tuned_parse it. -errno of the failing call, -ELOOP for a symlink,
 * -EPERM for a file a user could control, -EFBIG, -EINVAL. */
int js_tuned_load(const char *path, struct js_policy *p, char *node_model, size_t nmlen,
		  char *err, size_t errlen);

#endif
