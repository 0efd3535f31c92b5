/* libjoulestep-veloc.so: VELOC checkpoints as `checkpoint` and `flush`
 * phases (docs/user-guide.md, "Automatic phases"; docs/science.md §2,
 * Algorithm 1). LD_PRELOADed; wraps VELOC's C API (veloc.h of VELOC 1.x,
 * libveloc-client), found when first called: no VELOC headers or library
 * are needed to build it, and a program without VELOC runs unchanged.
 *
 *   VELOC_Checkpoint_begin .. VELOC_Checkpoint_end returns   checkpoint
 *     (the local write; in VELOC's sync mode the flush to the persistent
 *     tier happens inside VELOC_Checkpoint_end, so it is part of it)
 *   VELOC_Checkpoint_end returns .. VELOC_Checkpoint_wait returns   flush
 *     opened only when VELOC_Backend_ready() says the backend is still
 *     busy (0) right after the end (always, with a VELOC that lacks it);
 *     closed when VELOC_Checkpoint_wait or VELOC_Finalize returns, or at
 *     the next VELOC_Checkpoint_begin / VELOC_Checkpoint, whichever first
 *   VELOC_Checkpoint (= wait + begin + mem + end): when a flush is open it
 *     first calls VELOC_Checkpoint_wait (as VELOC_Checkpoint would) and
 *     closes the flush; then the call is a checkpoint phase, then as above.
 * Label (both phases): the checkpoint's name. Bytes: the sizes of the memory regions
 * written (VELOC_Mem_protect count x base_size, per VELOC_Checkpoint_mem /
 * _selective, VELOC's own header not included), on both the checkpoint and
 * its flush; unknown ("-") for file-based checkpoints (VELOC_Route_file).
 * The flush phase spans the program's own code until it waits: phases the
 * program marks itself in between must be closed before it waits. */
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "js_hook.h"

#define LIB "libjoulestep-veloc"
#define V_SUCCESS 0
#define V_FAILURE (-1)
#define V_CKPT_ALL 0
#define V_CKPT_SOME 1
#define V_CKPT_REST 2
#define MAX_REGIONS 4096

struct region {
	int id;
	long long bytes;
};

/* mu guards the state below, only for the bookkeeping around a call:
 * never across a call into VELOC or a marker (js_hook_begin may wait up to
 * 5 s for the plugin's first reply), so a thread inside a slow VELOC call
 * never stalls another one, and a fork while it is held cannot leave the
 * child waiting for a thread that does not exist there (issue 23, defect 9;
 * the child also starts with its parent's phases forgotten: they are the
 * parent's, on the parent's connection). */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct region regions[MAX_REGIONS];
static size_t nregions;
static int regions_overflow;  /* more regions than tracked: sizes unknown  */
static int ckpt_claimed;      /* a checkpoint begun by the program is open */
static int ckpt_h;            /* its phase (js_hook_begin), 0: not marked  */
static long long ckpt_bytes;  /* its bytes so far; -1 unknown              */
static int flush_h;           /* the open flush phase, 0: none             */
static long long flush_bytes;
static char ckpt_label[65];   /* the checkpoint's name, for its flush too  */

static void forked_child(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
	mu = fresh;
	ckpt_claimed = ckpt_h = flush_h = 0;
}

__attribute__((constructor)) static void veloc_hook_init(void)
{
	(void)pthread_atfork(NULL, NULL, forked_child);
}

