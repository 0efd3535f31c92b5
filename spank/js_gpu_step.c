/* joulestep SPANK plugin: the step's GPUs (docs/design.md, "Which GPUs a
 * step owns"; docs/record-format.md, "Fields ingest reads" (GPUs)).
 *
 * Which GPUs: only the job prolog's cache of slurmd's SLURM_JOB_GPUS
 * (js_jobcache.h), never the job's environment (CUDA_VISIBLE_DEVICES,
 * SLURM_STEP_GPUS, SLURM_JOB_GPUS there are the user's to set). The vendor
 * library (NVML, AMD SMI) is opened with dlopen once per step on
 * slurmstepd's main thread, on those GPUs only; a node without it records
 * CPU and DRAM as before, and the record says why its GPUs are not
 * measured. A GPU split by MIG, or one that another job on the node also
 * holds, has no per-job counter: its energy is null with the reason, never
 * the whole GPU charged to each job. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <slurm/spank.h>

#include "js_jobcache.h"
#include "js_sidechan.h"
#include "js_fs.h"
#include "js_step.h"

#define GPU_SAMPLE_MS_MAX 50 /* power integral of GPUs without a counter */

static bool in_list(const char *list, unsigned idx)
{
	for (const char *p = list; *p;) {
		char *end;
		if (strtoul(p, &end, 10) == idx)
			return true;
		p = *end ? end + 1 : end;
	}
	return false;
}

const char *js_gpu_step_unowned(const struct js_step *s, size_t i)
{
	const struct js_gpu_info *in = s->gpus ? js_gpu_info(s->gpus, i) : NULL;
	if (!in)
		return "not measured";
	if (in->mig)
		return "split by MIG: no per-job counter";
	if (!strcmp(s->gpu_others, "?"))
		return "other jobs' GPUs on this node unknown: may be shared";
	if (in->minor < 0 || in_list(s->gpu_others, (unsigned)in->minor)) /* Slurm's numbers */
		return "shared with another job: no per-job counter";
	return NULL;
}

void js_gpu_step_open(struct js_step *s)
{
	char why[400] = "";
	if (!strcmp(s->conf.gpu_backend, "off")) {
		snprintf(s->gpu_why, sizeof(s->gpu_why), "gpu_backend=off in plugstack.conf");
		return;
	}
	if (strcmp(s->job_source, "prolog")) {
		snprintf(s->gpu_why, sizeof(s->gpu_why),
			 "no job cache from the job prolog: the job's GPUs are unknown");
		return;
	}
	if (!s->gpu_sel[0])
		return; /* the job has no GPUs on this node */
	int rc = js_jobcache_other_gpus(s->conf.state, s->job_id,
					(uint64_t)s->conf.job_cache_hours * 3600ULL * 1000000000ULL,
					s->start_ns, s->gpu_others, sizeof(s->gpu_others));
	if (rc == -ENOSPC)
		snprintf(s->gpu_others, sizeof(s->gpu_others), "?");
	struct js_gpu_opts o = {.backend = s->conf.gpu_backend[0] ? s->conf.gpu_backend : NULL,
				.lib = s->conf.gpu_lib[0] ? s->conf.gpu_lib : NULL,
				.select = s->gpu_sel,
				/* Slurm's GPU numbers are the N of /dev/nvidiaN, not
				 * NVML's index (PCI order): mapped by device minor */
				.select_minor = true};
	rc = js_gpu_open(&o, &s->gpus, why, sizeof(why));
	if (rc < 0) {
		for (char *p = why; *p; p++)
			if (*p == '\n')
				*p = ';';
		snprintf(s->gpu_why, sizeof(s->gpu_why), "GPUs %s: %s", s->gpu_sel,
			 why[0] ? why : strerror(-rc));
		slurm_info("joulestep: job %u step %s: GPUs not measured: %s", s->job_id, s->step_id,
			   s->gpu_why);
		s->gpus = NULL;
		return;
	}
	unsigned ms = s->conf.sample_ms < GPU_SAMPLE_MS_MAX ? s->conf.sample_ms : GPU_SAMPLE_MS_MAX;
	rc = js_gpu_meter_start(s->gpus, (uint64_t)ms * 1000000ULL, true, &s->gmeter);
	if (rc < 0) {
		js_step_error(s, "gpu: meter: %s", strerror(-rc));
		snprintf(s->gpu_why, sizeof(s->gpu_why), "GPU meter: %s", strerror(-rc));
		s->gmeter = NULL;
		return;
	}
	/* GPUs a killed step of this job or another left locked: unlocked
	 * before the tasks start (owner pid checked: live ones stay) */
	if (js_gpu_journal_count(s->conf.state) > 0) {
		struct js_gpu_recovery r;
		memset(&r, 0, sizeof(r));
		rc = js_gpu_journal_recover(s->conf.state, s->gpus, false, &r);
		if (rc < 0)
			js_step_error(s, "gpu: recover GPU clocks: %s", strerror(-rc));
		if (r.restored)
			slurm_info("joulestep: job %u step %s: unlocked %d GPU(s) left locked by a killed step",
				   s->job_id, s->step_id, r.restored);
		if (r.failed)
			js_step_error(s, "gpu: recover GPU clocks: %d GPU(s) could not be unlocked",
				      r.failed);
	}
	/* as of the step's start: asked now, resolved by the meter's thread
	 * from its readings after (the step's start never waits for a GPU) */
	s->have_g0 = js_gpu_meter_request(s->gmeter, s->start_mono_ns, &s->g0_ticket) == 0;
}

