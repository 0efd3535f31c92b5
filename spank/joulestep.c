/* joulestep SPANK plugin: step and phase energy, phase markers, frequency
 * policies. See docs/admin-guide.md, docs/user-guide.md,
 * docs/phase-protocol.md and docs/record-format.md.
 *
 * Contexts:
 *   allocator (sbatch/salloc), local (srun): options are validated against
 *     the plugstack bounds; bad values fail the command before submission.
 *     srun --energy-report prints the step's record summary at exit.
 *   remote (slurmstepd, root): init_post_opt brackets the step (meter,
 *     clocks, phase socket); exit writes the record and restores clocks.
 *     Both ends are on srun's critical path (the next step of an allocation
 *     waits for this one to end): what only feeds the record is read at
 *     step end, privileged work happens only here on slurmstepd's main
 *     thread (the step thread uses descriptors opened before it started),
 *     and the record does not fsync its directory (the job epilog does).
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <slurm/slurm.h>
#include <slurm/spank.h>

#include "js_cgroup_step.h"
#include "js_hooks.h"
#include "js_jobcache.h"
#include "js_sidechan.h"
#include "js_pending.h"
#include "js_step.h"
#include "js_tuned.h"

/* The spank_* API lives in the host process (srun, sbatch, slurmstepd link
 * libslurmfull), not in libslurm.so: weak references keep the link strict
 * (-z defs) and resolve against the host at load time. */
#pragma weak spank_context
#pragma weak spank_get_item
#pragma weak spank_getenv
#pragma weak spank_option_register
#pragma weak spank_remote
#pragma weak spank_setenv
#pragma weak spank_unsetenv
#pragma weak spank_strerror

SPANK_PLUGIN(joulestep, 1);

#define OPT_POLICY 1
#define OPT_TAG 2
#define OPT_REPORT 3
#define OPT_HOOKS 4
#define OPT_ENV_PREFIX "_SLURM_SPANK_OPTION_joulestep_"

static struct js_conf g_conf;
static bool g_conf_ok;
static char *g_opt_policy, *g_opt_tags, *g_opt_hooks;
static bool g_opt_report;
static struct js_step *g_step;
static pid_t g_step_pid;    /* the slurmstepd that owns g_step (not a fork) */
static uint32_t g_local_job, g_local_step;
static bool g_local_known;
static uint64_t g_local_start_ns; /* srun's clock when the step was created */

static int opt_cb(int val, const char *optarg, int remote);

static struct spank_option g_options[] = {
	{"energy-policy", "NAME",
	 "joulestep frequency policy: monitor | io-dvfs | ckpt-dvfs | fixed:R | phase:KIND=R[,KIND=R...] (R = ratio of fmax) | tuned (the admin's tuned= file); any of them +gpu-io (GPU clocks lowered in checkpoint/flush/write phases) and/or +uncore-io (the uncore clock of whole packages lowered in flush/write phases), where allowed",
	 1, OPT_POLICY, opt_cb},
	{"energy-tag", "K=V[,K=V...]",
	 "joulestep labels stored with the job's energy records ([A-Za-z0-9_.:+-], key<=32, value<=64, <=16 tags)",
	 1, OPT_TAG, opt_cb},
	{"energy-report", NULL, "joulestep: print each step's energy when srun finishes", 0,
	 OPT_REPORT, opt_cb},
	{"energy-hooks", "NAME[,NAME]",
	 "joulestep: mark the phases of unmodified programs: mpiio (MPI-IO writes and syncs), veloc (VELOC checkpoints), or none",
	 1, OPT_HOOKS, opt_cb},
	SPANK_OPTIONS_TABLE_END};

static uint64_t now_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void js_step_error(struct js_step *s, const char *fmt, ...)
{
	char buf[JS_ERR_LEN];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	/* Bounded per step, like refused connections: a failure repeated per
	 * CPU per clock change must not flood slurmd.log. Every error is
	 * counted (provenance.errors_total), the first JS_MAX_ERRORS kept. */
	pthread_mutex_lock(&s->err_mu);
	uint64_t n = ++s->errors_total;
	if (s->nerrors < JS_MAX_ERRORS)
		memcpy(s->errors[s->nerrors++], buf, sizeof(buf));
	pthread_mutex_unlock(&s->err_mu);
	if (n <= JS_ERRORS_LOGGED)
		slurm_error("joulestep: job %u step %s: %s%s", s->job_id, s->step_id, buf,
			    n == JS_ERRORS_LOGGED ? "; further errors of this step are not logged (counted in the record)" : "");
}

/* ---- options ------------------------------------------------------------- */

static int opt_cb(int val, const char *optarg, int remote)
{
	char err[400];
	if (!g_conf_ok)
		return 0;
	switch (val) {
	case OPT_POLICY: {
		struct js_policy p;
		if (!remote) {
			if (js_policy_parse(optarg, &p, err, sizeof(err)) ||
			    js_policy_check(&p, &g_conf, err, sizeof(err))) {
				char al[200];
				js_policy_allowed(&g_conf, al, sizeof(al));
				slurm_error("joulestep: --energy-policy=%s: %s; allowed on this cluster: %s with R in [%g, 1]",
					    optarg ? optarg : "", err, al, g_conf.min_ratio);
				return -1;
			}
		}
		free(g_opt_policy);
		g_opt_policy = strdup(optarg ? optarg : "");
		return 0;
	}
	case OPT_TAG: {
		struct js_tags t = {0};
		if (!remote && js_tags_parse(optarg, &t, err, sizeof(err))) {
			slurm_error("joulestep: --energy-tag=%s: %s", optarg ? optarg : "", err);
			return -1;
		}
		free(g_opt_tags);
		g_opt_tags = strdup(optarg ? optarg : "");
		return 0;
	}
	case OPT_REPORT:
		g_opt_report = true;
		return 0;
	case OPT_HOOKS: {
		unsigned mask;
		if (!remote && js_hooks_parse(optarg, &mask, err, sizeof(err))) {
			slurm_error("joulestep: --energy-hooks=%s: %s", optarg ? optarg : "", err);
			return -1;
		}
		free(g_opt_hooks);
		g_opt_hooks = strdup(optarg ? optarg : "");
		return 0;
	}
	}
	return 0;
}

/* This node's Slurm name: slurmstepd (and the job epilog) run with
 * SLURMD_NODENAME in their own environment. Not the job's environment: a
 * step started from a batch script inherits the batch node's name there, and
 * the user controls it. Without it, the short host name. 0 or -EINVAL. */
static int node_name(char *buf, size_t len)
{
	const char *env = getenv("SLURMD_NODENAME");
	char host[256];
	if (!env || !env[0]) {
		if (gethostname(host, sizeof(host)) < 0)
			return -EINVAL;
		host[sizeof(host) - 1] = 0;
		host[strcspn(host, ".")] = 0;
		env = host;
	}
	int n = snprintf(buf, len, "%s", env);
	if (n < 0 || (size_t)n >= len || !js_name_safe(buf)) {
		buf[0] = 0;
		return -EINVAL;
	}
	return 0;
}

/* Plugstack arguments for a process on a compute node: parse, then expand
 * %n (state, sysfs, socket_dir) to this node's name. */
static int node_conf_parse(int ac, char **av, struct js_conf *c, char *err, size_t errlen)
{
	char node[64] = "";
	if (js_conf_parse(ac, av, c, err, errlen))
		return -EINVAL;
	node_name(node, sizeof(node)); /* "" or unsafe: refused below only if %n is used */
	return js_conf_expand_node(c, node, err, errlen);
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	char err[400];
	spank_context_t ctx = spank_context();
	if (ctx == S_CTX_SLURMD || ctx == S_CTX_JOB_SCRIPT)
		return 0;
	/* %n stays unexpanded in srun/sbatch/salloc, which use none of those paths */
	if (ctx == S_CTX_REMOTE ? node_conf_parse(ac, av, &g_conf, err, sizeof(err))
				: js_conf_parse(ac, av, &g_conf, err, sizeof(err))) {
		slurm_error("joulestep: plugstack.conf: %s; plugin disabled", err);
		g_conf_ok = false;
		return -1;
	}
	g_conf_ok = true;
	for (struct spank_option *o = g_options; o->name; o++) {
		spank_err_t rc = spank_option_register(sp, o);
		if (rc != ESPANK_SUCCESS)
			slurm_error("joulestep: cannot register --%s: %s", o->name, spank_strerror(rc));
	}
	return 0;
}

/* ---- remote: step bracketing ------------------------------------------- */

static void getenv_s(spank_t sp, const char *name, char *buf, size_t len)
{
	buf[0] = 0;
	if (spank_getenv(sp, name, buf, (int)len) != ESPANK_SUCCESS)
		buf[0] = 0;
}

/* The step thread's clock change: pwrite()s on the descriptors setup_freq
 * opened on slurmstepd's main thread; no open, no read of cpufreq state.
 * JS_RATIO_BASE is the step's base: fixed:R's clock, else each CPU's
 * original settings (exactly what was there; a ratio of 1 too). */
