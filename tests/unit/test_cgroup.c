/* A Slurm step's cgroup (accounting/src/cgroup.c): the paths the plugin
 * builds from the step's identity, and the cpuset and CPU time read there,
 * on fake cgroup trees laid out as Slurm 22.05 and 26.05 lay them out. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "joulestep/cgroup.h"
#include "test_tree.h"

static void test_v1_paths(void **state)
{
	(void)state;
	struct js_cg_step st;
	assert_int_equal(js_cg_step_paths("/sys/fs/cgroup", JS_CG_V1, "node7", 1000, 42, "batch", NULL, &st), 0);
	assert_string_equal(st.cpuset_dir, "/sys/fs/cgroup/cpuset/slurm_node7/uid_1000/job_42/step_batch");
	assert_string_equal(st.cpu_dir, "/sys/fs/cgroup/cpuacct/slurm_node7/uid_1000/job_42/step_batch");
	/* without multiple-slurmd: slurm/ */
	assert_int_equal(js_cg_step_paths("/cg", JS_CG_V1, "", 0, 1, "3", NULL, &st), 0);
	assert_string_equal(st.cpuset_dir, "/cg/cpuset/slurm/uid_0/job_1/step_3");
	/* nothing that leaves the tree */
	assert_int_equal(js_cg_step_paths("/cg", JS_CG_V1, "../x", 0, 1, "3", NULL, &st), -EINVAL);
	assert_int_equal(js_cg_step_paths("/cg", JS_CG_V1, "a/b", 0, 1, "3", NULL, &st), -EINVAL);
	assert_int_equal(js_cg_step_paths("/cg", JS_CG_V1, "n", 0, 1, "..", NULL, &st), -EINVAL);
	assert_int_equal(js_cg_step_paths("/cg", JS_CG_NONE, "n", 0, 1, "0", NULL, &st), -EINVAL);
}

static void test_v2_paths(void **state)
{
	(void)state;
	struct js_cg_step st;
	/* slurmstepd of step 0 of job 12 sits in step_0/slurm_processes (26.05) */
	const char *self = "0::/system.slice/node1_slurmstepd.scope/job_12/step_0/slurm_processes\n";
	assert_int_equal(js_cg_step_paths("/sys/fs/cgroup", JS_CG_V2, "node1", 5, 12, "0", self, &st), 0);
	assert_string_equal(st.cpuset_dir, "/sys/fs/cgroup/system.slice/node1_slurmstepd.scope/job_12/step_0");
	assert_string_equal(st.cpu_dir, st.cpuset_dir);
	/* the step's own id, whatever step slurmstepd's line names */
	assert_int_equal(js_cg_step_paths("/r", JS_CG_V2, "n", 5, 12, "batch", self, &st), 0);
	assert_string_equal(st.cpuset_dir, "/r/system.slice/node1_slurmstepd.scope/job_12/step_batch");
	/* job_120 is not job_12; no 0:: line; a v1-only /proc/self/cgroup */
	assert_int_equal(js_cg_step_paths("/r", JS_CG_V2, "n", 5, 12, "0",
					  "0::/x/job_120/step_0/slurm_processes\n", &st), -EINVAL);
	assert_int_equal(js_cg_step_paths("/r", JS_CG_V2, "n", 5, 12, "0",
					  "3:cpuset:/slurm/uid_5/job_12/step_0\n", &st), -EINVAL);
	assert_int_equal(js_cg_step_paths("/r", JS_CG_V2, "n", 5, 12, "0",
					  "3:cpuset:/\n0::/a/../job_12/step_0\n", &st), -EINVAL);
	assert_int_equal(js_cg_step_paths("/r", JS_CG_V2, "n", 5, 12, "0", NULL, &st), -EINVAL);
	/* a relative path (found by fuzz_cgroup) would leave the root */
	assert_int_equal(js_cg_step_paths("/r", JS_CG_V2, "n", 5, 12, "0",
					  "0::x/job_12/step_0\n", &st), -EINVAL);
}

static void test_parse_percpu(void **state)
{
	(void)state;
	struct js_cg_usage u;
	assert_int_equal(js_cg_parse_percpu("100 0 250 7\n", &u), 0);
	assert_true(u.per_cpu);
	assert_int_equal(u.ncpu, 4);
	assert_int_equal(u.cpu_ns[2], 250);
	assert_int_equal(u.total_ns, 357);
	assert_int_equal(js_cg_parse_percpu("", &u), -EINVAL);
	assert_int_equal(js_cg_parse_percpu("12 x 3", &u), -EINVAL);
	assert_int_equal(js_cg_parse_percpu("-1 2", &u), -EINVAL);
	assert_int_equal(js_cg_parse_percpu("1 2a", &u), -EINVAL);
	assert_int_equal(js_cg_parse_percpu("18446744073709551615 1", &u), -EOVERFLOW);
	char big[JS_MAX_CPUS * 2 + 8] = "";
	for (int i = 0; i <= JS_MAX_CPUS; i++)
		strcat(big, "1 ");
	assert_int_equal(js_cg_parse_percpu(big, &u), -E2BIG);
}

