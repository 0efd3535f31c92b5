/* GPU meter: a background sampler over js_gpus, folding each reading into
 * the counter rule (gpu_acc.c). Sampling also keeps the power integral
 * fresh, which is the energy of a GPU that has no counter. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "joulestep/gpu.h"

struct js_gpu_meter {
	struct js_gpus *g;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t th;
	bool thread_started, stop;
	uint64_t period_ns;
	size_t n;
	struct js_gpu_acc acc[JS_MAX_GPUS];
	int err[JS_MAX_GPUS];
	uint64_t last_boundary_uj[JS_MAX_GPUS];
	uint64_t mono_ns;
};

static uint64_t mono_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* Caller holds m->mu. */
static void sample_locked(struct js_gpu_meter *m)
{
	for (size_t i = 0; i < m->n; i++) {
		struct js_gpu_raw r;
		int rc = js_gpu_read(m->g, i, &r);
		uint64_t t = mono_now();

		m->err[i] = rc;
		js_gpu_acc_add(&m->acc[i], &r, t, js_gpu_info(m->g, i)->max_power_mw);
		m->mono_ns = t;
	}
}

static void *sampler(void *arg)
{
	struct js_gpu_meter *m = arg;
	struct timespec dl;

	pthread_mutex_lock(&m->mu);
	while (!m->stop) {
		clock_gettime(CLOCK_MONOTONIC, &dl);
		dl.tv_sec += (time_t)(m->period_ns / 1000000000ULL);
		dl.tv_nsec += (long)(m->period_ns % 1000000000ULL);
		if (dl.tv_nsec >= 1000000000L) {
			dl.tv_sec++;
			dl.tv_nsec -= 1000000000L;
		}
		while (!m->stop && pthread_cond_timedwait(&m->cv, &m->mu, &dl) != ETIMEDOUT)
			;
		if (!m->stop)
			sample_locked(m);
	}
	pthread_mutex_unlock(&m->mu);
	return NULL;
}

int js_gpu_meter_start(struct js_gpus *g, uint64_t period_ns, bool start_thread,
		       struct js_gpu_meter **out)
{
	struct js_gpu_meter *m = calloc(1, sizeof(*m));
	pthread_condattr_t ca;

	*out = NULL;
	if (!m)
		return -ENOMEM;
	m->g = g;
	m->n = js_gpu_count(g);
	m->period_ns = period_ns ? period_ns : 50ULL * 1000 * 1000;
	pthread_mutex_init(&m->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&m->cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_lock(&m->mu);
	sample_locked(m);
	pthread_mutex_unlock(&m->mu);
	if (start_thread) {
		int rc = pthread_create(&m->th, NULL, sampler, m);

		if (rc) {
			js_gpu_meter_stop(m);
			return -rc;
		}
		m->thread_started = true;
	}
	*out = m;
	return 0;
}

/* A counter that is updated every few ms (NVML: ~10 ms) is stale by up to
 * one update at any instant, which moves up to P x 10 ms of energy across a
 * phase boundary. So at a snapshot the counter is polled until it has moved
 * twice: each update is placed midway between the two polls around it, the
 * two give the rate of the counter itself, and the energy at the boundary is
 * the value at the first update less that rate times the time from the
 * boundary to it. (The counter's own rate, not the power reading: NVML's
 * power is an average over about a second on recent GPUs, and AMD SMI gives
 * none here.) A counter that does not move within JS_GPU_POLL_MAX_NS is
 * taken as read. */
#define JS_GPU_POLL_NS (200ULL * 1000)
#define JS_GPU_POLL_MAX_NS (30ULL * 1000 * 1000)

/* Poll GPU i until its counter differs from *val; *t_mid: when it changed. */
static bool next_update(struct js_gpu_meter *m, size_t i, uint64_t *val, uint64_t *t_mid)
{
	uint64_t t0 = mono_now(), t = t0, prev;
	struct js_gpu_raw r;

	for (;;) {
		struct timespec ts = {0, (long)JS_GPU_POLL_NS};

		if (t - t0 > JS_GPU_POLL_MAX_NS)
			return false;
		nanosleep(&ts, NULL);
		prev = t;
		m->err[i] = js_gpu_read(m->g, i, &r);
		t = mono_now();
		js_gpu_acc_add(&m->acc[i], &r, t, js_gpu_info(m->g, i)->max_power_mw);
		if (m->err[i] || !r.have_energy || r.energy_uj < *val)
			return false; /* a reset or an error: no boundary estimate */
		if (r.energy_uj != *val) {
			*val = r.energy_uj;
			*t_mid = prev + (t - prev) / 2;
			return true;
		}
	}
}

static uint64_t at_boundary_uj(struct js_gpu_meter *m, size_t i, uint64_t at_ns)
{
	struct js_gpu_acc *a = &m->acc[i];
	uint64_t v = a->last_uj, v1, t1, t2, at_first, back;

	if (!js_gpu_info(m->g, i)->energy_counter || !a->have_last)
		return a->counter_uj;
	if (!next_update(m, i, &v, &t1))
		return a->counter_uj;
	v1 = v;
	at_first = a->counter_uj;
	if (!next_update(m, i, &v, &t2) || t2 <= t1 || t1 <= at_ns)
		return at_first;
	back = (uint64_t)((unsigned __int128)(v - v1) * (t1 - at_ns) / (t2 - t1));
	return at_first > back ? at_first - back : 0;
}

int js_gpu_meter_snapshot_at(struct js_gpu_meter *m, uint64_t at_mono_ns, struct js_gpu_snapshot *out)
{
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&m->mu);
	sample_locked(m);
	out->mono_ns = at_mono_ns;
	out->n = m->n;
	for (size_t i = 0; i < m->n; i++) {
		bool integ = !js_gpu_info(m->g, i)->energy_counter;
		uint64_t e = integ ? 0 : at_boundary_uj(m, i, at_mono_ns);
		const struct js_gpu_acc *a = &m->acc[i];

		/* never below what an earlier snapshot reported */
		if (!integ && e < m->last_boundary_uj[i])
			e = m->last_boundary_uj[i];
		if (!integ)
			m->last_boundary_uj[i] = e;
		out->integrated[i] = integ;
		out->energy_uj[i] = integ ? a->integrated_uj : e;
		out->integrated_uj[i] = a->integrated_uj;
		out->uncertain[i] = integ ? 0 : a->uncertain;
		out->resets[i] = a->resets;
		out->err[i] = m->err[i];
	}
	pthread_mutex_unlock(&m->mu);
	return 0;
}

int js_gpu_meter_snapshot(struct js_gpu_meter *m, struct js_gpu_snapshot *out)
{
	return js_gpu_meter_snapshot_at(m, mono_now(), out);
}

void js_gpu_meter_stop(struct js_gpu_meter *m)
{
	if (!m)
		return;
	if (m->thread_started) {
		pthread_mutex_lock(&m->mu);
		m->stop = true;
		pthread_cond_signal(&m->cv);
		pthread_mutex_unlock(&m->mu);
		pthread_join(m->th, NULL);
	}
	pthread_cond_destroy(&m->cv);
	pthread_mutex_destroy(&m->mu);
	free(m);
}
