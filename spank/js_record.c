/* joulestep SPANK plugin: the spool record (docs/record-format.md), built
 * with jansson and written atomically: tmp (O_EXCL|O_NOFOLLOW) + fsync +
 * rename, in root-owned directories only. The directory is fsynced by the
 * job epilog (js_record_sync_job), not at step end: that fsync made every
 * step end ~0.2 ms (far more on a busy disk) longer, on srun's critical
 * path. A record is never partial; until the epilog ran, a crash of the node
 * can lose the rename (the record is then missing, or left complete under
 * its tmp name). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <slurm/spank.h>

#include "js_auto_step.h"
#include "js_cgroup_step.h"
#include "js_fs.h"
#include "js_gpu_step.h"
#include "js_hooks.h"
#include "js_pending.h"
#include "js_record.h"
#include "js_sidechan.h"
#include "js_step.h"

/* packages[]: per package the step has a CPU in, its CPUs, the step's
 * CPUs there and the package's busy and total CPU time over the step
 * (<procfs>/stat, clock ticks turned into ns). */
static json_t *share_json(const struct js_step *s)
{
	json_t *a = json_array();
	long hz = sysconf(_SC_CLK_TCK);
	if (!s->have_sh1 || hz <= 0)
		return a;
	for (size_t i = 0; i < s->sh1.npkg; i++) {
		const struct js_share_pkg *p0 = &s->sh0.pkg[i], *p1 = &s->sh1.pkg[i];
		if (p1->busy_ticks < p0->busy_ticks || p1->total_ticks < p0->total_ticks)
			continue; /* a counter that went back: no figure, never a wrong one */
		json_t *o = json_object();
		json_object_set_new(o, "package", json_integer(p1->package));
		json_object_set_new(o, "cpus", json_integer(p1->cpus));
		json_object_set_new(o, "step_cpus", json_integer(p1->step_cpus));
		json_object_set_new(o, "busy_ns", json_integer((json_int_t)((p1->busy_ticks - p0->busy_ticks) * 1000000000u / (uint64_t)hz)));
		json_object_set_new(o, "total_ns", json_integer((json_int_t)((p1->total_ticks - p0->total_ticks) * 1000000000u / (uint64_t)hz)));
		json_array_append_new(a, o);
	}
	return a;
}

static json_t *jnum_or_null(long long v) { return v >= 0 ? json_integer(v) : json_null(); }
static json_t *jstr_or_null(const char *s) { return s && *s ? json_string(s) : json_null(); }

/* {"min", "max", "mean"} of an aggregate, shifted by off (monotonic ->
 * realtime for times, 0 for bytes); null when it has no value. */
static json_t *jminmax(const struct js_minmax *m, int64_t off)
{
	if (!m->n)
		return json_null();
	uint64_t mean = (uint64_t)((m->sum + m->n / 2) / m->n);
	json_t *o = json_object();
	json_object_set_new(o, "min", json_integer((json_int_t)((int64_t)m->min + off)));
	json_object_set_new(o, "max", json_integer((json_int_t)((int64_t)m->max + off)));
	json_object_set_new(o, "mean", json_integer((json_int_t)((int64_t)mean + off)));
	return o;
}

/* The node's energy beside RAPL (node_energy=): the total and the channels
 * that make it, or null with why (no source, a reset, an unreadable file). */
static void node_energy_json(json_t *step, const struct js_step *s)
{
	struct js_node_interval ni;

	if (!s->conf.node_energy[0])
		return;
	if (!s->nsrc || !s->have_n0 || !s->have_n1) {
		json_object_set_new(step, "energy_node_uj", json_null());
		json_object_set_new(step, "node_meter_sources",
				    json_string(s->node_why[0] ? s->node_why : "no node reading"));
		return;
	}
	js_node_interval_of(s->nsrc, &s->n0, &s->n1, &ni);
	json_object_set_new(step, "energy_node_uj", ni.total_known ? json_integer((json_int_t)ni.total_uj) : json_null());
	json_object_set_new(step, "node_meter_sources", json_string(ni.total_sources));
	json_object_set_new(step, "node_meter_integrated", json_boolean(ni.integrated));
}

/* ---- the GPUs (docs/record-format.md, "Fields ingest reads" (GPUs)) -----
 * One entry per GPU of the step: energy_uj, or null with the reason. The
 * GPU sum (energy_gpu_uj) and the total's share of it exist only when every
 * GPU of the step has its energy: never a sum that silently leaves one out.
 * The user's summary has the job's own whole GPUs (a shared or MIG GPU has
 * no figure at all), so the RAPL side-channel rounding is not needed:
 * figures are rounded to the counter's unit and follow min_phase_ms like
 * the CPU's. */

static json_t *gpu_entry(const struct js_step *s, size_t i, const struct js_gpu_interval *iv,
			 bool with_model, bool *ok)
{
	const struct js_gpu_info *in = js_gpu_info(s->gpus, i);
	const char *why = js_gpu_step_unowned(s, i);
	if (!why && !with_model && i >= JS_PHASE_GPUS)
		why = "no per-phase figure past the step's first 8 GPUs";
	if (!why && (i >= iv->n || iv->uncertain[i]))
		why = "uncertain: the counter went back, stuck or could not be read (provenance)";
	json_t *o = json_object();
	if (with_model) {
		json_object_set_new(o, "index", json_integer(in->index));
		json_object_set_new(o, "model", json_string(in->name));
	}
	json_object_set_new(o, "uuid", json_string(in->uuid));
	json_object_set_new(o, "energy_uj", why ? json_null() : json_integer((json_int_t)iv->energy_uj[i]));
	json_object_set_new(o, "reason", why ? json_string(why) : json_null());
	json_object_set_new(o, "integrated", json_boolean(i < iv->n && iv->integrated[i]));
	if (why)
		*ok = false;
	return o;
}

