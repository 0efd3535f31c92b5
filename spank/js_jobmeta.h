/* joulestep SPANK plugin: the node's name and the job's identity from
 * trusted sources (js_jobmeta.c; docs/admin-guide.md, "Job identity"). */
#ifndef JS_JOBMETA_H
#define JS_JOBMETA_H

#include <stddef.h>
#include <stdint.h>

#include "js_jobcache.h"
#include "js_parse.h"

struct js_step;

/* This node's Slurm name: SLURMD_NODENAME of slurmstepd's own environment,
 * else the short host name. 0 or -EINVAL (buf ""). */
int js_node_name(char *buf, size_t len);
/* Plugstack arguments for a process on a compute node: parse, then expand
 * %n (state, sysfs, socket_dir) to this node's name. 0 or -EINVAL. */
int js_node_conf_parse(int ac, char **av, struct js_conf *c, char *err, size_t errlen);
/* job_cache_hours in ns. */
uint64_t js_jobcache_max_age_ns(const struct js_conf *c);
/* Step start: account, partition, cluster, GPUs and first_seen_ns from the
 * job prolog's cache (job_source "prolog"), else "step" and the step's
 * start. */
void js_jobmeta_load(struct js_step *s);
/* Job prolog: the cache entry from slurmd's environment (refused when it
 * names another job); uid from Slurm, or NULL: SLURM_JOB_UID there. */
void js_jobmeta_prolog_entry(uint32_t jobid, const uint32_t *uid, struct js_jobcache *e);

#endif
