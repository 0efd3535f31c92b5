/* Unit tests of the plugin's pure logic: plugstack keys, policies, tags,
 * the phase protocol parser, the token bucket and the phase bookkeeping
 * (collective merging, nesting, clock levels). Built and run by
 * tests/spank/test_spank_unit.py. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "js_jobcache.h"
#include "js_parse.h"
#include "js_phase.h"
#include "js_tuned.h"
#include "js_auto.h"

/* The side-channel keys (docs/security.md, "Threat model: RAPL side
 * channels"): defaults, bounds, and rate= as the old name of
 * max_markers_per_s=. */
static void conf_sidechannel_keys(void **st)
{
	(void)st;
	struct js_conf c;
	char err[400];
	assert_int_equal(js_conf_parse(0, NULL, &c, err, sizeof(err)), 0);
	assert_int_equal(c.min_phase_ms, 10);
	assert_int_equal(c.rate, 1000);
	assert_int_equal(c.max_markers_per_step, 1000000);
	char *ok[] = {"min_phase_ms=0", "max_markers_per_s=20000"};
	assert_int_equal(js_conf_parse(2, ok, &c, err, sizeof(err)), 0);
	assert_int_equal(c.min_phase_ms, 0);
	assert_int_equal(c.rate, 20000);
	char *big[] = {"max_markers_per_step=1000000000", "min_phase_ms=3600000", "rate=7"};
	assert_int_equal(js_conf_parse(3, big, &c, err, sizeof(err)), 0);
	assert_int_equal(c.max_markers_per_step, 1000000000ULL);
	assert_int_equal(c.min_phase_ms, 3600000);
	assert_int_equal(c.rate, 7);
	char *bad[][1] = {{"max_markers_per_step=0"}, {"max_markers_per_step=1000000001"},
			  {"max_markers_per_step=-1"}, {"max_markers_per_s=0"},
			  {"max_markers_per_s=1000001"}, {"min_phase_ms=3600001"}, {"min_phase_ms=-1"},
			  {"min_phase_ms=1e3"}, {"min_phase_ms="}, {"min_phase_ns=5"}};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = 0;
		assert_int_equal(js_conf_parse(1, bad[i], &c, err, sizeof(err)), -EINVAL);
		assert_true(err[0]);
	}
	assert_non_null(strstr(err, "unknown key 'min_phase_ns'"));
	assert_non_null(strstr(err, "min_phase_ms"));
	assert_non_null(strstr(err, "max_markers_per_step"));
	assert_non_null(strstr(err, "gpu_lib)")); /* the list is not truncated */
}

/* GPU keys of plugstack.conf: the library path and backend, parsed by the
 * one parser; an unknown GPU key is refused like any other. */
static void conf_gpu_keys(void **st)
{
	(void)st;
	struct js_conf c;
	char err[400];
	assert_int_equal(js_conf_parse(0, NULL, &c, err, sizeof(err)), 0);
	assert_string_equal(c.gpu_backend, "");
	assert_string_equal(c.gpu_lib, "");
	char *ok[] = {"gpu_backend=nvml", "gpu_lib=/opt/fake/libnvidia-ml.so.1"};
	assert_int_equal(js_conf_parse(2, ok, &c, err, sizeof(err)), 0);
	assert_string_equal(c.gpu_backend, "nvml");
	assert_string_equal(c.gpu_lib, "/opt/fake/libnvidia-ml.so.1");
	char *bad[][1] = {{"gpu_backend=cuda"}, {"gpu_lib=libnvidia-ml.so.1"}, {"gpu_lib=/a/../b"},
			  {"gpu_libs=/x"}, {"gpus=0"}};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = 0;
		assert_int_equal(js_conf_parse(1, bad[i], &c, err, sizeof(err)), -EINVAL);
		assert_true(err[0]);
	}
	assert_non_null(strstr(err, "unknown key 'gpus'"));
}

/* SLURM_JOB_GPUS as the job cache keeps it: indices only, ranges expanded;
 * a cache file of an older plugin (no "gpus") still loads, with none. */
