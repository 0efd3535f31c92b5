/* Zone classification/discovery, wrap arithmetic, counter parsing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "joulestep/energy.h"
#include "js_internal.h"
#include "test_tree.h"

static const struct js_zone_info *find_zone(const struct js_zone_set *zs, const char *id)
{
	size_t i;

	for (i = 0; i < zs->nzones; i++)
		if (!strcmp(zs->zones[i].id, id))
			return &zs->zones[i];
	return NULL;
}

static const struct js_zone_skip *find_skip(const struct js_zone_set *zs, const char *id)
{
	size_t i;

	for (i = 0; i < zs->nskipped; i++)
		if (!strcmp(zs->skipped[i].id, id))
			return &zs->skipped[i];
	return NULL;
}

/* ---- pure classification ------------------------------------------------------- */

static void test_classify(void **state)
{
	enum js_zone_kind k = 99;
	const char *why = NULL;

	(void)state;
	assert_int_equal(js_zone_classify("intel-rapl", "package-0", 1, &k, &why), 0);
	assert_int_equal(k, JS_ZONE_PACKAGE);
	assert_int_equal(js_zone_classify("intel-rapl", "package-1-die-3", 1, &k, &why), 0);
	assert_int_equal(k, JS_ZONE_PACKAGE);
	assert_int_equal(js_zone_classify("intel-rapl", "dram", 2, &k, &why), 0);
	assert_int_equal(k, JS_ZONE_DRAM);

	assert_int_equal(js_zone_classify("intel-rapl", "psys", 1, &k, &why), -ENOENT);
	assert_string_equal(why, "psys overlaps the packages");
	assert_int_equal(js_zone_classify("intel-rapl", "core", 2, &k, &why), -ENOENT);
	assert_non_null(strstr(why, "nested inside a package"));
	assert_int_equal(js_zone_classify("intel-rapl", "uncore", 2, &k, &why), -ENOENT);
	assert_non_null(strstr(why, "nested inside a package"));
	assert_int_equal(js_zone_classify("intel-rapl-mmio", "package-0", 1, &k, &why), -ENOENT);
	assert_non_null(strstr(why, "mmio"));
	assert_int_equal(js_zone_classify("intel-rapl", "gpu", 1, &k, &why), -ENOENT);
	assert_non_null(strstr(why, "unknown"));
	assert_int_equal(js_zone_classify("intel-rapl", "package-", 1, &k, &why), -ENOENT);
	assert_int_equal(js_zone_classify("intel-rapl", "package-0x", 1, &k, &why), -ENOENT);
	assert_int_equal(js_zone_classify("intel-rapl", "package-0", 2, &k, &why), -ENOENT);
	assert_int_equal(js_zone_classify("intel-rapl", "dram", 1, &k, &why), -ENOENT);
	assert_int_equal(js_zone_classify("dtpm", "package-0", 1, &k, &why), -ENOENT);
}

/* ---- discovery ------------------------------------------------------------------- */

