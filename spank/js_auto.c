/* joulestep SPANK plugin: the `auto` policy file (js_auto.h). */
#include "js_auto.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "js_tuned.h"

static const char allowed[] =
	"{\"format\": \"joulestep-auto\", \"version\": 1, \"baseline_every\": K, "
	"\"default\": {KIND: R, ...}, \"apps\": {APP: {\"phases\": {KIND: {\"ratio\": R, "
	"\"state\": \"exploring|settled|guarded\"}}}}} with KIND [a-z0-9_-]{1,32}, R in (0, 1], "
	"K in [1, 1000000], at most 16 kinds per app with the default's";

static int fail(int rc, char *err, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int fail(int rc, char *err, size_t len, const char *fmt, ...)
{
	if (err && len) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, len, fmt, ap);
		va_end(ap);
	}
	return rc;
}

static bool ratio_ok(json_t *r, double *out)
{
	double v = json_number_value(r);
	if (!json_is_number(r) || !isfinite(v) || v <= 0.0 || v > 1.0)
		return false;
	*out = v;
	return true;
}

/* kind's slot in the map, added when new; -1 when the map is full */
static int slot(struct js_policy *p, struct js_auto *a, const char *kind)
{
	for (size_t i = 0; i < p->nmap; i++)
		if (!strcmp(p->map[i].kind, kind))
			return (int)i;
	if (p->nmap == JS_MAX_MAP)
		return -1;
	snprintf(p->map[p->nmap].kind, sizeof(p->map[p->nmap].kind), "%s", kind);
	a->nstate = p->nmap + 1;
	return (int)p->nmap++;
}

static int parse_default(json_t *def, struct js_policy *p, struct js_auto *a, char *err,
			 size_t errlen)
{
	if (!def || json_is_null(def))
		return 0;
	if (!json_is_object(def))
		return fail(-EINVAL, err, errlen, "\"default\" must be an object of KIND: R (%s)", allowed);
	const char *kind;
	json_t *v;
	json_object_foreach(def, kind, v) {
		double r;
		if (!js_kind_valid(kind))
			return fail(-EINVAL, err, errlen, "default: kind '%.40s' invalid (allowed [a-z0-9_-]{1,32})", kind);
		if (!ratio_ok(v, &r))
			return fail(-EINVAL, err, errlen, "default.%s must be a number in (0, 1]", kind);
		int i = slot(p, a, kind);
		if (i < 0)
			return fail(-EINVAL, err, errlen, "default: at most %d kinds", JS_MAX_MAP);
		p->map[i].ratio = r;
		snprintf(a->state[i], sizeof(a->state[i]), "default");
	}
	return 0;
}

static int parse_app(json_t *app, const char *name, struct js_policy *p, struct js_auto *a,
		     char *err, size_t errlen)
{
	json_t *phases = json_object_get(app, "phases");
	if (!json_is_object(app) || !json_is_object(phases))
		return fail(-EINVAL, err, errlen, "apps.%.64s must be {\"phases\": {...}} (%s)", name, allowed);
	const char *kind;
	json_t *v;
	json_object_foreach(phases, kind, v) {
		double r;
		const char *st = json_string_value(json_object_get(v, "state"));
		if (!js_kind_valid(kind))
			return fail(-EINVAL, err, errlen, "apps.%.64s: kind '%.40s' invalid (allowed [a-z0-9_-]{1,32})",
				    name, kind);
		if (!json_is_object(v) || !ratio_ok(json_object_get(v, "ratio"), &r))
			return fail(-EINVAL, err, errlen, "apps.%.64s.phases.%s.ratio must be a number in (0, 1]",
				    name, kind);
		if (!st || (strcmp(st, "exploring") && strcmp(st, "settled") && strcmp(st, "guarded")))
			return fail(-EINVAL, err, errlen,
				    "apps.%.64s.phases.%s.state must be \"exploring\", \"settled\" or \"guarded\"",
				    name, kind);
		int i = slot(p, a, kind);
		if (i < 0)
			return fail(-EINVAL, err, errlen, "apps.%.64s: at most %d kinds with the default's",
				    name, JS_MAX_MAP);
		/* a baseline job runs settled kinds at fmax: the learner's
		 * reference stays current (the file's ratio stays the settled one) */
		p->map[i].ratio = (a->baseline && !strcmp(st, "settled")) ? 1.0 : r;
		snprintf(a->state[i], sizeof(a->state[i]), "%s", st);
	}
	return 0;
}

