/* Backend selection: try each backend named in opts->order, in order. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "js_internal.h"
#include "js_papi.h"

static const struct js_backend_ops *const backends[] = {
	&js_backend_powercap,
	&js_backend_papi,
	&js_backend_sysfs,
	&js_backend_amd_energy,
};

static const struct js_backend_ops *find_backend(const char *name, size_t len)
{
	size_t i;

	for (i = 0; i < sizeof(backends) / sizeof(backends[0]); i++)
		if (strlen(backends[i]->name) == len && !strncmp(backends[i]->name, name, len))
			return backends[i];
	return NULL;
}

static void append(char *why, size_t whylen, const char *name, const char *reason)
{
	size_t used;

	if (!why || !whylen)
		return;
	used = strlen(why);
	if (used + 1 >= whylen)
		return;
	js_fmt(why + used, whylen - used, "%s%s: %s", used ? "\n" : "", name, reason);
}

/* Open one backend; on failure *e is freed and reason holds why. */
static int open_one(const struct js_backend_ops *ops, const char *sysfs_root,
		    const char *papi_components, struct js_energy **out, char *reason, size_t rlen)
{
	struct js_energy *e = calloc(1, sizeof(*e));
	int rc;

	if (!e)
		return -ENOMEM;
	e->ops = ops;
	e->papi_components = papi_components;
	reason[0] = '\0';
	rc = ops->open(e, sysfs_root, reason, rlen);
	e->papi_components = NULL;
	if (rc < 0) {
		if (!reason[0])
			js_fmt(reason, rlen, "unavailable: %s", strerror(-rc));
		free(e);
		return rc;
	}
	*out = e;
	return 0;
}

int js_energy_open(const struct js_energy_opts *opts, struct js_energy **out,
		   char *why, size_t whylen)
{
	const char *order = (opts && opts->order) ? opts->order : JS_ORDER_DEFAULT;
	const char *sysfs_root = opts ? opts->sysfs_root : NULL;
	const char *papi_components = opts ? opts->papi_components : NULL;
	const char *p;
	char reason[JS_WHY_LEN * 2];
	unsigned papi_mask;
	int rc = -ENODEV;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (why && whylen)
		why[0] = '\0';
	/* validate the whole list first: bad input is an error, not a skip */
	for (p = order; *p;) {
		size_t len = strcspn(p, ",");

		if (!find_backend(p, len)) {
			char bad[JS_NAME_LEN];

			js_fmt(bad, sizeof(bad), "%.*s", (int)(len < 40 ? len : 40), p);
			append(why, whylen, bad[0] ? bad : "(empty)",
			       "unknown backend (allowed: powercap, papi, sysfs, amd_energy)");
			return -EINVAL;
		}
		p += len;
		if (*p == ',')
			p++;
	}
	if (papi_components &&
	    js_papi_parse_components(papi_components, &papi_mask, reason, sizeof(reason)) < 0) {
		append(why, whylen, "papi", reason);
		return -EINVAL;
	}
	for (p = order; *p;) {
		size_t len = strcspn(p, ",");
		const struct js_backend_ops *ops = find_backend(p, len);

		rc = open_one(ops, sysfs_root, papi_components, out, reason, sizeof(reason));
		if (rc == 0)
			return 0;
		append(why, whylen, ops->name, reason);
		p += len;
		if (*p == ',')
			p++;
	}
	return rc;
}

int js_energy_probe(const char *backend, const char *sysfs_root, char *why, size_t whylen)
{
	const struct js_backend_ops *ops;
	struct js_energy *e = NULL;
	char reason[JS_WHY_LEN * 2];
	int rc;

	if (why && whylen)
		why[0] = '\0';
	if (!backend || !(ops = find_backend(backend, strlen(backend)))) {
		append(why, whylen, backend ? backend : "(null)",
		       "unknown backend (allowed: powercap, papi, sysfs, amd_energy)");
		return -EINVAL;
	}
	rc = open_one(ops, sysfs_root, NULL, &e, reason, sizeof(reason));
	if (rc < 0) {
		append(why, whylen, ops->name, reason);
		return rc;
	}
	js_energy_close(e);
	return 0;
}

void js_energy_close(struct js_energy *e)
{
	if (!e)
		return;
	e->ops->close(e);
	free(e);
}

const char *js_energy_backend_name(const struct js_energy *e)
{
	return e ? e->ops->name : NULL;
}

const struct js_zone_set *js_energy_zones(const struct js_energy *e)
{
	return e ? &e->zones : NULL;
}

int js_energy_read_uj(struct js_energy *e, uint64_t *raw_uj, int *err)
{
	if (!e || !raw_uj || !err)
		return -EINVAL;
	return e->ops->read(e, raw_uj, err);
}
