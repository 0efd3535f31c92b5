/* Backends: sysfs reads and bad counter files, backend selection and the
 * reasons given, powercap (libpowercap) in a private mount namespace. The papi
 * backend is tested in test_papi.c. */
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "joulestep/energy.h"
#include "test_tree.h"

static void test_sysfs_read(void **state)
{
	char *root = tt_mkdtemp();
	struct js_energy_opts o = {.sysfs_root = root, .order = "sysfs"};
	struct js_energy *e = NULL;
	const struct js_zone_set *zs;
	uint64_t raw[JS_MAX_ZONES];
	int err[JS_MAX_ZONES];
	char why[512];

	(void)state;
	tt_rapl_intel(root, 2, 1, 1);
	assert_int_equal(js_energy_open(&o, &e, why, sizeof(why)), 0);
	assert_string_equal(js_energy_backend_name(e), "sysfs");
	zs = js_energy_zones(e);
	assert_int_equal(zs->nzones, 4);
	tt_set_energy(root, 0, -1, 123456789);
	tt_set_energy(root, 1, 0, 42);
	assert_int_equal(js_energy_read_uj(e, raw, err), 0);
	assert_int_equal(raw[0], 123456789); /* intel-rapl:0 */
	assert_int_equal(raw[1], 500);       /* intel-rapl:0:0 */
	assert_int_equal(raw[2], 1000);      /* intel-rapl:1 */
	assert_int_equal(raw[3], 42);        /* intel-rapl:1:0 */
	assert_int_equal(err[0] | err[1] | err[2] | err[3], 0);
	js_energy_close(e);
	tt_rmrf(root);
}

/* Unreadable (EISDIR), garbled, empty, huge or over-max counter files give an
 * error for that zone only. Tests run as root, so "unreadable" is a directory. */
static void test_sysfs_bad_counters(void **state)
{
	char *root = tt_mkdtemp();
	struct js_energy_opts o = {.sysfs_root = root, .order = "sysfs"};
	struct js_energy *e = NULL;
	uint64_t raw[JS_MAX_ZONES];
	int err[JS_MAX_ZONES];
	char why[512], path[1024];

	(void)state;
	tt_rapl_intel(root, 1, 1, 1);
	tt_zone_file(path, sizeof(path), root, 0, 0, "energy_uj");
	assert_int_equal(unlink(path), 0);
	assert_int_equal(mkdir(path, 0755), 0);
	assert_int_equal(js_energy_open(&o, &e, why, sizeof(why)), 0);
	assert_int_equal(js_energy_read_uj(e, raw, err), -EISDIR);
	assert_int_equal(err[0], 0);
	assert_int_equal(raw[0], 1000);
	assert_int_equal(err[1], -EISDIR);

	tt_zone_file(path, sizeof(path), root, 0, -1, "energy_uj");
	tt_write(path, "garbage\n");
	js_energy_read_uj(e, raw, err);
	assert_int_equal(err[0], -EINVAL);
	tt_write(path, "");
	js_energy_read_uj(e, raw, err);
	assert_int_equal(err[0], -EINVAL);
	tt_write(path, "123456789012345678901234567890123456789\n");
	js_energy_read_uj(e, raw, err);
	assert_int_equal(err[0], -ERANGE);
	tt_write(path, "262143328851\n"); /* max + 1 */
	js_energy_read_uj(e, raw, err);
	assert_int_equal(err[0], -ERANGE);
	tt_write(path, "262143328850\n"); /* exactly max is a valid reading */
	js_energy_read_uj(e, raw, err);
	assert_int_equal(err[0], 0);
	assert_int_equal(raw[0], PKG_MAX_UJ);
	js_energy_close(e);
	tt_rmrf(root);
}

