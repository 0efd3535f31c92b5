/* joulestep SPANK plugin: what the step's cgroup tells (js_cgroup_step.c;
 * docs/design.md, "The step's cgroup"). With task/cgroup the step's cpuset
 * is Slurm's own translation of the step's cores into Linux CPUs: the
 * plugin cross-checks its translation against it and, where they differ,
 * changes no clock in the step (logged once, step.cpuset_check says why).
 * The cgroup's CPU time (per CPU on v1) is the shared-node attribution's
 * input where there is one (step.cpu_time_source), else slurmstepd's
 * reaped children's. */
#ifndef JS_CGROUP_STEP_H
#define JS_CGROUP_STEP_H

#include <stdbool.h>

#include "js_step.h"

typedef struct json_t json_t;

/* The cgroup hierarchy the plugin reads (Slurm's CgroupMountpoint default). */
#define JS_CGROUP_ROOT "/sys/fs/cgroup"

/* slurmstepd's main thread, as root, after Slurm made the step's cgroup and
 * before the tasks exec (task_post_fork; once per step): the cross-check
 * and the first CPU-time reading. */
void js_cgroup_step_start(struct js_step *s);
/* A task exited (task_exit): the latest CPU-time reading, taken while the
 * cgroup still exists (Slurm removes it before slurm_spank_exit). */
void js_cgroup_step_task_exit(struct js_step *s);
/* True when the step's CPUs must keep their clocks (cpuset disagreement):
 * read by the step thread before any clock change. */
bool js_cgroup_step_vetoed(const struct js_step *s);
/* The record's fields: step.cpuset_check, step.cpu_time_source (and
 * cpu_time_ns from the cgroup where it has it), packages[].step_cpu_ns. */
void js_cgroup_step_json(const struct js_step *s, json_t *step, json_t *packages);
void js_cgroup_step_free(struct js_step *s);

#endif
