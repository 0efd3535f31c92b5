/* Meter: wrap-safe cumulative energy with an optional background sampler.
 *
 * Every zone keeps its last good raw value and when it was read. A new good
 * reading adds the wrap-safe delta; if more time passed since the last good
 * reading than the zone's wrap time, the counter may have wrapped more than
 * once, so the zone's `uncertain` count is raised (the delta is then a lower
 * bound). A failed or garbled reading changes nothing but err[]. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "js_internal.h"
#include "sampler.h"

struct js_meter {
	struct js_energy *e;
	struct js_sampler smp; /* smp.mu guards what follows */
	uint64_t nsamples; /* readings taken (thread, snapshots) */
	size_t n;
	uint64_t wrap_ns[JS_MAX_ZONES];
	bool have_last[JS_MAX_ZONES];
	uint64_t last_raw[JS_MAX_ZONES];
	uint64_t last_mono[JS_MAX_ZONES];
	uint32_t back[JS_MAX_ZONES]; /* consecutive readings below the last good one */
	struct js_snapshot cur; /* cumulative state, guarded by mu */
};

/* A counter that went down is taken as one wrap when the delta is at most
 * half the range (what sampling at half the wrap time produces; also true of
 * simulated time, where seconds pass in microseconds) or when it fits in the
 * elapsed time at JS_WRAP_POWER_FACTOR x the zone's max power. Otherwise it is
 * a garbled reading (e.g. a torn read of a file being rewritten: "2" of
 * "2500" after "500") and is dropped: the next good reading resumes from the
 * last good value, so no energy is invented. */
#define JS_WRAP_POWER_FACTOR 4
/* Consecutive implausible backward readings taken as a counter reset. */
#define JS_RESET_READINGS 2

static bool wrap_plausible(const struct js_zone_info *z, uint64_t delta_uj, uint64_t elapsed_ns)
{
	unsigned __int128 max_uj = (unsigned __int128)z->max_power_uw * JS_WRAP_POWER_FACTOR *
				   elapsed_ns / 1000000000u;

	return delta_uj <= z->max_energy_range_uj / 2 || delta_uj <= max_uj;
}

/* Caller holds m->mu. */
static void sample_locked(struct js_meter *m)
{
	const struct js_zone_set *zs = &m->e->zones;
	uint64_t raw[JS_MAX_ZONES];
	int err[JS_MAX_ZONES];
	struct timespec rt;
	uint64_t mono;
	size_t i;

	memset(err, 0, sizeof(err));
	js_energy_read_uj(m->e, raw, err);
	mono = js_mono_ns();
	m->cur.mono_ns = mono;
	clock_gettime(CLOCK_REALTIME, &rt);
	m->cur.t_ns = (uint64_t)rt.tv_sec * 1000000000ULL + (uint64_t)rt.tv_nsec;
	for (i = 0; i < m->n; i++) {
		uint64_t delta;
		bool wrapped;
		int rc;

		if (err[i]) {
			m->cur.err[i] = err[i];
			continue;
		}
		if (!m->have_last[i]) {
			m->have_last[i] = true;
			m->last_raw[i] = raw[i];
			m->last_mono[i] = mono;
			m->cur.err[i] = 0;
			continue;
		}
		rc = js_wrap_delta_uj(m->last_raw[i], raw[i], zs->zones[i].max_energy_range_uj,
				      &delta, &wrapped);
		if (rc == 0 && wrapped && !wrap_plausible(&zs->zones[i], delta, mono - m->last_mono[i])) {
			/* Below the last good value, and no wrap: once is a
			 * garbled reading (dropped); twice in a row, the counter
			 * went back (reset, zone re-registered): the energy
			 * across is unknown. The zone is marked uncertain and
			 * followed from here. */
			if (++m->back[i] >= JS_RESET_READINGS) {
				m->cur.uncertain[i]++;
				m->back[i] = 0;
				m->last_raw[i] = raw[i];
				m->last_mono[i] = mono;
				m->cur.err[i] = 0;
				continue;
			}
			rc = -ERANGE;
		}
		if (rc < 0) {
			m->cur.err[i] = rc;
			continue;
		}
		m->back[i] = 0;
		if (mono - m->last_mono[i] > m->wrap_ns[i])
			m->cur.uncertain[i]++;
		m->cur.energy_uj[i] += delta;
		if (wrapped)
			m->cur.wraps[i]++;
		m->last_raw[i] = raw[i];
		m->last_mono[i] = mono;
		m->cur.err[i] = 0;
	}
	m->cur.energy_cpu_uj = m->cur.energy_dram_uj = 0;
	for (i = 0; i < m->n; i++) {
		if (zs->zones[i].kind == JS_ZONE_PACKAGE)
			m->cur.energy_cpu_uj += m->cur.energy_uj[i];
		else
			m->cur.energy_dram_uj += m->cur.energy_uj[i];
	}
}