static void check_intel_two_packages(const struct js_zone_set *zs)
{
	const struct js_zone_info *z;
	const struct js_zone_skip *s;

	assert_int_equal(zs->nzones, 4);
	/* sorted by id */
	assert_string_equal(zs->zones[0].id, "intel-rapl:0");
	assert_string_equal(zs->zones[1].id, "intel-rapl:0:0");
	assert_string_equal(zs->zones[2].id, "intel-rapl:1");
	assert_string_equal(zs->zones[3].id, "intel-rapl:1:0");

	z = find_zone(zs, "intel-rapl:1");
	assert_non_null(z);
	assert_string_equal(z->name, "package-1");
	assert_int_equal(z->kind, JS_ZONE_PACKAGE);
	assert_int_equal(z->package, 1);
	assert_int_equal(z->die, -1);
	assert_int_equal(z->depth, 1);
	assert_int_equal(z->index[0], 1);
	assert_int_equal(z->max_energy_range_uj, PKG_MAX_UJ);
	assert_int_equal(z->max_power_uw, 150000000);
	assert_true(z->path[0] == '/');

	z = find_zone(zs, "intel-rapl:1:0");
	assert_non_null(z);
	assert_string_equal(z->name, "dram");
	assert_int_equal(z->kind, JS_ZONE_DRAM);
	assert_int_equal(z->package, 1);
	assert_int_equal(z->depth, 2);
	assert_int_equal(z->index[0], 1);
	assert_int_equal(z->index[1], 0);
	assert_int_equal(z->max_energy_range_uj, DRAM_MAX_UJ);
	/* no constraint file: the conservative default */
	assert_int_equal(z->max_power_uw, JS_DEFAULT_MAX_POWER_UW);

	s = find_skip(zs, "intel-rapl:2");
	assert_non_null(s);
	assert_string_equal(s->name, "psys");
	assert_string_equal(s->why, "psys overlaps the packages");
	s = find_skip(zs, "intel-rapl:0:1");
	assert_non_null(s);
	assert_string_equal(s->name, "core");
	s = find_skip(zs, "intel-rapl:1:1");
	assert_non_null(s);
	assert_non_null(strstr(s->why, "never added"));
	s = find_skip(zs, "intel-rapl-mmio:0");
	assert_non_null(s);
	assert_string_equal(s->name, "package-0");
	assert_non_null(strstr(s->why, "duplicates"));
	assert_null(find_zone(zs, "intel-rapl-mmio:0"));
}

static void test_discover_flat(void **state)
{
	char *root = tt_mkdtemp();
	struct js_zone_set zs;

	(void)state;
	tt_rapl_intel(root, 2, 1, 1);
	assert_int_equal(js_zones_discover(root, &zs), 0);
	check_intel_two_packages(&zs);
	tt_rmrf(root);
}

/* A private mount namespace shows only class/powercap/intel-rapl/... */
static void test_discover_nested(void **state)
{
	char *root = tt_mkdtemp();
	struct js_zone_set zs;

	(void)state;
	tt_rapl_intel(root, 2, 1, 0);
	assert_int_equal(js_zones_discover(root, &zs), 0);
	check_intel_two_packages(&zs);
	tt_rmrf(root);
}

static void test_discover_multi_die(void **state)
{
	char *root = tt_mkdtemp();
	struct js_zone_set zs;

	(void)state;
	tt_zone(root, "intel-rapl", 0, -1, "package-0-die-0", 1, PKG_MAX_UJ, 0, 1);
	tt_zone(root, "intel-rapl", 0, 0, "dram", 1, DRAM_MAX_UJ, 0, 1);
	tt_zone(root, "intel-rapl", 1, -1, "package-0-die-1", 1, PKG_MAX_UJ, 0, 1);
	tt_zone(root, "intel-rapl", 1, 0, "dram", 1, DRAM_MAX_UJ, 0, 1);
	assert_int_equal(js_zones_discover(root, &zs), 0);
	assert_int_equal(zs.nzones, 4);
	assert_int_equal(zs.zones[0].kind, JS_ZONE_PACKAGE);
	assert_int_equal(zs.zones[0].package, 0);
	assert_int_equal(zs.zones[0].die, 0);
	assert_int_equal(zs.zones[2].package, 0);
	assert_int_equal(zs.zones[2].die, 1);
	assert_int_equal(zs.zones[3].kind, JS_ZONE_DRAM);
	assert_int_equal(zs.zones[3].package, 0);
	assert_int_equal(zs.zones[3].die, 1);
	assert_int_equal(zs.nskipped, 0);
	tt_rmrf(root);
}

/* AMD: package zones (and core subzones), no dram, no psys. */
static void test_discover_amd_no_dram(void **state)
{
	char *root = tt_mkdtemp();
	struct js_zone_set zs;

	(void)state;
	tt_zone(root, "intel-rapl", 0, -1, "package-0", 5, PKG_MAX_UJ, 0, 1);
	tt_zone(root, "intel-rapl", 0, 0, "core", 5, PKG_MAX_UJ, 0, 1);
	assert_int_equal(js_zones_discover(root, &zs), 0);
	assert_int_equal(zs.nzones, 1);
	assert_string_equal(zs.zones[0].name, "package-0");
	assert_int_equal(zs.nskipped, 1);
	assert_string_equal(zs.skipped[0].id, "intel-rapl:0:0");
	tt_rmrf(root);
}

