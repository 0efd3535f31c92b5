/* Node-level energy: pm_counters and hwmon power (Grace) parsing, discovery,
 * reading, resets and totals that never add overlapping sources. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "joulestep/node.h"
#include "node_internal.h"
#include "test_tree.h"

/* ---- pure ---------------------------------------------------------------------- */

static void test_pm_parse(void **state)
{
	uint64_t j = 1, t = 1;

	(void)state;
	assert_int_equal(js_pm_parse_energy("123456 J 1700000000123456 us\n", 64, &j, &t), 0);
	assert_int_equal(j, 123456);
	assert_int_equal(t, 1700000000123456ULL);
	assert_int_equal(js_pm_parse_energy("42 J\n", 64, &j, &t), 0);
	assert_int_equal(j, 42);
	assert_int_equal(t, 0);
	assert_int_equal(js_pm_parse_energy("0 J 5 us", 64, &j, &t), 0);
	assert_int_equal(js_pm_parse_energy("", 64, &j, &t), -EINVAL);
	assert_int_equal(js_pm_parse_energy("12 W 5 us", 64, &j, &t), -EINVAL);
	assert_int_equal(js_pm_parse_energy("12 J 5 ms", 64, &j, &t), -EINVAL);
	assert_int_equal(js_pm_parse_energy("-1 J", 64, &j, &t), -EINVAL);
	assert_int_equal(js_pm_parse_energy("12J5", 64, &j, &t), -EINVAL);
	assert_int_equal(js_pm_parse_energy("99999999999999999999999 J", 64, &j, &t), -ERANGE);
	/* J x 1e6 must fit the uJ counters */
	assert_int_equal(js_pm_parse_energy("18446744073709551 J", 64, &j, &t), -ERANGE);
}

static void test_pm_classify(void **state)
{
	char w[64];
	bool total = false;

	(void)state;
	assert_int_equal(js_pm_classify("energy", w, sizeof(w), &total), 0);
	assert_string_equal(w, "node");
	assert_true(total);
	assert_int_equal(js_pm_classify("cpu_energy", w, sizeof(w), &total), 0);
	assert_string_equal(w, "cpu");
	assert_false(total);
	assert_int_equal(js_pm_classify("memory_energy", w, sizeof(w), &total), 0);
	assert_string_equal(w, "memory");
	assert_int_equal(js_pm_classify("accel3_energy", w, sizeof(w), &total), 0);
	assert_string_equal(w, "accel3");
	assert_false(total);
	for (const char *const *f = (const char *const[]){"power", "cpu_power", "freshness",
			"generation", "accel_energy", "accelx_energy", "energy_cap", "version", NULL};
	     *f; f++)
		assert_int_equal(js_pm_classify(*f, w, sizeof(w), &total), -ENOENT);
}

static void test_grace_label(void **state)
{
	char w[64];
	int s = -1;
	bool total = false;

	(void)state;
	assert_int_equal(js_grace_label("Module Power Socket 0", w, sizeof(w), &s, &total), 0);
	assert_string_equal(w, "module");
	assert_int_equal(s, 0);
	assert_true(total);
	assert_int_equal(js_grace_label("CPU Power Socket 1", w, sizeof(w), &s, &total), 0);
	assert_string_equal(w, "cpu");
	assert_int_equal(s, 1);
	assert_false(total);
	assert_int_equal(js_grace_label("SysIO Power Socket 3", w, sizeof(w), &s, &total), 0);
	assert_string_equal(w, "sysio");
	assert_int_equal(js_grace_label("Grace Power Socket 0", w, sizeof(w), &s, &total), 0);
	assert_false(total);
	assert_int_equal(js_grace_label("Module Power Socket", w, sizeof(w), &s, &total), -EINVAL);
	assert_int_equal(js_grace_label("Module Power Socket 0x", w, sizeof(w), &s, &total), -EINVAL);
	assert_int_equal(js_grace_label("GPU Power Socket 0", w, sizeof(w), &s, &total), -EINVAL);
	assert_int_equal(js_grace_label("Module Power Socket -1", w, sizeof(w), &s, &total), -EINVAL);
}

static void test_integrate(void **state)
{
	(void)state;
	/* 100 W for 1 s = 100 J */
	assert_int_equal(js_power_integrate_uj(100000000, 100000000, 1000000000), 100000000);
	/* 0 -> 200 W over 0.5 s: mean 100 W, 50 J */
	assert_int_equal(js_power_integrate_uj(0, 200000000, 500000000), 50000000);
	assert_int_equal(js_power_integrate_uj(5, 5, 0), 0);
}

/* ---- pm_counters tree ------------------------------------------------------------ */

static void pm_file(const char *root, const char *f, const char *content)
{
	char p[700];

	snprintf(p, sizeof(p), "%s/cray/pm_counters/%s", root, f);
	tt_write(p, content);
}

