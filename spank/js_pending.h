/* joulestep SPANK plugin: records the spool could not take (js_pending.c). */
#ifndef JS_PENDING_H
#define JS_PENDING_H

#include <stddef.h>
#include <stdint.h>

/* Keep a record the spool refused (spool_err) in the root-only fallback
 * <state>/pending/<cluster>/<job_id>/<name> (tmp + fsync + rename). 0 kept;
 * 1 not kept but counted (an empty <name>.lost marker there); -errno
 * neither (the record is lost uncounted: only the log line says so). */
int js_pending_keep(const char *state, const char *cluster, uint32_t job_id, const char *name,
		    const char *data, size_t len, int spool_err);
/* Move up to max pending files into <spool>/<cluster>/<job_id>/ (records)
 * and <spool>/<cluster>/lost/ (markers, as "joulestep-lost" documents);
 * *moved records, *lost markers. 0, or -errno when the spool still fails
 * (what is left stays pending for the next try). */
int js_pending_flush(const char *spool, const char *state, unsigned max, unsigned *moved,
		     unsigned *lost);
/* Pure: the "joulestep-lost" JSON (malloc'ed) for record name
 * <job>.<step>.<het>.<node>.json, or NULL for a name the plugin never
 * writes. */
char *js_pending_lost_json(const char *cluster, const char *record, uint64_t lost_at_ns,
			   const char *reason);

#endif