static json_t *gpu_step_json(const struct js_step *s, uint64_t *sum_uj, bool *all_ok)
{
	json_t *a = json_array();
	struct js_gpu_interval iv;
	memset(&iv, 0, sizeof(iv));
	*sum_uj = 0;
	*all_ok = s->gpus && s->have_g1;
	if (!s->gpus)
		return a;
	if (s->have_g1)
		js_gpu_interval_of(&s->g0, &s->g1, &iv);
	for (size_t i = 0; i < js_gpu_count(s->gpus); i++) {
		bool ok = true;
		json_t *o = gpu_entry(s, i, &iv, true, &ok);
		json_object_set_new(o, "resets", json_integer(s->have_g1 && i < s->g1.n ? s->g1.resets[i] - s->g0.resets[i] : 0));
		json_array_append_new(a, o);
		if (ok)
			*sum_uj += iv.energy_uj[i];
		else
			*all_ok = false;
	}
	return a;
}

static void snap_of(const struct js_gpu_mark *m, struct js_gpu_snapshot *sn)
{
	memset(sn, 0, sizeof(*sn));
	sn->n = m->n;
	for (size_t i = 0; i < m->n; i++) {
		sn->energy_uj[i] = m->uj[i];
		sn->uncertain[i] = m->uncertain[i];
		sn->err[i] = (m->err >> i) & 1 ? -EIO : 0;
		sn->integrated[i] = (m->integrated >> i) & 1;
	}
}

static json_t *gpu_phase_json(const struct js_step *s, const struct js_sphase *p, uint64_t *sum_uj,
			      bool *all_ok)
{
	json_t *a = json_array();
	struct js_gpu_snapshot a0, a1;
	struct js_gpu_interval iv;
	*sum_uj = 0;
	*all_ok = s->gpus && p->g0.n && p->g1.n;
	if (!s->gpus)
		return a;
	snap_of(&p->g0, &a0);
	snap_of(&p->g1, &a1);
	/* the same rule as the step's (js_gpu_interval_of): a GPU whose
	 * uncertain count moved, or a failed reading, is null */
	js_gpu_interval_of(&a0, &a1, &iv);
	for (size_t i = 0; i < js_gpu_count(s->gpus); i++) {
		bool ok = true;
		json_array_append_new(a, gpu_entry(s, i, &iv, false, &ok));
		if (ok)
			*sum_uj += iv.energy_uj[i];
		else
			*all_ok = false;
	}
	return a;
}

static json_t *gpu_user_json(const struct js_step *s, bool shown, uint64_t *sum_uj, bool *all_ok)
{
	json_t *rec = gpu_step_json(s, sum_uj, all_ok), *out = json_array(), *g;
	size_t i;
	*sum_uj = 0;
	json_array_foreach(rec, i, g) {
		json_t *e = json_object_get(g, "energy_uj"), *o = json_object();
		json_object_set(o, "uuid", json_object_get(g, "uuid"));
		if (json_is_integer(e) && shown) {
			uint64_t v = js_round_uj((uint64_t)json_integer_value(e), JS_GPU_USER_RES_UJ);
			json_object_set_new(o, "energy_uj", json_integer((json_int_t)v));
			json_object_set(o, "reason", json_null());
			*sum_uj += v;
		} else {
			json_object_set_new(o, "energy_uj", json_null());
			if (json_is_integer(e))
				json_object_set_new(o, "reason", json_string("shorter than min_phase_ms"));
			else
				json_object_set(o, "reason", json_object_get(g, "reason"));
		}
		json_array_append_new(out, o);
	}
	*all_ok = *all_ok && shown;
	json_decref(rec);
	return out;
}

static bool gpu_user_phase(const struct js_step *s, const struct js_sphase *p, bool shown, uint64_t *uj)
{
	bool ok = false;
	json_t *a = gpu_phase_json(s, p, uj, &ok), *g;
	size_t i;
	*uj = 0;
	json_array_foreach(a, i, g)
		*uj += js_round_uj((uint64_t)json_integer_value(json_object_get(g, "energy_uj")),
				   JS_GPU_USER_RES_UJ);
	json_decref(a);
	return ok && shown;
}

/* The step's RAPL interval, and whether DRAM is measured (no dram zone on
 * AMD: DRAM is null with the reason, and the total is the CPU's alone;
 * never a 0 J DRAM). */
struct rec_energy {
	bool have_e;               /* a backend and a first reading          */
	struct js_interval iv;
	bool dram_m;
	char dwhy[JS_WHY_LEN];     /* why DRAM is not measured               */
};

