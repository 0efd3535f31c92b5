/* joulestep SPANK plugin: the step's GPUs (js_gpu_step.c; docs/design.md,
 * "Which GPUs a step owns", "GPU clocks in I/O phases"). Their part of the
 * record is built by js_record.c from the step's readings. */
#ifndef JS_GPU_STEP_H
#define JS_GPU_STEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "js_parse.h"
#include "js_phase.h"

struct js_step;

/* Open the vendor library on the selected GPUs and take the first reading
 * (main thread, step start). */
void js_gpu_step_open(struct js_step *s);
/* The final reading (step end). */
void js_gpu_step_end(struct js_step *s);
/* A phase boundary at at_ns: the meter is asked and the call returns (the
 * step thread; ctx is the step); js_gpu_step_mark_result fills the mark
 * once the meter resolved it (wait: until it has; false: not yet). */
void js_gpu_step_mark(void *ctx, uint64_t at_ns, struct js_gpu_mark *out);
bool js_gpu_step_mark_result(void *ctx, struct js_gpu_mark *m, bool wait);
/* The phase logic's snap_gpu (js_phase.h): ask, poll or wait. */
bool js_gpu_step_snap(void *ctx, uint64_t at_ns, struct js_gpu_mark *m, int op);
void js_gpu_step_close(struct js_step *s);
/* +gpu-io (main thread, after js_gpu_step_open): the GPUs whose clock the
 * step may change (whole GPUs; none when Slurm's --gpu-freq was asked
 * for: slurm_gpu_freq, req what was asked). */
void js_gpu_step_clock_setup(struct js_step *s, bool slurm_gpu_freq, const char *req);
/* The phase logic's set_gpu (step thread). */
int js_gpu_step_set_clock(void *ctx, bool low, uint32_t *mhz);
/* Step end: unlock the journaled GPUs, then release their entries. */
void js_gpu_step_clock_restore(struct js_step *s);
/* Job prolog and epilog: unlock the node's GPUs whose journal entry names a
 * dead owner (a killed slurmstepd); failures are logged as well as
 * successes. */
void js_gpu_recover_node(const struct js_conf *c, uint32_t jobid, const char *when);
/* Why GPU i of the step has no per-job energy ("split by MIG", "shared
 * with another job"), or NULL. */
const char *js_gpu_step_unowned(const struct js_step *s, size_t i);

#endif
