/* joulestep SPANK plugin: the step's frequency policy (js_policy_step.h):
 * the user's --energy-policy (or the allocation's) and the step's tags, the
 * admin's bounds, the admin's tuned or auto file, then the bounds again. */
#include <string.h>

#include "js_auto_step.h"
#include "js_policy_step.h"
#include "js_step.h"
#include "js_tuned.h"

void js_policy_step_resolve(struct js_step *s, const char *pol, const char *tags)
{
	char err[400];
	memset(&s->policy, 0, sizeof(s->policy));
	s->policy.type = s->conf.default_policy;
	if (pol && *pol) {
		struct js_policy p;
		if (js_policy_parse(pol, &p, err, sizeof(err)))
			js_step_error(s, "policy: --energy-policy=%s refused: %s; using %s", pol, err,
				      js_pol_name(s->conf.default_policy));
		else
			s->policy = p;
	}
	if (tags && *tags && js_tags_parse(tags, &s->tags, err, sizeof(err)))
		js_step_error(s, "tags: --energy-tag refused: %s", err);
	/* a policy the admin does not allow becomes the default one (which
	 * may be tuned or auto); then the file policies read their file, and
	 * the admin's bounds clamp the map they give */
	int n = js_policy_enforce(&s->policy, &s->conf, err, sizeof(err));
	if (n)
		js_step_error(s, "policy: admin bounds: %s", err);
	/* tuned: the admin's file gives the phase map (allowed only with a
	 * tuned= file, js_conf_parse); if it cannot be used, the step only
	 * measures. */
	if (s->policy.type == JS_POL_TUNED && (s->conf.policies_mask & (1u << JS_POL_TUNED)) &&
	    js_tuned_load(s->conf.tuned, &s->policy, s->tuned_model, sizeof(s->tuned_model), err,
			  sizeof(err))) {
		js_step_error(s, "policy: tuned file %s: %s; the step runs as monitor", s->conf.tuned, err);
		memset(&s->policy, 0, sizeof(s->policy));
		s->policy.type = JS_POL_MONITOR;
	}
	if (s->policy.type == JS_POL_AUTO)
		js_auto_resolve(s);
	n = js_policy_enforce(&s->policy, &s->conf, err, sizeof(err));
	if (n)
		js_step_error(s, "policy: admin bounds: %s", err);
}