static int ph_set_ratio(void *ctx, double ratio, uint32_t *khz, uint64_t *took_ns)
{
	struct js_step *s = ctx;
	uint64_t t0 = now_ns(CLOCK_MONOTONIC);
	int rc = 0, nfail = 0, fail_cpu = -1;
	uint32_t fail_khz = 0;
	*khz = 0;
	if (s->nctl == 0 || js_cgroup_step_vetoed(s)) {
		*took_ns = 0;
		return 0;
	}
	double r = ratio == JS_RATIO_BASE ? js_policy_base_ratio(&s->policy) : ratio;
	if (r < s->conf.min_ratio)
		r = s->conf.min_ratio;
	for (int i = 0; i < s->nctl; i++) {
		struct js_freq_ctl *c = &s->ctl[i];
		uint32_t k = 0, applied = 0; /* 0: the original settings */
		if (r < 1.0 && js_freq_ctl_ratio_khz(c, r, &k) < 0)
			k = 0;
		int e = js_freq_ctl_set(c, k, &applied);
		if (e < 0) {
			if (!nfail++) {
				rc = e;
				fail_cpu = c->cpu;
				fail_khz = k ? k : c->orig_khz[JS_FREQ_MAX];
			}
		} else if (!*khz) {
			*khz = applied;
		}
	}
	*took_ns = now_ns(CLOCK_MONOTONIC) - t0;
	if (nfail) /* one line per change, not one per CPU */
		js_step_error(s, "freq: cpu%d: write %u kHz: %s (%d of %d policies failed)", fail_cpu,
			      fail_khz, strerror(-rc), nfail, s->nctl);
	return rc;
}

static void ph_snap(void *ctx, uint64_t *cpu, uint64_t *dram, bool *unc)
{
	struct js_step *s = ctx;
	struct js_snapshot sn;
	*cpu = *dram = 0;
	*unc = false;
	if (s->meter && __atomic_load_n(&s->ended, __ATOMIC_ACQUIRE))
		sn = s->s1; /* after the step's final reading: end there */
	else if (!s->meter || js_meter_snapshot(s->meter, &sn) < 0) {
		*unc = s->meter != NULL;
		return;
	}
	*cpu = sn.energy_cpu_uj;
	*dram = sn.energy_dram_uj;
	for (size_t i = 0; i < sn.nzones; i++)
		if (sn.err[i] || sn.uncertain[i] != s->s0.uncertain[i])
			*unc = true;
}

static void ph_snap_gpu(void *ctx, uint64_t at_ns, struct js_gpu_mark *out)
{
	js_gpu_step_mark(ctx, at_ns, out);
}

static uint64_t ph_now(void *ctx)
{
	struct js_step *s = ctx;
	if (__atomic_load_n(&s->ended, __ATOMIC_ACQUIRE))
		return s->end_mono_ns;
	return now_ns(CLOCK_MONOTONIC);
}

/* ---- job metadata: trusted sources only ---------------------------------
 * The job prolog (root, slurmd's environment) caches what slurmd says of the
 * job in <state>/jobs/<job_id> with the time it ran (js_jobcache.h); every
 * step on the node reads it on slurmstepd's main thread. No slurmctld RPC,
 * no thread, nothing from the job's environment (a user can set any
 * SLURM_* variable before srun). docs/admin-guide.md, "Job identity". */

/* A value from slurmd's environment fit for the record: printable ASCII
 * (a path component for the cluster name). */
static void env_field(const char *name, char *dst, size_t len, bool path)
{
	const char *v = getenv(name);
	dst[0] = 0;
	if (!v || !*v || strlen(v) >= len)
		return;
	for (const char *p = v; *p; p++)
		if (*p < 0x21 || *p > 0x7e)
			return;
	if (path && !js_name_safe(v))
		return;
	snprintf(dst, len, "%s", v);
}

static uint64_t cache_max_age_ns(const struct js_conf *c)
{
	return (uint64_t)c->job_cache_hours * 3600ULL * 1000000000ULL;
}

/* remote_init: the job's identity and accounting fields. */
static void job_meta(struct js_step *s)
{
	struct js_jobcache c;
	uint64_t mtime = 0, now = now_ns(CLOCK_REALTIME);
	int rc = -ENOENT;
	s->first_seen_ns = s->start_ns;
	s->job_source = "step";
	if (s->conf.job_cache_hours) {
		rc = js_jobcache_load(s->conf.state, s->job_id, &c, &mtime);
		if (!rc)
			rc = js_jobcache_check(&c, s->job_id, (uint32_t)s->uid, s->start_ns, mtime, now,
					       cache_max_age_ns(&s->conf));
	}
	if (!rc) {
		s->first_seen_ns = c.first_seen_ns;
		s->job_source = "prolog";
		memcpy(s->account, c.account, sizeof(s->account));
		memcpy(s->partition, c.partition, sizeof(s->partition));
		memcpy(s->gpu_sel, c.gpus, sizeof(s->gpu_sel));
		if (!s->conf.cluster[0] && js_name_safe(c.cluster))
			snprintf(s->cluster, sizeof(s->cluster), "%s", c.cluster);
	} else if (s->conf.job_cache_hours) {
		/* provenance.job_source "step" says it in the record */
		slurm_verbose("joulestep: job %u step %s: no job cache from the job prolog (%s); account and partition unknown, job keyed by the step start",
			      s->job_id, s->step_id,
			      rc == -ENOENT ? "the prolog did not run: restart slurmd once after installing joulestep"
					    : strerror(-rc));
	}
	if (s->conf.cluster[0])
		snprintf(s->cluster, sizeof(s->cluster), "%s", s->conf.cluster);
	else if (!s->cluster[0])
		snprintf(s->cluster, sizeof(s->cluster), "default");
}

static void recover_all(const struct js_conf *c, uint32_t jobid, const char *when)
{
	int nrest = 0;
	int rc = js_freq_recover(c->state, c->sysfs, false, &nrest);
	if (rc < 0 && rc != -ENOENT)
		slurm_error("joulestep: job %u: %s: recover orphaned CPUs: %s", jobid, when, strerror(-rc));
	else if (nrest)
		slurm_info("joulestep: job %u: %s: restored %d CPU(s) left changed by a killed step",
			   jobid, when, nrest);
}

/* Job prolog and epilog: records a full, read-only or missing spool sent to
 * <state>/pending go into the spool once it takes them (js_pending.c). */
static void flush_pending(const struct js_conf *c, uint32_t jobid, const char *when)
{
	unsigned moved = 0, lost = 0;
	int rc = js_pending_flush(c->spool, c->state, 4096, &moved, &lost);
	if (moved || lost)
		slurm_info("joulestep: job %u: %s: moved %u pending record(s) into %s, counted %u lost",
			   jobid, when, moved, c->spool, lost);
	if (rc < 0)
		slurm_error("joulestep: job %u: %s: records stay in %s/pending: spool %s: %s", jobid,
			    when, c->state, c->spool, strerror(-rc));
}

/* Job prolog and epilog: this node's plugstack arguments and the job id.
 * 0, or -1 (logged). */
static int job_script_begin(spank_t sp, int ac, char **av, const char *what, struct js_conf *c,
			    uint32_t *jobid)
{
	char err[400];
	if (node_conf_parse(ac, av, c, err, sizeof(err))) {
		slurm_error("joulestep: plugstack.conf: %s; plugin disabled", err);
		return -1;
	}
	if (spank_get_item(sp, S_JOB_ID, jobid) != ESPANK_SUCCESS) {
		slurm_error("joulestep: %s: cannot get the job id; nothing done", what);
		return -1;
	}
	return 0;
}

/* Job prolog (slurmd runs `slurmstepd spank prolog` as root on each node
 * before the job's first step there, environment from slurmd): cache the
 * job's trusted metadata, and restore CPUs that a killed slurmstepd left
 * changed. Always 0: a failing prolog would drain the node. */
