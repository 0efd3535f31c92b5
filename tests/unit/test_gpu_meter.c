/* The GPU meter (accounting/src/gpu_meter.c) on the NVML stand-in
 * (tests/fakehw/gpu): the GPUs of a fake tree written here draw a constant
 * power, so the truth between two times is that power times the time. */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "joulestep/gpu.h"
#include "test_tree.h"

#define MS (1000ULL * 1000)
#define POWER_MW 700000ULL /* idle 60 W + 640 W x load 1 at full clock */

static char lib[4096];

static uint64_t mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* n GPUs at full load since t0, counters updating every period_ms, each
 * out of step with the others (GPU i's updates shifted by i/n periods). */
static char *fake_gpus(int n, unsigned period_ms)
{
	char *root = tt_mkdtemp(), p[4200];
	uint64_t t0 = mono() - 1000 * MS;
	for (int i = 0; i < n; i++) {
		const char *kv[][2] = {{"vendor", "nvidia"}, {"name", "Fake H100"}, {"idle_mw", "60000"},
				       {"max_mw", "700000"}, {"max_mhz", "1980"}, {"min_mhz", "345"},
				       {"mem_mhz", "2619"}, {"counter", "1"}, {"mig", "0"},
				       {"lock_permission", "1"}, {"offset_mj", "0"}, {"wrap_mj", "0"},
				       {"locks", ""}, {"resets", ""}};
		snprintf(p, sizeof(p), "%s/gpu%d", root, i);
		tt_mkdirs(p);
		for (size_t k = 0; k < sizeof(kv) / sizeof(kv[0]); k++) {
			snprintf(p, sizeof(p), "%s/gpu%d/%s", root, i, kv[k][0]);
			tt_write(p, kv[k][1]);
		}
		snprintf(p, sizeof(p), "%s/gpu%d/uuid", root, i);
		tt_writef(p, "GPU-unit0000-0000-0000-0000-%012d", i);
		snprintf(p, sizeof(p), "%s/gpu%d/period_ms", root, i);
		tt_writef(p, "%u", period_ms);
		snprintf(p, sizeof(p), "%s/gpu%d/t0_ns", root, i);
		tt_writef(p, "%llu", (unsigned long long)(t0 + (uint64_t)i * period_ms * MS / (unsigned)n));
		snprintf(p, sizeof(p), "%s/gpu%d/load", root, i);
		tt_writef(p, "%llu 1.0\n", (unsigned long long)t0);
	}
	setenv("FAKEHW_GPU_ROOT", root, 1);
	return root;
}

static struct js_gpus *open_gpus(void)
{
	struct js_gpu_opts o = {.backend = "nvml", .lib = lib};
	struct js_gpus *g = NULL;
	char why[256];
	assert_int_equal(js_gpu_open(&o, &g, why, sizeof(why)), 0);
	return g;
}

/* Each GPU's energy between consecutive boundaries, against the truth:
 * each boundary off by at most one counter update period of its power, so
 * an interval (the difference of two) by at most two (GPU i's value was
 * placed by the polling of GPUs 0..i-1: 240-283 ms off at 100 ms). */
static void boundaries_within_one_update(unsigned period_ms, unsigned gap_ms)
{
	char *root = fake_gpus(8, period_ms);
	struct js_gpus *g = open_gpus();
	struct js_gpu_meter *m;
	enum { NB = 6 };
	struct js_gpu_snapshot sn[NB];
	uint64_t ticket[NB], at[NB];
	assert_int_equal(js_gpu_meter_start(g, 50 * MS, true, &m), 0);
	for (int k = 0; k < NB; k++) {
		sleep_ms(gap_ms + (unsigned)k * 7); /* boundaries at no fixed phase */
		at[k] = mono();
		assert_int_equal(js_gpu_meter_request(m, at[k], &ticket[k]), 0);
	}
	for (int k = 0; k < NB; k++)
		assert_int_equal(js_gpu_meter_result(m, ticket[k], true, &sn[k]), 0);
	for (int k = 1; k < NB; k++)
		for (size_t i = 0; i < 8; i++) {
			double truth = (double)POWER_MW * (double)(at[k] - at[k - 1]) / 1e6; /* mW x ns = 1e-6 uJ */
			double got = (double)(sn[k].energy_uj[i] - sn[k - 1].energy_uj[i]);
			double err_ms = (got - truth) / (double)POWER_MW; /* uJ / mW = ms */
			if (err_ms < -2.0 * period_ms || err_ms > 2.0 * period_ms)
				fail_msg("period %u ms, boundary %d, GPU %zu: off by %.1f ms of its power",
					 period_ms, k, i, err_ms);
		}
	js_gpu_meter_stop(m);
	js_gpu_close(g);
	tt_rmrf(root);
}

static void boundary_error_10ms(void **st)
{
	(void)st;
	boundaries_within_one_update(10, 40);
}

static void boundary_error_100ms(void **st)
{
	(void)st;
	boundaries_within_one_update(100, 150);
}

/* A request returns before any GPU is read for it: right after it, its
 * result is not there yet; it is, once the meter's thread has read on. */
static void request_never_waits(void **st)
{
	(void)st;
	char *root = fake_gpus(2, 100);
	struct js_gpus *g = open_gpus();
	struct js_gpu_meter *m;
	struct js_gpu_snapshot sn;
	uint64_t t;
	assert_int_equal(js_gpu_meter_start(g, 50 * MS, true, &m), 0);
	assert_int_equal(js_gpu_meter_request(m, mono(), &t), 0);
	assert_int_equal(js_gpu_meter_result(m, t, false, &sn), -EAGAIN);
	assert_int_equal(js_gpu_meter_result(m, t, true, &sn), 0);
	assert_int_equal(sn.n, 2);
	assert_int_equal(js_gpu_meter_result(m, t, false, &sn), -ENOENT); /* spent */
	js_gpu_meter_stop(m);
	js_gpu_close(g);
	tt_rmrf(root);
}

/* The sampler thread runs inside slurmstepd: it blocks every signal (a
 * SIGCHLD or SIGTERM meant for the host must not land on it), and it has a
 * name (ps -L). Found by that name under /proc/self/task. */
static void sampler_thread_blocks_signals(void **st)
{
	(void)st;
	char *root = fake_gpus(1, 10), path[300], buf[4096];
	struct js_gpus *g = open_gpus();
	struct js_gpu_meter *m;
	bool found = false;
	assert_int_equal(js_gpu_meter_start(g, 50 * MS, true, &m), 0);
	DIR *d = opendir("/proc/self/task");
	assert_non_null(d);
	for (struct dirent *de; (de = readdir(d));) {
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", de->d_name);
		if (de->d_name[0] == '.' || !tt_read(path, buf, sizeof(buf)) ||
		    strncmp(buf, "js-gpu-meter", 12))
			continue;
		found = true;
		snprintf(path, sizeof(path), "/proc/self/task/%s/status", de->d_name);
		assert_non_null(tt_read(path, buf, sizeof(buf)));
		char *b = strstr(buf, "SigBlk:");
		assert_non_null(b);
		unsigned long long mask = strtoull(b + 7, NULL, 16);
		assert_true(mask & (1ULL << (SIGCHLD - 1)));
		assert_true(mask & (1ULL << (SIGTERM - 1)));
		assert_true(mask & (1ULL << (SIGINT - 1)));
	}
	closedir(d);
	assert_true(found);
	js_gpu_meter_stop(m);
	js_gpu_close(g);
	tt_rmrf(root);
}

int main(int argc, char **argv)
{
	(void)argc;
	/* the stand-in sits beside this test: build/tests/fakehw */
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return 1;
	self[n] = 0;
	*strrchr(self, '/') = 0;
	snprintf(lib, sizeof(lib), "%s/fakehw/libnvidia-ml.so.1", self);
	(void)argv;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sampler_thread_blocks_signals),
		cmocka_unit_test(request_never_waits),
		cmocka_unit_test(boundary_error_10ms),
		cmocka_unit_test(boundary_error_100ms),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
