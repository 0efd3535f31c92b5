/* Meter: wrap-safe accumulation, per-zone ranges, bad readings, too-long
 * gaps, intervals, and the background sampler thread. */
#include <dirent.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <cmocka.h>

#include "joulestep/energy.h"
#include "js_internal.h"
#include "test_tree.h"

struct fx {
	char *root;
	struct js_energy *e;
	struct js_meter *m; /* stopped by teardown even when an assert fails */
};

/* One package (max PKG_MAX_UJ at 150 W) with a dram subzone (DRAM_MAX_UJ). */
static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct js_energy_opts o = {0}; /* every field: the struct grows (papi_components) */
	char why[512];

	f->root = tt_mkdtemp();
	tt_rapl_intel(f->root, 1, 1, 1);
	tt_set_energy(f->root, 0, -1, 0);
	tt_set_energy(f->root, 0, 0, 0);
	o.sysfs_root = f->root;
	o.order = "sysfs";
	if (js_energy_open(&o, &f->e, why, sizeof(why)) != 0)
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	js_meter_stop(f->m);
	js_energy_close(f->e);
	tt_rmrf(f->root);
	free(f);
	return 0;
}

static void test_accumulate_and_wrap(void **state)
{
	struct fx *f = *state;
	struct js_meter *m;
	struct js_snapshot a, b, c;
	struct js_interval iv;

	assert_int_equal(js_meter_start(f->e, 0, false, &m), 0);
	f->m = m;
	assert_int_equal(js_meter_snapshot(m, &a), 0);
	assert_int_equal(a.nzones, 2);
	assert_int_equal(a.energy_uj[0], 0);

	tt_set_energy(f->root, 0, -1, 5000000);
	tt_set_energy(f->root, 0, 0, 1000000);
	assert_int_equal(js_meter_snapshot(m, &b), 0);
	assert_int_equal(b.energy_uj[0], 5000000);
	assert_int_equal(b.energy_uj[1], 1000000);
	assert_int_equal(b.energy_cpu_uj, 5000000);
	assert_int_equal(b.energy_dram_uj, 1000000);

	/* both wrap, each at its own range */
	/* (small deltas: a wrap must be physically possible in the time
	 * between two snapshots, see test_torn_read_not_a_wrap) */
	tt_set_energy(f->root, 0, -1, PKG_MAX_UJ - 10);
	tt_set_energy(f->root, 0, 0, DRAM_MAX_UJ - 10);
	js_meter_snapshot(m, &c);
	tt_set_energy(f->root, 0, -1, 40);
	tt_set_energy(f->root, 0, 0, 90);
	js_meter_snapshot(m, &c);
	assert_int_equal(c.err[0], 0);
	assert_int_equal(c.err[1], 0);
	assert_int_equal(c.energy_uj[0], PKG_MAX_UJ + 40);
	assert_int_equal(c.energy_uj[1], DRAM_MAX_UJ + 90);
	assert_int_equal(c.wraps[0], 1);
	assert_int_equal(c.wraps[1], 1);
	assert_int_equal(c.uncertain[0] + c.uncertain[1], 0);
	js_interval_of(f->e, &b, &c, &iv);
	assert_int_equal(iv.nzones, 2);
	assert_int_equal(iv.energy_uj[0], PKG_MAX_UJ + 40 - 5000000);
	assert_int_equal(iv.energy_uj[1], DRAM_MAX_UJ + 90 - 1000000);
	assert_int_equal(iv.energy_cpu_uj, iv.energy_uj[0]);
	assert_int_equal(iv.energy_dram_uj, iv.energy_uj[1]);
	assert_int_equal(iv.energy_total_uj, iv.energy_uj[0] + iv.energy_uj[1]);
	assert_int_equal(iv.wraps[0], 1);
	assert_false(iv.wrap_uncertain);
	assert_true(c.mono_ns >= b.mono_ns);
	assert_int_equal(iv.duration_ns, c.mono_ns - b.mono_ns);
	/* a wrap of up to half the range is accepted even in "no time" (the
	 * fake hardware simulates seconds in microseconds) */
	tt_set_energy(f->root, 0, -1, PKG_MAX_UJ - 10000000000ULL);
	js_meter_snapshot(m, &c);
	tt_set_energy(f->root, 0, -1, 10000000000ULL);
	js_meter_snapshot(m, &c);
	assert_int_equal(c.err[0], 0);
	assert_int_equal(c.wraps[0], 2);
	assert_int_equal(c.energy_uj[0], 2 * PKG_MAX_UJ + 10000000000ULL);
	js_meter_stop(m);
	f->m = NULL;
}

