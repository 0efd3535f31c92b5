/* joulestep phase hooks: symbol lookup shared by the hook libraries. */
#include "js_hook.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

__thread int js_hook_busy;

static int pinged; /* this process connected and was accepted (reset by fork) */

static void forked_child(void)
{
	__atomic_store_n(&pinged, 0, __ATOMIC_RELAXED);
}

__attribute__((constructor)) static void hook_init(void)
{
	(void)pthread_atfork(NULL, NULL, forked_child);
}

int js_hook_begin(const char *kind, const char *label)
{
	if (!__atomic_exchange_n(&pinged, 1, __ATOMIC_ACQ_REL))
		(void)js_phase_ping();
	return js_phase_begin(kind, label) == 0;
}

#define MAX_OBJS 512

struct objs {
	const char *name[MAX_OBJS];
	size_t n;
};

/* The loaded objects' file names (they live as long as the objects). Only
 * collected here: dlopen is not called under dl_iterate_phdr's lock. */
static int collect(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	struct objs *o = data;
	if (info->dlpi_name && info->dlpi_name[0] && o->n < MAX_OBJS)
		o->name[o->n++] = info->dlpi_name;
	return 0;
}

static void *search_loaded(const char *name, const void *self)
{
	struct objs o = {.n = 0};
	dl_iterate_phdr(collect, &o);
	for (size_t i = 0; i < o.n; i++) {
		void *h = dlopen(o.name[i], RTLD_LAZY | RTLD_NOLOAD);
		if (!h)
			continue;
		void *sym = dlsym(h, name);
		dlclose(h); /* RTLD_NOLOAD took a reference; the object stays loaded */
		if (sym && sym != self)
			return sym;
	}
	return NULL;
}

void *js_hook_next(void **cache, const char *name, const void *self)
{
	void *fn = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
	if (fn)
		return fn;
	fn = dlsym(RTLD_NEXT, name);
	if (!fn || fn == self)
		fn = search_loaded(name, self);
	if (fn)
		__atomic_store_n(cache, fn, __ATOMIC_RELEASE);
	return fn;
}

void js_hook_missing(const char *lib, const char *name)
{
	static int said;
	if (!__atomic_exchange_n(&said, 1, __ATOMIC_ACQ_REL))
		fprintf(stderr, "%s: %s not found in any loaded library; the call fails (joulestep --energy-hooks)\n",
			lib, name);
}
