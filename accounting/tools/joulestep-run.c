/* joulestep-run: measure the RAPL energy of any command, as `perf stat`
 * does, optionally running it at a chosen CPU frequency.
 *
 *   joulestep-run [--sysfs DIR] [--backend powercap|papi|sysfs] [--papi-components LIST]
 *                 [--sample-ms N] [--freq-ratio R | --freq-khz K] [--state DIR] [--json]
 *                 [--gpus[=LIST]] [--gpu-backend nvml|amdsmi] [--gpu-lib PATH]
 *                 [--phases] [--gpu-io-clock-mhz M]
 *                 -- CMD ARGS...
 *
 * With --gpus the GPUs' energy is measured too (NVML or AMD SMI, loaded at
 * run time);
 * the CPU side is then optional: a node without readable RAPL still gives
 * the GPU figures. With --phases the command marks phases by writing lines
 * "begin KIND [LABEL] [t=NS]" and "end [t=NS]" (NS: its CLOCK_MONOTONIC time
 * of the marker, optional) to the descriptor named in
 * JOULESTEP_RUN_MARK_FD; each phase is reported on its own, and with
 * --gpu-io-clock-mhz the GPUs' graphics clock is locked at most at M MHz
 * during checkpoint, flush and write phases and unlocked at their end.
 *
 * Frequencies are changed only on the CPUs the command may run on (our
 * affinity mask), saved first in the crash-safe journal, and restored when
 * the command ends, is killed, or when we get SIGTERM/SIGINT/SIGHUP. If this
 * process itself is SIGKILLed, `joulestep-restore` restores from the journal.
 * The exit status is the command's (128+N when it died of signal N).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "joulestep/energy.h"
#include "joulestep/node.h"
#include "joulestep/freq.h"
#include "joulestep/gpu.h"
#include "../src/sampler.h" /* js_mono_ns */

#define PROG "joulestep-run"
#define EXIT_USAGE 125 /* as env(1)/nice(1): our own failure, not the command's */

struct opts {
	const char *sysfs;
	const char *backend;
	const char *papi_components;
	const char *state;
	long sample_ms;
	double freq_ratio;
	long freq_khz;
	bool json;
	bool gpus, phases;
	const char *gpu_select, *gpu_lib, *gpu_backend;
	long gpu_io_mhz, gpu_sample_ms;
	const char *node;           /* --node: node-level sources (NULL: not asked) */
	char **cmd;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " [--sysfs DIR] [--backend powercap|papi|sysfs] [--papi-components LIST]\n"
		"                     [--sample-ms N] [--freq-ratio R | --freq-khz K] [--state DIR] [--json]\n"
		"                     -- CMD ARGS...\n"
		"  --sysfs DIR      sysfs root to read (default /sys)\n"
		"  --backend LIST   backends to try, comma separated (default powercap,papi,sysfs;\n"
		"                   amd_energy: the AMD hwmon socket counters)\n"
		"  --papi-components LIST\n"
		"                   PAPI components the papi backend may use, comma separated, or none\n"
		"                   (default powercap,rapl,perf_event_uncore)\n"
		"  --sample-ms N    cap of the wrap-safe sampling period, 1..3600000 ms (default 1000)\n"
		"  --freq-ratio R   run CMD at R*fmax, 0 < R <= 1\n"
		"  --freq-khz K     run CMD at K kHz (clamped to the CPU's range)\n"
		"  --state DIR      root-only journal of saved frequencies (default /var/lib/joulestep)\n"
		"  --json           print one JSON object instead of a table\n"
		"  --node LIST      node energy beside RAPL: pm_counters, hwmon (Grace power,\n"
		"                   integrated), a comma list, or auto (= pm_counters,hwmon)\n"
		"  --gpus[=LIST]    measure the GPUs too (all, or a comma list of indices/UUIDs)\n"
		"  --gpu-backend B  nvml or amdsmi (default: the first that loads and sees a GPU)\n"
		"  --gpu-lib PATH   the backend's library (default libnvidia-ml.so.1, libamd_smi.so)\n"
		"  --gpu-sample-ms N  GPU sampling period, 1..10000 ms (default 50)\n"
		"  --phases         the command marks phases: lines 'begin KIND [LABEL] [t=NS]' and\n"
		"                   'end [t=NS]' (NS: CLOCK_MONOTONIC ns of the marker, optional)\n"
		"                   written to the descriptor in $JOULESTEP_RUN_MARK_FD\n"
		"  --gpu-io-clock-mhz M  lock the GPUs' graphics clock at most at M MHz during\n"
		"                   checkpoint, flush and write phases (needs --gpus --phases; root);\n"
		"                   journaled in --state, so joulestep-restore unlocks them if we die\n");
}

static int parse_long(const char *s, long lo, long hi, long *out)
{
	char *end;

	errno = 0;
	*out = strtol(s, &end, 10);
	return errno || *end || end == s || *out < lo || *out > hi ? -1 : 0;
}

