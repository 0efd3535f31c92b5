/* Slurm's abstract core numbers to Linux CPUs (issue 23, defect 3): fake
 * cpuN/topology trees whose numbering alternates sockets and whose SMT
 * siblings are far apart (cpu0 and cpu64), as on two-socket servers. The
 * truth is computed here from the layout each test builds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "joulestep/freq.h"
#include "test_tree.h"

/* cpuN/topology with its package and sibling list (NULL: no list file) */
static void topo_cpu(const char *root, int cpu, int pkg, const char *siblings)
{
	char dir[1024], path[1200];
	snprintf(dir, sizeof(dir), "%s/devices/system/cpu/cpu%d/topology", root, cpu);
	tt_mkdirs(dir);
	snprintf(path, sizeof(path), "%s/physical_package_id", dir);
	tt_writef(path, "%d\n", pkg);
	if (siblings) {
		snprintf(path, sizeof(path), "%s/thread_siblings_list", dir);
		tt_writef(path, "%s\n", siblings);
	}
}

static struct js_cpu_topo *read_topo(const char *root)
{
	struct js_cpu_topo *t = calloc(1, sizeof(*t));
	assert_non_null(t);
	assert_int_equal(js_cpu_topo_read(root, t), 0);
	return t;
}

static void expect_cpus(const struct js_cpu_topo *t, const char *cores, const char *want)
{
	struct js_cpuset c, got, w;
	char gbuf[512], wbuf[512];
	assert_int_equal(js_cpuset_parse(cores, &c), 0);
	assert_int_equal(js_cpuset_parse(want, &w), 0);
	assert_int_equal(js_cpu_topo_cores_to_cpus(t, &c, &got), 0);
	js_cpuset_format(&got, gbuf, sizeof(gbuf));
	js_cpuset_format(&w, wbuf, sizeof(wbuf));
	assert_string_equal(gbuf, wbuf);
}

/* 8 CPUs, no SMT, sockets alternate: cpu c on socket c % 2. Slurm's cores
 * 0-3 are socket 0's (cpu0,2,4,6 in order), cores 4-7 socket 1's. */
static void test_alternating_sockets(void **state)
{
	(void)state;
	char *root = tt_mkdtemp(), sib[16];
	for (int c = 0; c < 8; c++) {
		snprintf(sib, sizeof(sib), "%d", c);
		topo_cpu(root, c, c % 2, sib);
	}
	struct js_cpu_topo *t = read_topo(root);
	for (int k = 0; k < 8; k++) {
		char core[8], want[8];
		int cpu = k < 4 ? 2 * k : 2 * (k - 4) + 1; /* k-th core of socket k/4 */
		snprintf(core, sizeof(core), "%d", k);
		snprintf(want, sizeof(want), "%d", cpu);
		expect_cpus(t, core, want);
	}
	expect_cpus(t, "0-1", "0,2");
	expect_cpus(t, "0-3", "0,2,4,6");
	expect_cpus(t, "4-5", "1,3");
	free(t);
	tt_rmrf(root);
}

/* 2 sockets x 32 cores x 2 threads: cpu c (c < 64) on socket c / 32, its
 * sibling c + 64. Slurm's core k is cpu k and cpu k + 64. */
static void test_smt_far_apart(void **state)
{
	(void)state;
	char *root = tt_mkdtemp(), sib[32];
	for (int c = 0; c < 128; c++) {
		int first = c % 64;
		snprintf(sib, sizeof(sib), "%d,%d", first, first + 64);
		topo_cpu(root, c, first / 32, sib);
	}
	struct js_cpu_topo *t = read_topo(root);
	expect_cpus(t, "0", "0,64");
	expect_cpus(t, "31", "31,95");
	expect_cpus(t, "32", "32,96");
	expect_cpus(t, "0-31", "0-31,64-95");
	expect_cpus(t, "0-63", "0-127");
	/* 64 cores only */
	struct js_cpuset c, got;
	js_cpuset_parse("64", &c);
	assert_int_equal(js_cpu_topo_cores_to_cpus(t, &c, &got), -ERANGE);
	free(t);
	tt_rmrf(root);
}

/* Both at once: 2 sockets x 4 cores x 2 threads, cpu c (c < 8) on socket
 * c % 2, its sibling c + 8 (the numbering of many dual-socket Xeons). */
static void test_alternating_smt(void **state)
{
	(void)state;
	char *root = tt_mkdtemp(), sib[32];
	for (int c = 0; c < 16; c++) {
		int first = c % 8;
		snprintf(sib, sizeof(sib), "%d,%d", first, first + 8);
		topo_cpu(root, c, first % 2, sib);
	}
	struct js_cpu_topo *t = read_topo(root);
	for (int k = 0; k < 8; k++) {
		char core[8], want[16];
		int first = k < 4 ? 2 * k : 2 * (k - 4) + 1;
		snprintf(core, sizeof(core), "%d", k);
		snprintf(want, sizeof(want), "%d,%d", first, first + 8);
		expect_cpus(t, core, want);
	}
	expect_cpus(t, "0-3", "0,2,4,6,8,10,12,14");
	free(t);
	tt_rmrf(root);
}

/* No thread_siblings_list (old kernels, the fakehw default): one thread per
 * core; an offline CPU (no topology directory) is not counted as a core. */
