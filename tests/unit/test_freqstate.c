/* Save/restore journal: backups, owners, crash recovery, unsafe dirs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "joulestep/freq.h"
#include "test_tree.h"

struct fx {
	char *tmp;       /* 0700 temp dir */
	char sys[1024];  /* fake sysfs root */
	char state[1024];/* state dir (created by the library) */
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	f->tmp = tt_mkdtemp();
	snprintf(f->sys, sizeof(f->sys), "%s/sys", f->tmp);
	snprintf(f->state, sizeof(f->state), "%s/state", f->tmp);
	tt_cpufreq(f->sys, 0, 1); /* acpi */
	tt_cpufreq(f->sys, 1, 1);
	tt_cpufreq(f->sys, 2, 0); /* pstate */
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	tt_rmrf(f->tmp);
	free(f);
	return 0;
}

static void expect_cpu(const struct fx *f, int cpu, const char *gov, const char *min,
		       const char *max)
{
	char buf[64];

	assert_string_equal(tt_cpuread(f->sys, cpu, "scaling_governor", buf, sizeof(buf)), gov);
	assert_string_equal(tt_cpuread(f->sys, cpu, "scaling_min_freq", buf, sizeof(buf)), min);
	assert_string_equal(tt_cpuread(f->sys, cpu, "scaling_max_freq", buf, sizeof(buf)), max);
}

static void apply(const struct fx *f, int cpu, uint32_t khz)
{
	struct js_cpufreq c;
	uint32_t rb;
	bool ign;

	assert_int_equal(js_cpufreq_read(f->sys, cpu, &c), 0);
	assert_int_equal(js_freq_apply(f->sys, &c, khz, &rb, &ign), 0);
	assert_false(ign);
}

static int exists(const char *dir, const char *name)
{
	char p[1200];
	struct stat st;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return stat(p, &st) == 0;
}

static void test_saved_format_parse(void **state)
{
	struct js_freq_saved s = {.cpu = 3, .governor = "schedutil", .min_khz = 800000,
				  .max_khz = 2400000, .setspeed_khz = 0}, p;
	char buf[256];

	(void)state;
	assert_int_equal(js_freq_saved_format(&s, buf, sizeof(buf)), 0);
	assert_int_equal(js_freq_saved_parse(buf, &p), 0);
	assert_int_equal(p.cpu, 3);
	assert_string_equal(p.governor, "schedutil");
	assert_int_equal(p.min_khz, 800000);
	assert_int_equal(p.max_khz, 2400000);
	assert_int_equal(js_freq_saved_format(&s, buf, 10), -ENOSPC);
	assert_int_equal(js_freq_saved_parse("cpu=1\ngovernor=x\n", &p), -EINVAL);
	assert_int_equal(js_freq_saved_parse("cpu=1\ngovernor=a b\nmin_khz=1\nmax_khz=2\n"
					     "setspeed_khz=0\n", &p), -EINVAL);
	assert_int_equal(js_freq_saved_parse("cpu=1\ngovernor=g\nmin_khz=5\nmax_khz=2\n"
					     "setspeed_khz=0\n", &p), -EINVAL);
	assert_int_equal(js_freq_saved_parse("cpu=1\ngovernor=g\nmin_khz=1\nmax_khz=2\n"
					     "setspeed_khz=0\nextra=1\n", &p), -EINVAL);
	assert_int_equal(js_freq_saved_parse("cpu=1\ngovernor=g\nmin_khz=1\nmax_khz=2\n"
					     "setspeed_khz=0\n", &p), 0);
	s.governor[0] = '\0';
	assert_int_equal(js_freq_saved_format(&s, buf, sizeof(buf)), -EINVAL);
}