int slurm_spank_job_prolog(spank_t sp, int ac, char **av)
{
	struct js_conf c;
	struct js_jobcache e;
	char idbuf[16];
	uint32_t jobid = 0;
	uid_t uid = 0;
	if (job_script_begin(sp, ac, av, "prolog", &c, &jobid))
		return 0;
	recover_all(&c, jobid, "prolog");
	js_gpu_recover_node(&c, jobid, "prolog");
	js_uncore_recover_node(&c, jobid, "prolog");
	flush_pending(&c, jobid, "prolog");
	if (!c.job_cache_hours)
		return 0;
	memset(&e, 0, sizeof(e));
	e.job_id = jobid;
	e.first_seen_ns = now_ns(CLOCK_REALTIME);
	if (spank_get_item(sp, S_JOB_UID, &uid) == ESPANK_SUCCESS) {
		e.uid = (uint32_t)uid;
	} else {
		env_field("SLURM_JOB_UID", idbuf, sizeof(idbuf), false);
		e.uid = (uint32_t)strtoul(idbuf, NULL, 10);
	}
	/* slurmd's environment for this job: refuse one that names another */
	env_field("SLURM_JOB_ID", idbuf, sizeof(idbuf), false);
	if (strtoul(idbuf, NULL, 10) == jobid) {
		env_field("SLURM_JOB_ACCOUNT", e.account, sizeof(e.account), false);
		env_field("SLURM_JOB_PARTITION", e.partition, sizeof(e.partition), false);
		env_field("SLURM_CLUSTER_NAME", e.cluster, sizeof(e.cluster), true);
		/* the job's GPUs on this node: slurmd sets it in the prolog's
		 * environment from the job's credential (docs/design.md, "Which
		 * GPUs a step owns"); the job's own variables never reach here */
		char gpus[sizeof(e.gpus)];
		env_field("SLURM_JOB_GPUS", gpus, sizeof(gpus), false);
		if (js_jobcache_gpus(gpus, e.gpus, sizeof(e.gpus)) < 0)
			slurm_error("joulestep: job %u: prolog: SLURM_JOB_GPUS='%s' is not a list of GPU indices; the job's GPUs are not measured",
				    jobid, gpus);
	}
	int rc = js_jobcache_store(c.state, &e);
	if (rc < 0)
		slurm_error("joulestep: job %u: prolog: cannot cache the job in %s/jobs: %s", jobid,
			    c.state, strerror(-rc));
	return 0;
}

static void node_model(struct js_step *s)
{
	char path[JS_PATH_MAX + 64], buf[96] = "";
	snprintf(path, sizeof(path), "%s/devices/virtual/dmi/id/product_name", s->conf.sysfs);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		buf[n > 0 ? n : 0] = 0;
		buf[strcspn(buf, "\n")] = 0;
	}
	struct js_cpuset on;
	int non = js_cpufreq_online(s->conf.sysfs, &on) == 0 ? js_cpuset_count(&on) : 0;
	const char *drv = s->ncpus ? s->cf[0].driver : "";
	if (buf[0])
		snprintf(s->node_model, sizeof(s->node_model), "%s", buf);
	else
		snprintf(s->node_model, sizeof(s->node_model), "%s-%dcpu-%ukHz", drv[0] ? drv : "nocpufreq",
			 non, s->fmax_khz);
}

/* SMT (docs/design.md, "SMT"): a core whose threads are not all the step's
 * keeps its clock; said once in the log and kept in the record. */
static void smt_aside(struct js_step *s, const struct js_cpu_topo *topo)
{
	struct js_cpuset whole;
	js_cpu_topo_smt_split(topo, &s->cpus, &whole, &s->smt_aside);
	if (!js_cpuset_count(&s->smt_aside))
		return;
	char list[256];
	if (js_cpuset_format(&s->smt_aside, list, sizeof(list)) < 0)
		snprintf(list, sizeof(list), "%d CPUs", js_cpuset_count(&s->smt_aside));
	slurm_info("joulestep: job %u step %s: SMT: cpu %s share a core with threads that are not the step's; their clocks are left alone",
		   s->job_id, s->step_id, list);
}

/* +uncore-io: the packages all of whose CPUs (those the topology lists:
 * online) are the step's. */
static void owned_packages(struct js_step *s, const struct js_cpu_topo *topo)
{
	struct js_cpuset seen, partial;
	js_cpuset_zero(&seen);
	js_cpuset_zero(&partial);
	for (int c = 0; c < JS_MAX_CPUS; c++) {
		if (!js_cpuset_isset(&topo->present, c) || topo->pkg[c] < 0)
			continue;
		js_cpuset_set(&seen, topo->pkg[c]);
		if (!js_cpuset_isset(&s->cpus, c))
			js_cpuset_set(&partial, topo->pkg[c]);
	}
	for (int w = 0; w < JS_MAX_CPUS / 64; w++)
		s->pkgs_owned.bits[w] = seen.bits[w] & ~partial.bits[w];
}

/* The step's Linux CPUs. Slurm gives the step's cores (S_STEP_ALLOC_CORES,
 * batch: S_JOB_ALLOC_CORES: from the job credential, signed by slurmctld) in
 * its abstract numbering; they are translated as Slurm's task plugins do
 * (xcpuinfo_abs_to_mac), with the node's topology under the sysfs root and
 * Slurm's ThreadsPerCore (threads_per_core=; auto: every SMT sibling). */
static void parse_cpus(spank_t sp, struct js_step *s)
{
	char *cores = NULL;
	struct js_cpuset abs;
	js_cpuset_zero(&s->cpus);
	js_cpuset_zero(&s->smt_aside);
	js_cpuset_zero(&s->pkgs_owned);
	if (spank_get_item(sp, S_STEP_ALLOC_CORES, &cores) != ESPANK_SUCCESS || !cores || !*cores)
		if (spank_get_item(sp, S_JOB_ALLOC_CORES, &cores) != ESPANK_SUCCESS)
			cores = NULL;
	if (!cores || js_cpuset_parse(cores, &abs) < 0) {
		js_step_error(s, "cpus: cannot read the step's allocated cores (%s); no frequency control",
			      cores ? cores : "none");
		return;
	}
	struct js_cpu_topo *topo = calloc(1, sizeof(*topo));
	int rc = topo ? js_cpu_topo_read(s->conf.sysfs, topo) : -ENOMEM;
	if (rc == 0)
		rc = js_cpu_topo_abs_to_cpus(topo, &abs, s->conf.threads_per_core, &s->cpus);
	if (rc == 0) {
		smt_aside(s, topo);
		owned_packages(s, topo);
	}
	free(topo);
	if (rc < 0) {
		const char *why = rc == -ERANGE ? "fewer cores than slurm.conf's node layout"
						: strerror(-rc);
		js_step_error(s, "cpus: cannot map Slurm's cores %s to this node's CPUs (%s/devices/system/cpu/cpuN/topology: %s); no frequency control",
			      cores, s->conf.sysfs, why);
		js_cpuset_zero(&s->cpus);
		js_cpuset_zero(&s->smt_aside);
	}
}

/* cpufreq of the step's CPUs, read once per step (and whether the step has
 * the node's cpufreq CPUs to itself); the nominal clock of the first one. */
static void setup_cpus(struct js_step *s)
{
	int n = js_cpuset_count(&s->cpus);
	if (n <= 0)
		return;
	s->cf = calloc((size_t)(n < JS_MAX_STEP_CPUS ? n : JS_MAX_STEP_CPUS), sizeof(*s->cf));
	if (!s->cf) {
		js_step_error(s, "cpus: out of memory; no frequency control");
		return;
	}
	struct js_cpuset online;
	int have_online = js_cpufreq_online(s->conf.sysfs, &online) == 0;
	s->exclusive = have_online;
	for (int c = 0; c < JS_MAX_CPUS; c++) {
		if (have_online && js_cpuset_isset(&online, c) && !js_cpuset_isset(&s->cpus, c))
			s->exclusive = false;
		if (!js_cpuset_isset(&s->cpus, c))
			continue;
		if (s->ncpus == JS_MAX_STEP_CPUS)
			break;
		int rc = js_cpufreq_read(s->conf.sysfs, c, &s->cf[s->ncpus]);
		if (rc < 0) {
			js_step_error(s, "freq: cpu%d: cpufreq: %s", c, strerror(-rc));
			continue;
		}
		s->cpu_list[s->ncpus++] = c;
		if (s->cf[s->ncpus - 1].cpuinfo_max_khz > s->fmax_khz)
			s->fmax_khz = s->cf[s->ncpus - 1].cpuinfo_max_khz;
	}
	s->nominal_khz = s->ncpus ? js_freq_nominal_khz(&s->cf[0]) : 0;
}

static void resolve_policy(spank_t sp, struct js_step *s)
{
	char err[400], envbuf[600];
	const char *pol = g_opt_policy;
	const char *tags = g_opt_tags;
	/* srun steps inside an sbatch/salloc job: the allocation's options
	 * reach them through the job environment. */
	if (!pol) {
		getenv_s(sp, OPT_ENV_PREFIX "energy_policy", envbuf, sizeof(envbuf));
		if (envbuf[0])
			pol = g_opt_policy = strdup(envbuf);
	}
	if (!tags) {
		getenv_s(sp, OPT_ENV_PREFIX "energy_tag", envbuf, sizeof(envbuf));
		if (envbuf[0])
			tags = g_opt_tags = strdup(envbuf);
	}
	memset(&s->policy, 0, sizeof(s->policy));
	s->policy.type = s->conf.default_policy;
	if (pol && *pol) {
		struct js_policy p;
		if (js_policy_parse(pol, &p, err, sizeof(err)))
			js_step_error(s, "policy: --energy-policy=%s refused: %s; using %s", pol, err,
				      js_pol_name(s->conf.default_policy));
		else
			s->policy = p;
	}
	if (tags && *tags && js_tags_parse(tags, &s->tags, err, sizeof(err)))
		js_step_error(s, "tags: --energy-tag refused: %s", err);
	/* a policy the admin does not allow becomes the default one (which
	 * may be tuned or auto); then the file policies read their file, and
	 * the admin's bounds clamp the map they give */
	int n = js_policy_enforce(&s->policy, &s->conf, err, sizeof(err));
	if (n)
		js_step_error(s, "policy: admin bounds: %s", err);
	/* tuned: the admin's file gives the phase map (allowed only with a
	 * tuned= file, js_conf_parse); if it cannot be used, the step only
	 * measures. */
	if (s->policy.type == JS_POL_TUNED && (s->conf.policies_mask & (1u << JS_POL_TUNED)) &&
	    js_tuned_load(s->conf.tuned, &s->policy, s->tuned_model, sizeof(s->tuned_model), err,
			  sizeof(err))) {
		js_step_error(s, "policy: tuned file %s: %s; the step runs as monitor", s->conf.tuned, err);
		memset(&s->policy, 0, sizeof(s->policy));
		s->policy.type = JS_POL_MONITOR;
	}
	if (s->policy.type == JS_POL_AUTO)
		js_auto_resolve(s);
	n = js_policy_enforce(&s->policy, &s->conf, err, sizeof(err));
	if (n)
		js_step_error(s, "policy: admin bounds: %s", err);
}

