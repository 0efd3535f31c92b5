/* js_auto_step.c: the auto policy on the step's side (docs/admin-guide.md,
 * "The auto policy"). */
#ifndef JS_AUTO_STEP_H
#define JS_AUTO_STEP_H

#include "js_step.h"

typedef struct json_t json_t;

/* The map of the step's app from the auto= file, or io-dvfs without an app
 * tag, monitor with a bad file (policy resolution, before the admin's
 * clamp). */
void js_auto_resolve(struct js_step *s);
/* The record's fields of the auto policy (step and provenance). */
void js_auto_record(const struct js_step *s, json_t *step, json_t *prov);

#endif
