/* joulestep SPANK plugin: srun --energy-report (local context): the
 * step's user summaries, written by slurmstepd at step end beside the
 * records (js_record.c), printed on srun's stderr. The records are
 * root-only; docs/security.md, "Threat model: RAPL side channels". */
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <jansson.h>
#include <slurm/slurm.h>

#include "js_report.h"

#define REPORT_PHASES 32 /* phase lines srun prints per node */

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

void js_report_print(const struct js_conf *c, uint32_t jobid, uint32_t stepid, uint64_t since_ns)
{
	/* srun --energy-report: the step's user summaries (the records are
	 * root-only; docs/security.md, "Threat model: RAPL side channels"). */
	char step[24];
	if (stepid == SLURM_BATCH_SCRIPT)
		snprintf(step, sizeof(step), "batch");
	else if (stepid == SLURM_INTERACTIVE_STEP)
		snprintf(step, sizeof(step), "interactive");
	else
		snprintf(step, sizeof(step), "%u", stepid);
	char pat[JS_PATH_MAX * 2];
	snprintf(pat, sizeof(pat), "%s/%s/%u/%u.%s.*.summary", c->spool,
		 c->cluster[0] ? c->cluster : "*", jobid, jobid, step);
	glob_t g;
	int grc = GLOB_NOMATCH;
	/* slurmstepd writes the summary as the step ends: wait up to 3 s. */
	for (int tries = 0; tries < 30; tries++) {
		memset(&g, 0, sizeof(g));
		grc = glob(pat, 0, NULL, &g);
		if (grc == 0 && fresh_summaries(&g, since_ns) > 0)
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
			jobid, step, c->spool, jobid);
		return;
	}
	for (size_t i = 0; i < g.gl_pathc; i++)
		print_summary(g.gl_pathv[i], jobid, step);
	globfree(&g);
}