static void energy_of(struct js_step *s, struct rec_energy *e)
{
	memset(e, 0, sizeof(*e));
	e->have_e = s->energy && s->have_s0;
	if (!e->have_e)
		return;
	js_interval_of(s->energy, &s->s0, &s->s1, &e->iv);
	e->dram_m = js_zones_dram_why(js_energy_zones(s->energy), e->dwhy, sizeof(e->dwhy)) == 0;
}

/* What energy_total_uj holds (step.total_includes). */
static const char *total_includes(const struct rec_energy *e, bool gpu_ok)
{
	if (e->dram_m || !e->have_e)
		return gpu_ok ? "cpu+dram+gpu" : "cpu+dram";
	return gpu_ok ? "cpu+gpu" : "cpu";
}

static json_t *record_job(const struct js_step *s)
{
	json_t *tags = json_object();
	for (size_t i = 0; i < s->tags.n; i++)
		json_object_set_new(tags, s->tags.t[i].key, json_string(s->tags.t[i].val));
	json_t *job = json_object();
	json_object_set_new(job, "job_id", json_integer(s->job_id));
	/* No trusted source on the node knows the submit time (the plugin asks
	 * slurmctld nothing); the job is keyed by first_seen_ns at ingest. */
	json_object_set_new(job, "submit_time_ns", json_null());
	json_object_set_new(job, "first_seen_ns", json_integer((json_int_t)s->first_seen_ns));
	/* which run of a requeued job (docs/design.md, "A requeued job's
	 * incarnations"): the job prolog's time on this node, as first_seen_ns */
	json_object_set_new(job, "incarnation_ns", json_integer((json_int_t)s->first_seen_ns));
	json_object_set_new(job, "start_time_ns", json_integer((json_int_t)s->start_ns));
	json_object_set_new(job, "name", jstr_or_null(s->job_name));
	json_object_set_new(job, "user", jstr_or_null(s->user));
	json_object_set_new(job, "uid", json_integer(s->uid));
	json_object_set_new(job, "gid", json_integer(s->gid));
	json_object_set_new(job, "account", jstr_or_null(s->account));
	json_object_set_new(job, "partition", jstr_or_null(s->partition));
	json_object_set_new(job, "tags", tags);
	return job;
}

/* A CPU list in Slurm's range syntax, whatever its length (a list of
 * JS_MAX_CPUS single CPUs does not fit a fixed buffer). */
static json_t *cpu_list_json(const struct js_cpuset *set)
{
	char buf[JS_MAX_CPUS * 6];
	if (js_cpuset_format(set, buf, sizeof(buf)) < 0)
		buf[0] = 0;
	return json_string(buf);
}

/* The step's identity, CPUs, policy and clocks. */
static void step_fields(json_t *step, const struct js_step *s)
{
	char pol[600];
	js_policy_format(&s->policy, pol, sizeof(pol));
	json_object_set_new(step, "step_id", json_string(s->step_id));
	json_object_set_new(step, "het_component", json_integer(s->het));
	json_object_set_new(step, "node", json_string(s->node));
	json_object_set_new(step, "node_model", jstr_or_null(s->node_model));
	json_object_set_new(step, "ntasks", json_integer(s->ntasks));
	json_object_set_new(step, "nnodes", json_integer(s->nnodes));
	json_object_set_new(step, "cpus", cpu_list_json(&s->cpus));
	json_object_set_new(step, "ncpus", json_integer(s->ncpus));
	if (js_cpuset_count(&s->smt_aside))
		json_object_set_new(step, "smt_aside_cpus", cpu_list_json(&s->smt_aside));
	json_object_set_new(step, "policy", json_string(pol));
	if (s->policy.type == JS_POL_TUNED || s->policy.type == JS_POL_AUTO) { /* the map applied, after the admin bounds */
		json_t *map = json_object();
		for (size_t i = 0; i < s->policy.nmap; i++)
			json_object_set_new(map, s->policy.map[i].kind, json_real(s->policy.map[i].ratio));
		json_object_set_new(step, "policy_map", map);
	}
	/* the original clock; the nominal one where the driver tells; fixed:R's */
	json_object_set_new(step, "base_freq_khz", s->base_khz ? json_integer(s->base_khz) : json_null());
	json_object_set_new(step, "nominal_freq_khz", s->nominal_khz ? json_integer(s->nominal_khz) : json_null());
	json_object_set_new(step, "fixed_freq_khz", s->fixed_khz ? json_integer(s->fixed_khz) : json_null());
	json_object_set_new(step, "freq_min_ratio", json_real(s->conf.min_ratio));
	json_object_set_new(step, "fmax_khz", s->fmax_khz ? json_integer(s->fmax_khz) : json_null());
	json_object_set_new(step, "start_ns", json_integer((json_int_t)s->start_ns));
	json_object_set_new(step, "end_ns", json_integer((json_int_t)s->end_ns));
	json_object_set_new(step, "duration_ns", json_integer((json_int_t)(s->end_ns - s->start_ns)));
	json_object_set_new(step, "exit_code", s->exit_code >= 0 ? json_integer(s->exit_code) : json_null());
}

/* The step's energies. An uncertain zone (a counter that went back, a zone
 * that vanished, a gap longer than its wrap time) has no energy in the
 * record, nor has the sum it is part of: null, never a lower bound passed
 * off as the energy (provenance.wrap_uncertain, zones[].uncertain). The
 * total includes the GPUs only when every GPU of the step has its energy;
 * total_includes says what it holds. Returns the record's "gpus" list. */
