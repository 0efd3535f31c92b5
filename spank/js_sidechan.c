/* joulestep SPANK plugin: limits against RAPL side channels. See
 * js_sidechan.h and docs/security.md ("Threat model: RAPL side channels"). */
#include "js_sidechan.h"

uint64_t js_energy_resolution_uj(const uint64_t *max_power_uw, size_t n, uint64_t update_ns)
{
	unsigned __int128 sum = 0;
	for (size_t i = 0; i < n; i++) /* uW x ns / 1e9 = uJ, rounded up */
		sum += ((unsigned __int128)max_power_uw[i] * update_ns + 999999999u) / 1000000000u;
	if (sum < JS_ENERGY_UNIT_UJ)
		return JS_ENERGY_UNIT_UJ;
	return sum > UINT64_MAX ? UINT64_MAX : (uint64_t)sum;
}

uint64_t js_round_uj(uint64_t v, uint64_t res_uj)
{
	if (res_uj <= 1)
		return v;
	uint64_t q = v / res_uj, r = v % res_uj;
	if (r >= res_uj - r) /* r >= res/2, without overflow: halves up */
		q++;
	if (q > UINT64_MAX / res_uj)
		q = UINT64_MAX / res_uj;
	return q * res_uj;
}

void js_markcap_init(struct js_markcap *m, unsigned per_s, uint64_t per_step, uint64_t now_ns)
{
	js_bucket_init(&m->bucket, per_s, now_ns);
	m->taken = 0;
	m->per_step = per_step;
}

enum js_cap js_markcap_take(struct js_markcap *m, uint64_t now_ns)
{
	if (m->taken >= m->per_step)
		return JS_CAP_STEP;
	if (!js_bucket_take(&m->bucket, now_ns))
		return JS_CAP_RATE;
	m->taken++;
	return JS_CAP_OK;
}
