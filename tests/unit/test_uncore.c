/* The uncore clock (issue 24, part 4): both sysfs layouts of
 * intel_uncore_frequency, the cap's clamping, and the journal (a dead
 * owner's change undone, a live one's respected). Truths are the values
 * each test writes into its fake tree. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "joulestep/uncore.h"
#include "test_tree.h"

#define UNC "devices/system/cpu/intel_uncore_frequency"

static void dom(const char *root, const char *name, int pkg, int did, unsigned min,
		unsigned max)
{
	char dir[1024], p[1200];
	snprintf(dir, sizeof(dir), "%s/" UNC "/%s", root, name);
	tt_mkdirs(dir);
	const char *files[] = {"min_freq_khz", "max_freq_khz", "initial_min_freq_khz",
			       "initial_max_freq_khz"};
	unsigned vals[] = {min, max, min, max};
	for (int i = 0; i < 4; i++) {
		snprintf(p, sizeof(p), "%s/%s", dir, files[i]);
		tt_writef(p, "%u\n", vals[i]);
	}
	if (pkg >= 0) {
		snprintf(p, sizeof(p), "%s/package_id", dir);
		tt_writef(p, "%d\n", pkg);
		snprintf(p, sizeof(p), "%s/domain_id", dir);
		tt_writef(p, "%d\n", did);
	}
}

static unsigned rd(const char *root, const char *name, const char *file)
{
	char p[1200], buf[64];
	snprintf(p, sizeof(p), "%s/" UNC "/%s/%s", root, name, file);
	return (unsigned)strtoul(tt_read(p, buf, sizeof(buf)), NULL, 10);
}

static void test_classic_layout(void **state)
{
	(void)state;
	char *root = tt_mkdtemp();
	struct js_uncore_dom d[8];
	assert_int_equal(js_uncore_list(root, d, 8), 0); /* no directory: none */
	dom(root, "package_01_die_00", -1, 0, 800000, 2400000);
	dom(root, "package_00_die_01", -1, 0, 800000, 2200000);
	dom(root, "package_00_die_00", -1, 0, 1200000, 2500000);
	char p[1200];
	snprintf(p, sizeof(p), "%s/" UNC "/package_xx_die_00", root);
	tt_mkdirs(p); /* not a domain */
	assert_int_equal(js_uncore_list(root, d, 8), 3);
	assert_string_equal(d[0].name, "package_00_die_00");
	assert_int_equal(d[0].pkg, 0);
	assert_int_equal(d[1].die, 1);
	assert_int_equal(d[2].pkg, 1);
	assert_int_equal(d[0].min_khz, 1200000);
	assert_int_equal(d[0].max_khz, 2500000);
	assert_int_equal(d[0].initial_max_khz, 2500000);
	tt_rmrf(root);
}

/* TPMI: uncoreNN with package_id/domain_id; a compat package_* view of the
 * same domain is not counted twice. */
static void test_tpmi_layout(void **state)
{
	(void)state;
	char *root = tt_mkdtemp();
	dom(root, "uncore00", 0, 0, 800000, 2000000);
	dom(root, "uncore01", 0, 1, 800000, 2000000);
	dom(root, "uncore02", 1, 0, 800000, 2100000);
	dom(root, "package_00_die_00", -1, 0, 800000, 2000000);
	struct js_uncore_dom d[8];
	assert_int_equal(js_uncore_list(root, d, 8), 3);
	assert_string_equal(d[0].name, "uncore00");
	assert_int_equal(d[1].pkg, 0);
	assert_int_equal(d[1].die, 1);
	assert_int_equal(d[2].pkg, 1);
	assert_int_equal(d[2].max_khz, 2100000);
	tt_rmrf(root);
}

static void test_cap(void **state)
{
	(void)state;
	struct js_uncore_dom d = {.min_khz = 800000, .max_khz = 2400000};
	assert_int_equal(js_uncore_cap_khz(&d, 1200000, 2400000), 1200000);
	assert_int_equal(js_uncore_cap_khz(&d, 500000, 2400000), 800000);   /* the min */
	assert_int_equal(js_uncore_cap_khz(&d, 3000000, 2400000), 2400000); /* never up */
	assert_int_equal(js_uncore_cap_khz(&d, 2000000, 1800000), 1800000); /* admin cap */
}

static int dead_pid(void)
{
	pid_t p = fork();
	if (p == 0)
		_exit(0);
	waitpid(p, NULL, 0);
	return (int)p;
}

/* The journal entry's owner becomes a pid that is gone (its start time no
 * longer matches). */
static void fake_dead_owner(const char *sdir, int dead)
{
	char e[1200], buf[200], fake[300];
	snprintf(e, sizeof(e), "%s/uncore-package_00_die_00", sdir);
	char *sp = strchr(tt_read(e, buf, sizeof(buf)), ' ');
	assert_non_null(sp);
	snprintf(fake, sizeof(fake), "%d%s", dead, sp);
	tt_write(e, fake);
}

