/* AMD GPUs through AMD SMI (libamd_smi.so), loaded with dlopen().
 *
 * As for NVML, the few types and constants used are AMD SMI's public ABI
 * (amdsmi.h), written out here: an int status (0 = AMDSMI_STATUS_SUCCESS),
 * opaque socket and processor handles. Energy is the accumulator times the
 * resolution it is returned with (in uJ): forgetting the multiplication is
 * a mistake reported in other tools, and a test would catch it here.
 *
 * Not done on AMD: the power integral (amdsmi_get_power_info's structure
 * changed between releases; without power, a counter reset leaves its span
 * uncertain) and clock changes (the range call needs the manual performance
 * level, which could not be checked without the hardware): lock and unlock
 * return -ENOSYS with that reason. */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_internal.h"
#include "js_internal.h"

enum { AMDSMI_OK = 0, AMDSMI_NOT_SUPPORTED = 2, AMDSMI_NO_PERM = 10 };
#define AMDSMI_INIT_AMD_GPUS (1ULL << 1)

struct amdsmi_api {
	int (*init)(uint64_t);
	int (*shut_down)(void);
	int (*status_string)(int, const char **);
	int (*sockets)(uint32_t *, void **);
	int (*processors)(void *, uint32_t *, void **);
	int (*uuid)(void *, unsigned *, char *);
	int (*energy)(void *, uint64_t *, float *, uint64_t *);
	/* optional, after the required ones above (load() fills those in order) */
	int (*render_minor)(void *, uint32_t *);
};

#define API(g) ((struct amdsmi_api *)(g)->api)

static int status(struct js_gpus *g, const char *call, int st)
{
	const char *s = NULL;

	if (st == AMDSMI_OK)
		return 0;
	if (API(g)->status_string)
		API(g)->status_string(st, &s);
	js_gpu_set_error(g, call, s, st);
	return st == AMDSMI_NOT_SUPPORTED ? -EOPNOTSUPP : st == AMDSMI_NO_PERM ? -EPERM : -EIO;
}

static int load(struct js_gpus *g, char *why, size_t whylen)
{
	static const char *const names[] = {
		"amdsmi_init", "amdsmi_shut_down", "amdsmi_status_code_to_string",
		"amdsmi_get_socket_handles", "amdsmi_get_processor_handles",
		"amdsmi_get_gpu_device_uuid", "amdsmi_get_energy_count",
	};
	struct amdsmi_api *a = calloc(1, sizeof(*a));
	void **slot = (void **)a;

	if (!a)
		return -ENOMEM;
	g->api = a;
	for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
		slot[k] = dlsym(g->dl, names[k]);
		if (!slot[k]) {
			js_fmt(why, whylen, "AMD SMI lacks %s", names[k]);
			return -ENOSYS;
		}
	}
	*(void **)&a->render_minor = dlsym(g->dl, "amdsmi_get_gpu_drm_render_minor");
	return 0;
}

/* The GPU's N of /dev/dri/renderD<128+N> (the order Slurm's gres.conf
 * lists render nodes in), or -1. */
static int minor_of(struct js_gpus *g, void *proc)
{
	uint32_t m = 0;

	if (!API(g)->render_minor || API(g)->render_minor(proc, &m) != AMDSMI_OK || m < 128 ||
	    m > 128 + 0xffff)
		return -1;
	return (int)(m - 128);
}

static void describe(struct js_gpus *g, size_t k, unsigned idx, int minor, const char *uuid)
{
	struct js_gpu_info *in = &g->info[k];
	uint64_t acc, ts;
	float res;

	in->index = idx;
	in->minor = minor;
	js_fmt(in->uuid, sizeof(in->uuid), "%s", uuid[0] ? uuid : "AMD-index");
	js_fmt(in->name, sizeof(in->name), "AMD GPU");
	in->energy_counter = API(g)->energy(g->dev[k], &acc, &res, &ts) == AMDSMI_OK;
	in->max_power_mw = 2000u * 1000u; /* no limit read: errs generous */
}