/* The original clock, as the record's base_freq_khz: the first step CPU's
 * scaling_max_freq, read at step start (a step that controls nothing never
 * changed it); setup_freq then puts the first controlled policy's saved
 * scaling_max_freq in its place (the journal's backup: true even when a
 * killed step, or an enclosing step, has the CPU lowered). Not fixed:R's
 * clock: that is fixed_khz. */
static void set_base_khz(struct js_step *s)
{
	s->base_khz = s->ncpus ? s->cf[0].scaling_max_khz : 0;
}

/* Slurm's own --cpu-freq for this step: srun exports it to the step as
 * SLURM_CPU_FREQ_REQ (sbatch to the batch step, whose sruns inherit it).
 * Read from the job's environment, which the user controls: trusting it can
 * only make joulestep leave the clocks alone, as --energy-policy=monitor
 * would. */
static bool slurm_cpu_freq_requested(spank_t sp, char *val, size_t len)
{
	val[0] = 0;
	return spank_getenv(sp, "SLURM_CPU_FREQ_REQ", val, (int)len) == ESPANK_SUCCESS && val[0];
}

/* slurmstepd's main thread, before the tasks start: save each controlled
 * policy's original settings in the journal and open its handle (the only
 * opens of cpufreq files for clock changes in the whole step). A policy that
 * covers a CPU outside the step is never touched. fixed:R is set later, at
 * task_post_fork (apply_fixed), once the step's cpuset has been checked. */
static void setup_freq(spank_t sp, struct js_step *s)
{
	char req[64];
	s->freq_mode = s->policy.type == JS_POL_MONITOR ? "monitor" : "none";
	set_base_khz(s);
	if (s->policy.type == JS_POL_MONITOR)
		return;
	if (slurm_cpu_freq_requested(sp, req, sizeof(req))) {
		s->freq_mode = "slurm-cpu-freq";
		slurm_info("joulestep: job %u step %s: Slurm --cpu-freq=%s requested; joulestep leaves the clocks to Slurm (policy %s not applied)",
			   s->job_id, s->step_id, req, js_pol_name(s->policy.type));
		return;
	}
	if (s->ncpus == 0)
		return;
	int rc = js_root_dir(s->conf.state, 0700);
	if (rc < 0) {
		js_step_error(s, "freq: state directory %s: %s; no frequency control", s->conf.state,
			      strerror(-rc));
		return;
	}
	s->ctl = calloc((size_t)s->ncpus, sizeof(*s->ctl));
	if (!s->ctl) {
		js_step_error(s, "freq: out of memory; no frequency control");
		return;
	}
	struct js_cpuset seen; /* policies handled (by policy number) */
	js_cpuset_zero(&seen);
	struct js_cpuset mine = s->cpus; /* less the SMT cores not wholly the step's */
	for (int w = 0; w < JS_MAX_CPUS / 64; w++)
		mine.bits[w] &= ~s->smt_aside.bits[w];
	uint32_t base_khz = 0;
	for (int i = 0; i < s->ncpus; i++) {
		const struct js_cpufreq *f = &s->cf[i];
		int pol = f->policy >= 0 ? f->policy : f->cpu;
		if (js_cpuset_isset(&s->smt_aside, s->cpu_list[i]))
			continue; /* smt_aside: logged and recorded */
		if (js_cpuset_isset(&seen, pol))
			continue; /* one handle per policy: its CPUs share the files */
		js_cpuset_set(&seen, pol);
		if (js_freq_policy_shared(f, &mine)) {
			js_step_error(s, "freq: policy %d shared with CPUs outside the step", pol);
			continue;
		}
		/* orig: the journal's backup (the record's base clock, what the
		 * last owner restores); entry: what is in force now, which this
		 * step returns to at a phase end and at its end: the original
		 * unless an enclosing step (the batch step of an srun step) holds
		 * the CPU changed, whose setting this step must not undo. */
		struct js_freq_saved orig, entry;
		rc = js_freq_acquire_entry(s->conf.state, s->conf.sysfs, js_freq_domain_key(f), s->owner,
					   0, &orig, &entry);
		if (rc < 0) {
			js_step_error(s, "freq: cpu%d: save state: %s; clock left alone", s->cpu_list[i],
				      strerror(-rc));
			continue;
		}
		s->acquired[i] = true; /* released (and restored) at step end */
		struct js_cpufreq now = *f;
		now.scaling_min_khz = entry.min_khz;
		now.scaling_max_khz = entry.max_khz;
		rc = js_freq_ctl_open(s->conf.sysfs, &now, entry.min_khz, entry.max_khz,
				      &s->ctl[s->nctl]);
		if (rc < 0) {
			js_step_error(s, "freq: cpu%d: open cpufreq for writing: %s; clock left alone",
				      s->cpu_list[i], strerror(-rc));
			continue;
		}
		if (s->nctl++ == 0)
			base_khz = orig.max_khz;
	}
	if (s->nctl)
		s->freq_mode = "joulestep";
	set_base_khz(s);
	if (s->nctl)
		s->base_khz = base_khz; /* the journal's original, not an enclosing step's cap */
}

/* fixed:R, once the step's cpuset has been checked (task_post_fork: the
 * tasks have not exec'ed yet); nothing where the check vetoed clocks. */
static void apply_fixed(struct js_step *s)
{
	if (s->fixed_done)
		return;
	s->fixed_done = true;
	if (s->nctl && s->policy.type == JS_POL_FIXED) {
		uint32_t khz = 0;
		uint64_t took;
		if (ph_set_ratio(s, JS_RATIO_BASE, &khz, &took) == 0)
			s->fixed_khz = khz;
	}
}

/* node_energy=: the node's own meter beside RAPL (pm_counters, Grace
 * hwmon). Its meter samples power sensors from a thread of its own, with
 * every signal blocked (as the RAPL meter's thread); counters need none.
 * None found is no error: the record says why (step.node_meter_sources). */
static void setup_node_energy(struct js_step *s)
{
	char why[512] = "";
	int rc;

	if (!s->conf.node_energy[0])
		return;
	rc = js_node_open(s->conf.sysfs, strcmp(s->conf.node_energy, "auto") ? s->conf.node_energy : NULL,
			  &s->nsrc, why, sizeof(why));
	if (rc < 0) {
		for (char *p = why; *p; p++)
			if (*p == '\n')
				*p = ';';
		snprintf(s->node_why, sizeof(s->node_why), "no node source: %s", why);
		s->nsrc = NULL;
		return;
	}
	rc = js_node_meter_start(s->nsrc, 0, true, &s->node_meter);
	if (rc < 0) {
		js_step_error(s, "node energy: meter: %s", strerror(-rc));
		js_node_close(s->nsrc);
		s->nsrc = NULL;
		return;
	}
	s->have_n0 = js_node_meter_snapshot(s->node_meter, &s->n0) == 0;
}

/* The shared-node inputs at step start (js_share.h): the node's topology
 * (kept for the end), the step's packages, their busy time, the CPU time of
 * slurmstepd's children so far. A failure leaves them out of the record. */
static void share_start(struct js_step *s)
{
	if (js_cpuset_count(&s->cpus) <= 0)
		return;
	s->topo = calloc(1, sizeof(*s->topo));
	int rc = s->topo ? js_cpu_topo_read(s->conf.sysfs, s->topo) : -ENOMEM;
	if (rc == 0)
		rc = js_share_layout(s->topo, &s->cpus, &s->sh0);
	if (rc == 0)
		rc = js_share_read_stat(s->conf.procfs, s->topo, &s->sh0);
	if (rc < 0) {
		js_step_error(s, "share: %s/stat: %s; no per-package CPU time in the record",
			      s->conf.procfs, strerror(-rc));
		free(s->topo);
		s->topo = NULL;
		return;
	}
	s->sh0.cpu_time_us = js_share_children_us();
	s->have_sh0 = true;
}

/* At the final reading: the tasks have been reaped, their CPU time is in
 * slurmstepd's children's. */
