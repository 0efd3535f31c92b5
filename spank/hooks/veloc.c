/* libjoulestep-veloc.so: VELOC checkpoints as `checkpoint` and `flush`
 * phases (docs/user-guide.md, "Automatic phases"; docs/science.md §2,
 * Algorithm 1). LD_PRELOADed; wraps VELOC's C API (veloc.h of VELOC 1.8 and
 * master, libveloc-client), found when first called: no VELOC headers or
 * library are needed to build it, and a program without VELOC runs unchanged.
 * Tested live against VELOC 1.8 (tests/cluster/test_plugin_hooks.py).
 *
 *   VELOC_Checkpoint, as a whole: checkpoint (Algorithm 1's blocking part).
 *     VELOC's own VELOC_Checkpoint calls its C++ client directly, never
 *     VELOC_Checkpoint_begin/_end/_wait: only the whole call can be wrapped.
 *     It first waits for the previous flush: when one of ours is open, the
 *     hook calls VELOC_Checkpoint_wait itself first and closes the flush, so
 *     that the wait is not counted in the checkpoint.
 *   VELOC_Checkpoint_begin .. VELOC_Checkpoint_end returns: checkpoint
 *     (when the program calls them itself).
 *   After either returns, in async mode only (the `mode` of the config
 *     VELOC_Init read; in sync mode VELOC writes the persistent tier inside
 *     the checkpoint): flush-overlap, the program's own run while VELOC's
 *     backend writes the persistent tier in the background. It is not an
 *     I/O phase (nothing is slowed in it, docs/phase-protocol.md "Blocking
 *     and overlapping flushes"): it holds the program's compute. Closed at
 *     the program's next VELOC call that waits or checkpoints, or when the
 *     program's own VELOC_Checkpoint_finished says finished.
 *   flush: the time the program is blocked on the flush: the program's
 *     VELOC_Checkpoint_wait, the wait VELOC_Checkpoint makes first (the hook
 *     makes it itself, so that it is not counted in the checkpoint), and
 *     VELOC_Finalize(drain). Only after an async checkpoint of ours.
 *   VELOC 1.8 cannot tell when the background transfer ends: its
 *     VELOC_Checkpoint_finished is unimplemented with its default socket
 *     queue (prints an error, says "not finished"), and a second thread may
 *     not share the client's socket; so the overlap is recorded apart from
 *     the flush instead (docs/design.md).
 * Label (both phases): the checkpoint's name. Bytes: the sizes of the memory
 * regions written (VELOC_Mem_protect count x base_size; on VELOC master also
 * VELOC_Region_protect's named groups: a checkpoint writes its own name's
 * group, else the default one), VELOC's own header not included, on both
 * the checkpoint and its flush; unknown ("-") for file-based checkpoints
 * (VELOC_Route_file), on the checkpoint, its overlap and its flush. The
 * overlap spans the program's own code until it waits: phases the program
 * marks itself in between must be closed before it waits.
 * Threads and fork (issue 23, defect 9): no lock is held across a call into
 * VELOC or a marker; a forked child starts with its parent's phases
 * forgotten; the phases nest per process with those of libjoulestep-mpiio
 * (js_hook.h). */
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
	char group[65]; /* VELOC_Region_protect's name; "" VELOC_Mem_protect's */
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
static int overlap_h;         /* the open flush-overlap phase, 0: none     */
static long long overlap_bytes;
static char overlap_label[65];/* its checkpoint's name, for the flush too  */
static char ckpt_label[65];   /* the checkpoint's name, for its overlap    */

