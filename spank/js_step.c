/* joulestep SPANK plugin: the step's error list and clock (js_step.h). */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <slurm/spank.h>

#include "js_step.h"

uint64_t js_now_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void js_step_error(struct js_step *s, const char *fmt, ...)
{
	char buf[JS_ERR_LEN];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	/* Bounded per step, like refused connections: a failure repeated per
	 * CPU per clock change must not flood slurmd.log. Every error is
	 * counted (provenance.errors_total), the first JS_MAX_ERRORS kept. */
	pthread_mutex_lock(&s->err_mu);
	uint64_t n = ++s->errors_total;
	if (s->nerrors < JS_MAX_ERRORS)
		memcpy(s->errors[s->nerrors++], buf, sizeof(buf));
	pthread_mutex_unlock(&s->err_mu);
	if (n <= JS_ERRORS_LOGGED)
		slurm_error("joulestep: job %u step %s: %s%s", s->job_id, s->step_id, buf,
			    n == JS_ERRORS_LOGGED ? "; further errors of this step are not logged (counted in the record)" : "");
}
