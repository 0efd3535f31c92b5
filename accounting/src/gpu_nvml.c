/* NVIDIA GPUs through NVML (libnvidia-ml.so.1), loaded with dlopen().
 *
 * The few types and constants below are NVML's public ABI (nvml.h), written
 * out here so that building needs no NVIDIA header: a device handle is an
 * opaque pointer, every call returns an int status (0 = NVML_SUCCESS). */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_internal.h"
#include "js_internal.h"

typedef struct nvml_device *nvml_dev;

enum {
	NVML_OK = 0,
	NVML_ERR_INVALID_ARGUMENT = 2,
	NVML_ERR_NOT_SUPPORTED = 3,
	NVML_ERR_NO_PERMISSION = 4,
	NVML_ERR_NOT_FOUND = 6,
	NVML_ERR_DRIVER_NOT_LOADED = 9,
	NVML_ERR_GPU_IS_LOST = 15,
};
enum { NVML_CLK_GRAPHICS = 0, NVML_CLK_SM = 1, NVML_CLK_MEM = 2 };

struct nvml_api {
	int (*init)(void);
	int (*shutdown)(void);
	const char *(*error_string)(int);
	int (*count)(unsigned *);
	int (*handle)(unsigned, nvml_dev *);
	int (*uuid)(nvml_dev, char *, unsigned);
	int (*name)(nvml_dev, char *, unsigned);
	int (*energy)(nvml_dev, unsigned long long *);
	int (*power)(nvml_dev, unsigned *);
	int (*power_limits)(nvml_dev, unsigned *, unsigned *);
	int (*clock)(nvml_dev, int, unsigned *);
	int (*max_clock)(nvml_dev, int, unsigned *);
	int (*supported_gfx)(nvml_dev, unsigned, unsigned *, unsigned *);
	int (*mig_mode)(nvml_dev, unsigned *, unsigned *);
	int (*lock)(nvml_dev, unsigned, unsigned);
	int (*unlock)(nvml_dev);
	int (*minor)(nvml_dev, unsigned *);
};

#define API(g) ((struct nvml_api *)(g)->api)
#define DEV(g, i) ((nvml_dev)(g)->dev[i])

static int nvml_errno(int st)
{
	switch (st) {
	case NVML_OK: return 0;
	case NVML_ERR_NOT_SUPPORTED: return -EOPNOTSUPP;
	case NVML_ERR_NO_PERMISSION: return -EPERM;
	case NVML_ERR_NOT_FOUND: return -ENOENT;
	case NVML_ERR_INVALID_ARGUMENT: return -EINVAL;
	case NVML_ERR_DRIVER_NOT_LOADED: return -ENODEV;
	case NVML_ERR_GPU_IS_LOST: return -ENODEV;
	default: return -EIO;
	}
}

/* Status -> -errno, keeping NVML's words for the caller. */
static int status(struct js_gpus *g, const char *call, int st)
{
	if (st != NVML_OK)
		js_gpu_set_error(g, call, API(g)->error_string ? API(g)->error_string(st) : NULL, st);
	return nvml_errno(st);
}

#define SYM(field, name, required)                                                   \
	do {                                                                         \
		*(void **)&a->field = dlsym(g->dl, name);                            \
		if (required && !a->field) {                                         \
			js_fmt(why, whylen, "NVML lacks %s", name);                  \
			return -ENOSYS;                                              \
		}                                                                    \
	} while (0)

static int load(struct js_gpus *g, char *why, size_t whylen)
{
	struct nvml_api *a = calloc(1, sizeof(*a));

	if (!a)
		return -ENOMEM;
	g->api = a;
	SYM(init, "nvmlInit_v2", true);
	SYM(shutdown, "nvmlShutdown", true);
	SYM(error_string, "nvmlErrorString", true);
	SYM(count, "nvmlDeviceGetCount_v2", true);
	SYM(handle, "nvmlDeviceGetHandleByIndex_v2", true);
	SYM(uuid, "nvmlDeviceGetUUID", true);
	SYM(name, "nvmlDeviceGetName", true);
	SYM(energy, "nvmlDeviceGetTotalEnergyConsumption", false);
	SYM(power, "nvmlDeviceGetPowerUsage", true);
	SYM(power_limits, "nvmlDeviceGetPowerManagementLimitConstraints", false);
	SYM(clock, "nvmlDeviceGetClockInfo", false);
	SYM(max_clock, "nvmlDeviceGetMaxClockInfo", false);
	SYM(supported_gfx, "nvmlDeviceGetSupportedGraphicsClocks", false);
	SYM(mig_mode, "nvmlDeviceGetMigMode", false);
	SYM(lock, "nvmlDeviceSetGpuLockedClocks", false);
	SYM(unlock, "nvmlDeviceResetGpuLockedClocks", false);
	SYM(minor, "nvmlDeviceGetMinorNumber", false);
	return 0;
}

/* Lowest supported graphics clock at the current memory clock. */
static uint32_t min_gfx_mhz(struct nvml_api *a, nvml_dev d)
{
	unsigned mem = 0, cnt = 256, lo = 0;
	unsigned *clk;

	if (!a->supported_gfx || !a->clock || a->clock(d, NVML_CLK_MEM, &mem))
		return 0;
	clk = calloc(cnt, sizeof(*clk));
	if (!clk)
		return 0;
	if (a->supported_gfx(d, mem, &cnt, clk) == NVML_OK)
		for (unsigned k = 0; k < cnt && k < 256; k++)
			if (!lo || clk[k] < lo)
				lo = clk[k];
	free(clk);
	return lo;
}