static void test_journal(void **state)
{
	(void)state;
	char *root = tt_mkdtemp(), *st = tt_mkdtemp(), sdir[1100];
	snprintf(sdir, sizeof(sdir), "%s/state", st);
	dom(root, "package_00_die_00", -1, 0, 800000, 2400000);
	struct js_uncore_dom d[2];
	assert_int_equal(js_uncore_list(root, d, 2), 1);
	uint32_t orig = 0;
	assert_int_equal(js_uncore_journal_acquire(sdir, root, &d[0], 0, &orig), 0);
	assert_int_equal(orig, 2400000);
	assert_int_equal(js_uncore_set_max(root, &d[0], 1000000), 0);
	assert_int_equal(rd(root, "package_00_die_00", "max_freq_khz"), 1000000);
	/* a second live owner (this process's parent) is refused */
	assert_int_equal(js_uncore_journal_acquire(sdir, root, &d[0], (int)getppid(), &orig), -EBUSY);
	/* a live owner is not recovered; forced, it is */
	struct js_uncore_recovery r;
	assert_int_equal(js_uncore_journal_recover(sdir, root, false, &r), 0);
	assert_int_equal(r.busy, 1);
	assert_int_equal(rd(root, "package_00_die_00", "max_freq_khz"), 1000000);
	assert_int_equal(js_uncore_journal_release(sdir, root, &d[0]), 0);
	assert_int_equal(rd(root, "package_00_die_00", "max_freq_khz"), 2400000);
	assert_int_equal(js_uncore_journal_recover(sdir, root, false, &r), 0);
	assert_int_equal(r.entries, 0);
	/* a dead owner's lowered clock: the next owner's original is the
	 * saved one, not the lowered value; recovery restores it */
	int dead = dead_pid();
	assert_int_equal(js_uncore_journal_acquire(sdir, root, &d[0], 0, &orig), 0);
	js_uncore_set_max(root, &d[0], 900000);
	fake_dead_owner(sdir, dead); /* as a kill -9 leaves it */
	assert_int_equal(js_uncore_journal_acquire(sdir, root, &d[0], 0, &orig), 0);
	assert_int_equal(orig, 2400000);
	assert_int_equal(rd(root, "package_00_die_00", "max_freq_khz"), 2400000);
	js_uncore_set_max(root, &d[0], 900000);
	fake_dead_owner(sdir, dead);
	assert_int_equal(js_uncore_journal_recover(sdir, root, false, &r), 0);
	assert_int_equal(r.restored, 1);
	assert_int_equal(rd(root, "package_00_die_00", "max_freq_khz"), 2400000);
	tt_rmrf(root);
	tt_rmrf(st);
}

/* Root without CAP_DAC_OVERRIDE (as a read-only sysfs attribute is to
 * root): files of mode 0444 cannot be written. */
static void drop_dac_override(void)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct c[2];
	if (syscall(SYS_capget, &h, c) == 0) {
		c[0].effective &= ~(1u << CAP_DAC_OVERRIDE);
		syscall(SYS_capset, &h, c);
	}
}

/* A domain whose min/max cannot be written (read-only attributes): the
 * step journals it, cannot open max_freq_khz and releases it. Nothing was
 * changed, so the release succeeds and leaves no entry (before: it wrote
 * the unchanged values back, failed, and kept an entry every recovery
 * failed on for good). */
static void test_release_of_an_unwritable_domain(void **state)
{
	(void)state;
	char *root = tt_mkdtemp(), *st = tt_mkdtemp(), sdir[1100], p[1200];
	snprintf(sdir, sizeof(sdir), "%s/state", st);
	dom(root, "package_00_die_00", -1, 0, 800000, 2400000);
	const char *files[] = {"min_freq_khz", "max_freq_khz"};
	for (int i = 0; i < 2; i++) {
		snprintf(p, sizeof(p), "%s/" UNC "/package_00_die_00/%s", root, files[i]);
		assert_int_equal(chmod(p, 0444), 0);
	}
	pid_t child = fork();
	if (child == 0) {
		drop_dac_override();
		struct js_uncore_dom d[1];
		uint32_t orig = 0;
		struct js_uncore_recovery r;
		if (js_uncore_list(root, d, 1) != 1)
			_exit(1);
		if (js_uncore_set_max(root, &d[0], 1000000) != -EACCES)
			_exit(2); /* read-only indeed */
		if (js_uncore_journal_acquire(sdir, root, &d[0], 0, &orig) != 0)
			_exit(3);
		if (js_uncore_journal_release(sdir, root, &d[0]) != 0)
			_exit(4);
		if (js_uncore_journal_recover(sdir, root, false, &r) != 0 || r.entries != 0)
			_exit(5);
		_exit(0);
	}
	int status = -1;
	waitpid(child, &status, 0);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(rd(root, "package_00_die_00", "max_freq_khz"), 2400000);
	tt_rmrf(root);
	tt_rmrf(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_classic_layout),
		cmocka_unit_test(test_tpmi_layout),
		cmocka_unit_test(test_cap),
		cmocka_unit_test(test_journal),
		cmocka_unit_test(test_release_of_an_unwritable_domain),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
