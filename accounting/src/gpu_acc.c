/* The GPU counter rule (pure): wrap-free counters that can still reset,
 * stick or jump, and the power integral beside them. No I/O here. */
#include <string.h>

#include "joulestep/gpu.h"

/* A counter jump is plausible when it fits in the elapsed time (plus one
 * slow update period of the driver) at this factor times max power. */
#define JS_GPU_JUMP_FACTOR 4
#define JS_GPU_UPDATE_SLACK_NS (200ULL * 1000 * 1000)

static void add_power(struct js_gpu_acc *a, uint32_t p_mw, uint64_t mono_ns)
{
	if (a->have_last_power && mono_ns > a->last_power_mono_ns) {
		unsigned __int128 e = (unsigned __int128)((uint64_t)a->last_power_mw + p_mw) *
				      (mono_ns - a->last_power_mono_ns);
		/* mW * ns = 1e-12 J; /2 for the trapezoid, /1e6 for uJ */
		a->integrated_uj += (uint64_t)(e / 2000000u);
	}
	a->last_power_mw = p_mw;
	a->last_power_mono_ns = mono_ns;
	a->have_last_power = true;
}

static bool jump_plausible(uint64_t delta_uj, uint64_t elapsed_ns, uint32_t max_power_mw)
{
	unsigned __int128 bound;

	if (!max_power_mw)
		return true;
	/* mW * ns / 1e6 = uJ */
	bound = (unsigned __int128)max_power_mw * JS_GPU_JUMP_FACTOR *
		(elapsed_ns + JS_GPU_UPDATE_SLACK_NS) / 1000000u;
	return delta_uj <= bound;
}

void js_gpu_acc_add(struct js_gpu_acc *a, const struct js_gpu_raw *r, uint64_t mono_ns,
		    uint32_t max_power_mw)
{
	uint64_t delta;
	bool drawing;

	if (r->have_power)
		add_power(a, r->power_mw, mono_ns);
	if (!r->have_energy)
		return;
	if (!a->have_last) {
		a->have_last = true;
		a->last_uj = r->energy_uj;
		a->last_mono_ns = a->moved_mono_ns = mono_ns;
		a->integ_at_last_uj = a->integrated_uj;
		return;
	}
	if (r->energy_uj < a->last_uj) { /* driver reload, a second die's 0, a step back */
		a->resets++;
		/* The counter cannot say what was drawn since the last reading; the
		 * power integral over the same span can, when power was sampled on
		 * both sides. Without it the span is unknown. */
		if (r->have_power && a->integrated_uj > a->integ_at_last_uj)
			a->counter_uj += a->integrated_uj - a->integ_at_last_uj;
		else
			a->uncertain++;
		a->last_uj = r->energy_uj;
		a->last_mono_ns = a->moved_mono_ns = mono_ns;
		a->integ_at_last_uj = a->integrated_uj;
		return;
	}
	delta = r->energy_uj - a->last_uj;
	if (delta == 0) {
		drawing = a->have_last_power && a->last_power_mw >= JS_GPU_STUCK_MIN_MW;
		if (drawing && mono_ns - a->moved_mono_ns > JS_GPU_STUCK_NS) {
			a->uncertain++; /* stuck: the energy of this second is unknown */
			a->moved_mono_ns = mono_ns;
		}
		a->last_mono_ns = mono_ns;
		a->integ_at_last_uj = a->integrated_uj;
		return;
	}
	if (!jump_plausible(delta, mono_ns - a->last_mono_ns, max_power_mw))
		a->uncertain++; /* a garbled or foreign counter: add nothing */
	else
		a->counter_uj += delta;
	a->last_uj = r->energy_uj;
	a->last_mono_ns = a->moved_mono_ns = mono_ns;
	a->integ_at_last_uj = a->integrated_uj;
}

void js_gpu_interval_of(const struct js_gpu_snapshot *a, const struct js_gpu_snapshot *b,
			struct js_gpu_interval *out)
{
	memset(out, 0, sizeof(*out));
	out->n = b->n < a->n ? b->n : a->n;
	out->duration_ns = b->mono_ns > a->mono_ns ? b->mono_ns - a->mono_ns : 0;
	for (size_t i = 0; i < out->n; i++) {
		bool unc = b->uncertain[i] != a->uncertain[i] || a->err[i] || b->err[i] ||
			   b->energy_uj[i] < a->energy_uj[i];

		out->integrated[i] = b->integrated[i];
		out->uncertain[i] = unc;
		if (unc) {
			out->any_uncertain = true;
			continue;
		}
		out->energy_uj[i] = b->energy_uj[i] - a->energy_uj[i];
		out->total_uj += out->energy_uj[i];
	}
}
