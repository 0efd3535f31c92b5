/* The job prolog's and epilog's recovery of clocks a killed step left
 * changed (spank/js_cpu_step.c, spank/js_uncore_step.c): what is restored
 * and what could not be are both logged. The dead owner is a real one: a
 * child that journals its change and is killed with SIGKILL. A restore is
 * made to fail by putting a directory where the sysfs file was. The
 * slurm_* log functions are slurmstepd's; here they are captured. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "joulestep/freq.h"
#include "joulestep/uncore.h"
#include "js_cpu_step.h"
#include "js_uncore_step.h"
#include "test_tree.h"

#define UNC "devices/system/cpu/intel_uncore_frequency"

static char g_errors[4096], g_infos[4096];

static void capture(char *buf, const char *fmt, va_list ap)
{
	size_t n = strlen(buf);
	vsnprintf(buf + n, 4096 - n, fmt, ap);
	n = strlen(buf);
	if (n < 4095) {
		buf[n] = '\n';
		buf[n + 1] = 0;
	}
}

void slurm_error(const char *fmt, ...);
void slurm_info(const char *fmt, ...);
void slurm_verbose(const char *fmt, ...);

void slurm_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	capture(g_errors, fmt, ap);
	va_end(ap);
}

void slurm_info(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	capture(g_infos, fmt, ap);
	va_end(ap);
}

void slurm_verbose(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	capture(g_infos, fmt, ap);
	va_end(ap);
}

/* Run fn(arg) in a child that is then killed: its journal entries name a
 * dead owner, as a kill -9 of slurmstepd leaves them. */
static void in_killed_child(void (*fn)(void *), void *arg)
{
	pid_t p = fork();
	assert_true(p >= 0);
	if (p == 0) {
		fn(arg);
		raise(SIGKILL);
		_exit(1);
	}
	int st = 0;
	assert_int_equal(waitpid(p, &st, 0), p);
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
}

/* a file the recovery must write, turned into a directory */
static void unwritable(const char *path)
{
	assert_int_equal(unlink(path), 0);
	assert_int_equal(mkdir(path, 0755), 0);
}

struct tree {
	char *root, *st;
	struct js_conf conf;
};

static void tree_new(struct tree *t)
{
	t->root = tt_mkdtemp();
	t->st = tt_mkdtemp();
	js_conf_defaults(&t->conf);
	snprintf(t->conf.sysfs, sizeof(t->conf.sysfs), "%s", t->root);
	snprintf(t->conf.state, sizeof(t->conf.state), "%s/state", t->st);
	g_errors[0] = g_infos[0] = 0;
}

static void tree_free(struct tree *t)
{
	tt_rmrf(t->root);
	tt_rmrf(t->st);
}

static void lower_cpus(void *arg)
{
	struct tree *t = arg;
	struct js_freq_saved saved, entry;
	for (int cpu = 0; cpu < 4; cpu += 2)
		if (js_freq_acquire_entry(t->conf.state, t->conf.sysfs, cpu, "job7.0", 0, &saved, &entry))
			_exit(2);
}

/* Two CPUs left journaled by a killed step; one can be restored, the other
 * cannot: the log says both. */
static void cpu_recovery_logs_both(void **state)
{
	(void)state;
	struct tree t;
	tree_new(&t);
	tt_cpufreq(t.root, 0, 1);
	tt_cpufreq(t.root, 2, 1);
	in_killed_child(lower_cpus, &t);
	tt_cpufile(t.root, 0, "scaling_max_freq", "1200000\n"); /* as the step left it */
	char path[1200];
	snprintf(path, sizeof(path), "%s/devices/system/cpu/cpu2/cpufreq/scaling_max_freq", t.root);
	unwritable(path);
	js_cpu_recover_node(&t.conf, 7, "prolog");
	char buf[64];
	assert_int_equal(strtoul(tt_cpuread(t.root, 0, "scaling_max_freq", buf, sizeof(buf)), NULL, 10), 2400000);
	assert_non_null(strstr(g_infos, "job 7: prolog: restored 1 CPU(s)"));
	assert_non_null(strstr(g_errors, "job 7: prolog: recover orphaned CPUs"));
	tree_free(&t);
}

static void uncore_dom(const char *root, const char *name)
{
	char dir[1024], p[1200];
	snprintf(dir, sizeof(dir), "%s/" UNC "/%s", root, name);
	tt_mkdirs(dir);
	const char *files[] = {"min_freq_khz", "max_freq_khz", "initial_min_freq_khz",
			       "initial_max_freq_khz"};
	unsigned vals[] = {800000, 2400000, 800000, 2400000};
	for (int i = 0; i < 4; i++) {
		snprintf(p, sizeof(p), "%s/%s", dir, files[i]);
		tt_writef(p, "%u\n", vals[i]);
	}
}

static void lower_uncore(void *arg)
{
	struct tree *t = arg;
	struct js_uncore_dom d[2];
	uint32_t orig = 0;
	if (js_uncore_list(t->conf.sysfs, d, 2) != 2)
		_exit(2);
	for (int i = 0; i < 2; i++)
		if (js_uncore_journal_acquire(t->conf.state, t->conf.sysfs, &d[i], 0, &orig) ||
		    js_uncore_set_max(t->conf.sysfs, &d[i], 1000000))
			_exit(3);
}

/* Two uncore domains left capped; one cannot be written back: logged, as
 * well as the one that was. */
static void uncore_recovery_logs_both(void **state)
{
	(void)state;
	struct tree t;
	tree_new(&t);
	uncore_dom(t.root, "package_00_die_00");
	uncore_dom(t.root, "package_01_die_00");
	in_killed_child(lower_uncore, &t);
	char path[1200], buf[64];
	snprintf(path, sizeof(path), "%s/" UNC "/package_01_die_00/max_freq_khz", t.root);
	unwritable(path);
	js_uncore_recover_node(&t.conf, 7, "epilog");
	snprintf(path, sizeof(path), "%s/" UNC "/package_00_die_00/max_freq_khz", t.root);
	assert_int_equal(strtoul(tt_read(path, buf, sizeof(buf)), NULL, 10), 2400000);
	assert_non_null(strstr(g_infos, "job 7: epilog: restored 1 uncore clock(s)"));
	assert_non_null(strstr(g_errors, "job 7: epilog: recover uncore clocks"));
	tree_free(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(cpu_recovery_logs_both),
		cmocka_unit_test(uncore_recovery_logs_both),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
