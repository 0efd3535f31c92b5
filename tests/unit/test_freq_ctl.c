/* The clock control handle (js_freq_ctl, issue 8 defects 2, 3, 9, 10): pure
 * planning (ratio -> cap, which files to write, in which order), nominal
 * clock, shared policies, and the I/O: state read once, one pwrite per
 * change, no open() at all after js_freq_ctl_open.
 *
 * open() is counted by interposition: this executable defines the open
 * family, which the statically linked library calls instead of libc's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <cmocka.h>

#include "joulestep/freq.h"
#include "test_tree.h"

static int g_opens;

static int open_counted(int dirfd, const char *path, int flags, mode_t mode)
{
	g_opens++;
	return (int)syscall(SYS_openat, dirfd, path, flags, mode);
}

#define MODE_ARG(flags, mode)                                                                      \
	do {                                                                                       \
		if ((flags) & (O_CREAT | __O_TMPFILE)) {                                           \
			va_list ap;                                                                \
			va_start(ap, flags);                                                       \
			mode = (mode_t)va_arg(ap, int);                                            \
			va_end(ap);                                                                \
		}                                                                                  \
	} while (0)

int open(const char *path, int flags, ...)
{
	mode_t mode = 0;
	MODE_ARG(flags, mode);
	return open_counted(AT_FDCWD, path, flags, mode);
}

int open64(const char *path, int flags, ...)
{
	mode_t mode = 0;
	MODE_ARG(flags, mode);
	return open_counted(AT_FDCWD, path, flags, mode);
}

int openat(int dirfd, const char *path, int flags, ...)
{
	mode_t mode = 0;
	MODE_ARG(flags, mode);
	return open_counted(dirfd, path, flags, mode);
}

int openat64(int dirfd, const char *path, int flags, ...)
{
	mode_t mode = 0;
	MODE_ARG(flags, mode);
	return open_counted(dirfd, path, flags, mode);
}

int __open_2(const char *path, int flags);
int __open_2(const char *path, int flags)
{
	return open_counted(AT_FDCWD, path, flags, 0);
}

int __openat_2(int dirfd, const char *path, int flags);
int __openat_2(int dirfd, const char *path, int flags)
{
	return open_counted(dirfd, path, flags, 0);
}

/* ---- pure ------------------------------------------------------------------------ */

static void acpi_info(struct js_cpufreq *f, int cpu)
{
	memset(f, 0, sizeof(*f));
	f->cpu = cpu;
	f->cpuinfo_min_khz = 800000;
	f->cpuinfo_max_khz = 2400000;
	f->scaling_min_khz = 800000;
	f->scaling_max_khz = 2400000;
	for (uint32_t k = 800000; k <= 2400000; k += 100000)
		f->avail_khz[f->navail++] = k;
	js_cpuset_set(&f->related, cpu);
}

/* A handle without descriptors, for the pure functions. */
static void ctl_of(struct js_freq_ctl *c, const struct js_cpufreq *f, uint32_t omin, uint32_t omax)
{
	memset(c, 0, sizeof(*c));
	c->fd[0] = c->fd[1] = -1;
	c->cpu = f->cpu;
	c->info = *f;
	c->orig_khz[JS_FREQ_MIN] = omin;
	c->orig_khz[JS_FREQ_MAX] = omax;
	c->cur_khz[JS_FREQ_MIN] = f->scaling_min_khz;
	c->cur_khz[JS_FREQ_MAX] = f->scaling_max_khz;
}