static json_t *step_energy(json_t *step, const struct js_step *s, const struct rec_energy *e)
{
	const struct js_interval *iv = &e->iv;
	bool cpu_ok = e->have_e && !iv->cpu_uncertain, dram_ok = e->have_e && !iv->dram_uncertain;
	bool total_ok = cpu_ok && (dram_ok || !e->dram_m);
	json_object_set_new(step, "energy_cpu_uj", cpu_ok ? json_integer((json_int_t)iv->energy_cpu_uj) : json_null());
	json_object_set_new(step, "energy_dram_uj", dram_ok && e->dram_m ? json_integer((json_int_t)iv->energy_dram_uj) : json_null());
	uint64_t gpu_uj = 0;
	bool gpu_ok = false;
	json_t *gpus = gpu_step_json(s, &gpu_uj, &gpu_ok);
	json_object_set_new(step, "energy_gpu_uj", gpu_ok ? json_integer((json_int_t)gpu_uj) : json_null());
	uint64_t total = (e->dram_m ? iv->energy_total_uj : iv->energy_cpu_uj) + (gpu_ok ? gpu_uj : 0);
	json_object_set_new(step, "energy_total_uj", total_ok ? json_integer((json_int_t)total) : json_null());
	json_object_set_new(step, "total_includes", json_string(total_includes(e, gpu_ok)));
	json_object_set_new(step, "dram_not_measured", e->have_e && !e->dram_m ? json_string(e->dwhy) : json_null());
	node_energy_json(step, s);
	/* the shared-node inputs (js_share.h, docs/accounting.md): the
	 * step's CPU time and, per package it has a CPU in, the package's */
	json_object_set_new(step, "cpu_time_ns", s->have_sh1 ? json_integer((json_int_t)(s->sh1.cpu_time_us - s->sh0.cpu_time_us) * 1000u) : json_null());
	return gpus;
}

static json_t *record_zones(const struct js_step *s, const struct rec_energy *e)
{
	json_t *zones = json_array();
	if (!e->have_e)
		return zones;
	const struct js_zone_set *zs = js_energy_zones(s->energy);
	for (size_t i = 0; i < zs->nzones && i < e->iv.nzones; i++) {
		json_t *z = json_object();
		json_object_set_new(z, "name", json_string(zs->zones[i].name));
		json_object_set_new(z, "id", json_string(zs->zones[i].id));
		json_object_set_new(z, "kind", json_string(zs->zones[i].kind == JS_ZONE_PACKAGE ? "package" : "dram"));
		json_object_set_new(z, "energy_uj", e->iv.zone_uncertain[i] ? json_null() : json_integer((json_int_t)e->iv.energy_uj[i]));
		json_object_set_new(z, "wraps", json_integer(e->iv.wraps[i]));
		json_object_set_new(z, "uncertain", json_boolean(e->iv.zone_uncertain[i]));
		json_array_append_new(zones, z);
	}
	return zones;
}

/* A phase's ranks: per-rank detail for the step's first JS_RANK_DETAIL_MAX
 * rank entries (the record's size bound), then aggregates. */
static void phase_ranks(json_t *o, const struct js_step *s, const struct js_sphase *p)
{
	json_t *ranks = json_array();
	for (size_t r = 0; r < p->ndetail; r++) {
		const struct js_rank_timing *t = &p->ranks[r];
		json_t *ro = json_object();
		json_object_set_new(ro, "rank", json_integer(t->rank));
		json_object_set_new(ro, "start_ns", json_integer((json_int_t)((int64_t)t->start_ns + s->mono_to_real_ns)));
		json_object_set_new(ro, "end_ns", json_integer((json_int_t)((int64_t)t->end_ns + s->mono_to_real_ns)));
		json_object_set_new(ro, "bytes", jnum_or_null(t->bytes));
		json_array_append_new(ranks, ro);
	}
	json_object_set_new(o, "ranks", ranks);
	json_object_set_new(o, "ranks_truncated", json_boolean(p->ndetail < p->nranks));
	if (p->ndetail < p->nranks) {
		json_t *rs = json_object();
		json_object_set_new(rs, "start_ns", jminmax(&p->stats.start_ns, s->mono_to_real_ns));
		json_object_set_new(rs, "end_ns", jminmax(&p->stats.end_ns, s->mono_to_real_ns));
		json_object_set_new(rs, "bytes", jminmax(&p->stats.bytes, 0));
		json_object_set_new(o, "rank_stats", rs);
	}
}

/* A phase's energies and clocks. An uncertain phase (a zone uncertain at
 * its start or end) has no energy: the per-zone split of a phase is not
 * kept. */