/* Main thread, at the step's end: its final figures, as of end_mono_ns.
 * Markers the step thread handles meanwhile ask the meter for their own
 * times (js_gpu_step_mark): nothing here is shared with them. */
void js_gpu_step_end(struct js_step *s)
{
	uint64_t t1;
	if (!s->gmeter || !s->have_g0)
		return;
	s->have_g0 = js_gpu_meter_result(s->gmeter, s->g0_ticket, true, &s->g0) == 0;
	s->have_g1 = s->have_g0 && js_gpu_meter_request(s->gmeter, s->end_mono_ns, &t1) == 0 &&
		     js_gpu_meter_result(s->gmeter, t1, true, &s->g1) == 0;
	if (!s->have_g1)
		js_step_error(s, "gpu: final reading failed");
}

static void mark_of(const struct js_gpu_snapshot *sn, struct js_gpu_mark *m)
{
	memset(m, 0, sizeof(*m));
	m->n = (uint8_t)(sn->n < JS_PHASE_GPUS ? sn->n : JS_PHASE_GPUS);
	for (size_t i = 0; i < m->n; i++) {
		m->uj[i] = sn->energy_uj[i];
		m->uncertain[i] = sn->uncertain[i];
		m->err |= (uint8_t)((sn->err[i] != 0) << i);
		m->integrated |= (uint8_t)(sn->integrated[i] << i);
	}
}

/* Step thread (and main thread at step end): a boundary at at_ns (the
 * phase logic's now_ns: end_mono_ns once the step ended) asks the meter and
 * returns; js_gpu_step_mark_result fills the mark once it is resolved. */
void js_gpu_step_mark(void *ctx, uint64_t at_ns, struct js_gpu_mark *out)
{
	struct js_step *s = ctx;
	memset(out, 0, sizeof(*out));
	if (s->gmeter && js_gpu_meter_request(s->gmeter, at_ns, &out->ticket) < 0)
		out->ticket = 0; /* no figure: n stays 0 */
}

bool js_gpu_step_mark_result(void *ctx, struct js_gpu_mark *m, bool wait)
{
	struct js_step *s = ctx;
	struct js_gpu_snapshot sn;
	if (!m->ticket || !s->gmeter)
		return true;
	int rc = js_gpu_meter_result(s->gmeter, m->ticket, wait, &sn);
	if (rc == -EAGAIN)
		return false;
	if (rc == 0)
		mark_of(&sn, m);
	m->ticket = 0;
	return true;
}

/* The phase logic's snap_gpu: ask (JS_GPU_ASK) at a boundary, then poll or
 * wait for the result. */
bool js_gpu_step_snap(void *ctx, uint64_t at_ns, struct js_gpu_mark *m, int op)
{
	if (op != JS_GPU_ASK)
		return js_gpu_step_mark_result(ctx, m, op == JS_GPU_WAIT);
	js_gpu_step_mark(ctx, at_ns, m);
	return true;
}

void js_gpu_step_close(struct js_step *s)
{
	if (s->gmeter)
		js_gpu_meter_stop(s->gmeter);
	if (s->gpus)
		js_gpu_close(s->gpus);
	s->gmeter = NULL;
	s->gpus = NULL;
}

/* ---- GPU clocks in I/O phases (+gpu-io; docs/design.md, "GPU clocks in
 * the plugin") ------------------------------------------------------------ */

void js_gpu_step_clock_setup(struct js_step *s, bool slurm_gpu_freq, const char *req)
{
	s->gpu_clock_mode = s->gpus ? "none" : NULL;
	if (!s->policy.gpu_io || !s->gpus || !s->conf.gpu_io_mhz)
		return;
	if (slurm_gpu_freq) {
		s->gpu_clock_mode = "slurm-gpu-freq";
		slurm_info("joulestep: job %u step %s: Slurm --gpu-freq=%s requested; joulestep leaves the GPU clocks to Slurm (+gpu-io not applied)",
			   s->job_id, s->step_id, req);
		return;
	}
	int rc = js_root_dir(s->conf.state, 0700);
	if (rc < 0) {
		js_step_error(s, "gpu: state directory %s: %s; GPU clocks left alone", s->conf.state,
			      strerror(-rc));
		return;
	}
	for (size_t i = 0; i < js_gpu_count(s->gpus); i++) {
		if (js_gpu_step_unowned(s, i))
			continue; /* not the job's alone: its clock is not ours to change */
		if (!js_gpu_can_lock(s->gpus, i))
			continue; /* this library cannot lock it: never asked */
		s->gpu_eligible[i] = true;
		s->gpu_clock_mode = "joulestep";
	}
}