/* One option (getopt_long's c and its argument) into o: 0, or -1 said why. */
static int set_opt(struct opts *o, int c, char *arg)
{
	char *end;

	switch (c) {
	case 's': o->sysfs = arg; break;
	case 'b': o->backend = arg; break;
	case 'P': o->papi_components = arg; break;
	case 'S': o->state = arg; break;
	case 'j': o->json = true; break;
	case 'g': o->gpus = true; o->gpu_select = arg; break;
	case 'N': o->node = arg; break;
	case 'L': o->gpu_lib = arg; break;
	case 'B':
		if (strcmp(arg, "nvml") && strcmp(arg, "amdsmi")) {
			fprintf(stderr, PROG ": --gpu-backend must be nvml or amdsmi, not '%s'\n", arg);
			return -1;
		}
		o->gpu_backend = arg;
		break;
	case 'M': o->phases = true; break;
	case 'G':
		if (parse_long(arg, 1, 10000, &o->gpu_sample_ms) < 0) {
			fprintf(stderr, PROG ": --gpu-sample-ms must be an integer in 1..10000, not '%s'\n", arg);
			return -1;
		}
		break;
	case 'C':
		if (parse_long(arg, 1, 100000, &o->gpu_io_mhz) < 0) {
			fprintf(stderr, PROG ": --gpu-io-clock-mhz must be an integer in 1..100000 (MHz), not '%s'\n", arg);
			return -1;
		}
		break;
	case 'p':
		errno = 0;
		o->sample_ms = strtol(arg, &end, 10);
		if (errno || *end || o->sample_ms < 1 || o->sample_ms > 3600000) {
			fprintf(stderr, PROG ": --sample-ms must be an integer in 1..3600000, not '%s'\n", arg);
			return -1;
		}
		break;
	case 'r':
		errno = 0;
		o->freq_ratio = strtod(arg, &end);
		if (errno || *end || !(o->freq_ratio > 0.0 && o->freq_ratio <= 1.0)) {
			fprintf(stderr, PROG ": --freq-ratio must be a number in (0, 1], not '%s'\n", arg);
			return -1;
		}
		break;
	case 'k':
		errno = 0;
		o->freq_khz = strtol(arg, &end, 10);
		if (errno || *end || o->freq_khz < 1 || o->freq_khz > 100000000) {
			fprintf(stderr, PROG ": --freq-khz must be a positive integer (kHz), not '%s'\n", arg);
			return -1;
		}
		break;
	case 'h': usage(stdout); exit(0);
	default: usage(stderr); return -1;
	}
	return 0;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{"sysfs", required_argument, NULL, 's'},
		{"backend", required_argument, NULL, 'b'},
		{"papi-components", required_argument, NULL, 'P'},
		{"sample-ms", required_argument, NULL, 'p'},
		{"freq-ratio", required_argument, NULL, 'r'},
		{"freq-khz", required_argument, NULL, 'k'},
		{"state", required_argument, NULL, 'S'},
		{"json", no_argument, NULL, 'j'},
		{"gpus", optional_argument, NULL, 'g'},
		{"node", required_argument, NULL, 'N'},
		{"gpu-lib", required_argument, NULL, 'L'},
		{"gpu-backend", required_argument, NULL, 'B'},
		{"gpu-sample-ms", required_argument, NULL, 'G'},
		{"phases", no_argument, NULL, 'M'},
		{"gpu-io-clock-mhz", required_argument, NULL, 'C'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int c;

	*o = (struct opts){.sysfs = "/sys", .state = "/var/lib/joulestep", .sample_ms = 1000,
			   .gpu_sample_ms = 50};
	while ((c = getopt_long(argc, argv, "+h", lo, NULL)) != -1)
		if (set_opt(o, c, optarg) < 0)
			return -1;
	if (o->freq_ratio > 0 && o->freq_khz > 0) {
		fprintf(stderr, PROG ": give either --freq-ratio or --freq-khz, not both\n");
		return -1;
	}
	if (o->gpu_io_mhz && !(o->gpus && o->phases)) {
		fprintf(stderr, PROG ": --gpu-io-clock-mhz needs --gpus and --phases\n");
		return -1;
	}
	if (optind >= argc) {
		fprintf(stderr, PROG ": no command given (put it after --)\n");
		usage(stderr);
		return -1;
	}
	o->cmd = argv + optind;
	return 0;
}

/* ---- frequency for the command's CPUs ------------------------------------ */

struct freq_ctx {
	struct js_cpuset cpus; /* clock domains we changed (acquired): journal keys */
	char owner[64];
	const struct opts *o;
};

static int freq_set(struct freq_ctx *fc)
{
	struct js_cpuset online;
	cpu_set_t aff;
	int rc, changed = 0;

	js_cpuset_zero(&fc->cpus);
	snprintf(fc->owner, sizeof(fc->owner), "run-%d", (int)getpid());
	rc = js_cpufreq_online(fc->o->sysfs, &online);
	if (rc < 0) {
		fprintf(stderr, PROG ": no cpufreq under %s: %s\n", fc->o->sysfs, strerror(-rc));
		return rc;
	}
	if (sched_getaffinity(0, sizeof(aff), &aff) < 0) {
		fprintf(stderr, PROG ": sched_getaffinity: %m\n");
		return -errno;
	}
	for (int cpu = 0; cpu < JS_MAX_CPUS && cpu < CPU_SETSIZE; cpu++) {
		struct js_cpufreq f;
		uint32_t khz, back;
		bool ignored;

		if (!CPU_ISSET(cpu, &aff) || !js_cpuset_isset(&online, cpu))
			continue;
		rc = js_cpufreq_read(fc->o->sysfs, cpu, &f);
		if (rc < 0) {
			fprintf(stderr, PROG ": cpu%d: cannot read cpufreq: %s\n", cpu, strerror(-rc));
			return rc;
		}
		if (fc->o->freq_ratio > 0) {
			rc = js_freq_ratio_to_khz(&f, fc->o->freq_ratio, &khz);
			if (rc < 0)
				return rc;
		} else {
			khz = js_freq_clamp_round_khz(&f, (uint32_t)fc->o->freq_khz);
		}
		/* the journal keys a clock domain by its policy (issue 23, defect 8) */
		int key = js_freq_domain_key(&f);
		if (!js_cpuset_isset(&fc->cpus, key)) {
			rc = js_freq_acquire(fc->o->state, fc->o->sysfs, key, fc->owner, 0);
			if (rc < 0) {
				fprintf(stderr, PROG ": cpu%d: cannot save the original frequency in %s: %s\n",
					cpu, fc->o->state, strerror(-rc));
				return rc;
			}
			js_cpuset_set(&fc->cpus, key);
		}
		rc = js_freq_apply(fc->o->sysfs, &f, khz, &back, &ignored);
		if (rc < 0) {
			fprintf(stderr, PROG ": cpu%d: cannot set %u kHz: %s\n", cpu, khz, strerror(-rc));
			return rc;
		}
		if (ignored)
			fprintf(stderr, PROG ": cpu%d: asked for %u kHz, the hardware reports %u kHz\n",
				cpu, khz, back);
		changed++;
	}
	if (!changed)
		fprintf(stderr, PROG ": warning: none of the command's CPUs has cpufreq; frequency unchanged\n");
	return 0;
}

static int freq_restore(struct freq_ctx *fc)
{
	int rc, ret = 0;

	for (int cpu = 0; cpu < JS_MAX_CPUS; cpu++) {
		bool restored;

		if (!js_cpuset_isset(&fc->cpus, cpu))
			continue;
		rc = js_freq_release(fc->o->state, fc->o->sysfs, cpu, fc->owner, &restored);
		if (rc < 0) {
			fprintf(stderr, PROG ": policy %d: restore failed: %s (run joulestep-restore)\n",
				cpu, strerror(-rc));
			ret = rc;
		}
	}
	return ret;
}

/* ---- meters: CPU (RAPL) and GPUs ------------------------------------------------ */

struct meters {
	struct js_energy *e;        /* NULL when the CPU is not measured (--gpus only) */
	struct js_meter *m;
	char cpu_why[1024];
	bool dram;                  /* every package has a dram zone              */
	char dram_why[JS_WHY_LEN];  /* else why DRAM is not measured (null)       */
	struct js_gpus *g;
	struct js_gpu_meter *gm;
	bool node_asked;            /* --node given                               */
	struct js_node *node;       /* NULL: no node source (node_why says why)   */
	struct js_node_meter *nm;
	char node_why[512];
};

struct reading {
	struct js_snapshot cpu;
	struct js_gpu_snapshot gpu;
	uint64_t gpu_ticket;            /* asked of the GPU meter, not yet in gpu */
	struct js_node_snapshot node;
};

struct span { /* what two readings give */
	struct js_interval cpu;
	struct js_gpu_interval gpu;
	struct js_node_interval node;
};

/* A reading as of at (a CLOCK_MONOTONIC time, 0 = now). The GPUs' part is
 * only asked for (a marker never waits for a GPU): gpu_settle fills it. */
static void take_at(struct meters *ms, struct reading *r, uint64_t at)
{
	memset(r, 0, sizeof(*r));
	if (ms->m)
		js_meter_snapshot(ms->m, &r->cpu);
	if (ms->gm && js_gpu_meter_request(ms->gm, at ? at : js_mono_ns(), &r->gpu_ticket) < 0)
		r->gpu_ticket = 0;
	if (ms->nm)
		js_node_meter_snapshot(ms->nm, &r->node);
}

/* Fill r's GPU figures once resolved (wait: until they are); false while not. */
static bool gpu_settle(struct meters *ms, struct reading *r, bool wait)
{
	int rc;

	if (!r->gpu_ticket)
		return true;
	rc = js_gpu_meter_result(ms->gm, r->gpu_ticket, wait, &r->gpu);
	if (rc == -EAGAIN)
		return false;
	r->gpu_ticket = 0;
	return true;
}

static void take(struct meters *ms, struct reading *r)
{
	take_at(ms, r, 0);
	gpu_settle(ms, r, true);
}

static void span_of(const struct meters *ms, const struct reading *a, const struct reading *b,
		    struct span *s)
{
	memset(s, 0, sizeof(*s));
	if (ms->e)
		js_interval_of(ms->e, &a->cpu, &b->cpu, &s->cpu);
	if (ms->g)
		js_gpu_interval_of(&a->gpu, &b->gpu, &s->gpu);
	if (ms->nm)
		js_node_interval_of(ms->node, &a->node, &b->node, &s->node);
}

/* --node: a node source beside RAPL; none found is no error (node_why) */
static int node_open(const struct opts *o, struct meters *ms)
{
	int rc;

	ms->node_asked = true;
	rc = js_node_open(o->sysfs, strcmp(o->node, "auto") ? o->node : NULL, &ms->node,
			  ms->node_why, sizeof(ms->node_why));
	if (rc == -EINVAL) {
		fprintf(stderr, PROG ": --node: %s\n", ms->node_why);
		return rc;
	}
	if (rc < 0)
		return 0;
	rc = js_node_meter_start(ms->node, 0, true, &ms->nm);
	if (rc < 0)
		fprintf(stderr, PROG ": cannot start the node sampler: %s\n", strerror(-rc));
	return rc;
}

static int meters_open(const struct opts *o, struct meters *ms)
{
	struct js_energy_opts eo = {.sysfs_root = o->sysfs, .order = o->backend,
				    .papi_components = o->papi_components};
	struct js_gpu_opts go = {.backend = o->gpu_backend, .lib = o->gpu_lib, .select = o->gpu_select};
	char why[1024] = "";
	int rc;

	memset(ms, 0, sizeof(*ms));
	if (o->node && (rc = node_open(o, ms)) < 0)
		return rc;
	rc = js_energy_open(&eo, &ms->e, ms->cpu_why, sizeof(ms->cpu_why));
	if (rc < 0 && !o->gpus) {
		fprintf(stderr, PROG ": no energy backend works:\n%s\n", ms->cpu_why);
		return rc;
	}
	if (rc == 0 && (rc = js_meter_start(ms->e, (uint64_t)o->sample_ms * 1000000ULL, true, &ms->m)) < 0) {
		fprintf(stderr, PROG ": cannot start the sampler: %s\n", strerror(-rc));
		return rc;
	}
	if (rc == 0)
		ms->dram = js_zones_dram_why(js_energy_zones(ms->e), ms->dram_why,
					     sizeof(ms->dram_why)) == 0;
	if (rc < 0) {
		ms->e = NULL;
		fprintf(stderr, PROG ": CPU and DRAM not measured (no energy backend works):\n%s\n",
			ms->cpu_why);
	}
	if (!o->gpus)
		return 0;
	rc = js_gpu_open(&go, &ms->g, why, sizeof(why));
	if (rc < 0) {
		fprintf(stderr, PROG ": --gpus: %s\n", why);
		return rc;
	}
	rc = js_gpu_meter_start(ms->g, (uint64_t)o->gpu_sample_ms * 1000000ULL, true, &ms->gm);
	if (rc < 0)
		fprintf(stderr, PROG ": cannot start the GPU sampler: %s\n", strerror(-rc));
	return rc;
}

static void meters_close(struct meters *ms)
{
	js_gpu_meter_stop(ms->gm);
	js_gpu_close(ms->g);
	js_meter_stop(ms->m);
	js_energy_close(ms->e);
	js_node_meter_stop(ms->nm);
	js_node_close(ms->node);
}

/* ---- phases marked by the command ------------------------------------------------ */

#define MAX_PHASES 4096

struct phase_rec {
	char kind[33], label[65];
	struct reading a, b;
	bool lowered;                   /* GPU clocks were locked for it        */
	bool unterminated;              /* the command ended inside it          */
	uint32_t sm_mhz[JS_MAX_GPUS];   /* SM clock read right after the lock   */
	char lock_error[JS_GPU_ERR_LEN];
};

struct phases {
	const struct opts *o;
	struct meters *ms;
	int rfd;
	atomic_bool stop;
	pthread_t th;
	struct phase_rec *v;
	size_t n;
	size_t settled;                 /* readings 0..settled-1 have their GPUs */
	bool open;
	unsigned bad_lines, lock_warned;
	bool journaled[JS_MAX_GPUS];    /* a journal entry is ours              */
};

static bool io_kind(const char *k)
{
	return !strcmp(k, "checkpoint") || !strcmp(k, "flush") || !strcmp(k, "write");
}

static bool valid_word(const char *s, size_t max, bool label)
{
	size_t n = strlen(s);

	if (!n || n > max)
		return false;
	for (; *s; s++) {
		bool ok = (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_' || *s == '-';

		if (label)
			ok = ok || (*s >= 'A' && *s <= 'Z') || *s == '.' || *s == ':';
		if (!ok)
			return false;
	}
	return true;
}

/* Lock every GPU's clock for an I/O phase: journal first (so joulestep-restore
 * can undo it if we die), then the lock. A GPU whose journal entry cannot be
 * written is left alone. */
static void lower_gpus(struct phases *ph, struct phase_rec *p)
{
	struct js_gpus *g = ph->ms->g;
	uint32_t max = (uint32_t)ph->o->gpu_io_mhz, lo[JS_MAX_GPUS], hi[JS_MAX_GPUS];
	bool want[JS_MAX_GPUS];
	int rc[JS_MAX_GPUS];

	for (size_t i = 0; i < js_gpu_count(g); i++) {
		uint32_t min = js_gpu_info(g, i)->min_sm_mhz;

		want[i] = true;
		lo[i] = min && min <= max ? min : max;
		hi[i] = max;
	}
	/* every GPU in one pass of the journal; a refused lock leaves no entry */
	js_gpu_lock_journaled_n(ph->o->state, g, want, lo, hi, rc);
	for (size_t i = 0; i < js_gpu_count(g); i++) {
		if (rc[i] < 0) {
			if (!p->lock_error[0])
				snprintf(p->lock_error, sizeof(p->lock_error), "GPU %s: %s",
					 js_gpu_info(g, i)->uuid,
					 rc[i] == -EBUSY ? "another live process holds it lowered"
					 : js_gpu_last_error(g)[0] ? js_gpu_last_error(g)
					 : "cannot journal its clocks in the state directory");
			continue;
		}
		ph->journaled[i] = true;
		p->lowered = true;
		js_gpu_sm_clock_mhz(g, i, &p->sm_mhz[i]);
	}
	if (p->lock_error[0] && !ph->lock_warned++)
		fprintf(stderr, PROG ": cannot lock the GPU clocks: %s\n", p->lock_error);
}

static void restore_gpus(struct phases *ph)
{
	int rc[JS_MAX_GPUS];

	js_gpu_unlock_journaled_n(ph->o->state, ph->ms->g, ph->journaled, rc);
	for (size_t i = 0; i < js_gpu_count(ph->ms->g); i++) {
		if (!ph->journaled[i])
			continue;
		if (rc[i] < 0) { /* the journal entry stays for joulestep-restore */
			fprintf(stderr, PROG ": GPU %zu: cannot unlock its clocks: %s (run joulestep-restore)\n",
				i, js_gpu_last_error(ph->ms->g));
			continue;
		}
		ph->journaled[i] = false;
	}
}

/* The phases' GPU figures resolved so far, in the order asked (reading
 * 2k: phase k's start, 2k + 1: its end). */
static void phases_settle(struct phases *ph, bool wait)
{
	while (ph->settled < 2 * ph->n) {
		struct phase_rec *p = &ph->v[ph->settled / 2];
		struct reading *r = ph->settled % 2 ? &p->b : &p->a;

		if (ph->settled % 2 && ph->open && ph->settled / 2 == ph->n - 1)
			return; /* the open phase's end is not asked yet */
		if (!gpu_settle(ph->ms, r, wait))
			return;
		ph->settled++;
	}
}

static void phase_end(struct phases *ph, uint64_t arrival)
{
	struct phase_rec *p = &ph->v[ph->n - 1];

	restore_gpus(ph);
	take_at(ph->ms, &p->b, arrival);
	ph->open = false;
	phases_settle(ph, false);
}

/* "t=<CLOCK_MONOTONIC ns>" as the last word: the command's own time of the
 * marker, used when it lies in the last second before arrival. */
static uint64_t marker_time(char **words, int *n, uint64_t arrival)
{
	char *end;
	unsigned long long t;

	if (*n < 2 || strncmp(words[*n - 1], "t=", 2))
		return arrival;
	errno = 0;
	t = strtoull(words[*n - 1] + 2, &end, 10);
	(*n)--;
	if (errno || *end || t > arrival || arrival - t > 1000000000ULL)
		return arrival;
	return t;
}

static void phase_line(struct phases *ph, char *line, uint64_t arrival)
{
	char *save = NULL, *w[5];
	int n = 0;
	uint64_t at;
	struct phase_rec *p;

	for (char *tok = strtok_r(line, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save))
		if (n < 5)
			w[n++] = tok;
		else
			n = 6; /* too many words */
	at = n <= 5 ? marker_time(w, &n, arrival) : arrival;
	if (n == 1 && !strcmp(w[0], "end") && ph->open)
		return phase_end(ph, at);
	if (n < 2 || n > 3 || strcmp(w[0], "begin") || !valid_word(w[1], 32, false) ||
	    (n == 3 && !valid_word(w[2], 64, true)) || ph->open || ph->n >= MAX_PHASES) {
		if (ph->bad_lines++ < 8)
			fprintf(stderr, PROG ": ignored marker line: allowed are 'begin KIND [LABEL] [t=NS]' "
				"(KIND [a-z0-9_-]{1,32}, LABEL [A-Za-z0-9._:-]{1,64}, no nesting, at most %d "
				"phases) and 'end [t=NS]'\n", MAX_PHASES);
		return;
	}
	p = &ph->v[ph->n++];
	memset(p, 0, sizeof(*p));
	snprintf(p->kind, sizeof(p->kind), "%s", w[1]);
	snprintf(p->label, sizeof(p->label), "%s", n == 3 ? w[2] : "");
	ph->open = true;
	/* the clock first (the marker's point), then the reading as of the marker */
	if (ph->o->gpu_io_mhz && io_kind(w[1]))
		lower_gpus(ph, p);
	take_at(ph->ms, &p->a, at);
	phases_settle(ph, false);
}

static void *phase_reader(void *arg)
{
	struct phases *ph = arg;
	char buf[4096];
	size_t have = 0;
	uint64_t arrival;

	for (;;) {
		struct pollfd pfd = {.fd = ph->rfd, .events = POLLIN};
		ssize_t r;
		char *nl;

		if (poll(&pfd, 1, 100) <= 0) {
			if (atomic_load(&ph->stop))
				break;
			continue;
		}
		r = read(ph->rfd, buf + have, sizeof(buf) - 1 - have);
		if (r <= 0 && !(r < 0 && errno == EINTR))
			break; /* every writer closed it */
		have += r > 0 ? (size_t)r : 0;
		buf[have] = '\0';
		arrival = js_mono_ns();
		while ((nl = strchr(buf, '\n'))) {
			*nl = '\0';
			phase_line(ph, buf, arrival);
			have -= (size_t)(nl + 1 - buf);
			memmove(buf, nl + 1, have + 1);
		}
		if (have == sizeof(buf) - 1)
			have = 0; /* an endless line: dropped */
	}
	return NULL;
}

/* The pipe's write end for the command, or -1; starts the reader. */
static int phases_start(struct phases *ph, const struct opts *o, struct meters *ms)
{
	int fds[2];
	char num[16];

	memset(ph, 0, sizeof(*ph));
	ph->o = o;
	ph->ms = ms;
	ph->rfd = -1;
	if (!o->phases)
		return -1;
	ph->v = calloc(MAX_PHASES, sizeof(*ph->v));
	if (!ph->v || pipe2(fds, O_CLOEXEC) < 0) {
		fprintf(stderr, PROG ": --phases: %s\n", strerror(ph->v ? errno : ENOMEM));
		return -2;
	}
	ph->rfd = fds[0];
	snprintf(num, sizeof(num), "%d", fds[1]);
	setenv("JOULESTEP_RUN_MARK_FD", num, 1);
	if (pthread_create(&ph->th, NULL, phase_reader, ph)) {
		close(fds[0]);
		close(fds[1]);
		return -2;
	}
	return fds[1];
}

static void phases_finish(struct phases *ph)
{
	if (ph->rfd < 0)
		return;
	atomic_store(&ph->stop, true);
	pthread_join(ph->th, NULL);
	close(ph->rfd);
	if (ph->open) {
		ph->v[ph->n - 1].unterminated = true;
		phase_end(ph, 0);
	}
	phases_settle(ph, true);
}

/* ---- report ------------------------------------------------------------------ */

static json_t *j_energy(bool known, uint64_t uj)
{
	return known ? json_real((double)uj / 1e6) : json_null();
}

static json_t *gpus_json(const struct meters *ms, const struct js_gpu_interval *gi)
{
	json_t *a = json_array();

	for (size_t i = 0; i < gi->n; i++) {
		const struct js_gpu_info *in = js_gpu_info(ms->g, i);

		json_array_append_new(a, json_pack("{s:i, s:s, s:s, s:o, s:b, s:b}",
			"index", (int)in->index, "uuid", in->uuid, "name", in->name,
			"energy_j", j_energy(!gi->uncertain[i], gi->energy_uj[i]),
			"integrated", gi->integrated[i], "uncertain", gi->uncertain[i]));
	}
	return a;
}

static const char *includes(const struct meters *ms)
{
	if (!ms->e)
		return "gpu";
	if (!ms->dram)
		return ms->g ? "cpu+gpu" : "cpu";
	return ms->g ? "cpu+dram+gpu" : "cpu+dram";
}

static void span_json(json_t *o, const struct meters *ms, const struct span *s)
{
	bool cpu = ms->e != NULL;

	/* CPU figures as before (wrap_uncertain says when they are lower bounds) */
	json_object_set_new(o, "energy_cpu_j", j_energy(cpu, s->cpu.energy_cpu_uj));
	/* DRAM without a dram zone is not measured: null, never 0 */
	json_object_set_new(o, "energy_dram_j", j_energy(cpu && ms->dram, s->cpu.energy_dram_uj));
	if (!ms->g)
		return;
	json_object_set_new(o, "energy_gpu_j", j_energy(!s->gpu.any_uncertain, s->gpu.total_uj));
	json_object_set_new(o, "gpus", gpus_json(ms, &s->gpu));
}

static json_t *phases_json(const struct phases *ph, const struct reading *start)
{
	json_t *a = json_array();

	for (size_t k = 0; k < ph->n; k++) {
		const struct phase_rec *p = &ph->v[k];
		struct span s;
		json_t *o, *clk = json_null();

		span_of(ph->ms, &p->a, &p->b, &s);
		o = json_pack("{s:s, s:s, s:f, s:f, s:b}", "kind", p->kind, "label", p->label,
			"start_s", (double)(p->a.gpu.mono_ns ? p->a.gpu.mono_ns - start->gpu.mono_ns
					    : p->a.cpu.mono_ns - start->cpu.mono_ns) / 1e9,
			"duration_s", (double)(ph->ms->g ? s.gpu.duration_ns : s.cpu.duration_ns) / 1e9,
			"unterminated", p->unterminated);
		span_json(o, ph->ms, &s);
		if (ph->o->gpu_io_mhz && io_kind(p->kind)) {
			json_t *mhz = json_array();

			for (size_t i = 0; i < js_gpu_count(ph->ms->g); i++)
				json_array_append_new(mhz, json_integer(p->sm_mhz[i]));
			clk = json_pack("{s:i, s:b, s:o, s:s}", "max_mhz", (int)ph->o->gpu_io_mhz,
					"lowered", p->lowered, "sm_mhz_after_lock", mhz,
					"error", p->lock_error);
		}
		json_object_set_new(o, "gpu_clock", clk);
		json_array_append_new(a, o);
	}
	return a;
}

/* The node's energy beside RAPL: its total (the channels that make it in
 * total_sources, never two that overlap) and every channel. */
static json_t *node_json(const struct meters *ms, const struct js_node_interval *ni)
{
	json_t *ch = json_array();

	if (!ms->node)
		return json_pack("{s:n, s:n, s:s}", "source", "energy_j", "not_measured", ms->node_why);
	for (size_t i = 0; i < ni->n; i++) {
		const struct js_node_channel *c = js_node_channel(ms->node, i);

		json_array_append_new(ch, json_pack("{s:s, s:s, s:i, s:b, s:o, s:b}", "name", c->name,
			"what", c->what, "socket", c->socket, "total", c->total,
			"energy_j", j_energy(!ni->uncertain[i], ni->energy_uj[i]),
			"uncertain", ni->uncertain[i]));
	}
	return json_pack("{s:s, s:o, s:s, s:b, s:f, s:o}", "source", js_node_source_name(ms->node),
		"energy_j", j_energy(ni->total_known, ni->total_uj),
		ni->total_known ? "total_sources" : "not_measured", ni->total_sources,
		"integrated", ni->integrated, "duration_s", (double)ni->duration_ns / 1e9,
		"channels", ch);
}

static void print_json(const struct meters *ms, const struct span *s, const struct phases *ph,
		       const struct reading *start)
{
	const struct js_interval *iv = &s->cpu;
	double secs = (double)(ms->e ? iv->duration_ns : s->gpu.duration_ns) / 1e9;
	uint64_t total_uj = iv->energy_total_uj + s->gpu.total_uj;
	json_t *zones = json_array(), *o;

	for (size_t i = 0; ms->e && i < js_energy_zones(ms->e)->nzones; i++) {
		const struct js_zone_info *z = &js_energy_zones(ms->e)->zones[i];

		json_array_append_new(zones, json_pack("{s:s, s:s, s:s, s:f, s:I, s:i}",
			"name", z->name, "id", z->id, "kind", z->kind == JS_ZONE_DRAM ? "dram" : "package",
			"energy_j", (double)iv->energy_uj[i] / 1e6,
			"energy_uj", (json_int_t)iv->energy_uj[i], "wraps", (int)iv->wraps[i]));
	}
	o = json_pack("{s:f, s:f, s:f, s:I, s:o, s:o, s:b, s:s, s:s}",
		"duration_s", secs,
		"energy_total_j", (double)total_uj / 1e6,
		"avg_power_w", secs > 0 ? (double)total_uj / 1e6 / secs : 0.0,
		"energy_cpu_uj", (json_int_t)iv->energy_cpu_uj,
		"energy_dram_uj", ms->dram ? json_integer((json_int_t)iv->energy_dram_uj) : json_null(),
		"zones", zones, "wrap_uncertain", iv->wrap_uncertain,
		"backend", ms->e ? js_energy_backend_name(ms->e) : "none",
		"total_includes", includes(ms));
	span_json(o, ms, s);
	if (!ms->e)
		json_object_set_new(o, "cpu_not_measured", json_string(ms->cpu_why));
	else if (!ms->dram)
		json_object_set_new(o, "dram_not_measured", json_string(ms->dram_why));
	if (ms->node_asked)
		json_object_set_new(o, "node", node_json(ms, &s->node));
	if (ph->rfd >= 0)
		json_object_set_new(o, "phases", phases_json(ph, start));
	json_dumpf(o, stdout, JSON_INDENT(2));
	fputc('\n', stdout);
	json_decref(o);
}

static void print_gpu_table(const struct meters *ms, const struct js_gpu_interval *gi)
{
	for (size_t i = 0; i < gi->n; i++) {
		const struct js_gpu_info *in = js_gpu_info(ms->g, i);

		if (gi->uncertain[i])
			fprintf(stderr, "  %14s J  GPU %u %s (%s): unknown (counter reset or stuck)\n", "-",
				in->index, in->name, in->uuid);
		else
			fprintf(stderr, "  %14.6f J  GPU %u %s (%s)%s\n", (double)gi->energy_uj[i] / 1e6,
				in->index, in->name, in->uuid, gi->integrated[i] ? "  (integrated power)" : "");
	}
}

static void print_phase_table(const struct phases *ph)
{
	fprintf(stderr, "\n Phases:\n\n  %-12s %-16s %10s %14s %14s\n", "Kind", "Label", "Elapsed s",
		"CPU+DRAM J", "GPU J");
	for (size_t k = 0; k < ph->n; k++) {
		const struct phase_rec *p = &ph->v[k];
		struct span s;

		span_of(ph->ms, &p->a, &p->b, &s);
		fprintf(stderr, "  %-12s %-16s %10.3f %14.3f %14.3f%s\n", p->kind, p->label[0] ? p->label : "-",
			(double)(ph->ms->g ? s.gpu.duration_ns : s.cpu.duration_ns) / 1e9,
			(double)s.cpu.energy_total_uj / 1e6, (double)s.gpu.total_uj / 1e6,
			p->lowered ? "  (GPU clock lowered)" : p->lock_error[0] ? "  (GPU clock NOT lowered)" : "");
	}
}

static void print_node_table(const struct meters *ms, const struct js_node_interval *ni)
{
	if (!ms->node) {
		fprintf(stderr, "\n Node energy: not measured (%s)\n", ms->node_why);
		return;
	}
	fprintf(stderr, "\n Node energy (%s%s):\n\n", js_node_source_name(ms->node),
		ni->integrated ? ", integrated power" : "");
	for (size_t i = 0; i < ni->n; i++) {
		const struct js_node_channel *c = js_node_channel(ms->node, i);

		if (ni->uncertain[i])
			fprintf(stderr, "  %14s J  %s: unknown (reset or unreadable)\n", "-", c->name);
		else
			fprintf(stderr, "  %14.6f J  %s%s\n", (double)ni->energy_uj[i] / 1e6, c->name,
				c->total ? "  (a total)" : "");
	}
	if (ni->total_known)
		fprintf(stderr, "  %14.6f J  node (%s)\n", (double)ni->total_uj / 1e6, ni->total_sources);
	else
		fprintf(stderr, "  %14s    node: %s\n", "-", ni->total_sources);
}

static void print_table(const struct meters *ms, const struct span *s, const struct phases *ph)
{
	const struct js_interval *iv = &s->cpu;
	double secs = (double)(ms->e ? iv->duration_ns : s->gpu.duration_ns) / 1e9;
	uint64_t total = iv->energy_total_uj + s->gpu.total_uj;

	if (ms->e) {
		const struct js_zone_set *zs = js_energy_zones(ms->e);

		fprintf(stderr, "\n Energy of the command (backend %s):\n\n", js_energy_backend_name(ms->e));
		for (size_t i = 0; i < zs->nzones; i++)
			fprintf(stderr, "  %14.6f J  %-18s %s%s\n", (double)iv->energy_uj[i] / 1e6,
				zs->zones[i].name, zs->zones[i].id,
				iv->wraps[i] ? "  (counter wrapped)" : "");
		fprintf(stderr, "\n  %14.6f J  CPU\n", (double)iv->energy_cpu_uj / 1e6);
		if (ms->dram)
			fprintf(stderr, "  %14.6f J  DRAM\n", (double)iv->energy_dram_uj / 1e6);
		else
			fprintf(stderr, "  %14s    DRAM not measured: %s\n", "-", ms->dram_why);
	} else {
		fprintf(stderr, "\n Energy of the command (CPU and DRAM not measured):\n\n");
	}
	if (ms->g)
		print_gpu_table(ms, &s->gpu);
	fprintf(stderr, "  %14.6f J  total (%s)\n", (double)total / 1e6, includes(ms));
	fprintf(stderr, "\n  %14.6f s  elapsed\n  %14.6f W  average power\n", secs,
		secs > 0 ? (double)total / 1e6 / secs : 0.0);
	if (ms->node_asked)
		print_node_table(ms, &s->node);
	if (iv->wrap_uncertain || s->gpu.any_uncertain)
		fprintf(stderr, "\n  WARNING: a counter could not be followed (gap, reset or stuck); "
				"those energies are left out\n");
	if (ph->rfd >= 0)
		print_phase_table(ph);
}

/* ---- main ----------------------------------------------------------------------- */

static int wait_child(pid_t child, const sigset_t *waitset)
{
	int status = 0;

	for (;;) {
		siginfo_t si;
		int sig = sigwaitinfo(waitset, &si);

		if (sig < 0)
			continue; /* EINTR */
		if (sig != SIGCHLD) {
			kill(child, sig); /* the command decides; we restore when it ends */
			continue;
		}
		if (waitpid(child, &status, WNOHANG) == child)
			return status;
	}
}

int main(int argc, char **argv)
{
	struct meters ms;
	struct phases ph;
	struct reading a, b;
	struct span s;
	struct freq_ctx fc = {.o = NULL};
	struct opts o;
	sigset_t waitset, oldset;
	int status, wfd;
	pid_t child;

	if (parse_args(argc, argv, &o) < 0)
		return EXIT_USAGE;
	fc.o = &o;

	/* Signals we forward to the command; blocked before the fork so none is
	 * lost, and waited for synchronously. Blocked before any thread starts
	 * too: the samplers inherit the mask, or a SIGCHLD delivered to one of
	 * them would be discarded and the wait below would never end. */
	sigemptyset(&waitset);
	sigaddset(&waitset, SIGCHLD);
	sigaddset(&waitset, SIGTERM);
	sigaddset(&waitset, SIGINT);
	sigaddset(&waitset, SIGHUP);
	sigaddset(&waitset, SIGQUIT);
	sigprocmask(SIG_BLOCK, &waitset, &oldset);
	if (meters_open(&o, &ms) < 0) {
		meters_close(&ms);
		return EXIT_USAGE;
	}

	if ((o.freq_ratio > 0 || o.freq_khz > 0) && freq_set(&fc) < 0) {
		freq_restore(&fc);
		meters_close(&ms);
		return EXIT_USAGE;
	}
	wfd = phases_start(&ph, &o, &ms);
	if (wfd == -2) {
		freq_restore(&fc);
		meters_close(&ms);
		return EXIT_USAGE;
	}

	take(&ms, &a);
	child = fork();
	if (child < 0) {
		fprintf(stderr, PROG ": fork: %m\n");
		freq_restore(&fc);
		return EXIT_USAGE;
	}
	if (child == 0) {
		sigprocmask(SIG_SETMASK, &oldset, NULL);
		if (wfd >= 0)
			fcntl(wfd, F_SETFD, 0); /* the command's marker descriptor */
		execvp(o.cmd[0], o.cmd);
		fprintf(stderr, PROG ": cannot run '%s': %m\n", o.cmd[0]);
		_exit(errno == ENOENT ? 127 : 126);
	}
	if (wfd >= 0)
		close(wfd);
	status = wait_child(child, &waitset);
	phases_finish(&ph);
	take(&ms, &b);
	freq_restore(&fc);

	span_of(&ms, &a, &b, &s);
	if (o.json)
		print_json(&ms, &s, &ph, &a);
	else
		print_table(&ms, &s, &ph);
	meters_close(&ms);
	free(ph.v);

	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return 128 + WTERMSIG(status);
}
