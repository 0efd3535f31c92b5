/* joulestep SPANK plugin: +uncore-io (js_uncore_step.c; docs/design.md,
 * "Uncore clocks in I/O phases"). */
#ifndef JS_UNCORE_STEP_H
#define JS_UNCORE_STEP_H

#include <stdbool.h>
#include <stdint.h>

#include "js_parse.h"

struct js_step;

/* Journal and open the uncore domains of the packages the step owns whole
 * (s->pkgs_owned; main thread, step start). */
void js_uncore_step_setup(struct js_step *s);
/* The phase logic's set_uncore (step thread: pwrite on those descriptors
 * only); ctx is the step. */
int js_uncore_step_set(void *ctx, bool low, uint32_t *khz);
/* Step end: write back, release the journal. */
void js_uncore_step_restore(struct js_step *s);
/* Job prolog/epilog: restore domains whose journal entry names a dead
 * owner; failures are logged as well as successes. */
void js_uncore_recover_node(const struct js_conf *c, uint32_t jobid, const char *when);

#endif
