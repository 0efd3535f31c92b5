/* GPU meter: the shared sampler thread (sampler.c) reads every GPU and folds
 * each reading into the counter rule (gpu_acc.c); sampling also keeps the
 * power integral fresh, which is the energy of a GPU that has no counter.
 *
 * A boundary never waits for a GPU (docs/design.md, "GPU energy at a phase
 * boundary"). js_gpu_meter_request notes the time and returns at once; the
 * sampler then reads every GPU every JS_GPU_FAST_NS until each GPU's
 * counter has moved twice after that time, and resolves the value there
 * per GPU: each update is placed midway between the two readings around
 * it, the two updates give the counter's own rate, and the value at the
 * boundary is the first update's less that rate times the time from the
 * boundary to it. (The counter's own rate, not the power reading: NVML's
 * power is an average over about a second on recent GPUs, and AMD SMI gives
 * none here.) Each GPU is resolved from its own readings, so GPUs whose
 * counters update out of step do not disturb each other. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "joulestep/gpu.h"
#include "sampler.h"

/* Reading interval while a boundary waits to be resolved. */
#define JS_GPU_FAST_NS (500ULL * 1000)
/* A reading this close after the boundary holds (nearly) the value there:
 * a lower bound that holds when the power changed right after it. */
#define JS_GPU_NEAR_NS (1ULL * 1000 * 1000)
/* The rate is taken between updates at least this far apart. */
#define JS_GPU_RATE_SPAN_NS (30ULL * 1000 * 1000)
/* A GPU whose counter has not moved twice by then is resolved from the
 * readings it has (one update: interpolated; none: the value as read). */
#define JS_GPU_RESOLVE_MAX_NS (450ULL * 1000 * 1000)
/* Reported energies start here, so that a boundary before the first reading
 * (the step's start) can be placed below it: 2^40 uJ is ~1.1 MJ, far more
 * than a GPU draws between a boundary and the next counter updates. */
#define JS_GPU_ORIGIN_UJ (1ULL << 40)
/* Recent readings kept per GPU: a boundary a moment in the past (a marker's
 * own t=) finds the reading before it. */
#define JS_GPU_HIST 64

struct req {
	uint64_t ticket, at_ns, asked_ns;
	bool done, collected;
	bool gdone[JS_MAX_GPUS], has_lo[JS_MAX_GPUS];
	uint8_t nk[JS_MAX_GPUS];            /* an update seen after at_ns (0, 1) */
	uint64_t lo_uj[JS_MAX_GPUS];        /* the value read last before at_ns  */
	uint64_t lo_t[JS_MAX_GPUS], lo_integ[JS_MAX_GPUS];
	uint64_t m1[JS_MAX_GPUS], v1[JS_MAX_GPUS]; /* first update after at_ns */
	struct js_gpu_snapshot out;
};

struct js_gpu_meter {
	struct js_gpus *g;
	struct js_sampler smp;              /* smp.mu guards all that follows    */
	pthread_cond_t done_cv;             /* a request resolved                */
	size_t n;
	struct js_gpu_acc acc[JS_MAX_GPUS];
	int err[JS_MAX_GPUS];
	bool have_raw[JS_MAX_GPUS];
	uint64_t raw_uj[JS_MAX_GPUS], read_t[JS_MAX_GPUS];
	uint64_t hist_t[JS_MAX_GPUS][JS_GPU_HIST], hist_uj[JS_MAX_GPUS][JS_GPU_HIST];
	unsigned hist_n[JS_MAX_GPUS];       /* readings kept so far (ring)      */
	uint64_t last_boundary_uj[JS_MAX_GPUS];
	struct req *rq;                     /* ring of cap: nrq from rq[head]    */
	size_t cap, head, nrq;
	uint64_t first_ticket, next_ticket;
};

static struct req *req_of(struct js_gpu_meter *m, uint64_t ticket)
{
	if (ticket < m->first_ticket || ticket >= m->first_ticket + m->nrq)
		return NULL;
	return &m->rq[(m->head + (size_t)(ticket - m->first_ticket)) % m->cap];
}

