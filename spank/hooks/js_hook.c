/* joulestep phase hooks: symbol lookup shared by the hook libraries. */
#include "js_hook.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

__thread int js_hook_busy;

static int pinged; /* this process connected and was accepted (reset by fork) */

/* The hooks' open phases in this process, oldest first: what the plugin's
 * nesting holds for it. js_hook_begin and js_hook_end are exported by both
 * hook libraries, so when both are preloaded every call binds to the first
 * one's, and its stack is the one nesting of the process. A thread may push only on an empty stack or on its
 * own entry; an entry being closed (closing) lets nobody push on it, so an
 * END always reaches the plugin while its phase is the latest. st_mu guards
 * the stack only, never a call into the client or a wrapped library. */
#define MAX_OPEN 64
struct open_phase {
	int h;
	pthread_t owner;
	int closing, ended; /* ended: its END is owed once the ones above end */
	long long bytes;
};
static pthread_mutex_t st_mu = PTHREAD_MUTEX_INITIALIZER;
static struct open_phase st[MAX_OPEN];
static int depth, next_h;

static void forked_child(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
	st_mu = fresh; /* another thread of the parent may have held it */
	depth = 0;
	__atomic_store_n(&pinged, 0, __ATOMIC_RELAXED);
}

__attribute__((constructor)) static void hook_init(void)
{
	(void)pthread_atfork(NULL, NULL, forked_child);
}

JS_HOOK_API int js_hook_begin(const char *kind, const char *label)
{
	pthread_t self = pthread_self();
	int h = 0;
	pthread_mutex_lock(&st_mu);
	if (depth < MAX_OPEN &&
	    (depth == 0 || (pthread_equal(st[depth - 1].owner, self) && !st[depth - 1].closing))) {
		h = ++next_h > 0 ? next_h : (next_h = 1);
		st[depth++] = (struct open_phase){.h = h, .owner = self};
	}
	pthread_mutex_unlock(&st_mu);
	if (!h)
		return 0; /* another thread's phase is open: this call falls inside it */
	if (!__atomic_exchange_n(&pinged, 1, __ATOMIC_ACQ_REL))
		(void)js_phase_ping();
	if (js_phase_begin(kind, label) == 0)
		return h;
	pthread_mutex_lock(&st_mu); /* not sent: no END either; it is still the latest */
	if (depth > 0 && st[depth - 1].h == h)
		depth--;
	pthread_mutex_unlock(&st_mu);
	return 0;
}

JS_HOOK_API void js_hook_end(int h, long long bytes)
{
	if (!h)
		return;
	pthread_mutex_lock(&st_mu);
	int i = depth - 1;
	while (i >= 0 && st[i].h != h)
		i--;
	if (i < 0) { /* not ours (a forked child's copy of the parent's phase) */
		pthread_mutex_unlock(&st_mu);
		return;
	}
	st[i].ended = 1;
	st[i].bytes = bytes;
	/* send the ENDs owed from the top down: each while its phase is the latest */
	while (depth > 0 && st[depth - 1].ended && !st[depth - 1].closing) {
		struct open_phase *top = &st[depth - 1];
		top->closing = 1;
		long long b = top->bytes;
		pthread_mutex_unlock(&st_mu);
		(void)js_phase_end(b);
		pthread_mutex_lock(&st_mu);
		depth--;
	}
	pthread_mutex_unlock(&st_mu);
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