static void share_end(struct js_step *s)
{
	if (!s->have_sh0)
		return;
	s->sh1 = s->sh0;
	int rc = js_share_read_stat(s->conf.procfs, s->topo, &s->sh1);
	if (rc < 0) {
		js_step_error(s, "share: %s/stat at step end: %s", s->conf.procfs, strerror(-rc));
		return;
	}
	s->sh1.cpu_time_us = js_share_children_us();
	s->have_sh1 = true;
}

static void step_free(struct js_step *s)
{
	if (!s)
		return;
	free(s->topo);
	js_cgroup_step_free(s);
	js_phases_free(s->phases);
	js_gpu_step_close(s);
	if (s->meter)
		js_meter_stop(s->meter);
	if (s->energy)
		js_energy_close(s->energy);
	js_node_meter_stop(s->node_meter);
	js_node_close(s->nsrc);
	pthread_mutex_destroy(&s->err_mu);
	free(s->cf);
	free(s);
}

static void recover(struct js_step *s)
{
	int nrest = 0;
	int rc = js_freq_recover(s->conf.state, s->conf.sysfs, false, &nrest);
	if (rc < 0)
		js_step_error(s, "freq: recover orphaned CPUs: %s", strerror(-rc));
	else if (nrest)
		slurm_info("joulestep: restored %d CPU(s) left changed by a killed step", nrest);
}

/* Does the journal hold a saved clock (cpuN.orig, freq.h, N the policy) for
 * one of the step's CPUs? Then a killed step may have left it changed:
 * recover before the tasks start. Otherwise recovery (of other CPUs only)
 * can wait for the step thread. Creates the state directory like every
 * journal user. */
static bool own_cpu_saved(struct js_step *s)
{
	int dfd = js_root_dirfd(s->conf.state, 0700, true);
	if (dfd < 0)
		return false; /* recovery would fail the same way; said there */
	bool found = false;
	for (int c = 0; c < JS_MAX_CPUS && !found; c++) {
		char name[32];
		struct stat st;
		if (!js_cpuset_isset(&s->cpus, c))
			continue;
		/* the journal's key: the CPU's policy (cpuN/cpufreq -> ../cpufreq/policyK) */
		char link[JS_PATH_MAX + 64], target[256];
		int key = c;
		snprintf(link, sizeof(link), "%s/devices/system/cpu/cpu%d/cpufreq", s->conf.sysfs, c);
		ssize_t n = readlink(link, target, sizeof(target) - 1);
		if (n > 0) {
			target[n] = 0;
			if (js_parse_policy_link(target, &key) < 0)
				key = c;
		}
		snprintf(name, sizeof(name), "cpu%d.orig", key);
		found = fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT;
	}
	close(dfd);
	return found;
}

/* Step end, slurmstepd's main thread: what only feeds the record (a
 * monitor step's clocks, the node model) is read here rather than on the
 * launch path or in the step thread (which may only use descriptors opened
 * here: slurmstepd switches the whole process's euid while it launches
 * tasks). */
static void step_info_at_end(struct js_step *s)
{
	if (s->defer_cpus) { /* monitor: the clocks are only reported */
		setup_cpus(s);
		set_base_khz(s);
		s->defer_cpus = false;
	}
	node_model(s);
	if (s->policy.type == JS_POL_TUNED && s->tuned_model[0] &&
	    strcmp(s->tuned_model, s->node_model))
		js_step_error(s, "policy: tuned file %s was made for node model '%s', this node is '%s'; applied anyway",
			      s->conf.tuned, s->tuned_model, s->node_model);
}

/* ---- --energy-hooks (docs/admin-guide.md, "Phase hooks") ----------------
 * Prepend the admin's hook libraries to the tasks' LD_PRELOAD. Only the
 * names come from the job (its option, or the allocation's through the job
 * environment); the paths come from hooks_dir= or the plugin's own location,
 * never from the job's environment. Each library must be a root-owned
 * regular file (not a symlink), not group/world-writable, in a directory
 * that passes js_root_dirfd's walk (every component root-owned, not
 * group/world-writable): the job cannot put code into another job's
 * processes through it, nor swap the file between the check and ld.so's
 * open. Paths of this plugin's hooks already in LD_PRELOAD (a batch step's
 * reach the sruns it starts) are removed first, so that a step gets exactly
 * the hooks it asked for, once; the job's own entries are kept, after ours.
 * Never fails the step: a hook that cannot be used is skipped and
 * provenance.errors says why. Runs on slurmstepd's main thread, before the
 * step thread exists. */
static void hooks_dir(const struct js_step *s, char *dir, size_t len)
{
	Dl_info di;
	if (s->conf.hooks_dir[0])
		snprintf(dir, len, "%s", s->conf.hooks_dir);
	else if (!dladdr((void *)slurm_spank_init, &di) || !di.dli_fname ||
		 js_hooks_default_dir(di.dli_fname, dir, len))
		dir[0] = 0;
}

static unsigned hooks_trusted(struct js_step *s, const char *dir, unsigned want)
{
	unsigned ok = 0;
	int dfd = js_root_dirfd(dir, 0755, false);
	if (dfd < 0) {
		js_step_error(s, "hooks: %s: %s (it must exist, and it and every parent be root-owned and not group/world-writable); no hooks preloaded",
			      dir, strerror(-dfd));
		return 0;
	}
	for (int i = 0; i < JS_HOOK_COUNT; i++) {
		struct stat st;
		if (!(want & (1u << i)))
			continue;
		const char *lib = js_hook_lib((enum js_hook)i);
		if (fstatat(dfd, lib, &st, AT_SYMLINK_NOFOLLOW) < 0)
			js_step_error(s, "hooks: %s/%s: %s; hook %s not preloaded", dir, lib, strerror(errno),
				      js_hook_name((enum js_hook)i));
		else if (!S_ISREG(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022))
			js_step_error(s, "hooks: %s/%s is not a root-owned regular file without group/world write permission; hook %s not preloaded",
				      dir, lib, js_hook_name((enum js_hook)i));
		else
			ok |= 1u << i;
	}
	close(dfd);
	return ok;
}

static void setup_hooks(spank_t sp, struct js_step *s)
{
	char err[400], req[600], dir[JS_PATH_MAX], paths[JS_HOOK_COUNT][JS_PATH_MAX + 32];
	const char *add[JS_HOOK_COUNT], *drop[JS_HOOK_COUNT];
	size_t nadd = 0, ndrop = 0;
	unsigned want = 0;
	snprintf(req, sizeof(req), "%s", g_opt_hooks ? g_opt_hooks : "");
	if (!g_opt_hooks) /* an srun step: the allocation's option */
		getenv_s(sp, OPT_ENV_PREFIX "energy_hooks", req, sizeof(req));
	if (js_hooks_parse(req, &want, err, sizeof(err)))
		js_step_error(s, "hooks: --energy-hooks=%s: %s; the known ones are applied", req, err);
	hooks_dir(s, dir, sizeof(dir));
	for (int i = 0; dir[0] && i < JS_HOOK_COUNT; i++) {
		snprintf(paths[i], sizeof(paths[i]), "%s/%s", dir, js_hook_lib((enum js_hook)i));
		drop[ndrop++] = paths[i];
	}
	if (want && !dir[0])
		js_step_error(s, "hooks: cannot tell the plugin's directory; set hooks_dir= in plugstack.conf; no hooks preloaded");
	else if (want && !s->sock_path[0])
		js_step_error(s, "hooks: the step has no phase socket; no hooks preloaded");
	else if (want)
		s->hooks_mask = hooks_trusted(s, dir, want);
	for (int i = 0; i < JS_HOOK_COUNT; i++)
		if (s->hooks_mask & (1u << i))
			add[nadd++] = paths[i];
	if (!ndrop)
		return;
	char old[JS_PRELOAD_MAX], out[JS_PRELOAD_MAX], norm[JS_PRELOAD_MAX];
	spank_err_t e = spank_getenv(sp, "LD_PRELOAD", old, sizeof(old));
	if (e == ESPANK_ENV_NOEXIST) {
		old[0] = 0;
	} else if (e != ESPANK_SUCCESS) {
		if (nadd)
			js_step_error(s, "hooks: cannot read the job's LD_PRELOAD (%s); no hooks preloaded",
				      spank_strerror(e));
		s->hooks_mask = 0;
		return;
	}
	/* nothing to add and nothing of ours in it: the job's value stays as is */
	if (!nadd && !js_hooks_preload(old, NULL, 0, NULL, 0, out, sizeof(out)) &&
	    !js_hooks_preload(out, NULL, 0, drop, ndrop, norm, sizeof(norm)) && !strcmp(out, norm)) {
		(void)spank_unsetenv(sp, "JOULESTEP_HOOKS");
		return;
	}
	if (js_hooks_preload(old, add, nadd, drop, ndrop, out, sizeof(out))) {
		js_step_error(s, "hooks: LD_PRELOAD would exceed %d characters; no hooks preloaded",
			      JS_PRELOAD_MAX - 1);
		s->hooks_mask = 0;
		return;
	}
	if (strcmp(out, old) &&
	    (out[0] ? spank_setenv(sp, "LD_PRELOAD", out, 1) : spank_unsetenv(sp, "LD_PRELOAD")) !=
		    ESPANK_SUCCESS) {
		js_step_error(s, "hooks: cannot set the tasks' LD_PRELOAD; no hooks preloaded");
		s->hooks_mask = 0;
	}
	/* what was applied, for the job's own information */
	js_hooks_format(s->hooks_mask, req, sizeof(req));
	if (req[0])
		spank_setenv(sp, "JOULESTEP_HOOKS", req, 1);
	else
		spank_unsetenv(sp, "JOULESTEP_HOOKS");
}