static void phase_energy(json_t *o, const struct js_step *s, const struct js_sphase *p,
			 const struct rec_energy *e)
{
	bool pe = e->have_e && !p->uncertain;
	json_object_set_new(o, "freq_khz", p->freq_khz ? json_integer(p->freq_khz) : json_null());
	json_object_set_new(o, "freq_change_ns", p->freq_change_ns ? json_integer((json_int_t)p->freq_change_ns) : json_null());
	json_object_set_new(o, "freq_lag_ns", p->freq_change_ns ? json_integer((json_int_t)p->freq_lag_ns) : json_null());
	json_object_set_new(o, "energy_cpu_uj", pe ? json_integer((json_int_t)(p->e_cpu1_uj - p->e_cpu0_uj)) : json_null());
	json_object_set_new(o, "energy_dram_uj", pe && e->dram_m ? json_integer((json_int_t)(p->e_dram1_uj - p->e_dram0_uj)) : json_null());
	json_object_set_new(o, "uncertain", json_boolean(p->uncertain));
	if (s->gpus) {
		uint64_t pg = 0;
		bool pok = false;
		json_object_set_new(o, "gpus", gpu_phase_json(s, p, &pg, &pok));
		json_object_set_new(o, "energy_gpu_uj", pok ? json_integer((json_int_t)pg) : json_null());
		json_object_set_new(o, "gpu_clock_mhz", p->gpu_mhz ? json_integer(p->gpu_mhz) : json_null());
	}
	if (p->uncore_khz) /* +uncore-io: the cap this phase set */
		json_object_set_new(o, "uncore_max_khz", json_integer(p->uncore_khz));
}

static json_t *record_phase(const struct js_step *s, const struct js_sphase *p,
			    const struct rec_energy *e)
{
	json_t *o = json_object();
	uint64_t st = (uint64_t)((int64_t)p->start_ns + s->mono_to_real_ns);
	uint64_t en = (uint64_t)((int64_t)p->end_ns + s->mono_to_real_ns);
	json_object_set_new(o, "seq", json_integer(p->seq));
	json_object_set_new(o, "kind", json_string(p->kind));
	json_object_set_new(o, "label", jstr_or_null(p->label));
	json_object_set_new(o, "depth", json_integer(p->depth));
	json_object_set_new(o, "parent_seq", p->parent_seq >= 0 ? json_integer(p->parent_seq) : json_null());
	/* start/end: when the energy was read (first BEGIN and last END
	 * handled), so power = energy / duration; marker_*: the clients' t=
	 * (docs/record-format.md) */
	json_object_set_new(o, "start_ns", json_integer((json_int_t)st));
	json_object_set_new(o, "end_ns", json_integer((json_int_t)en));
	json_object_set_new(o, "duration_ns", json_integer((json_int_t)(p->end_ns - p->start_ns)));
	json_object_set_new(o, "marker_start_ns",
			    json_integer((json_int_t)((int64_t)p->marker_start_ns + s->mono_to_real_ns)));
	json_object_set_new(o, "marker_end_ns",
			    json_integer((json_int_t)((int64_t)p->marker_end_ns + s->mono_to_real_ns)));
	phase_energy(o, s, p, e);
	json_object_set_new(o, "bytes", jnum_or_null(p->bytes));
	json_object_set_new(o, "nranks", json_integer((json_int_t)p->nranks));
	json_object_set_new(o, "open_at_step_end", json_boolean(p->closed_by_step_end));
	phase_ranks(o, s, p);
	return o;
}

/* The markers and their limits (docs/security.md: the caps, what they
 * dropped, and the rules the user's view of this record follows). */
static void prov_markers(json_t *prov, const struct js_step *s)
{
	json_object_set_new(prov, "markers_rejected", json_integer((json_int_t)s->rejected));
	json_object_set_new(prov, "markers_rate_dropped", json_integer((json_int_t)s->dropped_rate));
	json_object_set_new(prov, "markers_step_dropped", json_integer((json_int_t)s->dropped_step_cap));
	json_object_set_new(prov, "max_markers_per_s", json_integer(s->conf.rate));
	json_object_set_new(prov, "max_markers_per_step", json_integer((json_int_t)s->conf.max_markers_per_step));
	json_object_set_new(prov, "min_phase_ns", json_integer((json_int_t)s->conf.min_phase_ms * 1000000));
	json_object_set_new(prov, "energy_resolution_uj", s->energy_resolution_uj ? json_integer((json_int_t)s->energy_resolution_uj) : json_null());
	json_object_set_new(prov, "markers_drained", json_integer((json_int_t)s->drained));
	json_object_set_new(prov, "markers_skipped_at_end", json_integer((json_int_t)s->skipped_at_end));
	json_object_set_new(prov, "drain_truncated", json_boolean(s->drain_truncated));
}