/* DRAM is measured only when every package has its own dram zone. */
static void test_dram_why(void **state)
{
	char *root = tt_mkdtemp();
	struct js_zone_set zs;
	char why[JS_WHY_LEN] = "";

	(void)state;
	tt_rapl_intel(root, 2, 1, 1);
	assert_int_equal(js_zones_discover(root, &zs), 0);
	assert_int_equal(js_zones_dram_why(&zs, why, sizeof(why)), 0);
	tt_rmrf(root);
	/* package-1 has no dram zone: a partial DRAM sum is no DRAM figure */
	root = tt_mkdtemp();
	tt_zone(root, "intel-rapl", 0, -1, "package-0", 5, PKG_MAX_UJ, 0, 1);
	tt_zone(root, "intel-rapl", 0, 0, "dram", 5, DRAM_MAX_UJ, 0, 1);
	tt_zone(root, "intel-rapl", 1, -1, "package-1", 5, PKG_MAX_UJ, 0, 1);
	assert_int_equal(js_zones_discover(root, &zs), 0);
	assert_int_equal(js_zones_dram_why(&zs, why, sizeof(why)), -ENOENT);
	assert_non_null(strstr(why, "package-1 (intel-rapl:1) has no dram zone"));
	tt_rmrf(root);
	/* AMD: package and core zones only */
	root = tt_mkdtemp();
	tt_zone(root, "intel-rapl", 0, -1, "package-0", 5, PKG_MAX_UJ, 0, 1);
	tt_zone(root, "intel-rapl", 0, 0, "core", 5, PKG_MAX_UJ, 0, 1);
	assert_int_equal(js_zones_discover(root, &zs), 0);
	assert_int_equal(js_zones_dram_why(&zs, why, sizeof(why)), -ENOENT);
	assert_non_null(strstr(why, "no dram zone"));
	tt_rmrf(root);
}

static void test_amd_energy_label(void **state)
{
	int s = -1, c = -1;

	(void)state;
	assert_int_equal(js_amd_energy_label("Esocket0", &s, &c), 0);
	assert_int_equal(s, 0);
	assert_int_equal(js_amd_energy_label("Esocket12", &s, &c), 0);
	assert_int_equal(s, 12);
	assert_int_equal(js_amd_energy_label("Ecore007", &s, &c), 1);
	assert_int_equal(c, 7);
	assert_int_equal(js_amd_energy_label("Esocket", &s, &c), -EINVAL);
	assert_int_equal(js_amd_energy_label("Esocket1x", &s, &c), -EINVAL);
	assert_int_equal(js_amd_energy_label("Ecore-1", &s, &c), -EINVAL);
	assert_int_equal(js_amd_energy_label("power1", &s, &c), -EINVAL);
}

/* amd_energy: sockets are zones, per-core counters one skip entry; other
 * hwmon devices are ignored. */
static void test_amd_energy_discover(void **state)
{
	char *root = tt_mkdtemp();
	char dir[512], path[700];
	struct js_zone_set zs;
	static const char *const labels[] = {"Ecore000", "Ecore001", "Ecore002", "Ecore003",
					     "Esocket0", "Esocket1"};

	(void)state;
	assert_int_equal(js_amd_energy_discover(root, &zs), -ENOENT);
	snprintf(dir, sizeof(dir), "%s/class/hwmon/hwmon0", root);
	tt_mkdirs(dir);
	snprintf(path, sizeof(path), "%s/name", dir);
	tt_write(path, "coretemp\n");
	snprintf(path, sizeof(path), "%s/energy1_input", dir);
	tt_write(path, "5\n");
	snprintf(dir, sizeof(dir), "%s/class/hwmon/hwmon3", root);
	tt_mkdirs(dir);
	snprintf(path, sizeof(path), "%s/name", dir);
	tt_write(path, "amd_energy\n");
	for (int i = 0; i < 6; i++) {
		snprintf(path, sizeof(path), "%s/energy%d_label", dir, i + 1);
		tt_writef(path, "%s\n", labels[i]);
		snprintf(path, sizeof(path), "%s/energy%d_input", dir, i + 1);
		tt_writef(path, "%d\n", 1000 * (i + 1));
	}
	assert_int_equal(js_amd_energy_discover(root, &zs), 0);
	assert_int_equal(zs.nzones, 2);
	assert_string_equal(zs.zones[0].id, "amd_energy:0");
	assert_string_equal(zs.zones[0].name, "Esocket0");
	assert_int_equal(zs.zones[1].package, 1);
	assert_int_equal(zs.zones[1].kind, JS_ZONE_PACKAGE);
	assert_non_null(strstr(zs.zones[1].path, "energy6_input"));
	assert_int_equal(zs.nskipped, 1);
	assert_non_null(strstr(zs.skipped[0].why, "4 per-core counters"));
	tt_rmrf(root);
}

