/* GPUs: the vendor library is chosen and loaded with dlopen() at run time
 * (gpu_nvml.c: NVIDIA NVML; gpu_amdsmi.c: AMD SMI); this file holds what
 * the backends share. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_internal.h"
#include "js_internal.h"

static const struct js_gpu_backend *const backends[] = {&js_gpu_nvml, &js_gpu_amdsmi};

void js_gpu_set_error(struct js_gpus *g, const char *call, const char *words, int st)
{
	pthread_mutex_lock(&g->mu);
	js_fmt(g->last_error, sizeof(g->last_error), "%s: %s (%s status %d)", call,
	       words ? words : "unknown error", g->be->name, st);
	pthread_mutex_unlock(&g->mu);
}

bool js_gpu_selected(const char *sel, long num, const char *uuid)
{
	char buf[1024], *save = NULL, *tok;

	if (!sel || !*sel || !strcmp(sel, "all"))
		return true;
	js_fmt(buf, sizeof(buf), "%s", sel);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *end;
		unsigned long v = strtoul(tok, &end, 10);

		if ((*tok && !*end && num >= 0 && v == (unsigned long)num) || !strcmp(tok, uuid))
			return true;
	}
	return false;
}

static int open_one(const struct js_gpu_backend *be, const struct js_gpu_opts *o,
		    struct js_gpus **out, char *why, size_t whylen)
{
	const char *lib = o && o->lib ? o->lib : be->default_lib;
	struct js_gpus *g = calloc(1, sizeof(*g));
	int rc;

	if (!g)
		return -ENOMEM;
	g->be = be;
	pthread_mutex_init(&g->mu, NULL);
	g->dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!g->dl) {
		const char *e = dlerror();

		js_fmt(why, whylen, "cannot load %s: %s", lib, e ? e : "?");
		rc = -ENOENT;
	} else {
		rc = be->open(g, o ? o->select : NULL, o && o->select_minor, why, whylen);
	}
	if (rc < 0) {
		if (g->dl)
			dlclose(g->dl);
		free(g->api);
		pthread_mutex_destroy(&g->mu);
		free(g);
		return rc;
	}
	*out = g;
	return 0;
}

int js_gpu_open(const struct js_gpu_opts *o, struct js_gpus **out, char *why, size_t whylen)
{
	const char *want = o && o->backend ? o->backend : NULL;
	size_t used = 0;
	int rc = -ENOENT;

	*out = NULL;
	if (whylen)
		why[0] = '\0';
	for (size_t k = 0; k < sizeof(backends) / sizeof(backends[0]); k++) {
		char one[256];

		if (want && strcmp(want, backends[k]->name))
			continue;
		rc = open_one(backends[k], o, out, one, sizeof(one));
		if (rc == 0)
			return 0;
		used += (size_t)snprintf(why + used, used < whylen ? whylen - used : 0, "%s%s: %s",
					 used ? "; " : "", backends[k]->name, one);
		if (used >= whylen)
			used = whylen ? whylen - 1 : 0;
	}
	if (want && rc == -ENOENT && !why[0])
		js_fmt(why, whylen, "unknown GPU backend '%s' (nvml or amdsmi)", want);
	return rc;
}

void js_gpu_close(struct js_gpus *g)
{
	if (!g)
		return;
	g->be->close(g);
	dlclose(g->dl);
	free(g->api);
	pthread_mutex_destroy(&g->mu);
	free(g);
}

const char *js_gpu_backend_name(const struct js_gpus *g) { return g->be->name; }
size_t js_gpu_count(const struct js_gpus *g) { return g ? g->n : 0; }

const struct js_gpu_info *js_gpu_info(const struct js_gpus *g, size_t i)
{
	return g && i < g->n ? &g->info[i] : NULL;
}

const char *js_gpu_last_error(const struct js_gpus *g) { return g->last_error; }

int js_gpu_read(struct js_gpus *g, size_t i, struct js_gpu_raw *out)
{
	memset(out, 0, sizeof(*out));
	return i < g->n ? g->be->read(g, i, out) : -EINVAL;
}

int js_gpu_sm_clock_mhz(struct js_gpus *g, size_t i, uint32_t *mhz)
{
	*mhz = 0;
	return i < g->n ? g->be->sm_clock(g, i, mhz) : -EINVAL;
}

bool js_gpu_can_lock(struct js_gpus *g, size_t i)
{
	return i < g->n && g->be->can_lock && g->be->can_lock(g, i);
}

int js_gpu_lock_mhz(struct js_gpus *g, size_t i, uint32_t min_mhz, uint32_t max_mhz)
{
	if (i >= g->n || min_mhz > max_mhz)
		return -EINVAL;
	return g->be->lock(g, i, min_mhz, max_mhz);
}

int js_gpu_unlock(struct js_gpus *g, size_t i)
{
	return i < g->n ? g->be->unlock(g, i) : -EINVAL;
}
