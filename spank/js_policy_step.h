/* joulestep SPANK plugin: the step's frequency policy and tags
 * (js_policy_step.c). */
#ifndef JS_POLICY_STEP_H
#define JS_POLICY_STEP_H

struct js_step;

/* s->policy from the option pol (NULL or "": the plugstack's default; a
 * refused one: the default, error recorded), tuned's map from the admin's
 * file (unusable: monitor), within the admin's bounds; s->tags from tags. */
void js_policy_step_resolve(struct js_step *s, const char *pol, const char *tags);

#endif
