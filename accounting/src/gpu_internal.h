/* Private to the accounting library: the GPU backends behind joulestep/gpu.h. */
#ifndef JOULESTEP_GPU_INTERNAL_H
#define JOULESTEP_GPU_INTERNAL_H

#include <pthread.h>

#include "joulestep/gpu.h"

struct js_gpus;

struct js_gpu_backend {
	const char *name;
	const char *default_lib;
	/* Load the library (g->dl is open), initialise it and fill g->dev,
	 * g->info and g->n with the devices sel names (its numbers are device
	 * minors when by_minor, else the library's indices); -errno and why. */
	int (*open)(struct js_gpus *g, const char *sel, bool by_minor, char *why, size_t whylen);
	void (*close)(struct js_gpus *g);
	int (*read)(struct js_gpus *g, size_t i, struct js_gpu_raw *out);
	int (*sm_clock)(struct js_gpus *g, size_t i, uint32_t *mhz);
	/* Can GPU i's clock be locked at all (NULL: never, for no_lock_why)? */
	bool (*can_lock)(struct js_gpus *g, size_t i);
	const char *no_lock_why;
	int (*lock)(struct js_gpus *g, size_t i, uint32_t lo_mhz, uint32_t hi_mhz);
	int (*unlock)(struct js_gpus *g, size_t i);
};

struct js_gpus {
	const struct js_gpu_backend *be;
	void *dl;
	void *api;                       /* the backend's table of symbols       */
	size_t n;
	void *dev[JS_MAX_GPUS];
	struct js_gpu_info info[JS_MAX_GPUS];
	pthread_mutex_t mu;              /* last_error                           */
	char last_error[JS_GPU_ERR_LEN];
};

extern const struct js_gpu_backend js_gpu_nvml, js_gpu_amdsmi;

/* Keep the library's words for a failed call ("call: words (status N)"). */
void js_gpu_set_error(struct js_gpus *g, const char *call, const char *words, int st);
/* Is the device numbered num (< 0: it has no number) with uuid in the comma
 * list sel (NULL/""/"all": every one)? */
bool js_gpu_selected(const char *sel, long num, const char *uuid);

#endif
