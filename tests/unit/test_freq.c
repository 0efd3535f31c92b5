/* CPU sets, kHz lists, clamp/round, discovery and the one-shot apply for
 * both driver styles (acpi-cpufreq setspeed, intel_pstate max cap). The
 * step path's clock control handle is tested in test_freq_ctl.c. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "joulestep/freq.h"
#include "test_tree.h"

static void test_cpuset(void **state)
{
	struct js_cpuset s;
	char buf[64];

	(void)state;
	assert_int_equal(js_cpuset_parse("0-3,8,10-11", &s), 0);
	assert_int_equal(js_cpuset_count(&s), 7);
	assert_true(js_cpuset_isset(&s, 3));
	assert_false(js_cpuset_isset(&s, 4));
	assert_true(js_cpuset_isset(&s, 11));
	assert_int_equal(js_cpuset_format(&s, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "0-3,8,10-11");
	/* related_cpus style */
	assert_int_equal(js_cpuset_parse("0 1 2 5\n", &s), 0);
	assert_int_equal(js_cpuset_format(&s, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "0-2,5");
	assert_int_equal(js_cpuset_parse("", &s), 0);
	assert_int_equal(js_cpuset_count(&s), 0);
	assert_int_equal(js_cpuset_parse("1023", &s), 0);
	assert_true(js_cpuset_isset(&s, 1023));
	static const char *const bad[] = {"1-", "a", "3-1", "1,,2", "1024", "-1", "1,", "0-2x"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(js_cpuset_parse(bad[i], &s), -EINVAL);
	js_cpuset_parse("0-3,8,10-11", &s);
	assert_int_equal(js_cpuset_format(&s, buf, 5), -ENOSPC);
}

static void test_khz_list(void **state)
{
	uint32_t v[8];
	size_t n;

	(void)state;
	assert_int_equal(js_parse_khz_list("2400000 1200000 800000 \n", v, 8, &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(v[0], 800000);
	assert_int_equal(v[2], 2400000);
	assert_int_equal(js_parse_khz_list("", v, 8, &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(js_parse_khz_list("800000 abc", v, 8, &n), -EINVAL);
	assert_int_equal(js_parse_khz_list("800000x", v, 8, &n), -EINVAL);
	assert_int_equal(js_parse_khz_list("0", v, 8, &n), -EINVAL);
	assert_int_equal(js_parse_khz_list("1 2 3", v, 2, &n), -E2BIG);
}

static void fill_acpi(struct js_cpufreq *f)
{
	memset(f, 0, sizeof(*f));
	f->cpuinfo_min_khz = 800000;
	f->cpuinfo_max_khz = 2400000;
	for (uint32_t k = 800000; k <= 2400000; k += 100000)
		f->avail_khz[f->navail++] = k;
	f->method = JS_FREQ_SETSPEED;
}

static void test_clamp_round(void **state)
{
	struct js_cpufreq f;
	uint32_t k;

	(void)state;
	fill_acpi(&f);
	assert_int_equal(js_freq_clamp_round_khz(&f, 1234567), 1200000);
	assert_int_equal(js_freq_clamp_round_khz(&f, 1250000), 1200000); /* tie goes down */
	assert_int_equal(js_freq_clamp_round_khz(&f, 1250001), 1300000);
	assert_int_equal(js_freq_clamp_round_khz(&f, 100), 800000);
	assert_int_equal(js_freq_clamp_round_khz(&f, 9000000), 2400000);
	/* 0.875 and 0.85 of f_max (reference eq. 2.3) */
	assert_int_equal(js_freq_ratio_to_khz(&f, 0.875, &k), 0);
	assert_int_equal(k, 2100000);
	assert_int_equal(js_freq_ratio_to_khz(&f, 0.85, &k), 0);
	assert_int_equal(k, 2000000); /* 2040000 -> nearest step */
	assert_int_equal(js_freq_ratio_to_khz(&f, 1.0, &k), 0);
	assert_int_equal(k, 2400000);
	assert_int_equal(js_freq_ratio_to_khz(&f, 0.1, &k), 0);
	assert_int_equal(k, 800000);

	/* continuous driver: nearest MHz, ties down */
	f.navail = 0;
	assert_int_equal(js_freq_clamp_round_khz(&f, 1234567), 1235000);
	assert_int_equal(js_freq_clamp_round_khz(&f, 1234500), 1234000);
	assert_int_equal(js_freq_clamp_round_khz(&f, 1234501), 1235000);
	assert_int_equal(js_freq_clamp_round_khz(&f, 799999), 800000);
	assert_int_equal(js_freq_ratio_to_khz(&f, 0.85, &k), 0);
	assert_int_equal(k, 2040000);
	/* odd limits: rounding stays inside */
	f.cpuinfo_max_khz = 2399600;
	assert_int_equal(js_freq_clamp_round_khz(&f, 2399600), 2399000);

	assert_int_equal(js_freq_ratio_to_khz(&f, 0.0, &k), -EINVAL);
	assert_int_equal(js_freq_ratio_to_khz(&f, 1.01, &k), -EINVAL);
	assert_int_equal(js_freq_ratio_to_khz(&f, -0.5, &k), -EINVAL);
	assert_int_equal(js_freq_ratio_to_khz(&f, NAN, &k), -EINVAL);
}

static void test_discover_acpi(void **state)
{
	char *root = tt_mkdtemp();
	struct js_cpufreq f;
	struct js_cpuset on;

	(void)state;
	tt_cpufreq(root, 0, 1);
	tt_cpufreq(root, 1, 1);
	assert_int_equal(js_cpufreq_online(root, &on), 0);
	assert_int_equal(js_cpuset_count(&on), 2);
	assert_int_equal(js_cpufreq_read(root, 1, &f), 0);
	assert_int_equal(f.cpu, 1);
	assert_string_equal(f.driver, "acpi-cpufreq");
	assert_string_equal(f.governor, "schedutil");
	assert_non_null(strstr(f.governors, "userspace"));
	assert_int_equal(f.method, JS_FREQ_SETSPEED);
	assert_int_equal(f.cpuinfo_min_khz, 800000);
	assert_int_equal(f.cpuinfo_max_khz, 2400000);
	assert_int_equal(f.scaling_max_khz, 2400000);
	assert_int_equal(f.setspeed_khz, 0); /* "<unsupported>" */
	assert_int_equal(f.navail, 17);
	assert_int_equal(f.avail_khz[0], 800000);
	assert_int_equal(f.avail_khz[16], 2400000);
	assert_int_equal(js_cpuset_count(&f.related), 2);
	assert_int_equal(f.policy, 0); /* a directory, not a link: the first related CPU */
	assert_int_equal(f.base_frequency_khz, 0);
	assert_int_equal(js_freq_nominal_khz(&f), 2400000); /* no turbo entry: the top step */
	assert_int_equal(js_cpufreq_read(root, 2, &f), -ENOENT);
	tt_rmrf(root);
}

static void test_discover_pstate(void **state)
{
	char *root = tt_mkdtemp();
	struct js_cpufreq f;

	(void)state;
	tt_cpufreq(root, 0, 0);
	assert_int_equal(js_cpufreq_read(root, 0, &f), 0);
	assert_string_equal(f.driver, "intel_pstate");
	assert_int_equal(f.method, JS_FREQ_MAXCAP);
	assert_int_equal(f.navail, 0);
	assert_int_equal(js_freq_nominal_khz(&f), 0); /* continuous, no base_frequency */
	tt_cpufile(root, 0, "base_frequency", "2100000\n");
	assert_int_equal(js_cpufreq_read(root, 0, &f), 0);
	assert_int_equal(f.base_frequency_khz, 2100000);
	assert_int_equal(js_freq_nominal_khz(&f), 2100000);
	tt_rmrf(root);
}

static void test_apply_setspeed(void **state)
{
	char *root = tt_mkdtemp();
	struct js_cpufreq f;
	uint32_t rb = 0;
	bool ignored = true;
	char buf[64];

	(void)state;
	tt_cpufreq(root, 0, 1);
	assert_int_equal(js_cpufreq_read(root, 0, &f), 0);
	assert_int_equal(js_freq_apply(root, &f, js_freq_clamp_round_khz(&f, 2040000), &rb, &ignored), 0);
	assert_int_equal(rb, 2000000);
	assert_false(ignored);
	assert_string_equal(tt_cpuread(root, 0, "scaling_governor", buf, sizeof(buf)), "userspace");
	assert_string_equal(tt_cpuread(root, 0, "scaling_setspeed", buf, sizeof(buf)), "2000000");
	/* scaling_max untouched with setspeed */
	assert_string_equal(tt_cpuread(root, 0, "scaling_max_freq", buf, sizeof(buf)), "2400000");
	tt_rmrf(root);
}

static void test_apply_maxcap(void **state)
{
	char *root = tt_mkdtemp();
	struct js_cpufreq f;
	uint32_t rb = 0;
	bool ignored = true;
	char buf[64];

	(void)state;
	tt_cpufreq(root, 0, 0);
	tt_cpufile(root, 0, "scaling_min_freq", "1500000\n");
	assert_int_equal(js_cpufreq_read(root, 0, &f), 0);
	assert_int_equal(js_freq_apply(root, &f, 1200000, &rb, &ignored), 0);
	assert_int_equal(rb, 1200000);
	assert_false(ignored);
	/* min lowered first so that min <= max */
	assert_string_equal(tt_cpuread(root, 0, "scaling_min_freq", buf, sizeof(buf)), "1200000");
	assert_string_equal(tt_cpuread(root, 0, "scaling_max_freq", buf, sizeof(buf)), "1200000");
	assert_string_equal(tt_cpuread(root, 0, "scaling_governor", buf, sizeof(buf)), "powersave");
	/* raising the cap leaves min alone */
	assert_int_equal(js_freq_apply(root, &f, 2000000, &rb, &ignored), 0);
	assert_string_equal(tt_cpuread(root, 0, "scaling_min_freq", buf, sizeof(buf)), "1200000");
	assert_string_equal(tt_cpuread(root, 0, "scaling_max_freq", buf, sizeof(buf)), "2000000");
	assert_int_equal(js_freq_apply(root, &f, 0, &rb, &ignored), -EINVAL);
	tt_rmrf(root);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cpuset),
		cmocka_unit_test(test_khz_list),
		cmocka_unit_test(test_clamp_round),
		cmocka_unit_test(test_discover_acpi),
		cmocka_unit_test(test_discover_pstate),
		cmocka_unit_test(test_apply_setspeed),
		cmocka_unit_test(test_apply_maxcap),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