static void test_parse_cpu_stat(void **state)
{
	(void)state;
	struct js_cg_usage u;
	assert_int_equal(js_cg_parse_cpu_stat("usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n", &u), 0);
	assert_false(u.per_cpu);
	assert_int_equal(u.total_ns, 1500000);
	assert_int_equal(js_cg_parse_cpu_stat("nr_periods 3\nusage_usec 7", &u), 0);
	assert_int_equal(u.total_ns, 7000);
	assert_int_equal(js_cg_parse_cpu_stat("user_usec 1\n", &u), -EINVAL);
	assert_int_equal(js_cg_parse_cpu_stat("usage_usec x\n", &u), -EINVAL);
	assert_int_equal(js_cg_parse_cpu_stat("usage_usec 99999999999999999999\n", &u), -EINVAL);
}

static void test_read_v1_tree(void **state)
{
	(void)state;
	char *root = tt_mkdtemp(), p[1024];
	int v = -1;
	assert_int_equal(js_cg_version(root, &v), -ENOENT);
	struct js_cg_step st;
	snprintf(p, sizeof(p), "%s/cpuset/slurm_n/uid_9/job_3/step_batch", root);
	tt_mkdirs(p);
	snprintf(p, sizeof(p), "%s/cpuacct/slurm_n/uid_9/job_3/step_batch", root);
	tt_mkdirs(p);
	assert_int_equal(js_cg_version(root, &v), 0);
	assert_int_equal(v, JS_CG_V1);
	assert_int_equal(js_cg_step_paths(root, v, "n", 9, 3, "batch", NULL, &st), 0);
	struct js_cpuset cs;
	char buf[64];
	/* no file yet (task/cgroup not in use, or the step has none) */
	assert_int_equal(js_cg_read_cpuset(&st, &cs), -ENOENT);
	snprintf(p, sizeof(p), "%s/cpuset.cpus", st.cpuset_dir);
	tt_write(p, "\n");
	assert_int_equal(js_cg_read_cpuset(&st, &cs), -ENODATA);
	tt_write(p, "0-1,4\n");
	assert_int_equal(js_cg_read_cpuset(&st, &cs), 0);
	js_cpuset_format(&cs, buf, sizeof(buf));
	assert_string_equal(buf, "0-1,4");
	struct js_cg_usage a, b, d;
	snprintf(p, sizeof(p), "%s/cpuacct.usage_percpu", st.cpu_dir);
	tt_write(p, "10 20 0 0 5 \n");
	assert_int_equal(js_cg_read_usage(&st, &a), 0);
	tt_write(p, "110 20 0 0 505 \n");
	assert_int_equal(js_cg_read_usage(&st, &b), 0);
	js_cg_usage_delta(&a, &b, &d);
	assert_true(d.per_cpu);
	assert_int_equal(d.total_ns, 600);
	assert_int_equal(d.cpu_ns[0], 100);
	assert_int_equal(d.cpu_ns[1], 0);
	assert_int_equal(d.cpu_ns[4], 500);
	/* a counter that went back counts nothing, never wraps */
	js_cg_usage_delta(&b, &a, &d);
	assert_int_equal(d.total_ns, 0);
	assert_int_equal(d.cpu_ns[4], 0);
	tt_rmrf(root);
}

static void test_read_v2_tree(void **state)
{
	(void)state;
	char *root = tt_mkdtemp(), p[1024];
	int v = -1;
	snprintf(p, sizeof(p), "%s/cgroup.controllers", root);
	tt_write(p, "cpu memory\n"); /* no cpuset: not a usable v2 root */
	assert_int_equal(js_cg_version(root, &v), -ENOENT);
	tt_write(p, "cpuset cpu io memory pids\n");
	assert_int_equal(js_cg_version(root, &v), 0);
	assert_int_equal(v, JS_CG_V2);
	struct js_cg_step st;
	assert_int_equal(js_cg_step_paths(root, v, "n", 9, 3, "batch",
					  "0::/system.slice/n_slurmstepd.scope/job_3/step_batch/slurm_processes\n", &st), 0);
	tt_mkdirs(st.cpuset_dir);
	snprintf(p, sizeof(p), "%s/cpuset.cpus.effective", st.cpuset_dir);
	tt_write(p, "2-3\n");
	snprintf(p, sizeof(p), "%s/cpu.stat", st.cpu_dir);
	tt_write(p, "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n");
	struct js_cpuset cs;
	struct js_cg_usage u;
	assert_int_equal(js_cg_read_cpuset(&st, &cs), 0);
	assert_true(js_cpuset_isset(&cs, 2) && js_cpuset_isset(&cs, 3) && js_cpuset_count(&cs) == 2);
	assert_int_equal(js_cg_read_usage(&st, &u), 0);
	assert_int_equal(u.total_ns, 2500000);
	assert_false(u.per_cpu);
	tt_rmrf(root);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_v1_paths),
		cmocka_unit_test(test_v2_paths),
		cmocka_unit_test(test_parse_percpu),
		cmocka_unit_test(test_parse_cpu_stat),
		cmocka_unit_test(test_read_v1_tree),
		cmocka_unit_test(test_read_v2_tree),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
