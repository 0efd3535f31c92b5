/* The shared-node inputs the plugin records (spank/js_share.c, issue 24
 * part 1): a fake topology with sockets alternating (cpu0 on package 0,
 * cpu1 on package 1, ...) and a fake <procfs>/stat whose per-CPU ticks are
 * chosen here, so each package's busy and total time is known. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <sys/wait.h>
#include <time.h>

#include "js_share.h"
#include "test_tree.h"

#define NCPU 8

static char *make_root(void)
{
	char *root = tt_mkdtemp();
	char dir[1024], path[1200];
	for (int c = 0; c < NCPU; c++) {
		snprintf(dir, sizeof(dir), "%s/devices/system/cpu/cpu%d/topology", root, c);
		tt_mkdirs(dir);
		snprintf(path, sizeof(path), "%s/physical_package_id", dir);
		tt_writef(path, "%d\n", c % 2);
	}
	snprintf(dir, sizeof(dir), "%s/proc", root);
	tt_mkdirs(dir);
	return root;
}

/* cpuN: user = 10 * (N + 1) * k, system = k, idle = 100 * k, iowait = 5 */
static void write_stat(const char *root, int k)
{
	char path[1200], text[4096];
	size_t n = (size_t)snprintf(text, sizeof(text), "cpu  1 2 3 4 5 6 7 8 9 10\n");
	for (int c = 0; c < NCPU; c++)
		n += (size_t)snprintf(text + n, sizeof(text) - n, "cpu%d %d 0 %d %d 5 0 0 0 0 0\n", c,
				      10 * (c + 1) * k, k, 100 * k);
	snprintf(text + n, sizeof(text) - n, "intr 1 2 3\nctxt 99\n");
	snprintf(path, sizeof(path), "%s/proc/stat", root);
	tt_write(path, text);
}

static void share_reads_packages(void **state)
{
	(void)state;
	char *root = make_root();
	struct js_cpu_topo topo;
	assert_int_equal(js_cpu_topo_read(root, &topo), 0);
	struct js_cpuset step;
	assert_int_equal(js_cpuset_parse("0,2,3", &step), 0);
	struct js_share_snap a, b;
	assert_int_equal(js_share_layout(&topo, &step, &a), 0);
	assert_int_equal((int)a.npkg, 2);
	assert_int_equal(a.pkg[0].package, 0);
	assert_int_equal(a.pkg[0].cpus, 4);
	assert_int_equal(a.pkg[0].step_cpus, 2); /* cpu0, cpu2 */
	assert_int_equal(a.pkg[1].package, 1);
	assert_int_equal(a.pkg[1].step_cpus, 1); /* cpu3 */
	b = a;
	char proc[1100];
	snprintf(proc, sizeof(proc), "%s/proc", root);
	write_stat(root, 1);
	assert_int_equal(js_share_read_stat(proc, &topo, &a), 0);
	write_stat(root, 3);
	assert_int_equal(js_share_read_stat(proc, &topo, &b), 0);
	/* truth from the layout: busy = user + system, total = busy + idle + iowait */
	for (int p = 0; p < 2; p++) {
		uint64_t busy = 0, total = 0;
		for (int c = p; c < NCPU; c += 2) {
			busy += (uint64_t)(10 * (c + 1) * 2 + 2);
			total += (uint64_t)(10 * (c + 1) * 2 + 2 + 100 * 2);
		}
		assert_int_equal(b.pkg[p].busy_ticks - a.pkg[p].busy_ticks, busy);
		assert_int_equal(b.pkg[p].total_ticks - a.pkg[p].total_ticks, total);
	}
	tt_rmrf(root);
}

static void share_missing_stat(void **state)
{
	(void)state;
	char *root = make_root();
	struct js_cpu_topo topo;
	assert_int_equal(js_cpu_topo_read(root, &topo), 0);
	struct js_cpuset step;
	assert_int_equal(js_cpuset_parse("1", &step), 0);
	struct js_share_snap a;
	assert_int_equal(js_share_layout(&topo, &step, &a), 0);
	char proc[1100];
	snprintf(proc, sizeof(proc), "%s/proc", root);
	assert_int_equal(js_share_read_stat(proc, &topo, &a), -ENOENT);
	char path[1200];
	snprintf(path, sizeof(path), "%s/proc/stat", root);
	tt_write(path, "cpu  1 2 3 4\nbogus\ncpu99x\n");
	assert_int_equal(js_share_read_stat(proc, &topo, &a), -ENODATA);
	/* a step with no CPU of the topology has no package */
	assert_int_equal(js_cpuset_parse("100", &step), 0);
	assert_int_equal(js_share_layout(&topo, &step, &a), -ENOENT);
	tt_rmrf(root);
}

static void share_children_time(void **state)
{
	(void)state;
	uint64_t t0 = js_share_children_us();
	pid_t pid = fork();
	if (pid == 0) {
		volatile uint64_t x = 0;
		struct timespec a, b;
		clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
		do {
			for (int i = 0; i < 100000; i++)
				x += (uint64_t)i;
			clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
		} while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < 50000000L);
		_exit(0);
	}
	assert_true(pid > 0);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	/* the child burnt at least 50 ms of CPU, counted once reaped */
	assert_true(js_share_children_us() - t0 >= 50000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(share_reads_packages),
		cmocka_unit_test(share_missing_stat),
		cmocka_unit_test(share_children_time),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
