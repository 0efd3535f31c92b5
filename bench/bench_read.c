/* bench_read: cost of one full reading of all RAPL zones per backend,
 * beside a bare pread() of one counter file in the same run.
 *
 *   bench_read --sysfs DIR --backend NAME [--iters N] --baseline FILE
 * Prints median and p99 in ns per reading and per zone.
 *
 *   bench_read --sysfs DIR --cpufreq [--iters N]
 * One clock change of every cpufreq CPU of the tree the way the plugin's step
 * thread makes it (js_freq_ctl_set on handles opened once), beside the bare
 * pwrite() of the same scaling_max_freq files with the same values, and the
 * one-shot js_freq_apply (state re-read, files opened per CPU) for scale.
 * Each change alternates between two caps, so every one writes.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "joulestep/energy.h"
#include "joulestep/freq.h"

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void report(const char *what, uint64_t *t, size_t n, size_t per)
{
	qsort(t, n, sizeof(*t), cmp_u64);
	uint64_t med = t[n / 2], p99 = t[(n * 99) / 100];
	printf("%-56s median %8.0f ns  p99 %8.0f ns", what, (double)med, (double)p99);
	if (per > 1)
		printf("  | per zone: median %6.0f ns  p99 %6.0f ns", (double)med / per, (double)p99 / per);
	printf("\n");
}

static void report_cpus(const char *what, uint64_t *t, size_t n, size_t ncpu)
{
	qsort(t, n, sizeof(*t), cmp_u64);
	uint64_t med = t[n / 2], p99 = t[(n * 99) / 100];
	printf("%-56s median %8.0f ns  p99 %8.0f ns  | per CPU: median %5.0f ns  p99 %5.0f ns\n", what,
	       (double)med, (double)p99, (double)med / ncpu, (double)p99 / ncpu);
}

static int bench_cpufreq(const char *sysfs, long iters, uint64_t *t)
{
	struct js_cpuset on;
	int rc = js_cpufreq_online(sysfs, &on);
	if (rc < 0) {
		fprintf(stderr, "bench_read: no cpufreq under %s: %s\n", sysfs, strerror(-rc));
		return 1;
	}
	int n = js_cpuset_count(&on), k = 0;
	struct js_freq_ctl *ctl = calloc((size_t)n, sizeof(*ctl));
	int *fds = calloc((size_t)n, sizeof(*fds));
	uint32_t lo[JS_MAX_CPUS], hi[JS_MAX_CPUS];
	if (!ctl || !fds)
		return 1;
	for (int cpu = 0; cpu < JS_MAX_CPUS && k < n; cpu++) {
		struct js_cpufreq f;
		char path[4200];
		if (!js_cpuset_isset(&on, cpu))
			continue;
		if ((rc = js_cpufreq_read(sysfs, cpu, &f)) < 0 ||
		    (rc = js_freq_ctl_open(sysfs, &f, f.scaling_min_khz, f.scaling_max_khz, &ctl[k])) < 0 ||
		    (rc = js_freq_ctl_ratio_khz(&ctl[k], 0.85, &lo[k])) < 0 ||
		    (rc = js_freq_ctl_ratio_khz(&ctl[k], 0.5, &hi[k])) < 0) {
			fprintf(stderr, "bench_read: cpu%d: %s\n", cpu, strerror(-rc));
			return 1;
		}
		snprintf(path, sizeof(path), "%s/devices/system/cpu/cpu%d/cpufreq/scaling_max_freq", sysfs, cpu);
		fds[k] = open(path, O_WRONLY | O_CLOEXEC);
		if (fds[k] < 0) {
			fprintf(stderr, "bench_read: %s: %s\n", path, strerror(errno));
			return 1;
		}
		k++;
	}
	char what[96];
	/* baseline: the bare pwrite of the same files, same values */
	for (long i = 0; i < iters; i++) {
		const uint32_t *v = i % 2 ? hi : lo;
		uint64_t t0 = now_ns();
		for (int j = 0; j < n; j++) {
			char buf[16];
			size_t len = js_freq_fmt_khz(buf, sizeof(buf), v[j]);
			if (pwrite(fds[j], buf, len, 0) != (ssize_t)len)
				return 1;
		}
		t[i] = now_ns() - t0;
	}
	snprintf(what, sizeof(what), "baseline: bare pwrite of %d scaling_max_freq", n);
	report_cpus(what, t, (size_t)iters, (size_t)n);
	for (long i = 0; i < iters; i++) {
		const uint32_t *v = i % 2 ? hi : lo;
		uint64_t t0 = now_ns();
		for (int j = 0; j < n; j++)
			if (js_freq_ctl_set(&ctl[j], v[j], NULL) < 0)
				return 1;
		t[i] = now_ns() - t0;
	}
	snprintf(what, sizeof(what), "clock change of %d CPUs (js_freq_ctl_set)", n);
	report_cpus(what, t, (size_t)iters, (size_t)n);
	/* for scale: the one-shot path the plugin used before (issue 8, defect 2) */
	long few = iters / 20 < 100 ? 100 : iters / 20;
	for (long i = 0; i < few; i++) {
		const uint32_t *v = i % 2 ? hi : lo;
		uint64_t t0 = now_ns();
		for (int j = 0; j < n; j++)
			if (js_freq_apply(sysfs, &ctl[j].info, v[j], NULL, NULL) < 0)
				return 1;
		t[i] = now_ns() - t0;
	}
	snprintf(what, sizeof(what), "for scale: one-shot js_freq_apply x %d", n);
	report_cpus(what, t, (size_t)few, (size_t)n);
	for (int j = 0; j < n; j++) {
		js_freq_ctl_restore(&ctl[j]);
		js_freq_ctl_close(&ctl[j]);
		close(fds[j]);
	}
	free(ctl);
	free(fds);
	return 0;
}

