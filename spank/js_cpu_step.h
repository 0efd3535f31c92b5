/* joulestep SPANK plugin: the step's CPUs and their clocks (js_cpu_step.c;
 * docs/design.md, "Frequency"). Everything but set_ratio runs on
 * slurmstepd's main thread. */
#ifndef JS_CPU_STEP_H
#define JS_CPU_STEP_H

#include <stdint.h>

#include "js_parse.h"

struct js_step;

/* The step's Linux CPUs (s->cpus) from Slurm's abstract core list (the
 * step's, else the job's; NULL when unknown), with the cores left at their
 * clock for SMT (s->smt_aside) and the packages the step owns whole
 * (s->pkgs_owned); the node's topology is kept in s->topo. A failure leaves
 * no CPUs (error recorded). */
void js_cpu_step_map(struct js_step *s, const char *cores);
/* Orphans of a killed slurmstepd (pid-checked, not forced), when the
 * journal holds a saved clock of one of the step's CPUs. */
void js_cpu_step_recover(struct js_step *s);
/* The cpufreq state of the step's CPUs (s->cf, s->ncpus), fmax, nominal and
 * base clock: read once per step. */
void js_cpu_step_read(struct js_step *s);
/* Journal and open the policies the step may change (none when the policy
 * is monitor, or Slurm's --cpu-freq was asked for: slurm_cpu_freq_req is
 * what was asked, NULL or "" when nothing). Sets s->freq_mode. */
void js_cpu_step_setup(struct js_step *s, const char *slurm_cpu_freq_req);
/* fixed:R's clock, once per step, after the step's cpuset was checked
 * (task_post_fork; nothing where the check vetoed clocks). */
void js_cpu_step_apply_fixed(struct js_step *s);
/* The phase logic's set_ratio (step thread): pwrite()s on the handles
 * js_cpu_step_setup opened. ctx is the step. JS_RATIO_BASE is the step's
 * base: fixed:R's clock, else each CPU's original settings. Changes
 * nothing where the step's cpuset disagreed with the mapping. */
int js_cpu_step_set_ratio(void *ctx, double ratio, uint32_t *khz, uint64_t *took_ns);
/* Step end: the clocks back, through the step's own descriptors, to what
 * was in force when the step started; then (release) the journal, whose last
 * live owner restores the original. */
void js_cpu_step_restore(struct js_step *s);
void js_cpu_step_release(struct js_step *s);
/* The record's node_model: DMI product name, else driver, CPUs and fmax. */
void js_cpu_step_node_model(struct js_step *s);
/* Job prolog and epilog: restore CPUs whose journal names no live owner;
 * failures are logged as well as successes. */
void js_cpu_recover_node(const struct js_conf *c, uint32_t jobid, const char *when);

#endif
