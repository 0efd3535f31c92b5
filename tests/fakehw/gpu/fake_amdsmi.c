/* A stand-in for AMD's libamd_smi.so on machines without an AMD GPU.
 *
 * It implements only the calls joulestep makes, with AMD SMI's ABI (an int
 * status, opaque socket and processor handles, the same argument types),
 * written here from the public documentation. Its GPUs are the fakehw tree's
 * directories whose `vendor` is "amd" (tests/fakehw/fakegpu.py), following
 * the same model as fake_nvml.c. The energy counter is returned as AMD SMI
 * does: an accumulator in units of `resolution_uj` (a float), so that a
 * reader who forgets to multiply by the resolution is wrong by that factor.
 * Test code only.
 */
#include <stdint.h>
#include <string.h>

#include "fake_model.h"

enum { OK = 0, INVAL = 1, NOTSUP = 2, NOPERM = 10, NOT_INIT = 32, OUT_OF_RESOURCES = 15 };

struct fdev { int g; };
static struct fdev devs[MAXG];
static int ndevs = -1;
static int socket_token;

static int dev_of(void *h)
{
	struct fdev *d = h;

	if (ndevs < 0)
		return -NOT_INIT;
	if (!d || d < devs || d >= devs + ndevs)
		return -INVAL;
	return d->g;
}

int amdsmi_init(uint64_t flags)
{
	int gs[MAXG], n;

	if (!(flags & 2u)) /* AMDSMI_INIT_AMD_GPUS */
		return INVAL;
	n = fm_list("amd", gs);
	if (n < 0)
		return NOT_INIT;
	for (ndevs = 0; ndevs < n; ndevs++)
		devs[ndevs].g = gs[ndevs];
	return OK;
}

int amdsmi_shut_down(void) { ndevs = -1; return OK; }

int amdsmi_status_code_to_string(int st, const char **s)
{
	switch (st) {
	case OK: *s = "AMDSMI_STATUS_SUCCESS: Call succeeded"; break;
	case INVAL: *s = "AMDSMI_STATUS_INVAL: Invalid parameters"; break;
	case NOTSUP: *s = "AMDSMI_STATUS_NOT_SUPPORTED: Command not supported"; break;
	case NOPERM: *s = "AMDSMI_STATUS_NO_PERM: Permission Denied"; break;
	default: *s = "AMDSMI_STATUS_UNKNOWN_ERROR: An unknown error occurred"; break;
	}
	return OK;
}

/* One socket holds every GPU. */
int amdsmi_get_socket_handles(uint32_t *count, void **handles)
{
	if (ndevs < 0)
		return NOT_INIT;
	if (!count)
		return INVAL;
	if (handles && *count >= 1)
		handles[0] = &socket_token;
	*count = ndevs > 0 ? 1 : 0;
	return OK;
}

int amdsmi_get_processor_handles(void *socket, uint32_t *count, void **handles)
{
	if (ndevs < 0)
		return NOT_INIT;
	if (socket != &socket_token || !count)
		return INVAL;
	if (handles) {
		if (*count < (uint32_t)ndevs)
			return OUT_OF_RESOURCES;
		for (int i = 0; i < ndevs; i++)
			handles[i] = &devs[i];
	}
	*count = (uint32_t)ndevs;
	return OK;
}

/* The DRM render node's minor (renderD<128+N>): 128 + the GPU's `minor`
 * (default: its directory's number). */
int amdsmi_get_gpu_drm_render_minor(void *h, uint32_t *minor)
{
	int g = dev_of(h);

	if (g < 0)
		return -g;
	*minor = 128u + (uint32_t)fm_num(g, "minor", g);
	return OK;
}

int amdsmi_get_gpu_device_uuid(void *h, unsigned *len, char *uuid)
{
	char b[128];
	int g = dev_of(h);

	if (g < 0)
		return -g;
	if (fm_str(g, "uuid", b, sizeof(b)) || strlen(b) + 1 > *len)
		return INVAL;
	strcpy(uuid, b);
	*len = (unsigned)strlen(b) + 1;
	return OK;
}

int amdsmi_get_energy_count(void *h, uint64_t *acc, float *resolution, uint64_t *timestamp)
{
	int g = dev_of(h);
	double res;

	if (g < 0)
		return -g;
	if (fm_num(g, "counter", 1) == 0)
		return NOTSUP;
	res = fm_num(g, "resolution_uj", 15.259);
	*resolution = (float)res;
	*acc = (uint64_t)(fm_counter_mj(g) * 1000.0 / (double)(float)res);
	*timestamp = (uint64_t)fm_now_ns();
	return OK;
}
