/* joulestep SPANK plugin: the step's cgroup (js_cgroup_step.h). */
#include <errno.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <slurm/spank.h>

#include <joulestep/cgroup.h>

#include "js_cgroup_step.h"

struct js_cgroup_step {
	struct js_cg_step paths;
	struct js_cg_usage u0, u1;
	bool have_u0, have_u1;
	_Atomic bool veto;
	char check[320];            /* step.cpuset_check, "" = none          */
};

static void self_cgroup(char *buf, size_t len)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	size_t n = f ? fread(buf, 1, len - 1, f) : 0;
	buf[n] = 0;
	if (f)
		fclose(f);
}

static void cross_check(struct js_step *s, struct js_cgroup_step *g)
{
	struct js_cpuset cg;
	int rc = js_cg_read_cpuset(&g->paths, &cg);
	if (rc == -ENOENT)
		return; /* no task/cgroup cpuset for this step: nothing to check */
	if (rc < 0) {
		snprintf(g->check, sizeof(g->check), "unreadable: %.200s/cpuset: %.60s", g->paths.cpuset_dir,
			 strerror(-rc));
		return;
	}
	if (js_cpuset_count(&s->cpus) <= 0) {
		snprintf(g->check, sizeof(g->check), "not checked: no step CPUs from Slurm's cores");
		return;
	}
	char want[128], got[128];
	js_cpuset_format(&cg, got, sizeof(got));
	js_cpuset_format(&s->cpus, want, sizeof(want));
	if (!memcmp(&cg, &s->cpus, sizeof(cg))) {
		snprintf(g->check, sizeof(g->check), "agrees");
		return;
	}
	atomic_store(&g->veto, true);
	snprintf(g->check, sizeof(g->check),
		 "disagrees: cgroup cpuset %.120s, mapped from Slurm's cores %.120s; no clock changed", got, want);
	slurm_error("joulestep: job %u step %s: the step's cpuset (%s) is CPUs %s, joulestep mapped Slurm's cores to CPUs %s (topology under %s): no clock is changed in this step",
		    s->job_id, s->step_id, g->paths.cpuset_dir, got, want, s->conf.sysfs);
	/* nothing to undo: fixed:R comes after this check (apply_fixed), and
	 * phases cannot start before the tasks exec */
}

void js_cgroup_step_start(struct js_step *s)
{
	if (s->cgs)
		return; /* once per step: the first task */
	struct js_cgroup_step *g = calloc(1, sizeof(*g));
	if (!g)
		return;
	s->cgs = g;
	int version = 0;
	if (js_cg_version(JS_CGROUP_ROOT, &version) < 0)
		return;
	char self[4096];
	self_cgroup(self, sizeof(self));
	int rc = js_cg_step_paths(JS_CGROUP_ROOT, version, s->node, s->uid, s->job_id, s->step_id, self,
				  &g->paths);
	if (rc < 0) {
		if (version == JS_CG_V1 || strstr(self, "/job_"))
			snprintf(g->check, sizeof(g->check), "not checked: no cgroup path for the step: %s",
				 strerror(-rc));
		return;
	}
	cross_check(s, g);
	g->have_u0 = js_cg_read_usage(&g->paths, &g->u0) == 0;
}

void js_cgroup_step_task_exit(struct js_step *s)
{
	struct js_cgroup_step *g = s->cgs;
	if (g && g->have_u0 && js_cg_read_usage(&g->paths, &g->u1) == 0)
		g->have_u1 = true;
}

bool js_cgroup_step_vetoed(const struct js_step *s)
{
	const struct js_cgroup_step *g = s->cgs;
	return g && atomic_load(&((struct js_cgroup_step *)g)->veto);
}

/* The step's cgroup CPU time on one package (per-CPU figures only). */
static uint64_t on_package(const struct js_step *s, const struct js_cg_usage *d, int package)
{
	uint64_t ns = 0;
	for (size_t c = 0; c < d->ncpu && c < JS_MAX_CPUS; c++)
		if (d->cpu_ns[c] && js_cpuset_isset(&s->topo->present, (int)c) && s->topo->pkg[c] == package)
			ns += d->cpu_ns[c];
	return ns;
}

void js_cgroup_step_json(const struct js_step *s, json_t *step, json_t *packages)
{
	const struct js_cgroup_step *g = s->cgs;
	json_object_set_new(step, "cpuset_check", g && g->check[0] ? json_string(g->check) : json_null());
	if (!g || !g->have_u1) {
		json_object_set_new(step, "cpu_time_source",
				    json_object_get(step, "cpu_time_ns") && !json_is_null(json_object_get(step, "cpu_time_ns"))
					    ? json_string("children") : json_null());
		return;
	}
	static __thread struct js_cg_usage d;
	js_cg_usage_delta(&g->u0, &g->u1, &d);
	json_object_set_new(step, "cpu_time_ns", json_integer((json_int_t)d.total_ns));
	json_object_set_new(step, "cpu_time_source", json_string(d.per_cpu ? "cgroup-percpu" : "cgroup"));
	if (!d.per_cpu || !s->topo)
		return;
	size_t i;
	json_t *p;
	json_array_foreach(packages, i, p) {
		json_t *id = json_object_get(p, "package");
		if (json_is_integer(id))
			json_object_set_new(p, "step_cpu_ns",
					    json_integer((json_int_t)on_package(s, &d, (int)json_integer_value(id))));
	}
}

void js_cgroup_step_free(struct js_step *s)
{
	free(s->cgs);
	s->cgs = NULL;
}