static char *pm_tree(void)
{
	char *root = tt_mkdtemp(), p[600];

	snprintf(p, sizeof(p), "%s/cray/pm_counters", root);
	tt_mkdirs(p);
	pm_file(root, "energy", "1000 J 1 us\n");
	pm_file(root, "cpu_energy", "600 J 1 us\n");
	pm_file(root, "memory_energy", "100 J 1 us\n");
	pm_file(root, "accel0_energy", "200 J 1 us\n");
	pm_file(root, "power", "300 W 1 us\n");
	pm_file(root, "freshness", "7\n");
	pm_file(root, "generation", "3\n");
	return root;
}

static void test_pm_meter_total_is_energy_only(void **state)
{
	char *root = pm_tree(), why[400];
	struct js_node *n = NULL;
	struct js_node_meter *m = NULL;
	struct js_node_snapshot a, b;
	struct js_node_interval iv;

	(void)state;
	assert_int_equal(js_node_open(root, NULL, &n, why, sizeof(why)), 0);
	assert_string_equal(js_node_source_name(n), "pm_counters");
	assert_int_equal(js_node_nchannels(n), 4);
	assert_string_equal(js_node_channel(n, 0)->name, "energy"); /* the total first */
	assert_true(js_node_channel(n, 0)->total);
	assert_int_equal(js_node_meter_start(n, 0, false, &m), 0);
	assert_int_equal(js_node_meter_snapshot(m, &a), 0);
	pm_file(root, "energy", "1500 J 2 us\n");
	pm_file(root, "cpu_energy", "900 J 2 us\n");
	pm_file(root, "memory_energy", "150 J 2 us\n");
	pm_file(root, "accel0_energy", "300 J 2 us\n");
	pm_file(root, "freshness", "8\n");
	assert_int_equal(js_node_meter_snapshot(m, &b), 0);
	js_node_interval_of(n, &a, &b, &iv);
	assert_false(iv.integrated);
	assert_true(iv.total_known);
	/* energy includes cpu, memory, accel: 500 J, never 500 + 300 + 50 + 100 */
	assert_int_equal(iv.total_uj, 500000000);
	assert_string_equal(iv.total_sources, "pm_counters:energy");
	for (size_t i = 0; i < iv.n; i++)
		assert_false(iv.uncertain[i]);

	/* a new generation: the counters restarted; that interval is unknown */
	pm_file(root, "energy", "2000 J 3 us\n");
	pm_file(root, "generation", "4\n");
	assert_int_equal(js_node_meter_snapshot(m, &a), 0);
	js_node_interval_of(n, &b, &a, &iv);
	assert_false(iv.total_known);
	assert_non_null(strstr(iv.total_sources, "generation changed"));
	for (size_t i = 0; i < iv.n; i++)
		assert_true(iv.uncertain[i]);
	/* the next interval, within the new generation, is known again */
	pm_file(root, "energy", "2010 J 4 us\n");
	assert_int_equal(js_node_meter_snapshot(m, &b), 0);
	js_node_interval_of(n, &a, &b, &iv);
	assert_true(iv.total_known);
	assert_int_equal(iv.total_uj, 10000000);
	/* a counter that went back without a new generation: unknown too */
	pm_file(root, "energy", "5 J 5 us\n");
	assert_int_equal(js_node_meter_snapshot(m, &a), 0);
	js_node_interval_of(n, &b, &a, &iv);
	assert_false(iv.total_known);
	js_node_meter_stop(m);
	js_node_close(n);
	tt_rmrf(root);
}

static void test_pm_without_energy_file_has_no_total(void **state)
{
	char *root = pm_tree(), p[700], why[400];
	struct js_node *n = NULL;
	struct js_node_meter *m = NULL;
	struct js_node_snapshot a, b;
	struct js_node_interval iv;

	(void)state;
	snprintf(p, sizeof(p), "%s/cray/pm_counters/energy", root);
	unlink(p);
	assert_int_equal(js_node_open(root, "pm_counters", &n, why, sizeof(why)), 0);
	assert_int_equal(js_node_meter_start(n, 0, false, &m), 0);
	js_node_meter_snapshot(m, &a);
	js_node_meter_snapshot(m, &b);
	js_node_interval_of(n, &a, &b, &iv);
	assert_false(iv.total_known); /* cpu + memory + accel is not the node */
	assert_non_null(strstr(iv.total_sources, "no energy file"));
	js_node_meter_stop(m);
	js_node_close(n);
	tt_rmrf(root);
}

/* ---- hwmon (Grace) ------------------------------------------------------------------ */

