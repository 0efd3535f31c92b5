/* joulestep-restore: put CPU frequencies back from the joulestep journal.
 *
 *   joulestep-restore [--state DIR] [--sysfs DIR] [--force] [--list]
 *
 * Without --force only CPUs whose owners (plugin steps, joulestep-run) are
 * all gone are restored, so a running step keeps its clock. --force restores
 * every saved CPU (for an admin on a drained node). --list shows the journal:
 * the CPU backups, then the uncore and GPU entries with their owners.
 * GPUs whose clocks a process locked (joulestep-run --gpu-io-clock-mhz) and
 * that it did not unlock are unlocked the same way, through the GPU library
 * (--gpu-backend, --gpu-lib: as joulestep-run). Uncore clocks a plugin step
 * lowered (+uncore-io) are put back from their journal entries too.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "joulestep/freq.h"
#include "joulestep/gpu.h"
#include "joulestep/uncore.h"

#define PROG "joulestep-restore"

static void usage(FILE *f)
{
	fprintf(f, "usage: " PROG " [--state DIR] [--sysfs DIR] [--force] [--list]\n"
		   "  --state DIR  journal directory (default /var/lib/joulestep)\n"
		   "  --sysfs DIR  sysfs root (default /sys)\n"
		   "  --force      restore CPUs even if their owners still run\n"
		   "  --list       only list saved CPUs\n"
		   "  --gpu-backend nvml|amdsmi, --gpu-lib PATH\n"
		   "               the GPU library for locked GPUs (default: as joulestep-run)\n");
}

/* GPUs left locked: only when the journal has entries is the library loaded. */
/* "uncore-<dom>: owner pid P (start S, boot B), saved ..." / "gpu-<uuid>: ..." */
static void list_entry(const char *name, const char *text, void *arg)
{
	int pid = 0, off = 0, off2 = 0;
	unsigned long long start = 0;
	char boot[40] = "-";
	const char *rest;

	(void)arg;
	if (sscanf(text, "%d %llu%n", &pid, &start, &off) < 2) {
		printf("%s: unreadable entry\n", name);
		return;
	}
	rest = text + off;
	if (sscanf(rest, " %39s%n", boot, &off2) == 1 && strlen(boot) == 36)
		rest += off2; /* the owner's boot id (entries of older versions have none) */
	else
		snprintf(boot, sizeof(boot), "-");
	while (*rest == ' ')
		rest++;
	printf("%s: owner pid %d (start %llu, boot %s)%s%s\n", name, pid, start, boot,
	       *rest ? ", saved " : "", rest);
}

/* --list: the CPU backups, then the uncore and GPU entries. */
static int list_journal(const char *state)
{
	int n = 0, rc;

	for (int cpu = 0; cpu < JS_MAX_CPUS; cpu++) {
		struct js_freq_saved s;

		if (js_freq_saved_read(state, cpu, &s) < 0)
			continue;
		printf("cpu%d governor=%s min_khz=%u max_khz=%u setspeed_khz=%u\n", cpu,
		       s.governor, s.min_khz, s.max_khz, s.setspeed_khz);
		n++;
	}
	if (!n)
		printf("no saved CPU frequencies in %s\n", state);
	rc = js_journal_list(state, list_entry, NULL);
	if (rc < 0) {
		fprintf(stderr, PROG ": %s: %s\n", state, strerror(-rc));
		return 1;
	}
	if (!rc)
		printf("no uncore or GPU clock entries in %s\n", state);
	return 0;
}

static int restore_gpus(const char *state, const struct js_gpu_opts *o, bool force)
{
	struct js_gpu_recovery r;
	struct js_gpus *g;
	char why[512];
	int rc = js_gpu_journal_count(state);

	if (rc <= 0)
		return rc < 0 && rc != -ENOENT ? 1 : 0;
	rc = js_gpu_open(o, &g, why, sizeof(why));
	if (rc < 0) {
		fprintf(stderr, PROG ": %d GPU journal entr%s, but no GPU library: %s\n",
			js_gpu_journal_count(state), js_gpu_journal_count(state) == 1 ? "y" : "ies", why);
		return 1;
	}
	rc = js_gpu_journal_recover(state, g, force, &r);
	js_gpu_close(g);
	if (rc < 0) {
		fprintf(stderr, PROG ": %s: %s\n", state, strerror(-rc));
		return 1;
	}
	printf("unlocked %d GPU%s", r.restored, r.restored == 1 ? "" : "s");
	if (r.busy)
		printf(", %d still held by running processes", r.busy);
	if (r.unknown)
		printf(", %d not seen by this GPU library", r.unknown);
	printf("\n");
	if (r.failed)
		fprintf(stderr, PROG ": %d GPU%s could not be unlocked\n", r.failed, r.failed == 1 ? "" : "s");
	return r.failed ? 1 : 0;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"state", required_argument, NULL, 's'},
		{"sysfs", required_argument, NULL, 'y'},
		{"force", no_argument, NULL, 'f'},
		{"list", no_argument, NULL, 'l'},
		{"gpu-backend", required_argument, NULL, 'B'},
		{"gpu-lib", required_argument, NULL, 'L'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *state = "/var/lib/joulestep", *sysfs = "/sys";
	bool force = false, list = false;
	struct js_gpu_opts gopts = {0};
	int c, rc, n = 0;

	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 's': state = optarg; break;
		case 'y': sysfs = optarg; break;
		case 'f': force = true; break;
		case 'l': list = true; break;
		case 'B': gopts.backend = optarg; break;
		case 'L': gopts.lib = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc) {
		fprintf(stderr, PROG ": unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (list)
		return list_journal(state);
	/* Every kind of clock is put back even when another kind fails: a
	 * failure is reported and makes the exit status 1, nothing more. */
	int status = 0;
	rc = js_freq_recover(state, sysfs, force, &n);
	if (rc < 0) {
		fprintf(stderr, PROG ": %s: %s\n", state, strerror(-rc));
		status = 1;
	} else {
		printf("restored %d CPU%s\n", n, n == 1 ? "" : "s");
	}
	struct js_uncore_recovery ur;
	rc = js_uncore_journal_recover(state, sysfs, force, &ur);
	if (rc < 0) {
		fprintf(stderr, PROG ": %s: uncore: %s\n", state, strerror(-rc));
		status = 1;
	} else if (ur.entries) {
		printf("restored %d uncore clock%s", ur.restored, ur.restored == 1 ? "" : "s");
		if (ur.busy)
			printf(", %d still held by running steps", ur.busy);
		printf("\n");
	}
	if (rc == 0 && ur.failed) {
		fprintf(stderr, PROG ": %d uncore clock%s could not be restored\n", ur.failed,
			ur.failed == 1 ? "" : "s");
		status = 1;
	}
	fflush(stdout);
	return restore_gpus(state, &gopts, force) ? 1 : status;
}
