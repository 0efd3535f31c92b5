/* The `auto` policy in a step (docs/design.md, "The auto policy"): the
 * step's app (its --energy-tag app=NAME) picks its map from the admin's
 * auto= file (js_auto.h); the record says which map, from which version of
 * the file, and what the file said of each kind. */
#include <jansson.h>
#include <string.h>

#include "js_auto_step.h"
#include "js_step.h"

static const char *app_tag(const struct js_step *s)
{
	for (size_t i = 0; i < s->tags.n; i++)
		if (!strcmp(s->tags.t[i].key, "app"))
			return s->tags.t[i].val;
	return NULL;
}

void js_auto_resolve(struct js_step *s)
{
	char err[400];
	const char *app = app_tag(s);
	memset(&s->autop, 0, sizeof(s->autop));
	if (!app) {
		js_step_error(s, "policy: auto needs --energy-tag=app=NAME (the application whose runs it learns from); the step runs as io-dvfs");
		s->policy.type = JS_POL_IO_DVFS;
		s->policy.nmap = 0;
		return;
	}
	if (js_auto_load(s->conf.autofile, app, s->job_id, &s->policy, &s->autop, err, sizeof(err))) {
		js_step_error(s, "policy: auto file %s: %s; the step runs as monitor", s->conf.autofile, err);
		memset(&s->policy, 0, sizeof(s->policy));
		s->policy.type = JS_POL_MONITOR;
	}
}

void js_auto_record(const struct js_step *s, json_t *step, json_t *prov)
{
	if (s->policy.type != JS_POL_AUTO)
		return;
	const struct js_auto *a = &s->autop;
	json_t *states = json_object();
	for (size_t i = 0; i < s->policy.nmap && i < a->nstate; i++)
		json_object_set_new(states, s->policy.map[i].kind, json_string(a->state[i]));
	json_object_set_new(step, "policy_app", json_string(a->app));
	json_object_set_new(step, "policy_app_listed", json_boolean(a->app_listed));
	json_object_set_new(step, "policy_states", states);
	json_object_set_new(step, "policy_baseline", json_boolean(a->baseline));
	json_object_set_new(prov, "auto_file", json_string(s->conf.autofile));
	json_object_set_new(prov, "auto_file_digest", json_string(a->digest));
}