static json_t *record_provenance(struct js_step *s, bool uncertain)
{
	json_t *prov = json_object();
	json_object_set_new(prov, "backend", s->energy ? json_string(js_energy_backend_name(s->energy)) : json_null());
	json_object_set_new(prov, "wrap_uncertain", json_boolean(uncertain));
	json_object_set_new(prov, "gpu_backend", s->gpus ? json_string(js_gpu_backend_name(s->gpus)) : json_null());
	json_object_set_new(prov, "gpus_unmeasured", jstr_or_null(s->gpu_why));
	json_object_set_new(prov, "gpu_clock_control", jstr_or_null(s->gpu_clock_mode));
	json_object_set_new(prov, "sample_period_ns", s->meter ? json_integer((json_int_t)js_meter_period_ns(s->meter)) : json_null());
	json_object_set_new(prov, "job_source", json_string(s->job_source));
	prov_markers(prov, s);
	json_object_set_new(prov, "freq_control", json_string(s->freq_mode ? s->freq_mode : "none"));
	json_t *hooks = json_array();
	for (int i = 0; i < JS_HOOK_COUNT; i++)
		if (s->hooks_mask & (1u << i))
			json_array_append_new(hooks, json_string(js_hook_name((enum js_hook)i)));
	json_object_set_new(prov, "hooks", hooks);
	json_t *errs = json_array();
	pthread_mutex_lock(&s->err_mu);
	for (size_t i = 0; i < s->nerrors; i++)
		json_array_append_new(errs, json_string(s->errors[i]));
	uint64_t nerr = s->errors_total;
	pthread_mutex_unlock(&s->err_mu);
	json_object_set_new(prov, "errors", errs);
	json_object_set_new(prov, "errors_total", json_integer((json_int_t)nerr));
	if (s->policy.type == JS_POL_TUNED) {
		json_object_set_new(prov, "tuned_file", json_string(s->conf.tuned));
		json_object_set_new(prov, "tuned_node_model", jstr_or_null(s->tuned_model));
	}
	json_object_set_new(prov, "plugin_version", json_string(JS_PLUGIN_VERSION));
	return prov;
}

json_t *js_record_json(struct js_step *s)
{
	struct rec_energy e;
	energy_of(s, &e);
	json_t *root = json_object();
	json_object_set_new(root, "format", json_string("joulestep-record"));
	/* version 2: DRAM without a dram zone is null with step.dram_not_measured;
	 * version 3: GPU energy and step.total_includes; version 4: no
	 * step.exclusive (sharing is decided from time overlap at ingest) */
	json_object_set_new(root, "version", json_integer(JS_RECORD_VERSION));
	json_object_set_new(root, "cluster", json_string(s->cluster));
	json_object_set_new(root, "job", record_job(s));
	json_t *step = json_object();
	step_fields(step, s);
	json_t *gpus = step_energy(step, s, &e);
	json_object_set_new(root, "step", step);
	json_object_set_new(root, "zones", record_zones(s, &e));
	json_t *packages = share_json(s);
	js_cgroup_step_json(s, step, packages); /* cpuset check, cgroup CPU time */
	json_object_set_new(root, "packages", packages);
	json_object_set_new(root, "gpus", gpus);
	bool uncertain = e.iv.wrap_uncertain;
	json_t *phases = json_array();
	size_t np = s->phases ? js_phases_count(s->phases) : 0;
	for (size_t i = 0; i < np; i++) {
		const struct js_sphase *p = js_phases_get(s->phases, i);
		json_array_append_new(phases, record_phase(s, p, &e));
		uncertain = uncertain || p->uncertain;
	}
	json_object_set_new(root, "phases", phases);
	json_t *prov = record_provenance(s, uncertain);
	js_auto_record(s, step, prov); /* the auto policy's fields */
	json_object_set_new(root, "provenance", prov);
	return root;
}

/* ---- the user's summary ---------------------------------------------------
 * What the job's user may see of the record (docs/security.md, "Threat
 * model: RAPL side channels"): written at step end, once every phase has
 * ended, as <record name>.summary (not *.json: ingest reads records only),
 * owned by the job's uid, mode 0400, in the root-owned job directory; the
 * record itself is root-only (0600). Energies are rounded to the step's
 * energy_resolution_uj; a step or phase shorter than min_phase_ms has none. */
#define JS_SUMMARY_PHASES 256

static json_t *juser_uj(uint64_t v, bool shown, uint64_t res)
{
	return shown ? json_integer((json_int_t)js_round_uj(v, res)) : json_null();
}

/* The summary's step energies (rounded to res; none shown for a step
 * shorter than min_phase_ms, or an uncertain one). */
static void user_energy(json_t *root, const struct js_step *s, const struct rec_energy *e,
			uint64_t res, uint64_t minp)
{
	uint64_t dur = s->end_ns - s->start_ns;
	/* a counter that went back or vanished: no energy for the user either */
	bool unc = e->have_e && (e->iv.cpu_uncertain || e->iv.dram_uncertain);
	bool shown = e->have_e && !unc && js_user_may_see(dur, minp);
	json_object_set_new(root, "uncertain", json_boolean(unc));
	uint64_t cpu = js_round_uj(e->iv.energy_cpu_uj, res), dram = js_round_uj(e->iv.energy_dram_uj, res);
	json_object_set_new(root, "start_ns", json_integer((json_int_t)s->start_ns));
	json_object_set_new(root, "duration_ns", json_integer((json_int_t)dur));
	json_object_set_new(root, "energy_cpu_uj", shown ? json_integer((json_int_t)cpu) : json_null());
	json_object_set_new(root, "energy_dram_uj", shown && e->dram_m ? json_integer((json_int_t)dram) : json_null());
	json_object_set_new(root, "dram_not_measured", e->have_e && !e->dram_m ? json_string(e->dwhy) : json_null());
	/* the GPUs as the record has them (the total includes them only when
	 * every one has its figure), rounded (gpu_user_json) */
	uint64_t gpu = 0;
	bool gpu_ok = false;
	if (s->gpus) {
		json_object_set_new(root, "gpus", gpu_user_json(s, js_user_may_see(dur, minp), &gpu, &gpu_ok));
		json_object_set_new(root, "energy_gpu_uj", gpu_ok ? json_integer((json_int_t)gpu) : json_null());
	}
	json_object_set_new(root, "energy_total_uj", shown ? json_integer((json_int_t)(cpu + dram + (gpu_ok ? gpu : 0))) : json_null());
	json_object_set_new(root, "total_includes", json_string(total_includes(e, gpu_ok)));
	json_object_set_new(root, "energy_hidden", e->have_e && !unc && !shown ? json_string("shorter than min_phase_ms") : json_null());
}

