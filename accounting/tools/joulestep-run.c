/* joulestep-run: measure the RAPL energy of any command, as `perf stat`
 * does, optionally running it at a chosen CPU frequency.
 *
 *   joulestep-run [--sysfs DIR] [--backend powercap|papi|sysfs] [--papi-components LIST]
 *                 [--sample-ms N] [--freq-ratio R | --freq-khz K] [--state DIR] [--json]
 *                 -- CMD ARGS...
 *
 * Frequencies are changed only on the CPUs the command may run on (our
 * affinity mask), saved first in the crash-safe journal, and restored when
 * the command ends, is killed, or when we get SIGTERM/SIGINT/SIGHUP. If this
 * process itself is SIGKILLed, `joulestep-restore` restores from the journal.
 * The exit status is the command's (128+N when it died of signal N).
 */
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "joulestep/energy.h"
#include "joulestep/freq.h"

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
	char **cmd;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " [--sysfs DIR] [--backend powercap|papi|sysfs] [--papi-components LIST]\n"
		"                     [--sample-ms N] [--freq-ratio R | --freq-khz K] [--state DIR] [--json]\n"
		"                     -- CMD ARGS...\n"
		"  --sysfs DIR      sysfs root to read (default /sys)\n"
		"  --backend LIST   backends to try, comma separated (default powercap,papi,sysfs)\n"
		"  --papi-components LIST\n"
		"                   PAPI components the papi backend may use, comma separated, or none\n"
		"                   (default powercap,rapl,perf_event_uncore)\n"
		"  --sample-ms N    cap of the wrap-safe sampling period, 1..3600000 ms (default 1000)\n"
		"  --freq-ratio R   run CMD at R*fmax, 0 < R <= 1\n"
		"  --freq-khz K     run CMD at K kHz (clamped to the CPU's range)\n"
		"  --state DIR      root-only journal of saved frequencies (default /var/lib/joulestep)\n"
		"  --json           print one JSON object instead of a table\n");
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
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	char *end;
	int c;

	*o = (struct opts){.sysfs = "/sys", .state = "/var/lib/joulestep", .sample_ms = 1000};
	while ((c = getopt_long(argc, argv, "+h", lo, NULL)) != -1) {
		switch (c) {
		case 's': o->sysfs = optarg; break;
		case 'b': o->backend = optarg; break;
		case 'P': o->papi_components = optarg; break;
		case 'S': o->state = optarg; break;
		case 'j': o->json = true; break;
		case 'p':
			errno = 0;
			o->sample_ms = strtol(optarg, &end, 10);
			if (errno || *end || o->sample_ms < 1 || o->sample_ms > 3600000) {
				fprintf(stderr, PROG ": --sample-ms must be an integer in 1..3600000, not '%s'\n", optarg);
				return -1;
			}
			break;
		case 'r':
			errno = 0;
			o->freq_ratio = strtod(optarg, &end);
			if (errno || *end || !(o->freq_ratio > 0.0 && o->freq_ratio <= 1.0)) {
				fprintf(stderr, PROG ": --freq-ratio must be a number in (0, 1], not '%s'\n", optarg);
				return -1;
			}
			break;
		case 'k':
			errno = 0;
			o->freq_khz = strtol(optarg, &end, 10);
			if (errno || *end || o->freq_khz < 1 || o->freq_khz > 100000000) {
				fprintf(stderr, PROG ": --freq-khz must be a positive integer (kHz), not '%s'\n", optarg);
				return -1;
			}
			break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return -1;
		}
	}
	if (o->freq_ratio > 0 && o->freq_khz > 0) {
		fprintf(stderr, PROG ": give either --freq-ratio or --freq-khz, not both\n");
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

/* ---- report ------------------------------------------------------------------ */

static void print_table(const struct js_energy *e, const struct js_interval *iv)
{
	const struct js_zone_set *zs = js_energy_zones(e);
	double secs = (double)iv->duration_ns / 1e9;

	fprintf(stderr, "\n Energy of the command (backend %s):\n\n", js_energy_backend_name(e));
	for (size_t i = 0; i < zs->nzones; i++)
		fprintf(stderr, "  %14.6f J  %-18s %s%s\n", (double)iv->energy_uj[i] / 1e6,
			zs->zones[i].name, zs->zones[i].id,
			iv->wraps[i] ? "  (counter wrapped)" : "");
	fprintf(stderr, "\n  %14.6f J  CPU\n  %14.6f J  DRAM\n  %14.6f J  total\n",
		(double)iv->energy_cpu_uj / 1e6, (double)iv->energy_dram_uj / 1e6,
		(double)iv->energy_total_uj / 1e6);
	fprintf(stderr, "\n  %14.6f s  elapsed\n  %14.6f W  average power\n", secs,
		secs > 0 ? (double)iv->energy_total_uj / 1e6 / secs : 0.0);
	if (iv->wrap_uncertain)
		fprintf(stderr, "\n  WARNING: a sampling gap exceeded a counter's wrap time; "
				"energies are lower bounds\n");
}

static void print_json(const struct js_energy *e, const struct js_interval *iv)
{
	const struct js_zone_set *zs = js_energy_zones(e);
	double secs = (double)iv->duration_ns / 1e9;
	json_t *zones = json_array(), *o;

	for (size_t i = 0; i < zs->nzones; i++)
		json_array_append_new(zones, json_pack("{s:s, s:s, s:s, s:f, s:I, s:i}",
			"name", zs->zones[i].name, "id", zs->zones[i].id,
			"kind", zs->zones[i].kind == JS_ZONE_DRAM ? "dram" : "package",
			"energy_j", (double)iv->energy_uj[i] / 1e6,
			"energy_uj", (json_int_t)iv->energy_uj[i], "wraps", (int)iv->wraps[i]));
	o = json_pack("{s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:o, s:b, s:s}",
		"duration_s", secs,
		"energy_cpu_j", (double)iv->energy_cpu_uj / 1e6,
		"energy_dram_j", (double)iv->energy_dram_uj / 1e6,
		"energy_total_j", (double)iv->energy_total_uj / 1e6,
		"avg_power_w", secs > 0 ? (double)iv->energy_total_uj / 1e6 / secs : 0.0,
		"energy_cpu_uj", (json_int_t)iv->energy_cpu_uj,
		"energy_dram_uj", (json_int_t)iv->energy_dram_uj,
		"zones", zones, "wrap_uncertain", iv->wrap_uncertain,
		"backend", js_energy_backend_name(e));
	json_dumpf(o, stdout, JSON_INDENT(2));
	fputc('\n', stdout);
	json_decref(o);
}

/* ---- main ----------------------------------------------------------------------- */

int main(int argc, char **argv)
{
	struct js_energy_opts eo;
	struct js_energy *e = NULL;
	struct js_meter *m = NULL;
	struct js_snapshot a, b;
	struct js_interval iv;
	struct freq_ctx fc = {.o = NULL};
	struct opts o;
	sigset_t waitset, oldset;
	char why[1024] = "";
	int rc, status = 0, exit_code;
	pid_t child;

	if (parse_args(argc, argv, &o) < 0)
		return EXIT_USAGE;
	fc.o = &o;

	eo = (struct js_energy_opts){.sysfs_root = o.sysfs, .order = o.backend,
				     .papi_components = o.papi_components};
	rc = js_energy_open(&eo, &e, why, sizeof(why));
	if (rc < 0) {
		fprintf(stderr, PROG ": no energy backend works:\n%s\n", why);
		return EXIT_USAGE;
	}
	rc = js_meter_start(e, (uint64_t)o.sample_ms * 1000000ULL, true, &m);
	if (rc < 0) {
		fprintf(stderr, PROG ": cannot start the sampler: %s\n", strerror(-rc));
		js_energy_close(e);
		return EXIT_USAGE;
	}

	/* Signals we forward to the command; blocked before the fork so none is
	 * lost, and waited for synchronously. */
	sigemptyset(&waitset);
	sigaddset(&waitset, SIGCHLD);
	sigaddset(&waitset, SIGTERM);
	sigaddset(&waitset, SIGINT);
	sigaddset(&waitset, SIGHUP);
	sigaddset(&waitset, SIGQUIT);
	sigprocmask(SIG_BLOCK, &waitset, &oldset);

	if ((o.freq_ratio > 0 || o.freq_khz > 0) && freq_set(&fc) < 0) {
		freq_restore(&fc);
		js_meter_stop(m);
		js_energy_close(e);
		return EXIT_USAGE;
	}

	js_meter_snapshot(m, &a);
	child = fork();
	if (child < 0) {
		fprintf(stderr, PROG ": fork: %m\n");
		freq_restore(&fc);
		return EXIT_USAGE;
	}
	if (child == 0) {
		sigprocmask(SIG_SETMASK, &oldset, NULL);
		execvp(o.cmd[0], o.cmd);
		fprintf(stderr, PROG ": cannot run '%s': %m\n", o.cmd[0]);
		_exit(errno == ENOENT ? 127 : 126);
	}

	for (;;) {
		siginfo_t si;
		int sig = sigwaitinfo(&waitset, &si);

		if (sig < 0)
			continue; /* EINTR */
		if (sig != SIGCHLD) {
			kill(child, sig); /* the command decides; we restore when it ends */
			continue;
		}
		rc = waitpid(child, &status, WNOHANG);
		if (rc == child)
			break;
	}
	js_meter_snapshot(m, &b);
	freq_restore(&fc);
	js_meter_stop(m);

	js_interval_of(e, &a, &b, &iv);
	if (o.json)
		print_json(e, &iv);
	else
		print_table(e, &iv);
	js_energy_close(e);

	if (WIFEXITED(status))
		exit_code = WEXITSTATUS(status);
	else
		exit_code = 128 + WTERMSIG(status);
	return exit_code;
}