static void forked_child(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
	mu = fresh;
	ckpt_claimed = ckpt_h = overlap_h = 0;
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

static struct region *find_region(int id, const char *group)
{
	for (size_t i = 0; i < nregions; i++)
		if (regions[i].id == id && !strcmp(regions[i].group, group))
			return &regions[i];
	return NULL;
}

/* The region group a checkpoint named `name` writes (VELOC master): its own
 * name's when it has regions, else the default one (mu held). */
static const char *group_of(const char *name)
{
	for (size_t i = 0; name && *name && i < nregions; i++)
		if (!strcmp(regions[i].group, name))
			return name;
	return "";
}

/* Bytes of a VELOC_Checkpoint_selective(mode, ids, n) of a checkpoint
 * named `name` (mu held). */
static long long selected_bytes(int mode, const int *ids, int n, const char *name)
{
	long long sum = 0;
	const char *group = group_of(name);
	if (regions_overflow)
		return -1;
	for (size_t i = 0; i < nregions; i++) {
		int listed = 0;
		if (strcmp(regions[i].group, group))
			continue;
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

/* Close the open flush-overlap phase, if any (mu not held); its bytes and
 * label in *bytes and label (may be NULL). Returns 1 when one was open. */
static int close_overlap(long long *bytes, char label[65])
{
	pthread_mutex_lock(&mu);
	int h = overlap_h;
	long long b = overlap_bytes;
	if (label)
		snprintf(label, 65, "%s", overlap_label);
	overlap_h = 0;
	pthread_mutex_unlock(&mu);
	js_hook_end(h, b);
	if (bytes)
		*bytes = b;
	return h != 0;
}

/* Before a call that blocks until the background flush is done (mu not
 * held): the overlap ends and, when one was open (*was set), a flush phase
 * begins. Returns its handle (0: none) and its bytes in *bytes. */
static int blocking_flush_begin(long long *bytes, int *was)
{
	char label[65];
	int open = close_overlap(bytes, label);
	if (was)
		*was = open;
	return open ? js_hook_begin("flush", label[0] ? label : NULL) : 0;
}

/* VELOC_Checkpoint_finished's answer as "finished": VELOC 1.8 returns its
 * client's bool (1: finished; always 1 in sync mode), VELOC master (the API
 * that has VELOC_Region_protect) a status (VELOC_SUCCESS: finished). */
JS_HOOK_API int VELOC_Region_protect(int id, void *ptr, size_t count, size_t base_size,
				     const char *name);
static int says_finished(int rc)
{
	static int api; /* 0 unknown, 1 VELOC 1.8, 2 master: asked once VELOC is loaded */
	int a = __atomic_load_n(&api, __ATOMIC_RELAXED);
	if (!a) {
		void *cache = NULL;
		a = js_hook_next(&cache, "VELOC_Region_protect", (void *)VELOC_Region_protect) ? 2 : 1;
		__atomic_store_n(&api, a, __ATOMIC_RELAXED);
	}
	return a == 2 ? rc == V_SUCCESS : rc > 0;
}

/* VELOC's mode, from the config file VELOC_Init was given: 1 sync, 0 async,
 * -1 unknown (no VELOC_Init seen, or an unreadable config). */
static int sync_mode = -1;

/* The top-level `mode` key of a VELOC config (INI: `key = value`, `;`/`#`
 * comments, sections after it): 1 "sync", 0 anything else (VELOC 1.8
 * refuses anything but sync/async; master defaults to async), -1 unreadable. */
static int config_sync_mode(const char *cfg)
{
	FILE *f = cfg ? fopen(cfg, "re") : NULL;
	if (!f)
		return -1;
	char line[512], key[64], val[64];
	int sync = 0;
	while (fgets(line, sizeof(line), f)) {
		const char *p = line + strspn(line, " \t");
		if (*p == '[')
			break;
		if (sscanf(p, "%63[A-Za-z0-9_] = %63[A-Za-z]", key, val) == 2 && !strcmp(key, "mode"))
			sync = !strcmp(val, "sync");
	}
	fclose(f);
	return sync;
}

/* After a successful checkpoint (mu not held): a flush-overlap phase while
 * VELOC still writes it to the persistent tier, i.e. in async mode
 * (Algorithm 1). Not asked of VELOC_Checkpoint_finished: with VELOC 1.8's
 * default socket queue it cannot tell, and prints an error line into the
 * program's output at every call (docs/design.md); the program's own calls
 * to it are heeded. */
static void open_overlap(long long bytes, const char *label)
{
	pthread_mutex_lock(&mu);
	int sync = sync_mode == 1;
	pthread_mutex_unlock(&mu);
	if (sync)
		return; /* written inside the checkpoint */
	int h = js_hook_begin("flush-overlap", label);
	pthread_mutex_lock(&mu);
	int old = overlap_h;
	overlap_h = h;
	overlap_bytes = bytes;
	snprintf(overlap_label, sizeof(overlap_label), "%s", label ? label : "");
	pthread_mutex_unlock(&mu);
	js_hook_end(old, -1); /* none, unless two threads checkpoint at once */
}

/* VELOC_Init's MPI_Comm is passed through as it came: an int (MPICH) or a
 * pointer (Open MPI), both in the first argument register (x86-64, AArch64
 * and POWER calling conventions), so one wrapper serves both without mpi.h. */
JS_HOOK_API int VELOC_Init(void *comm, const char *cfg_file)
{
	REAL(VELOC_Init);
	if (!real_VELOC_Init)
		MISSING(VELOC_Init);
	if (js_hook_busy)
		return real_VELOC_Init(comm, cfg_file);
	int rc;
	CALL(rc, real_VELOC_Init(comm, cfg_file));
	if (rc == V_SUCCESS) {
		int sync = config_sync_mode(cfg_file); /* read outside mu */
		pthread_mutex_lock(&mu);
		sync_mode = sync;
		pthread_mutex_unlock(&mu);
	}
	return rc;
}

JS_HOOK_API int VELOC_Init_single(unsigned int id, const char *cfg_file)
{
	REAL(VELOC_Init_single);
	if (!real_VELOC_Init_single)
		MISSING(VELOC_Init_single);
	if (js_hook_busy)
		return real_VELOC_Init_single(id, cfg_file);
	int rc;
	CALL(rc, real_VELOC_Init_single(id, cfg_file));
	if (rc == V_SUCCESS) {
		int sync = config_sync_mode(cfg_file); /* read outside mu */
		pthread_mutex_lock(&mu);
		sync_mode = sync;
		pthread_mutex_unlock(&mu);
	}
	return rc;
}

/* Track a protected region (mu held). */
static void protect_region(int id, const char *group, size_t count, size_t base_size)
{
	if (strlen(group) >= sizeof(regions[0].group)) {
		regions_overflow = 1; /* a name VELOC itself would refuse to use */
		return;
	}
	struct region *r = find_region(id, group);
	if (!r && nregions < MAX_REGIONS)
		r = &regions[nregions++];
	if (r) {
		r->id = id;
		snprintf(r->group, sizeof(r->group), "%s", group);
		r->bytes = base_size && count > (size_t)LLONG_MAX / base_size
				   ? LLONG_MAX
				   : (long long)(count * base_size);
	} else {
		regions_overflow = 1;
	}
}

static void unprotect_region(int id, const char *group)
{
	struct region *r = find_region(id, group);
	if (r)
		*r = regions[--nregions];
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
	protect_region(id, "", count, base_size);
	pthread_mutex_unlock(&mu);
	return rc;
}

/* VELOC master only: VELOC 1.8 has no VELOC_Region_protect, and a program
 * that calls it does not link against 1.8; under 1.8 the wrapper is never
 * called (else it returns VELOC_FAILURE, said once on stderr). */
JS_HOOK_API int VELOC_Region_protect(int id, void *ptr, size_t count, size_t base_size,
				     const char *name)
{
	REAL(VELOC_Region_protect);
	if (!real_VELOC_Region_protect)
		MISSING(VELOC_Region_protect);
	if (js_hook_busy)
		return real_VELOC_Region_protect(id, ptr, count, base_size, name);
	int rc;
	CALL(rc, real_VELOC_Region_protect(id, ptr, count, base_size, name));
	if (rc != V_SUCCESS)
		return rc;
	pthread_mutex_lock(&mu);
	protect_region(id, name ? name : "", count, base_size);
	pthread_mutex_unlock(&mu);
	return rc;
}

JS_HOOK_API int VELOC_Region_unprotect(int id, const char *name)
{
	REAL(VELOC_Region_unprotect);
	if (!real_VELOC_Region_unprotect)
		MISSING(VELOC_Region_unprotect);
	if (js_hook_busy)
		return real_VELOC_Region_unprotect(id, name);
	int rc;
	CALL(rc, real_VELOC_Region_unprotect(id, name));
	if (rc != V_SUCCESS)
		return rc;
	pthread_mutex_lock(&mu);
	unprotect_region(id, name ? name : "");
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
	unprotect_region(id, "");
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
	close_overlap(NULL, NULL); /* VELOC's begin does not wait for it */
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
		ckpt_bytes = add_bytes(ckpt_bytes < 0 ? 0 : ckpt_bytes, selected_bytes(mode, ids, n, ckpt_label));
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
			open_overlap(bytes, label[0] ? label : NULL);
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
	long long bytes = -1;
	int h = blocking_flush_begin(&bytes, NULL);
	int rc;
	CALL(rc, real_VELOC_Checkpoint_wait());
	js_hook_end(h, rc == V_SUCCESS ? bytes : -1);
	return rc;
}

/* A program polling for its flush: the overlap ends when VELOC says
 * finished (nothing blocked on it: no flush phase). */
JS_HOOK_API int VELOC_Checkpoint_finished(void)
{
	REAL(VELOC_Checkpoint_finished);
	if (!real_VELOC_Checkpoint_finished)
		MISSING(VELOC_Checkpoint_finished);
	if (js_hook_busy)
		return real_VELOC_Checkpoint_finished();
	int rc;
	CALL(rc, real_VELOC_Checkpoint_finished());
	if (says_finished(rc))
		close_overlap(NULL, NULL);
	return rc;
}

JS_HOOK_API int VELOC_Checkpoint(const char *name, int version)
{
	REAL(VELOC_Checkpoint);
	if (!real_VELOC_Checkpoint)
		MISSING(VELOC_Checkpoint);
	if (js_hook_busy)
		return real_VELOC_Checkpoint(name, version);
	long long fbytes = -1;
	int was = 0;
	int fh = blocking_flush_begin(&fbytes, &was);
	if (was) {
		typedef int (*wait_fn)(void);
		static void *cache;
		wait_fn w = (wait_fn)js_hook_next(&cache, "VELOC_Checkpoint_wait",
						  (void *)VELOC_Checkpoint_wait);
		int r = V_FAILURE;
		if (w)
			CALL(r, w()); /* VELOC_Checkpoint waits first anyway */
		js_hook_end(fh, r == V_SUCCESS ? fbytes : -1);
	}
	pthread_mutex_lock(&mu);
	long long bytes = selected_bytes(V_CKPT_ALL, NULL, 0, name);
	int nested = ckpt_claimed;
	pthread_mutex_unlock(&mu);
	int began = nested ? 0 : js_hook_begin("checkpoint", label_of(name));
	int rc;
	CALL(rc, real_VELOC_Checkpoint(name, version));
	js_hook_end(began, rc == V_SUCCESS ? bytes : -1);
	if (began && rc == V_SUCCESS)
		open_overlap(bytes, label_of(name));
	return rc;
}

JS_HOOK_API int VELOC_Finalize(int drain)
{
	REAL(VELOC_Finalize);
	if (!real_VELOC_Finalize)
		MISSING(VELOC_Finalize);
	if (js_hook_busy)
		return real_VELOC_Finalize(drain);
	long long bytes = -1;
	int fh = 0;
	if (drain) /* VELOC_Finalize(1) waits for the flush first */
		fh = blocking_flush_begin(&bytes, NULL);
	else
		close_overlap(NULL, NULL);
	int rc;
	CALL(rc, real_VELOC_Finalize(drain));
	js_hook_end(fh, rc == V_SUCCESS ? bytes : -1);
	pthread_mutex_lock(&mu);
	int h = ckpt_h;
	ckpt_claimed = ckpt_h = 0;
	nregions = 0;
	sync_mode = -1;
	regions_overflow = 0;
	pthread_mutex_unlock(&mu);
	js_hook_end(h, -1);
	return rc;
}
