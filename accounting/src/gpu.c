/* GPUs through NVIDIA's management library, loaded with dlopen().
 *
 * The few types and constants below are NVML's public ABI (nvml.h), written
 * out here so that building needs no NVIDIA header: a device handle is an
 * opaque pointer, every call returns an int status (0 = NVML_SUCCESS). */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "joulestep/gpu.h"
#include "js_internal.h"

typedef struct nvml_device *nvml_dev;

enum {
	NVML_OK = 0,
	NVML_ERR_UNINITIALIZED = 1,
	NVML_ERR_INVALID_ARGUMENT = 2,
	NVML_ERR_NOT_SUPPORTED = 3,
	NVML_ERR_NO_PERMISSION = 4,
	NVML_ERR_NOT_FOUND = 6,
	NVML_ERR_INSUFFICIENT_SIZE = 7,
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
	int (*power_limit_max)(nvml_dev, unsigned *, unsigned *);
	int (*clock)(nvml_dev, int, unsigned *);
	int (*max_clock)(nvml_dev, int, unsigned *);
	int (*supported_gfx)(nvml_dev, unsigned, unsigned *, unsigned *);
	int (*mig_mode)(nvml_dev, unsigned *, unsigned *);
	int (*lock)(nvml_dev, unsigned, unsigned);
	int (*unlock)(nvml_dev);
};

struct js_gpus {
	void *dl;
	struct nvml_api api;
	size_t n;
	nvml_dev dev[JS_MAX_GPUS];
	struct js_gpu_info info[JS_MAX_GPUS];
	pthread_mutex_t mu; /* last_error */
	char last_error[JS_GPU_ERR_LEN];
};

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
	const char *s;

	if (st == NVML_OK)
		return 0;
	s = g->api.error_string ? g->api.error_string(st) : NULL;
	pthread_mutex_lock(&g->mu);
	js_fmt(g->last_error, sizeof(g->last_error), "%s: %s (NVML status %d)", call,
	       s ? s : "unknown error", st);
	pthread_mutex_unlock(&g->mu);
	return nvml_errno(st);
}

#define SYM(field, name, required)                                                   \
	do {                                                                         \
		*(void **)&g->api.field = dlsym(g->dl, name);                        \
		if (required && !g->api.field) {                                     \
			js_fmt(why, whylen, "NVML lacks %s", name);                  \
			return -ENOSYS;                                              \
		}                                                                    \
	} while (0)

static int load(struct js_gpus *g, const char *lib, char *why, size_t whylen)
{
	g->dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!g->dl) {
		const char *e = dlerror();

		js_fmt(why, whylen, "cannot load %s: %s", lib, e ? e : "?");
		return -ENOENT;
	}
	SYM(init, "nvmlInit_v2", true);
	SYM(shutdown, "nvmlShutdown", true);
	SYM(error_string, "nvmlErrorString", true);
	SYM(count, "nvmlDeviceGetCount_v2", true);
	SYM(handle, "nvmlDeviceGetHandleByIndex_v2", true);
	SYM(uuid, "nvmlDeviceGetUUID", true);
	SYM(name, "nvmlDeviceGetName", true);
	SYM(energy, "nvmlDeviceGetTotalEnergyConsumption", false);
	SYM(power, "nvmlDeviceGetPowerUsage", true);
	SYM(power_limit_max, "nvmlDeviceGetPowerManagementLimitConstraints", false);
	SYM(clock, "nvmlDeviceGetClockInfo", false);
	SYM(max_clock, "nvmlDeviceGetMaxClockInfo", false);
	SYM(supported_gfx, "nvmlDeviceGetSupportedGraphicsClocks", false);
	SYM(mig_mode, "nvmlDeviceGetMigMode", false);
	SYM(lock, "nvmlDeviceSetGpuLockedClocks", false);
	SYM(unlock, "nvmlDeviceResetGpuLockedClocks", false);
	return 0;
}

/* Lowest supported graphics clock at the current memory clock. */
static uint32_t min_gfx_mhz(struct js_gpus *g, nvml_dev d)
{
	unsigned mem = 0, cnt = 256, lo = 0;
	unsigned *clk;

	if (!g->api.supported_gfx || !g->api.clock || g->api.clock(d, NVML_CLK_MEM, &mem))
		return 0;
	clk = calloc(cnt, sizeof(*clk));
	if (!clk)
		return 0;
	if (g->api.supported_gfx(d, mem, &cnt, clk) == NVML_OK)
		for (unsigned k = 0; k < cnt && k < 256; k++)
			if (!lo || clk[k] < lo)
				lo = clk[k];
	free(clk);
	return lo;
}

static void describe(struct js_gpus *g, size_t k, unsigned idx)
{
	struct js_gpu_info *in = &g->info[k];
	nvml_dev d = g->dev[k];
	unsigned long long e;
	unsigned cur = 0, pend = 0, lo = 0, hi = 0, mhz = 0;

	in->index = idx;
	if (g->api.uuid(d, in->uuid, sizeof(in->uuid)) != NVML_OK)
		js_fmt(in->uuid, sizeof(in->uuid), "GPU-index-%u", idx);
	if (g->api.name(d, in->name, sizeof(in->name)) != NVML_OK)
		js_fmt(in->name, sizeof(in->name), "unknown");
	in->energy_counter = g->api.energy && g->api.energy(d, &e) == NVML_OK;
	in->mig = g->api.mig_mode && g->api.mig_mode(d, &cur, &pend) == NVML_OK && cur == 1;
	if (g->api.power_limit_max && g->api.power_limit_max(d, &lo, &hi) == NVML_OK && hi)
		in->max_power_mw = hi;
	else
		in->max_power_mw = 2000u * 1000u; /* 2 kW: errs generous */
	if (g->api.max_clock && g->api.max_clock(d, NVML_CLK_GRAPHICS, &mhz) == NVML_OK)
		in->max_sm_mhz = mhz;
	in->min_sm_mhz = min_gfx_mhz(g, d);
}

