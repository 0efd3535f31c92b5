/* joulestep SPANK plugin: --energy-hooks, pure logic (no I/O, no Slurm).
 * The hook libraries themselves are in spank/hooks/; docs/user-guide.md
 * ("Automatic phases") and docs/admin-guide.md ("Phase hooks").
 * Unit-tested by tests/unit/test_hooks.c. */
#ifndef JS_HOOKS_H
#define JS_HOOKS_H

#include <stddef.h>

enum js_hook {
	JS_HOOK_MPIIO = 0, /* libjoulestep-mpiio.so: MPI_File_write*, MPI_File_sync */
	JS_HOOK_VELOC,     /* libjoulestep-veloc.so: VELOC_Checkpoint*              */
	JS_HOOK_COUNT
};

#define JS_HOOKS_ALLOWED "mpiio, veloc, or none"
/* Longest LD_PRELOAD the plugin writes (the job's own entries included). */
#define JS_PRELOAD_MAX 4096

const char *js_hook_name(enum js_hook h);
/* File name of the hook's library in the hooks directory. */
const char *js_hook_lib(enum js_hook h);

/* "mpiio,veloc", "veloc", "none" (or "") -> bit mask (1u << enum js_hook).
 * Unknown or empty names: -EINVAL and err says which and what is allowed;
 * *mask still holds the known ones (the compute node applies those). "none"
 * cannot be combined with a name. */
int js_hooks_parse(const char *s, unsigned *mask, char *err, size_t errlen);
/* mask -> "mpiio,veloc" ("" for none). */
void js_hooks_format(unsigned mask, char *buf, size_t len);

/* The tasks' LD_PRELOAD: the paths in add (in order), then the entries of
 * old (separated by ':' or ' ', as ld.so reads them) that are not equal to
 * any path in drop nor in add, joined by ':'. Empty entries are dropped.
 * 0, or -ENAMETOOLONG when the result does not fit in len (out is then ""). */
int js_hooks_preload(const char *old, const char *const *add, size_t nadd,
		     const char *const *drop, size_t ndrop, char *out, size_t len);

/* The default hooks directory for a plugin loaded from plugin_path:
 * <directory of the plugin>/../joulestep, lexically (a plugin installed as
 * $(LIBDIR)/slurm/joulestep.so gives $(LIBDIR)/joulestep). -EINVAL when
 * plugin_path is not absolute with at least two components; -ENAMETOOLONG. */
int js_hooks_default_dir(const char *plugin_path, char *out, size_t len);

#endif