static void describe(struct js_gpus *g, size_t k, unsigned idx, int minor)
{
	struct nvml_api *a = API(g);
	struct js_gpu_info *in = &g->info[k];
	nvml_dev d = DEV(g, k);
	unsigned long long e;
	unsigned cur = 0, pend = 0, lo = 0, hi = 0, mhz = 0;

	in->index = idx;
	in->minor = minor;
	if (a->uuid(d, in->uuid, sizeof(in->uuid)) != NVML_OK)
		js_fmt(in->uuid, sizeof(in->uuid), "GPU-index-%u", idx);
	if (a->name(d, in->name, sizeof(in->name)) != NVML_OK)
		js_fmt(in->name, sizeof(in->name), "unknown");
	in->energy_counter = a->energy && a->energy(d, &e) == NVML_OK;
	in->mig = a->mig_mode && a->mig_mode(d, &cur, &pend) == NVML_OK && cur == 1;
	if (a->power_limits && a->power_limits(d, &lo, &hi) == NVML_OK && hi)
		in->max_power_mw = hi;
	else
		in->max_power_mw = 2000u * 1000u; /* 2 kW: errs generous */
	if (a->max_clock && a->max_clock(d, NVML_CLK_GRAPHICS, &mhz) == NVML_OK)
		in->max_sm_mhz = mhz;
	in->min_sm_mhz = min_gfx_mhz(a, d);
}

static int nv_open(struct js_gpus *g, const char *sel, bool by_minor, char *why, size_t whylen)
{
	unsigned count = 0;
	int rc = load(g, why, whylen);

	if (rc < 0)
		return rc;
	if ((rc = status(g, "nvmlInit", API(g)->init())) < 0) {
		js_fmt(why, whylen, "%s", g->last_error);
		return rc;
	}
	if ((rc = status(g, "nvmlDeviceGetCount", API(g)->count(&count))) < 0) {
		js_fmt(why, whylen, "%s", g->last_error);
		API(g)->shutdown();
		return rc;
	}
	for (unsigned i = 0; i < count && g->n < JS_MAX_GPUS; i++) {
		nvml_dev d;
		char uuid[JS_GPU_UUID_LEN] = "";
		unsigned m = 0;
		int minor;

		if (API(g)->handle(i, &d) != NVML_OK)
			continue;
		API(g)->uuid(d, uuid, sizeof(uuid));
		/* the N of /dev/nvidiaN: NVML's own order is the PCI bus id's */
		minor = API(g)->minor && API(g)->minor(d, &m) == NVML_OK && m <= 0xffff ? (int)m : -1;
		if (!js_gpu_selected(sel, by_minor ? minor : (long)i, uuid))
			continue;
		g->dev[g->n] = d;
		describe(g, g->n, i, minor);
		g->n++;
	}
	if (!g->n) {
		const char *what = !sel || !strcmp(sel, "all") ? "GPU"
				   : by_minor ? "GPU whose device minor (/dev/nvidiaN) is selected"
					      : "selected GPU";

		js_fmt(why, whylen, "no %s (NVML sees %u)", what, count);
		API(g)->shutdown();
		return -ENODEV;
	}
	return 0;
}

static void nv_close(struct js_gpus *g) { API(g)->shutdown(); }

static int nv_read(struct js_gpus *g, size_t i, struct js_gpu_raw *out)
{
	unsigned long long e = 0;
	unsigned p = 0;
	int rc_e = -EOPNOTSUPP, rc_p;

	if (g->info[i].energy_counter) {
		rc_e = status(g, "nvmlDeviceGetTotalEnergyConsumption", API(g)->energy(DEV(g, i), &e));
		out->have_energy = rc_e == 0;
		out->energy_uj = e * 1000u; /* mJ */
	}
	rc_p = status(g, "nvmlDeviceGetPowerUsage", API(g)->power(DEV(g, i), &p));
	out->have_power = rc_p == 0;
	out->power_mw = p;
	return g->info[i].energy_counter ? rc_e : rc_p;
}

static int nv_sm_clock(struct js_gpus *g, size_t i, uint32_t *mhz)
{
	unsigned v = 0;
	int rc;

	if (!API(g)->clock)
		return -ENOSYS;
	rc = status(g, "nvmlDeviceGetClockInfo", API(g)->clock(DEV(g, i), NVML_CLK_SM, &v));
	*mhz = v;
	return rc;
}

static bool nv_can_lock(struct js_gpus *g, size_t i)
{
	(void)i;
	return API(g)->lock && API(g)->unlock;
}

static int nv_lock(struct js_gpus *g, size_t i, uint32_t lo, uint32_t hi)
{
	if (!API(g)->lock)
		return -ENOSYS;
	return status(g, "nvmlDeviceSetGpuLockedClocks", API(g)->lock(DEV(g, i), lo, hi));
}

static int nv_unlock(struct js_gpus *g, size_t i)
{
	if (!API(g)->unlock)
		return -ENOSYS;
	return status(g, "nvmlDeviceResetGpuLockedClocks", API(g)->unlock(DEV(g, i)));
}

const struct js_gpu_backend js_gpu_nvml = {
	.name = "nvml", .default_lib = "libnvidia-ml.so.1", .open = nv_open, .close = nv_close,
	.read = nv_read, .sm_clock = nv_sm_clock, .can_lock = nv_can_lock, .lock = nv_lock, .unlock = nv_unlock,
};