static void test_ratio_never_above_original_max(void **state)
{
	struct js_cpufreq f;
	struct js_freq_ctl c;
	uint32_t k;

	(void)state;
	acpi_info(&f, 0);
	ctl_of(&c, &f, 800000, 2400000);
	assert_int_equal(js_freq_ctl_ratio_khz(&c, 0.85, &k), 0);
	assert_int_equal(k, 2000000); /* 2040000 rounds to the 2.0 GHz step (nearest) */
	assert_int_equal(js_freq_ctl_ratio_khz(&c, 0.875, &k), 0);
	assert_int_equal(k, 2100000);
	/* a site cap at 1.8 GHz: nothing above it */
	ctl_of(&c, &f, 800000, 1800000);
	assert_int_equal(js_freq_ctl_ratio_khz(&c, 0.875, &k), 0);
	assert_int_equal(k, 1800000);
	assert_int_equal(js_freq_ctl_ratio_khz(&c, 0.5, &k), 0);
	assert_int_equal(k, 1200000);
	assert_int_equal(js_freq_ctl_ratio_khz(&c, 0.0, &k), -EINVAL);
	assert_int_equal(js_freq_ctl_ratio_khz(&c, 1.5, &k), -EINVAL);
}

static void test_plan(void **state)
{
	struct js_cpufreq f;
	struct js_freq_ctl c;
	struct js_freq_plan p;

	(void)state;
	acpi_info(&f, 0);
	ctl_of(&c, &f, 800000, 2400000);
	/* lowering: one write of max */
	js_freq_ctl_plan(&c, 2000000, &p);
	assert_int_equal(p.n, 1);
	assert_int_equal(p.w[0].file, JS_FREQ_MAX);
	assert_int_equal(p.w[0].khz, 2000000);
	assert_int_equal(p.max_khz, 2000000);
	/* already there: nothing */
	c.cur_khz[JS_FREQ_MAX] = 2000000;
	js_freq_ctl_plan(&c, 2000000, &p);
	assert_int_equal(p.n, 0);
	/* back to the original: one write */
	js_freq_ctl_plan(&c, 0, &p);
	assert_int_equal(p.n, 1);
	assert_int_equal(p.w[0].file, JS_FREQ_MAX);
	assert_int_equal(p.w[0].khz, 2400000);
	/* above the original max: the original max */
	js_freq_ctl_plan(&c, 3000000, &p);
	assert_int_equal(p.max_khz, 2400000);

	/* a site minimum of 1.5 GHz: a 1.2 GHz cap lowers min first */
	f.scaling_min_khz = 1500000;
	ctl_of(&c, &f, 1500000, 2400000);
	js_freq_ctl_plan(&c, 1200000, &p);
	assert_int_equal(p.n, 2);
	assert_int_equal(p.w[0].file, JS_FREQ_MIN);
	assert_int_equal(p.w[0].khz, 1200000);
	assert_int_equal(p.w[1].file, JS_FREQ_MAX);
	assert_int_equal(p.w[1].khz, 1200000);
	/* and restoring raises max first, then min */
	c.cur_khz[JS_FREQ_MIN] = c.cur_khz[JS_FREQ_MAX] = 1200000;
	js_freq_ctl_plan(&c, 0, &p);
	assert_int_equal(p.n, 2);
	assert_int_equal(p.w[0].file, JS_FREQ_MAX);
	assert_int_equal(p.w[0].khz, 2400000);
	assert_int_equal(p.w[1].file, JS_FREQ_MIN);
	assert_int_equal(p.w[1].khz, 1500000);
	/* from 1.2 to 1.4 GHz: max up, then min up to 1.4 (still under the original) */
	js_freq_ctl_plan(&c, 1400000, &p);
	assert_int_equal(p.n, 2);
	assert_int_equal(p.w[0].file, JS_FREQ_MAX);
	assert_int_equal(p.w[1].file, JS_FREQ_MIN);
	assert_int_equal(p.w[1].khz, 1400000);
}