/* GPU i's lock range for +gpu-io: [lowest supported, gpu_io_mhz]. */
static void io_range(const struct js_step *s, size_t i, uint32_t *lo, uint32_t *hi)
{
	const struct js_gpu_info *in = js_gpu_info(s->gpus, i);
	uint32_t max = s->conf.gpu_io_mhz, min = in->min_sm_mhz;
	if (in->max_sm_mhz && max > in->max_sm_mhz)
		max = in->max_sm_mhz;
	if (min && max < min)
		max = min;
	*lo = min && min <= max ? min : max;
	*hi = max;
}

/* What one GPU's lock (low) or unlock gave; 0 or its -errno. */
static int clock_result(struct js_step *s, size_t i, bool low, int rc)
{
	const char *uuid = js_gpu_info(s->gpus, i)->uuid;
	if (rc == -EBUSY)
		js_step_error(s, "gpu: %s: another live process holds it lowered; its clock left alone",
			      uuid);
	else if (rc < 0 && low)
		js_step_error(s, "gpu: %s: lock its clock: %s", uuid, js_gpu_last_error(s->gpus));
	else if (rc < 0)
		js_step_error(s, "gpu: %s: unlock its clock: %s (the journal keeps it for the epilog and joulestep-restore)",
			      uuid, js_gpu_last_error(s->gpus));
	if (rc == 0)
		s->gpu_journaled[i] = low;
	return rc;
}

/* Lock (low) the eligible GPUs, journaled first, or unlock the locked ones,
 * the journal's entry dropped after: all of them in one pass of the
 * journal (js_gpu_lock_journaled_n); a refused lock leaves no entry, a
 * failed unlock keeps it for the epilog and joulestep-restore. */
int js_gpu_step_set_clock(void *ctx, bool low, uint32_t *mhz)
{
	struct js_step *s = ctx;
	size_t n = js_gpu_count(s->gpus);
	bool want[JS_MAX_GPUS] = {false};
	uint32_t lo[JS_MAX_GPUS] = {0}, hi[JS_MAX_GPUS] = {0};
	int rc[JS_MAX_GPUS] = {0}, first = 0;
	*mhz = 0;
	for (size_t i = 0; i < n; i++) {
		want[i] = low ? s->gpu_eligible[i] && !s->gpu_journaled[i] : s->gpu_journaled[i];
		if (want[i] && low)
			io_range(s, i, &lo[i], &hi[i]);
	}
	if (low)
		js_gpu_lock_journaled_n(s->conf.state, s->gpus, want, lo, hi, rc);
	else
		js_gpu_unlock_journaled_n(s->conf.state, s->gpus, want, rc);
	for (size_t i = 0; i < n; i++) {
		if (!want[i])
			continue;
		if (clock_result(s, i, low, rc[i]) < 0 && !first)
			first = low ? rc[i] : -EIO;
		else if (low && !*mhz)
			*mhz = hi[i];
	}
	return first;
}

void js_gpu_step_clock_restore(struct js_step *s)
{
	uint32_t mhz;
	if (s->gpus)
		(void)js_gpu_step_set_clock(s, false, &mhz);
}

void js_gpu_recover_node(const struct js_conf *c, uint32_t jobid, const char *when)
{
	char why[400];
	struct js_gpus *g = NULL;
	struct js_gpu_recovery r;
	if (!strcmp(c->gpu_backend, "off") || js_gpu_journal_count(c->state) <= 0)
		return; /* nothing journaled: no library opened */
	struct js_gpu_opts o = {.backend = c->gpu_backend[0] ? c->gpu_backend : NULL,
				.lib = c->gpu_lib[0] ? c->gpu_lib : NULL};
	int rc = js_gpu_open(&o, &g, why, sizeof(why));
	if (rc < 0) {
		slurm_error("joulestep: job %u: %s: GPU clock journal has entries but the GPU library cannot be opened: %s",
			    jobid, when, strerror(-rc));
		return;
	}
	memset(&r, 0, sizeof(r));
	rc = js_gpu_journal_recover(c->state, g, false, &r);
	if (rc < 0)
		slurm_error("joulestep: job %u: %s: recover GPU clocks: %s", jobid, when, strerror(-rc));
	if (r.restored)
		slurm_info("joulestep: job %u: %s: unlocked %d GPU(s) left locked by a killed step",
			   jobid, when, r.restored);
	if (r.failed)
		slurm_error("joulestep: job %u: %s: recover GPU clocks: %d GPU(s) could not be unlocked (the journal keeps them for the next prolog, epilog or joulestep-restore)",
			    jobid, when, r.failed);
	js_gpu_close(g);
}