/* The real function, resolved on first use. */
#define REAL(name) \
	static void *cache_##name; \
	__typeof__(&name) real_##name = \
		(__typeof__(&name))js_hook_next(&cache_##name, #name, (void *)name)

/* Call it with the guard set: VELOC's own calls to its C API (VELOC_Finalize
 * calls VELOC_Checkpoint_wait) pass through our wrappers unmarked. */
#define CALL(rc, call) \
	do { \
		js_hook_busy = 1; \
		rc = call; \
		js_hook_busy = 0; \
	} while (0)

#define MISSING(name) \
	do { \
		js_hook_missing(LIB, #name); \
		return V_FAILURE; \
	} while (0)

static long long add_bytes(long long a, long long b)
{
	if (a < 0 || b < 0)
		return -1;
	return a > LLONG_MAX - b ? LLONG_MAX : a + b;
}

static struct region *find_region(int id)
{
	for (size_t i = 0; i < nregions; i++)
		if (regions[i].id == id)
			return &regions[i];
	return NULL;
}

/* Bytes of a VELOC_Checkpoint_selective(mode, ids, n) (mu held). */
static long long selected_bytes(int mode, const int *ids, int n)
{
	long long sum = 0;
	if (regions_overflow)
		return -1;
	for (size_t i = 0; i < nregions; i++) {
		int listed = 0;
		for (int k = 0; ids && k < n && !listed; k++)
			listed = ids[k] == regions[i].id;
		if (mode == V_CKPT_ALL || (mode == V_CKPT_SOME && listed) ||
		    (mode == V_CKPT_REST && !listed))
			sum = add_bytes(sum, regions[i].bytes);
	}
	return sum;
}

static const char *label_of(const char *name)
{
	if (!name || !*name || strlen(name) > 64)
		return NULL;
	for (const char *p = name; *p; p++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:+/-", *p))
			return NULL;
	return strcmp(name, "-") ? name : NULL;
}

/* Close the open flush phase, if any (mu not held). */
static void close_flush(void)
{
	pthread_mutex_lock(&mu);
	int h = flush_h;
	long long bytes = flush_bytes;
	flush_h = 0;
	pthread_mutex_unlock(&mu);
	js_hook_end(h, bytes);
}

/* After a successful checkpoint end (mu not held): a flush phase while
 * VELOC's backend is still busy with it. */
static void open_flush(long long bytes, const char *label)
{
	typedef int (*ready_fn)(void);
	static void *cache;
	ready_fn ready = (ready_fn)js_hook_next(&cache, "VELOC_Backend_ready", NULL);
	if (ready) {
		int r;
		CALL(r, ready());
		if (r != 0)
			return; /* done already (sync mode), or no client */
	}
	int h = js_hook_begin("flush", label);
	pthread_mutex_lock(&mu);
	int old = flush_h;
	flush_h = h;
	flush_bytes = bytes;
	pthread_mutex_unlock(&mu);
	js_hook_end(old, -1); /* none, unless two threads checkpoint at once */
}

JS_HOOK_API int VELOC_Mem_protect(int id, void *ptr, size_t count, size_t base_size)
{
	REAL(VELOC_Mem_protect);
	if (!real_VELOC_Mem_protect)
		MISSING(VELOC_Mem_protect);
	if (js_hook_busy)
		return real_VELOC_Mem_protect(id, ptr, count, base_size);
	int rc;
	CALL(rc, real_VELOC_Mem_protect(id, ptr, count, base_size));
	if (rc != V_SUCCESS)
		return rc;
	pthread_mutex_lock(&mu);
	struct region *r = find_region(id);
	if (!r && nregions < MAX_REGIONS)
		r = &regions[nregions++];
	if (r) {
		r->id = id;
		r->bytes = base_size && count > (size_t)LLONG_MAX / base_size
				   ? LLONG_MAX
				   : (long long)(count * base_size);
	} else {
		regions_overflow = 1;
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

JS_HOOK_API int VELOC_Mem_unprotect(int id)
{
	REAL(VELOC_Mem_unprotect);
	if (!real_VELOC_Mem_unprotect)
		MISSING(VELOC_Mem_unprotect);
	if (js_hook_busy)
		return real_VELOC_Mem_unprotect(id);
	int rc;
	CALL(rc, real_VELOC_Mem_unprotect(id));
	if (rc != V_SUCCESS)
		return rc;
	pthread_mutex_lock(&mu);
	struct region *r = find_region(id);
	if (r)
		*r = regions[--nregions];
	pthread_mutex_unlock(&mu);
	return rc;
}

JS_HOOK_API int VELOC_Checkpoint_begin(const char *name, int version)
{
	REAL(VELOC_Checkpoint_begin);
	if (!real_VELOC_Checkpoint_begin)
		MISSING(VELOC_Checkpoint_begin);
	if (js_hook_busy)
		return real_VELOC_Checkpoint_begin(name, version);
	close_flush();
	int rc;
	CALL(rc, real_VELOC_Checkpoint_begin(name, version));
	if (rc != V_SUCCESS)
		return rc;
	pthread_mutex_lock(&mu);
	int mine = !ckpt_claimed;
	if (mine) {
		ckpt_claimed = 1;
		ckpt_h = 0;
		ckpt_bytes = -1; /* until a memory checkpoint says otherwise */
		snprintf(ckpt_label, sizeof(ckpt_label), "%s", label_of(name) ? name : "");
	}
	pthread_mutex_unlock(&mu);
	if (mine) {
		int h = js_hook_begin("checkpoint", label_of(name));
		pthread_mutex_lock(&mu);
		ckpt_h = h;
		pthread_mutex_unlock(&mu);
	}
	return rc;
}

/* After VELOC_Checkpoint_mem/_selective returned rc: add what it wrote to
 * the open checkpoint (the selection as mode/ids/n says). */
static int ckpt_mem_done(int rc, int mode, const int *ids, int n)
{
	if (rc != V_SUCCESS)
		return rc;
	pthread_mutex_lock(&mu);
	if (ckpt_claimed)
		ckpt_bytes = add_bytes(ckpt_bytes < 0 ? 0 : ckpt_bytes, selected_bytes(mode, ids, n));
	pthread_mutex_unlock(&mu);
	return rc;
}

JS_HOOK_API int VELOC_Checkpoint_mem(void)
{
	REAL(VELOC_Checkpoint_mem);
	if (!real_VELOC_Checkpoint_mem)
		MISSING(VELOC_Checkpoint_mem);
	if (js_hook_busy)
		return real_VELOC_Checkpoint_mem();
	int rc;
	CALL(rc, real_VELOC_Checkpoint_mem());
	return ckpt_mem_done(rc, V_CKPT_ALL, NULL, 0);
}

JS_HOOK_API int VELOC_Checkpoint_selective(int mode, int *ids, int no_ids)
{
	REAL(VELOC_Checkpoint_selective);
	if (!real_VELOC_Checkpoint_selective)
		MISSING(VELOC_Checkpoint_selective);
	if (js_hook_busy)
		return real_VELOC_Checkpoint_selective(mode, ids, no_ids);
	int rc;
	CALL(rc, real_VELOC_Checkpoint_selective(mode, ids, no_ids));
	return ckpt_mem_done(rc, mode, ids, no_ids);
}

JS_HOOK_API int VELOC_Checkpoint_end(int success)
{
	REAL(VELOC_Checkpoint_end);
	if (!real_VELOC_Checkpoint_end)
		MISSING(VELOC_Checkpoint_end);
	if (js_hook_busy)
		return real_VELOC_Checkpoint_end(success);
	int rc;
	CALL(rc, real_VELOC_Checkpoint_end(success));
	char label[sizeof(ckpt_label)];
	pthread_mutex_lock(&mu);
	int h = ckpt_h;
	long long bytes = ckpt_bytes;
	snprintf(label, sizeof(label), "%s", ckpt_label);
	ckpt_claimed = ckpt_h = 0;
	pthread_mutex_unlock(&mu);
	if (h) {
		js_hook_end(h, rc == V_SUCCESS ? bytes : -1);
		if (rc == V_SUCCESS)
			open_flush(bytes, label[0] ? label : NULL);
	}
	return rc;
}

JS_HOOK_API int VELOC_Checkpoint_wait(void)
{
	REAL(VELOC_Checkpoint_wait);
	if (!real_VELOC_Checkpoint_wait)
		MISSING(VELOC_Checkpoint_wait);
	if (js_hook_busy)
		return real_VELOC_Checkpoint_wait();
	int rc;
	CALL(rc, real_VELOC_Checkpoint_wait());
	close_flush();
	return rc;
}

JS_HOOK_API int VELOC_Checkpoint(const char *name, int version)
{
	REAL(VELOC_Checkpoint);
	if (!real_VELOC_Checkpoint)
		MISSING(VELOC_Checkpoint);
	if (js_hook_busy)
		return real_VELOC_Checkpoint(name, version);
	pthread_mutex_lock(&mu);
	int flushing = flush_h != 0;
	pthread_mutex_unlock(&mu);
	if (flushing) {
		typedef int (*wait_fn)(void);
		static void *cache;
		wait_fn w = (wait_fn)js_hook_next(&cache, "VELOC_Checkpoint_wait",
						  (void *)VELOC_Checkpoint_wait);
		if (w) {
			int r;
			CALL(r, w()); /* VELOC_Checkpoint waits first anyway */
			(void)r;
		}
		close_flush();
	}
	pthread_mutex_lock(&mu);
	long long bytes = selected_bytes(V_CKPT_ALL, NULL, 0);
	int nested = ckpt_claimed;
	pthread_mutex_unlock(&mu);
	int began = nested ? 0 : js_hook_begin("checkpoint", label_of(name));
	int rc;
	CALL(rc, real_VELOC_Checkpoint(name, version));
	js_hook_end(began, rc == V_SUCCESS ? bytes : -1);
	if (began && rc == V_SUCCESS)
		open_flush(bytes, label_of(name));
	return rc;
}

JS_HOOK_API int VELOC_Finalize(int drain)
{
	REAL(VELOC_Finalize);
	if (!real_VELOC_Finalize)
		MISSING(VELOC_Finalize);
	if (js_hook_busy)
		return real_VELOC_Finalize(drain);
	int rc;
	CALL(rc, real_VELOC_Finalize(drain));
	close_flush();
	pthread_mutex_lock(&mu);
	int h = ckpt_h;
	ckpt_claimed = ckpt_h = 0;
	nregions = 0;
	regions_overflow = 0;
	pthread_mutex_unlock(&mu);
	js_hook_end(h, -1);
	return rc;
}