/* Slurm's --gpu-freq: slurmstepd gives the step's TRES frequencies to the
 * tasks as SLURMD_TRES_FREQ ("gpu:medium"), so an srun step of a job
 * submitted with sbatch --gpu-freq finds it here (the batch script's
 * environment); SLURM_GPU_FREQ where the user exported it. An `srun
 * --gpu-freq` of its own is not seen (Slurm sets the variable in the forked
 * task only): docs/design.md. From the job's environment, which can only
 * make joulestep step aside, as for --cpu-freq. */
static void gpu_clock_setup(spank_t sp, struct js_step *s)
{
	char req[128] = "";
	bool gf = (spank_getenv(sp, "SLURMD_TRES_FREQ", req, sizeof(req)) == ESPANK_SUCCESS &&
		   strstr(req, "gpu")) ||
		  (spank_getenv(sp, "SLURM_GPU_FREQ", req, sizeof(req)) == ESPANK_SUCCESS && req[0]);
	js_gpu_step_clock_setup(s, gf, req);
}

/* Step start (issue 23, defect 6): a root-only marker in <state>/pending
 * that the job epilog counts as a lost record when the step never writes
 * one (slurmstepd killed): the step's start and its first reading's time. */
static void step_started_marker(struct js_step *s)
{
	char name[256];
	js_record_name(s, name, sizeof(name));
	int rc = js_pending_started(s->conf.state, s->cluster, s->job_id, name, s->start_ns,
				    s->have_s0 ? s->s0.t_ns : 0);
	if (rc < 0)
		js_step_error(s, "record: step-start marker in %s/pending: %s", s->conf.state,
			      strerror(-rc));
}

static int remote_init(spank_t sp)
{
	uint32_t jobid = 0, stepid = 0;
	if (spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_STEPID, &stepid) != ESPANK_SUCCESS) {
		slurm_error("joulestep: cannot get the job/step id; step not recorded");
		return 0;
	}
	if (stepid == SLURM_EXTERN_CONT)
		return 0; /* extern step: no record (docs/admin-guide.md) */
	struct js_step *s = calloc(1, sizeof(*s));
	if (!s) {
		slurm_error("joulestep: job %u: out of memory; step not recorded", jobid);
		return 0;
	}
	pthread_mutex_init(&s->err_mu, NULL);
	s->listen_fd = s->stop_fd = s->proc_fd = -1;
	s->exit_code = -1;
	s->conf = g_conf;
	s->job_id = jobid;
	if (stepid == SLURM_BATCH_SCRIPT)
		snprintf(s->step_id, sizeof(s->step_id), "batch");
	else if (stepid == SLURM_INTERACTIVE_STEP)
		snprintf(s->step_id, sizeof(s->step_id), "interactive");
	else
		snprintf(s->step_id, sizeof(s->step_id), "%u", stepid);
	snprintf(s->owner, sizeof(s->owner), "job%u.%s", jobid, s->step_id);
	s->start_ns = now_ns(CLOCK_REALTIME);
	s->start_mono_ns = now_ns(CLOCK_MONOTONIC);
	s->mono_to_real_ns = (int64_t)s->start_ns - (int64_t)s->start_mono_ns;
	g_step = s;
	g_step_pid = getpid();

	spank_get_item(sp, S_JOB_UID, &s->uid);
	spank_get_item(sp, S_JOB_GID, &s->gid);
	spank_get_item(sp, S_JOB_NNODES, &s->nnodes);
	spank_get_item(sp, S_JOB_NODEID, &s->nodeid);
	spank_get_item(sp, S_JOB_TOTAL_TASK_COUNT, &s->ntasks);
	if (stepid == SLURM_BATCH_SCRIPT) { /* the batch script: one task, one node */
		s->nnodes = s->nnodes ? s->nnodes : 1;
		s->ntasks = s->ntasks ? s->ntasks : 1;
	}
	struct passwd pw, *pwp = NULL;
	char pwbuf[4096];
	if (getpwuid_r(s->uid, &pw, pwbuf, sizeof(pwbuf), &pwp) == 0 && pwp)
		snprintf(s->user, sizeof(s->user), "%s", pw.pw_name);
	char node[64];
	if (node_name(node, sizeof(node)))
		snprintf(node, sizeof(node), "unknown");
	snprintf(s->node, sizeof(s->node), "%s", node);
	/* het_component stays 0: every het component has its own job ID, and
	 * the job's SLURM_HET_JOB_OFFSET is the user's to set. */
	job_meta(s);

	resolve_policy(sp, s);
	parse_cpus(sp, s);

	/* Orphans of a killed slurmstepd (pid-checked, not forced), when one
	 * of this step's CPUs may be affected; the job prolog and epilog
	 * recover the node's other CPUs. */
	if (own_cpu_saved(s))
		recover(s);

	/* The clocks are read now when the policy may change them; a monitor
	 * step only reports them (read at step end, on this thread). */
	if (s->policy.type == JS_POL_MONITOR)
		s->defer_cpus = true;
	else
		setup_cpus(s);

	/* The first reading must precede the tasks. The meter's sampling is
	 * done by the step thread (one thread per step, not two). */
	char why[1024] = "";
	struct js_energy_opts eo = {.sysfs_root = s->conf.sysfs, .order = s->conf.backend};
	int rc = js_energy_open(&eo, &s->energy, why, sizeof(why));
	if (rc < 0) {
		for (char *p = why; *p; p++)
			if (*p == '\n')
				*p = ';';
		js_step_error(s, "energy: no backend (%s): %s", s->conf.backend, why);
		s->energy = NULL;
	} else {
		/* what the user's view is rounded to (js_sidechan.h): the zones'
		 * energy in one counter update at their maximum power */
		const struct js_zone_set *zs = js_energy_zones(s->energy);
		uint64_t maxp[JS_MAX_ZONES];
		for (size_t i = 0; i < zs->nzones; i++)
			maxp[i] = zs->zones[i].max_power_uw;
		s->energy_resolution_uj = js_energy_resolution_uj(maxp, zs->nzones, JS_RAPL_UPDATE_NS);
		rc = js_meter_start(s->energy, (uint64_t)s->conf.sample_ms * 1000000ULL, false, &s->meter);
		if (rc < 0) {
			js_step_error(s, "energy: meter: %s", strerror(-rc));
			s->meter = NULL;
		} else if (js_meter_snapshot(s->meter, &s->s0) == 0) {
			s->have_s0 = true;
		}
	}

	step_started_marker(s);
	share_start(s);
	setup_node_energy(s);
	js_gpu_step_open(s); /* the job's GPUs (the prolog's cache), beside RAPL */
	gpu_clock_setup(sp, s);

	setup_freq(sp, s); /* fixed:R is set at task_post_fork, before the tasks exec */
	js_uncore_step_setup(s); /* +uncore-io: journaled, descriptors opened */

	struct js_phase_ops ops = {.ctx = s, .set_ratio = ph_set_ratio, .snap = ph_snap, .now_ns = ph_now,
				   .snap_gpu = s->gmeter ? ph_snap_gpu : NULL,
				   .set_gpu = s->gpu_clock_mode && !strcmp(s->gpu_clock_mode, "joulestep")
						      ? js_gpu_step_set_clock : NULL,
				   .set_uncore = s->nuncore ? js_uncore_step_set : NULL};
	s->phases = js_phases_new(s->conf.max_phases, s->conf.max_depth, &ops, s->start_mono_ns);
	if (!s->phases)
		js_step_error(s, "phases: out of memory; markers disabled");
	else
		js_server_listen(s); /* binds here: main thread, root (js_server.c) */
	/* Exported before the thread starts: the thread must not run while
	 * the environment is being changed. */
	if (s->sock_path[0] &&
	    spank_setenv(sp, "JOULESTEP_SOCKET", s->sock_path, 1) != ESPANK_SUCCESS) {
		js_step_error(s, "socket: cannot export JOULESTEP_SOCKET");
		js_server_unlisten(s);
	}
	setup_hooks(sp, s); /* before the thread: it changes the environment */
	/* Before the thread starts: it fills ncpus of a monitor step. */
	slurm_verbose("joulestep: job %u step %s: policy %s, cpus %d, backend %s, socket %s", s->job_id,
		      s->step_id, js_pol_name(s->policy.type), js_cpuset_count(&s->cpus),
		      s->energy ? js_energy_backend_name(s->energy) : "none", s->sock_path);
	bool exported = s->sock_path[0] != 0;
	if (js_server_start(s) < 0) {
		/* No step thread: no markers; do its work here, and let the
		 * meter sample from a thread of its own. */
		if (exported)
			(void)spank_unsetenv(sp, "JOULESTEP_SOCKET");
		if (s->meter) {
			js_meter_stop(s->meter);
			s->meter = NULL;
			s->have_s0 = false;
			rc = js_meter_start(s->energy, (uint64_t)s->conf.sample_ms * 1000000ULL, true,
					    &s->meter);
			if (rc < 0) {
				js_step_error(s, "energy: meter: %s", strerror(-rc));
				s->meter = NULL;
			} else if (js_meter_snapshot(s->meter, &s->s0) == 0) {
				s->have_s0 = true;
			}
		}
	}
	return 0;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (!spank_remote(sp) || g_step)
		return 0;
	int rc = g_conf_ok ? remote_init(sp) : 0;
	/* No socket bound for this step: an inherited JOULESTEP_SOCKET (a job
	 * that resubmits itself exports its environment) would send the
	 * markers to a stale path. */
	if (!g_step || !g_step->sock_path[0])
		(void)spank_unsetenv(sp, "JOULESTEP_SOCKET");
	return rc;
}

