/* The record module's JSON (spank/js_record.c) from a step's state built
 * here, as slurmstepd leaves it at step end, without Slurm: the fields
 * whose truth the test knows. The slurm_* log functions are slurmstepd's
 * (weak references in the plugin); here they print. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <jansson.h>

#include "js_record.h"
#include "js_step.h"

void slurm_error(const char *fmt, ...);
void slurm_info(const char *fmt, ...);
void slurm_verbose(const char *fmt, ...);

static void vlog(const char *fmt, va_list ap)
{
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

void slurm_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(fmt, ap);
	va_end(ap);
}

void slurm_info(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(fmt, ap);
	va_end(ap);
}

void slurm_verbose(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(fmt, ap);
	va_end(ap);
}

/* A step with no meter, no GPUs and no phases: what is left is the
 * bookkeeping the record reports. */
static struct js_step *new_step(void)
{
	struct js_step *s = calloc(1, sizeof(*s));
	assert_non_null(s);
	pthread_mutex_init(&s->err_mu, NULL);
	js_conf_defaults(&s->conf);
	s->job_id = 42;
	snprintf(s->step_id, sizeof(s->step_id), "0");
	snprintf(s->cluster, sizeof(s->cluster), "c1");
	snprintf(s->node, sizeof(s->node), "n1");
	s->job_source = "step";
	s->start_ns = 1000000000ULL;
	s->end_ns = 3000000000ULL;
	s->exit_code = 0;
	return s;
}

static void free_step(struct js_step *s)
{
	pthread_mutex_destroy(&s->err_mu);
	free(s);
}

/* "a,b,c" of every odd CPU below n: no two adjacent, so no range */
static char *odd_list(struct js_cpuset *set, int n)
{
	char *buf = calloc(1, (size_t)n * 6), *p = buf;
	js_cpuset_zero(set);
	for (int c = 1; c < n; c += 2) {
		js_cpuset_set(set, c);
		p += sprintf(p, "%s%d", p == buf ? "" : ",", c);
	}
	return buf;
}

/* Every odd CPU of a 1,024-CPU node: lists of 2,000 characters, stored
 * whole (a fixed 1,024-byte buffer turned them into ""). */
static void long_cpu_lists_are_stored(void **state)
{
	(void)state;
	struct js_step *s = new_step();
	char *want = odd_list(&s->smt_aside, JS_MAX_CPUS);
	odd_list(&s->cpus, JS_MAX_CPUS);
	assert_true(strlen(want) > 1024);
	json_t *r = js_record_json(s);
	json_t *step = json_object_get(r, "step");
	assert_string_equal(json_string_value(json_object_get(step, "smt_aside_cpus")), want);
	assert_string_equal(json_string_value(json_object_get(step, "cpus")), want);
	json_decref(r);
	free(want);
	free_step(s);
}

/* A short list: a range, as before. */
static void short_cpu_lists(void **state)
{
	(void)state;
	struct js_step *s = new_step();
	js_cpuset_zero(&s->cpus);
	for (int c = 0; c < 4; c++)
		js_cpuset_set(&s->cpus, c);
	js_cpuset_set(&s->smt_aside, 3);
	json_t *r = js_record_json(s);
	json_t *step = json_object_get(r, "step");
	assert_string_equal(json_string_value(json_object_get(step, "cpus")), "0-3");
	assert_string_equal(json_string_value(json_object_get(step, "smt_aside_cpus")), "3");
	json_decref(r);
	free_step(s);
}

/* Version 4: step.exclusive is gone (the store decides sharing from the
 * time overlap of the jobs' steps). */
static void version_4_without_exclusive(void **state)
{
	(void)state;
	struct js_step *s = new_step();
	json_t *r = js_record_json(s);
	assert_int_equal(json_integer_value(json_object_get(r, "version")), 4);
	assert_string_equal(json_string_value(json_object_get(r, "format")), "joulestep-record");
	assert_null(json_object_get(json_object_get(r, "step"), "exclusive"));
	assert_non_null(json_object_get(json_object_get(r, "step"), "ncpus"));
	json_decref(r);
	free_step(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(long_cpu_lists_are_stored),
		cmocka_unit_test(short_cpu_lists),
		cmocka_unit_test(version_4_without_exclusive),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
