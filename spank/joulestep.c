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
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

#include "js_cgroup_step.h"
#include "js_cpu_step.h"
#include "js_fs.h"
#include "js_gpu_step.h"
#include "js_hooks.h"
#include "js_jobcache.h"
#include "js_jobmeta.h"
#include "js_meter_step.h"
#include "js_pending.h"
#include "js_policy_step.h"
#include "js_record.h"
#include "js_report.h"
#include "js_server.h"
#include "js_step.h"
#include "js_uncore_step.h"

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

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	char err[400];
	spank_context_t ctx = spank_context();
	if (ctx == S_CTX_SLURMD || ctx == S_CTX_JOB_SCRIPT)
		return 0;
	/* %n stays unexpanded in srun/sbatch/salloc, which use none of those paths */
	if (ctx == S_CTX_REMOTE ? js_node_conf_parse(ac, av, &g_conf, err, sizeof(err))
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
	if (js_node_conf_parse(ac, av, c, err, sizeof(err))) {
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
	uint32_t jobid = 0;
	uid_t uid = 0;
	if (job_script_begin(sp, ac, av, "prolog", &c, &jobid))
		return 0;
	js_cpu_recover_node(&c, jobid, "prolog");
	js_gpu_recover_node(&c, jobid, "prolog");
	js_uncore_recover_node(&c, jobid, "prolog");
	flush_pending(&c, jobid, "prolog");
	if (!c.job_cache_hours)
		return 0;
	bool have_uid = spank_get_item(sp, S_JOB_UID, &uid) == ESPANK_SUCCESS;
	uint32_t uid32 = (uint32_t)uid;
	js_jobmeta_prolog_entry(jobid, have_uid ? &uid32 : NULL, &e);
	int rc = js_jobcache_store(c.state, &e);
	if (rc < 0)
		slurm_error("joulestep: job %u: prolog: cannot cache the job in %s/jobs: %s", jobid,
			    c.state, strerror(-rc));
	return 0;
}

/* The step's options: its own (srun, sbatch), else the allocation's,
 * which reach srun steps inside an sbatch/salloc job through the job
 * environment. */
static void resolve_policy(spank_t sp, struct js_step *s)
{
	char envbuf[600];
	if (!g_opt_policy) {
		getenv_s(sp, OPT_ENV_PREFIX "energy_policy", envbuf, sizeof(envbuf));
		if (envbuf[0])
			g_opt_policy = strdup(envbuf);
	}
	if (!g_opt_tags) {
		getenv_s(sp, OPT_ENV_PREFIX "energy_tag", envbuf, sizeof(envbuf));
		if (envbuf[0])
			g_opt_tags = strdup(envbuf);
	}
	js_policy_step_resolve(s, g_opt_policy, g_opt_tags);
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

static void step_free(struct js_step *s)
{
	if (!s)
		return;
	js_cgroup_step_free(s);
	js_phases_free(s->phases);
	js_gpu_step_close(s);
	js_meter_step_close(s);
	pthread_mutex_destroy(&s->err_mu);
	free(s->cf);
	free(s);
}

/* Step end, slurmstepd's main thread: what only feeds the record (a
 * monitor step's clocks, the node model) is read here rather than on the
 * launch path or in the step thread (which may only use descriptors opened
 * here: slurmstepd switches the whole process's euid while it launches
 * tasks). */
static void step_info_at_end(struct js_step *s)
{
	if (s->defer_cpus) { /* monitor: the clocks are only reported */
		js_cpu_step_read(s);
		s->defer_cpus = false;
	}
	js_cpu_step_node_model(s);
	/* the record's user name: NSS (/etc/passwd, or a directory service)
	 * is not asked on the launch path */
	struct passwd pw, *pwp = NULL;
	char pwbuf[4096];
	if (getpwuid_r(s->uid, &pw, pwbuf, sizeof(pwbuf), &pwp) == 0 && pwp)
		snprintf(s->user, sizeof(s->user), "%s", pw.pw_name);
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

/* A new step: its ids and clocks; NULL for the extern step (no record) or
 * when Slurm cannot say which step this is. */
static struct js_step *step_new(spank_t sp)
{
	uint32_t jobid = 0, stepid = 0;
	if (spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_STEPID, &stepid) != ESPANK_SUCCESS) {
		slurm_error("joulestep: cannot get the job/step id; step not recorded");
		return NULL;
	}
	if (stepid == SLURM_EXTERN_CONT)
		return NULL; /* extern step: no record (docs/admin-guide.md) */
	struct js_step *s = calloc(1, sizeof(*s));
	if (!s) {
		slurm_error("joulestep: job %u: out of memory; step not recorded", jobid);
		return NULL;
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
	s->start_ns = js_now_ns(CLOCK_REALTIME);
	s->start_mono_ns = js_now_ns(CLOCK_MONOTONIC);
	s->mono_to_real_ns = (int64_t)s->start_ns - (int64_t)s->start_mono_ns;
	return s;
}

/* The job's identity: Slurm's items, this node's name and what the job
 * prolog cached (js_jobmeta.h); the user's name is looked up at step end. */
static void step_identity(spank_t sp, struct js_step *s)
{
	spank_get_item(sp, S_JOB_UID, &s->uid);
	spank_get_item(sp, S_JOB_GID, &s->gid);
	spank_get_item(sp, S_JOB_NNODES, &s->nnodes);
	spank_get_item(sp, S_JOB_NODEID, &s->nodeid);
	spank_get_item(sp, S_JOB_TOTAL_TASK_COUNT, &s->ntasks);
	if (!strcmp(s->step_id, "batch")) { /* the batch script: one task, one node */
		s->nnodes = s->nnodes ? s->nnodes : 1;
		s->ntasks = s->ntasks ? s->ntasks : 1;
	}
	char node[64];
	if (js_node_name(node, sizeof(node)))
		snprintf(node, sizeof(node), "unknown");
	snprintf(s->node, sizeof(s->node), "%s", node);
	/* het_component stays 0: every het component has its own job ID, and
	 * the job's SLURM_HET_JOB_OFFSET is the user's to set. */
	js_jobmeta_load(s);
}

/* The step's cores: the step's, else (batch) the job's. */
static const char *alloc_cores(spank_t sp)
{
	char *cores = NULL;
	if (spank_get_item(sp, S_STEP_ALLOC_CORES, &cores) != ESPANK_SUCCESS || !cores || !*cores)
		if (spank_get_item(sp, S_JOB_ALLOC_CORES, &cores) != ESPANK_SUCCESS)
			cores = NULL;
	return cores;
}

/* Meters and clocks, before the tasks start: the first readings must
 * precede them (fixed:R is set at task_post_fork, once the step's cpuset
 * has been checked, still before the tasks exec). */
static void step_setup(spank_t sp, struct js_step *s)
{
	char req[64];
	resolve_policy(sp, s);
	js_cpu_step_map(s, alloc_cores(sp));
	/* Orphans of a killed slurmstepd, when one of this step's CPUs may be
	 * affected; the job prolog and epilog recover the node's other CPUs. */
	js_cpu_step_recover(s);
	/* The clocks are read now when the policy may change them; a monitor
	 * step only reports them (read at step end, on this thread). */
	if (s->policy.type == JS_POL_MONITOR)
		s->defer_cpus = true;
	else
		js_cpu_step_read(s);
	/* The meter's sampling is done by the step thread (one thread per
	 * step, not two). */
	js_meter_step_open(s);
	js_record_started_marker(s);
	js_meter_step_share_start(s);
	js_meter_step_node_open(s);
	js_gpu_step_open(s); /* the job's GPUs (the prolog's cache), beside RAPL */
	gpu_clock_setup(sp, s);
	js_cpu_step_setup(s, slurm_cpu_freq_requested(sp, req, sizeof(req)) ? req : NULL);
	js_uncore_step_setup(s); /* +uncore-io: journaled, descriptors opened */
}

/* The phase logic and its socket, exported to the tasks; the step thread. */
static void step_phases(spank_t sp, struct js_step *s)
{
	struct js_phase_ops ops = {.ctx = s, .set_ratio = js_cpu_step_set_ratio,
				   .snap = js_meter_step_snap, .now_ns = js_meter_step_now,
				   .snap_gpu = s->gmeter ? js_gpu_step_snap : NULL,
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
	slurm_verbose("joulestep: job %u step %s: policy %s, cpus %d, backend %s, socket %s", s->job_id,
		      s->step_id, js_pol_name(s->policy.type), js_cpuset_count(&s->cpus),
		      s->energy ? js_energy_backend_name(s->energy) : "none", s->sock_path);
	bool exported = s->sock_path[0] != 0;
	if (js_server_start(s) < 0) {
		/* No step thread: no markers; do its work here, and let the
		 * meter sample from a thread of its own. */
		if (exported)
			(void)spank_unsetenv(sp, "JOULESTEP_SOCKET");
		js_meter_step_own_thread(s);
	}
}

static int remote_init(spank_t sp)
{
	struct js_step *s = step_new(sp);
	if (!s)
		return 0;
	g_step = s;
	g_step_pid = getpid();
	step_identity(sp, s);
	step_setup(sp, s);
	step_phases(sp, s);
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
	js_cpu_step_apply_fixed(g_step);
	return 0;
}

static void remote_exit(struct js_step *s)
{
	/* The final reading first: the step's energy and duration end here,
	 * not after the plugin's own teardown (drain, journal, record). Phases
	 * still open, and markers handled from now on, end at this reading. */
	uint64_t end_mono = js_now_ns(CLOCK_MONOTONIC);
	s->end_ns = js_now_ns(CLOCK_REALTIME);
	s->end_mono_ns = end_mono;
	js_meter_step_end(s);
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
	js_cpu_step_restore(s);
	js_gpu_step_clock_restore(s); /* +gpu-io: unlock, then the journal */
	js_uncore_step_restore(s); /* +uncore-io: write back, then the journal */
	js_cpu_step_release(s);
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
	js_cpu_recover_node(&c, jobid, "epilog");
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
				    js_jobcache_max_age_ns(&c),
				    js_now_ns(CLOCK_REALTIME), &n);
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
		g_local_start_ns = js_now_ns(CLOCK_REALTIME);
	}
	return 0;
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

	if (g_local_known)
		js_report_print(&g_conf, g_local_job, g_local_step, g_local_start_ns);
	return 0;
}
