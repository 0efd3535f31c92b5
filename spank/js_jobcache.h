/* joulestep SPANK plugin: job-scoped cache of the job's trusted metadata
 * (docs/admin-guide.md, "Job identity and trusted fields"). The job prolog
 * (slurmd runs it as root on each node before the job's first step there,
 * with slurmd's own environment) stores what slurmd says of the job in
 * <state>/jobs/<job_id> (root-only), with the time it ran: when the job was
 * first seen on this node. Every step of the job on the node reads it; no
 * step asks slurmctld anything, and nothing comes from the job's
 * environment. The job epilog removes it.
 *
 * js_jobcache_logic.c: pure encode/decode/check (no I/O, no Slurm).
 * js_jobcache.c: the files. Functions return 0 or a negative errno. */
#ifndef JS_JOBCACHE_H
#define JS_JOBCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JS_JOBCACHE_MAX 4096                     /* file size bound (bytes) */
#define JS_JOBCACHE_FUTURE_NS (60ULL * 1000000000ULL) /* mtime skew allowed */

struct js_jobcache {
	uint32_t job_id;
	uint32_t uid;               /* the job's owner                          */
	uint64_t first_seen_ns;     /* CLOCK_REALTIME ns of the prolog, > 0     */
	char account[64];           /* "" when unknown                          */
	char partition[64];         /* "" when unknown                          */
	char cluster[64];           /* "" when unknown                          */
	char gpus[128];             /* the job's GPU indices on this node, from
	                               slurmd's SLURM_JOB_GPUS ("0,2"); "" = none */
};

/* SLURM_JOB_GPUS as the GPU selection of js_gpu_open: a comma list of
 * indices, ranges ("0-2") expanded. -EINVAL on anything else (names, UUIDs,
 * spaces), -ENOSPC if it does not fit. "" gives "". Pure. */
int js_jobcache_gpus(const char *in, char *out, size_t len);

/* JSON text, NUL-terminated. -ENOSPC if it does not fit, -EINVAL if
 * first_seen_ns is 0. */
int js_jobcache_encode(const struct js_jobcache *e, char *buf, size_t len);
/* Parse what js_jobcache_encode wrote (len bytes, no NUL needed; a file of
 * a plugin before "gpus" has none: gpus ""). -EINVAL on
 * anything else: wrong types, missing keys, out-of-range numbers, strings too
 * long for the struct. */
int js_jobcache_decode(const char *buf, size_t len, struct js_jobcache *e);
/* May entry e stand for the job (job_id, uid) of the step that starts at
 * start_ns? now_ns and mtime_ns (the file's) are CLOCK_REALTIME. Returns 0,
 * or:
 *   -EINVAL  another job or owner (a recycled job ID), or no prolog time;
 *   -ERANGE  first seen more than JS_JOBCACHE_FUTURE_NS after the step
 *            started (not this job);
 *   -ESTALE  the file is older than max_age_ns (max_age_ns 0: always), or
 *            more than JS_JOBCACHE_FUTURE_NS in the future. */
int js_jobcache_check(const struct js_jobcache *e, uint32_t job_id, uint32_t uid,
		      uint64_t start_ns, uint64_t mtime_ns, uint64_t now_ns,
		      uint64_t max_age_ns);
/* Is directory entry `name` the cache file of job_id or one of its
 * temporary files ("<job_id>" or "<job_id>.tmp.<pid>")? */
bool js_jobcache_is_job_file(const char *name, uint32_t job_id);

/* ---- files (js_jobcache.c) ------------------------------------------------
 * <state> and every parent must be root-owned and not group/world-writable
 * (js_root_dir); <state>/jobs is created 0700, files 0600, written tmp +
 * fsync + rename + fsync(dir), opened O_NOFOLLOW|O_CLOEXEC; a file that is
 * not a root-owned regular file with one link and no group/other access is
 * refused (-EPERM). */
int js_jobcache_load(const char *state, uint32_t job_id, struct js_jobcache *e,
		     uint64_t *mtime_ns);
int js_jobcache_store(const char *state, const struct js_jobcache *e);
/* Remove job_id's file and temporaries, and every entry whose mtime is older
 * than max_age_ns (0: none by age). *nremoved counts what went. -ENOENT when
 * there is no <state>/jobs. */
int js_jobcache_remove(const char *state, uint32_t job_id, uint64_t max_age_ns,
		       uint64_t now_ns, unsigned *nremoved);

/* The GPU indices the cache files of other jobs (not job_id, not older
 * than max_age_ns) name, as a comma list in out ("" none): a GPU one of
 * them holds is shared with this job. 0, or -errno (-ENOENT: no jobs/; -ENOSPC: too many to list). */
int js_jobcache_other_gpus(const char *state, uint32_t job_id, uint64_t max_age_ns,
			   uint64_t now_ns, char *out, size_t len);

#endif
