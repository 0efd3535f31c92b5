/* bench_gpu: cost of one reading of all GPUs through joulestep's NVML backend
 * (js_gpu_read of each GPU: counter and power), beside the bare calls of the
 * same library functions in the same run; and one clock lock through the
 * backend beside the bare nvmlDeviceSetGpuLockedClocks.
 *
 *   bench_gpu --nvml LIB [--iters N]
 * Prints median and p99 in ns. On the NVML stand-in (tests/fakehw/gpu) the
 * figures are the stand-in's file reads; on a real GPU, the driver's.
 */
#include <dlfcn.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "joulestep/gpu.h"

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

static void report(const char *what, uint64_t *t, size_t n)
{
	qsort(t, n, sizeof(*t), cmp_u64);
	printf("%-58s median %9.0f ns  p99 %9.0f ns\n", what, (double)t[n / 2],
	       (double)t[(n * 99) / 100]);
}

int main(int argc, char **argv)
{
	const char *lib = NULL;
	long iters = 2000;
	int c;

	while ((c = getopt_long(argc, argv, "", (struct option[]){{"nvml", 1, 0, 'l'},
		{"iters", 1, 0, 'i'}, {0, 0, 0, 0}}, NULL)) != -1)
		if (c == 'l')
			lib = optarg;
		else if (c == 'i')
			iters = atol(optarg);
	struct js_gpu_opts o = {.backend = "nvml", .lib = lib};
	struct js_gpus *g;
	char why[256];
	if (!lib || iters < 10 || js_gpu_open(&o, &g, why, sizeof(why)) < 0) {
		fprintf(stderr, "bench_gpu: --nvml LIB [--iters N>=10]: %s\n", why);
		return 2;
	}
	void *dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	int (*init)(void) = (int (*)(void))dlsym(dl, "nvmlInit_v2");
	int (*handle)(unsigned, void **) = (int (*)(unsigned, void **))dlsym(dl, "nvmlDeviceGetHandleByIndex_v2");
	int (*energy)(void *, unsigned long long *) =
		(int (*)(void *, unsigned long long *))dlsym(dl, "nvmlDeviceGetTotalEnergyConsumption");
	int (*power)(void *, unsigned *) = (int (*)(void *, unsigned *))dlsym(dl, "nvmlDeviceGetPowerUsage");
	int (*lock)(void *, unsigned, unsigned) = (int (*)(void *, unsigned, unsigned))dlsym(dl, "nvmlDeviceSetGpuLockedClocks");
	size_t n = js_gpu_count(g);
	void *h[JS_MAX_GPUS];
	uint64_t *t = calloc((size_t)iters, sizeof(*t));

	init();
	for (size_t i = 0; i < n; i++)
		handle(js_gpu_info(g, i)->index, &h[i]);
	for (long k = 0; k < iters; k++) {
		uint64_t t0 = now_ns();
		for (size_t i = 0; i < n; i++) {
			struct js_gpu_raw r;
			js_gpu_read(g, i, &r);
		}
		t[k] = now_ns() - t0;
	}
	char what[96];
	snprintf(what, sizeof(what), "joulestep: one reading of %zu GPUs (counter + power)", n);
	report(what, t, (size_t)iters);
	for (long k = 0; k < iters; k++) {
		uint64_t t0 = now_ns();
		for (size_t i = 0; i < n; i++) {
			unsigned long long e;
			unsigned p;
			energy(h[i], &e);
			power(h[i], &p);
		}
		t[k] = now_ns() - t0;
	}
	report("bare: the same NVML calls", t, (size_t)iters);
	long liters = iters < 200 ? iters : 200; /* every lock appends to the stand-in's log */
	for (long k = 0; k < liters; k++) {
		uint64_t t0 = now_ns();
		js_gpu_lock_mhz(g, 0, 345, 900);
		t[k] = now_ns() - t0;
	}
	report("joulestep: lock one GPU's clock", t, (size_t)liters);
	for (long k = 0; k < liters; k++) {
		uint64_t t0 = now_ns();
		lock(h[0], 345, 900);
		t[k] = now_ns() - t0;
	}
	report("bare: nvmlDeviceSetGpuLockedClocks", t, (size_t)liters);
	js_gpu_unlock(g, 0);
	js_gpu_close(g);
	return 0;
}
