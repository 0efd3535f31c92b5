/* joulestep SPANK plugin: the `auto` policy file (auto= plugstack key),
 * written by `joulestep policy update --save` (format: docs/admin-guide.md,
 * "The auto policy"). The plugin takes no decision of its own: it applies
 * the step's app's map (the file's `default` map for kinds the app does not
 * list), and runs settled kinds at fmax on one job in baseline_every.
 * Functions return 0 or a negative errno, fill err with a message that says
 * what is allowed, and never log (the caller does). */
#ifndef JS_AUTO_H
#define JS_AUTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "js_parse.h"

#define JS_AUTO_MAX_BYTES (1 << 20)
#define JS_AUTO_STATE_LEN 12

/* What the step took from the file, for the record. */
struct js_auto {
	char app[JS_TAG_VAL_LEN + 1];
	bool app_listed;            /* the file names the app (else: default)   */
	unsigned baseline_every;    /* K: jobs with job_id % K == 0 are baseline */
	bool baseline;              /* this job runs settled kinds at fmax      */
	char digest[32];            /* "fnv1a64:<16 hex>" of the file's bytes   */
	size_t nstate;              /* parallel to the policy's map             */
	char state[JS_MAX_MAP][JS_AUTO_STATE_LEN]; /* exploring, settled,
				     * guarded, default (from `default`)       */
};

/* Pure: the file's JSON text into p (type JS_POL_AUTO; map = the file's
 * `default`, overridden kind by kind by apps.APP.phases.KIND.ratio; settled
 * kinds at 1.0 when job_id % baseline_every == 0) and a. Requires "format":
 * "joulestep-auto", "version": 1; baseline_every an integer in [1, 1000000]
 * (default 10); ratios in (0, 1]; kinds [a-z0-9_-]{1,32}; states exploring,
 * settled or guarded; at most JS_MAX_MAP kinds in the merged map. Unknown
 * keys are ignored. On error (-EINVAL) p and a are unchanged. */
int js_auto_parse(const char *text, size_t len, const char *app, uint32_t job_id,
		  struct js_policy *p, struct js_auto *a, char *err, size_t errlen);

/* js_rootfile_read (js_tuned.h: root-owned, not group/world-writable, no
 * symlink, at most JS_AUTO_MAX_BYTES) then js_auto_parse. */
int js_auto_load(const char *path, const char *app, uint32_t job_id, struct js_policy *p,
		 struct js_auto *a, char *err, size_t errlen);

#endif
