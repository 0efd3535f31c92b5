/* bench_gpu_phase: the plugin's phase logic (spank/js_phase.c) with the GPU
 * meter and +gpu-io clock locks of N GPUs on the NVML stand-in: how long a
 * marker takes to reach the CPU clock and the GPU clock, how long step start
 * waits for the GPUs, and the boundaries' times and the GPUs' energies they
 * give (bench/run.py compares them with the stand-in's truth).
 *
 *   bench_gpu_phase --nvml LIB --state DIR [--phases N] [--gap-ms G] [--lock-mhz M]
 *   bench_gpu_phase --bare [--phases N] [--gap-ms G]   (the baseline: no GPU)
 *
 * One rank alternates "write" (an I/O kind: the GPUs are locked at M MHz)
 * and "compute" phases of G ms. The callbacks do what the plugin's do
 * (js_gpu_step.c): journal + lock each GPU, a GPU mark per boundary.
 * Output, one line each:
 *   start_ns <ns>                       step start (step start cost below)
 *   step_start_ns <ns>                  GPUs opened, meter started, g0 asked
 *   lat <marker> <cpu_ns> <gpu_ns>      marker -> CPU clock, -> last GPU locked
 *   phase <kind> <start_ns> <end_ns> <e0_uj> .. <eN_uj>   (-1: no figure)
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "joulestep/gpu.h"
#include "js_phase.h"

struct ctx {
	struct js_gpus *g;
	struct js_gpu_meter *m;
	const char *state;
	unsigned lock_mhz;
	uint64_t marker_ns, cpu_ns, gpu_ns;
};

static uint64_t ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int set_ratio(void *c, double ratio, uint32_t *khz, uint64_t *took)
{
	struct ctx *x = c;
	x->cpu_ns = ns();
	*khz = (uint32_t)(ratio * 2400000);
	*took = 0;
	return 0;
}

static void snap(void *c, uint64_t *cpu, uint64_t *dram, bool *unc)
{
	(void)c;
	*cpu = *dram = 0;
	*unc = false;
}

static uint64_t now_cb(void *c)
{
	(void)c;
	return ns();
}

/* as js_gpu_step_set_clock: every GPU in one pass of the journal */
static int set_gpu(void *c, bool low, uint32_t *mhz)
{
	struct ctx *x = c;
	bool want[JS_MAX_GPUS];
	uint32_t lo[JS_MAX_GPUS], hi[JS_MAX_GPUS];
	int rc[JS_MAX_GPUS];
	for (size_t i = 0; i < js_gpu_count(x->g); i++) {
		want[i] = true;
		lo[i] = hi[i] = x->lock_mhz;
	}
	if (low)
		js_gpu_lock_journaled_n(x->state, x->g, want, lo, hi, rc);
	else
		js_gpu_unlock_journaled_n(x->state, x->g, want, rc);
	x->gpu_ns = ns();
	*mhz = low ? x->lock_mhz : 0;
	return 0;
}

static void mark_of(const struct js_gpu_snapshot *sn, struct js_gpu_mark *out)
{
	memset(out, 0, sizeof(*out));
	out->n = (uint8_t)(sn->n < JS_PHASE_GPUS ? sn->n : JS_PHASE_GPUS);
	for (size_t i = 0; i < out->n; i++) {
		out->uj[i] = sn->energy_uj[i];
		out->uncertain[i] = sn->uncertain[i];
		out->err |= (uint8_t)((sn->err[i] != 0) << i);
	}
}

/* as js_gpu_step_mark / js_gpu_step_mark_result (the plugin's ph_snap_gpu) */
static bool snap_gpu(void *c, uint64_t at_ns, struct js_gpu_mark *m, int op)
{
	struct ctx *x = c;
	struct js_gpu_snapshot sn;
	if (op == JS_GPU_ASK) {
		memset(m, 0, sizeof(*m));
		if (js_gpu_meter_request(x->m, at_ns, &m->ticket) < 0)
			m->ticket = 0;
		return true;
	}
	if (!m->ticket)
		return true;
	int rc = js_gpu_meter_result(x->m, m->ticket, op == JS_GPU_WAIT, &sn);
	if (rc == -EAGAIN)
		return false;
	if (rc == 0)
		mark_of(&sn, m);
	m->ticket = 0;
	return true;
}

