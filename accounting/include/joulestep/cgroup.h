/* joulestep: a Slurm step's cgroup, read (docs/design.md, "The step's
 * cgroup"). With task/cgroup (ConstrainCores) Slurm writes the step's CPUs
 * into the step's cpuset; with jobacct_gather/cgroup (cgroup v1) or on
 * cgroup v2 the step's cgroup also counts its CPU time. The plugin reads
 * both, as root, at paths it builds itself from the cgroup root, the node's
 * name and the step's identity (never from the job's environment).
 *
 * Layouts (Slurm 22.05 to 26.05, built with --enable-multiple-slurmd as
 * Debian does, or without it):
 *   v1: <root>/cpuset/slurm_<node>/uid_<uid>/job_<job>/step_<step>/cpuset.cpus
 *       <root>/cpuacct/<same>/cpuacct.usage_percpu (ns per CPU)
 *       (slurm/ in place of slurm_<node> without multiple-slurmd)
 *   v2: <root><scope>/job_<job>/step_<step>/cpuset.cpus.effective, cpu.stat
 *       (usage_usec, no per-CPU figure), with <scope> the slurmstepd scope
 *       that slurmstepd's own /proc/self/cgroup names.
 * Functions return 0 or -errno and log nothing. */
#ifndef JOULESTEP_CGROUP_H
#define JOULESTEP_CGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <joulestep/freq.h>

#define JS_CG_PATH_MAX 512

enum js_cg_version { JS_CG_NONE = 0, JS_CG_V1 = 1, JS_CG_V2 = 2 };

struct js_cg_step {
	int version;                       /* enum js_cg_version              */
	char cpuset_dir[JS_CG_PATH_MAX];   /* the step's cpuset cgroup        */
	char cpu_dir[JS_CG_PATH_MAX];      /* its CPU accounting (v1 cpuacct) */
};

struct js_cg_usage {
	uint64_t total_ns;                 /* the step's CPU time             */
	bool per_cpu;                      /* cpu_ns[] holds it per CPU (v1)  */
	size_t ncpu;                       /* entries of cpu_ns               */
	uint64_t cpu_ns[JS_MAX_CPUS];      /* by Linux CPU number             */
};

/* The cgroup version under root (e.g. "/sys/fs/cgroup"): v2 where
 * root/cgroup.controllers lists cpuset, v1 where root/cpuset is a
 * directory; -ENOENT where neither. */
int js_cg_version(const char *root, int *version);

/* Pure: the step's directories. step: "batch", "extern", "interactive" or
 * a number; node: the node's Slurm name (v1, with multiple-slurmd; "" for
 * slurm/); self_cgroup: the text of slurmstepd's /proc/self/cgroup (v2;
 * its "0::" line holds .../job_<job>/step_<step>/...). -EINVAL on a name
 * with '/' or "..", or a v2 line without the step's job_<job>. */
int js_cg_step_paths(const char *root, int version, const char *node, uid_t uid, uint32_t job,
		     const char *step, const char *self_cgroup, struct js_cg_step *out);

/* Pure parsers. usage_percpu: "N N N ..." (ns, one per possible CPU);
 * cpu.stat: "usage_usec N" among other lines. -EINVAL on anything else. */
int js_cg_parse_percpu(const char *text, struct js_cg_usage *out);
int js_cg_parse_cpu_stat(const char *text, struct js_cg_usage *out);

/* The step's cpuset (cpuset.cpus on v1, cpuset.cpus.effective on v2). An
 * empty cpuset (none written) is -ENODATA. */
int js_cg_read_cpuset(const struct js_cg_step *st, struct js_cpuset *out);
/* The step's CPU time (and per CPU where v1 has it). */
int js_cg_read_usage(const struct js_cg_step *st, struct js_cg_usage *out);

/* Pure: b - a per CPU and in total (a counter that went back: 0). */
void js_cg_usage_delta(const struct js_cg_usage *a, const struct js_cg_usage *b,
		       struct js_cg_usage *out);

#endif
