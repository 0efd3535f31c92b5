/* Fuzz the plugstack argument parser js_conf_parse and the %n expansion
 * js_conf_expand_node (docs/admin-guide.md, "plugstack.conf"). Input: lines;
 * the first is the node name, each further line one argument (as slurmd
 * splits plugstack.conf), at most 64. */
#include <errno.h>

#include "fuzz.h"
#include "js_parse.h"

#define MAX_ARGS 64

/* No "." or ".." component, absolute, NUL-terminated within bounds. */
static void check_path(const char *p, size_t max)
{
	FUZZ_CHECK(memchr(p, 0, JS_PATH_MAX));
	FUZZ_CHECK(strlen(p) < max);
	FUZZ_CHECK(p[0] == '/');
	for (const char *c = p; (c = strchr(c, '/')); c++) {
		size_t len = strcspn(c + 1, "/");
		FUZZ_CHECK(!((len == 1 && c[1] == '.') || (len == 2 && c[1] == '.' && c[2] == '.')));
	}
}

static void check_conf(const struct js_conf *c, bool expanded)
{
	const char *paths[] = {c->spool, c->state, c->sysfs, c->socket_dir};
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		check_path(paths[i], JS_PATH_MAX - 64);
		if (expanded && i)
			FUZZ_CHECK(!strstr(paths[i], "%n"));
	}
	if (c->tuned[0])
		check_path(c->tuned, JS_PATH_MAX - 64);
	FUZZ_CHECK(strncmp(c->socket_dir, "/tmp/", 5) && strcmp(c->socket_dir, "/tmp"));
	FUZZ_CHECK(c->policies_mask & (1u << JS_POL_MONITOR));
	FUZZ_CHECK(c->policies_mask & (1u << c->default_policy));
	FUZZ_CHECK(!(c->policies_mask & ~((1u << JS_POL_COUNT) - 1)));
	FUZZ_CHECK(c->tuned[0] || !(c->policies_mask & (1u << JS_POL_TUNED)));
	FUZZ_CHECK(c->min_ratio > 0.0 && c->min_ratio <= 1.0);
	FUZZ_CHECK(c->sample_ms >= 1 && c->sample_ms <= 3600000);
	FUZZ_CHECK(c->max_phases >= 1 && c->max_phases <= JS_MAX_PHASES_LIMIT);
	FUZZ_CHECK(c->max_depth >= 1 && c->max_depth <= JS_DEPTH_LIMIT);
	FUZZ_CHECK(c->rate >= 1 && c->rate <= 1000000);
	FUZZ_CHECK(c->max_markers_per_step >= 1 && c->max_markers_per_step <= 1000000000ULL);
	FUZZ_CHECK(c->min_phase_ms <= 3600000);
	FUZZ_CHECK(c->job_cache_hours <= 8760);
	FUZZ_CHECK(!c->cluster[0] || js_name_safe(c->cluster));
	FUZZ_CHECK(memchr(c->backend, 0, sizeof(c->backend)) && c->backend[0]);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	char *node = fuzz_split(&d, &n, '\n');
	char *av[MAX_ARGS];
	int ac = 0;
	while (ac < MAX_ARGS && (av[ac] = fuzz_split(&d, &n, '\n')))
		ac++;
	struct js_conf c;
	char err[400] = "";
	if (js_conf_parse(ac, av, &c, err, sizeof(err)) == 0) {
		check_conf(&c, false);
		char allowed[160]; /* the size js_policy_check uses */
		js_policy_allowed(&c, allowed, sizeof(allowed));
		FUZZ_CHECK(memchr(allowed, 0, sizeof(allowed)));
		if (js_conf_expand_node(&c, node ? node : "", err, sizeof(err)) == 0)
			check_conf(&c, true);
		else
			FUZZ_CHECK(err[0]);
	} else {
		FUZZ_CHECK(err[0] && memchr(err, 0, sizeof(err)));
	}
	for (int i = 0; i < ac; i++)
		free(av[i]);
	free(node);
	return 0;
}