static void test_discover_numeric_order_and_unknown(void **state)
{
	char *root = tt_mkdtemp();
	struct js_zone_set zs;
	char name[32];
	int i;

	(void)state;
	for (i = 0; i < 12; i++) {
		snprintf(name, sizeof(name), "package-%d", i);
		tt_zone(root, "intel-rapl", i, -1, name, 1, PKG_MAX_UJ, 0, 1);
	}
	tt_zone(root, "intel-rapl", 12, -1, "mystery", 1, PKG_MAX_UJ, 0, 1);
	assert_int_equal(js_zones_discover(root, &zs), 0);
	assert_int_equal(zs.nzones, 12);
	/* hex ids, numeric order: ..., :9, :a, :b */
	assert_string_equal(zs.zones[9].id, "intel-rapl:9");
	assert_string_equal(zs.zones[10].id, "intel-rapl:a");
	assert_int_equal(zs.zones[10].package, 10);
	assert_int_equal(zs.nskipped, 1);
	assert_string_equal(zs.skipped[0].name, "mystery");
	assert_non_null(strstr(zs.skipped[0].why, "unknown"));
	tt_rmrf(root);
}

static void test_discover_none(void **state)
{
	char *root = tt_mkdtemp();
	struct js_zone_set zs;

	(void)state;
	assert_int_equal(js_zones_discover(root, &zs), -ENOENT);
	tt_zone(root, "intel-rapl", 0, -1, "psys", 1, PKG_MAX_UJ, 0, 1);
	assert_int_equal(js_zones_discover(root, &zs), -ENOENT);
	assert_int_equal(zs.nzones, 0);
	assert_int_equal(zs.nskipped, 1);
	tt_rmrf(root);
}

/* ---- wrap arithmetic ---------------------------------------------------------------- */

static void test_wrap_delta(void **state)
{
	uint64_t d = 0;
	bool w = true;
	const uint64_t max = 1000;

	(void)state;
	assert_int_equal(js_wrap_delta_uj(100, 350, max, &d, &w), 0);
	assert_int_equal(d, 250);
	assert_false(w);
	/* single wrap: (max - prev) + cur */
	assert_int_equal(js_wrap_delta_uj(900, 50, max, &d, &w), 0);
	assert_int_equal(d, 150);
	assert_true(w);
	/* exactly at max */
	assert_int_equal(js_wrap_delta_uj(990, 1000, max, &d, &w), 0);
	assert_int_equal(d, 10);
	assert_false(w);
	assert_int_equal(js_wrap_delta_uj(1000, 7, max, &d, &w), 0);
	assert_int_equal(d, 7);
	assert_true(w);
	assert_int_equal(js_wrap_delta_uj(1000, 0, max, &d, &w), 0);
	assert_int_equal(d, 0);
	/* no change */
	assert_int_equal(js_wrap_delta_uj(5, 5, max, &d, &w), 0);
	assert_int_equal(d, 0);
	assert_false(w);
	/* impossible readings */
	assert_int_equal(js_wrap_delta_uj(1001, 5, max, &d, &w), -ERANGE);
	assert_int_equal(js_wrap_delta_uj(5, 1001, max, &d, &w), -ERANGE);
	/* real ranges: package and dram wrap at different points */
	assert_int_equal(js_wrap_delta_uj(PKG_MAX_UJ - 10, 20, PKG_MAX_UJ, &d, &w), 0);
	assert_int_equal(d, 30);
	assert_int_equal(js_wrap_delta_uj(DRAM_MAX_UJ - 10, 20, DRAM_MAX_UJ, &d, &w), 0);
	assert_int_equal(d, 30);
	assert_int_equal(js_wrap_delta_uj(PKG_MAX_UJ - 10, 20, DRAM_MAX_UJ, &d, &w), -ERANGE);
}

