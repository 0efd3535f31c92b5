/* joulestep SPANK plugin: the step's RAPL and node meters and its
 * shared-node inputs (js_meter_step.c). */
#ifndef JS_METER_STEP_H
#define JS_METER_STEP_H

#include <stdbool.h>
#include <stdint.h>

struct js_step;

/* Open the RAPL backend and take the first reading (s0), the meter sampled
 * by the step thread (main thread, before the tasks). */
void js_meter_step_open(struct js_step *s);
/* No step thread: restart the meter with a sampling thread of its own and
 * take s0 again. */
void js_meter_step_own_thread(struct js_step *s);
/* node_energy=: the node's own meter beside RAPL; none found is no error
 * (the record says why). */
void js_meter_step_node_open(struct js_step *s);
/* The shared-node inputs at step start: topology, the step's packages,
 * their busy time, slurmstepd's children's CPU time. */
void js_meter_step_share_start(struct js_step *s);
/* The phase logic's snap and now_ns (step thread; ctx is the step): after
 * the step's final reading, that reading and its time. */
void js_meter_step_snap(void *ctx, uint64_t *cpu, uint64_t *dram, bool *unc);
uint64_t js_meter_step_now(void *ctx);
/* The final readings (node, RAPL, shares) at step end; s->ended once the
 * RAPL one is taken. */
void js_meter_step_end(struct js_step *s);
void js_meter_step_close(struct js_step *s);

#endif
