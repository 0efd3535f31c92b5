/* joulestep SPANK plugin: the step's record and the user's summary
 * (js_record.c; docs/record-format.md). This module owns the whole JSON of
 * both, the GPUs' part included, built from the step's readings at step
 * end; it writes them (js_fs.h) or hands the record to the pending
 * fallback (js_pending.h). */
#ifndef JS_RECORD_H
#define JS_RECORD_H

#include <stddef.h>
#include <stdint.h>

typedef struct json_t json_t;
struct js_step;

/* The record's format version (docs/record-format.md). */
#define JS_RECORD_VERSION 4
/* The user's summary rounds GPU energies to this: NVML's counter unit. */
#define JS_GPU_USER_RES_UJ 1000ULL

/* The record's directory <spool>/<cluster>/<job_id> (created; logged on
 * failure): a directory fd or -errno. */
int js_record_dir(struct js_step *s);
/* The record's file name <job>.<step>.<het>-<incarnation>.<node>.json:
 * incarnation = first_seen_ns (the job prolog's time on this node), so that
 * each run of a requeued job has its own records (docs/design.md, "A
 * requeued job's incarnations"). js_record_name_of (js_pending.h) is the
 * pure part. */
void js_record_name(const struct js_step *s, char *name, size_t len);
/* The record and the user's summary as JSON (new references), from the
 * step's state after its final reading. */
json_t *js_record_json(struct js_step *s);
json_t *js_record_user_json(struct js_step *s);
/* Write the record into dfd (from js_record_dir; closed here): tmp + fsync
 * + rename, then the user's summary beside it. When that fails (or dfd <
 * 0), the record goes to the fallback <state>/pending (js_pending.h), or is
 * counted as lost; logged. Returns the spool's error (0 when written
 * there). */
int js_record_write(struct js_step *s, int dfd);
/* Step start: a root-only marker in <state>/pending that the job epilog
 * counts as a lost record when the step never writes one (slurmstepd
 * killed). Failures go to the step's errors. */
void js_record_started_marker(struct js_step *s);
/* Job epilog: fsync <spool>/<cluster>/<job_id> and its parents, making the
 * job's record renames durable (cluster NULL or "": every cluster
 * directory). -ENOENT when the job has no record directory. */
int js_record_sync_job(const char *spool, const char *cluster, uint32_t job_id);

#endif