static void test_wrap_time_and_period(void **state)
{
	struct js_zone_set zs;

	(void)state;
	/* 262143328850 uJ at 150 W: 1747.62 s */
	assert_int_equal(js_wrap_time_ns(PKG_MAX_UJ, 150000000), 1747622192333ULL);
	/* default 1 kW */
	assert_int_equal(js_wrap_time_ns(PKG_MAX_UJ, 0), 262143328850ULL);
	/* no overflow with big numbers */
	assert_int_equal(js_wrap_time_ns(UINT64_MAX, 1), UINT64_MAX);

	memset(&zs, 0, sizeof(zs));
	zs.nzones = 2;
	zs.zones[0].max_energy_range_uj = PKG_MAX_UJ;
	zs.zones[0].max_power_uw = 150000000;
	zs.zones[1].max_energy_range_uj = DRAM_MAX_UJ;
	zs.zones[1].max_power_uw = JS_DEFAULT_MAX_POWER_UW;
	/* half the shortest wrap time (dram: 65.71 s) */
	assert_int_equal(js_sample_period_ns(&zs, 0), 65712999613ULL / 2);
	assert_int_equal(js_sample_period_ns(&zs, 1000000000ULL), 1000000000ULL);
	assert_int_equal(js_sample_period_ns(&zs, 100ULL * 1000000000ULL), 65712999613ULL / 2);
	/* never below 1 ms */
	zs.zones[1].max_energy_range_uj = 10;
	assert_int_equal(js_sample_period_ns(&zs, 0), 1000000ULL);
}

static void test_parse_energy(void **state)
{
	uint64_t v = 0;

	(void)state;
	assert_int_equal(js_parse_energy_uj("123456\n", 7, 0, &v), 0);
	assert_int_equal(v, 123456);
	assert_int_equal(js_parse_energy_uj("0", 1, 10, &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(js_parse_energy_uj("", 0, 0, &v), -EINVAL);
	assert_int_equal(js_parse_energy_uj("\n", 1, 0, &v), -EINVAL);
	assert_int_equal(js_parse_energy_uj("abc\n", 4, 0, &v), -EINVAL);
	assert_int_equal(js_parse_energy_uj("12a\n", 4, 0, &v), -EINVAL);
	assert_int_equal(js_parse_energy_uj("-5\n", 3, 0, &v), -EINVAL);
	assert_int_equal(js_parse_energy_uj(" 5\n", 3, 0, &v), -EINVAL);
	assert_int_equal(js_parse_energy_uj("99999999999999999999999\n", 24, 0, &v), -ERANGE);
	assert_int_equal(js_parse_energy_uj("1001\n", 5, 1000, &v), -ERANGE);
	assert_int_equal(js_parse_energy_uj("1000\n", 5, 1000, &v), 0);
	assert_int_equal(v, 1000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_classify),
		cmocka_unit_test(test_discover_flat),
		cmocka_unit_test(test_discover_nested),
		cmocka_unit_test(test_discover_multi_die),
		cmocka_unit_test(test_discover_amd_no_dram),
		cmocka_unit_test(test_dram_why),
		cmocka_unit_test(test_amd_energy_label),
		cmocka_unit_test(test_amd_energy_discover),
		cmocka_unit_test(test_discover_numeric_order_and_unknown),
		cmocka_unit_test(test_discover_none),
		cmocka_unit_test(test_wrap_delta),
		cmocka_unit_test(test_wrap_time_and_period),
		cmocka_unit_test(test_parse_energy),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