static void jobcache_gpus(void **st)
{
	(void)st;
	char out[128];
	assert_int_equal(js_jobcache_gpus("0,2", out, sizeof(out)), 0);
	assert_string_equal(out, "0,2");
	assert_int_equal(js_jobcache_gpus("1-3,7", out, sizeof(out)), 0);
	assert_string_equal(out, "1,2,3,7");
	assert_int_equal(js_jobcache_gpus("", out, sizeof(out)), 0);
	assert_string_equal(out, "");
	const char *bad[] = {"GPU-abc", "0,", ",0", "0 1", "3-1", "0-", "all", "0,,1", "-1"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(js_jobcache_gpus(bad[i], out, sizeof(out)), -EINVAL);
	struct js_jobcache e = {.job_id = 7, .uid = 1000, .first_seen_ns = 5}, d;
	snprintf(e.gpus, sizeof(e.gpus), "0,1");
	char buf[512];
	assert_int_equal(js_jobcache_encode(&e, buf, sizeof(buf)), 0);
	assert_int_equal(js_jobcache_decode(buf, strlen(buf), &d), 0);
	assert_string_equal(d.gpus, "0,1");
	const char *old = "{\"account\":\"a\",\"cluster\":\"c\",\"first_seen_ns\":5,\"job_id\":7,\"partition\":\"p\",\"uid\":1000}";
	assert_int_equal(js_jobcache_decode(old, strlen(old), &d), 0);
	assert_string_equal(d.gpus, "");
	const char *forged = "{\"account\":\"a\",\"cluster\":\"c\",\"first_seen_ns\":5,\"gpus\":\"x\",\"job_id\":7,\"partition\":\"p\",\"uid\":1000}";
	assert_int_equal(js_jobcache_decode(forged, strlen(forged), &d), -EINVAL);
}

/* +gpu-io: a term after any policy, allowed only where the admin set
 * gpu_io_mhz; kept in the canonical form; dropped (counted) when not. */
static void policy_gpu_io(void **st)
{
	(void)st;
	struct js_conf c;
	struct js_policy p;
	char err[400], buf[200];
	js_conf_defaults(&c);
	assert_int_equal(js_policy_parse("io-dvfs+gpu-io", &p, err, sizeof(err)), 0);
	assert_int_equal(p.type, JS_POL_IO_DVFS);
	assert_true(p.gpu_io);
	assert_int_equal(js_policy_format(&p, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "io-dvfs+gpu-io");
	assert_int_equal(js_policy_parse("monitor+gpu-io", &p, err, sizeof(err)), 0);
	assert_true(p.gpu_io && p.type == JS_POL_MONITOR);
	assert_int_equal(js_policy_check(&p, &c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "gpu_io_mhz"));
	assert_int_equal(js_policy_enforce(&p, &c, err, sizeof(err)), 1);
	assert_false(p.gpu_io);
	char *ok[] = {"gpu_io_mhz=800"};
	assert_int_equal(js_conf_parse(1, ok, &c, err, sizeof(err)), 0);
	assert_int_equal(c.gpu_io_mhz, 800);
	assert_int_equal(js_policy_parse("phase:write=0.8+gpu-io", &p, err, sizeof(err)), 0);
	assert_true(p.gpu_io && p.nmap == 1);
	assert_int_equal(js_policy_check(&p, &c, err, sizeof(err)), 0);
	assert_int_equal(js_policy_enforce(&p, &c, err, sizeof(err)), 0);
	assert_true(p.gpu_io);
	const char *bad[] = {"+gpu-io", "gpu-io", "io-dvfs+gpu", "io-dvfs+gpu-io+gpu-io"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(js_policy_parse(bad[i], &p, err, sizeof(err)), -EINVAL);
	char *badc[][1] = {{"gpu_io_mhz=-1"}, {"gpu_io_mhz=100001"}, {"gpu_io_mhz=x"}};
	for (size_t i = 0; i < sizeof(badc) / sizeof(badc[0]); i++)
		assert_int_equal(js_conf_parse(1, badc[i], &c, err, sizeof(err)), -EINVAL);
}

/* +uncore-io: like +gpu-io, with uncore_io_mhz; both terms in either order,
 * each once; the canonical form lists +gpu-io first. */
static void policy_uncore_io(void **st)
{
	(void)st;
	struct js_conf c;
	struct js_policy p;
	char err[400], buf[200];
	js_conf_defaults(&c);
	assert_int_equal(c.uncore_io_mhz, 0);
	assert_int_equal(js_policy_parse("io-dvfs+uncore-io", &p, err, sizeof(err)), 0);
	assert_true(p.uncore_io && !p.gpu_io && p.type == JS_POL_IO_DVFS);
	assert_int_equal(js_policy_check(&p, &c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "uncore_io_mhz"));
	assert_int_equal(js_policy_enforce(&p, &c, err, sizeof(err)), 1);
	assert_false(p.uncore_io);
	char *ok[] = {"uncore_io_mhz=1200"};
	assert_int_equal(js_conf_parse(1, ok, &c, err, sizeof(err)), 0);
	assert_int_equal(c.uncore_io_mhz, 1200);
	const char *both[] = {"monitor+uncore-io+gpu-io", "monitor+gpu-io+uncore-io"};
	for (size_t i = 0; i < 2; i++) {
		assert_int_equal(js_policy_parse(both[i], &p, err, sizeof(err)), 0);
		assert_true(p.uncore_io && p.gpu_io && p.type == JS_POL_MONITOR);
		assert_int_equal(js_policy_format(&p, buf, sizeof(buf)), 0);
		assert_string_equal(buf, "monitor+gpu-io+uncore-io");
	}
	assert_int_equal(js_policy_parse("phase:write=0.8+uncore-io", &p, err, sizeof(err)), 0);
	assert_int_equal(js_policy_check(&p, &c, err, sizeof(err)), 0);
	assert_int_equal(js_policy_enforce(&p, &c, err, sizeof(err)), 0);
	assert_true(p.uncore_io && p.nmap == 1);
	const char *bad[] = {"+uncore-io", "uncore-io", "io-dvfs+uncore-io+uncore-io",
			     "io-dvfs+uncore"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(js_policy_parse(bad[i], &p, err, sizeof(err)), -EINVAL);
	char *badc[][1] = {{"uncore_io_mhz=-1"}, {"uncore_io_mhz=100001"}, {"uncore_io_mhz=x"}};
	for (size_t i = 0; i < sizeof(badc) / sizeof(badc[0]); i++)
		assert_int_equal(js_conf_parse(1, badc[i], &c, err, sizeof(err)), -EINVAL);
	assert_true(js_uncore_io_kind("write") && js_uncore_io_kind("flush"));
	assert_false(js_uncore_io_kind("checkpoint") || js_uncore_io_kind("compute"));
}

/* threads_per_core=: auto (0, the hardware's) or Slurm's ThreadsPerCore */
static void conf_threads_per_core(void **st)
{
	(void)st;
	struct js_conf c;
	char err[400];
	js_conf_defaults(&c);
	assert_int_equal(c.threads_per_core, 0);
	char *one[] = {"threads_per_core=1"}, *aut[] = {"threads_per_core=auto"};
	assert_int_equal(js_conf_parse(1, one, &c, err, sizeof(err)), 0);
	assert_int_equal(c.threads_per_core, 1);
	assert_int_equal(js_conf_parse(1, aut, &c, err, sizeof(err)), 0);
	assert_int_equal(c.threads_per_core, 0);
	char *bad[][1] = {{"threads_per_core=0"}, {"threads_per_core=257"}, {"threads_per_core=x"},
			  {"threads_per_core="}};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(js_conf_parse(1, bad[i], &c, err, sizeof(err)), -EINVAL);
		assert_non_null(strstr(err, "threads_per_core"));
	}
}

struct gfake {
	uint64_t now;
	int n;
	bool low[32];
};
static int g_set(void *ctx, double r, uint32_t *khz, uint64_t *took)
{
	(void)ctx;
	(void)r;
	*khz = 0;
	*took = 0;
	return 0;
}
static void g_snap(void *ctx, uint64_t *c, uint64_t *d, bool *u)
{
	(void)ctx;
	*c = *d = 0;
	*u = false;
}
static uint64_t g_now(void *ctx) { return ((struct gfake *)ctx)->now; }
static int g_gpu(void *ctx, bool low, uint32_t *mhz)
{
	struct gfake *f = ctx;
	f->low[f->n++] = low;
	*mhz = low ? 800 : 0;
	return 0;
}

/* The GPUs are lowered exactly while the innermost open phase is, or is
 * inside, a checkpoint, flush or write phase; a change only when that
 * changes; step end leaves the restore to the caller. */
static void phases_gpu_io_levels(void **st)
{
	(void)st;
	struct gfake f = {.now = 10};
	struct js_phase_ops ops = {.ctx = &f, .set_ratio = g_set, .snap = g_snap, .now_ns = g_now,
				   .set_gpu = g_gpu};
	struct js_phases *ps = js_phases_new(100, 4, &ops, 0);
	uint32_t seq, khz;
	assert_int_equal(js_phases_begin(ps, 0, "compute", NULL, JS_RATIO_INHERIT, 0, &seq, &khz), 0);
	assert_int_equal(f.n, 0);                     /* compute: left alone */
	assert_int_equal(js_phases_begin(ps, 0, "write", NULL, JS_RATIO_INHERIT, 0, &seq, &khz), 0);
	assert_int_equal(f.n, 1);
	assert_true(f.low[0]);
	assert_int_equal(js_phases_get(ps, seq)->gpu_mhz, 800);
	/* rank 1 joins the same write: no second change */
	assert_int_equal(js_phases_begin(ps, 1, "compute", NULL, JS_RATIO_INHERIT, 0, &seq, &khz), 0);
	assert_int_equal(js_phases_begin(ps, 1, "write", NULL, JS_RATIO_INHERIT, 0, &seq, &khz), 0);
	assert_int_equal(f.n, 1);
	assert_int_equal(js_phases_end(ps, 0, -1, 0, &seq), 0);
	assert_int_equal(f.n, 1);                     /* rank 1 still writes */
	assert_int_equal(js_phases_end(ps, 1, -1, 0, &seq), 0);
	assert_int_equal(f.n, 2);                     /* back in compute */
	assert_false(f.low[1]);
	assert_int_equal(js_phases_end(ps, 0, -1, 0, &seq), 0);
	assert_int_equal(js_phases_end(ps, 1, -1, 0, &seq), 0);
	/* a compress inside a checkpoint runs at the base clocks: only I/O
	 * kinds inherit the lowered clock (docs/phase-protocol.md) */
	assert_int_equal(js_phases_begin(ps, 0, "checkpoint", NULL, JS_RATIO_INHERIT, 0, &seq, &khz), 0);
	assert_int_equal(f.n, 3);
	assert_true(f.low[2]);
	assert_int_equal(js_phases_begin(ps, 0, "compress", NULL, JS_RATIO_INHERIT, 0, &seq, &khz), 0);
	assert_int_equal(f.n, 4);
	assert_false(f.low[3]);
	/* step end: every open phase closed, no change (the caller unlocks) */
	js_phases_close_all(ps, 20);
	assert_int_equal(f.n, 4);
	js_phases_free(ps);
}

static int g_unc(void *ctx, bool low, uint32_t *khz)
{
	struct gfake *f = ctx;
	f->low[f->n++] = low;
	*khz = low ? 1200000 : 0;
	return 0;
}

/* +uncore-io: lowered exactly while the innermost open phase is, or is
 * inside, a flush or write phase (not a checkpoint); the phase records
 * the cap. */
static void phases_uncore_io_levels(void **st)
{
	(void)st;
	struct gfake f = {.now = 10};
	struct js_phase_ops ops = {.ctx = &f, .set_ratio = g_set, .snap = g_snap, .now_ns = g_now,
				   .set_uncore = g_unc};
	struct js_phases *ps = js_phases_new(100, 4, &ops, 0);
	uint32_t seq, khz;
	assert_int_equal(js_phases_begin(ps, 0, "checkpoint", NULL, JS_RATIO_INHERIT, 0, &seq, &khz), 0);
	assert_int_equal(f.n, 0);
	assert_int_equal(js_phases_get(ps, seq)->uncore_khz, 0);
	assert_int_equal(js_phases_begin(ps, 0, "flush", NULL, JS_RATIO_INHERIT, 0, &seq, &khz), 0);
	assert_int_equal(f.n, 1);
	assert_true(f.low[0]);
	assert_int_equal(js_phases_get(ps, seq)->uncore_khz, 1200000);
	assert_int_equal(js_phases_begin(ps, 0, "compress", NULL, JS_RATIO_INHERIT, 0, &seq, &khz), 0);
	assert_int_equal(f.n, 2);                     /* inside the flush: base clocks */
	assert_false(f.low[1]);
	assert_int_equal(js_phases_end(ps, 0, -1, 0, &seq), 0);
	assert_int_equal(f.n, 3);                     /* back in the flush: low */
	assert_true(f.low[2]);
	assert_int_equal(js_phases_end(ps, 0, -1, 0, &seq), 0);
	assert_int_equal(f.n, 4);                     /* back in the checkpoint */
	assert_false(f.low[3]);
	assert_int_equal(js_phases_begin(ps, 0, "write", NULL, JS_RATIO_INHERIT, 0, &seq, &khz), 0);
	assert_int_equal(f.n, 5);
	assert_true(f.low[4]);
	js_phases_close_all(ps, 20);                  /* the caller restores */
	assert_int_equal(f.n, 5);
	js_phases_free(ps);
}

/* One rule for every clock (docs/phase-protocol.md, "Blocking and
 * overlapping I/O"): a phase of a non-I/O kind runs at the base CPU, GPU
 * and uncore clocks whatever encloses it (a compute marked inside an
 * asynchronous VELOC flush's overlap, or inside a write); an I/O kind
 * nested in another I/O phase inherits its clocks. */
struct allfake {
	uint64_t now;
	int nr, ng, nu;
	double ratios[32];
	bool glow[32], ulow[32];
};
static int a_set(void *ctx, double r, uint32_t *khz, uint64_t *took)
{
	struct allfake *f = ctx;
	f->ratios[f->nr++] = r;
	*khz = r == JS_RATIO_BASE ? 0 : (uint32_t)(r * 2400000);
	*took = 0;
	return 0;
}
static uint64_t a_now(void *ctx) { return ((struct allfake *)ctx)->now; }
static int a_gpu(void *ctx, bool low, uint32_t *mhz)
{
	struct allfake *f = ctx;
	f->glow[f->ng++] = low;
	*mhz = low ? 800 : 0;
	return 0;
}
static int a_unc(void *ctx, bool low, uint32_t *khz)
{
	struct allfake *f = ctx;
	f->ulow[f->nu++] = low;
	*khz = low ? 1200000 : 0;
	return 0;
}
static void phases_non_io_kinds_run_at_base_clocks(void **st)
{
	(void)st;
	struct allfake f = {.now = 10};
	struct js_phase_ops ops = {.ctx = &f, .set_ratio = a_set, .snap = g_snap, .now_ns = a_now,
				   .set_gpu = a_gpu, .set_uncore = a_unc};
	struct js_phases *ps = js_phases_new(100, 8, &ops, 0);
	uint32_t seq, khz;
	/* a write at 0.5 (the policy's ratio for write): all three lowered */
	assert_int_equal(js_phases_begin(ps, 0, "write", NULL, 0.5, 0, &seq, &khz), 0);
	assert_int_equal(f.nr, 1);
	assert_true(f.ratios[0] == 0.5);
	assert_true(f.ng == 1 && f.glow[0] && f.nu == 1 && f.ulow[0]);
	/* a compute inside it (no ratio of its own): every clock back to base */
	assert_int_equal(js_phases_begin(ps, 0, "compute", NULL, JS_RATIO_INHERIT, 0, &seq, &khz), 0);
	assert_int_equal(khz, 0);
	assert_true(f.nr == 2 && f.ratios[1] == JS_RATIO_BASE);
	assert_true(f.ng == 2 && !f.glow[1] && f.nu == 2 && !f.ulow[1]);
	assert_int_equal(js_phases_end(ps, 0, -1, 0, &seq), 0);
	assert_true(f.nr == 3 && f.ratios[2] == 0.5); /* back in the write */
	assert_true(f.ng == 3 && f.glow[2] && f.nu == 3 && f.ulow[2]);
	/* a flush nested in the write inherits its clocks: nothing changes */
	assert_int_equal(js_phases_begin(ps, 0, "flush", NULL, JS_RATIO_INHERIT, 0, &seq, &khz), 0);
	assert_true(f.nr == 3 && f.ng == 3 && f.nu == 3);
	assert_int_equal(js_phases_end(ps, 0, -1, 0, &seq), 0);
	assert_int_equal(js_phases_end(ps, 0, -1, 0, &seq), 0);
	assert_true(f.nr == 4 && f.ratios[3] == JS_RATIO_BASE);
	/* VELOC's asynchronous flush-overlap holds the program's compute: it
	 * is not I/O, and a compute inside it runs at the base clocks */
	assert_int_equal(js_phases_begin(ps, 0, "flush-overlap", NULL, JS_RATIO_INHERIT, 0, &seq, &khz), 0);
	assert_int_equal(js_phases_begin(ps, 0, "compute", NULL, JS_RATIO_INHERIT, 0, &seq, &khz), 0);
	assert_true(f.nr == 4 && f.ng == 4 && f.nu == 4);
	assert_false(f.glow[3]);
	js_phases_close_all(ps, 20);
	js_phases_free(ps);
}

/* max_phases is bounded so that a record stays within its documented size
 * (docs/record-format.md, "Size": 128 KiB + 1.5 KiB x phases + 160 B x
 * 4096 rank entries): at most 100000 phases; the error says the bound and
 * why (issue 23, defect 7). */
static void conf_max_phases_bound(void **st)
{
	(void)st;
	struct js_conf c;
	char err[400];
	char *ok[] = {"max_phases=100000"};
	assert_int_equal(js_conf_parse(1, ok, &c, err, sizeof(err)), 0);
	assert_int_equal(c.max_phases, 100000);
	assert_int_equal(c.max_phases, JS_MAX_PHASES_LIMIT);
	char *bad[][1] = {{"max_phases=100001"}, {"max_phases=1000000"}, {"max_phases=0"}};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = 0;
		assert_int_equal(js_conf_parse(1, bad[i], &c, err, sizeof(err)), -EINVAL);
		assert_non_null(strstr(err, "[1, 100000]"));
		assert_non_null(strstr(err, "record"));
	}
}

static void conf_defaults_and_keys(void **st)
{
	(void)st;
	struct js_conf c;
	char err[400];
	char *ok[] = {"spool=/var/spool/js", "state=/var/lib/js/", "sysfs=/sys", "socket_dir=/run/js",
		      "cluster=c1", "policies=monitor,io-dvfs", "default_policy=io-dvfs",
		      "min_ratio=0.6", "sample_ms=500", "max_phases=10", "max_depth=3", "rate=50",
		      "backend=sysfs,powercap"};
	assert_int_equal(js_conf_parse(13, ok, &c, err, sizeof(err)), 0);
	assert_string_equal(c.state, "/var/lib/js");
	assert_int_equal(c.default_policy, JS_POL_IO_DVFS);
	assert_true(c.min_ratio > 0.59 && c.min_ratio < 0.61);
	assert_int_equal(c.max_depth, 3);
	assert_int_equal(c.policies_mask, (1u << JS_POL_MONITOR) | (1u << JS_POL_IO_DVFS));

	assert_int_equal(js_conf_parse(0, NULL, &c, err, sizeof(err)), 0);
	assert_string_equal(c.socket_dir, "/run/joulestep");
	assert_int_equal(c.default_policy, JS_POL_MONITOR);
	assert_int_equal(c.max_depth, 4);
	assert_int_equal(c.rate, 1000);

	char *unknown[] = {"spool=/x", "colour=blue"};
	assert_int_equal(js_conf_parse(2, unknown, &c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "unknown key 'colour'"));
	assert_non_null(strstr(err, "allowed:"));
	char *bad[][1] = {{"spool=relative"}, {"socket_dir=/tmp/js"}, {"min_ratio=1.5"},
			  {"min_ratio=0"}, {"max_depth=99"}, {"rate=-1"}, {"policies=io-dvfs"},
			  {"policies=monitor,turbo"}, {"backend=nvml"}, {"cluster=a/b"},
			  {"noequals"}, {"default_policy=fixed:0.5"}, {"spool=/a/../b"}};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(js_conf_parse(1, bad[i], &c, err, sizeof(err)), -EINVAL);
	char *dp[] = {"policies=monitor", "default_policy=io-dvfs"};
	assert_int_equal(js_conf_parse(2, dp, &c, err, sizeof(err)), -EINVAL);
	/* AMD nodes without RAPL powercap zones: the amd_energy hwmon backend */
	char *amd[] = {"backend=powercap,sysfs,amd_energy"};
	assert_int_equal(js_conf_parse(1, amd, &c, err, sizeof(err)), 0);
	assert_string_equal(c.backend, "powercap,sysfs,amd_energy");
	char *ne[] = {"node_energy=pm_counters,hwmon"};
	assert_int_equal(js_conf_parse(1, ne, &c, err, sizeof(err)), 0);
	assert_string_equal(c.node_energy, "pm_counters,hwmon");
	char *ne_none[] = {"node_energy=none"};
	assert_int_equal(js_conf_parse(1, ne_none, &c, err, sizeof(err)), 0);
	assert_string_equal(c.node_energy, "");
	char *ne_bad[][1] = {{"node_energy=ipmi"}, {"node_energy=auto,hwmon"}, {"node_energy=/x"}};
	for (size_t i = 0; i < 3; i++)
		assert_int_equal(js_conf_parse(1, ne_bad[i], &c, err, sizeof(err)), -EINVAL);
	char *amd_bad[] = {"backend=amd_energy_x"};
	assert_int_equal(js_conf_parse(1, amd_bad, &c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "allowed: powercap,sysfs,amd_energy"));
	/* procfs= (shared-node inputs): /proc by default, an absolute path, %n */
	assert_int_equal(js_conf_parse(0, NULL, &c, err, sizeof(err)), 0);
	assert_string_equal(c.procfs, "/proc");
	char *pf[] = {"procfs=/fake/%n/proc"};
	assert_int_equal(js_conf_parse(1, pf, &c, err, sizeof(err)), 0);
	assert_int_equal(js_conf_expand_node(&c, "n3", err, sizeof(err)), 0);
	assert_string_equal(c.procfs, "/fake/n3/proc");
	char *pf_bad[][1] = {{"procfs=proc"}, {"procfs=/a/../proc"}};
	for (size_t i = 0; i < 2; i++)
		assert_int_equal(js_conf_parse(1, pf_bad[i], &c, err, sizeof(err)), -EINVAL);
}

/* %n in state, sysfs and socket_dir: the node name (several slurmd per host). */
static void conf_node_expansion(void **st)
{
	(void)st;
	struct js_conf c;
	char err[400];
	char *ok[] = {"spool=/var/spool/js", "state=/var/lib/js/%n", "sysfs=/fake/%n/hw/%n",
		      "socket_dir=/run/js-%n"};
	assert_int_equal(js_conf_parse(4, ok, &c, err, sizeof(err)), 0);
	assert_string_equal(c.state, "/var/lib/js/%n"); /* expanded only when the node is known */
	assert_int_equal(js_conf_expand_node(&c, "node2", err, sizeof(err)), 0);
	assert_string_equal(c.state, "/var/lib/js/node2");
	assert_string_equal(c.sysfs, "/fake/node2/hw/node2");
	assert_string_equal(c.socket_dir, "/run/js-node2");
	assert_string_equal(c.spool, "/var/spool/js");

	/* without %n nothing changes, whatever the node name */
	assert_int_equal(js_conf_parse(1, ok, &c, err, sizeof(err)), 0);
	assert_int_equal(js_conf_expand_node(&c, "", err, sizeof(err)), 0);
	assert_string_equal(c.state, "/var/lib/joulestep");

	/* unsafe or unknown node names are refused when %n is used */
	const char *badnode[] = {"", "..", ".", "a/b", "n 1", "x%n"};
	for (size_t i = 0; i < sizeof(badnode) / sizeof(badnode[0]); i++) {
		assert_int_equal(js_conf_parse(4, ok, &c, err, sizeof(err)), 0);
		assert_int_equal(js_conf_expand_node(&c, badnode[i], err, sizeof(err)), -EINVAL);
		assert_non_null(strstr(err, "node name"));
	}
	/* the expanded socket_dir is checked again */
	char *tmpsock[] = {"socket_dir=/%n/js"};
	assert_int_equal(js_conf_parse(1, tmpsock, &c, err, sizeof(err)), 0);
	assert_int_equal(js_conf_expand_node(&c, "tmp", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "world-writable"));
	/* too long once expanded */
	char longp[JS_PATH_MAX + 16], as[JS_PATH_MAX];
	memset(as, 'a', sizeof(as));
	as[JS_PATH_MAX - 71] = 0;
	snprintf(longp, sizeof(longp), "state=/%s/%%n", as); /* JS_PATH_MAX - 67 characters */
	char *lp[] = {longp};
	assert_int_equal(js_conf_parse(1, lp, &c, err, sizeof(err)), 0);
	assert_int_equal(js_conf_expand_node(&c, "nodename", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "longer than"));

	/* '%' other than %n, and %n in spool, are refused at parse time */
	char *bad[][1] = {{"state=/var/lib/%h"}, {"sysfs=/x/%"}, {"spool=/var/spool/%n"},
			  {"socket_dir=/run/%%n"}};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(js_conf_parse(1, bad[i], &c, err, sizeof(err)), -EINVAL);
		assert_non_null(strstr(err, "'%' is not allowed"));
	}
}

/* Found by tests/fuzz/fuzz_conf.c: a path ending in a "." or ".." component
 * ("/a/..") was accepted, against the documented "without . or ..
 * components" (only "/../" and "/./" inside the path were refused). */
static void conf_path_trailing_dot_components(void **st)
{
	(void)st;
	struct js_conf c;
	char err[400];
	char *bad[][1] = {{"spool=/var/spool/.."}, {"spool=/var/spool/."}, {"state=/var/lib/.."},
			  {"sysfs=/.."}, {"socket_dir=/run/joulestep/.."}, {"tuned=/etc/."},
			  {"spool=/a/..//"}, {"state=/var/lib/%n/.."}, {"spool=/."}};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = 0;
		assert_int_equal(js_conf_parse(1, bad[i], &c, err, sizeof(err)), -EINVAL);
		assert_non_null(strstr(err, "without . or .. components"));
	}
	/* names that only start or end with dots are fine */
	char *ok[] = {"spool=/var/spool/.js", "state=/var/lib/..js", "sysfs=/sys.", "tuned=/etc/a..",
		      "socket_dir=/run/js/"};
	assert_int_equal(js_conf_parse(5, ok, &c, err, sizeof(err)), 0);
	assert_string_equal(c.spool, "/var/spool/.js");
	assert_string_equal(c.state, "/var/lib/..js");
	assert_string_equal(c.socket_dir, "/run/js");
}