/* Bad readings change nothing; the next good one resumes from the last good
 * value (no bogus delta, no false wrap). */
static void test_bad_readings_resume(void **state)
{
	struct fx *f = *state;
	struct js_meter *m;
	struct js_snapshot s, s2;
	struct js_interval iv;
	char path[1024];

	tt_zone_file(path, sizeof(path), f->root, 0, -1, "energy_uj");
	assert_int_equal(js_meter_start(f->e, 0, false, &m), 0);
	f->m = m;
	tt_set_energy(f->root, 0, -1, 1000);
	js_meter_snapshot(m, &s);
	assert_int_equal(s.energy_uj[0], 1000);

	static const char *const bad[] = {"garbage\n", "", "\n", "99999999999999999999999\n",
					  "262143328851\n", "-3\n"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		tt_write(path, bad[i]);
		js_meter_snapshot(m, &s);
		assert_int_equal(s.energy_uj[0], 1000);
		assert_true(s.err[0] < 0);
		assert_int_equal(s.err[1], 0);
		assert_int_equal(s.wraps[0], 0);
	}
	js_interval_of(f->e, &s, &s, &iv);
	assert_true(iv.wrap_uncertain); /* the reading at s failed */

	tt_set_energy(f->root, 0, -1, 1500);
	js_meter_snapshot(m, &s2);
	assert_int_equal(s2.err[0], 0);
	assert_int_equal(s2.energy_uj[0], 1500);
	assert_int_equal(s2.wraps[0], 0);
	assert_int_equal(s2.uncertain[0], 0); /* gap far shorter than the wrap time */
	js_meter_stop(m);
	f->m = NULL;
}

/* A counter that goes down by more than max power allows in the elapsed time
 * is a garbled (torn) reading, not a wrap: dropped, then resumed. */
static void test_torn_read_not_a_wrap(void **state)
{
	struct fx *f = *state;
	struct js_meter *m;
	struct js_snapshot s;

	assert_int_equal(js_meter_start(f->e, 0, false, &m), 0);
	f->m = m;
	tt_set_energy(f->root, 0, -1, 500);
	js_meter_snapshot(m, &s);
	assert_int_equal(s.energy_uj[0], 500);
	/* "2" of "2500" being written: a wrap would mean ~262 kJ in microseconds */
	tt_set_energy(f->root, 0, -1, 2);
	js_meter_snapshot(m, &s);
	assert_int_equal(s.err[0], -ERANGE);
	assert_int_equal(s.energy_uj[0], 500);
	assert_int_equal(s.wraps[0], 0);
	tt_set_energy(f->root, 0, -1, 2500);
	js_meter_snapshot(m, &s);
	assert_int_equal(s.err[0], 0);
	assert_int_equal(s.energy_uj[0], 2500);
	assert_int_equal(s.wraps[0], 0);
	js_meter_stop(m);
	f->m = NULL;
}

/* Issue 11, "Counters": a counter that goes back more than once (a reset, a
 * zone re-registered) is not a torn read: the zone is uncertain for every
 * interval across it, and followed from the new value on. Before, each low
 * reading was dropped until the counter passed its old value again, and the
 * energy in between was silently lost (no uncertainty). */
