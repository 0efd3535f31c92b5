/* PAPI backend: the pure verdict (js_papi_decide) on every branch, whatever
 * this host's PAPI offers, the component list, and the backend on the real
 * PAPI of this host where the outcome does not depend on it. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "joulestep/energy.h"
#include "js_papi.h"

enum stage { NOT_SELECTED, NOT_COMPILED, DISABLED, NO_EVENTS, NONE_ADDED, SOME_ADDED,
	     NO_START, NO_READ, ALL_ZERO, SOME_ZERO, USABLE, NSTAGES };

/* A source that got as far as stage, with two packages. */
static void set_stage(struct js_papi_src_probe *sp, enum stage st, const char *disabled_reason)
{
	memset(sp, 0, sizeof(*sp));
	sp->selected = st > NOT_SELECTED;
	sp->compiled = st > NOT_COMPILED;
	sp->enabled = st > DISABLED;
	if (st == DISABLED && disabled_reason)
		snprintf(sp->disabled_reason, sizeof(sp->disabled_reason), "%s", disabled_reason);
	if (st <= DISABLED)
		return;
	sp->probed = true;
	sp->listed = st > NO_EVENTS ? 2 : 0;
	sp->added = st > SOME_ADDED ? 2 : st == SOME_ADDED ? 1 : 0;
	sp->started = st > NO_START;
	sp->read_ok = st > NO_READ;
	sp->nonzero = st > SOME_ZERO ? 2 : st == SOME_ZERO ? 1 : 0;
}

static struct js_papi_probe probe3(enum stage pc, enum stage rapl, enum stage unc)
{
	struct js_papi_probe pr;

	memset(&pr, 0, sizeof(pr));
	snprintf(pr.version, sizeof(pr.version), "7.0.0.0");
	set_stage(&pr.src[JS_PAPI_POWERCAP], pc, "reason A");
	set_stage(&pr.src[JS_PAPI_RAPL], rapl, "reason B");
	set_stage(&pr.src[JS_PAPI_UNCORE], unc, "No uncore PMUs or events found");
	return pr;
}

static void assert_one_short_line(const char *why)
{
	assert_true(strlen(why) <= JS_PAPI_WHY_MAX);
	assert_null(strchr(why, '\n'));
	assert_true(strncmp(why, "unavailable: ", 13) == 0);
}