static void test_acquire_release(void **state)
{
	struct fx *f = *state;
	struct js_freq_saved s;
	struct stat st;
	bool restored = false;
	char owners[1200];

	assert_int_equal(js_freq_acquire(f->state, f->sys, 0, "job1.0", 0), 0);
	/* created 0700 */
	assert_int_equal(stat(f->state, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	assert_int_equal(js_freq_saved_read(f->state, 0, &s), 0);
	assert_string_equal(s.governor, "schedutil");
	assert_int_equal(s.min_khz, 800000);
	assert_int_equal(s.max_khz, 2400000);
	snprintf(owners, sizeof(owners), "%s/cpu0.owners", f->state);
	assert_true(exists(owners, "job1.0"));

	apply(f, 0, 1200000);
	expect_cpu(f, 0, "userspace", "800000", "2400000");

	assert_int_equal(js_freq_release(f->state, f->sys, 0, "job1.0", &restored), 0);
	assert_true(restored);
	expect_cpu(f, 0, "schedutil", "800000", "2400000");
	assert_false(exists(f->state, "cpu0.orig"));
	assert_int_equal(js_freq_saved_read(f->state, 0, &s), -ENOENT);
	/* releasing again: not an owner */
	assert_int_equal(js_freq_release(f->state, f->sys, 0, "job1.0", &restored), -ENOENT);
	assert_false(restored);
	/* bad owner names */
	assert_int_equal(js_freq_acquire(f->state, f->sys, 0, "../x", 0), -EINVAL);
	assert_int_equal(js_freq_acquire(f->state, f->sys, 0, "..", 0), -EINVAL);
	assert_int_equal(js_freq_acquire(f->state, f->sys, 0, "", 0), -EINVAL);
	assert_int_equal(js_freq_acquire(f->state, f->sys, 9, "a", 0), -ENOENT);
}

/* pstate: apply lowered min and max; restore puts max back before min. */
static void test_restore_pstate(void **state)
{
	struct fx *f = *state;
	bool restored;

	tt_cpufile(f->sys, 2, "scaling_min_freq", "1500000\n");
	assert_int_equal(js_freq_acquire(f->state, f->sys, 2, "a", 0), 0);
	apply(f, 2, 1000000);
	expect_cpu(f, 2, "powersave", "1000000", "1000000");
	assert_int_equal(js_freq_release(f->state, f->sys, 2, "a", &restored), 0);
	assert_true(restored);
	expect_cpu(f, 2, "powersave", "1500000", "2400000");
}

/* Original userspace governor with a setspeed: restored too. */
static void test_restore_userspace_setspeed(void **state)
{
	struct fx *f = *state;
	bool restored;
	char buf[64];

	tt_cpufile(f->sys, 1, "scaling_governor", "userspace\n");
	tt_cpufile(f->sys, 1, "scaling_setspeed", "1800000\n");
	assert_int_equal(js_freq_acquire(f->state, f->sys, 1, "a", 0), 0);
	apply(f, 1, 900000);
	assert_string_equal(tt_cpuread(f->sys, 1, "scaling_setspeed", buf, sizeof(buf)), "900000");
	assert_int_equal(js_freq_release(f->state, f->sys, 1, "a", &restored), 0);
	assert_true(restored);
	assert_string_equal(tt_cpuread(f->sys, 1, "scaling_setspeed", buf, sizeof(buf)), "1800000");
	assert_string_equal(tt_cpuread(f->sys, 1, "scaling_governor", buf, sizeof(buf)), "userspace");
}

static void test_two_owners(void **state)
{
	struct fx *f = *state;
	bool restored = true;

	assert_int_equal(js_freq_acquire(f->state, f->sys, 0, "stepA", 0), 0);
	apply(f, 0, 1000000);
	assert_int_equal(js_freq_acquire(f->state, f->sys, 0, "stepB", 0), 0);
	assert_int_equal(js_freq_release(f->state, f->sys, 0, "stepA", &restored), 0);
	assert_false(restored);
	expect_cpu(f, 0, "userspace", "800000", "2400000");
	assert_true(exists(f->state, "cpu0.orig"));
	assert_int_equal(js_freq_release(f->state, f->sys, 0, "stepB", &restored), 0);
	assert_true(restored);
	expect_cpu(f, 0, "schedutil", "800000", "2400000");
}

/* A backup is never overwritten: a later acquire keeps the original. */
static void test_never_overwrite(void **state)
{
	struct fx *f = *state;
	struct js_freq_saved s;
	bool restored;
	char path[1200], before[512], after[512];

	tt_cpufile(f->sys, 2, "scaling_max_freq", "2200000\n");
	assert_int_equal(js_freq_acquire(f->state, f->sys, 2, "first", 0), 0);
	snprintf(path, sizeof(path), "%s/cpu2.orig", f->state);
	tt_read(path, before, sizeof(before));
	apply(f, 2, 1100000);
	assert_int_equal(js_freq_acquire(f->state, f->sys, 2, "second", 0), 0);
	tt_read(path, after, sizeof(after));
	assert_string_equal(before, after);
	assert_int_equal(js_freq_saved_read(f->state, 2, &s), 0);
	assert_int_equal(s.max_khz, 2200000);
	/* even when every owner is gone and the file is left behind */
	assert_int_equal(js_freq_release(f->state, f->sys, 2, "first", &restored), 0);
	assert_int_equal(js_freq_release(f->state, f->sys, 2, "second", &restored), 0);
	assert_true(restored);
	expect_cpu(f, 2, "powersave", "800000", "2200000");
}

/* A child takes CPUs, changes them and dies without releasing; a recover in
 * another process (knowing nothing but the files) restores them. */
static void test_crash_then_recover(void **state)
{
	struct fx *f = *state;
	pid_t pid;
	int st, n = -1;
	bool restored;

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct js_cpufreq c;
		uint32_t rb;
		bool ign;

		if (js_freq_acquire(f->state, f->sys, 0, "job7.0", 0) ||
		    js_freq_acquire(f->state, f->sys, 2, "job7.0", 0) ||
		    js_cpufreq_read(f->sys, 0, &c) || js_freq_apply(f->sys, &c, 1000000, &rb, &ign) ||
		    js_cpufreq_read(f->sys, 2, &c) || js_freq_apply(f->sys, &c, 900000, &rb, &ign))
			_exit(1);
		_exit(0); /* crash: no release */
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	expect_cpu(f, 0, "userspace", "800000", "2400000");
	expect_cpu(f, 2, "powersave", "800000", "900000");

	/* a live owner on cpu 1 (this process) must survive recover */
	assert_int_equal(js_freq_acquire(f->state, f->sys, 1, "live", 0), 0);
	apply(f, 1, 1500000);

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int k = -1;

		if (js_freq_recover(f->state, f->sys, false, &k) != 0)
			_exit(1);
		_exit(k);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 2);
	expect_cpu(f, 0, "schedutil", "800000", "2400000");
	expect_cpu(f, 2, "powersave", "800000", "2400000");
	assert_false(exists(f->state, "cpu0.orig"));
	assert_false(exists(f->state, "cpu2.orig"));
	assert_true(exists(f->state, "cpu1.orig"));
	expect_cpu(f, 1, "userspace", "800000", "2400000");

	/* nothing left to do */
	assert_int_equal(js_freq_recover(f->state, f->sys, false, &n), 0);
	assert_int_equal(n, 0);
	/* force drops live owners too */
	assert_int_equal(js_freq_recover(f->state, f->sys, true, &n), 0);
	assert_int_equal(n, 1);
	expect_cpu(f, 1, "schedutil", "800000", "2400000");
	assert_int_equal(js_freq_release(f->state, f->sys, 1, "live", &restored), -ENOENT);
}

/* An enclosing owner (a batch step) lowered the CPU, then died without
 * releasing it (its slurmstepd killed) while an inner owner (its srun step)
 * runs. The inner one registered at the lowered settings (entry), keeps the
 * true original as the backup, and, being the last live owner, restores the
 * original at its release: the dead owner does not hold the CPU. */
static void test_entry_and_dead_enclosing_owner(void **state)
{
	struct fx *f = *state;
	struct js_freq_saved saved, entry;
	int go[2], ready[2], st;
	char ch;
	pid_t pid;
	bool restored = false;

	assert_int_equal(pipe(go), 0);
	assert_int_equal(pipe(ready), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct js_cpufreq c;
		uint32_t rb;
		bool ign;

		close(go[1]);
		close(ready[0]);
		if (js_freq_acquire(f->state, f->sys, 2, "job8.batch", 0) ||
		    js_cpufreq_read(f->sys, 2, &c) || js_freq_apply(f->sys, &c, 1200000, &rb, &ign))
			_exit(1);
		if (write(ready[1], "r", 1) != 1 || read(go[0], &ch, 1) < 0)
			_exit(1);
		_exit(0); /* killed while the inner owner runs: no release */
	}
	close(go[0]);
	close(ready[1]);
	assert_int_equal(read(ready[0], &ch, 1), 1);
	assert_int_equal(js_freq_acquire_entry(f->state, f->sys, 2, "job8.0", 0, &saved, &entry), 0);
	assert_int_equal(saved.max_khz, 2400000);
	assert_int_equal(entry.max_khz, 1200000);
	assert_string_equal(entry.governor, "powersave");
	close(go[1]);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_int_equal(js_freq_release(f->state, f->sys, 2, "job8.0", &restored), 0);
	assert_true(restored);
	expect_cpu(f, 2, "powersave", "800000", "2400000");
	assert_false(exists(f->state, "cpu2.orig"));
	close(ready[0]);
}

/* Issue 23, defect 2, as the plugin calls the journal: the batch step owns
 * cpu1 at its original clock (io-dvfs, between phases); an srun step's
 * slurmstepd registers, caps the clock (a write phase, 0.85) and dies. The
 * next srun step first recovers (own_cpu_saved -> js_freq_recover, not
 * forced), then registers: the dead step's cap is undone at once, back to
 * what the live batch step expects, and the new step's entry is that. */
static void test_dead_inner_owner_is_undone_for_the_live_one(void **state)
{
	struct fx *f = *state;
	struct js_freq_saved saved, entry;
	bool restored = true;
	pid_t pid;
	int st, n = -1;

	assert_int_equal(js_freq_acquire_entry(f->state, f->sys, 1, "job7.batch", 0, &saved, &entry), 0);
	assert_int_equal(entry.max_khz, 2400000);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (js_freq_acquire_entry(f->state, f->sys, 1, "job7.0", 0, &saved, &entry) ||
		    entry.max_khz != 2400000)
			_exit(1);
		tt_cpufile(f->sys, 1, "scaling_max_freq", "2040000"); /* its phase cap */
		_exit(0); /* killed: no release */
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	expect_cpu(f, 1, "schedutil", "800000", "2040000");
	/* the next srun step on the CPU */
	assert_int_equal(js_freq_recover(f->state, f->sys, false, &n), 0);
	expect_cpu(f, 1, "schedutil", "800000", "2400000");
	assert_int_equal(js_freq_acquire_entry(f->state, f->sys, 1, "job7.1", 0, &saved, &entry), 0);
	assert_int_equal(entry.max_khz, 2400000);
	assert_int_equal(saved.max_khz, 2400000);
	assert_int_equal(js_freq_release(f->state, f->sys, 1, "job7.1", &restored), 0);
	assert_false(restored); /* the batch step still owns it */
	assert_true(exists(f->state, "cpu1.orig"));
	assert_int_equal(js_freq_release(f->state, f->sys, 1, "job7.batch", &restored), 0);
	assert_true(restored);
	expect_cpu(f, 1, "schedutil", "800000", "2400000");
}

/* The same found by another path: no recover, the new step registers at
 * once (acquire finds the dead owner) and gets the batch step's clock
 * (fixed: 1.44 GHz) as its entry. */
static void test_dead_inner_owner_found_at_acquire(void **state)
{
	struct fx *f = *state;
	struct js_freq_saved saved, entry;
	bool restored;
	pid_t pid;
	int st;

	assert_int_equal(js_freq_acquire_entry(f->state, f->sys, 1, "job7.batch", 0, &saved, &entry), 0);
	tt_cpufile(f->sys, 1, "scaling_max_freq", "1440000"); /* fixed:0.6 */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (js_freq_acquire_entry(f->state, f->sys, 1, "job7.0", 0, &saved, &entry) ||
		    entry.max_khz != 1440000)
			_exit(1);
		tt_cpufile(f->sys, 1, "scaling_max_freq", "1200000");
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_int_equal(js_freq_acquire_entry(f->state, f->sys, 1, "job7.1", 0, &saved, &entry), 0);
	assert_int_equal(entry.max_khz, 1440000);
	expect_cpu(f, 1, "schedutil", "800000", "1440000");
	assert_int_equal(js_freq_release(f->state, f->sys, 1, "job7.1", &restored), 0);
	assert_int_equal(js_freq_release(f->state, f->sys, 1, "job7.batch", &restored), 0);
	assert_true(restored);
	expect_cpu(f, 1, "schedutil", "800000", "2400000");
}

/* A step that registered after the dead one (B inside the batch step, above
 * the dead A) took A's cap as its entry and returns to it at its end; its
 * release finds A dead and gives the batch step back its clock. */
static void test_dead_owner_below_a_live_one(void **state)
{
	struct fx *f = *state;
	struct js_freq_saved saved, entry;
	bool restored;
	int go[2], ready[2], st;
	char c;
	pid_t pid;

	assert_int_equal(js_freq_acquire_entry(f->state, f->sys, 1, "job7.batch", 0, &saved, &entry), 0);
	tt_cpufile(f->sys, 1, "scaling_max_freq", "1440000");
	assert_int_equal(pipe(go), 0);
	assert_int_equal(pipe(ready), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(go[1]);
		close(ready[0]);
		if (js_freq_acquire_entry(f->state, f->sys, 1, "job7.0", 0, &saved, &entry))
			_exit(1);
		tt_cpufile(f->sys, 1, "scaling_max_freq", "1200000");
		if (write(ready[1], "r", 1) != 1 || read(go[0], &c, 1) < 0)
			_exit(1);
		_exit(0); /* killed while B runs */
	}
	close(go[0]);
	close(ready[1]);
	assert_int_equal(read(ready[0], &c, 1), 1);
	assert_int_equal(js_freq_acquire_entry(f->state, f->sys, 1, "job7.1", 0, &saved, &entry), 0);
	assert_int_equal(entry.max_khz, 1200000); /* A was alive: its cap is in force */
	close(go[1]);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* B's end: back to its entry through its own descriptors, then release */
	tt_cpufile(f->sys, 1, "scaling_max_freq", "1200000");
	assert_int_equal(js_freq_release(f->state, f->sys, 1, "job7.1", &restored), 0);
	assert_false(restored);
	expect_cpu(f, 1, "schedutil", "800000", "1440000"); /* the batch step's fixed clock */
	assert_int_equal(js_freq_release(f->state, f->sys, 1, "job7.batch", &restored), 0);
	assert_true(restored);
	expect_cpu(f, 1, "schedutil", "800000", "2400000");
	close(ready[0]);
}

/* Issue 23, defect 8: one clock domain, one key. policy0 covers cpu0 and
 * cpu1 (cpuN/cpufreq -> ../cpufreq/policy0). A step saves the domain and
 * caps it; then cpu0 is unplugged (its cpufreq link gone, as the kernel
 * does) and a second step, which can read only cpu1, takes the same domain:
 * it must find the same backup (key: the policy), not save the first step's
 * cap as a second "original"; the last release restores through policy0. */
static void policy_tree(const char *sys)
{
	char pol[1200], link[1200], path[1300];

	tt_cpufreq(sys, 5, 1); /* build the files in cpu5/cpufreq, then move them */
	snprintf(pol, sizeof(pol), "%s/devices/system/cpu/cpufreq", sys);
	tt_mkdirs(pol);
	snprintf(path, sizeof(path), "%s/devices/system/cpu/cpu5/cpufreq", sys);
	snprintf(pol, sizeof(pol), "%s/devices/system/cpu/cpufreq/policy0", sys);
	assert_int_equal(rename(path, pol), 0);
	for (int c = 0; c < 2; c++) {
		snprintf(link, sizeof(link), "%s/devices/system/cpu/cpu%d/cpufreq", sys, c);
		tt_rmrf(strdup(link));
		assert_int_equal(symlink("../cpufreq/policy0", link), 0);
	}
}

static void test_domain_key_survives_an_unplugged_cpu(void **state)
{
	struct fx *f = *state;
	struct js_cpufreq c0, c1;
	struct js_freq_saved saved, entry;
	char link[1200], buf[64];
	bool restored = true;

	policy_tree(f->sys);
	assert_int_equal(js_cpufreq_read(f->sys, 0, &c0), 0);
	assert_int_equal(js_freq_domain_key(&c0), 0);
	assert_int_equal(js_freq_acquire_entry(f->state, f->sys, js_freq_domain_key(&c0), "job5.0", 0,
					       &saved, &entry), 0);
	tt_cpufile(f->sys, 1, "scaling_max_freq", "1200000"); /* its cap, on the domain */
	snprintf(link, sizeof(link), "%s/devices/system/cpu/cpu0/cpufreq", f->sys);
	assert_int_equal(unlink(link), 0); /* cpu0 unplugged */
	assert_int_equal(js_cpufreq_read(f->sys, 0, &c0), -ENOENT);
	assert_int_equal(js_cpufreq_read(f->sys, 1, &c1), 0);
	assert_int_equal(js_freq_domain_key(&c1), 0); /* not 1: the lowest readable CPU */
	assert_int_equal(js_freq_acquire_entry(f->state, f->sys, js_freq_domain_key(&c1), "job6.0", 0,
					       &saved, &entry), 0);
	assert_int_equal(saved.max_khz, 2400000); /* the true original, not job5's cap */
	assert_int_equal(entry.max_khz, 1200000);
	assert_false(exists(f->state, "cpu1.orig"));
	assert_int_equal(js_freq_release(f->state, f->sys, 0, "job5.0", &restored), 0);
	assert_false(restored);
	assert_int_equal(js_freq_release(f->state, f->sys, 0, "job6.0", &restored), 0);
	assert_true(restored);
	assert_string_equal(tt_cpuread(f->sys, 1, "scaling_max_freq", buf, sizeof(buf)), "2400000");
	assert_false(exists(f->state, "cpu0.orig"));
}

/* An owner that died but was never reaped (a zombie: what a SIGKILLed
 * slurmstepd becomes under an init that does not reap) owns nothing. */
static void test_zombie_owner_is_dead(void **state)
{
	struct fx *f = *state;
	int pfd[2], st, n = -1;
	char c;
	pid_t pid;

	assert_int_equal(pipe(pfd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(pfd[0]);
		if (js_freq_acquire(f->state, f->sys, 0, "job9.0", 0) == 0)
			apply(f, 0, 1000000);
		_exit(0);
	}
	close(pfd[1]);
	assert_int_equal(read(pfd[0], &c, 1), 0); /* child gone, not yet reaped */
	close(pfd[0]);
	for (int i = 0; i < 200; i++) { /* until the kernel marks it a zombie */
		char path[64], buf[512];
		FILE *fp;

		snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
		fp = fopen(path, "r");
		assert_non_null(fp);
		assert_non_null(fgets(buf, sizeof(buf), fp));
		fclose(fp);
		if (strstr(buf, ") Z "))
			break;
		usleep(5000);
	}
	expect_cpu(f, 0, "userspace", "800000", "2400000");
	assert_int_equal(js_freq_recover(f->state, f->sys, false, &n), 0);
	assert_int_equal(n, 1);
	expect_cpu(f, 0, "schedutil", "800000", "2400000");
	assert_int_equal(waitpid(pid, &st, 0), pid);
}

/* Same pid, different start time: the pid was reused, the owner is gone. */
static void test_pid_reuse(void **state)
{
	struct fx *f = *state;
	char path[1200], buf[128];
	unsigned long long stt;
	int pid, n = -1;

	assert_int_equal(js_freq_acquire(f->state, f->sys, 0, "old", 0), 0);
	apply(f, 0, 1000000);
	snprintf(path, sizeof(path), "%s/cpu0.owners/old", f->state);
	tt_read(path, buf, sizeof(buf));
	assert_int_equal(sscanf(buf, "%d %llu", &pid, &stt), 2);
	assert_int_equal(pid, getpid());
	tt_writef(path, "%d %llu\n", pid, stt + 1);
	assert_int_equal(js_freq_recover(f->state, f->sys, false, &n), 0);
	assert_int_equal(n, 1);
	expect_cpu(f, 0, "schedutil", "800000", "2400000");
}

static void test_unsafe_state_dirs(void **state)
{
	struct fx *f = *state;
	char dir[1200], link[1200];

	/* group/world-writable state dir */
	assert_int_equal(mkdir(f->state, 0700), 0);
	assert_int_equal(chmod(f->state, 0777), 0);
	assert_int_equal(js_freq_acquire(f->state, f->sys, 0, "a", 0), -EPERM);
	assert_int_equal(chmod(f->state, 0720), 0);
	assert_int_equal(js_freq_acquire(f->state, f->sys, 0, "a", 0), -EPERM);
	/* owned by someone else */
	assert_int_equal(chmod(f->state, 0700), 0);
	assert_int_equal(chown(f->state, 65534, 65534), 0);
	assert_int_equal(js_freq_acquire(f->state, f->sys, 0, "a", 0), -EPERM);
	assert_int_equal(js_freq_recover(f->state, f->sys, true, NULL), -EPERM);
	assert_false(exists(f->state, "lock"));
	/* a symlink to a good dir is refused */
	snprintf(dir, sizeof(dir), "%s/real", f->tmp);
	snprintf(link, sizeof(link), "%s/link", f->tmp);
	assert_int_equal(mkdir(dir, 0700), 0);
	assert_int_equal(symlink(dir, link), 0);
	assert_int_equal(js_freq_acquire(link, f->sys, 0, "a", 0), -EPERM);
	/* missing dir under a world-writable parent is not created */
	snprintf(dir, sizeof(dir), "%s/open", f->tmp);
	assert_int_equal(mkdir(dir, 0777), 0);
	assert_int_equal(chmod(dir, 01777), 0);
	snprintf(link, sizeof(link), "%s/open/state", f->tmp);
	assert_int_equal(js_freq_acquire(link, f->sys, 0, "a", 0), -EPERM);
	assert_false(exists(dir, "state"));
	/* relative paths are refused */
	assert_int_equal(js_freq_acquire("state", f->sys, 0, "a", 0), -EINVAL);
	/* nothing changed and no backup anywhere */
	expect_cpu(f, 0, "schedutil", "800000", "2400000");
	assert_false(exists(f->tmp, "real/cpu0.orig"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_saved_format_parse),
		cmocka_unit_test_setup_teardown(test_acquire_release, setup, teardown),
		cmocka_unit_test_setup_teardown(test_restore_pstate, setup, teardown),
		cmocka_unit_test_setup_teardown(test_restore_userspace_setspeed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_two_owners, setup, teardown),
		cmocka_unit_test_setup_teardown(test_entry_and_dead_enclosing_owner, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dead_inner_owner_is_undone_for_the_live_one, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dead_inner_owner_found_at_acquire, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dead_owner_below_a_live_one, setup, teardown),
		cmocka_unit_test_setup_teardown(test_domain_key_survives_an_unplugged_cpu, setup, teardown),
		cmocka_unit_test_setup_teardown(test_never_overwrite, setup, teardown),
		cmocka_unit_test_setup_teardown(test_crash_then_recover, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pid_reuse, setup, teardown),
		cmocka_unit_test_setup_teardown(test_zombie_owner_is_dead, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unsafe_state_dirs, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
