/* bench_phase: the plugin's phase bookkeeping (spank/js_phase.c), the cost of
 * one BEGIN+END pair when the step already has N phases (issue 23, defect 7:
 * goal flat, within 1.5x of the cost at 10 phases).
 *
 * One rank marks one new step-level phase per pair (kind "write", depth 0:
 * every pair is a new phase, as with a program that marks each write), with
 * the plugin's own js_phases_begin/js_phases_end and callbacks that cost
 * nothing (no clock, no meter): what is timed is the bookkeeping alone. For
 * each N, steps are built up to N - K phases untimed, then the last K pairs
 * are timed one by one; steps are repeated until at least MIN_SAMPLES pairs
 * are timed. Printed: median and p99 per pair in ns, and their ratio to N =
 * 10; the bare baseline is the timer's own cost (two clock_gettime calls).
 *
 * usage: bench_phase [N ...]   (default 10 10000 100000)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "js_phase.h"

#define MIN_SAMPLES 20000
#define TAIL_MAX 2000 /* pairs timed per step */

static uint64_t ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int set_ratio(void *ctx, double ratio, uint32_t *khz, uint64_t *took)
{
	(void)ctx;
	*khz = (uint32_t)(ratio * 2400000);
	*took = 0;
	return 0;
}
static void snap(void *ctx, uint64_t *cpu, uint64_t *dram, bool *unc)
{
	(void)ctx;
	*cpu = *dram = 0;
	*unc = false;
}
static uint64_t now_cb(void *ctx)
{
	(void)ctx;
	return ns();
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

struct fig {
	double median, p99;
	size_t n;
};

static struct fig stats(uint64_t *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	struct fig f = {(double)v[n / 2], (double)v[(size_t)((double)(n - 1) * 0.99)], n};
	return f;
}

static void pair(struct js_phases *ps)
{
	uint32_t seq, khz;
	/* 0.5: the phase lowers the clock and its END restores it (relevel) */
	if (js_phases_begin(ps, 0, "write", NULL, 0.5, 0, &seq, &khz) ||
	    js_phases_end(ps, 0, 1, 0, &seq) != 0) {
		fprintf(stderr, "bench_phase: a BEGIN or END was refused\n");
		exit(1);
	}
}

static struct fig run(unsigned nphases)
{
	struct js_phase_ops ops = {.ctx = NULL, .set_ratio = set_ratio, .snap = snap, .now_ns = now_cb};
	size_t tail = nphases < TAIL_MAX ? nphases : TAIL_MAX;
	size_t cap = MIN_SAMPLES + tail, n = 0;
	uint64_t *v = malloc(cap * sizeof(*v));
	if (!v)
		exit(1);
	while (n < MIN_SAMPLES) {
		struct js_phases *ps = js_phases_new(nphases, 4, &ops, ns());
		if (!ps)
			exit(1);
		for (size_t i = 0; i < nphases - tail; i++)
			pair(ps);
		for (size_t i = 0; i < tail; i++) {
			uint64_t t0 = ns();
			pair(ps);
			v[n++] = ns() - t0;
		}
		if (js_phases_count(ps) != nphases) {
			fprintf(stderr, "bench_phase: %zu phases, want %u\n", js_phases_count(ps), nphases);
			exit(1);
		}
		js_phases_free(ps);
	}
	struct fig f = stats(v, n);
	free(v);
	return f;
}

static struct fig bare(void)
{
	static uint64_t v[MIN_SAMPLES];
	for (size_t i = 0; i < MIN_SAMPLES; i++) {
		uint64_t t0 = ns();
		v[i] = ns() - t0;
	}
	return stats(v, MIN_SAMPLES);
}

int main(int argc, char **argv)
{
	unsigned def[] = {10, 10000, 100000}, want[16];
	size_t nw = 0;
	for (int i = 1; i < argc && nw < 16; i++)
		want[nw++] = (unsigned)strtoul(argv[i], NULL, 10);
	if (!nw) {
		memcpy(want, def, sizeof(def));
		nw = 3;
	}
	struct fig b = bare();
	printf("phase BEGIN+END (one rank, one new phase per pair, no clock or meter I/O)\n");
	printf("  %-32s median %8.0f ns  p99 %8.0f ns  (%zu samples)\n", "bare: the timer alone", b.median,
	       b.p99, b.n);
	struct fig ref = run(10);
	for (size_t i = 0; i < nw; i++) {
		struct fig f = want[i] == 10 ? ref : run(want[i]);
		char what[64];
		snprintf(what, sizeof(what), "pair at %u phases", want[i]);
		printf("  %-32s median %8.0f ns  p99 %8.0f ns  (%zu samples)  x%.2f / x%.2f of 10 phases\n",
		       what, f.median, f.p99, f.n, f.median / ref.median, f.p99 / ref.p99);
	}
	printf("  goal: flat, the median within 1.5x of the cost at 10 phases\n");
	return 0;
}