static uint64_t cum_uj(const struct js_gpu_meter *m, size_t i)
{
	const struct js_gpu_acc *a = &m->acc[i];

	return JS_GPU_ORIGIN_UJ + (js_gpu_info(m->g, i)->energy_counter ? a->counter_uj
									 : a->integrated_uj);
}

/* GPU i of r is resolved at e (never below an earlier boundary). */
static void gpu_done(struct js_gpu_meter *m, struct req *r, size_t i, uint64_t e)
{
	const struct js_gpu_acc *a = &m->acc[i];

	if (e < m->last_boundary_uj[i])
		e = m->last_boundary_uj[i];
	m->last_boundary_uj[i] = e;
	r->out.energy_uj[i] = e;
	r->out.integrated_uj[i] = a->integrated_uj;
	r->out.uncertain[i] = a->uncertain;
	r->out.resets[i] = a->resets;
	r->out.err[i] = m->err[i];
	r->gdone[i] = true;
}

/* v at time t0, v1 at t1 > t0: the value at at (t0 <= at <= t1). */
static uint64_t lerp(uint64_t t0, uint64_t v0, uint64_t t1, uint64_t v1, uint64_t at)
{
	if (t1 <= t0 || v1 <= v0 || at <= t0)
		return v0;
	if (at >= t1)
		return v1;
	return v0 + (uint64_t)((unsigned __int128)(v1 - v0) * (at - t0) / (t1 - t0));
}

/* The value at at from two updates after it (m1, v1), (m2, v2): the first
 * less the counter's own rate times the time from at to it; never below
 * what was read before at. */
static uint64_t back_date(const struct req *r, size_t i, uint64_t m1, uint64_t v1, uint64_t m2,
			  uint64_t v2)
{
	uint64_t back = m2 > m1 && m1 > r->at_ns
				? (uint64_t)((unsigned __int128)(v2 - v1) * (m1 - r->at_ns) / (m2 - m1))
				: 0;
	uint64_t e = v1 > back ? v1 - back : 0;

	return r->has_lo[i] && e < r->lo_uj[i] ? r->lo_uj[i] : e;
}

/* A new reading of GPU i at t (prev_t: the one before; moved: its counter
 * changed between them) for request r. */
static void advance(struct js_gpu_meter *m, struct req *r, size_t i, uint64_t prev_t, uint64_t t,
		    bool moved)
{
	uint64_t mid = prev_t + (t - prev_t) / 2, v = cum_uj(m, i);

	if (r->gdone[i] || t < r->at_ns)
		return;
	if (!js_gpu_info(m->g, i)->energy_counter) { /* the power integral around at */
		gpu_done(m, r, i, r->has_lo[i] ? lerp(r->lo_t[i], r->lo_uj[i], t, v, r->at_ns) : v);
		return;
	}
	if (t - r->at_ns <= JS_GPU_NEAR_NS && (!r->has_lo[i] || v > r->lo_uj[i])) {
		/* the counter as it stood at the boundary: the rate after it
		 * (a GPU idle, then busy) cannot take the value below this */
		r->has_lo[i] = true;
		r->lo_t[i] = r->at_ns;
		r->lo_uj[i] = v;
	}
	/* readings are JS_GPU_FAST_NS apart, more on a busy machine: the
	 * first update after at is the anchor however far apart they are */
	if (!moved || prev_t < r->at_ns)
		return;
	if (r->nk[i] == 0) { /* the first update after at: the anchor */
		r->nk[i] = 1;
		r->m1[i] = mid;
		r->v1[i] = v;
		return;
	}
	if (mid - r->m1[i] < JS_GPU_RATE_SPAN_NS)
		return; /* the rate over a longer span: the placements' error shrinks */
	gpu_done(m, r, i, back_date(r, i, r->m1[i], r->v1[i], mid, v));
}

/* Past JS_GPU_RESOLVE_MAX_NS: GPU i from the readings it has. A counter
 * that has not moved since the boundary drew nothing since: its value as
 * read now is the value there. */
static void give_up(struct js_gpu_meter *m, struct req *r, size_t i)
{
	uint64_t v = cum_uj(m, i);

	if (r->nk[i] && r->has_lo[i])
		v = lerp(r->lo_t[i], r->lo_uj[i], r->m1[i], r->v1[i], r->at_ns);
	else if (r->nk[i])
		v = r->v1[i];
	gpu_done(m, r, i, v);
}

