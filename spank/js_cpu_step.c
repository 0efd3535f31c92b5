/* joulestep SPANK plugin: the step's CPUs and their clocks (docs/design.md,
 * "Frequency", "SMT"). Beside js_gpu_step.c and js_uncore_step.c:
 * the step's Linux CPUs from Slurm's cores, their cpufreq state, the
 * journal (accounting/src/freqstate.c) and one handle per controlled policy,
 * opened on slurmstepd's main thread at step start; the step thread changes
 * clocks only through those descriptors (js_cpu_step_set_ratio: pwrite, no
 * open); step end puts them back and releases the journal. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <slurm/spank.h>

#include "js_cgroup_step.h"
#include "js_cpu_step.h"
#include "js_fs.h"
#include "js_step.h"

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
void js_cpu_step_map(struct js_step *s, const char *cores)
{
	struct js_cpuset abs;
	js_cpuset_zero(&s->cpus);
	js_cpuset_zero(&s->smt_aside);
	js_cpuset_zero(&s->pkgs_owned);
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
		s->topo = topo; /* the shared-node inputs use it too: read once */
		return;
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

/* cpufreq of the step's CPUs, read once per step; the nominal clock of the
 * first one. */
void js_cpu_step_read(struct js_step *s)
{
	int n = js_cpuset_count(&s->cpus);
	if (n <= 0)
		return;
	s->cf = calloc((size_t)(n < JS_MAX_STEP_CPUS ? n : JS_MAX_STEP_CPUS), sizeof(*s->cf));
	if (!s->cf) {
		js_step_error(s, "cpus: out of memory; no frequency control");
		return;
	}
	for (int c = 0; c < JS_MAX_CPUS; c++) {
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
	set_base_khz(s);
}

/* Policy of step CPU i: journal its original settings (orig: the
 * record's base clock, what the last owner restores) and open its handle.
 * seen: the policies handled; mine: the step's CPUs less the SMT cores not
 * wholly its own. The handle's index, or -1 when the clock is left alone. */
static int take_policy(struct js_step *s, int i, struct js_cpuset *seen,
		       const struct js_cpuset *mine, uint32_t *orig_max_khz)
{
	const struct js_cpufreq *f = &s->cf[i];
	int pol = f->policy >= 0 ? f->policy : f->cpu;
	if (js_cpuset_isset(&s->smt_aside, s->cpu_list[i]))
		return -1; /* smt_aside: logged and recorded */
	if (js_cpuset_isset(seen, pol))
		return -1; /* one handle per policy: its CPUs share the files */
	js_cpuset_set(seen, pol);
	if (js_freq_policy_shared(f, mine)) {
		js_step_error(s, "freq: policy %d shared with CPUs outside the step", pol);
		return -1;
	}
	/* orig: the journal's backup (the record's base clock, what the
	 * last owner restores); entry: what is in force now, which this
	 * step returns to at a phase end and at its end: the original
	 * unless an enclosing step (the batch step of an srun step) holds
	 * the CPU changed, whose setting this step must not undo. */
	struct js_freq_saved orig, entry;
	int rc = js_freq_acquire_entry(s->conf.state, s->conf.sysfs, js_freq_domain_key(f),
				       s->owner, 0, &orig, &entry);
	if (rc < 0) {
		js_step_error(s, "freq: cpu%d: save state: %s; clock left alone", s->cpu_list[i],
			      strerror(-rc));
		return -1;
	}
	s->acquired[i] = true; /* released (and restored) at step end */
	struct js_cpufreq now = *f;
	now.scaling_min_khz = entry.min_khz;
	now.scaling_max_khz = entry.max_khz;
	rc = js_freq_ctl_open(s->conf.sysfs, &now, entry.min_khz, entry.max_khz, &s->ctl[s->nctl]);
	if (rc < 0) {
		js_step_error(s, "freq: cpu%d: open cpufreq for writing: %s; clock left alone",
			      s->cpu_list[i], strerror(-rc));
		return -1;
	}
	*orig_max_khz = orig.max_khz;
	return s->nctl++;
}

/* slurmstepd's main thread, before the tasks start: save each controlled
 * policy's original settings in the journal and open its handle (the only
 * opens of cpufreq files for clock changes in the whole step). A policy that
 * covers a CPU outside the step is never touched. fixed:R is set later
 * (js_cpu_step_apply_fixed, task_post_fork), once the step's cpuset has
 * been checked. */
void js_cpu_step_setup(struct js_step *s, const char *slurm_cpu_freq_req)
{
	s->freq_mode = s->policy.type == JS_POL_MONITOR ? "monitor" : "none";
	set_base_khz(s);
	if (s->policy.type == JS_POL_MONITOR)
		return;
	if (slurm_cpu_freq_req && slurm_cpu_freq_req[0]) {
		s->freq_mode = "slurm-cpu-freq";
		slurm_info("joulestep: job %u step %s: Slurm --cpu-freq=%s requested; joulestep leaves the clocks to Slurm (policy %s not applied)",
			   s->job_id, s->step_id, slurm_cpu_freq_req, js_pol_name(s->policy.type));
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
		uint32_t orig_max = 0;
		if (take_policy(s, i, &seen, &mine, &orig_max) == 0)
			base_khz = orig_max;
	}
	if (s->nctl)
		s->freq_mode = "joulestep";
	set_base_khz(s);
	if (s->nctl)
		s->base_khz = base_khz; /* the journal's original, not an enclosing step's cap */
}

/* fixed:R, once the step's cpuset has been checked (task_post_fork: the
 * tasks have not exec'ed yet); nothing where the check vetoed clocks. */
void js_cpu_step_apply_fixed(struct js_step *s)
{
	if (s->fixed_done)
		return;
	s->fixed_done = true;
	if (s->nctl && s->policy.type == JS_POL_FIXED) {
		uint32_t khz = 0;
		uint64_t took;
		if (js_cpu_step_set_ratio(s, JS_RATIO_BASE, &khz, &took) == 0)
			s->fixed_khz = khz;
	}
}

/* The step thread's clock change: pwrite()s on the descriptors setup_freq
 * opened on slurmstepd's main thread; no open, no read of cpufreq state.
 * JS_RATIO_BASE is the step's base: fixed:R's clock, else each CPU's
 * original settings (exactly what was there; a ratio of 1 too). */
int js_cpu_step_set_ratio(void *ctx, double ratio, uint32_t *khz, uint64_t *took_ns)
{
	struct js_step *s = ctx;
	uint64_t t0 = js_now_ns(CLOCK_MONOTONIC);
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
	*took_ns = js_now_ns(CLOCK_MONOTONIC) - t0;
	if (nfail) /* one line per change, not one per CPU */
		js_step_error(s, "freq: cpu%d: write %u kHz: %s (%d of %d policies failed)", fail_cpu,
			      fail_khz, strerror(-rc), nfail, s->nctl);
	return rc;
}

void js_cpu_step_restore(struct js_step *s)
{
	for (int i = 0; i < s->nctl; i++) {
		int rc = js_freq_ctl_restore(&s->ctl[i]);
		if (rc < 0)
			js_step_error(s, "freq: cpu%d: restore: %s", s->ctl[i].cpu, strerror(-rc));
		js_freq_ctl_close(&s->ctl[i]);
	}
	free(s->ctl);
	s->ctl = NULL;
	s->nctl = 0;
}

void js_cpu_step_release(struct js_step *s)
{
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
}

static void recover(struct js_step *s)
{
	int nrest = 0;
	int rc = js_freq_recover(s->conf.state, s->conf.sysfs, false, &nrest);
	if (nrest)
		slurm_info("joulestep: restored %d CPU(s) left changed by a killed step", nrest);
	if (rc < 0)
		js_step_error(s, "freq: recover orphaned CPUs: %s", strerror(-rc));
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

void js_cpu_step_recover(struct js_step *s)
{
	if (own_cpu_saved(s))
		recover(s);
}

void js_cpu_recover_node(const struct js_conf *c, uint32_t jobid, const char *when)
{
	int nrest = 0;
	int rc = js_freq_recover(c->state, c->sysfs, false, &nrest);
	/* both: some CPUs may be restored and others not */
	if (nrest)
		slurm_info("joulestep: job %u: %s: restored %d CPU(s) left changed by a killed step",
			   jobid, when, nrest);
	if (rc < 0 && rc != -ENOENT)
		slurm_error("joulestep: job %u: %s: recover orphaned CPUs: %s (the journal keeps them for the next prolog, epilog or joulestep-restore)",
			    jobid, when, strerror(-rc));
}

void js_cpu_step_node_model(struct js_step *s)
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
