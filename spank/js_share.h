/* joulestep SPANK plugin: the inputs of the shared-node attribution
 * (docs/accounting.md, "Shared nodes"). The plugin only records them; the
 * rule that splits a package's energy over the jobs that shared it is the
 * store's (cli/src/joulestep/attribution.py).
 *
 * Per package the step has a CPU in: the package's online CPUs, the step's
 * CPUs there, and the package's busy and total CPU time from <procfs>/stat
 * (summed over the package's CPUs, in clock ticks). The step's own CPU time
 * is the slurmstepd's children's (getrusage RUSAGE_CHILDREN: the tasks,
 * reaped by slurmstepd before the step ends, and what they reaped), which
 * needs no cgroup (proctrack/linuxproc). */
#ifndef JS_SHARE_H
#define JS_SHARE_H

#include <stdbool.h>
#include <stdint.h>

#include <joulestep/freq.h>

#define JS_SHARE_MAX_PKGS 64

struct js_share_pkg {
	int package;               /* physical_package_id                    */
	int cpus;                  /* the package's CPUs (topology)          */
	int step_cpus;             /* of which the step's                    */
	uint64_t busy_ticks;       /* sum over its CPUs: all but idle+iowait */
	uint64_t total_ticks;      /* sum over its CPUs: user..steal         */
};

struct js_share_snap {
	size_t npkg;               /* packages the step has a CPU in         */
	struct js_share_pkg pkg[JS_SHARE_MAX_PKGS];
	uint64_t cpu_time_us;      /* the step's CPU time (children)        */
};

/* Pure: the packages of step_cpus with their CPU counts (ticks zero). */
int js_share_layout(const struct js_cpu_topo *topo, const struct js_cpuset *step_cpus,
		    struct js_share_snap *out);
/* Fill the ticks of a layout from <procfs>/stat (its "cpuN" lines). A CPU
 * of the topology missing from the file counts nothing. 0 or -errno. */
int js_share_read_stat(const char *procfs, const struct js_cpu_topo *topo,
		       struct js_share_snap *snap);
/* The process's children's CPU time (µs). */
uint64_t js_share_children_us(void);

#endif
