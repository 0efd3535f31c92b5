/* joulestep phase hooks: what libjoulestep-mpiio.so and libjoulestep-veloc.so
 * share. Both are LD_PRELOADed into a step's tasks by the SPANK plugin
 * (--energy-hooks, docs/user-guide.md "Automatic phases") and mark phases
 * through libjoulestep-client (asynchronous: a marker never blocks, and is a
 * no-op outside a joulestep step).
 *
 * Neither library links the library it wraps: the real functions are looked
 * up when first called (js_hook_next), so in a program that does not use MPI
 * or VELOC they are never called, nothing is resolved and nothing is sent. */
#ifndef JS_HOOK_H
#define JS_HOOK_H

#include <joulestep/client.h>

#define JS_HOOK_API __attribute__((visibility("default")))

/* The definition of `name` that the program would have called without this
 * library: the next one in the lookup order (dlsym RTLD_NEXT), else the one
 * of an object loaded outside the global scope (dlopen RTLD_LOCAL, e.g. a
 * Python extension linked against libmpi). `self` is this library's own
 * definition, never returned. NULL when no loaded object defines it.
 * Cached in *cache (thread-safe: every thread resolves the same pointer). */
void *js_hook_next(void **cache, const char *name, const void *self);

/* Said once per process on stderr when a wrapped function has no real
 * definition to call (the wrapper then returns the library's error code). */
void js_hook_missing(const char *lib, const char *name);

/* Per thread: set while a hooked call runs, so that calls the wrapped
 * library makes to its own hooked functions are passed through unmarked. */
extern __thread int js_hook_busy;

/* A phase around one call: begun only when the marker was sent (returns a
 * handle > 0), ended only then, so that an END never closes a phase this
 * library did not open (outside a step, or when an asynchronous marker was
 * dropped). The first marker of a process is preceded by a PING, which waits
 * for the plugin's reply (at most once per process; nothing outside a step):
 * the plugin accepts a connection only from a live process of the step, and
 * a short program that marks its writes and exits at once would otherwise
 * lose them when it is gone before the plugin accepted its connection
 * (docs/phase-protocol.md, "Transport"). Call it without holding a lock.
 *
 * Threads: the plugin closes a process's latest open phase at each END, so
 * the hooks keep their open phases per process (one stack for both hook
 * libraries: these two functions are exported by both, and every call binds
 * to the first loaded one's), each with the thread that opened it. A thread begins a phase only when none is open or the latest
 * is its own (nesting within one thread); a hooked call made by another
 * thread meanwhile is not marked (returns 0) and falls inside the open
 * phase. A forked child starts with none open. */
JS_HOOK_API int js_hook_begin(const char *kind, const char *label);

/* End the phase of handle h (0: nothing). When it is not the latest open
 * one (a VELOC flush closed by one thread while the thread that opened it
 * is in a nested call), its END is sent when the phases above it end. */
JS_HOOK_API void js_hook_end(int h, long long bytes);

#endif