int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	int status;
	if (!g_step || !spank_remote(sp) || spank_get_item(sp, S_TASK_EXIT_STATUS, &status) != ESPANK_SUCCESS)
		return 0;
	int code = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 0;
	if (g_step->exit_code < code)
		g_step->exit_code = code;
	js_cgroup_step_task_exit(g_step);
	return 0;
}

/* slurmstepd, root, the step's cgroup made, the task not yet exec'ed (or
 * a CLONE_VM child of slurmstepd's, with CONTAIN_SPANK): what the cgroup
 * tells (js_cgroup_step.h), then fixed:R, once per step. */
int slurm_spank_task_post_fork(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (!g_step || !spank_remote(sp) || (getpid() != g_step_pid && getppid() != g_step_pid))
		return 0;
	js_cgroup_step_start(g_step);
	apply_fixed(g_step);
	return 0;
}

static void remote_exit(struct js_step *s)
{
	/* The final reading first: the step's energy and duration end here,
	 * not after the plugin's own teardown (drain, journal, record). Phases
	 * still open, and markers handled from now on, end at this reading. */
	uint64_t end_mono = now_ns(CLOCK_MONOTONIC);
	s->end_ns = now_ns(CLOCK_REALTIME);
	s->end_mono_ns = end_mono;
	if (s->node_meter)
		s->have_n1 = js_node_meter_snapshot(s->node_meter, &s->n1) == 0;
	if (s->meter && js_meter_snapshot(s->meter, &s->s1) < 0)
		js_step_error(s, "energy: final reading failed");
	else if (s->meter)
		__atomic_store_n(&s->ended, true, __ATOMIC_RELEASE);
	share_end(s);
	js_gpu_step_end(s); /* as of end_mono; phases still open end there too */
	if (s->have_g1)
		__atomic_store_n(&s->ended, true, __ATOMIC_RELEASE);
	js_server_stop_request(s);
	int dfd = js_record_dir(s);
	js_server_stop(s);
	if (s->phases)
		js_phases_close_all(s->phases, end_mono);
	/* Clocks back first, through the step's own descriptors (even if the
	 * journal below fails) to what was in force when the step started
	 * (an enclosing step's setting stays), then the journal: the last
	 * live owner restores the original and drops the backup. */
	for (int i = 0; i < s->nctl; i++) {
		int rc = js_freq_ctl_restore(&s->ctl[i]);
		if (rc < 0)
			js_step_error(s, "freq: cpu%d: restore: %s", s->ctl[i].cpu, strerror(-rc));
		js_freq_ctl_close(&s->ctl[i]);
	}
	free(s->ctl);
	s->ctl = NULL;
	s->nctl = 0;
	js_gpu_step_clock_restore(s); /* +gpu-io: unlock, then the journal */
	js_uncore_step_restore(s); /* +uncore-io: write back, then the journal */
	for (int i = 0; i < s->ncpus; i++) {
		if (!s->acquired[i])
			continue;
		bool restored = false;
		int rc = js_freq_release(s->conf.state, s->conf.sysfs, js_freq_domain_key(&s->cf[i]),
					 s->owner, &restored);
		if (rc < 0)
			js_step_error(s, "freq: cpu%d: restore: %s (joulestep-restore will retry)",
				      s->cpu_list[i], strerror(-rc));
		s->acquired[i] = false;
	}
	step_info_at_end(s);
	js_record_write(s, dfd);
}

/* Job epilog: step-start markers without a record (a killed slurmstepd)
 * become counted lost records (issue 23, defect 6). */
static void resolve_started(const struct js_conf *c, uint32_t jobid)
{
	unsigned lost = 0;
	int rc = js_pending_started_resolve(c->spool, c->state, jobid, &lost);
	if (rc < 0)
		slurm_error("joulestep: job %u: epilog: step-start markers in %s/pending: %s", jobid,
			    c->state, strerror(-rc));
	else if (lost)
		slurm_error("joulestep: job %u: epilog: %u step(s) ended without a record (slurmstepd killed?); counted as lost",
			    jobid, lost);
}

/* Job epilog (slurmd runs `slurmstepd spank epilog` as root on every node
 * of the job when it ends): restore CPUs a killed step left changed (the
 * journal's recovery), make the job's record renames durable (step end
 * does not fsync the spool directory, see js_record.c), then drop the job's
 * cache file, and any left behind by jobs whose epilog never ran that are
 * older than job_cache_hours. Always 0: a failing epilog would
 * drain the node. */
int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
	struct js_conf c;
	uint32_t jobid = 0;
	if (job_script_begin(sp, ac, av, "epilog", &c, &jobid))
		return 0;
	/* CPUs a killed slurmstepd left changed (pid-checked: live steps of
	 * other jobs keep theirs): restored now, not at the next step on the
	 * node, which may be long in coming. */
	recover_all(&c, jobid, "epilog");
	js_gpu_recover_node(&c, jobid, "epilog");
	js_uncore_recover_node(&c, jobid, "epilog");
	int rc = js_record_sync_job(c.spool, c.cluster, jobid);
	if (rc < 0 && rc != -ENOENT)
		slurm_error("joulestep: job %u: epilog: fsync of the record directory under %s: %s",
			    jobid, c.spool, strerror(-rc));
	resolve_started(&c, jobid);
	flush_pending(&c, jobid, "epilog");
	unsigned n = 0;
	rc = js_jobcache_remove(c.state, jobid,
				    cache_max_age_ns(&c),
				    now_ns(CLOCK_REALTIME), &n);
	if (rc < 0 && rc != -ENOENT)
		slurm_error("joulestep: job %u: epilog: cleaning %s/jobs: %s", jobid, c.state,
			    strerror(-rc));
	else if (n)
		slurm_verbose("joulestep: job %u: epilog removed %u job cache file(s)", jobid, n);
	return 0;
}

/* srun (local context): the job and step ids, known once allocated. */
int slurm_spank_local_user_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (!g_conf_ok || !g_opt_report)
		return 0;
	if (spank_get_item(sp, S_JOB_ID, &g_local_job) == ESPANK_SUCCESS &&
	    spank_get_item(sp, S_JOB_STEPID, &g_local_step) == ESPANK_SUCCESS) {
		g_local_known = true;
		g_local_start_ns = now_ns(CLOCK_REALTIME);
	}
	return 0;
}

/* Keep the summaries of this srun's step: a requeued job's earlier run left
 * its own summary of the same step in the spool (its name differs only in
 * the run's marker), and that step started before this srun created its
 * step. Half a second of slack for the node's clock against srun's; a
 * summary of an older plugin (no start_ns) is judged by its file's time.
 * Returns how many are left. */
static size_t fresh_summaries(glob_t *g, uint64_t since_ns)
{
	const uint64_t slack_ns = 500000000ULL;
	size_t kept = 0;
	for (size_t i = 0; i < g->gl_pathc; i++) {
		struct stat st;
		json_t *r = json_load_file(g->gl_pathv[i], 0, NULL);
		json_t *start = r ? json_object_get(r, "start_ns") : NULL;
		uint64_t t_ns = 0;
		if (json_is_integer(start) && json_integer_value(start) > 0)
			t_ns = (uint64_t)json_integer_value(start);
		else if (stat(g->gl_pathv[i], &st) == 0)
			t_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000ULL + (uint64_t)st.st_mtim.tv_nsec;
		json_decref(r);
		if (r && t_ns + slack_ns >= since_ns)
			g->gl_pathv[kept++] = g->gl_pathv[i];
		else
			free(g->gl_pathv[i]);
	}
	for (size_t i = kept; i < g->gl_pathc; i++)
		g->gl_pathv[i] = NULL;
	g->gl_pathc = kept;
	return kept;
}