static void test_counter_reset_uncertain(void **state)
{
	struct fx *f = *state;
	struct js_meter *m;
	struct js_snapshot a, mid, b, c;
	struct js_interval iv;

	assert_int_equal(js_meter_start(f->e, 0, false, &m), 0);
	f->m = m;
	tt_set_energy(f->root, 0, -1, 1000000);
	js_meter_snapshot(m, &a);
	assert_int_equal(a.energy_uj[0], 1000000);
	tt_set_energy(f->root, 0, -1, 100);  /* back, once: a garbled reading */
	js_meter_snapshot(m, &mid);
	assert_int_equal(mid.err[0], -ERANGE);
	assert_int_equal(mid.uncertain[0], 0);
	tt_set_energy(f->root, 0, -1, 200);  /* back again: a reset */
	js_meter_snapshot(m, &mid);
	assert_int_equal(mid.uncertain[0], 1);
	assert_int_equal(mid.err[0], 0);
	assert_int_equal(mid.wraps[0], 0);
	tt_set_energy(f->root, 0, -1, 2000000); /* past the old value */
	js_meter_snapshot(m, &b);
	assert_int_equal(b.err[0], 0);
	assert_int_equal(b.energy_uj[0], 1000000 + 2000000 - 200); /* followed from 200 */
	js_interval_of(f->e, &a, &b, &iv);
	assert_true(iv.wrap_uncertain);
	assert_true(iv.zone_uncertain[0]);
	assert_false(iv.zone_uncertain[1]);  /* the dram zone is exact */
	assert_true(iv.cpu_uncertain);
	assert_false(iv.dram_uncertain);
	/* an interval after the reset is exact again */
	tt_set_energy(f->root, 0, -1, 2000500);
	js_meter_snapshot(m, &c);
	js_interval_of(f->e, &b, &c, &iv);
	assert_false(iv.wrap_uncertain);
	assert_int_equal(iv.energy_uj[0], 500);
	js_meter_stop(m);
	f->m = NULL;
}

/* A zone that disappears mid-step (CPU hotplug: its counter reads nothing
 * any more) is uncertain in every interval ending after it went, and in
 * the CPU sum; the other zones stay exact. */
static void test_zone_vanished_uncertain(void **state)
{
	struct fx *f = *state;
	struct js_meter *m;
	struct js_snapshot a, b;
	struct js_interval iv;
	char path[1024];

	tt_zone_file(path, sizeof(path), f->root, 0, -1, "energy_uj");
	assert_int_equal(js_meter_start(f->e, 0, false, &m), 0);
	f->m = m;
	tt_set_energy(f->root, 0, -1, 1000);
	tt_set_energy(f->root, 0, 0, 1000);
	js_meter_snapshot(m, &a);
	tt_set_energy(f->root, 0, -1, 5000);
	js_meter_snapshot(m, &b);
	tt_write(path, "");                  /* gone: reads return nothing */
	tt_set_energy(f->root, 0, 0, 3000);
	js_meter_snapshot(m, &b);
	js_meter_snapshot(m, &b);
	assert_true(b.err[0] < 0);
	js_interval_of(f->e, &a, &b, &iv);
	assert_true(iv.zone_uncertain[0]);
	assert_true(iv.cpu_uncertain);
	assert_false(iv.zone_uncertain[1]);
	assert_false(iv.dram_uncertain);
	assert_int_equal(iv.energy_dram_uj, 2000);
	js_meter_stop(m);
	f->m = NULL;
}

/* A zone that can wrap within 1 ms: a gap longer than that is uncertain. */
static void test_long_gap_uncertain(void **state)
{
	char *root = tt_mkdtemp();
	struct js_energy_opts o = {.sysfs_root = root, .order = "sysfs"};
	struct js_energy *e;
	struct js_meter *m;
	struct js_snapshot a, b;
	struct js_interval iv;
	struct timespec ts = {0, 20 * 1000000L};
	char why[256];

	(void)state;
	tt_zone(root, "intel-rapl", 0, -1, "package-0", 0, PKG_MAX_UJ, 150000000, 1);
	/* 1 J range at 1 kW: wraps in 1 ms */
	tt_zone(root, "intel-rapl", 0, 0, "dram", 0, 1000000, 1000000000, 1);
	assert_int_equal(js_energy_open(&o, &e, why, sizeof(why)), 0);
	assert_int_equal(js_meter_start(e, 0, false, &m), 0);
	assert_int_equal(js_meter_period_ns(m), 1000000); /* floor: 1 ms */
	js_meter_snapshot(m, &a);
	nanosleep(&ts, NULL); /* only guarantees the gap exceeds 1 ms */
	tt_set_energy(root, 0, -1, 700);
	tt_set_energy(root, 0, 0, 300);
	js_meter_snapshot(m, &b);
	assert_int_equal(b.uncertain[1], 1);
	assert_int_equal(b.uncertain[0], 0);
	assert_int_equal(b.energy_uj[1], 300); /* a lower bound, flagged */
	assert_int_equal(b.energy_uj[0], 700);
	js_interval_of(e, &a, &b, &iv);
	assert_true(iv.wrap_uncertain);
	assert_true(iv.zone_uncertain[1]);
	assert_false(iv.zone_uncertain[0]);
	assert_true(iv.dram_uncertain);
	assert_false(iv.cpu_uncertain);
	js_meter_stop(m);
	js_energy_close(e);
	tt_rmrf(root);
}

