/* joulestep SPANK plugin: limits against RAPL side channels (PLATYPUS,
 * Lipp et al. 2021). Pure logic, no I/O: unit-tested by
 * tests/unit/test_sidechan.c. The threat model and the reasons for each
 * limit are in docs/security.md, "Threat model: RAPL side channels".
 *
 * What the job's user is shown (the step's user summary, srun
 * --energy-report, the CLI's user view) is derived from the full record
 * (root-only) with these rules:
 *   - an interval (phase or step) shorter than min_phase_ns is shown without
 *     energy;
 *   - every other energy is rounded to the counter's effective resolution:
 *     the energy the measured zones can take between two updates of the
 *     counter, at their maximum power (js_energy_resolution_uj).
 * Markers (BEGINs) are capped per second and per step (js_markcap). */
#ifndef JS_SIDECHAN_H
#define JS_SIDECHAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "js_parse.h"

/* RAPL's energy counters are updated about once per millisecond (Intel SDM
 * vol. 3B, 15.10.1; AMD: the same interval for its RAPL MSRs): a single
 * reading cannot tell apart energies that differ by less than what the
 * zone takes in one update interval. */
#define JS_RAPL_UPDATE_NS 1000000ULL
/* The counter's unit where nothing better is known: 2^-14 J = 61.04 uJ, the
 * energy status unit of most Intel packages (MSR_RAPL_POWER_UNIT). */
#define JS_ENERGY_UNIT_UJ 61ULL

/* Effective resolution of a sum of zones' energies, in uJ: the sum over the
 * zones of max_power_uw[i] x update_ns (rounded up), at least
 * JS_ENERGY_UNIT_UJ. n = 0 gives JS_ENERGY_UNIT_UJ. Saturates. */
uint64_t js_energy_resolution_uj(const uint64_t *max_power_uw, size_t n, uint64_t update_ns);

/* v rounded to the nearest multiple of res_uj (halves up); res_uj 0 or 1
 * gives v. Saturates at the largest multiple below UINT64_MAX. */
uint64_t js_round_uj(uint64_t v, uint64_t res_uj);

/* May the job's user see the energy of an interval this long? */
static inline bool js_user_may_see(uint64_t duration_ns, uint64_t min_phase_ns)
{
	return duration_ns >= min_phase_ns;
}

/* Caps on BEGIN markers: max_markers_per_s (token bucket, burst = the rate)
 * and max_markers_per_step. A marker over either cap is not recorded and is
 * counted by the caller; a marker refused by the step cap takes no token. */
enum js_cap { JS_CAP_OK = 0, JS_CAP_RATE, JS_CAP_STEP };
struct js_markcap {
	struct js_bucket bucket;
	uint64_t taken, per_step;
};
void js_markcap_init(struct js_markcap *m, unsigned per_s, uint64_t per_step, uint64_t now_ns);
enum js_cap js_markcap_take(struct js_markcap *m, uint64_t now_ns);

#endif
