/* The GPU clock journal (accounting/src/gpustate.c over journal.c) on the
 * NVML and AMD SMI stand-ins (tests/fakehw/gpu). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "joulestep/gpu.h"
#include "test_tree.h"

static char libdir[4096];

struct fx {
	char *root;
	char state[1200], gpus[1200];
	struct js_gpus *g;
};

/* One fake GPU of vendor ("nvidia", "amd"); lock_permission 0: NVML
 * answers NO_PERMISSION to the lock and to its reset. */
static struct fx *fixture(const char *vendor, int lock_permission)
{
	struct fx *f = calloc(1, sizeof(*f));
	char p[1400], why[256];
	f->root = tt_mkdtemp();
	snprintf(f->state, sizeof(f->state), "%s/state", f->root);
	snprintf(f->gpus, sizeof(f->gpus), "%s/gpus/gpu0", f->root);
	tt_mkdirs(f->gpus);
	const char *kv[][2] = {{"vendor", vendor}, {"name", "Fake"}, {"uuid", "GPU-journal-0"},
			       {"t0_ns", "0"}, {"idle_mw", "60000"}, {"max_mw", "700000"},
			       {"max_mhz", "1980"}, {"min_mhz", "345"}, {"mem_mhz", "2619"},
			       {"period_ms", "10"}, {"counter", "1"}, {"mig", "0"},
			       {"offset_mj", "0"}, {"wrap_mj", "0"}, {"resolution_uj", "15.259"},
			       {"load", ""}, {"locks", ""}, {"resets", ""}};
	for (size_t k = 0; k < sizeof(kv) / sizeof(kv[0]); k++) {
		snprintf(p, sizeof(p), "%s/%s", f->gpus, kv[k][0]);
		tt_write(p, kv[k][1]);
	}
	snprintf(p, sizeof(p), "%s/lock_permission", f->gpus);
	tt_writef(p, "%d", lock_permission);
	snprintf(p, sizeof(p), "%s/gpus", f->root);
	setenv("FAKEHW_GPU_ROOT", p, 1);
	bool amd = !strcmp(vendor, "amd");
	snprintf(p, sizeof(p), "%s/%s", libdir, amd ? "libamd_smi.so" : "libnvidia-ml.so.1");
	struct js_gpu_opts o = {.backend = amd ? "amdsmi" : "nvml", .lib = p};
	assert_int_equal(js_gpu_open(&o, &f->g, why, sizeof(why)), 0);
	return f;
}

static void done(struct fx *f)
{
	js_gpu_close(f->g);
	tt_rmrf(f->root);
	free(f);
}

/* The lines the stand-in appended to its locks file (lock and reset calls). */
static int lock_calls(struct fx *f)
{
	char p[1400], buf[4096];
	int n = 0;
	snprintf(p, sizeof(p), "%s/locks", f->gpus);
	tt_read(p, buf, sizeof(buf));
	for (char *c = buf; *c; c++)
		n += *c == '\n';
	return n + (buf[0] != 0);
}

/* A pid that is gone: a child that exited. */
static int dead_pid(void)
{
	pid_t p = fork();
	if (p == 0)
		_exit(0);
	waitpid(p, NULL, 0);
	return (int)p;
}

/* NVIDIA boards where the lock and its reset both answer NO_PERMISSION:
 * no lock took effect, so no entry stays (it made every later recovery open
 * the library and fail, and joulestep-restore exit 1 for good). */
static void refused_lock_leaves_no_entry(void **st)
{
	(void)st;
	struct fx *f = fixture("nvidia", 0);
	assert_true(js_gpu_can_lock(f->g, 0));
	assert_int_equal(js_gpu_lock_journaled(f->state, f->g, 0, 900, 900), -EPERM);
	assert_int_equal(js_gpu_journal_count(f->state), 0);
	done(f);
}

/* AMD: the backend cannot lock at all: never asked, nothing journaled; an
 * entry an older version left is dropped by recovery, not failed on. */
static void amd_is_not_asked_and_old_entries_go(void **st)
{
	(void)st;
	struct fx *f = fixture("amd", 1);
	char p[1400];
	assert_false(js_gpu_can_lock(f->g, 0));
	assert_int_equal(js_gpu_lock_journaled(f->state, f->g, 0, 900, 900), -ENOSYS);
	assert_int_equal(js_gpu_journal_count(f->state), 0);
	assert_int_equal(js_gpu_journal_acquire(f->state, "GPU-journal-0", 0), 0);
	snprintf(p, sizeof(p), "%s/gpu-GPU-journal-0", f->state);
	tt_writef(p, "%d 1\n", dead_pid()); /* an older entry: no boot id, owner gone */
	struct js_gpu_recovery r;
	assert_int_equal(js_gpu_journal_recover(f->state, f->g, false, &r), 0);
	assert_int_equal(r.failed, 0);
	assert_int_equal(r.restored, 1);
	assert_int_equal(js_gpu_journal_count(f->state), 0);
	done(f);
}

/* An entry names its boot; one of another boot is dropped without touching
 * the GPU (a reboot already reset its clocks), even with its pid alive. */
static void entries_carry_the_boot_id(void **st)
{
	(void)st;
	struct fx *f = fixture("nvidia", 1);
	char p[1400], text[256], boot[64];
	assert_int_equal(js_gpu_lock_journaled(f->state, f->g, 0, 900, 900), 0);
	snprintf(p, sizeof(p), "%s/gpu-GPU-journal-0", f->state);
	tt_read(p, text, sizeof(text));
	tt_read("/proc/sys/kernel/random/boot_id", boot, sizeof(boot));
	assert_non_null(strstr(text, boot));
	/* ours, alive: recovery leaves it */
	struct js_gpu_recovery r;
	assert_int_equal(js_gpu_journal_recover(f->state, f->g, false, &r), 0);
	assert_int_equal(r.busy, 1);
	assert_int_equal(js_gpu_unlock_journaled(f->state, f->g, 0), 0);
	assert_int_equal(js_gpu_journal_count(f->state), 0);
	int calls = lock_calls(f);
	/* of another boot, its pid ours (alive now): dropped, GPU untouched */
	tt_writef(p, "%d 1 00000000-0000-0000-0000-000000000000\n", (int)getpid());
	assert_int_equal(js_gpu_journal_recover(f->state, f->g, false, &r), 0);
	assert_int_equal(r.busy, 0);
	assert_int_equal(js_gpu_journal_count(f->state), 0);
	assert_int_equal(lock_calls(f), calls);
	done(f);
}

int main(void)
{
	ssize_t n = readlink("/proc/self/exe", libdir, sizeof(libdir) - 1);
	if (n <= 0)
		return 1;
	libdir[n] = 0;
	snprintf(strrchr(libdir, '/'), sizeof(libdir) - (size_t)(strrchr(libdir, '/') - libdir),
		 "/fakehw");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(refused_lock_leaves_no_entry),
		cmocka_unit_test(amd_is_not_asked_and_old_entries_go),
		cmocka_unit_test(entries_carry_the_boot_id),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