#define REPORT_PHASES 32 /* phase lines srun prints per node */

/* The summary's GPUs, one line each: energy, or why there is none. */
static void print_gpus(json_t *r)
{
	json_t *g;
	size_t i;
	json_array_foreach(json_object_get(r, "gpus"), i, g) {
		json_t *e = json_object_get(g, "energy_uj");
		const char *why = json_string_value(json_object_get(g, "reason"));
		if (json_is_integer(e))
			fprintf(stderr, "joulestep:   GPU %s: %.3f J\n",
				json_string_value(json_object_get(g, "uuid")), json_number_value(e) / 1e6);
		else
			fprintf(stderr, "joulestep:   GPU %s: energy not shown (%s)\n",
				json_string_value(json_object_get(g, "uuid")), why ? why : "not measured");
	}
}

/* ", GPU x J" when the total includes the GPUs, ", GPUs not in the total"
 * when a GPU of the step has no figure, else "". */
static const char *gpu_note(json_t *r, char *buf, size_t len)
{
	json_t *eg = json_object_get(r, "energy_gpu_uj");
	if (json_is_integer(eg))
		snprintf(buf, len, ", GPU %.3f J", json_number_value(eg) / 1e6);
	else
		snprintf(buf, len, "%s", json_array_size(json_object_get(r, "gpus")) ? ", GPUs not in the total" : "");
	return buf;
}

/* One user summary (js_record.c, build_user) on srun's stderr: the step,
 * then its GPUs and its first phases. An energy the user may not see is
 * printed as "not shown" with the reason. */
static void print_summary(const char *path, uint32_t jobid, const char *step)
{
	json_error_t je;
	json_t *r = json_load_file(path, 0, &je);
	if (!r) {
		fprintf(stderr, "joulestep: %s: %s\n", path, je.text);
		return;
	}
	double ms = json_integer_value(json_object_get(r, "min_phase_ns")) / 1e6;
	double dur = json_number_value(json_object_get(r, "duration_ns")) / 1e9;
	json_t *ecpu = json_object_get(r, "energy_cpu_uj");
	json_t *phases = json_object_get(r, "phases");
	char what[260], gn[80];
	if (json_is_integer(ecpu)) {
		double c = json_number_value(ecpu) / 1e6;
		json_t *ed = json_object_get(r, "energy_dram_uj");
		double d = json_number_value(ed) / 1e6;
		double t = json_number_value(json_object_get(r, "energy_total_uj")) / 1e6;
		if (json_is_integer(ed))
			snprintf(what, sizeof(what), "CPU %.3f J, DRAM %.3f J%s, total %.3f J (%.2f W)", c, d,
				 gpu_note(r, gn, sizeof(gn)), t, dur > 0 ? t / dur : 0.0);
		else /* no dram zone (AMD): never a 0 J DRAM */
			snprintf(what, sizeof(what), "CPU %.3f J, DRAM not measured%s, total %.3f J (%.2f W)", c,
				 gpu_note(r, gn, sizeof(gn)), t, dur > 0 ? t / dur : 0.0);
	} else if (json_is_string(json_object_get(r, "energy_hidden"))) {
		snprintf(what, sizeof(what), "energy not shown (shorter than %g ms)", ms);
	} else if (json_is_true(json_object_get(r, "uncertain"))) { /* never a 0 J */
		snprintf(what, sizeof(what), "energy unknown (a zone's counter went back or vanished: see the record's provenance)");
	} else {
		snprintf(what, sizeof(what), "energy not measured");
	}
	size_t total = (size_t)json_integer_value(json_object_get(r, "phases_total"));
	fprintf(stderr, "joulestep: step %u.%s on %s: %.3f s, %s, policy %s, %zu phase(s)%s\n",
		jobid, step, json_string_value(json_object_get(r, "node")), dur, what,
		json_string_value(json_object_get(r, "policy")), total,
		json_integer_value(json_object_get(r, "errors_total")) ? " [errors: see the record]" : "");
	print_gpus(r);
	size_t n = json_array_size(phases);
	for (size_t i = 0; i < n && i < REPORT_PHASES; i++) {
		json_t *p = json_array_get(phases, i);
		const char *label = json_string_value(json_object_get(p, "label"));
		double pd = json_number_value(json_object_get(p, "duration_ns")) / 1e9;
		json_t *pc = json_object_get(p, "energy_cpu_uj");
		if (json_is_integer(pc))
			snprintf(what, sizeof(what), json_is_integer(json_object_get(p, "energy_dram_uj")) ?
				 "CPU %.3f J, DRAM %.3f J" : "CPU %.3f J, DRAM not measured",
				 json_number_value(pc) / 1e6,
				 json_number_value(json_object_get(p, "energy_dram_uj")) / 1e6);
		else if (json_is_string(json_object_get(p, "energy_hidden")))
			snprintf(what, sizeof(what), "energy not shown (shorter than %g ms)", ms);
		else if (json_is_true(json_object_get(p, "uncertain")))
			snprintf(what, sizeof(what), "energy unknown");
		else
			snprintf(what, sizeof(what), "energy not measured");
		json_t *pg = json_object_get(p, "energy_gpu_uj");
		if (json_is_integer(pg))
			snprintf(what + strlen(what), sizeof(what) - strlen(what), ", GPU %.3f J",
				 json_number_value(pg) / 1e6);
		fprintf(stderr, "joulestep:   phase %lld %*s%s%s%s: %.3f s, %s\n",
			(long long)json_integer_value(json_object_get(p, "seq")),
			(int)(2 * json_integer_value(json_object_get(p, "depth"))), "",
			json_string_value(json_object_get(p, "kind")), label ? ":" : "", label ? label : "",
			pd, what);
	}
	if (total > REPORT_PHASES)
		fprintf(stderr, "joulestep:   ... and %zu more phase(s): `joulestep job %u`\n",
			total - REPORT_PHASES, jobid);
	json_decref(r);
}

/* The step's end when Slurm never called slurm_spank_exit (issue 23,
 * defect 1): Slurm 22.05's _do_call_stack stops at the first required plugin
 * whose callback fails, and spank_fini then dlcloses every plugin anyway; a
 * slurmstepd that fails later in its setup exit()s without spank_fini. Both
 * run this destructor (dlclose or exit), before the plugin's code is
 * unmapped: the step thread is stopped and joined, the meter stopped, the
 * clocks restored and the record written (or counted lost), as at a normal
 * step end. Only in the slurmstepd that started the step: a forked task
 * that exit()s before its exec has a copy of g_step but no step thread. */
__attribute__((destructor)) static void js_unload(void)
{
	struct js_step *s = g_step;
	if (!s || getpid() != g_step_pid)
		return;
	g_step = NULL;
	js_step_error(s, "step end: slurm_spank_exit was not called (a required SPANK plugin before joulestep failed, or slurmstepd exited early); ended when the plugin was unloaded");
	remote_exit(s);
	step_free(s);
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (!g_conf_ok)
		return 0;
	if (spank_remote(sp)) {
		if (g_step) {
			remote_exit(g_step);
			step_free(g_step);
			g_step = NULL;
		}
		return 0;
	}
	if (spank_context() != S_CTX_LOCAL || !g_opt_report)
		return 0;

	/* srun --energy-report: the step's user summaries (the records are
	 * root-only; docs/security.md, "Threat model: RAPL side channels"). */
	uint32_t jobid = g_local_job, stepid = g_local_step;
	if (!g_local_known)
		return 0;
	char step[24];
	if (stepid == SLURM_BATCH_SCRIPT)
		snprintf(step, sizeof(step), "batch");
	else if (stepid == SLURM_INTERACTIVE_STEP)
		snprintf(step, sizeof(step), "interactive");
	else
		snprintf(step, sizeof(step), "%u", stepid);
	char pat[JS_PATH_MAX * 2];
	snprintf(pat, sizeof(pat), "%s/%s/%u/%u.%s.*.summary", g_conf.spool,
		 g_conf.cluster[0] ? g_conf.cluster : "*", jobid, jobid, step);
	glob_t g;
	int grc = GLOB_NOMATCH;
	/* slurmstepd writes the summary as the step ends: wait up to 3 s. */
	for (int tries = 0; tries < 30; tries++) {
		memset(&g, 0, sizeof(g));
		grc = glob(pat, 0, NULL, &g);
		if (grc == 0 && fresh_summaries(&g, g_local_start_ns) > 0)
			break;
		grc = GLOB_NOMATCH;
		globfree(&g);
		struct timespec ts = {0, 100000000L};
		nanosleep(&ts, NULL);
	}
	if (grc != 0) {
		fprintf(stderr, "joulestep: step %u.%s: no energy summary readable at %s/ from this host "
				"(the spool is on the compute nodes or not shared); ask your admin or use "
				"`joulestep job %u` where the records are ingested\n",
			jobid, step, g_conf.spool, jobid);
		return 0;
	}
	for (size_t i = 0; i < g.gl_pathc; i++)
		print_summary(g.gl_pathv[i], jobid, step);
	globfree(&g);
	return 0;
}