static void test_selection_and_reasons(void **state)
{
	char *root = tt_mkdtemp();
	struct js_energy_opts o = {.sysfs_root = root, .order = NULL};
	struct js_energy *e = NULL;
	char why[1024];

	(void)state;
	/* no zones at all: every backend says why */
	assert_true(js_energy_open(&o, &e, why, sizeof(why)) < 0);
	assert_null(e);
	assert_non_null(strstr(why, "powercap: unavailable: libpowercap reads only /sys/class/powercap"));
	assert_non_null(strstr(why, "\npapi: unavailable: "));
	assert_non_null(strstr(why, "\nsysfs: unavailable: no RAPL zones"));

	/* default order falls through to sysfs on a fake root */
	tt_rapl_intel(root, 1, 0, 1);
	assert_int_equal(js_energy_open(&o, &e, why, sizeof(why)), 0);
	assert_string_equal(js_energy_backend_name(e), "sysfs");
	assert_int_equal(js_energy_zones(e)->nzones, 1);
	js_energy_close(e);

	o.order = "sysfs,bogus";
	assert_int_equal(js_energy_open(&o, &e, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "bogus: unknown backend (allowed: powercap, papi, sysfs, amd_energy)"));
	o.order = "";
	assert_true(js_energy_open(&o, &e, why, sizeof(why)) < 0);
	assert_int_equal(js_energy_probe("nope", root, why, sizeof(why)), -EINVAL);
	assert_int_equal(js_energy_probe("sysfs", root, why, sizeof(why)), 0);
	assert_int_equal(js_energy_probe("powercap", root, why, sizeof(why)), -ENOTSUP);
	tt_rmrf(root);
}

/* An unprivileged user cannot open root-only (0400) counters. */
static void test_sysfs_no_permission(void **state)
{
	char *root = tt_mkdtemp();
	char path[1024];
	pid_t pid;
	int st;

	(void)state;
	tt_rapl_intel(root, 1, 1, 1);
	assert_int_equal(chmod(root, 0755), 0);
	tt_zone_file(path, sizeof(path), root, 0, -1, "energy_uj");
	assert_int_equal(chmod(path, 0400), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char why[512];
		int rc;

		if (setgid(65534) < 0 || setuid(65534) < 0)
			_exit(10);
		rc = js_energy_probe("sysfs", root, why, sizeof(why));
		if (rc != -EACCES)
			_exit(11);
		if (!strstr(why, "sysfs: no permission: energy counters are root-only"))
			_exit(12);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	tt_rmrf(root);
}

/* libpowercap hard-codes /sys/class/powercap: show it the fake tree in a
 * private mount namespace (as tests/fakehw nsexec does) and read through it. */
static void test_powercap_in_namespace(void **state)
{
	char *root = tt_mkdtemp();
	char src[1024];
	pid_t pid;
	int st;

	(void)state;
	tt_rapl_intel(root, 2, 1, 1);
	snprintf(src, sizeof(src), "%s/devices/virtual/powercap/intel-rapl", root);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct js_energy_opts o = {.sysfs_root = NULL, .order = "powercap"};
		struct js_energy *e = NULL;
		const struct js_zone_set *zs;
		uint64_t raw[JS_MAX_ZONES];
		int err[JS_MAX_ZONES];
		char why[512];

		if (unshare(CLONE_NEWNS) < 0 ||
		    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
		    mount("none", "/sys/class", "tmpfs", 0, NULL) < 0 ||
		    mkdir("/sys/class/powercap", 0755) < 0 ||
		    mkdir("/sys/class/powercap/intel-rapl", 0755) < 0 ||
		    mount(src, "/sys/class/powercap/intel-rapl", NULL, MS_BIND, NULL) < 0)
			_exit(20);
		if (js_energy_open(&o, &e, why, sizeof(why)) != 0) {
			fprintf(stderr, "%s\n", why);
			_exit(21);
		}
		zs = js_energy_zones(e);
		if (strcmp(js_energy_backend_name(e), "powercap") || zs->nzones != 4 ||
		    strcmp(zs->zones[1].id, "intel-rapl:0:0") || zs->zones[1].kind != JS_ZONE_DRAM ||
		    zs->zones[2].package != 1 || zs->zones[0].max_power_uw != 150000000 ||
		    zs->zones[3].max_energy_range_uj != DRAM_MAX_UJ)
			_exit(22);
		/* psys and core are skipped with their reasons */
		if (zs->nskipped != 3 || strcmp(zs->skipped[2].why, "psys overlaps the packages"))
			_exit(23);
		tt_set_energy(root, 1, -1, 777);
		if (js_energy_read_uj(e, raw, err) != 0 || raw[2] != 777 || raw[0] != 1000 ||
		    raw[1] != 500)
			_exit(24);
		tt_set_energy(root, 1, -1, 999999999999999ULL); /* over max */
		js_energy_read_uj(e, raw, err);
		if (err[2] != -ERANGE || err[0] != 0)
			_exit(25);
		js_energy_close(e);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	tt_rmrf(root);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sysfs_read),
		cmocka_unit_test(test_sysfs_bad_counters),
		cmocka_unit_test(test_selection_and_reasons),
		cmocka_unit_test(test_sysfs_no_permission),
		cmocka_unit_test(test_powercap_in_namespace),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