static void wait_samples(struct js_meter *m, uint64_t more)
{
	uint64_t target = js_meter_nsamples(m) + more;
	struct timespec ts = {0, 1000000L};
	int i;

	for (i = 0; i < 20000 && js_meter_nsamples(m) < target; i++)
		nanosleep(&ts, NULL);
	assert_true(js_meter_nsamples(m) >= target);
}

/* Signals blocked in the sampler thread (it runs inside slurmstepd). */
static void check_sampler_sigmask(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *de;
	int checked = 0;
	pid_t self = (pid_t)gettid();

	assert_non_null(d);
	while ((de = readdir(d))) {
		char path[128], buf[4096], *p;
		unsigned long long blk;

		if (de->d_name[0] == '.' || atoi(de->d_name) == self)
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", de->d_name);
		if (strcmp(tt_read(path, buf, sizeof(buf)), "js-meter"))
			continue; /* e.g. a sanitizer's thread */
		snprintf(path, sizeof(path), "/proc/self/task/%s/status", de->d_name);
		tt_read(path, buf, sizeof(buf));
		p = strstr(buf, "SigBlk:");
		assert_non_null(p);
		blk = strtoull(p + 7, NULL, 16);
		assert_true(blk & (1ULL << (SIGTERM - 1)));
		assert_true(blk & (1ULL << (SIGINT - 1)));
		assert_true(blk & (1ULL << (SIGCHLD - 1)));
		assert_true(blk & (1ULL << (SIGUSR1 - 1)));
		assert_true(blk & (1ULL << (SIGALRM - 1)));
		checked++;
	}
	closedir(d);
	assert_int_equal(checked, 1);
}

/* The thread samples on its own: a wrap between two snapshots is caught
 * because the thread saw the counter near the top. */
static void test_sampler_thread(void **state)
{
	struct fx *f = *state;
	struct js_meter *m;
	struct js_snapshot s;
	sigset_t mask;

	assert_int_equal(js_meter_start(f->e, 2000000, true, &m), 0);
	f->m = m;
	assert_int_equal(js_meter_period_ns(m), 2000000);
	/* the caller's own mask is left unchanged */
	pthread_sigmask(SIG_SETMASK, NULL, &mask);
	assert_false(sigismember(&mask, SIGTERM));
	check_sampler_sigmask();

	tt_set_energy(f->root, 0, -1, PKG_MAX_UJ - 1000);
	wait_samples(m, 2);
	tt_set_energy(f->root, 0, -1, 500);
	wait_samples(m, 2);
	tt_set_energy(f->root, 0, -1, 2500);
	assert_int_equal(js_meter_snapshot(m, &s), 0);
	/* 0 -> max-1000 -> (wrap) 500 -> 2500 */
	assert_int_equal(s.energy_uj[0], PKG_MAX_UJ + 2500);
	assert_int_equal(s.wraps[0], 1);
	assert_int_equal(s.uncertain[0], 0);
	js_meter_stop(m);
	f->m = NULL;
}

/* Stop returns without waiting for the (long) period to end. */
static void test_stop_long_period(void **state)
{
	struct fx *f = *state;
	struct js_meter *m;

	assert_int_equal(js_meter_start(f->e, 0, true, &m), 0);
	f->m = m;
	/* half of dram's 65.7 s wrap time at the default 1 kW */
	/* dram: 65712999613 uJ at the default 1 kW wraps in 65.71 s; half that */
	assert_int_equal(js_meter_period_ns(m), DRAM_MAX_UJ / 2);
	js_meter_stop(m); /* would take ~33 s with a plain sleep */
	f->m = NULL;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_accumulate_and_wrap, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_readings_resume, setup, teardown),
		cmocka_unit_test_setup_teardown(test_torn_read_not_a_wrap, setup, teardown),
		cmocka_unit_test(test_long_gap_uncertain),
		cmocka_unit_test_setup_teardown(test_counter_reset_uncertain, setup, teardown),
		cmocka_unit_test_setup_teardown(test_zone_vanished_uncertain, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sampler_thread, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stop_long_period, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
