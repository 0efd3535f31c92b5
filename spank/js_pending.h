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
/* Pure: a step's record file name <job>.<step>.<het>-<incarnation>.<node>.json
 * (incarnation: the job prolog's time on the node, first_seen_ns), so that
 * each run of a requeued job has its own records. */
void js_record_name_of(uint32_t job_id, const char *step_id, uint32_t het,
		       uint64_t incarnation_ns, const char *node, char *name, size_t len);
/* Pure: the "joulestep-lost" JSON (malloc'ed) for record name
 * <job>.<step>.<het>-<incarnation>.<node>.json (incarnation_ns in the
 * document) or an older plugin's <job>.<step>.<het>.<node>.json, or NULL
 * for a name the plugin never writes. */
char *js_pending_lost_json(const char *cluster, const char *record, uint64_t lost_at_ns,
			   const char *reason, uint64_t start_ns, uint64_t first_reading_ns);
/* Step-start markers (issue 23, defect 6): <state>/pending/<cluster>/<job>/
 * <record>.started, root-only, left at step start with the step's start and
 * its first energy reading's time (0: none); removed once the step's record
 * is written, kept or counted. 0 or -errno. */
int js_pending_started(const char *state, const char *cluster, uint32_t job_id, const char *record,
		       uint64_t start_ns, uint64_t first_reading_ns);
void js_pending_started_clear(const char *state, const char *cluster, uint32_t job_id,
			      const char *record);
/* Job epilog: each of the job's step-start markers whose record is nowhere
 * (spool, pending, lost) becomes a counted <record>.lost marker (*lost of
 * them), the others are removed. 0 or -errno. */
int js_pending_started_resolve(const char *spool, const char *state, uint32_t job_id,
			       unsigned *lost);

#endif