static void print_phase(const struct js_sphase *p)
{
	printf("phase %s %llu %llu", p->kind, (unsigned long long)p->start_ns,
	       (unsigned long long)p->end_ns);
	for (size_t i = 0; i < p->g1.n; i++) {
		bool ok = i < p->g0.n && !((p->g0.err | p->g1.err) >> i & 1) &&
			  p->g0.uncertain[i] == p->g1.uncertain[i] && p->g1.uj[i] >= p->g0.uj[i];
		printf(" %lld", ok ? (long long)(p->g1.uj[i] - p->g0.uj[i]) : -1LL);
	}
	printf("\n");
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
	const char *lib = NULL, *state = NULL;
	unsigned nph = 20, gap = 250, lock = 900;
	bool bare = false;
	int c;
	while ((c = getopt_long(argc, argv, "", (struct option[]){{"nvml", 1, 0, 'l'},
		{"state", 1, 0, 's'}, {"phases", 1, 0, 'p'}, {"gap-ms", 1, 0, 'g'},
		{"lock-mhz", 1, 0, 'm'}, {"bare", 0, 0, 'B'}, {0, 0, 0, 0}}, NULL)) != -1) {
		if (c == 'B')
			bare = true;
		if (c == 'l')
			lib = optarg;
		else if (c == 's')
			state = optarg;
		else if (c == 'p')
			nph = (unsigned)atoi(optarg);
		else if (c == 'g')
			gap = (unsigned)atoi(optarg);
		else if (c == 'm')
			lock = (unsigned)atoi(optarg);
	}
	struct ctx x = {.state = state, .lock_mhz = lock};
	struct js_gpu_opts o = {.backend = "nvml", .lib = lib};
	char why[256] = "";
	if (!bare && (!lib || !state)) {
		fprintf(stderr, "bench_gpu_phase: --nvml LIB --state DIR [--phases N] [--gap-ms G] [--lock-mhz M]\n");
		return 2;
	}
	/* step start: what js_gpu_step_open does on slurmstepd's main thread */
	uint64_t t0 = ns();
	struct js_gpu_mark g0;
	if (!bare && (js_gpu_open(&o, &x.g, why, sizeof(why)) < 0 ||
	    js_gpu_meter_start(x.g, 50ULL * 1000 * 1000, true, &x.m) < 0)) {
		fprintf(stderr, "bench_gpu_phase: %s\n", why);
		return 1;
	}
	if (!bare)
		snap_gpu(&x, t0, &g0, JS_GPU_ASK);
	uint64_t t1 = ns();
	printf("start_ns %llu\nstep_start_ns %llu\n", (unsigned long long)t0,
	       (unsigned long long)(t1 - t0));
	struct js_phase_ops ops = {.ctx = &x, .set_ratio = set_ratio, .snap = snap, .now_ns = now_cb,
				   .set_gpu = bare ? NULL : set_gpu, .snap_gpu = bare ? NULL : snap_gpu};
	struct js_phases *ps = js_phases_new(2 * nph + 2, 4, &ops, ns());
	for (unsigned k = 0; k < nph; k++) {
		uint32_t seq, khz;
		const char *kind = k % 2 ? "compute" : "write";
		x.marker_ns = ns();
		x.cpu_ns = x.gpu_ns = 0;
		js_phases_begin(ps, 0, kind, NULL, k % 2 ? JS_RATIO_BASE : 0.5, x.marker_ns, &seq, &khz);
		if (x.cpu_ns)
			printf("lat begin %llu %llu\n", (unsigned long long)(x.cpu_ns - x.marker_ns),
			       (unsigned long long)(x.gpu_ns ? x.gpu_ns - x.marker_ns : 0));
		sleep_ms(gap);
		x.marker_ns = ns();
		x.cpu_ns = x.gpu_ns = 0;
		js_phases_end(ps, 0, -1, x.marker_ns, &seq);
		if (x.cpu_ns)
			printf("lat end %llu %llu\n", (unsigned long long)(x.cpu_ns - x.marker_ns),
			       (unsigned long long)(x.gpu_ns ? x.gpu_ns - x.marker_ns : 0));
	}
	js_phases_close_all(ps, ns());
	for (size_t i = 0; i < js_phases_count(ps); i++)
		print_phase(js_phases_get(ps, i));
	js_phases_free(ps);
	if (!bare) {
		js_gpu_meter_stop(x.m);
		js_gpu_close(x.g);
	}
	return 0;
}