static void policies(void **st)
{
	(void)st;
	struct js_conf c;
	struct js_policy p;
	char err[400], buf[200];
	js_conf_defaults(&c);
	assert_int_equal(js_policy_parse("io-dvfs", &p, err, sizeof(err)), 0);
	assert_true(js_policy_kind_ratio(&p, &c, "compress") == 0.875);
	assert_true(js_policy_kind_ratio(&p, &c, "write") == 0.85);
	assert_true(js_policy_kind_ratio(&p, &c, "checkpoint") == JS_RATIO_INHERIT);
	assert_true(js_policy_base_ratio(&p) == 1.0);

	assert_int_equal(js_policy_parse("ckpt-dvfs", &p, err, sizeof(err)), 0);
	assert_true(js_policy_kind_ratio(&p, &c, "checkpoint") == c.min_ratio);
	assert_true(js_policy_kind_ratio(&p, &c, "flush") == JS_RATIO_BASE);
	assert_true(js_policy_kind_ratio(&p, &c, "compute") == JS_RATIO_INHERIT);

	assert_int_equal(js_policy_parse("fixed:0.75", &p, err, sizeof(err)), 0);
	assert_true(js_policy_base_ratio(&p) == 0.75);
	assert_int_equal(js_policy_parse("phase:write=0.8,compress=0.9,write=0.7", &p, err, sizeof(err)), 0);
	assert_int_equal(p.nmap, 2);
	assert_true(js_policy_kind_ratio(&p, &c, "write") == 0.7);
	assert_int_equal(js_policy_format(&p, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "phase:write=0.7,compress=0.9");

	const char *bad[] = {"", "turbo", "fixed:", "fixed:0", "fixed:1.2", "fixed:abc", "phase:",
			     "phase:write", "phase:WRITE=0.8", "phase:write=2", "fixed:nan", "fixed:-0.5"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = 0;
		assert_int_equal(js_policy_parse(bad[i], &p, err, sizeof(err)), -EINVAL);
		assert_true(strlen(err) > 0);
	}
	/* admin bounds */
	assert_int_equal(js_policy_parse("fixed:0.4", &p, err, sizeof(err)), 0);
	assert_int_equal(js_policy_check(&p, &c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "minimum ratio 0.5"));
	assert_int_equal(js_policy_enforce(&p, &c, err, sizeof(err)), 1);
	assert_true(p.fixed_ratio == 0.5);
	c.policies_mask = 1u << JS_POL_MONITOR;
	assert_int_equal(js_policy_parse("io-dvfs", &p, err, sizeof(err)), 0);
	assert_int_equal(js_policy_check(&p, &c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "allowed: monitor"));
	assert_int_equal(js_policy_enforce(&p, &c, err, sizeof(err)), 1);
	assert_int_equal(p.type, JS_POL_MONITOR);
	/* io-dvfs under a stricter min_ratio never goes below it */
	js_conf_defaults(&c);
	c.min_ratio = 0.9;
	assert_int_equal(js_policy_parse("io-dvfs", &p, err, sizeof(err)), 0);
	assert_true(js_policy_kind_ratio(&p, &c, "write") == 0.9);
}

/* The tuned= key and the tuned policy at submission. */
static void tuned_conf(void **st)
{
	(void)st;
	struct js_conf c;
	struct js_policy p;
	char err[400];
	/* no tuned= file: tuned is not in the defaults, and refused with a reason */
	assert_int_equal(js_conf_parse(0, NULL, &c, err, sizeof(err)), 0);
	assert_int_equal(c.tuned[0], 0);
	assert_false(c.policies_mask & (1u << JS_POL_TUNED));
	assert_int_equal(js_policy_parse("tuned", &p, err, sizeof(err)), 0);
	assert_int_equal(p.type, JS_POL_TUNED);
	assert_int_equal(p.nmap, 0);
	assert_int_equal(js_policy_check(&p, &c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "tuned needs the admin's tuned= file"));
	/* with one: in the defaults */
	char *ok[] = {"tuned=/etc/joulestep/tuned.json"};
	assert_int_equal(js_conf_parse(1, ok, &c, err, sizeof(err)), 0);
	assert_string_equal(c.tuned, "/etc/joulestep/tuned.json");
	assert_true(c.policies_mask & (1u << JS_POL_TUNED));
	assert_int_equal(js_policy_check(&p, &c, err, sizeof(err)), 0);
	char buf[200];
	js_policy_allowed(&c, buf, sizeof(buf));
	assert_non_null(strstr(buf, ", tuned"));
	/* an explicit policies= list decides */
	char *listed[] = {"tuned=/etc/js/t.json", "policies=monitor,tuned"};
	assert_int_equal(js_conf_parse(2, listed, &c, err, sizeof(err)), 0);
	assert_int_equal(c.policies_mask, (1u << JS_POL_MONITOR) | (1u << JS_POL_TUNED));
	char *unlisted[] = {"tuned=/etc/js/t.json", "policies=monitor,io-dvfs"};
	assert_int_equal(js_conf_parse(2, unlisted, &c, err, sizeof(err)), 0);
	assert_int_equal(js_policy_check(&p, &c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "not allowed on this cluster (allowed: monitor, io-dvfs)"));
	/* tuned listed without a file; relative or odd paths */
	char *nofile[] = {"policies=monitor,tuned"};
	assert_int_equal(js_conf_parse(1, nofile, &c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "tuned needs tuned=FILE"));
	char *bad[][1] = {{"tuned=tuned.json"}, {"tuned=/etc/../t.json"}, {"tuned=/etc/%n.json"}};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(js_conf_parse(1, bad[i], &c, err, sizeof(err)), -EINVAL);
	/* not a default policy */
	char *dp[] = {"tuned=/etc/js/t.json", "default_policy=tuned"};
	assert_int_equal(js_conf_parse(2, dp, &c, err, sizeof(err)), -EINVAL);
}

static int TP(const char *json, struct js_policy *p, char *nm, char *err)
{
	return js_tuned_parse(json, strlen(json), p, nm, 128, err, 400);
}

#define TUNED_HEAD "{\"format\": \"joulestep-policy\", \"version\": 1, "

/* The tuned file's JSON into the kind -> ratio map; then the same lookup
 * and admin clamping as phase:KIND=R. */
static void tuned_parse(void **st)
{
	(void)st;
	struct js_conf c;
	struct js_policy p;
	char err[400], nm[128], buf[300];
	js_conf_defaults(&c);
	const char *good = TUNED_HEAD "\"node_model\": \"c220g5\", "
		"\"policy\": \"phase:compress=0.886,write=0.886\", \"extra\": [1, 2], "
		"\"phases\": {\"compress\": {\"ratio\": 0.875, \"freq_khz\": 3500000}, "
		"\"write\": {\"ratio\": 0.3}, \"my_kind-2\": {\"ratio\": 1}}}";
	assert_int_equal(TP(good, &p, nm, err), 0);
	assert_int_equal(p.type, JS_POL_TUNED);
	assert_int_equal(p.nmap, 3);
	assert_string_equal(nm, "c220g5");
	/* the same lookup as phase:KIND=R; kinds not in the file inherit */
	assert_true(js_policy_kind_ratio(&p, &c, "compress") == 0.875);
	assert_true(js_policy_kind_ratio(&p, &c, "my_kind-2") == 1.0);
	assert_true(js_policy_kind_ratio(&p, &c, "checkpoint") == JS_RATIO_INHERIT);
	assert_true(js_policy_base_ratio(&p) == 1.0);
	assert_int_equal(js_policy_format(&p, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "tuned");
	/* the phase: policy with the same map looks up the same ratios */
	struct js_policy ph;
	assert_int_equal(js_policy_parse("phase:compress=0.875,write=0.3,my_kind-2=1", &ph, err, sizeof(err)), 0);
	for (const char *const *k = (const char *const[]){"compress", "write", "my_kind-2", "flush", NULL}; *k; k++)
		assert_true(js_policy_kind_ratio(&p, &c, *k) == js_policy_kind_ratio(&ph, &c, *k));
	/* admin bounds: write=0.3 is clamped to min_ratio, and said */
	c.policies_mask |= 1u << JS_POL_TUNED;
	assert_int_equal(js_policy_enforce(&p, &c, err, sizeof(err)), 1);
	assert_non_null(strstr(err, "tuned:write=0.3 clamped to min_ratio 0.5"));
	assert_true(js_policy_kind_ratio(&p, &c, "write") == 0.5);
	assert_int_equal(p.type, JS_POL_TUNED);

	/* node_model absent or null */
	assert_int_equal(TP(TUNED_HEAD "\"phases\": {\"write\": {\"ratio\": 0.85}}}", &p, nm, err), 0);
	assert_string_equal(nm, "");
	assert_int_equal(TP(TUNED_HEAD "\"node_model\": null, \"phases\": {\"write\": {\"ratio\": 0.85}}}", &p, nm, err), 0);
	assert_true(js_policy_kind_ratio(&p, &c, "write") == 0.85);

	/* 16 kinds is the limit */
	char many[2048];
	int n = snprintf(many, sizeof(many), TUNED_HEAD "\"phases\": {");
	for (int i = 0; i < JS_MAX_MAP; i++)
		n += snprintf(many + n, sizeof(many) - (size_t)n, "%s\"k%d\": {\"ratio\": 0.9}", i ? ", " : "", i);
	snprintf(many + n, sizeof(many) - (size_t)n, "}}");
	assert_int_equal(TP(many, &p, nm, err), 0);
	assert_int_equal(p.nmap, JS_MAX_MAP);
	snprintf(many + n, sizeof(many) - (size_t)n, ", \"k99\": {\"ratio\": 0.9}}}");
	strcpy(nm, "kept");
	struct js_policy before = p;
	assert_int_equal(TP(many, &p, nm, err), -EINVAL);
	assert_non_null(strstr(err, "at most 16"));
	assert_memory_equal(&p, &before, sizeof(p)); /* unchanged on error */
	assert_string_equal(nm, "kept");

	struct { const char *json, *msg; } bad[] = {
		{"", "not valid JSON"},
		{"{\"format\": \"joulestep-policy\", ", "not valid JSON"},
		{"[1, 2]", "not a JSON object"},
		{"{\"version\": 1, \"phases\": {\"write\": {\"ratio\": 0.8}}}", "\"format\" must be"},
		{"{\"format\": \"joulestep-record\", \"version\": 1, \"phases\": {}}", "\"format\" must be"},
		{"{\"format\": \"joulestep-policy\", \"version\": 2, \"phases\": {\"write\": {\"ratio\": 0.8}}}", "\"version\" must be 1"},
		{"{\"format\": \"joulestep-policy\", \"version\": \"1\", \"phases\": {\"write\": {\"ratio\": 0.8}}}", "\"version\" must be 1"},
		{TUNED_HEAD "\"policy\": \"phase:write=0.8\"}", "\"phases\" must be a non-empty object"},
		{TUNED_HEAD "\"phases\": {}}", "non-empty"},
		{TUNED_HEAD "\"phases\": [\"write\"]}", "non-empty"},
		{TUNED_HEAD "\"phases\": {\"write\": {\"ratio\": 0}}}", "(0, 1]"},
		{TUNED_HEAD "\"phases\": {\"write\": {\"ratio\": 1.2}}}", "(0, 1]"},
		{TUNED_HEAD "\"phases\": {\"write\": {\"ratio\": -0.5}}}", "(0, 1]"},
		{TUNED_HEAD "\"phases\": {\"write\": {\"ratio\": \"0.8\"}}}", "(0, 1]"},
		{TUNED_HEAD "\"phases\": {\"write\": {\"freq_khz\": 3400000}}}", "(0, 1]"},
		{TUNED_HEAD "\"phases\": {\"write\": 0.8}}", "(0, 1]"},
		{TUNED_HEAD "\"phases\": {\"Write\": {\"ratio\": 0.8}}}", "kind 'Write' invalid"},
		{TUNED_HEAD "\"phases\": {\"a b\": {\"ratio\": 0.8}}}", "invalid (allowed [a-z0-9_-]{1,32})"},
		{TUNED_HEAD "\"phases\": {\"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk\": {\"ratio\": 0.8}}}", "invalid"},
		{TUNED_HEAD "\"phases\": {\"write\": {\"ratio\": 0.8}, \"write\": {\"ratio\": 0.9}}}", "duplicate"},
		{TUNED_HEAD "\"node_model\": 5, \"phases\": {\"write\": {\"ratio\": 0.8}}}", "node_model"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = 0;
		assert_int_equal(TP(bad[i].json, &p, nm, err), -EINVAL);
		if (!strstr(err, bad[i].msg))
			fail_msg("case %zu: '%s' not in '%s'", i, bad[i].msg, err);
	}
	/* not NUL-terminated: only len bytes are read */
	const char *two = TUNED_HEAD "\"phases\": {\"write\": {\"ratio\": 0.8}}}garbage";
	assert_int_equal(js_tuned_parse(two, strlen(two) - 7, &p, nm, sizeof(nm), err, sizeof(err)), 0);
}

/* js_tuned_load: only a root-owned regular file that no user can write. */
static void tuned_load(void **st)
{
	(void)st;
	const char *dir = getenv("JS_TEST_TMPDIR");
	if (!dir || geteuid() != 0)
		skip(); /* needs root to make root-owned files: run by test_spank_unit.py as root */
	char path[512], link[512], err[400], nm[128];
	struct js_policy p;
	snprintf(path, sizeof(path), "%s/tuned.json", dir);
	snprintf(link, sizeof(link), "%s/tuned-link.json", dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(TUNED_HEAD "\"node_model\": \"m1\", \"phases\": {\"write\": {\"ratio\": 0.85}}}\n", f);
	fclose(f);
	assert_int_equal(chmod(path, 0644), 0);
	assert_int_equal(js_tuned_load(path, &p, nm, sizeof(nm), err, sizeof(err)), 0);
	assert_int_equal(p.nmap, 1);
	assert_string_equal(nm, "m1");
	/* group- or world-writable, or owned by a user: refused */
	assert_int_equal(chmod(path, 0664), 0);
	assert_int_equal(js_tuned_load(path, &p, nm, sizeof(nm), err, sizeof(err)), -EPERM);
	assert_non_null(strstr(err, "writable by root only"));
	assert_int_equal(chmod(path, 0646), 0);
	assert_int_equal(js_tuned_load(path, &p, nm, sizeof(nm), err, sizeof(err)), -EPERM);
	assert_int_equal(chmod(path, 0644), 0);
	assert_int_equal(chown(path, 65534, 65534), 0);
	assert_int_equal(js_tuned_load(path, &p, nm, sizeof(nm), err, sizeof(err)), -EPERM);
	assert_non_null(strstr(err, "owned by uid 65534; must be owned by root"));
	assert_int_equal(chown(path, 0, 0), 0);
	/* a symlink, even to a good file, a directory, a missing file */
	assert_int_equal(symlink(path, link), 0);
	assert_int_equal(js_tuned_load(link, &p, nm, sizeof(nm), err, sizeof(err)), -ELOOP);
	assert_non_null(strstr(err, "symbolic link"));
	assert_int_equal(js_tuned_load(dir, &p, nm, sizeof(nm), err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "not a regular file"));
	snprintf(link, sizeof(link), "%s/missing.json", dir);
	assert_int_equal(js_tuned_load(link, &p, nm, sizeof(nm), err, sizeof(err)), -ENOENT);
	/* malformed content, too big */
	f = fopen(path, "w");
	fputs("{\"format\": \"joulestep-policy\",", f);
	fclose(f);
	assert_int_equal(js_tuned_load(path, &p, nm, sizeof(nm), err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "not valid JSON"));
	assert_int_equal(truncate(path, JS_TUNED_MAX_BYTES + 1), 0);
	assert_int_equal(js_tuned_load(path, &p, nm, sizeof(nm), err, sizeof(err)), -EFBIG);
}

static int AP(const char *json, const char *app, uint32_t job, struct js_policy *p,
	      struct js_auto *a, char *err)
{
	return js_auto_parse(json, strlen(json), app, job, p, a, err, 400);
}

#define AUTO_HEAD "{\"format\": \"joulestep-auto\", \"version\": 1, "

/* The auto file: the app's map over the file's default, settled kinds at
 * fmax on baseline jobs (job_id % baseline_every == 0), the admin's clamp. */
static void auto_parse(void **st)
{
	(void)st;
	struct js_conf c;
	struct js_policy p;
	struct js_auto a;
	char err[400], buf[300];
	js_conf_defaults(&c);
	const char *good = AUTO_HEAD "\"bound_pct\": 5, \"baseline_every\": 4, "
		"\"default\": {\"write\": 0.85, \"compress\": 0.875}, "
		"\"apps\": {\"lammps\": {\"phases\": {"
		"\"write\": {\"ratio\": 0.55, \"state\": \"settled\", \"samples\": 9}, "
		"\"flush\": {\"ratio\": 0.7, \"state\": \"exploring\"}, "
		"\"ckpt\": {\"ratio\": 1, \"state\": \"guarded\"}}}, "
		"\"other\": {\"phases\": {\"write\": {\"ratio\": 0.3, \"state\": \"settled\"}}}}}";
	memset(&p, 0, sizeof(p));
	p.gpu_io = true; /* auto+gpu-io keeps its +gpu-io */
	assert_int_equal(AP(good, "lammps", 7, &p, &a, err), 0);
	assert_int_equal(p.type, JS_POL_AUTO);
	assert_true(p.gpu_io);
	assert_int_equal(p.nmap, 4);
	assert_int_equal(a.nstate, 4);
	assert_true(a.app_listed);
	assert_false(a.baseline);
	assert_int_equal(a.baseline_every, 4);
	assert_string_equal(a.app, "lammps");
	assert_true(js_policy_kind_ratio(&p, &c, "write") == 0.55);   /* the app's */
	assert_true(js_policy_kind_ratio(&p, &c, "compress") == 0.875); /* the default's */
	assert_true(js_policy_kind_ratio(&p, &c, "flush") == 0.7);
	assert_true(js_policy_kind_ratio(&p, &c, "ckpt") == 1.0);
	assert_true(js_policy_kind_ratio(&p, &c, "other") == JS_RATIO_INHERIT);
	for (size_t i = 0; i < p.nmap; i++) {
		const char *want = !strcmp(p.map[i].kind, "compress") ? "default" :
				   !strcmp(p.map[i].kind, "write") ? "settled" :
				   !strcmp(p.map[i].kind, "flush") ? "exploring" : "guarded";
		assert_string_equal(a.state[i], want);
	}
	assert_int_equal(strncmp(a.digest, "fnv1a64:", 8), 0);
	assert_int_equal(strlen(a.digest), 8 + 16);
	assert_int_equal(js_policy_format(&p, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "auto+gpu-io");
	/* a baseline job (8 % 4 == 0): settled kinds at fmax, the others as listed */
	char d1[32];
	snprintf(d1, sizeof(d1), "%s", a.digest);
	assert_int_equal(AP(good, "lammps", 8, &p, &a, err), 0);
	assert_true(a.baseline);
	assert_true(js_policy_kind_ratio(&p, &c, "write") == 1.0);
	assert_true(js_policy_kind_ratio(&p, &c, "flush") == 0.7);
	assert_true(js_policy_kind_ratio(&p, &c, "compress") == 0.875);
	assert_string_equal(a.digest, d1); /* the same file, the same digest */
	/* an app the file does not list: the default map */
	assert_int_equal(AP(good, "vasp", 7, &p, &a, err), 0);
	assert_false(a.app_listed);
	assert_int_equal(p.nmap, 2);
	assert_true(js_policy_kind_ratio(&p, &c, "write") == 0.85);
	assert_true(js_policy_kind_ratio(&p, &c, "flush") == JS_RATIO_INHERIT);
	/* the admin's floor clamps a learnt ratio, and says so */
	p.gpu_io = false;
	assert_int_equal(AP(good, "other", 7, &p, &a, err), 0);
	c.policies_mask |= 1u << JS_POL_AUTO;
	assert_int_equal(js_policy_enforce(&p, &c, err, sizeof(err)), 1);
	assert_non_null(strstr(err, "auto:write=0.3 clamped to min_ratio 0.5"));
	assert_true(js_policy_kind_ratio(&p, &c, "write") == 0.5);
	/* baseline_every defaults to 10; a different file, a different digest */
	assert_int_equal(AP(AUTO_HEAD "\"default\": {\"write\": 0.9}}", "x", 20, &p, &a, err), 0);
	assert_int_equal(a.baseline_every, 10);
	assert_true(a.baseline);
	assert_string_not_equal(a.digest, d1);

	struct { const char *json, *msg; } bad[] = {
		{"[]", "not a JSON object"},
		{"{\"format\": \"joulestep-policy\", \"version\": 1}", "\"format\" must be \"joulestep-auto\""},
		{AUTO_HEAD "\"version\": 2}", "not valid JSON"}, /* duplicate key */
		{"{\"format\": \"joulestep-auto\", \"version\": 2}", "\"version\" must be 1"},
		{AUTO_HEAD "\"baseline_every\": 0}", "baseline_every"},
		{AUTO_HEAD "\"baseline_every\": 2.5}", "baseline_every"},
		{AUTO_HEAD "\"default\": {\"write\": 1.5}}", "default.write must be a number in (0, 1]"},
		{AUTO_HEAD "\"default\": {\"Write\": 0.8}}", "invalid"},
		{AUTO_HEAD "\"apps\": []}", "\"apps\" must be an object"},
		{AUTO_HEAD "\"apps\": {\"x\": {\"phases\": {\"write\": {\"ratio\": 0}}}}}", "ratio must be a number in (0, 1]"},
		{AUTO_HEAD "\"apps\": {\"x\": {\"phases\": {\"write\": {\"ratio\": 0.8, \"state\": \"done\"}}}}}", "state must be"},
		{AUTO_HEAD "\"apps\": {\"x\": {\"phases\": 3}}}", "must be {\"phases\""},
		{"{\"format\": \"joulestep-auto\",", "not valid JSON"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct js_policy before = p;
		int rc = AP(bad[i].json, "x", 1, &p, &a, err);
		if (rc != -EINVAL || !strstr(err, bad[i].msg))
			fail_msg("case %zu: rc %d err '%s' (want '%s')", i, rc, err, bad[i].msg);
		assert_memory_equal(&p, &before, sizeof(p));
	}
	/* 16 kinds with the default's is the limit */
	char many[4096];
	int n = snprintf(many, sizeof(many), AUTO_HEAD "\"default\": {");
	for (int i = 0; i < JS_MAX_MAP; i++)
		n += snprintf(many + n, sizeof(many) - (size_t)n, "%s\"k%d\": 0.9", i ? ", " : "", i);
	snprintf(many + n, sizeof(many) - (size_t)n,
		 "}, \"apps\": {\"x\": {\"phases\": {\"new\": {\"ratio\": 0.8, \"state\": \"exploring\"}}}}}");
	assert_int_equal(AP(many, "y", 1, &p, &a, err), 0);
	assert_int_equal(p.nmap, JS_MAX_MAP);
	assert_int_equal(AP(many, "x", 1, &p, &a, err), -EINVAL);
	assert_non_null(strstr(err, "at most 16"));
}

/* auto= and the auto policy at submission */
static void auto_conf(void **st)
{
	(void)st;
	struct js_conf c;
	struct js_policy p;
	char err[400], buf[300];
	js_conf_defaults(&c);
	assert_int_equal(js_policy_parse("auto", &p, err, sizeof(err)), 0);
	assert_int_equal(p.type, JS_POL_AUTO);
	assert_int_equal(js_policy_check(&p, &c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "auto needs the admin's auto= file"));
	char *ok[] = {"auto=/var/lib/joulestep/auto.json"};
	assert_int_equal(js_conf_parse(1, ok, &c, err, sizeof(err)), 0);
	assert_string_equal(c.autofile, "/var/lib/joulestep/auto.json");
	assert_int_equal(js_policy_check(&p, &c, err, sizeof(err)), 0);
	js_policy_allowed(&c, buf, sizeof(buf));
	assert_non_null(strstr(buf, ", auto"));
	char *nofile[] = {"policies=monitor,auto"};
	assert_int_equal(js_conf_parse(1, nofile, &c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "auto needs auto=FILE"));
	char *dp[] = {"auto=/etc/js/a.json", "default_policy=auto"};
	assert_int_equal(js_conf_parse(2, dp, &c, err, sizeof(err)), 0);
	assert_int_equal(c.default_policy, JS_POL_AUTO);
	char *dpno[] = {"default_policy=auto"};
	assert_int_equal(js_conf_parse(1, dpno, &c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "auto needs auto=FILE"));
	char *rel[] = {"auto=auto.json"};
	assert_int_equal(js_conf_parse(1, rel, &c, err, sizeof(err)), -EINVAL);
}

/* the auto file is read under the tuned file's rules (one reader) */
static void auto_load(void **st)
{
	(void)st;
	const char *dir = getenv("JS_TEST_TMPDIR");
	if (!dir || geteuid() != 0)
		skip();
	char path[512], link[512], err[400];
	struct js_policy p;
	struct js_auto a;
	memset(&p, 0, sizeof(p));
	snprintf(path, sizeof(path), "%s/auto.json", dir);
	snprintf(link, sizeof(link), "%s/auto-link.json", dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(AUTO_HEAD "\"default\": {\"write\": 0.85}}\n", f);
	fclose(f);
	assert_int_equal(chmod(path, 0644), 0);
	assert_int_equal(js_auto_load(path, "a", 1, &p, &a, err, sizeof(err)), 0);
	assert_int_equal(p.nmap, 1);
	assert_int_equal(chmod(path, 0664), 0);
	assert_int_equal(js_auto_load(path, "a", 1, &p, &a, err, sizeof(err)), -EPERM);
	assert_non_null(strstr(err, "writable by root only"));
	assert_int_equal(chmod(path, 0644), 0);
	assert_int_equal(chown(path, 65534, 65534), 0);
	assert_int_equal(js_auto_load(path, "a", 1, &p, &a, err, sizeof(err)), -EPERM);
	assert_int_equal(chown(path, 0, 0), 0);
	assert_int_equal(symlink(path, link), 0);
	assert_int_equal(js_auto_load(link, "a", 1, &p, &a, err, sizeof(err)), -ELOOP);
	assert_int_equal(truncate(path, JS_AUTO_MAX_BYTES + 1), 0);
	assert_int_equal(js_auto_load(path, "a", 1, &p, &a, err, sizeof(err)), -EFBIG);
}

static void tags(void **st)
{
	(void)st;
	struct js_tags t = {0};
	char err[400];
	assert_int_equal(js_tags_parse("strategy=veloc,tier=dram", &t, err, sizeof(err)), 0);
	assert_int_equal(t.n, 2);
	assert_string_equal(t.t[1].key, "tier");
	assert_int_equal(js_tags_parse("dump=sz,eb=1e-3,tier=nvme", &t, err, sizeof(err)), 0);
	assert_int_equal(t.n, 4);
	assert_string_equal(t.t[1].val, "nvme");
	const char *bad[] = {"", "novalue", "=v", "k=", "k=v w", "k=v;rm", "a=b,,c=d", "k=$(x)",
			     "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk=v"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct js_tags u = {0};
		assert_int_equal(js_tags_parse(bad[i], &u, err, sizeof(err)), -EINVAL);
		assert_non_null(strstr(err, "allowed"));
		assert_int_equal(u.n, 0);
	}
	struct js_tags many = {0};
	char buf[400] = "";
	for (int i = 0; i < 17; i++)
		snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), "%sk%d=v", i ? "," : "", i);
	assert_int_equal(js_tags_parse(buf, &many, err, sizeof(err)), -EINVAL);
}

static int P(const char *s, struct js_msg *m)
{
	const char *why = NULL;
	return js_msg_parse(s, strlen(s), m, &why);
}

static void protocol(void **st)
{
	(void)st;
	struct js_msg m;
	assert_int_equal(P("JS1 BEGIN write out.h5 rank=3 t=12345 sync", &m), 0);
	assert_int_equal(m.op, JS_OP_BEGIN);
	assert_string_equal(m.kind, "write");
	assert_string_equal(m.label, "out.h5");
	assert_int_equal(m.rank, 3);
	assert_true(m.t_ns == 12345);
	assert_true(m.sync);
	assert_int_equal(P("JS1 BEGIN compress - rank=0 t=1", &m), 0);
	assert_string_equal(m.label, "");
	assert_false(m.sync);
	assert_int_equal(P("JS1 BEGIN compress", &m), 0);
	assert_int_equal(m.rank, -1);
	assert_int_equal(P("JS1 END bytes=1048576 rank=1 t=99", &m), 0);
	assert_true(m.bytes == 1048576);
	assert_int_equal(P("JS1 END bytes=- rank=1 t=99\n", &m), 0);
	assert_true(m.bytes == -1);
	assert_int_equal(P("JS1 PING sync", &m), 0);
	assert_int_equal(m.op, JS_OP_PING);

	assert_int_equal(P("JS2 BEGIN write", &m), EPROTO);
	assert_int_equal(P("JS1 BEGIN Write", &m), EINVAL);
	assert_int_equal(P("JS1 BEGIN write bad;label", &m), EINVAL);
	assert_int_equal(P("JS1 BEGIN write - rank=-1", &m), EINVAL);
	assert_int_equal(P("JS1 BEGIN write - rank=x sync", &m), EINVAL);
	assert_true(m.sync); /* a malformed sync request still gets its reply */
	assert_int_equal(P("JS1 END bytes=-5", &m), EINVAL);
	assert_int_equal(P("JS1 BEGIN write - bytes=5", &m), EINVAL);
	assert_int_equal(P("JS1 FOO", &m), EINVAL);
	assert_int_equal(P("", &m), EINVAL);
	assert_int_equal(P("JS1", &m), EINVAL);
	char nul[] = "JS1 BEGIN a\0b";
	const char *why;
	assert_int_equal(js_msg_parse(nul, sizeof(nul) - 1, &m, &why), EINVAL);
	char big[300];
	memset(big, 'a', sizeof(big));
	assert_int_equal(js_msg_parse(big, sizeof(big), &m, &why), EMSGSIZE);
}

static void bucket(void **st)
{
	(void)st;
	struct js_bucket b;
	js_bucket_init(&b, 10, 0);
	int n = 0;
	for (int i = 0; i < 100; i++)
		n += js_bucket_take(&b, 0);
	assert_int_equal(n, 10);
	assert_false(js_bucket_take(&b, 50000000)); /* 0.5 token after 50 ms */
	assert_true(js_bucket_take(&b, 100000000)); /* 1 token after 100 ms */
	n = 0;
	for (int i = 0; i < 100; i++)
		n += js_bucket_take(&b, 10000000000ULL);
	assert_int_equal(n, 10); /* refill is capped at the burst */
}

/* ---- phases with recorded callbacks ------------------------------------ */
struct fake {
	uint64_t now, cpu, dram;
	int nset;
	double ratios[64];
};

static int f_set(void *ctx, double ratio, uint32_t *khz, uint64_t *took)
{
	struct fake *f = ctx;
	f->ratios[f->nset++] = ratio;
	*khz = ratio == JS_RATIO_BASE ? 2400000 : (uint32_t)(ratio * 2400000);
	*took = 1000;
	return 0;
}
static void f_snap(void *ctx, uint64_t *c, uint64_t *d, bool *u)
{
	struct fake *f = ctx;
	*c = f->cpu;
	*d = f->dram;
	*u = false;
}
static uint64_t f_now(void *ctx) { return ((struct fake *)ctx)->now; }

static void phases_collective_and_nesting(void **st)
{
	(void)st;
	struct fake f = {.now = 1000};
	struct js_phase_ops ops = {&f, f_set, f_snap, f_now, NULL, NULL, NULL};
	struct js_conf c;
	struct js_policy p;
	char err[100];
	js_conf_defaults(&c);
	js_policy_parse("io-dvfs", &p, err, sizeof(err));
	struct js_phases *ps = js_phases_new(100, 2, &ops, 0);
	uint32_t seq, khz;
#define R(k) js_policy_kind_ratio(&p, &c, k)
	/* rank 0 and 1 enter checkpoint #0 at t=1000/1100 */
	f.cpu = 10;
	assert_int_equal(js_phases_begin(ps, 0, "checkpoint", "c0", R("checkpoint"), 1000, &seq, &khz), 0);
	assert_int_equal(seq, 0);
	assert_int_equal(khz, 0); /* io-dvfs leaves checkpoints at the base clock */
	f.now = 1100;
	assert_int_equal(js_phases_begin(ps, 1, "checkpoint", "c0", R("checkpoint"), 1100, &seq, &khz), 0);
	assert_int_equal(seq, 0);
	assert_int_equal(f.nset, 0);
	/* nested compress: the first rank in sets 0.875, same step phase for both */
	f.now = 1200;
	f.cpu = 20;
	assert_int_equal(js_phases_begin(ps, 0, "compress", NULL, R("compress"), 1200, &seq, &khz), 0);
	assert_int_equal(seq, 1);
	assert_int_equal(khz, 2100000);
	assert_int_equal(f.nset, 1);
	assert_true(f.ratios[0] == 0.875);
	assert_int_equal(js_phases_begin(ps, 1, "compress", NULL, R("compress"), 1250, &seq, &khz), 0);
	assert_int_equal(seq, 1);
	assert_int_equal(f.nset, 1);
	/* depth limit 2 */
	assert_int_equal(js_phases_begin(ps, 0, "write", NULL, R("write"), 1260, &seq, &khz), -ERANGE);
	/* rank 0 leaves compress: clock stays until the last rank leaves */
	f.now = 1300;
	assert_int_equal(js_phases_end(ps, 0, 100, 1300, &seq), 0);
	assert_int_equal(f.nset, 1);
	f.now = 1400;
	f.cpu = 50;
	assert_int_equal(js_phases_end(ps, 1, 200, 1400, &seq), 0);
	assert_int_equal(f.nset, 2);
	assert_true(f.ratios[1] == JS_RATIO_BASE); /* back to the enclosing level */
	const struct js_sphase *cp = js_phases_get(ps, 1);
	assert_true(cp->start_ns == 1200 && cp->end_ns == 1400);
	assert_true(cp->e_cpu1_uj - cp->e_cpu0_uj == 30);
	assert_true(cp->bytes == 300);
	assert_int_equal(cp->nranks, 2);
	assert_int_equal(cp->parent_seq, 0);
	assert_int_equal(cp->depth, 1);
	/* write under checkpoint for rank 0 only */
	f.now = 1900;
	assert_int_equal(js_phases_begin(ps, 0, "write", NULL, R("write"), 1500, &seq, &khz), 0);
	assert_int_equal(khz, 2040000);
	assert_int_equal(js_phases_end(ps, 0, -1, 1600, &seq), 0);
	assert_true(js_phases_get(ps, 2)->bytes == -1);
	/* END without an open phase */
	assert_int_equal(js_phases_end(ps, 7, -1, 1600, &seq), -ENOENT);
	/* second checkpoint of rank 0 is a new step phase (n-th of kind) */
	assert_int_equal(js_phases_end(ps, 0, -1, 1700, &seq), 0);
	assert_int_equal(js_phases_begin(ps, 0, "checkpoint", NULL, R("checkpoint"), 1800, &seq, &khz), 0);
	assert_int_equal(seq, 3);
	/* rank 1 still in checkpoint #0; step end closes both */
	f.now = 2000;
	js_phases_close_all(ps, 2000);
	assert_true(js_phases_get(ps, 0)->closed_by_step_end);
	assert_true(js_phases_get(ps, 0)->end_ns == 2000);
	assert_true(js_phases_get(ps, 0)->marker_end_ns == 2000);
	assert_true(js_phases_level(ps) == JS_RATIO_BASE);
	/* client timestamps are clamped into [step start, now]; the phase's
	 * start is when the plugin handled it (and read the meter) */
	assert_true(js_phases_get(ps, 3)->marker_start_ns == 1800);
	assert_true(js_phases_get(ps, 3)->start_ns == 1900);
	js_phases_free(ps);
}

/* f_set without its record of ratios (room for 64): for long runs */
static int f_set_quiet(void *ctx, double ratio, uint32_t *khz, uint64_t *took)
{
	struct fake *f = ctx;
	f->nset++;
	*khz = ratio == JS_RATIO_BASE ? 2400000 : (uint32_t)(ratio * 2400000);
	*took = 1000;
	return 0;
}

/* Many phases, many ranks, and phases closed out of their opening order:
 * the same merging, nesting and clock level as ever, however large the
 * step (BEGIN/END find their phase without scanning: issue 23, defect 7). */
static void phases_many_keep_their_rules(void **st)
{
	(void)st;
	struct fake f = {.now = 10};
	struct js_phase_ops ops = {&f, f_set_quiet, f_snap, f_now, NULL, NULL, NULL};
	uint32_t seq, khz;
	enum { NP = 20000, NR = 3 };
	struct js_phases *ps = js_phases_new(JS_MAX_PHASES_LIMIT, 4, &ops, 5);
	/* rank r enters its k-th "compute" and, inside it, its k-th "write";
	 * ranks take turns phase by phase, so every pair merges */
	for (int k = 0; k < NP / 2; k++)
		for (int r = 0; r < NR; r++) {
			uint32_t s1, s2;
			assert_int_equal(js_phases_begin(ps, r, "compute", NULL, JS_RATIO_INHERIT, 0, &s1, &khz), 0);
			assert_int_equal(js_phases_begin(ps, r, "write", NULL, 0.5, 0, &s2, &khz), 0);
			assert_int_equal(s1, 2 * k);
			assert_int_equal(s2, 2 * k + 1);
			assert_int_equal(js_phases_end(ps, r, r, 0, &seq), 0);
			assert_int_equal(seq, s2);
			assert_int_equal(js_phases_end(ps, r, -1, 0, &seq), 0);
			assert_int_equal(seq, s1);
		}
	assert_int_equal(js_phases_count(ps), NP);
	for (size_t i = 0; i < NP; i++) {
		const struct js_sphase *p = js_phases_get(ps, i);
		assert_int_equal(p->nranks, NR);
		assert_int_equal(p->nopen, 0);
		assert_int_equal(p->depth, i % 2);
		assert_int_equal(p->parent_seq, i % 2 ? (int)i - 1 : -1);
		assert_int_equal(p->nth, i / 2);
		if (i % 2)
			assert_true(p->bytes == 0 + 1 + 2);
	}
	assert_true(js_phases_level(ps) == JS_RATIO_BASE);
	/* the first "write" at depth 0 of ranks 7 and 0 merge; rank 0's
	 * second "compute" (nth NP/2) is new */
	assert_int_equal(js_phases_begin(ps, 7, "write", NULL, JS_RATIO_INHERIT, 0, &seq, &khz), 0);
	assert_int_equal(seq, NP);
	assert_int_equal(js_phases_begin(ps, 0, "write", NULL, JS_RATIO_INHERIT, 0, &seq, &khz), 0);
	assert_int_equal(seq, NP);
	assert_int_equal(js_phases_begin(ps, 1, "compute", NULL, JS_RATIO_INHERIT, 0, &seq, &khz), 0);
	assert_int_equal(seq, NP + 1);
	/* closed out of opening order: the level follows the latest still open */
	assert_int_equal(js_phases_begin(ps, 8, "flush", NULL, 0.7, 0, &seq, &khz), 0);
	assert_int_equal(seq, NP + 2);
	assert_true(js_phases_level(ps) == 0.7);
	assert_int_equal(js_phases_begin(ps, 9, "flush", NULL, 0.6, 0, &seq, &khz), 0);
	assert_int_equal(seq, NP + 2);            /* merged: rank 9's 1st flush */
	assert_int_equal(js_phases_begin(ps, 10, "compress", NULL, 0.6, 0, &seq, &khz), 0);
	assert_int_equal(seq, NP + 3);
	assert_true(js_phases_level(ps) == 0.6);
	assert_int_equal(js_phases_end(ps, 8, -1, 0, &seq), 0); /* flush still open (rank 9) */
	assert_true(js_phases_level(ps) == 0.6);
	assert_int_equal(js_phases_end(ps, 10, -1, 0, &seq), 0);
	assert_int_equal(seq, NP + 3);
	assert_true(js_phases_level(ps) == 0.7); /* back to the flush's */
	assert_int_equal(js_phases_end(ps, 9, -1, 0, &seq), 0);
	assert_true(js_phases_level(ps) == JS_RATIO_BASE); /* write, compute: the base */
	assert_int_equal(js_phases_end(ps, 7, -1, 0, &seq), 0);
	assert_int_equal(seq, NP);
	assert_int_equal(js_phases_get(ps, NP)->nopen, 1);   /* rank 0 is still in */
	js_phases_close_all(ps, 0);
	assert_true(js_phases_get(ps, NP)->closed_by_step_end);
	assert_true(js_phases_get(ps, NP + 1)->closed_by_step_end);
	assert_false(js_phases_get(ps, NP + 2)->closed_by_step_end);
	assert_int_equal(js_phases_get(ps, NP)->nopen, 0);
	js_phases_free(ps);
}

static void phases_ckpt_and_limits(void **st)
{
	(void)st;
	struct fake f = {.now = 10};
	struct js_phase_ops ops = {&f, f_set, f_snap, f_now, NULL, NULL, NULL};
	struct js_conf c;
	struct js_policy p;
	char err[100];
	js_conf_defaults(&c);
	js_policy_parse("ckpt-dvfs", &p, err, sizeof(err));
	struct js_phases *ps = js_phases_new(3, 4, &ops, 5);
	uint32_t seq, khz;
	assert_int_equal(js_phases_begin(ps, 0, "checkpoint", NULL, R("checkpoint"), 999999, &seq, &khz), 0);
	assert_true(js_phases_get(ps, 0)->start_ns == 10); /* future t clamped to now */
	assert_int_equal(khz, 1200000);
	/* flush is never throttled, even nested */
	assert_int_equal(js_phases_begin(ps, 0, "flush", NULL, R("flush"), 0, &seq, &khz), 0);
	assert_int_equal(khz, 0);
	assert_true(f.ratios[1] == JS_RATIO_BASE);
	assert_int_equal(js_phases_end(ps, 0, -1, 0, &seq), 0);
	assert_true(f.ratios[2] == 0.5); /* back to the checkpoint's clock */
	/* a compress inside runs at the base clock: not an I/O kind */
	assert_int_equal(js_phases_begin(ps, 0, "compress", NULL, R("compress"), 0, &seq, &khz), 0);
	assert_int_equal(khz, 0);
	assert_true(f.ratios[3] == JS_RATIO_BASE);
	/* max_phases=3 */
	assert_int_equal(js_phases_begin(ps, 0, "write", NULL, R("write"), 0, &seq, &khz), -ENOSPC);
	assert_int_equal(js_phases_end(ps, 0, -1, 0, &seq), 0);
	assert_true(f.ratios[4] == 0.5); /* back to the checkpoint's clock */
	js_phases_free(ps);
}

/* Untrusted markers cannot make the server keep unbounded state. */
static void phases_hostile_bounds(void **st)
{
	(void)st;
	struct fake f = {.now = 10};
	struct js_phase_ops ops = {&f, f_set, f_snap, f_now, NULL, NULL, NULL};
	uint32_t seq, khz;
	/* bytes= up to INT64_MAX from every rank: the sum saturates */
	struct js_phases *ps = js_phases_new(10, 4, &ops, 5);
	assert_int_equal(js_phases_begin(ps, 0, "write", NULL, JS_RATIO_INHERIT, 0, &seq, &khz), 0);
	assert_int_equal(js_phases_begin(ps, 1, "write", NULL, JS_RATIO_INHERIT, 0, &seq, &khz), 0);
	assert_int_equal(js_phases_begin(ps, 2, "write", NULL, JS_RATIO_INHERIT, 0, &seq, &khz), 0);
	assert_int_equal(js_phases_end(ps, 0, INT64_MAX, 0, &seq), 0);
	assert_int_equal(js_phases_end(ps, 1, INT64_MAX, 0, &seq), 0);
	assert_int_equal(js_phases_end(ps, 2, 5, 0, &seq), 0);
	assert_true(js_phases_get(ps, 0)->bytes == INT64_MAX);
	/* distinct ranks are bounded; known ranks go on */
	for (int r = 3; r < JS_MAX_RANKS; r++)
		assert_int_equal(js_phases_begin(ps, r, "write", NULL, JS_RATIO_INHERIT, 0, &seq, &khz), 0);
	assert_int_equal(js_phases_begin(ps, JS_MAX_RANKS, "write", NULL, JS_RATIO_INHERIT, 0, &seq, &khz), -EUSERS);
	assert_int_equal(js_phases_begin(ps, 0x7fffffff, "write", NULL, JS_RATIO_INHERIT, 0, &seq, &khz), -EUSERS);
	assert_int_equal(js_phases_begin(ps, 0, "compress", NULL, JS_RATIO_INHERIT, 0, &seq, &khz), 0);
	js_phases_free(ps);

	/* a BEGIN refused for max_phases keeps nothing (distinct kinds used
	 * to leave a per-rank counter each, forever) */
	ps = js_phases_new(1, 4, &ops, 5);
	assert_int_equal(js_phases_begin(ps, 0, "a", NULL, JS_RATIO_INHERIT, 0, &seq, &khz), 0);
	assert_int_equal(js_phases_end(ps, 0, -1, 0, &seq), 0);
	char kind[16];
	snprintf(kind, sizeof(kind), "k0");
	assert_int_equal(js_phases_begin(ps, 0, kind, NULL, JS_RATIO_INHERIT, 0, &seq, &khz), -ENOSPC);
	struct mallinfo2 m0 = mallinfo2();
	for (int i = 1; i < 100000; i++) {
		snprintf(kind, sizeof(kind), "k%d", i);
		assert_int_equal(js_phases_begin(ps, 0, kind, NULL, JS_RATIO_INHERIT, 0, &seq, &khz), -ENOSPC);
	}
	struct mallinfo2 m1 = mallinfo2();
	assert_true(m1.uordblks + m1.hblkhd <= m0.uordblks + m0.hblkhd + 4096);
	js_phases_free(ps);

	/* rank entries (rank x step-level phase) are bounded too */
	enum { NR = 64, NP = JS_MAX_RANK_ENTRIES / NR };
	ps = js_phases_new(NP + 10, 4, &ops, 5);
	for (int k = 0; k < NP; k++)
		for (int r = 0; r < NR; r++) {
			assert_int_equal(js_phases_begin(ps, r, "a", NULL, JS_RATIO_INHERIT, 0, &seq, &khz), 0);
			assert_int_equal(js_phases_end(ps, r, -1, 0, &seq), 0);
		}
	assert_int_equal(js_phases_count(ps), NP);
	assert_int_equal(js_phases_begin(ps, 0, "a", NULL, JS_RATIO_INHERIT, 0, &seq, &khz), -ENOSPC);
	assert_int_equal(js_phases_count(ps), NP);
	js_phases_free(ps);
}

/* An asynchronous BEGIN that was not recorded (rate limit, refusal, step
 * end) is matched by the rank's next END: the ENDs of recorded phases still
 * close exactly those phases, and the clock follows them. */
static void phases_skipped_begin_keeps_nesting(void **st)
{
	(void)st;
	struct fake f = {.now = 100};
	struct js_phase_ops ops = {&f, f_set, f_snap, f_now, NULL, NULL, NULL};
	struct js_conf c;
	struct js_policy p;
	char err[100];
	uint32_t seq = 77, khz;
	js_conf_defaults(&c);
	js_policy_parse("io-dvfs", &p, err, sizeof(err));
	struct js_phases *ps = js_phases_new(100, 4, &ops, 0);
	assert_int_equal(js_phases_begin(ps, 0, "checkpoint", NULL, R("checkpoint"), 0, &seq, &khz), 0);
	/* write dropped by the rate limit, its END arrives */
	assert_int_equal(js_phases_skip(ps, 0), 0);
	seq = 77;
	assert_int_equal(js_phases_end(ps, 0, 5, 0, &seq), JS_PHASE_SKIPPED);
	assert_int_equal(seq, 77);
	assert_int_equal(js_phases_get(ps, 0)->nopen, 1); /* checkpoint still open */
	/* skipped, then a recorded write nested in it, then both ENDs */
	assert_int_equal(js_phases_skip(ps, 0), 0);
	assert_int_equal(js_phases_begin(ps, 0, "write", NULL, R("write"), 0, &seq, &khz), 0);
	assert_int_equal(seq, 1);
	assert_true(js_phases_level(ps) == 0.85);
	assert_int_equal(js_phases_end(ps, 0, 9, 0, &seq), 0);
	assert_int_equal(seq, 1);
	assert_true(js_phases_get(ps, 1)->bytes == 9);
	assert_true(js_phases_level(ps) == JS_RATIO_BASE);
	assert_int_equal(js_phases_end(ps, 0, -1, 0, &seq), JS_PHASE_SKIPPED);
	assert_int_equal(js_phases_end(ps, 0, -1, 0, &seq), 0);
	assert_int_equal(seq, 0);
	assert_false(js_phases_get(ps, 0)->closed_by_step_end);
	assert_int_equal(js_phases_end(ps, 0, -1, 0, &seq), -ENOENT);
	/* a skip is a rank's state: bounded by JS_MAX_RANKS like BEGIN */
	for (int r = 1; r < JS_MAX_RANKS; r++)
		assert_int_equal(js_phases_skip(ps, r), 0);
	assert_int_equal(js_phases_skip(ps, JS_MAX_RANKS), -EUSERS);
	assert_int_equal(js_phases_end(ps, JS_MAX_RANKS, -1, 0, &seq), -ENOENT);
	/* step end forgets skips; unmatched ENDs are then refused */
	js_phases_close_all(ps, 100);
	assert_int_equal(js_phases_end(ps, 1, -1, 0, &seq), -ENOENT);
	js_phases_free(ps);
}

/* Once the clock is held (step end), markers change bookkeeping only. */
static void phases_hold_clock(void **st)
{
	(void)st;
	struct fake f = {.now = 100};
	struct js_phase_ops ops = {&f, f_set, f_snap, f_now, NULL, NULL, NULL};
	struct js_conf c;
	struct js_policy p;
	char err[100];
	uint32_t seq, khz;
	js_conf_defaults(&c);
	js_policy_parse("io-dvfs", &p, err, sizeof(err));
	struct js_phases *ps = js_phases_new(100, 4, &ops, 0);
	assert_int_equal(js_phases_begin(ps, 0, "write", NULL, R("write"), 0, &seq, &khz), 0);
	assert_int_equal(f.nset, 1);
	js_phases_hold_clock(ps);
	assert_int_equal(js_phases_end(ps, 0, 3, 0, &seq), 0);
	assert_int_equal(js_phases_begin(ps, 0, "compress", NULL, R("compress"), 0, &seq, &khz), 0);
	assert_int_equal(f.nset, 1); /* no clock change after the hold */
	js_phases_free(ps);
}

/* A phase's start/end are when its energy was read; the clients' t= are
 * kept apart (marker_*): power = energy / (end - start) holds. */
static void phases_energy_interval(void **st)
{
	(void)st;
	struct fake f = {.now = 500, .cpu = 1000};
	struct js_phase_ops ops = {&f, f_set, f_snap, f_now, NULL, NULL, NULL};
	uint32_t seq, khz;
	struct js_phases *ps = js_phases_new(100, 4, &ops, 0);
	assert_int_equal(js_phases_begin(ps, 0, "write", NULL, JS_RATIO_INHERIT, 100, &seq, &khz), 0);
	f.now = 520;
	assert_int_equal(js_phases_begin(ps, 1, "write", NULL, JS_RATIO_INHERIT, 90, &seq, &khz), 0);
	f.now = 900;
	f.cpu = 1400;
	assert_int_equal(js_phases_end(ps, 0, -1, 600, &seq), 0);
	f.now = 950;
	f.cpu = 1500;
	assert_int_equal(js_phases_end(ps, 1, -1, 640, &seq), 0);
	const struct js_sphase *p = js_phases_get(ps, 0);
	assert_true(p->start_ns == 500 && p->end_ns == 950);
	assert_true(p->marker_start_ns == 90 && p->marker_end_ns == 640);
	assert_true(p->e_cpu0_uj == 1000 && p->e_cpu1_uj == 1500);
	js_phases_free(ps);
}

/* Per-rank detail stops after JS_RANK_DETAIL_MAX entries of the step; every
 * phase keeps min/max/sum of all its entries. */
static void phases_rank_detail_cap(void **st)
{
	(void)st;
	struct fake f = {.now = 1000000};
	struct js_phase_ops ops = {&f, f_set, f_snap, f_now, NULL, NULL, NULL};
	uint32_t seq, khz;
	enum { NR = 64, NP = JS_RANK_DETAIL_MAX / NR + 3 };
	struct js_phases *ps = js_phases_new(NP + 1, 4, &ops, 0);
	for (int k = 0; k < NP; k++) {
		for (int r = 0; r < NR; r++)
			assert_int_equal(js_phases_begin(ps, r, "a", NULL, JS_RATIO_INHERIT,
							 (uint64_t)(1000 * k + r + 1), &seq, &khz), 0);
		for (int r = 0; r < NR; r++)
			assert_int_equal(js_phases_end(ps, r, r == 5 ? -1 : 10 * r + k,
						       (uint64_t)(1000 * k + 500 + 2 * r), &seq), 0);
	}
	size_t detail = 0;
	for (int k = 0; k < NP; k++) {
		const struct js_sphase *p = js_phases_get(ps, (size_t)k);
		assert_int_equal(p->nranks, NR);
		detail += p->ndetail;
		assert_int_equal(p->ndetail, k < JS_RANK_DETAIL_MAX / NR ? NR : 0);
		assert_int_equal(p->stats.start_ns.n, NR);
		assert_true(p->stats.start_ns.min == (uint64_t)(1000 * k + 1));
		assert_true(p->stats.start_ns.max == (uint64_t)(1000 * k + NR));
		assert_true(p->stats.start_ns.sum == (unsigned __int128)(NR * (1000 * k) + NR * (NR + 1) / 2));
		assert_true(p->stats.end_ns.min == (uint64_t)(1000 * k + 500));
		assert_true(p->stats.end_ns.max == (uint64_t)(1000 * k + 500 + 2 * (NR - 1)));
		assert_int_equal(p->stats.bytes.n, NR - 1); /* rank 5 gave none */
		assert_true(p->stats.bytes.min == (uint64_t)k);
		assert_true(p->stats.bytes.max == (uint64_t)(10 * (NR - 1) + k));
		assert_true(p->stats.bytes.sum == (unsigned __int128)p->bytes);
	}
	assert_int_equal(detail, JS_RANK_DETAIL_MAX);
	js_phases_free(ps);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(conf_defaults_and_keys),
		cmocka_unit_test(conf_max_phases_bound),
		cmocka_unit_test(phases_many_keep_their_rules),
		cmocka_unit_test(conf_sidechannel_keys),
		cmocka_unit_test(conf_node_expansion),
		cmocka_unit_test(conf_path_trailing_dot_components),
		cmocka_unit_test(policies),
		cmocka_unit_test(tuned_conf),
		cmocka_unit_test(tuned_parse),
		cmocka_unit_test(tuned_load),
		cmocka_unit_test(auto_parse),
		cmocka_unit_test(auto_conf),
		cmocka_unit_test(auto_load),
		cmocka_unit_test(tags),
		cmocka_unit_test(protocol),
		cmocka_unit_test(bucket),
		cmocka_unit_test(phases_collective_and_nesting),
		cmocka_unit_test(phases_ckpt_and_limits),
		cmocka_unit_test(phases_hostile_bounds),
		cmocka_unit_test(phases_skipped_begin_keeps_nesting),
		cmocka_unit_test(phases_hold_clock),
		cmocka_unit_test(phases_energy_interval),
		cmocka_unit_test(phases_rank_detail_cap),
		cmocka_unit_test(conf_gpu_keys),
		cmocka_unit_test(jobcache_gpus),
		cmocka_unit_test(policy_gpu_io),
		cmocka_unit_test(conf_threads_per_core),
		cmocka_unit_test(policy_uncore_io),
		cmocka_unit_test(phases_uncore_io_levels),
		cmocka_unit_test(phases_gpu_io_levels),
		cmocka_unit_test(phases_non_io_kinds_run_at_base_clocks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
