/* joulestep SPANK plugin: the step's energy meters (RAPL through
 * joulestep/energy.h, the node's own through joulestep/node.h) and the
 * shared-node inputs (js_share.h): the first readings on slurmstepd's main
 * thread before the tasks start, a phase boundary's reading on the step
 * thread, the final readings at step end. The GPUs' are js_gpu_step.c's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "js_meter_step.h"
#include "js_sidechan.h"
#include "js_step.h"

/* '\n' in a backend's explanation would split the log line and the record */
static void one_line(char *why)
{
	for (char *p = why; *p; p++)
		if (*p == '\n')
			*p = ';';
}

void js_meter_step_open(struct js_step *s)
{
	char why[1024] = "";
	struct js_energy_opts eo = {.sysfs_root = s->conf.sysfs, .order = s->conf.backend};
	int rc = js_energy_open(&eo, &s->energy, why, sizeof(why));
	if (rc < 0) {
		one_line(why);
		js_step_error(s, "energy: no backend (%s): %s", s->conf.backend, why);
		s->energy = NULL;
		return;
	}
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

void js_meter_step_own_thread(struct js_step *s)
{
	if (!s->meter)
		return;
	js_meter_stop(s->meter);
	s->meter = NULL;
	s->have_s0 = false;
	int rc = js_meter_start(s->energy, (uint64_t)s->conf.sample_ms * 1000000ULL, true, &s->meter);
	if (rc < 0) {
		js_step_error(s, "energy: meter: %s", strerror(-rc));
		s->meter = NULL;
	} else if (js_meter_snapshot(s->meter, &s->s0) == 0) {
		s->have_s0 = true;
	}
}

void js_meter_step_snap(void *ctx, uint64_t *cpu, uint64_t *dram, bool *unc)
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

uint64_t js_meter_step_now(void *ctx)
{
	struct js_step *s = ctx;
	if (__atomic_load_n(&s->ended, __ATOMIC_ACQUIRE))
		return s->end_mono_ns;
	return js_now_ns(CLOCK_MONOTONIC);
}

/* node_energy=: the node's own meter beside RAPL (pm_counters, Grace
 * hwmon). Its meter samples power sensors from a thread of its own, with
 * every signal blocked (as the RAPL meter's thread); counters need none.
 * None found is no error: the record says why (step.node_meter_sources). */
void js_meter_step_node_open(struct js_step *s)
{
	char why[512] = "";
	int rc;

	if (!s->conf.node_energy[0])
		return;
	rc = js_node_open(s->conf.sysfs, strcmp(s->conf.node_energy, "auto") ? s->conf.node_energy : NULL,
			  &s->nsrc, why, sizeof(why));
	if (rc < 0) {
		one_line(why);
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
void js_meter_step_share_start(struct js_step *s)
{
	if (js_cpuset_count(&s->cpus) <= 0)
		return;
	int rc = 0;
	if (!s->topo) { /* js_cpu_step_map keeps the one it read */
		s->topo = calloc(1, sizeof(*s->topo));
		rc = s->topo ? js_cpu_topo_read(s->conf.sysfs, s->topo) : -ENOMEM;
	}
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

void js_meter_step_end(struct js_step *s)
{
	if (s->node_meter)
		s->have_n1 = js_node_meter_snapshot(s->node_meter, &s->n1) == 0;
	if (s->meter && js_meter_snapshot(s->meter, &s->s1) < 0)
		js_step_error(s, "energy: final reading failed");
	else if (s->meter)
		__atomic_store_n(&s->ended, true, __ATOMIC_RELEASE);
	share_end(s);
}

void js_meter_step_close(struct js_step *s)
{
	free(s->topo);
	s->topo = NULL;
	if (s->meter)
		js_meter_stop(s->meter);
	if (s->energy)
		js_energy_close(s->energy);
	js_node_meter_stop(s->node_meter);
	js_node_close(s->nsrc);
	s->meter = NULL;
	s->energy = NULL;
	s->node_meter = NULL;
	s->nsrc = NULL;
}
