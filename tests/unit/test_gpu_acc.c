/* The GPU counter rule (accounting/src/gpu_acc.c): each case's truth is
 * worked out here from the readings it feeds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "joulestep/gpu.h"

#define MS (1000ULL * 1000)
#define MAXP 700000u /* mW */

static void feed(struct js_gpu_acc *a, uint64_t t_ms, bool e, uint64_t mj, bool p, uint32_t mw)
{
	struct js_gpu_raw r = {.have_energy = e, .energy_uj = mj * 1000u, .have_power = p, .power_mw = mw};

	js_gpu_acc_add(a, &r, t_ms * MS, MAXP);
}

static void counter_deltas_add_up(void **st)
{
	struct js_gpu_acc a = {0};

	(void)st;
	feed(&a, 0, true, 5000, true, 100000);
	feed(&a, 100, true, 15000, true, 100000);  /* +10 J */
	feed(&a, 200, true, 15000, true, 100000);  /* not moved yet: fine */
	feed(&a, 300, true, 35000, true, 100000);  /* +20 J */
	assert_int_equal(a.counter_uj, 30000000u);
	assert_int_equal(a.uncertain, 0);
	/* 100 W for 0.3 s by the trapezoid */
	assert_int_equal(a.integrated_uj, 30000000u);
}

static void reset_is_filled_from_power(void **st)
{
	struct js_gpu_acc a = {0};

	(void)st;
	feed(&a, 0, true, 900000, true, 200000);
	feed(&a, 100, true, 920000, true, 200000);  /* +20 J */
	feed(&a, 200, true, 7, true, 200000);       /* driver reload: back to ~0 */
	feed(&a, 300, true, 20007, true, 200000);   /* +20 J */
	/* the reset span [100, 200] ms is 200 W x 0.1 s = 20 J of power integral */
	assert_int_equal(a.counter_uj, 60000000u);
	assert_int_equal(a.resets, 1);
	assert_int_equal(a.uncertain, 0);
}

static void reset_without_power_is_uncertain(void **st)
{
	struct js_gpu_acc a = {0};

	(void)st;
	feed(&a, 0, true, 5000, false, 0);
	feed(&a, 100, true, 0, false, 0); /* a second die reading 0 */
	assert_int_equal(a.counter_uj, 0);
	assert_int_equal(a.uncertain, 1);
	assert_int_equal(a.resets, 1);
	feed(&a, 200, true, 1000, false, 0);
	assert_int_equal(a.counter_uj, 1000000u); /* resumes from the new base */
}

static void stuck_counter_while_drawing_is_uncertain(void **st)
{
	struct js_gpu_acc a = {0};

	(void)st;
	feed(&a, 0, true, 100, true, 300000);
	for (uint64_t t = 100; t <= 1000; t += 100)
		feed(&a, t, true, 100, true, 300000);
	assert_int_equal(a.uncertain, 0); /* 1 s: still a slow update */
	feed(&a, 1100, true, 100, true, 300000);
	assert_int_equal(a.uncertain, 1);
	/* idle boards may hold the counter: not stuck */
	struct js_gpu_acc b = {0};
	feed(&b, 0, true, 100, true, 500);
	feed(&b, 5000, true, 100, true, 500);
	assert_int_equal(b.uncertain, 0);
}

static void impossible_jump_is_uncertain(void **st)
{
	struct js_gpu_acc a = {0};

	(void)st;
	feed(&a, 0, true, 0, true, 100000);
	/* 100 ms at 4 x 700 W (+0.2 s slack) is at most 840 J: 10 kJ is not a reading */
	feed(&a, 100, true, 10000000, true, 100000);
	assert_int_equal(a.uncertain, 1);
	assert_int_equal(a.counter_uj, 0);
	feed(&a, 200, true, 10001000, true, 100000);
	assert_int_equal(a.counter_uj, 1000000u);
}

static void interval_is_null_when_uncertain(void **st)
{
	struct js_gpu_snapshot s0 = {.n = 2, .mono_ns = 0}, s1 = {.n = 2, .mono_ns = 2000 * MS};
	struct js_gpu_interval iv;

	(void)st;
	s0.energy_uj[0] = 10; s1.energy_uj[0] = 1000010;
	s0.energy_uj[1] = 10; s1.energy_uj[1] = 5000010;
	s1.uncertain[1] = 1;
	js_gpu_interval_of(&s0, &s1, &iv);
	assert_int_equal(iv.energy_uj[0], 1000000u);
	assert_true(iv.uncertain[1]);
	assert_true(iv.any_uncertain);
	assert_int_equal(iv.total_uj, 1000000u);
	assert_int_equal(iv.duration_ns, 2000 * MS);
}

int main(void)
{
	const struct CMUnitTest t[] = {
		cmocka_unit_test(counter_deltas_add_up),
		cmocka_unit_test(reset_is_filled_from_power),
		cmocka_unit_test(reset_without_power_is_uncertain),
		cmocka_unit_test(stuck_counter_while_drawing_is_uncertain),
		cmocka_unit_test(impossible_jump_is_uncertain),
		cmocka_unit_test(interval_is_null_when_uncertain),
	};
	return cmocka_run_group_tests(t, NULL, NULL);
}
