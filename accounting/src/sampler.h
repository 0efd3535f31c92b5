/* Private to the accounting library (the plugin may include it): the one
 * background sampler thread the meters share (RAPL: meter.c, node:
 * node_meter.c, GPUs: gpu_meter.c), and the one monotonic clock. */
#ifndef JOULESTEP_SAMPLER_H
#define JOULESTEP_SAMPLER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* CLOCK_MONOTONIC in ns: every time the library and the plugin compare. */
uint64_t js_mono_ns(void);

/* tick runs on the thread, without mu held (it takes mu itself to publish
 * what it read), and returns the wait before the next tick in ns (0: the
 * period); NULL: sample(arg) under mu. The thread blocks every signal (it
 * runs inside slurmstepd and joulestep-run, whose signals are the host's)
 * and carries a name (ps -L). */
struct js_sampler {
	pthread_mutex_t mu;  /* the meter's own data, and the fields below  */
	pthread_cond_t cv;   /* CLOCK_MONOTONIC                              */
	pthread_t th;
	bool started, stop, kicked;
	uint64_t period_ns;
	uint64_t (*tick)(void *arg);
	void (*sample)(void *arg);  /* one reading; the caller holds mu        */
	void *arg;
};

/* Set up mu and cv (no thread yet): 0 or -errno. */
int js_sampler_init(struct js_sampler *s, uint64_t period_ns, uint64_t (*tick)(void *),
		    void (*sample)(void *), void *arg);
/* The first reading (sample, when set), then the thread when asked for. */
int js_sampler_go(struct js_sampler *s, bool thread, const char *name);
/* A reading now (sample under mu), then len bytes of src copied to dst
 * under the same lock: a meter's snapshot. */
void js_sampler_read(struct js_sampler *s, void *dst, const void *src, size_t len);
/* Start the thread (name: at most 15 characters). 0 or -errno. */
int js_sampler_start(struct js_sampler *s, const char *name);
/* Wake the thread for a tick now; the caller holds mu. */
void js_sampler_kick(struct js_sampler *s);
/* Stop and join the thread (when started), then free mu and cv. */
void js_sampler_destroy(struct js_sampler *s);

#endif
