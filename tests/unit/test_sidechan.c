/* The plugin's RAPL side-channel limits (spank/js_sidechan.c): the effective
 * resolution, the rounding of user-visible energies, the minimum interval a
 * user sees the energy of, and the caps on markers per second and per step.
 * Expected values are computed here from the documented rules
 * (docs/security.md, "Threat model: RAPL side channels"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "js_sidechan.h"

static void resolution_sums_zones_at_max_power(void **st)
{
	(void)st;
	/* 2 packages of 125 W and 2 DRAM zones of 20.5 W, 1 ms updates */
	uint64_t p[] = {125000000ULL, 20500000ULL, 125000000ULL, 20500000ULL};
	uint64_t want = 2 * (125000000ULL / 1000) + 2 * (20500000ULL / 1000);
	assert_int_equal(js_energy_resolution_uj(p, 4, 1000000ULL), want);
	/* rounded up: 1.5 uW over 1 s is 1.5 uJ -> 2, then the unit floor */
	uint64_t tiny[] = {3ULL};
	assert_int_equal(js_energy_resolution_uj(tiny, 1, 500000000ULL), JS_ENERGY_UNIT_UJ);
	uint64_t odd[] = {1000001ULL};           /* 1.000001 W x 1 s */
	assert_int_equal(js_energy_resolution_uj(odd, 1, 1000000000ULL), 1000001ULL);
	uint64_t frac[] = {1500ULL};             /* 1500 uW x 0.1 s = 150 uJ */
	assert_int_equal(js_energy_resolution_uj(frac, 1, 100000000ULL), 150ULL);
	uint64_t up[] = {1501ULL};               /* 150.1 uJ -> 151 */
	assert_int_equal(js_energy_resolution_uj(up, 1, 100000000ULL), 151ULL);
	/* no zone: the counter's unit */
	assert_int_equal(js_energy_resolution_uj(NULL, 0, JS_RAPL_UPDATE_NS), JS_ENERGY_UNIT_UJ);
	/* saturates instead of wrapping */
	uint64_t huge[] = {UINT64_MAX, UINT64_MAX};
	assert_int_equal(js_energy_resolution_uj(huge, 2, UINT64_MAX), UINT64_MAX);
}

static void rounding_to_the_resolution(void **st)
{
	(void)st;
	assert_int_equal(js_round_uj(0, 61), 0);
	assert_int_equal(js_round_uj(30, 61), 0);      /* below half: down */
	assert_int_equal(js_round_uj(31, 61), 61);     /* above half: up   */
	assert_int_equal(js_round_uj(50, 100), 100);   /* exactly half: up */
	assert_int_equal(js_round_uj(49, 100), 0);
	assert_int_equal(js_round_uj(1234567, 1000), 1235000);
	assert_int_equal(js_round_uj(1234499, 1000), 1234000);
	assert_int_equal(js_round_uj(777, 1), 777);     /* no rounding     */
	assert_int_equal(js_round_uj(777, 0), 777);
	/* every result is a multiple of res within res/2 of v */
	for (uint64_t res = 2; res < 300; res += 7)
		for (uint64_t v = 0; v < 5000; v += 13) {
			uint64_t r = js_round_uj(v, res);
			assert_int_equal(r % res, 0);
			assert_true(r >= v ? r - v <= res / 2 : v - r < res - res / 2);
		}
	/* near the top: no wrap to a small value */
	uint64_t r = js_round_uj(UINT64_MAX, 1000);
	assert_int_equal(r % 1000, 0);
	assert_true(r > UINT64_MAX - 1000);
}

static void minimum_interval(void **st)
{
	(void)st;
	uint64_t ms10 = 10ULL * 1000000ULL;
	assert_false(js_user_may_see(ms10 - 1, ms10));
	assert_true(js_user_may_see(ms10, ms10));
	assert_true(js_user_may_see(0, 0));             /* min_phase_ms=0: all */
}

static void caps_per_second_and_per_step(void **st)
{
	(void)st;
	struct js_markcap m;
	uint64_t t = 1000;
	/* 5 per second, 12 per step: the burst, then one per 200 ms */
	js_markcap_init(&m, 5, 12, t);
	for (int i = 0; i < 5; i++)
		assert_int_equal(js_markcap_take(&m, t), JS_CAP_OK);
	assert_int_equal(js_markcap_take(&m, t), JS_CAP_RATE);
	t += 200000000ULL; /* one token */
	assert_int_equal(js_markcap_take(&m, t), JS_CAP_OK);
	assert_int_equal(js_markcap_take(&m, t), JS_CAP_RATE);
	t += 10ULL * 1000000000ULL; /* full bucket again (5) */
	int ok = 0, rate = 0, step = 0;
	for (int i = 0; i < 20; i++) {
		enum js_cap c = js_markcap_take(&m, t);
		ok += c == JS_CAP_OK;
		rate += c == JS_CAP_RATE;
		step += c == JS_CAP_STEP;
	}
	assert_int_equal(ok, 5);      /* 6 taken before, 11 now ... */
	assert_int_equal(rate, 15);   /* ... the bucket empties first */
	assert_int_equal(step, 0);
	t += 10ULL * 1000000000ULL;
	ok = rate = step = 0;
	for (int i = 0; i < 20; i++) {
		enum js_cap c = js_markcap_take(&m, t);
		ok += c == JS_CAP_OK;
		rate += c == JS_CAP_RATE;
		step += c == JS_CAP_STEP;
	}
	assert_int_equal(ok, 1);      /* the 12th of the step */
	assert_int_equal(step, 19);   /* then the step cap, whatever the bucket holds */
	assert_int_equal(rate, 0);
	assert_int_equal(m.taken, 12);
	/* the step cap takes no token: a later step cap change is not needed to see it */
	assert_true(m.bucket.tokens >= 3.0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(resolution_sums_zones_at_max_power),
		cmocka_unit_test(rounding_to_the_resolution),
		cmocka_unit_test(minimum_interval),
		cmocka_unit_test(caps_per_second_and_per_step),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
