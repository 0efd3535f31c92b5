/* Node meter: cumulative node-level energy of one source (node_sources.c).
 *
 * pm_counters are energy counters: a snapshot reads them (the thread only
 * keeps the generation watched). hwmon sensors report power: every sample
 * adds the trapezoid since the last good one (js_power_integrate_uj), so the
 * figures are `integrated`. A failed read changes nothing but errors[]; a
 * later interval spanning it is uncertain. Totals never add overlapping
 * channels: pm_counters `energy` alone, or the sum of one Grace Module
 * sensor per socket. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "js_internal.h"
#include "node_internal.h"
#include "sampler.h"

#define NODE_DEFAULT_PERIOD_NS 100000000ULL /* 100 ms */
#define NODE_MIN_PERIOD_NS 1000000ULL

struct js_node_meter {
	struct js_node *n;
	struct js_sampler smp; /* smp.mu guards what follows */
	bool have_last[JS_NODE_MAX_CH];
	uint64_t last_uw[JS_NODE_MAX_CH], last_mono[JS_NODE_MAX_CH];
	struct js_node_snapshot cur; /* guarded by mu */
};

static void sample_locked(struct js_node_meter *m)
{
	uint64_t val[JS_NODE_MAX_CH] = {0}, gen = 0;
	int err[JS_NODE_MAX_CH] = {0};
	bool gk = false;
	uint64_t now;

	js_node_read(m->n, val, err, &gen, &gk);
	now = js_mono_ns();
	m->cur.mono_ns = now;
	if (gk) {
		m->cur.generation = gen;
		m->cur.generation_known = true;
	}
	for (size_t i = 0; i < m->n->n; i++) {
		if (err[i]) {
			m->cur.errors[i]++;
			m->have_last[i] = false; /* the gap is not integrated */
			continue;
		}
		if (m->n->src == JS_NODE_PM_COUNTERS) {
			m->cur.energy_uj[i] = val[i];
			continue;
		}
		if (m->have_last[i])
			m->cur.energy_uj[i] += js_power_integrate_uj(m->last_uw[i], val[i],
								     now - m->last_mono[i]);
		m->have_last[i] = true;
		m->last_uw[i] = val[i];
		m->last_mono[i] = now;
	}
}

static void sample(void *arg)
{
	sample_locked(arg);
}

int js_node_meter_start(struct js_node *n, uint64_t period_ns, bool start_thread,
			struct js_node_meter **out)
{
	struct js_node_meter *m;
	uint64_t period = period_ns ? period_ns : NODE_DEFAULT_PERIOD_NS;
	int rc;

	if (!n || !out)
		return -EINVAL;
	*out = NULL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->n = n;
	m->cur.n = n->n;
	rc = js_sampler_init(&m->smp, period < NODE_MIN_PERIOD_NS ? NODE_MIN_PERIOD_NS : period,
			     NULL, sample, m);
	if (rc < 0) {
		free(m);
		return rc;
	}
	/* counters need no thread; power sensors do, to be integrated */
	rc = js_sampler_go(&m->smp, start_thread && n->src == JS_NODE_HWMON_POWER, "js-node-meter");
	if (rc < 0)
		js_node_meter_stop(m);
	else
		*out = m;
	return rc;
}

int js_node_meter_snapshot(struct js_node_meter *m, struct js_node_snapshot *out)
{
	if (!m || !out)
		return -EINVAL;
	js_sampler_read(&m->smp, out, &m->cur, sizeof(*out));
	return 0;
}

void js_node_meter_stop(struct js_node_meter *m)
{
	if (!m)
		return;
	js_sampler_destroy(&m->smp);
	free(m);
}

/* ---- pure: intervals and totals ---------------------------------------------- */

static void add_source(char *buf, size_t len, const char *src, const char *name)
{
	size_t used = strlen(buf);

	if (used + 1 < len)
		js_fmt(buf + used, len - used, "%s%s:%s", used ? "+" : "", src, name);
}

/* Grace: one Module sensor per socket that has any sensor, all certain. */
static void grace_total(const struct js_node *n, struct js_node_interval *iv)
{
	for (size_t i = 0; i < n->n; i++) {
		bool has_module = false;
		size_t k;

		for (k = 0; k < n->n; k++)
			if (n->ch[k].socket == n->ch[i].socket && n->ch[k].total) {
				has_module = true;
				break;
			}
		if (!has_module) {
			js_fmt(iv->total_sources, sizeof(iv->total_sources),
			       "no total: socket %d has no Module sensor (CPU, SysIO are "
			       "parts; never added up as the node)", n->ch[i].socket);
			return;
		}
		if (iv->uncertain[k]) {
			js_fmt(iv->total_sources, sizeof(iv->total_sources),
			       "no total: %s uncertain (a read failed)", n->ch[k].name);
			return;
		}
	}
	for (size_t i = 0; i < n->n; i++)
		if (n->ch[i].total) {
			iv->total_uj += iv->energy_uj[i];
			add_source(iv->total_sources, sizeof(iv->total_sources), "hwmon", n->ch[i].name);
		}
	iv->total_known = true;
}

void js_node_interval_of(const struct js_node *n, const struct js_node_snapshot *a,
			 const struct js_node_snapshot *b, struct js_node_interval *out)
{
	bool pm = n->src == JS_NODE_PM_COUNTERS;
	bool reset = pm && a->generation_known && b->generation_known &&
		     a->generation != b->generation;

	memset(out, 0, sizeof(*out));
	out->n = n->n;
	out->duration_ns = b->mono_ns - a->mono_ns;
	out->integrated = !pm;
	for (size_t i = 0; i < n->n; i++) {
		/* a new generation is a reset: that interval is not known */
		out->uncertain[i] = reset || b->errors[i] != a->errors[i] ||
				    b->energy_uj[i] < a->energy_uj[i];
		out->energy_uj[i] = out->uncertain[i] ? 0 : b->energy_uj[i] - a->energy_uj[i];
	}
	if (!pm) {
		grace_total(n, out);
		return;
	}
	for (size_t i = 0; i < n->n; i++) {
		if (!n->ch[i].total)
			continue;
		if (out->uncertain[i]) {
			js_fmt(out->total_sources, sizeof(out->total_sources), "no total: %s",
			       reset ? "pm_counters generation changed (a reset)"
				     : "pm_counters energy unreadable or went back");
			return;
		}
		out->total_uj = out->energy_uj[i];
		out->total_known = true;
		add_source(out->total_sources, sizeof(out->total_sources), "pm_counters", n->ch[i].name);
		return;
	}
	js_fmt(out->total_sources, sizeof(out->total_sources),
	       "no total: pm_counters has no energy file (its parts are never added up as the node)");
}