/* Every GPU of every socket, in the library's order. */
static int collect(struct js_gpus *g, const char *sel, bool by_minor, unsigned *seen)
{
	void *sock[JS_MAX_GPUS], *proc[JS_MAX_GPUS];
	uint32_t ns = JS_MAX_GPUS;
	int rc = status(g, "amdsmi_get_socket_handles", API(g)->sockets(&ns, sock));

	for (uint32_t s = 0; rc == 0 && s < ns && s < JS_MAX_GPUS; s++) {
		uint32_t np = JS_MAX_GPUS;

		if (status(g, "amdsmi_get_processor_handles", API(g)->processors(sock[s], &np, proc)))
			continue;
		for (uint32_t p = 0; p < np && p < JS_MAX_GPUS && g->n < JS_MAX_GPUS; p++, (*seen)++) {
			char uuid[JS_GPU_UUID_LEN] = "";
			unsigned len = sizeof(uuid);
			int minor = minor_of(g, proc[p]);

			API(g)->uuid(proc[p], &len, uuid);
			if (!js_gpu_selected(sel, by_minor ? minor : (long)*seen, uuid))
				continue;
			g->dev[g->n] = proc[p];
			describe(g, g->n, *seen, minor, uuid);
			g->n++;
		}
	}
	return rc;
}

static int am_open(struct js_gpus *g, const char *sel, bool by_minor, char *why, size_t whylen)
{
	unsigned seen = 0;
	int rc = load(g, why, whylen);

	if (rc < 0)
		return rc;
	if ((rc = status(g, "amdsmi_init", API(g)->init(AMDSMI_INIT_AMD_GPUS))) < 0) {
		js_fmt(why, whylen, "%s", g->last_error);
		return rc;
	}
	rc = collect(g, sel, by_minor, &seen);
	if (rc < 0 || !g->n) {
		js_fmt(why, whylen, rc < 0 ? "%s" : "no %sGPU (AMD SMI sees %u)",
		       rc < 0 ? g->last_error : sel && strcmp(sel, "all") ? "selected " : "", seen);
		API(g)->shut_down();
		return rc < 0 ? rc : -ENODEV;
	}
	return 0;
}

static void am_close(struct js_gpus *g) { API(g)->shut_down(); }

static int am_read(struct js_gpus *g, size_t i, struct js_gpu_raw *out)
{
	uint64_t acc = 0, ts = 0;
	float res = 0;
	int rc;

	if (!g->info[i].energy_counter)
		return -EOPNOTSUPP;
	rc = status(g, "amdsmi_get_energy_count", API(g)->energy(g->dev[i], &acc, &res, &ts));
	if (rc < 0)
		return rc;
	if (!(res > 0)) {
		js_gpu_set_error(g, "amdsmi_get_energy_count", "no counter resolution", 0);
		return -EIO;
	}
	out->have_energy = true;
	out->energy_uj = (uint64_t)((double)acc * (double)res);
	return 0;
}

static int am_nosys(struct js_gpus *g, const char *what)
{
	js_gpu_set_error(g, what, "GPU clock changes are not implemented for AMD GPUs", 0);
	return -ENOSYS;
}

static int am_sm_clock(struct js_gpus *g, size_t i, uint32_t *mhz)
{
	(void)i;
	*mhz = 0;
	return am_nosys(g, "clock");
}

static int am_lock(struct js_gpus *g, size_t i, uint32_t lo, uint32_t hi)
{
	(void)i, (void)lo, (void)hi;
	return am_nosys(g, "lock");
}

static int am_unlock(struct js_gpus *g, size_t i)
{
	(void)i;
	return am_nosys(g, "unlock");
}

const struct js_gpu_backend js_gpu_amdsmi = {
	.name = "amdsmi", .default_lib = "libamd_smi.so", .open = am_open, .close = am_close,
	.read = am_read, .sm_clock = am_sm_clock, .lock = am_lock,
	.no_lock_why = "GPU clock changes are not implemented for AMD GPUs", .unlock = am_unlock,
};