static void test_nominal(void **state)
{
	struct js_cpufreq f;

	(void)state;
	acpi_info(&f, 0);
	assert_int_equal(js_freq_nominal_khz(&f), 2400000);
	f.avail_khz[f.navail++] = 2401000; /* acpi-cpufreq's turbo entry */
	f.cpuinfo_max_khz = 2401000;
	assert_int_equal(js_freq_nominal_khz(&f), 2400000);
	f.base_frequency_khz = 2000000;    /* the driver's own word wins */
	assert_int_equal(js_freq_nominal_khz(&f), 2000000);
	memset(&f, 0, sizeof(f));
	assert_int_equal(js_freq_nominal_khz(&f), 0);
	f.avail_khz[f.navail++] = 1000000;
	assert_int_equal(js_freq_nominal_khz(&f), 1000000);
	assert_int_equal(js_freq_nominal_khz(NULL), 0);
}

static void test_policy_shared(void **state)
{
	struct js_cpufreq f;
	struct js_cpuset mine;
	int pol = -1;

	(void)state;
	acpi_info(&f, 4);
	js_cpuset_parse("4", &mine);
	assert_false(js_freq_policy_shared(&f, &mine));
	js_cpuset_parse("4 5", &f.related);
	assert_true(js_freq_policy_shared(&f, &mine));
	js_cpuset_parse("4-5,9", &mine);
	assert_false(js_freq_policy_shared(&f, &mine));
	js_cpuset_parse("4 900", &f.related);
	assert_true(js_freq_policy_shared(&f, &mine));

	assert_int_equal(js_parse_policy_link("../cpufreq/policy12", &pol), 0);
	assert_int_equal(pol, 12);
	assert_int_equal(js_parse_policy_link("policy0", &pol), 0);
	assert_int_equal(pol, 0);
	static const char *const bad[] = {"../cpufreq/policy", "../cpufreq/policyx", "../cpufreq/cpu1",
					  "../cpufreq/policy1x", "", "../cpufreq/policy1024"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(js_parse_policy_link(bad[i], &pol), -EINVAL);
}

static void test_fmt_khz(void **state)
{
	char buf[16];

	(void)state;
	assert_int_equal(js_freq_fmt_khz(buf, sizeof(buf), 2400000), 8);
	assert_string_equal(buf, "2400000\n");
	assert_int_equal(js_freq_fmt_khz(buf, sizeof(buf), 0), 2);
	assert_string_equal(buf, "0\n");
	assert_int_equal(js_freq_fmt_khz(buf, sizeof(buf), UINT32_MAX), 11);
	assert_string_equal(buf, "4294967295\n");
	assert_int_equal(js_freq_fmt_khz(buf, 8, 2400000), 0); /* no room for "\n\0" */
}

static void test_saved_boot_id(void **state)
{
	struct js_freq_saved s;
	char buf[256];

	(void)state;
	assert_int_equal(js_freq_saved_parse("cpu=1\ngovernor=schedutil\nmin_khz=1\nmax_khz=2\n"
					     "setspeed_khz=0\n", &s), 0);
	assert_string_equal(s.boot_id, ""); /* older backups have none */
	assert_int_equal(js_freq_saved_parse("cpu=1\ngovernor=schedutil\nmin_khz=1\nmax_khz=2\n"
					     "setspeed_khz=0\nboot_id=0f1e2d3c-0000-4000-8000-00000000abcd\n",
					     &s), 0);
	assert_string_equal(s.boot_id, "0f1e2d3c-0000-4000-8000-00000000abcd");
	assert_int_equal(js_freq_saved_format(&s, buf, sizeof(buf)), 0);
	assert_non_null(strstr(buf, "\nboot_id=0f1e2d3c-0000-4000-8000-00000000abcd\n"));
	assert_int_equal(js_freq_saved_parse("cpu=1\ngovernor=schedutil\nmin_khz=1\nmax_khz=2\n"
					     "setspeed_khz=0\nboot_id=../../etc\n", &s), -EINVAL);
	assert_int_equal(js_freq_saved_parse("cpu=1\ngovernor=schedutil\nmin_khz=1\nmax_khz=2\n"
					     "setspeed_khz=0\nboot_id=0f1e2d3c-0000-4000-8000-00000000abcd\n"
					     "boot_id=0f1e2d3c-0000-4000-8000-00000000abcd\n", &s), -EINVAL);
}

/* ---- I/O ------------------------------------------------------------------------- */

static void expect_files(const char *root, int cpu, const char *gov, const char *min, const char *max)
{
	char buf[64];

	assert_string_equal(tt_cpuread(root, cpu, "scaling_governor", buf, sizeof(buf)), gov);
	assert_string_equal(tt_cpuread(root, cpu, "scaling_min_freq", buf, sizeof(buf)), min);
	assert_string_equal(tt_cpuread(root, cpu, "scaling_max_freq", buf, sizeof(buf)), max);
}

/* State read once; each change is pwrites only: not one open(). */
static void test_set_opens_nothing(void **state)
{
	char *root = tt_mkdtemp();
	struct js_cpufreq f;
	struct js_freq_ctl c;
	uint32_t k = 0, applied = 0;

	(void)state;
	tt_cpufreq(root, 0, 1);
	tt_cpufile(root, 0, "scaling_max_freq", "2200000\n"); /* a site cap */
	/* the counter counts: discovery opens files */
	g_opens = 0;
	assert_int_equal(js_cpufreq_read(root, 0, &f), 0);
	assert_true(g_opens >= 8);
	g_opens = 0;
	assert_int_equal(js_freq_ctl_open(root, &f, f.scaling_min_khz, f.scaling_max_khz, &c), 0);
	assert_int_equal(g_opens, 2); /* scaling_max_freq and scaling_min_freq */
	assert_true(fcntl(c.fd[0], F_GETFD) & FD_CLOEXEC);
	assert_true(fcntl(c.fd[1], F_GETFD) & FD_CLOEXEC);
	assert_int_equal(fcntl(c.fd[0], F_GETFL) & O_ACCMODE, O_WRONLY);

	g_opens = 0;
	for (int i = 0; i < 100; i++) {
		assert_int_equal(js_freq_ctl_ratio_khz(&c, i % 2 ? 0.5 : 0.85, &k), 0);
		assert_int_equal(js_freq_ctl_set(&c, k, &applied), 0);
		assert_int_equal(applied, k);
		assert_int_equal(js_freq_ctl_restore(&c), 0);
	}
	assert_int_equal(g_opens, 0);

	assert_int_equal(js_freq_ctl_set(&c, 2000000, &applied), 0);
	expect_files(root, 0, "schedutil", "800000", "2000000"); /* governor never touched */
	assert_int_equal(js_freq_ctl_set(&c, 2400000, &applied), 0);
	assert_int_equal(applied, 2200000);                        /* not above the site cap */
	expect_files(root, 0, "schedutil", "800000", "2200000");
	assert_int_equal(js_freq_ctl_set(&c, 1000000, NULL), 0);
	assert_int_equal(js_freq_ctl_restore(&c), 0);
	expect_files(root, 0, "schedutil", "800000", "2200000");
	js_freq_ctl_close(&c);
	js_freq_ctl_close(&c); /* idempotent */
	assert_int_equal(js_freq_ctl_set(&c, 1000000, NULL), -EBADF);
	tt_rmrf(root);
}

/* A minimum above the cap is lowered first and put back on restore. */
static void test_set_below_min(void **state)
{
	char *root = tt_mkdtemp();
	struct js_cpufreq f;
	struct js_freq_ctl c;

	(void)state;
	tt_cpufreq(root, 0, 0);
	tt_cpufile(root, 0, "scaling_min_freq", "1500000\n");
	assert_int_equal(js_cpufreq_read(root, 0, &f), 0);
	assert_int_equal(js_freq_ctl_open(root, &f, 1500000, 2400000, &c), 0);
	assert_int_equal(js_freq_ctl_set(&c, 1200000, NULL), 0);
	expect_files(root, 0, "powersave", "1200000", "1200000");
	assert_int_equal(js_freq_ctl_restore(&c), 0);
	expect_files(root, 0, "powersave", "1500000", "2400000");
	js_freq_ctl_close(&c);
	tt_rmrf(root);
}

/* orig comes from the journal, not from the files: a step that starts while
 * another has the CPU lowered restores the true original. */
static void test_restore_to_the_journals_original(void **state)
{
	char *root = tt_mkdtemp();
	char state_dir[1200];
	struct js_cpufreq f;
	struct js_freq_saved s;
	struct js_freq_ctl c;
	bool restored;

	(void)state;
	snprintf(state_dir, sizeof(state_dir), "%s/state", root);
	tt_cpufreq(root, 0, 1);
	assert_int_equal(js_freq_acquire_saved(state_dir, root, 0, "stepA", 0, &s), 0);
	assert_int_equal(s.max_khz, 2400000);
	tt_cpufile(root, 0, "scaling_max_freq", "1700000\n"); /* step A lowered it */
	assert_int_equal(js_freq_acquire_saved(state_dir, root, 0, "stepB", 0, &s), 0);
	assert_int_equal(s.max_khz, 2400000); /* the backup in force */
	assert_int_equal(js_cpufreq_read(root, 0, &f), 0);
	assert_int_equal(js_freq_ctl_open(root, &f, s.min_khz, s.max_khz, &c), 0);
	assert_int_equal(c.cur_khz[JS_FREQ_MAX], 1700000);
	assert_int_equal(js_freq_ctl_restore(&c), 0);
	expect_files(root, 0, "schedutil", "800000", "2400000");
	js_freq_ctl_close(&c);
	assert_int_equal(js_freq_release(state_dir, root, 0, "stepA", &restored), 0);
	assert_int_equal(js_freq_release(state_dir, root, 0, "stepB", &restored), 0);
	assert_true(restored);
	assert_int_equal(js_freq_acquire_saved(state_dir, root, 0, "bad/name", 0, &s), -EINVAL);
	tt_rmrf(root);
}

/* The kernel's layout: cpuN/cpufreq -> ../cpufreq/policyM. */
static void test_policy_from_link(void **state)
{
	char *root = tt_mkdtemp();
	char pol[1200], link[1200];
	struct js_cpufreq f;

	(void)state;
	snprintf(pol, sizeof(pol), "%s/devices/system/cpu/cpufreq", root);
	tt_mkdirs(pol);
	tt_cpufreq(root, 2, 1); /* makes cpu2/cpufreq, a directory: move it to policy2 */
	snprintf(link, sizeof(link), "%s/devices/system/cpu/cpu2/cpufreq", root);
	snprintf(pol, sizeof(pol), "%s/devices/system/cpu/cpufreq/policy2", root);
	assert_int_equal(rename(link, pol), 0);
	assert_int_equal(symlink("../cpufreq/policy2", link), 0);
	snprintf(link, sizeof(link), "%s/devices/system/cpu/cpu3", root);
	tt_mkdirs(link);
	snprintf(link, sizeof(link), "%s/devices/system/cpu/cpu3/cpufreq", root);
	assert_int_equal(symlink("../cpufreq/policy2", link), 0);
	tt_cpufile(root, 2, "related_cpus", "2 3\n");
	assert_int_equal(js_cpufreq_read(root, 3, &f), 0);
	assert_int_equal(f.cpu, 3);
	assert_int_equal(f.policy, 2);
	assert_true(js_cpuset_isset(&f.related, 2) && js_cpuset_isset(&f.related, 3));
	tt_rmrf(root);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ratio_never_above_original_max),
		cmocka_unit_test(test_plan),
		cmocka_unit_test(test_nominal),
		cmocka_unit_test(test_policy_shared),
		cmocka_unit_test(test_fmt_khz),
		cmocka_unit_test(test_saved_boot_id),
		cmocka_unit_test(test_set_opens_nothing),
		cmocka_unit_test(test_set_below_min),
		cmocka_unit_test(test_restore_to_the_journals_original),
		cmocka_unit_test(test_policy_from_link),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