/* Is device idx (with uuid) in the comma list sel? */
static bool selected(const char *sel, unsigned idx, const char *uuid)
{
	char buf[1024], *save = NULL, *tok;

	if (!sel || !*sel || !strcmp(sel, "all"))
		return true;
	js_fmt(buf, sizeof(buf), "%s", sel);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *end;
		unsigned long v = strtoul(tok, &end, 10);

		if ((*tok && !*end && v == idx) || !strcmp(tok, uuid))
			return true;
	}
	return false;
}

static int open_devices(struct js_gpus *g, const char *sel, char *why, size_t whylen)
{
	unsigned count = 0;
	int rc = status(g, "nvmlDeviceGetCount", g->api.count(&count));

	if (rc < 0) {
		js_fmt(why, whylen, "%s", g->last_error);
		return rc;
	}
	for (unsigned i = 0; i < count && g->n < JS_MAX_GPUS; i++) {
		nvml_dev d;
		char uuid[JS_GPU_UUID_LEN] = "";

		if (g->api.handle(i, &d) != NVML_OK)
			continue;
		g->api.uuid(d, uuid, sizeof(uuid));
		if (!selected(sel, i, uuid))
			continue;
		g->dev[g->n] = d;
		describe(g, g->n, i);
		g->n++;
	}
	if (!g->n) {
		js_fmt(why, whylen, "no %sGPU (NVML sees %u)", sel && strcmp(sel, "all") ? "selected " : "",
		       count);
		return -ENODEV;
	}
	return 0;
}

int js_gpu_open(const struct js_gpu_opts *o, struct js_gpus **out, char *why, size_t whylen)
{
	const char *lib = o && o->nvml_lib ? o->nvml_lib : "libnvidia-ml.so.1";
	struct js_gpus *g = calloc(1, sizeof(*g));
	int rc;

	*out = NULL;
	if (!g)
		return -ENOMEM;
	pthread_mutex_init(&g->mu, NULL);
	rc = load(g, lib, why, whylen);
	if (rc == 0) {
		rc = status(g, "nvmlInit", g->api.init());
		if (rc < 0)
			js_fmt(why, whylen, "%s", g->last_error);
		else if ((rc = open_devices(g, o ? o->select : NULL, why, whylen)) < 0)
			g->api.shutdown();
	}
	if (rc < 0) {
		if (g->dl)
			dlclose(g->dl);
		pthread_mutex_destroy(&g->mu);
		free(g);
		return rc;
	}
	*out = g;
	return 0;
}

void js_gpu_close(struct js_gpus *g)
{
	if (!g)
		return;
	g->api.shutdown();
	dlclose(g->dl);
	pthread_mutex_destroy(&g->mu);
	free(g);
}

const char *js_gpu_backend_name(const struct js_gpus *g) { (void)g; return "nvml"; }
size_t js_gpu_count(const struct js_gpus *g) { return g ? g->n : 0; }

const struct js_gpu_info *js_gpu_info(const struct js_gpus *g, size_t i)
{
	return g && i < g->n ? &g->info[i] : NULL;
}

const char *js_gpu_last_error(const struct js_gpus *g) { return g->last_error; }

int js_gpu_read(struct js_gpus *g, size_t i, struct js_gpu_raw *out)
{
	unsigned long long e = 0;
	unsigned p = 0;
	int rc_e = -EOPNOTSUPP, rc_p;

	memset(out, 0, sizeof(*out));
	if (i >= g->n)
		return -EINVAL;
	if (g->info[i].energy_counter) {
		rc_e = status(g, "nvmlDeviceGetTotalEnergyConsumption", g->api.energy(g->dev[i], &e));
		out->have_energy = rc_e == 0;
		out->energy_mj = e;
	}
	rc_p = status(g, "nvmlDeviceGetPowerUsage", g->api.power(g->dev[i], &p));
	out->have_power = rc_p == 0;
	out->power_mw = p;
	if (g->info[i].energy_counter)
		return rc_e;
	return rc_p;
}

int js_gpu_sm_clock_mhz(struct js_gpus *g, size_t i, uint32_t *mhz)
{
	unsigned v = 0;
	int rc;

	if (i >= g->n)
		return -EINVAL;
	if (!g->api.clock)
		return -ENOSYS;
	rc = status(g, "nvmlDeviceGetClockInfo", g->api.clock(g->dev[i], NVML_CLK_SM, &v));
	*mhz = v;
	return rc;
}

int js_gpu_lock_mhz(struct js_gpus *g, size_t i, uint32_t min_mhz, uint32_t max_mhz)
{
	if (i >= g->n || min_mhz > max_mhz)
		return -EINVAL;
	if (!g->api.lock)
		return -ENOSYS;
	return status(g, "nvmlDeviceSetGpuLockedClocks", g->api.lock(g->dev[i], min_mhz, max_mhz));
}

int js_gpu_unlock(struct js_gpus *g, size_t i)
{
	if (i >= g->n)
		return -EINVAL;
	if (!g->api.unlock)
		return -ENOSYS;
	return status(g, "nvmlDeviceResetGpuLockedClocks", g->api.unlock(g->dev[i]));
}