static int count(const char *hay, const char *needle)
{
	int n = 0;

	for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

/* A sysfs root other than /sys is refused first: with nothing probed, and
 * even when PAPI has a usable source (its numbers would not be the tree's). */
static void test_fake_root_first(void **state)
{
	struct js_papi_probe pr = probe3(USABLE, USABLE, USABLE);
	char why[512], root[400];

	(void)state;
	assert_int_equal(js_papi_decide("/tmp/fake", NULL, why, sizeof(why)), JS_PAPI_UNAVAILABLE);
	assert_string_equal(why, "unavailable: PAPI reads only the real /sys, not /tmp/fake");
	assert_int_equal(js_papi_decide("/tmp/fake", &pr, why, sizeof(why)), JS_PAPI_UNAVAILABLE);
	assert_string_equal(why, "unavailable: PAPI reads only the real /sys, not /tmp/fake");
	pr.lib_error = "cannot load libpapi.so";
	assert_int_equal(js_papi_decide("/sysfs", &pr, why, sizeof(why)), JS_PAPI_UNAVAILABLE);
	assert_string_equal(why, "unavailable: PAPI reads only the real /sys, not /sysfs");
	/* the real root, however spelled, goes on to probing */
	assert_int_equal(js_papi_decide(NULL, NULL, why, sizeof(why)), JS_PAPI_PROBE);
	assert_string_equal(why, "");
	assert_int_equal(js_papi_decide("/sys", NULL, why, sizeof(why)), JS_PAPI_PROBE);
	assert_int_equal(js_papi_decide("/sys//", NULL, why, sizeof(why)), JS_PAPI_PROBE);
	/* a long root keeps its end, a control character cannot break the line */
	memset(root, 'a', sizeof(root));
	memcpy(root, "/x/", 3);
	strcpy(root + 300, "/tail\nend");
	assert_int_equal(js_papi_decide(root, NULL, why, sizeof(why)), JS_PAPI_UNAVAILABLE);
	assert_one_short_line(why);
	assert_int_equal(strlen(why), JS_PAPI_WHY_MAX);
	assert_non_null(strstr(why, "reads only the real /sys, not ..."));
	assert_non_null(strstr(why, "/tail?end"));
	/* a small buffer truncates, never overflows */
	assert_int_equal(js_papi_decide("/tmp/fake", NULL, why, 10), JS_PAPI_UNAVAILABLE);
	assert_string_equal(why, "unavailab");
}

static void test_lib_error(void **state)
{
	struct js_papi_probe pr = probe3(USABLE, NOT_COMPILED, NOT_COMPILED);
	char why[512], long_err[300];

	(void)state;
	pr.lib_error = "cannot load libpapi.so.7.0 (libpapi.so.7.0: cannot open shared object file)";
	assert_int_equal(js_papi_decide("/sys", &pr, why, sizeof(why)), JS_PAPI_UNAVAILABLE);
	assert_string_equal(why, "unavailable: cannot load libpapi.so.7.0 (libpapi.so.7.0: cannot "
				 "open shared object file)");
	memset(long_err, 'x', sizeof(long_err) - 1);
	long_err[sizeof(long_err) - 1] = '\0';
	pr.lib_error = long_err;
	assert_int_equal(js_papi_decide("/sys", &pr, why, sizeof(why)), JS_PAPI_UNAVAILABLE);
	assert_one_short_line(why);
	assert_int_equal(strlen(why), JS_PAPI_WHY_MAX);
	assert_string_equal(why + JS_PAPI_WHY_MAX - 3, "...");
}

/* No energy component at all: each source says why, in one line. */
static void test_no_energy_component(void **state)
{
	struct js_papi_probe pr;
	char why[512];

	(void)state;
	/* Debian 12's PAPI 7.0 in a VM without an uncore PMU */
	pr = probe3(NOT_COMPILED, NOT_COMPILED, DISABLED);
	assert_int_equal(js_papi_decide(NULL, &pr, why, sizeof(why)), JS_PAPI_UNAVAILABLE);
	assert_string_equal(why, "unavailable: PAPI 7.0.0.0 has no energy component "
				 "(perf_event_uncore: disabled; powercap, rapl: not compiled in)");
	/* PAPI's reason where it fits */
	pr = probe3(NOT_SELECTED, NOT_SELECTED, DISABLED);
	pr.version[0] = '\0';
	strcpy(pr.src[JS_PAPI_UNCORE].disabled_reason, "no PMU\n");
	assert_int_equal(js_papi_decide(NULL, &pr, why, sizeof(why)), JS_PAPI_UNAVAILABLE);
	assert_string_equal(why, "unavailable: PAPI has no energy component (perf_event_uncore: "
				 "disabled (no PMU?); powercap, rapl: not selected)");
	/* an empty component list */
	pr = probe3(NOT_SELECTED, NOT_SELECTED, NOT_SELECTED);
	assert_int_equal(js_papi_decide(NULL, &pr, why, sizeof(why)), JS_PAPI_UNAVAILABLE);
	assert_string_equal(why, "unavailable: PAPI 7.0.0.0 has no energy component "
				 "(powercap, rapl, perf_event_uncore: not selected)");
	/* three disabled components with different reasons share one brief part */
	pr = probe3(DISABLED, DISABLED, DISABLED);
	assert_int_equal(js_papi_decide(NULL, &pr, why, sizeof(why)), JS_PAPI_UNAVAILABLE);
	assert_string_equal(why, "unavailable: PAPI 7.0.0.0 has no energy component "
				 "(powercap, rapl, perf_event_uncore: disabled)");
}

/* A component whose energy events are listed but cannot be added, started
 * or read: the issue-7 host (perf_event_uncore active, a `power` PMU without
 * package energy) and its neighbours. */
static void test_listed_but_unusable(void **state)
{
	struct js_papi_probe pr;
	char why[512];

	(void)state;
	pr = probe3(NOT_COMPILED, NOT_COMPILED, NONE_ADDED);
	assert_int_equal(js_papi_decide(NULL, &pr, why, sizeof(why)), JS_PAPI_UNAVAILABLE);
	/* what was found comes first; what was not found is left out when the
	 * line would grow beyond JS_PAPI_WHY_MAX */
	assert_string_equal(why, "unavailable: PAPI 7.0.0.0 has no usable energy events "
				 "(perf_event_uncore: 2 listed, none can be added)");
	pr = probe3(NOT_COMPILED, NOT_COMPILED, SOME_ADDED);
	js_papi_decide(NULL, &pr, why, sizeof(why));
	assert_string_equal(why, "unavailable: PAPI 7.0.0.0 has no usable energy events "
				 "(perf_event_uncore: 2 listed, only 1 can be added)");
	pr = probe3(NOT_COMPILED, NOT_COMPILED, NO_EVENTS);
	js_papi_decide(NULL, &pr, why, sizeof(why));
	assert_string_equal(why, "unavailable: PAPI 7.0.0.0 has no usable energy events "
				 "(perf_event_uncore: no energy events)");
	pr = probe3(NOT_COMPILED, NO_START, NOT_SELECTED);
	js_papi_decide(NULL, &pr, why, sizeof(why));
	assert_string_equal(why, "unavailable: PAPI 7.0.0.0 has no usable energy events "
				 "(rapl: 2 added, PAPI_start fails; powercap: not compiled in)");
	pr = probe3(NO_READ, DISABLED, NOT_COMPILED);
	js_papi_decide(NULL, &pr, why, sizeof(why));
	assert_non_null(strstr(why, "has no usable energy events (powercap: 2 started, PAPI_read fails; "));
	assert_one_short_line(why);
}

/* Events that are added, started and read but never advance. */
static void test_reads_zero(void **state)
{
	struct js_papi_probe pr;
	char why[512], want[256];

	(void)state;
	pr = probe3(NOT_COMPILED, NOT_COMPILED, ALL_ZERO);
	assert_int_equal(js_papi_decide(NULL, &pr, why, sizeof(why)), JS_PAPI_UNAVAILABLE);
	snprintf(want, sizeof(want), "unavailable: PAPI 7.0.0.0 has no usable energy events "
		 "(perf_event_uncore: 2 read 0 for %d ms; powercap, rapl: not compiled in)",
		 JS_PAPI_WAIT_US / 1000);
	if (strlen(want) > JS_PAPI_WHY_MAX)
		snprintf(want, sizeof(want), "unavailable: PAPI 7.0.0.0 has no usable energy "
			 "events (perf_event_uncore: 2 read 0 for %d ms)", JS_PAPI_WAIT_US / 1000);
	assert_string_equal(why, want);
	pr = probe3(SOME_ZERO, NOT_COMPILED, ALL_ZERO);
	js_papi_decide(NULL, &pr, why, sizeof(why));
	snprintf(want, sizeof(want), "unavailable: PAPI 7.0.0.0 has no usable energy events "
		 "(powercap: 1 of 2 read 0 for %d ms)", JS_PAPI_WAIT_US / 1000);
	assert_string_equal(why, want);
}

/* The first usable source in preference order wins, whatever the others say. */
static void test_choice(void **state)
{
	struct js_papi_probe pr;
	char why[512];

	(void)state;
	pr = probe3(USABLE, USABLE, USABLE);
	assert_int_equal(js_papi_decide("/sys", &pr, why, sizeof(why)), JS_PAPI_USE_POWERCAP);
	assert_string_equal(why, "");
	pr = probe3(ALL_ZERO, USABLE, USABLE);
	assert_int_equal(js_papi_decide("/sys", &pr, why, sizeof(why)), JS_PAPI_USE_RAPL);
	pr = probe3(NOT_COMPILED, NOT_COMPILED, USABLE);
	assert_int_equal(js_papi_decide("/sys", &pr, why, sizeof(why)), JS_PAPI_USE_UNCORE);
	/* usable but not selected cannot happen (unselected sources are not
	 * probed); the verdict still only uses what the probe says */
	assert_true(js_papi_src_usable(&pr.src[JS_PAPI_UNCORE]));
	assert_false(js_papi_src_usable(&pr.src[JS_PAPI_RAPL]));
}

/* Every combination of stages: one line of at most JS_PAPI_WHY_MAX
 * characters that names each source at most once, never says "no energy
 * component" when a component was probed, and says each named source's own
 * state. */
static void test_every_combination_is_short_and_consistent(void **state)
{
	static const char *const word[NSTAGES] = {
		"not selected", "not compiled in", "disabled", "no energy events",
		"2 listed, none can be added", "2 listed, only 1 can be added",
		"2 added, PAPI_start fails", "2 started, PAPI_read fails", "2 read 0 for ",
		"1 of 2 read 0 for ", NULL};
	const char *names[JS_PAPI_NSRC] = {"powercap", "rapl", "perf_event_uncore"};
	int a, b, c, n = 0;

	(void)state;
	for (a = 0; a < NSTAGES; a++)
		for (b = 0; b < NSTAGES; b++)
			for (c = 0; c < NSTAGES; c++) {
				struct js_papi_probe pr = probe3(a, b, c);
				int st[3] = {a, b, c}, s, usable = -1, active = 0;
				enum js_papi_verdict v;
				char why[512];

				for (s = 2; s >= 0; s--)
					if (st[s] == USABLE)
						usable = s;
				for (s = 0; s < 3; s++)
					active |= st[s] >= NO_EVENTS;
				v = js_papi_decide(NULL, &pr, why, sizeof(why));
				if (usable >= 0) {
					assert_int_equal(v, usable);
					continue;
				}
				n++;
				assert_int_equal(v, JS_PAPI_UNAVAILABLE);
				assert_one_short_line(why);
				assert_non_null(strstr(why, active ? "has no usable energy events ("
								   : "has no energy component ("));
				/* "perf_event_uncore" holds no other name; "rapl" is a word */
				assert_true(count(why, "powercap") <= 1);
				assert_true(count(why, "perf_event_uncore") <= 1);
				assert_true(count(why, "rapl") <= 1);
				for (s = 0; s < 3; s++) {
					const char *at = strstr(why, names[s]), *end;

					if (!at) {
						/* left out only behind the sources named,
						 * which all got at least as far */
						int t;

						for (t = 0; t < 3; t++)
							if (strstr(why, names[t]))
								assert_true(st[t] >= st[s]);
						continue;
					}
					/* its state is the text after the next ": " */
					end = strstr(at, ": ");
					assert_non_null(end);
					assert_true(strncmp(end + 2, word[st[s]], strlen(word[st[s]])) == 0);
				}
			}
	assert_true(n > 900);
}

static void test_parse_components(void **state)
{
	unsigned m = 99;
	char why[256];

	(void)state;
	assert_int_equal(js_papi_parse_components(NULL, &m, why, sizeof(why)), 0);
	assert_int_equal(m, JS_PAPI_ALL_SRC);
	assert_int_equal(js_papi_parse_components(JS_PAPI_COMPONENTS_DEFAULT, &m, why, sizeof(why)), 0);
	assert_int_equal(m, JS_PAPI_ALL_SRC);
	assert_int_equal(js_papi_parse_components("none", &m, why, sizeof(why)), 0);
	assert_int_equal(m, 0);
	assert_int_equal(js_papi_parse_components("perf_event_uncore,rapl", &m, why, sizeof(why)), 0);
	assert_int_equal(m, (1u << JS_PAPI_UNCORE) | (1u << JS_PAPI_RAPL));
	assert_int_equal(js_papi_parse_components("rapl,bogus", &m, why, sizeof(why)), -EINVAL);
	assert_string_equal(why, "unknown PAPI component 'bogus' (allowed: powercap, rapl, "
				 "perf_event_uncore, or none)");
	assert_int_equal(js_papi_parse_components("", &m, why, sizeof(why)), -EINVAL);
	assert_int_equal(js_papi_parse_components("rapl,", &m, why, sizeof(why)), -EINVAL);
	assert_int_equal(js_papi_parse_components("perf_event", &m, why, sizeof(why)), -EINVAL);
	assert_int_equal(js_papi_parse_components("rapl,rapl", &m, why, sizeof(why)), -EINVAL);
	assert_string_equal(why, "PAPI component 'rapl' named twice");
	assert_int_equal(js_papi_parse_components("none,rapl", &m, why, sizeof(why)), -EINVAL);
}

/* The backend itself, where its outcome is the same on every host. */
static void test_backend_any_host(void **state)
{
	struct js_energy_opts o = {.sysfs_root = "/tmp/not-sys", .order = "papi"};
	struct js_energy *e = NULL;
	char why[1024];

	(void)state;
	assert_int_equal(js_energy_open(&o, &e, why, sizeof(why)), -ENOTSUP);
	assert_string_equal(why, "papi: unavailable: PAPI reads only the real /sys, not /tmp/not-sys");
	/* nothing selected: no energy component, on the real /sys */
	o.sysfs_root = NULL;
	o.papi_components = "none";
	assert_int_equal(js_energy_open(&o, &e, why, sizeof(why)), -ENOTSUP);
	assert_null(e);
	assert_true(strncmp(why, "papi: unavailable: PAPI ", 24) == 0);
	assert_non_null(strstr(why, " has no energy component (powercap, rapl, perf_event_uncore: "
				    "not selected)"));
	/* a bad list is refused before any backend is tried */
	o.order = "sysfs,papi";
	o.sysfs_root = "/tmp/not-sys";
	o.papi_components = "rapl,nope";
	assert_int_equal(js_energy_open(&o, &e, why, sizeof(why)), -EINVAL);
	assert_string_equal(why, "papi: unknown PAPI component 'nope' (allowed: powercap, rapl, "
				 "perf_event_uncore, or none)");
	/* a valid list and nothing to try is still a failure */
	o.order = "";
	o.papi_components = "rapl";
	assert_true(js_energy_open(&o, &e, why, sizeof(why)) < 0);
	assert_null(e);
}

/* This host's PAPI on the real /sys, explicitly either case: zones when it
 * offers a working source, else -ENOTSUP and one known form of reason. */
static void test_backend_this_host(void **state)
{
	struct js_energy_opts o = {.order = "papi"};
	struct js_energy *e = NULL;
	char why[1024];
	int rc;

	(void)state;
	rc = js_energy_open(&o, &e, why, sizeof(why));
	if (rc == 0) {
		const struct js_zone_set *zs = js_energy_zones(e);
		uint64_t raw[JS_MAX_ZONES];
		int err[JS_MAX_ZONES];

		assert_true(zs->nzones > 0);
		assert_int_equal(zs->zones[0].kind, JS_ZONE_PACKAGE);
		assert_int_equal(js_energy_read_uj(e, raw, err), 0);
		js_energy_close(e);
		return;
	}
	assert_int_equal(rc, -ENOTSUP);
	assert_true(strncmp(why, "papi: ", 6) == 0);
	assert_one_short_line(why + 6);
	assert_true(strstr(why, " has no energy component (") || strstr(why, " has no usable energy events (") ||
		    strstr(why, "unavailable: cannot load "));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fake_root_first),
		cmocka_unit_test(test_lib_error),
		cmocka_unit_test(test_no_energy_component),
		cmocka_unit_test(test_listed_but_unusable),
		cmocka_unit_test(test_reads_zero),
		cmocka_unit_test(test_choice),
		cmocka_unit_test(test_every_combination_is_short_and_consistent),
		cmocka_unit_test(test_parse_components),
		cmocka_unit_test(test_backend_any_host),
		cmocka_unit_test(test_backend_this_host),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