/* Fold GPU i's reading (taken at t) and move every open request on. */
static void fold(struct js_gpu_meter *m, size_t i, int rc, const struct js_gpu_raw *r, uint64_t t)
{
	uint64_t prev_t = m->read_t[i];
	bool moved = m->have_raw[i] && r->have_energy && r->energy_uj != m->raw_uj[i];

	m->err[i] = rc;
	js_gpu_acc_add(&m->acc[i], r, t, js_gpu_info(m->g, i)->max_power_mw);
	if (r->have_energy) {
		m->have_raw[i] = true;
		m->raw_uj[i] = r->energy_uj;
	}
	m->read_t[i] = t;
	if (!rc) {
		m->hist_t[i][m->hist_n[i] % JS_GPU_HIST] = t;
		m->hist_uj[i][m->hist_n[i]++ % JS_GPU_HIST] = cum_uj(m, i);
	}
	if (!prev_t || rc)
		return;
	for (size_t k = 0; k < m->nrq; k++) {
		struct req *q = &m->rq[(m->head + k) % m->cap];

		if (!q->done)
			advance(m, q, i, prev_t, t, moved);
	}
}

/* Close what is resolved (or due), in ticket order; true while any is open. */
static bool settle(struct js_gpu_meter *m, uint64_t now)
{
	bool open = false, woke = false;

	for (size_t k = 0; k < m->nrq; k++) {
		struct req *q = &m->rq[(m->head + k) % m->cap];
		bool all = true;
		uint64_t from = q->asked_ns > q->at_ns ? q->asked_ns : q->at_ns;

		if (q->done)
			continue;
		for (size_t i = 0; i < m->n; i++) {
			if (!q->gdone[i] && now - from > JS_GPU_RESOLVE_MAX_NS)
				give_up(m, q, i);
			all = all && q->gdone[i];
		}
		q->done = all;
		woke = woke || all;
		open = open || !all;
	}
	if (woke)
		pthread_cond_broadcast(&m->done_cv);
	return open;
}

/* One reading of every GPU: the reads without the lock (a boundary never
 * waits for them), the folding under it. */
static uint64_t tick(void *arg)
{
	struct js_gpu_meter *m = arg;
	struct js_gpu_raw r[JS_MAX_GPUS];
	uint64_t t[JS_MAX_GPUS];
	int rc[JS_MAX_GPUS];
	bool open;

	for (size_t i = 0; i < m->n; i++) {
		rc[i] = js_gpu_read(m->g, i, &r[i]);
		t[i] = js_mono_ns();
	}
	pthread_mutex_lock(&m->smp.mu);
	for (size_t i = 0; i < m->n; i++)
		fold(m, i, rc[i], &r[i], t[i]);
	open = settle(m, js_mono_ns());
	pthread_mutex_unlock(&m->smp.mu);
	return open ? JS_GPU_FAST_NS : 0;
}

int js_gpu_meter_start(struct js_gpus *g, uint64_t period_ns, bool start_thread,
		       struct js_gpu_meter **out)
{
	struct js_gpu_meter *m = calloc(1, sizeof(*m));
	int rc;

	*out = NULL;
	if (!m)
		return -ENOMEM;
	m->g = g;
	m->n = js_gpu_count(g);
	m->cap = 64;
	m->rq = calloc(m->cap, sizeof(*m->rq));
	m->first_ticket = m->next_ticket = 1;
	rc = m->rq ? js_sampler_init(&m->smp, period_ns ? period_ns : 50ULL * 1000 * 1000, tick, NULL, m)
		   : -ENOMEM;
	if (rc < 0) {
		free(m->rq);
		free(m);
		return rc;
	}
	pthread_cond_init(&m->done_cv, NULL);
	if (!start_thread) {
		tick(m); /* the first reading, here */
	} else if ((rc = js_sampler_start(&m->smp, "js-gpu-meter")) < 0) {
		js_gpu_meter_stop(m);
		return rc;
	} else {
		pthread_mutex_lock(&m->smp.mu);
		js_sampler_kick(&m->smp); /* the first reading, on the thread */
		pthread_mutex_unlock(&m->smp.mu);
	}
	*out = m;
	return 0;
}

