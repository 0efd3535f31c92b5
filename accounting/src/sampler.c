/* The background sampler thread of every meter (sampler.h). */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#include "sampler.h"

uint64_t js_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

int js_sampler_init(struct js_sampler *s, uint64_t period_ns, uint64_t (*tick)(void *),
		    void (*sample)(void *), void *arg)
{
	pthread_condattr_t ca;
	int rc;

	s->started = s->stop = s->kicked = false;
	s->period_ns = period_ns;
	s->tick = tick;
	s->sample = sample;
	s->arg = arg;
	if ((rc = pthread_mutex_init(&s->mu, NULL)))
		return -rc;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	rc = pthread_cond_init(&s->cv, &ca);
	pthread_condattr_destroy(&ca);
	if (rc) {
		pthread_mutex_destroy(&s->mu);
		return -rc;
	}
	return 0;
}

static void *loop(void *arg)
{
	struct js_sampler *s = arg;
	uint64_t wait_ns = s->period_ns;

	pthread_mutex_lock(&s->mu);
	while (!s->stop) {
		uint64_t due = js_mono_ns() + wait_ns;
		struct timespec ts = {.tv_sec = (time_t)(due / 1000000000ULL),
				      .tv_nsec = (long)(due % 1000000000ULL)};

		while (!s->stop && !s->kicked && pthread_cond_timedwait(&s->cv, &s->mu, &ts) != ETIMEDOUT)
			;
		if (s->stop)
			break;
		s->kicked = false;
		if (!s->tick) {
			s->sample(s->arg);
			continue;
		}
		pthread_mutex_unlock(&s->mu);
		wait_ns = s->tick(s->arg);
		if (!wait_ns)
			wait_ns = s->period_ns;
		pthread_mutex_lock(&s->mu);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

int js_sampler_start(struct js_sampler *s, const char *name)
{
	sigset_t all, old;
	int rc;

	/* The thread inherits this mask: it never takes a signal meant for
	 * the host process (slurmstepd, joulestep-run's SIGCHLD). */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&s->th, NULL, loop, s);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc)
		return -rc;
	pthread_setname_np(s->th, name);
	s->started = true;
	return 0;
}

int js_sampler_go(struct js_sampler *s, bool thread, const char *name)
{
	if (s->sample) {
		pthread_mutex_lock(&s->mu);
		s->sample(s->arg);
		pthread_mutex_unlock(&s->mu);
	}
	return thread ? js_sampler_start(s, name) : 0;
}

void js_sampler_read(struct js_sampler *s, void *dst, const void *src, size_t len)
{
	pthread_mutex_lock(&s->mu);
	if (s->sample)
		s->sample(s->arg);
	memcpy(dst, src, len);
	pthread_mutex_unlock(&s->mu);
}

void js_sampler_kick(struct js_sampler *s)
{
	s->kicked = true;
	pthread_cond_signal(&s->cv);
}

void js_sampler_destroy(struct js_sampler *s)
{
	if (s->started) {
		pthread_mutex_lock(&s->mu);
		s->stop = true;
		pthread_cond_signal(&s->cv);
		pthread_mutex_unlock(&s->mu);
		pthread_join(s->th, NULL);
		s->started = false;
	}
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->mu);
}
