/* CPU topology: Slurm's abstract core numbers to Linux CPU numbers.
 * js_cpu_topo_read is the I/O (cpuN/topology under a sysfs root);
 * js_cpu_topo_cores_to_cpus is pure. */
#include <dirent.h>
#include <stdbool.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "joulestep/freq.h"
#include "js_internal.h"

static int cpu_of_name(const char *name)
{
	if (strncmp(name, "cpu", 3) || !name[3])
		return -1;
	char *end;
	long v = strtol(name + 3, &end, 10);
	if (*end || name[3] < '0' || name[3] > '9' || v >= JS_MAX_CPUS)
		return -1;
	return (int)v;
}

/* lowest CPU of a list, -1 when empty or unparsable */
static int lowest_of(const char *list)
{
	struct js_cpuset s;
	if (js_cpuset_parse(list, &s) < 0)
		return -1;
	for (int c = 0; c < JS_MAX_CPUS; c++)
		if (js_cpuset_isset(&s, c))
			return c;
	return -1;
}

static int read_cpu(const char *root, int cpu, struct js_cpu_topo *t)
{
	char path[4200], buf[4096];
	uint64_t pkg;
	if (js_path(path, sizeof(path), "%s/devices/system/cpu/cpu%d/topology/physical_package_id",
		    root, cpu) < 0 || js_read_u64_file(path, &pkg) < 0 || pkg > INT16_MAX)
		return -ENOENT;
	int core = cpu;
	if (js_path(path, sizeof(path), "%s/devices/system/cpu/cpu%d/topology/thread_siblings_list",
		    root, cpu) == 0 && js_read_file(path, buf, sizeof(buf)) > 0) {
		int low = lowest_of(buf);
		if (low >= 0 && low <= cpu)
			core = low;
	}
	js_cpuset_set(&t->present, cpu);
	t->pkg[cpu] = (int16_t)pkg;
	t->core[cpu] = (int16_t)core;
	return 0;
}

int js_cpu_topo_read(const char *sysfs_root, struct js_cpu_topo *out)
{
	char base[4096];
	const char *root = sysfs_root ? sysfs_root : JS_SYSFS_DEFAULT;
	if (!out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	int rc = js_path(base, sizeof(base), "%s/devices/system/cpu", root);
	if (rc < 0)
		return rc;
	DIR *d = opendir(base);
	if (!d)
		return -errno;
	struct dirent *de;
	while ((de = readdir(d))) {
		int cpu = cpu_of_name(de->d_name);
		if (cpu >= 0)
			read_cpu(root, cpu, out);
	}
	closedir(d);
	/* a sibling list naming a CPU not described (or the other way round)
	 * leaves the CPU its own core */
	for (int c = 0; c < JS_MAX_CPUS; c++)
		if (js_cpuset_isset(&out->present, c) && !js_cpuset_isset(&out->present, out->core[c]))
			out->core[c] = (int16_t)c;
	return js_cpuset_count(&out->present) ? 0 : -ENOENT;
}

/* One core: its key (lowest thread) and the lowest CPU of its package. */
struct core_ord {
	int key, pkg_first;
};

static int cmp_core(const void *a, const void *b)
{
	const struct core_ord *x = a, *y = b;
	if (x->pkg_first != y->pkg_first)
		return x->pkg_first < y->pkg_first ? -1 : 1;
	return (x->key > y->key) - (x->key < y->key);
}

/* Slurm (hwloc's logical order, xcpuinfo_hwloc_topo_get): sockets in order
 * of their first CPU, then each socket's cores in order of their first
 * thread; abstract core k is the k-th core in that order. ord gets the
 * cores' keys in that order; returns their number or -ENOMEM. */
static int cores_in_order(const struct js_cpu_topo *t, struct core_ord **out)
{
	struct core_ord *ord = calloc(JS_MAX_CPUS, sizeof(*ord));
	if (!ord)
		return -ENOMEM;
	int n = 0;
	for (int c = 0; c < JS_MAX_CPUS; c++) {
		if (!js_cpuset_isset(&t->present, c) || t->core[c] != c)
			continue;
		int first = c;
		for (int o = 0; o < c; o++)
			if (js_cpuset_isset(&t->present, o) && t->pkg[o] == t->pkg[c]) {
				first = o;
				break;
			}
		ord[n].key = c;
		ord[n++].pkg_first = first;
	}
	qsort(ord, (size_t)n, sizeof(*ord), cmp_core);
	*out = ord;
	return n;
}

int js_cpu_topo_cores_to_cpus(const struct js_cpu_topo *t, const struct js_cpuset *cores,
			      struct js_cpuset *cpus)
{
	return js_cpu_topo_abs_to_cpus(t, cores, 0, cpus);
}

/* Slurm's abstract CPUs (k * tpc + i) as indexes into the logical thread
 * order: each core's threads in ascending CPU number, cores in order. */
static int logical_threads(const struct js_cpu_topo *t, const struct core_ord *ord, int n,
			   int16_t *pu)
{
	int npu = 0;
	for (int k = 0; k < n; k++)
		for (int c = ord[k].key; c < JS_MAX_CPUS; c++)
			if (js_cpuset_isset(&t->present, c) && t->core[c] == ord[k].key)
				pu[npu++] = (int16_t)c;
	return npu;
}

int js_cpu_topo_abs_to_cpus(const struct js_cpu_topo *t, const struct js_cpuset *cores,
			    unsigned threads_per_core, struct js_cpuset *cpus)
{
	if (!t || !cores || !cpus || threads_per_core > JS_MAX_CPUS)
		return -EINVAL;
	js_cpuset_zero(cpus);
	struct core_ord *ord = NULL;
	int n = cores_in_order(t, &ord);
	if (n < 0)
		return n;
	int16_t *pu = threads_per_core ? calloc(JS_MAX_CPUS, sizeof(*pu)) : NULL;
	int npu = pu ? logical_threads(t, ord, n, pu) : 0, rc = 0;
	if (threads_per_core && !pu)
		rc = -ENOMEM;
	for (int k = 0; k < JS_MAX_CPUS && rc == 0; k++) {
		if (!js_cpuset_isset(cores, k))
			continue;
		if (threads_per_core) {
			long first = (long)k * threads_per_core;
			if (first + threads_per_core > npu) {
				rc = -ERANGE;
				break;
			}
			for (unsigned i = 0; i < threads_per_core; i++)
				js_cpuset_set(cpus, pu[first + i]);
			continue;
		}
		if (k >= n) {
			rc = -ERANGE;
			break;
		}
		for (int c = ord[k].key; c < JS_MAX_CPUS; c++)
			if (js_cpuset_isset(&t->present, c) && t->core[c] == ord[k].key)
				js_cpuset_set(cpus, c);
	}
	free(pu);
	free(ord);
	if (rc < 0)
		js_cpuset_zero(cpus);
	return rc;
}

void js_cpu_topo_smt_split(const struct js_cpu_topo *t, const struct js_cpuset *cpus,
			   struct js_cpuset *whole, struct js_cpuset *aside)
{
	js_cpuset_zero(whole);
	js_cpuset_zero(aside);
	for (int c = 0; c < JS_MAX_CPUS; c++) {
		if (!js_cpuset_isset(cpus, c))
			continue;
		bool all = js_cpuset_isset(&t->present, c);
		for (int o = 0; all && o < JS_MAX_CPUS; o++)
			if (js_cpuset_isset(&t->present, o) && t->core[o] == t->core[c] &&
			    !js_cpuset_isset(cpus, o))
				all = false;
		js_cpuset_set(all ? whole : aside, c);
	}
}