static void test_no_siblings_offline(void **state)
{
	(void)state;
	char *root = tt_mkdtemp(), dir[1024];
	for (int c = 0; c < 4; c++)
		if (c != 2)
			topo_cpu(root, c, 0, NULL);
	snprintf(dir, sizeof(dir), "%s/devices/system/cpu/cpu2", root);
	tt_mkdirs(dir);
	struct js_cpu_topo *t = read_topo(root);
	assert_int_equal(js_cpuset_count(&t->present), 3);
	expect_cpus(t, "0-1", "0-1");
	expect_cpus(t, "2", "3");
	free(t);
	/* nothing at all */
	char *empty = tt_mkdtemp();
	struct js_cpu_topo *e = calloc(1, sizeof(*e));
	assert_int_equal(js_cpu_topo_read(empty, e), -ENOENT);
	free(e);
	tt_rmrf(empty);
	tt_rmrf(root);
}

static void expect_abs(const struct js_cpu_topo *t, const char *cores, unsigned tpc,
		       const char *want)
{
	struct js_cpuset c, got, w;
	char gbuf[512], wbuf[512];
	assert_int_equal(js_cpuset_parse(cores, &c), 0);
	assert_int_equal(js_cpuset_parse(want, &w), 0);
	assert_int_equal(js_cpu_topo_abs_to_cpus(t, &c, tpc, &got), 0);
	js_cpuset_format(&got, gbuf, sizeof(gbuf));
	js_cpuset_format(&w, wbuf, sizeof(wbuf));
	assert_string_equal(gbuf, wbuf);
}

/* 2 sockets x 2 cores x 2 threads numbered as the live test's synthetic
 * node (hwloc "pack:2 core:2 pu:2(indexes=0,4,2,6,1,5,3,7)"): socket 0 has
 * cores {0,4} and {2,6}, socket 1 {1,5} and {3,7}. Slurm's ThreadsPerCore=1
 * (node given as CPUs=8): abstract core k is the k-th thread in logical
 * order 0,4,2,6,1,5,3,7; ThreadsPerCore=2 (and 0, the hardware's): whole
 * cores. */
static const int LOGICAL[8] = {0, 4, 2, 6, 1, 5, 3, 7};

static struct js_cpu_topo *synthetic_2x2x2(char **rootp)
{
	char *root = tt_mkdtemp(), sib[16];
	for (int c = 0; c < 8; c++) {
		int first = c < 4 ? c : c - 4;
		snprintf(sib, sizeof(sib), "%d,%d", first, first + 4);
		topo_cpu(root, c, first % 2, sib);
	}
	*rootp = root;
	return read_topo(root);
}

static void test_threads_per_core(void **state)
{
	(void)state;
	char *root;
	struct js_cpu_topo *t = synthetic_2x2x2(&root);
	for (int k = 0; k < 8; k++) {
		char core[8], want[8];
		snprintf(core, sizeof(core), "%d", k);
		snprintf(want, sizeof(want), "%d", LOGICAL[k]);
		expect_abs(t, core, 1, want);
	}
	expect_abs(t, "0-1", 1, "0,4");
	expect_abs(t, "1-2", 1, "2,4");
	for (int k = 0; k < 4; k++) {
		char core[8], want[16];
		snprintf(core, sizeof(core), "%d", k);
		snprintf(want, sizeof(want), "%d,%d", LOGICAL[2 * k], LOGICAL[2 * k + 1]);
		expect_abs(t, core, 2, want);
		expect_abs(t, core, 0, want);
	}
	struct js_cpuset c, got;
	js_cpuset_parse("8", &c);
	assert_int_equal(js_cpu_topo_abs_to_cpus(t, &c, 1, &got), -ERANGE);
	js_cpuset_parse("4", &c);
	assert_int_equal(js_cpu_topo_abs_to_cpus(t, &c, 2, &got), -ERANGE);
	assert_int_equal(js_cpuset_count(&got), 0);
	free(t);
	tt_rmrf(root);
}

static void expect_split(const struct js_cpu_topo *t, const char *cpus, const char *whole,
			 const char *aside)
{
	struct js_cpuset c, w, a;
	char wbuf[512], abuf[512];
	assert_int_equal(js_cpuset_parse(cpus, &c), 0);
	js_cpu_topo_smt_split(t, &c, &w, &a);
	js_cpuset_format(&w, wbuf, sizeof(wbuf));
	js_cpuset_format(&a, abuf, sizeof(abuf));
	assert_string_equal(wbuf, whole);
	assert_string_equal(abuf, aside);
}

/* Siblings far apart (cpu c and c + 64): a step that has cpu0 but not
 * cpu64 steps aside on cpu0; whole cores stay. */
static void test_smt_split(void **state)
{
	(void)state;
	char *root = tt_mkdtemp(), sib[32];
	for (int c = 0; c < 128; c++) {
		int first = c % 64;
		snprintf(sib, sizeof(sib), "%d,%d", first, first + 64);
		topo_cpu(root, c, first / 32, sib);
	}
	struct js_cpu_topo *t = read_topo(root);
	expect_split(t, "0,64", "0,64", "");
	expect_split(t, "0", "", "0");
	expect_split(t, "0-1,64", "0,64", "1");
	expect_split(t, "0-63", "", "0-63");
	expect_split(t, "0-127", "0-127", "");
	free(t);
	tt_rmrf(root);
	/* the synthetic node: the thread pairs {0,4} {2,6} {1,5} {3,7} */
	t = synthetic_2x2x2(&root);
	expect_split(t, "0,2,4", "0,4", "2");
	expect_split(t, "4", "", "4");
	free(t);
	tt_rmrf(root);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_alternating_sockets),
		cmocka_unit_test(test_smt_far_apart),
		cmocka_unit_test(test_alternating_smt),
		cmocka_unit_test(test_no_siblings_offline),
		cmocka_unit_test(test_threads_per_core),
		cmocka_unit_test(test_smt_split),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
