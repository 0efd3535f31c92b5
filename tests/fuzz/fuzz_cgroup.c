/* Fuzz the step-cgroup parsers (accounting/src/cgroup.c): cpuacct.usage_percpu,
 * cpu.stat and slurmstepd's /proc/self/cgroup (the v2 step path). Input: a
 * selector byte, then the file's text. Contracts: a parsed usage is the sum
 * of its CPUs (percpu) and never wraps; a built path starts with the root,
 * ends with the step's directory and never holds "/../". */
#include <errno.h>

#include "fuzz.h"
#include <joulestep/cgroup.h>

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	if (!n)
		return 0;
	uint8_t sel = d[0] % 3;
	char *s = fuzz_cstr(d + 1, n - 1);
	static struct js_cg_usage u, v, dd;
	if (sel == 0 && js_cg_parse_percpu(s, &u) == 0) {
		uint64_t sum = 0;
		FUZZ_CHECK(u.per_cpu && u.ncpu >= 1 && u.ncpu <= JS_MAX_CPUS);
		for (size_t i = 0; i < u.ncpu; i++)
			sum += u.cpu_ns[i];
		FUZZ_CHECK(sum == u.total_ns);
		memset(&v, 0, sizeof(v));
		js_cg_usage_delta(&v, &u, &dd);
		FUZZ_CHECK(dd.total_ns == u.total_ns);
		js_cg_usage_delta(&u, &v, &dd);
		FUZZ_CHECK(dd.total_ns == 0);
	} else if (sel == 1 && js_cg_parse_cpu_stat(s, &u) == 0) {
		FUZZ_CHECK(!u.per_cpu && u.total_ns % 1000 == 0);
	} else if (sel == 2) {
		struct js_cg_step st;
		if (js_cg_step_paths("/sys/fs/cgroup", JS_CG_V2, "n1", 1000, 42, "batch", s, &st) == 0) {
			FUZZ_CHECK(!strncmp(st.cpuset_dir, "/sys/fs/cgroup/", 15));
			size_t l = strlen(st.cpuset_dir);
			FUZZ_CHECK(l >= 18 && !strcmp(st.cpuset_dir + l - 18, "/job_42/step_batch"));
			FUZZ_CHECK(!strstr(st.cpuset_dir, "/../") && !strchr(st.cpuset_dir, '\n'));
		}
	}
	free(s);
	return 0;
}