static json_t *user_phase(const struct js_step *s, const struct js_sphase *p,
			  const struct rec_energy *e, uint64_t res, uint64_t minp)
{
	bool seen = js_user_may_see(p->end_ns - p->start_ns, minp);
	bool ps = e->have_e && !p->uncertain && seen;
	json_t *o = json_object();
	json_object_set_new(o, "seq", json_integer(p->seq));
	json_object_set_new(o, "kind", json_string(p->kind));
	json_object_set_new(o, "label", jstr_or_null(p->label));
	json_object_set_new(o, "depth", json_integer(p->depth));
	json_object_set_new(o, "duration_ns", json_integer((json_int_t)(p->end_ns - p->start_ns)));
	json_object_set_new(o, "bytes", jnum_or_null(p->bytes));
	json_object_set_new(o, "open_at_step_end", json_boolean(p->closed_by_step_end));
	json_object_set_new(o, "energy_cpu_uj", juser_uj(p->e_cpu1_uj - p->e_cpu0_uj, ps, res));
	json_object_set_new(o, "energy_dram_uj", juser_uj(p->e_dram1_uj - p->e_dram0_uj, ps && e->dram_m, res));
	json_object_set_new(o, "energy_hidden", e->have_e && !seen ? json_string("shorter than min_phase_ms") : json_null());
	json_object_set_new(o, "uncertain", json_boolean(p->uncertain));
	uint64_t pg = 0;
	if (s->gpus)
		json_object_set_new(o, "energy_gpu_uj", gpu_user_phase(s, p, seen, &pg) ? json_integer((json_int_t)pg) : json_null());
	return o;
}

json_t *js_record_user_json(struct js_step *s)
{
	uint64_t res = s->energy_resolution_uj ? s->energy_resolution_uj : JS_ENERGY_UNIT_UJ;
	uint64_t minp = (uint64_t)s->conf.min_phase_ms * 1000000ULL;
	struct rec_energy e;
	energy_of(s, &e);
	char pol[600];
	js_policy_format(&s->policy, pol, sizeof(pol));
	json_t *root = json_object();
	json_object_set_new(root, "format", json_string("joulestep-user-summary"));
	json_object_set_new(root, "version", json_integer(1));
	json_object_set_new(root, "job_id", json_integer(s->job_id));
	json_object_set_new(root, "step_id", json_string(s->step_id));
	json_object_set_new(root, "het_component", json_integer(s->het));
	json_object_set_new(root, "node", json_string(s->node));
	json_object_set_new(root, "policy", json_string(pol));
	json_object_set_new(root, "energy_resolution_uj", json_integer((json_int_t)res));
	json_object_set_new(root, "min_phase_ns", json_integer((json_int_t)minp));
	user_energy(root, s, &e, res, minp);
	json_t *phases = json_array();
	size_t np = s->phases ? js_phases_count(s->phases) : 0, hidden = 0;
	for (size_t i = 0; i < np; i++) {
		const struct js_sphase *p = js_phases_get(s->phases, i);
		hidden += e.have_e && !js_user_may_see(p->end_ns - p->start_ns, minp);
		if (i < JS_SUMMARY_PHASES)
			json_array_append_new(phases, user_phase(s, p, &e, res, minp));
	}
	json_object_set_new(root, "phases", phases);
	json_object_set_new(root, "phases_total", json_integer((json_int_t)np));
	json_object_set_new(root, "phases_hidden", json_integer((json_int_t)hidden));
	pthread_mutex_lock(&s->err_mu);
	uint64_t nerr = s->errors_total;
	pthread_mutex_unlock(&s->err_mu);
	json_object_set_new(root, "errors_total", json_integer((json_int_t)nerr));
	return root;
}

int js_record_dir(struct js_step *s)
{
	char dir[JS_PATH_MAX * 2];
	snprintf(dir, sizeof(dir), "%s/%s/%u", s->conf.spool, s->cluster, s->job_id);
	int dfd = js_root_dirfd(dir, 0755, true);
	if (dfd < 0)
		slurm_error("joulestep: job %u step %s: spool directory %s: %s (must exist or be creatable, root-owned, not group/world-writable)",
			    s->job_id, s->step_id, dir, strerror(-dfd));
	return dfd;
}

/* The user's summary beside the record: rounded, short phases without energy
 * (docs/security.md, "Threat model: RAPL side channels"). */
static void write_user_summary(struct js_step *s, int dfd, const char *dir)
{
	json_t *u = js_record_user_json(s);
	char *text = u ? json_dumps(u, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII) : NULL;
	json_decref(u);
	char name[256];
	js_record_name(s, name, sizeof(name)); /* <record name without .json>.summary */
	size_t nl = strlen(name);
	snprintf(name + nl - 5, sizeof(name) - (nl - 5), ".summary");
	int urc = text ? js_write_atomic(dfd, name, text, strlen(text), 0400, s->uid, s->gid, JS_ATOMIC_FSYNC)
		       : -ENOMEM;
	if (urc)
		slurm_error("joulestep: job %u step %s: writing the user's summary %s/%s: %s",
			    s->job_id, s->step_id, dir, name, strerror(-urc));
	free(text);
}

