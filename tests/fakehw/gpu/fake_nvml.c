/* A stand-in for NVIDIA's libnvidia-ml.so.1 on machines without a GPU.
 *
 * It implements only the calls joulestep makes, with NVML's ABI (an int
 * status, opaque device handles, the same argument types), written here
 * from the public documentation. The GPUs live in a fakehw tree named by
 * $FAKEHW_GPU_ROOT (tests/fakehw/fakehw.py: gpu_create), one directory per
 * GPU whose `vendor` is "nvidia", and follow fakehw's GPU model (sim/README.md, "GPUs"):
 *
 *   P(u, f) = idle_mw + (max_mw - idle_mw) * u * (f / max_mhz)^2
 *
 * where u is the utilisation a test appends to `load` ("mono_ns util"
 * lines) and f the graphics clock: max_mhz, or the locked maximum after
 * nvmlDeviceSetGpuLockedClocks (appended to `locks` as "mono_ns min max";
 * "mono_ns 0 0" on reset). The energy counter is the integral of P since
 * the driver loaded (`t0_ns`) or since the last line of `resets`, seen in
 * steps of `period_ms`, plus `offset_mj` before any reset. Test code only.
 */
#include <stdio.h>
#include <string.h>

#include "fake_model.h"

struct fgpu { int g; };
static struct fgpu devs[MAXG];
static int ndevs = -1;

enum { OK = 0, UNINIT = 1, INVAL = 2, NOTSUP = 3, NOPERM = 4, NOTFOUND = 6, SMALL = 7, NODRV = 9 };

static int dev_of(void *h)
{
	struct fgpu *d = h;

	if (ndevs < 0)
		return -UNINIT;
	if (!d || d < devs || d >= devs + ndevs)
		return -INVAL;
	return d->g;
}

int nvmlInit_v2(void)
{
	int gs[MAXG], n = fm_list("nvidia", gs);

	if (n < 0)
		return NODRV;
	for (ndevs = 0; ndevs < n; ndevs++)
		devs[ndevs].g = gs[ndevs];
	return OK;
}

int nvmlShutdown(void) { ndevs = -1; return OK; }

const char *nvmlErrorString(int st)
{
	switch (st) {
	case OK: return "Success";
	case UNINIT: return "Uninitialized";
	case INVAL: return "Invalid Argument";
	case NOTSUP: return "Not Supported";
	case NOPERM: return "Insufficient Permissions";
	case NOTFOUND: return "Not Found";
	case SMALL: return "Insufficient Size";
	case NODRV: return "Driver Not Loaded";
	default: return "Unknown Error";
	}
}

int nvmlDeviceGetCount_v2(unsigned *n)
{
	if (ndevs < 0)
		return UNINIT;
	*n = (unsigned)ndevs;
	return OK;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h)
{
	if (ndevs < 0)
		return UNINIT;
	if ((int)i >= ndevs)
		return INVAL;
	*h = &devs[i];
	return OK;
}

static int get_str(void *h, const char *f, char *out, unsigned len)
{
	char b[256];
	int g = dev_of(h);

	if (g < 0)
		return -g;
	if (fm_str(g, f, b, sizeof(b)))
		return NOTSUP;
	if (strlen(b) + 1 > len)
		return SMALL;
	strcpy(out, b);
	return OK;
}

int nvmlDeviceGetUUID(void *h, char *out, unsigned len) { return get_str(h, "uuid", out, len); }
int nvmlDeviceGetName(void *h, char *out, unsigned len) { return get_str(h, "name", out, len); }

int nvmlDeviceGetTotalEnergyConsumption(void *h, unsigned long long *mj)
{
	int g = dev_of(h);

	if (g < 0)
		return -g;
	if (fm_num(g, "counter", 1) == 0)
		return NOTSUP;
	*mj = (unsigned long long)fm_counter_mj(g);
	return OK;
}

int nvmlDeviceGetPowerUsage(void *h, unsigned *mw)
{
	int g = dev_of(h);

	if (g < 0)
		return -g;
	*mw = (unsigned)fm_power_mw(g);
	return OK;
}

int nvmlDeviceGetPowerManagementLimitConstraints(void *h, unsigned *lo, unsigned *hi)
{
	int g = dev_of(h);

	if (g < 0)
		return -g;
	*lo = (unsigned)fm_num(g, "idle_mw", 60000);
	*hi = (unsigned)fm_num(g, "max_mw", 700000);
	return OK;
}

int nvmlDeviceGetClockInfo(void *h, int type, unsigned *mhz)
{
	int g = dev_of(h);

	if (g < 0)
		return -g;
	*mhz = (unsigned)(type == 2 /* NVML_CLOCK_MEM */ ? fm_num(g, "mem_mhz", 2619) : fm_sm_mhz(g));
	return OK;
}

int nvmlDeviceGetMaxClockInfo(void *h, int type, unsigned *mhz)
{
	int g = dev_of(h);

	if (g < 0)
		return -g;
	*mhz = (unsigned)(type == 2 ? fm_num(g, "mem_mhz", 2619) : fm_num(g, "max_mhz", 1980));
	return OK;
}

int nvmlDeviceGetSupportedGraphicsClocks(void *h, unsigned mem, unsigned *count, unsigned *clk)
{
	int g = dev_of(h);
	unsigned lo, hi, n = 0;

	(void)mem;
	if (g < 0)
		return -g;
	lo = (unsigned)fm_num(g, "min_mhz", 345);
	hi = (unsigned)fm_num(g, "max_mhz", 1980);
	for (unsigned f = hi; f >= lo && f <= hi; f -= 15) {
		if (n < *count)
			clk[n] = f;
		n++;
	}
	if (n > *count) {
		*count = n;
		return SMALL;
	}
	*count = n;
	return OK;
}

/* The N of /dev/nvidiaN: the GPU's `minor` (default: its directory's number,
 * so index and minor agree unless a test says otherwise). */
int nvmlDeviceGetMinorNumber(void *h, unsigned *minor)
{
	int g = dev_of(h);

	if (g < 0)
		return -g;
	*minor = (unsigned)fm_num(g, "minor", g);
	return OK;
}

int nvmlDeviceGetMigMode(void *h, unsigned *cur, unsigned *pend)
{
	int g = dev_of(h);

	if (g < 0)
		return -g;
	*cur = *pend = (unsigned)fm_num(g, "mig", 0);
	return OK;
}

static int lock(void *h, unsigned lo, unsigned hi)
{
	int g = dev_of(h);

	if (g < 0)
		return -g;
	if (fm_num(g, "lock_permission", 1) == 0)
		return NOPERM;
	if (hi && (lo > hi || hi < fm_num(g, "min_mhz", 345)))
		return INVAL;
	return fm_append_lock(g, lo, hi) ? 999 : OK;
}

int nvmlDeviceSetGpuLockedClocks(void *h, unsigned lo, unsigned hi)
{
	return hi ? lock(h, lo, hi) : INVAL;
}

int nvmlDeviceResetGpuLockedClocks(void *h) { return lock(h, 0, 0); }