static int parse_root(json_t *root, const char *app, uint32_t job_id, struct js_policy *p,
		      struct js_auto *a, char *err, size_t errlen)
{
	if (!json_is_object(root))
		return fail(-EINVAL, err, errlen, "not a JSON object (%s)", allowed);
	const char *fmt = json_string_value(json_object_get(root, "format"));
	if (!fmt || strcmp(fmt, "joulestep-auto"))
		return fail(-EINVAL, err, errlen, "\"format\" must be \"joulestep-auto\" (%s)", allowed);
	json_t *ver = json_object_get(root, "version");
	if (!json_is_integer(ver) || json_integer_value(ver) != 1)
		return fail(-EINVAL, err, errlen, "\"version\" must be 1 (the version this plugin reads)");
	json_t *k = json_object_get(root, "baseline_every");
	json_int_t every = 10;
	if (k && !json_is_null(k)) {
		every = json_is_integer(k) ? json_integer_value(k) : 0;
		if (every < 1 || every > 1000000)
			return fail(-EINVAL, err, errlen, "\"baseline_every\" must be an integer in [1, 1000000]");
	}
	json_t *apps = json_object_get(root, "apps");
	if (apps && !json_is_null(apps) && !json_is_object(apps))
		return fail(-EINVAL, err, errlen, "\"apps\" must be an object (%s)", allowed);
	struct js_policy out = *p;
	struct js_auto au;
	memset(&au, 0, sizeof(au));
	out.type = JS_POL_AUTO;
	out.nmap = 0;
	memset(out.map, 0, sizeof(out.map));
	snprintf(au.app, sizeof(au.app), "%s", app);
	au.baseline_every = (unsigned)every;
	au.baseline = job_id % (uint32_t)every == 0;
	int rc = parse_default(json_object_get(root, "default"), &out, &au, err, errlen);
	json_t *mine = apps ? json_object_get(apps, app) : NULL;
	if (!rc && mine) {
		au.app_listed = true;
		rc = parse_app(mine, app, &out, &au, err, errlen);
	}
	if (rc)
		return rc;
	*p = out;
	memcpy(a->state, au.state, sizeof(au.state));
	a->nstate = au.nstate;
	snprintf(a->app, sizeof(a->app), "%s", au.app);
	a->app_listed = au.app_listed;
	a->baseline_every = au.baseline_every;
	a->baseline = au.baseline;
	return 0;
}

int js_auto_parse(const char *text, size_t len, const char *app, uint32_t job_id,
		  struct js_policy *p, struct js_auto *a, char *err, size_t errlen)
{
	json_error_t je;
	json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return fail(-EINVAL, err, errlen, "not valid JSON: line %d: %s", je.line, je.text);
	int rc = parse_root(root, app, job_id, p, a, err, errlen);
	json_decref(root);
	if (!rc) { /* FNV-1a, 64 bits: which version of the file the step read */
		uint64_t h = 1469598103934665603ULL;
		for (size_t i = 0; i < len; i++)
			h = (h ^ (unsigned char)text[i]) * 1099511628211ULL;
		snprintf(a->digest, sizeof(a->digest), "fnv1a64:%016" PRIx64, h);
	}
	return rc;
}

int js_auto_load(const char *path, const char *app, uint32_t job_id, struct js_policy *p,
		 struct js_auto *a, char *err, size_t errlen)
{
	char *buf;
	size_t n;
	int rc = js_rootfile_read(path, JS_AUTO_MAX_BYTES, &buf, &n, err, errlen);
	if (rc)
		return rc;
	rc = js_auto_parse(buf, n, app, job_id, p, a, err, errlen);
	free(buf);
	return rc;
}
