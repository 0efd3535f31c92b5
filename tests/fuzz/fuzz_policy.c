/* Fuzz the option parser of --energy-policy, js_policy_parse, and what the
 * plugin does with its result: check/enforce against the cluster's bounds,
 * the canonical text form written to records (js_policy_format), and the
 * per-kind lookup. Input: the option's value. */
#include <errno.h>
#include <math.h>

#include "fuzz.h"
#include "js_parse.h"

static void check_policy(const struct js_policy *p)
{
	FUZZ_CHECK(p->type >= 0 && p->type < JS_POL_COUNT);
	FUZZ_CHECK(p->nmap <= JS_MAX_MAP);
	if (p->type == JS_POL_FIXED)
		FUZZ_CHECK(p->fixed_ratio > 0.0 && p->fixed_ratio <= 1.0);
	if (p->type == JS_POL_PHASE)
		FUZZ_CHECK(p->nmap >= 1);
	else
		FUZZ_CHECK(p->nmap == 0);
	for (size_t i = 0; i < p->nmap; i++) {
		FUZZ_CHECK(js_kind_valid(p->map[i].kind));
		FUZZ_CHECK(p->map[i].ratio > 0.0 && p->map[i].ratio <= 1.0);
		for (size_t j = 0; j < i; j++)
			FUZZ_CHECK(strcmp(p->map[i].kind, p->map[j].kind));
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	char *s = fuzz_cstr(d, n);
	struct js_policy p;
	char err[400] = "";
	if (js_policy_parse(s, &p, err, sizeof(err))) {
		FUZZ_CHECK(err[0]);
		free(s);
		return 0;
	}
	check_policy(&p);

	/* the record's text form parses back to the same policy */
	char text[1024], small[24];
	FUZZ_CHECK(js_policy_format(&p, text, sizeof(text)) == 0);
	int rc = js_policy_format(&p, small, sizeof(small));
	FUZZ_CHECK(rc == 0 || rc == -ENOSPC);
	FUZZ_CHECK(memchr(small, 0, sizeof(small)));
	struct js_policy q;
	FUZZ_CHECK(js_policy_parse(text, &q, err, sizeof(err)) == 0);
	FUZZ_CHECK(q.type == p.type && q.nmap == p.nmap);
	for (size_t i = 0; i < p.nmap; i++) {
		FUZZ_CHECK(!strcmp(q.map[i].kind, p.map[i].kind));
		FUZZ_CHECK(fabs(q.map[i].ratio - p.map[i].ratio) <= 1e-5 * p.map[i].ratio);
	}

	/* the cluster's bounds (defaults, and the strictest min_ratio) */
	struct js_conf c;
	js_conf_defaults(&c);
	for (int k = 0; k < 2; k++) {
		if (k)
			c.min_ratio = 1.0;
		(void)js_policy_check(&p, &c, err, sizeof(err));
		struct js_policy e = p;
		FUZZ_CHECK(js_policy_enforce(&e, &c, err, sizeof(err)) >= 0);
		FUZZ_CHECK(c.policies_mask & (1u << e.type));
		FUZZ_CHECK(js_policy_check(&e, &c, err, sizeof(err)) == 0);
		const char *kinds[] = {"compute", "compress", "write", "checkpoint", "flush",
				       "restart", p.nmap ? p.map[0].kind : "x"};
		for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
			double r = js_policy_kind_ratio(&e, &c, kinds[i]);
			FUZZ_CHECK(r == JS_RATIO_INHERIT || r == JS_RATIO_BASE ||
				   (r >= c.min_ratio && r <= 1.0));
		}
		double b = js_policy_base_ratio(&e);
		FUZZ_CHECK(b >= c.min_ratio && b <= 1.0);
	}
	free(s);
	return 0;
}
