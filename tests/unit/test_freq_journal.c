/* The frequency journal on the step path (issue 8, defect 12): it issues no
 * fsync (cpufreq settings do not survive a reboot, so neither need the
 * journal's files), and a backup left by an earlier boot is dropped, never
 * replayed over what this boot set up.
 *
 * fsync is counted by interposition: this executable defines fsync() and
 * fdatasync(), which the statically linked library calls instead of libc's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <cmocka.h>

#include "joulestep/freq.h"
#include "test_tree.h"

static int g_fsyncs;

int fsync(int fd)
{
	g_fsyncs++;
	return (int)syscall(SYS_fsync, fd);
}

int fdatasync(int fd)
{
	g_fsyncs++;
	return (int)syscall(SYS_fdatasync, fd);
}

struct fx {
	char *tmp;
	char sys[1024];
	char state[1024];
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	f->tmp = tt_mkdtemp();
	snprintf(f->sys, sizeof(f->sys), "%s/sys", f->tmp);
	snprintf(f->state, sizeof(f->state), "%s/state", f->tmp);
	for (int c = 0; c < 4; c++)
		tt_cpufreq(f->sys, c, c % 2 == 0);
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

/* The counter itself counts (else the test below proves nothing). */
static void test_counter_counts(void **state)
{
	struct fx *f = *state;
	char p[1200];
	int fd;

	snprintf(p, sizeof(p), "%s/x", f->tmp);
	fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	g_fsyncs = 0;
	assert_int_equal(fsync(fd), 0);
	assert_int_equal(g_fsyncs, 1);
	close(fd);
}

/* 4 CPUs taken and given back: no fsync at all (was 5 per CPU at acquire
 * and 2 at release). */
static void test_acquire_release_issue_no_fsync(void **state)
{
	struct fx *f = *state;
	bool restored;

	g_fsyncs = 0;
	for (int c = 0; c < 4; c++)
		assert_int_equal(js_freq_acquire(f->state, f->sys, c, "job1.0", 0), 0);
	for (int c = 0; c < 4; c++) {
		assert_int_equal(js_freq_release(f->state, f->sys, c, "job1.0", &restored), 0);
		assert_true(restored);
	}
	assert_int_equal(g_fsyncs, 0);
	/* recovery with a dead owner: no fsync either */
	assert_int_equal(js_freq_acquire(f->state, f->sys, 0, "job2.0", 0), 0);
	char p[1200];
	snprintf(p, sizeof(p), "%s/cpu0.owners/job2.0", f->state);
	tt_writef(p, "%d 1\n", (int)getpid()); /* our pid, another start time: gone */
	int n = -1;
	g_fsyncs = 0;
	assert_int_equal(js_freq_recover(f->state, f->sys, false, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(g_fsyncs, 0);
}

static void boot_id(char *buf, size_t len)
{
	tt_read("/proc/sys/kernel/random/boot_id", buf, len);
}

/* A backup written during another boot (the node crashed while a step held
 * the CPU down, then rebooted): the hardware came up with this boot's
 * settings, so the backup is dropped without being replayed, even when an
 * owner of that boot looks alive (pid and start time can repeat across
 * boots). */
static void test_backup_of_another_boot_is_dropped(void **state)
{
	struct fx *f = *state;
	char p[1200], buf[64], me[128], boot[64];
	struct js_freq_saved s;
	unsigned long long stt;
	int n = -1, pid;

	boot_id(boot, sizeof(boot));
	snprintf(p, sizeof(p), "%s/cpu0.owners/job3.0", f->state);
	/* an owner entry that is alive: this process (take a real one first) */
	assert_int_equal(js_freq_acquire(f->state, f->sys, 0, "job3.0", 0), 0);
	tt_read(p, me, sizeof(me));
	assert_int_equal(sscanf(me, "%d %llu", &pid, &stt), 2);
	assert_int_equal(pid, getpid());
	/* the backup now claims another boot and other settings */
	snprintf(p, sizeof(p), "%s/cpu0.orig", f->state);
	tt_writef(p, "cpu=0\ngovernor=performance\nmin_khz=1000000\nmax_khz=1800000\n"
		     "setspeed_khz=0\nboot_id=00000000-0000-4000-8000-000000000000\n");
	assert_int_equal(js_freq_recover(f->state, f->sys, false, &n), 0);
	assert_int_equal(n, 0);                        /* nothing replayed */
	assert_string_equal(tt_cpuread(f->sys, 0, "scaling_governor", buf, sizeof(buf)), "schedutil");
	assert_string_equal(tt_cpuread(f->sys, 0, "scaling_max_freq", buf, sizeof(buf)), "2400000");
	assert_string_equal(tt_cpuread(f->sys, 0, "scaling_min_freq", buf, sizeof(buf)), "800000");
	assert_int_equal(js_freq_saved_read(f->state, 0, &s), -ENOENT);
	/* a new acquire saves this boot's settings */
	assert_int_equal(js_freq_acquire(f->state, f->sys, 0, "job4.0", 0), 0);
	assert_int_equal(js_freq_saved_read(f->state, 0, &s), 0);
	assert_int_equal(s.max_khz, 2400000);
	assert_string_equal(s.governor, "schedutil");
	assert_string_equal(s.boot_id, boot);
}

/* acquire over a stale backup (no recover in between) replaces it. */
static void test_acquire_replaces_a_stale_backup(void **state)
{
	struct fx *f = *state;
	char p[1200], boot[64];
	struct js_freq_saved s;

	boot_id(boot, sizeof(boot));
	snprintf(p, sizeof(p), "%s", f->state);
	tt_mkdirs(p);
	chmod(p, 0700);
	snprintf(p, sizeof(p), "%s/cpu1.orig", f->state);
	tt_writef(p, "cpu=1\ngovernor=powersave\nmin_khz=800000\nmax_khz=1500000\n"
		     "setspeed_khz=0\nboot_id=00000000-0000-4000-8000-000000000000\n");
	assert_int_equal(js_freq_acquire(f->state, f->sys, 1, "job5.0", 0), 0);
	assert_int_equal(js_freq_saved_read(f->state, 1, &s), 0);
	assert_int_equal(s.max_khz, 2400000);
	assert_string_equal(s.boot_id, boot);
	/* a backup of this boot is kept (never overwritten) */
	tt_cpufile(f->sys, 1, "scaling_max_freq", "1200000\n");
	assert_int_equal(js_freq_acquire(f->state, f->sys, 1, "job6.0", 0), 0);
	assert_int_equal(js_freq_saved_read(f->state, 1, &s), 0);
	assert_int_equal(s.max_khz, 2400000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_counter_counts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_acquire_release_issue_no_fsync, setup, teardown),
		cmocka_unit_test_setup_teardown(test_backup_of_another_boot_is_dropped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_acquire_replaces_a_stale_backup, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