static void grace_sensor(const char *root, int h, const char *label, uint64_t uw)
{
	char d[600], p[700];

	snprintf(d, sizeof(d), "%s/class/hwmon/hwmon%d", root, h);
	tt_mkdirs(d);
	snprintf(p, sizeof(p), "%s/power1_oem_info", d);
	tt_writef(p, "%s\n", label);
	snprintf(p, sizeof(p), "%s/power1_average", d);
	tt_writef(p, "%" PRIu64 "\n", uw);
	snprintf(p, sizeof(p), "%s/name", d);
	tt_write(p, "nvidia_power\n");
}

static void test_grace_total_is_module_only(void **state)
{
	char *root = tt_mkdtemp(), why[400];
	struct js_node *n = NULL;
	struct js_node_meter *m = NULL;
	struct js_node_snapshot a, b;
	struct js_node_interval iv;
	uint64_t mod_uj = 0;

	(void)state;
	grace_sensor(root, 0, "Module Power Socket 0", 500000000); /* 500 W incl. GPU */
	grace_sensor(root, 1, "CPU Power Socket 0", 200000000);
	grace_sensor(root, 2, "SysIO Power Socket 0", 50000000);
	grace_sensor(root, 3, "Module Power Socket 1", 300000000);
	grace_sensor(root, 4, "CPU Power Socket 1", 100000000);
	{ /* another hwmon device without the label: ignored */
		char p[700];

		snprintf(p, sizeof(p), "%s/class/hwmon/hwmon9", root);
		tt_mkdirs(p);
		snprintf(p, sizeof(p), "%s/class/hwmon/hwmon9/power1_average", root);
		tt_write(p, "999999999\n");
	}
	assert_int_equal(js_node_open(root, "pm_counters,hwmon", &n, why, sizeof(why)), 0);
	assert_non_null(strstr(why, "pm_counters: no")); /* why the first was passed over */
	assert_string_equal(js_node_source_name(n), "hwmon");
	assert_int_equal(js_node_nchannels(n), 5);
	assert_int_equal(js_node_meter_start(n, 0, false, &m), 0);
	js_node_meter_snapshot(m, &a);
	usleep(200000);
	js_node_meter_snapshot(m, &b);
	js_node_interval_of(n, &a, &b, &iv);
	assert_true(iv.integrated);
	assert_true(iv.total_known);
	assert_string_equal(iv.total_sources,
			    "hwmon:Module Power Socket 0+hwmon:Module Power Socket 1");
	for (size_t i = 0; i < iv.n; i++)
		if (js_node_channel(n, i)->total)
			mod_uj += iv.energy_uj[i];
	assert_int_equal(iv.total_uj, mod_uj);
	/* 800 W over the interval (constant power: exact up to rounding) */
	assert_true(llabs((long long)iv.total_uj - (long long)(800 * iv.duration_ns / 1000)) <= 2);
	js_node_meter_stop(m);
	js_node_close(n);
	tt_rmrf(root);
}

static void test_grace_socket_without_module_has_no_total(void **state)
{
	char *root = tt_mkdtemp(), why[400];
	struct js_node *n = NULL;
	struct js_node_meter *m = NULL;
	struct js_node_snapshot a, b;
	struct js_node_interval iv;

	(void)state;
	grace_sensor(root, 0, "Module Power Socket 0", 500000000);
	grace_sensor(root, 1, "CPU Power Socket 1", 200000000);
	assert_int_equal(js_node_open(root, "hwmon", &n, why, sizeof(why)), 0);
	assert_int_equal(js_node_meter_start(n, 0, false, &m), 0);
	js_node_meter_snapshot(m, &a);
	js_node_meter_snapshot(m, &b);
	js_node_interval_of(n, &a, &b, &iv);
	assert_false(iv.total_known);
	assert_non_null(strstr(iv.total_sources, "socket 1 has no Module sensor"));
	js_node_meter_stop(m);
	js_node_close(n);
	tt_rmrf(root);
}

static void test_open_errors(void **state)
{
	char *root = tt_mkdtemp(), why[400];
	struct js_node *n = NULL;

	(void)state;
	assert_int_equal(js_node_open(root, "ipmi", &n, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "ipmi: unknown node source"));
	assert_int_equal(js_node_open(root, NULL, &n, why, sizeof(why)), -ENOENT);
	assert_non_null(strstr(why, "pm_counters: "));
	assert_non_null(strstr(why, "\nhwmon: "));
	assert_null(n);
	tt_rmrf(root);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pm_parse),
		cmocka_unit_test(test_pm_classify),
		cmocka_unit_test(test_grace_label),
		cmocka_unit_test(test_integrate),
		cmocka_unit_test(test_pm_meter_total_is_energy_only),
		cmocka_unit_test(test_pm_without_energy_file_has_no_total),
		cmocka_unit_test(test_grace_total_is_module_only),
		cmocka_unit_test(test_grace_socket_without_module_has_no_total),
		cmocka_unit_test(test_open_errors),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