void js_record_name(const struct js_step *s, char *name, size_t len)
{
	js_record_name_of(s->job_id, s->step_id, s->het, s->first_seen_ns, s->node, name, len);
}

void js_record_started_marker(struct js_step *s)
{
	char name[256];
	js_record_name(s, name, sizeof(name));
	int rc = js_pending_started(s->conf.state, s->cluster, s->job_id, name, s->start_ns,
				    s->have_s0 ? s->s0.t_ns : 0);
	if (rc < 0)
		js_step_error(s, "record: step-start marker in %s/pending: %s", s->conf.state,
			      strerror(-rc));
}

int js_record_write(struct js_step *s, int dfd)
{
	char dir[JS_PATH_MAX * 2];
	snprintf(dir, sizeof(dir), "%s/%s/%u", s->conf.spool, s->cluster, s->job_id);
	json_t *root = js_record_json(s);
	char *text = root ? json_dumps(root, JSON_INDENT(1) | JSON_SORT_KEYS | JSON_ENSURE_ASCII) : NULL;
	json_decref(root);
	if (!text) {
		if (dfd >= 0)
			close(dfd);
		slurm_error("joulestep: job %u step %s: cannot build the record (out of memory)",
			    s->job_id, s->step_id);
		return -ENOMEM;
	}
	char name[256];
	js_record_name(s, name, sizeof(name));
	size_t len = strlen(text);
	text[len] = '\n'; /* json_dumps' NUL becomes the final newline */
	/* root-only: full-resolution energies of every phase (docs/security.md,
	 * "Threat model: RAPL side channels"); the user gets the summary */
	int rc = dfd < 0 ? dfd : js_write_atomicat(dfd, name, text, len + 1, 0600, false);
	if (rc && dfd >= 0)
		slurm_error("joulestep: job %u step %s: writing record %s/%s: %s", s->job_id,
			    s->step_id, dir, name, strerror(-rc));
	if (rc) { /* full, read-only, gone: the fallback (js_pending.c) */
		int k = js_pending_keep(s->conf.state, s->cluster, s->job_id, name, text, len + 1, rc);
		if (k == 0)
			slurm_error("joulestep: job %u step %s: record %s kept in %s/pending; the node's next job prolog or epilog moves it into the spool once it can be written",
				    s->job_id, s->step_id, name, s->conf.state);
		else if (k == 1)
			slurm_error("joulestep: job %u step %s: record %s LOST (spool and %s/pending not writable); counted as lost (joulestep doctor, report) once the spool can be written",
				    s->job_id, s->step_id, name, s->conf.state);
		else
			slurm_error("joulestep: job %u step %s: record %s LOST and not counted: %s/pending: %s",
				    s->job_id, s->step_id, name, s->conf.state, strerror(-k));
		if (k == 0 || k == 1) /* kept or counted: the start marker has done its work */
			js_pending_started_clear(s->conf.state, s->cluster, s->job_id, name);
	}
	free(text);
	if (!rc) /* written: the step-start marker goes (issue 23, defect 6) */
		js_pending_started_clear(s->conf.state, s->cluster, s->job_id, name);
	if (dfd >= 0) {
		if (!rc)
			write_user_summary(s, dfd, dir);
		close(dfd);
	}
	return rc;
}

/* fsync a directory given relative to dfd (no symlinks). */
static int fsync_dirat(int dfd, const char *name)
{
	int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = fsync(fd) < 0 ? -errno : 0;
	close(fd);
	return rc;
}

struct sync_job {
	const char *cluster;
	char job[16];
	int rc, n;
};

/* One cluster directory of the spool: its job directory's renames, then it. */
static int sync_one(int sfd, const char *name, void *arg)
{
	struct sync_job *j = arg;
	if (name[0] == '.' || (j->cluster && j->cluster[0] && strcmp(name, j->cluster)))
		return 0;
	int cfd = openat(sfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (cfd < 0)
		return 0;
	if (js_check_dirfd(cfd) == 0) {
		int e = fsync_dirat(cfd, j->job);     /* the renames */
		if (e == 0 && fsync(cfd) < 0)         /* the job directory */
			e = -errno;
		if (e != -ENOENT) {
			j->n++;
			if (j->rc == -ENOENT || (j->rc == 0 && e < 0))
				j->rc = e;
		}
	}
	close(cfd);
	return 0;
}

int js_record_sync_job(const char *spool, const char *cluster, uint32_t job_id)
{
	struct sync_job j = {.cluster = cluster, .rc = -ENOENT};
	snprintf(j.job, sizeof(j.job), "%u", job_id);
	int sfd = js_root_dirfd(spool, 0755, false);
	if (sfd < 0)
		return sfd;
	int rc = js_dir_foreach(sfd, sync_one, &j);
	if (rc == 0)
		rc = j.rc;
	if (j.n && fsync(sfd) < 0 && rc == 0) /* a cluster directory made by this job */
		rc = -errno;
	close(sfd);
	return rc;
}