static int grow(struct js_gpu_meter *m)
{
	struct req *n = calloc(m->cap * 2, sizeof(*n));

	if (!n)
		return -ENOMEM;
	for (size_t k = 0; k < m->nrq; k++)
		n[k] = m->rq[(m->head + k) % m->cap];
	free(m->rq);
	m->rq = n;
	m->head = 0;
	m->cap *= 2;
	return 0;
}

/* The last reading of GPU i at or before at, into r's lower bound. */
static void last_before(struct js_gpu_meter *m, size_t i, uint64_t at, struct req *r)
{
	unsigned n = m->hist_n[i] < JS_GPU_HIST ? m->hist_n[i] : JS_GPU_HIST;

	for (unsigned k = 1; k <= n; k++) {
		unsigned j = (m->hist_n[i] - k) % JS_GPU_HIST;

		if (m->hist_t[i][j] <= at) {
			r->has_lo[i] = true;
			r->lo_t[i] = m->hist_t[i][j];
			r->lo_uj[i] = m->hist_uj[i][j];
			return;
		}
	}
}

int js_gpu_meter_request(struct js_gpu_meter *m, uint64_t at_mono_ns, uint64_t *ticket)
{
	struct req *r;

	pthread_mutex_lock(&m->smp.mu);
	if (m->nrq == m->cap && grow(m) < 0) {
		pthread_mutex_unlock(&m->smp.mu);
		return -ENOMEM;
	}
	r = &m->rq[(m->head + m->nrq++) % m->cap];
	memset(r, 0, sizeof(*r));
	r->ticket = *ticket = m->next_ticket++;
	r->at_ns = at_mono_ns;
	r->asked_ns = js_mono_ns();
	r->out.mono_ns = at_mono_ns;
	r->out.n = m->n;
	for (size_t i = 0; i < m->n; i++) {
		r->out.integrated[i] = !js_gpu_info(m->g, i)->energy_counter;
		last_before(m, i, at_mono_ns, r);
	}
	if (m->smp.started)
		js_sampler_kick(&m->smp);
	pthread_mutex_unlock(&m->smp.mu);
	return 0;
}

/* Caller holds mu: drop collected requests from the ring's head. */
static void pop_collected(struct js_gpu_meter *m)
{
	while (m->nrq && m->rq[m->head].collected) {
		m->head = (m->head + 1) % m->cap;
		m->nrq--;
		m->first_ticket++;
	}
}

int js_gpu_meter_result(struct js_gpu_meter *m, uint64_t ticket, bool wait,
			struct js_gpu_snapshot *out)
{
	struct req *r;
	int rc = 0;

	pthread_mutex_lock(&m->smp.mu);
	while ((r = req_of(m, ticket)) && !r->collected && !r->done && wait) {
		if (m->smp.started) {
			pthread_cond_wait(&m->done_cv, &m->smp.mu);
			continue;
		}
		pthread_mutex_unlock(&m->smp.mu); /* no thread: read here */
		nanosleep(&(struct timespec){0, (long)JS_GPU_FAST_NS}, NULL);
		tick(m);
		pthread_mutex_lock(&m->smp.mu);
	}
	if (!r || r->collected)
		rc = -ENOENT;
	else if (!r->done)
		rc = -EAGAIN;
	else {
		*out = r->out;
		r->collected = true;
		pop_collected(m);
	}
	pthread_mutex_unlock(&m->smp.mu);
	return rc;
}

int js_gpu_meter_snapshot_at(struct js_gpu_meter *m, uint64_t at_mono_ns, struct js_gpu_snapshot *out)
{
	uint64_t t;
	int rc = js_gpu_meter_request(m, at_mono_ns, &t);

	memset(out, 0, sizeof(*out));
	return rc < 0 ? rc : js_gpu_meter_result(m, t, true, out);
}

int js_gpu_meter_snapshot(struct js_gpu_meter *m, struct js_gpu_snapshot *out)
{
	return js_gpu_meter_snapshot_at(m, js_mono_ns(), out);
}

void js_gpu_meter_stop(struct js_gpu_meter *m)
{
	if (!m)
		return;
	js_sampler_destroy(&m->smp);
	pthread_cond_destroy(&m->done_cv);
	free(m->rq);
	free(m);
}