int main(int argc, char **argv)
{
	const char *sysfs = "/sys", *backend = "sysfs", *baselines[4];
	int nbase = 0;
	long iters = 200000;
	bool cpufreq = false;
	int c;
	static const struct option lo[] = {
		{"sysfs", required_argument, NULL, 's'}, {"backend", required_argument, NULL, 'b'},
		{"iters", required_argument, NULL, 'n'}, {"baseline", required_argument, NULL, 'B'},
		{"cpufreq", no_argument, NULL, 'c'}, {NULL, 0, NULL, 0}};

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 's': sysfs = optarg; break;
		case 'b': backend = optarg; break;
		case 'n': iters = atol(optarg); break;
		case 'c': cpufreq = true; break;
		case 'B':
			if (nbase < 4)
				baselines[nbase++] = optarg;
			break;
		default: return 2;
		}
	}
	if (iters < 100)
		iters = 100;
	uint64_t *t = calloc((size_t)iters, sizeof(*t));
	if (!t)
		return 1;
	if (cpufreq) {
		int rc = bench_cpufreq(sysfs, iters, t);
		free(t);
		return rc;
	}

	for (int bi = 0; bi < nbase; bi++) {
		const char *baseline = baselines[bi];
		int fd = open(baseline, O_RDONLY | O_CLOEXEC);
		char buf[64];
		if (fd < 0) {
			fprintf(stderr, "bench_read: %s: %s\n", baseline, strerror(errno));
			return 1;
		}
		for (long i = 0; i < iters; i++) {
			uint64_t t0 = now_ns();
			if (pread(fd, buf, sizeof(buf), 0) < 0)
				return 1;
			t[i] = now_ns() - t0;
		}
		close(fd);
		char what[96];
		snprintf(what, sizeof(what), "baseline: bare pread %.40s", baseline);
		report(what, t, (size_t)iters, 1);
	}

	struct js_energy_opts eo = {.sysfs_root = sysfs, .order = backend};
	struct js_energy *e;
	char why[1024] = "";
	int rc = js_energy_open(&eo, &e, why, sizeof(why));
	if (rc < 0) {
		printf("backend %-8s unavailable: %s\n", backend, why);
		return 0;
	}
	size_t nz = js_energy_zones(e)->nzones;
	uint64_t raw[JS_MAX_ZONES];
	int err[JS_MAX_ZONES];
	for (long i = 0; i < iters; i++) {
		uint64_t t0 = now_ns();
		js_energy_read_uj(e, raw, err);
		t[i] = now_ns() - t0;
	}
	char what[64];
	snprintf(what, sizeof(what), "backend %s: read %zu zones", js_energy_backend_name(e), nz);
	report(what, t, (size_t)iters, nz);
	js_energy_close(e);
	free(t);
	return 0;
}
