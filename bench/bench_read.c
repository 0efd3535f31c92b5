/* bench_read: cost of one full reading of all RAPL zones per backend,
 * beside a bare pread() of one counter file in the same run.
 *
 *   bench_read --sysfs DIR --backend NAME [--iters N] --baseline FILE
 * Prints median and p99 in ns per reading and per zone.
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

int main(int argc, char **argv)
{
	const char *sysfs = "/sys", *backend = "sysfs", *baselines[4];
	int nbase = 0;
	long iters = 200000;
	int c;
	static const struct option lo[] = {
		{"sysfs", required_argument, NULL, 's'}, {"backend", required_argument, NULL, 'b'},
		{"iters", required_argument, NULL, 'n'}, {"baseline", required_argument, NULL, 'B'},
		{NULL, 0, NULL, 0}};

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 's': sysfs = optarg; break;
		case 'b': backend = optarg; break;
		case 'n': iters = atol(optarg); break;
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