static void sample(void *arg)
{
	struct js_meter *m = arg;

	sample_locked(m);
	m->nsamples++;
}

int js_meter_start(struct js_energy *e, uint64_t period_cap_ns, bool start_thread,
		   struct js_meter **out)
{
	struct js_meter *m;
	size_t i;
	int rc;

	if (!e || !out)
		return -EINVAL;
	*out = NULL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->e = e;
	m->n = e->zones.nzones;
	m->cur.nzones = m->n;
	for (i = 0; i < m->n; i++)
		m->wrap_ns[i] = js_wrap_time_ns(e->zones.zones[i].max_energy_range_uj,
						e->zones.zones[i].max_power_uw);
	rc = js_sampler_init(&m->smp, js_sample_period_ns(&e->zones, period_cap_ns), NULL, sample, m);
	if (rc < 0) {
		free(m);
		return rc;
	}
	if ((rc = js_sampler_go(&m->smp, start_thread, "js-meter")) < 0)
		js_meter_stop(m);
	else
		*out = m;
	return rc;
}

int js_meter_snapshot(struct js_meter *m, struct js_snapshot *out)
{
	if (!m || !out)
		return -EINVAL;
	js_sampler_read(&m->smp, out, &m->cur, sizeof(*out));
	return 0;
}

uint64_t js_meter_nsamples(struct js_meter *m)
{
	uint64_t n;

	pthread_mutex_lock(&m->smp.mu);
	n = m->nsamples;
	pthread_mutex_unlock(&m->smp.mu);
	return n;
}

uint64_t js_meter_period_ns(const struct js_meter *m)
{
	return m ? m->smp.period_ns : 0;
}

void js_meter_stop(struct js_meter *m)
{
	if (!m)
		return;
	js_sampler_destroy(&m->smp);
	free(m);
}

void js_interval_of(const struct js_energy *e, const struct js_snapshot *a,
		    const struct js_snapshot *b, struct js_interval *out)
{
	size_t i, n;

	if (!out)
		return;
	memset(out, 0, sizeof(*out));
	if (!e || !a || !b)
		return;
	n = e->zones.nzones;
	if (a->nzones < n)
		n = a->nzones;
	if (b->nzones < n)
		n = b->nzones;
	out->nzones = n;
	out->duration_ns = b->mono_ns > a->mono_ns ? b->mono_ns - a->mono_ns : 0;
	for (i = 0; i < n; i++) {
		uint64_t d = b->energy_uj[i] >= a->energy_uj[i] ? b->energy_uj[i] - a->energy_uj[i] : 0;

		bool unc = b->uncertain[i] != a->uncertain[i] || a->err[i] || b->err[i] ||
			   b->energy_uj[i] < a->energy_uj[i];

		out->energy_uj[i] = d;
		out->wraps[i] = b->wraps[i] - a->wraps[i];
		out->zone_uncertain[i] = unc;
		if (unc)
			out->wrap_uncertain = true;
		if (e->zones.zones[i].kind == JS_ZONE_PACKAGE) {
			out->energy_cpu_uj += d;
			out->cpu_uncertain = out->cpu_uncertain || unc;
		} else {
			out->energy_dram_uj += d;
			out->dram_uncertain = out->dram_uncertain || unc;
		}
	}
	out->energy_total_uj = out->energy_cpu_uj + out->energy_dram_uj;
}
