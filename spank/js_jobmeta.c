/* joulestep SPANK plugin: the job's identity from trusted sources only
 * (docs/admin-guide.md, "Job identity"). The job prolog (root, slurmd's
 * environment) caches what slurmd says of the job in <state>/jobs/<job_id>
 * with the time it ran (js_jobcache.h); every step on the node reads it on
 * slurmstepd's main thread. No slurmctld RPC, no thread, nothing from the
 * job's environment (a user can set any SLURM_* variable before srun). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <slurm/spank.h>

#include "js_jobcache.h"
#include "js_jobmeta.h"
#include "js_step.h"

/* This node's Slurm name: slurmstepd (and the job epilog) run with
 * SLURMD_NODENAME in their own environment. Not the job's environment: a
 * step started from a batch script inherits the batch node's name there, and
 * the user controls it. Without it, the short host name. 0 or -EINVAL. */
int js_node_name(char *buf, size_t len)
{
	const char *env = getenv("SLURMD_NODENAME");
	char host[256];
	if (!env || !env[0]) {
		if (gethostname(host, sizeof(host)) < 0)
			return -EINVAL;
		host[sizeof(host) - 1] = 0;
		host[strcspn(host, ".")] = 0;
		env = host;
	}
	int n = snprintf(buf, len, "%s", env);
	if (n < 0 || (size_t)n >= len || !js_name_safe(buf)) {
		buf[0] = 0;
		return -EINVAL;
	}
	return 0;
}

/* Plugstack arguments for a process on a compute node: parse, then expand
 * %n (state, sysfs, socket_dir) to this node's name. */
int js_node_conf_parse(int ac, char **av, struct js_conf *c, char *err, size_t errlen)
{
	char node[64] = "";
	if (js_conf_parse(ac, av, c, err, errlen))
		return -EINVAL;
	js_node_name(node, sizeof(node)); /* "" or unsafe: refused below only if %n is used */
	return js_conf_expand_node(c, node, err, errlen);
}

/* A value from slurmd's environment fit for the record: printable ASCII
 * (a path component for the cluster name). */
static void env_field(const char *name, char *dst, size_t len, bool path)
{
	const char *v = getenv(name);
	dst[0] = 0;
	if (!v || !*v || strlen(v) >= len)
		return;
	for (const char *p = v; *p; p++)
		if (*p < 0x21 || *p > 0x7e)
			return;
	if (path && !js_name_safe(v))
		return;
	snprintf(dst, len, "%s", v);
}

uint64_t js_jobcache_max_age_ns(const struct js_conf *c)
{
	return (uint64_t)c->job_cache_hours * 3600ULL * 1000000000ULL;
}

/* remote_init: the job's identity and accounting fields. */
void js_jobmeta_load(struct js_step *s)
{
	struct js_jobcache c;
	uint64_t mtime = 0, now = js_now_ns(CLOCK_REALTIME);
	int rc = -ENOENT;
	s->first_seen_ns = s->start_ns;
	s->job_source = "step";
	if (s->conf.job_cache_hours) {
		rc = js_jobcache_load(s->conf.state, s->job_id, &c, &mtime);
		if (!rc)
			rc = js_jobcache_check(&c, s->job_id, (uint32_t)s->uid, s->start_ns, mtime, now,
					       js_jobcache_max_age_ns(&s->conf));
	}
	if (!rc) {
		s->first_seen_ns = c.first_seen_ns;
		s->job_source = "prolog";
		memcpy(s->account, c.account, sizeof(s->account));
		memcpy(s->partition, c.partition, sizeof(s->partition));
		memcpy(s->gpu_sel, c.gpus, sizeof(s->gpu_sel));
		if (!s->conf.cluster[0] && js_name_safe(c.cluster))
			snprintf(s->cluster, sizeof(s->cluster), "%s", c.cluster);
	} else if (s->conf.job_cache_hours) {
		/* provenance.job_source "step" says it in the record */
		slurm_verbose("joulestep: job %u step %s: no job cache from the job prolog (%s); account and partition unknown, job keyed by the step start",
			      s->job_id, s->step_id,
			      rc == -ENOENT ? "the prolog did not run: restart slurmd once after installing joulestep"
					    : strerror(-rc));
	}
	if (s->conf.cluster[0])
		snprintf(s->cluster, sizeof(s->cluster), "%s", s->conf.cluster);
	else if (!s->cluster[0])
		snprintf(s->cluster, sizeof(s->cluster), "default");
}

void js_jobmeta_prolog_entry(uint32_t jobid, const uint32_t *uid, struct js_jobcache *e)
{
	char idbuf[16];
	memset(e, 0, sizeof(*e));
	e->job_id = jobid;
	e->first_seen_ns = js_now_ns(CLOCK_REALTIME);
	if (uid) {
		e->uid = *uid;
	} else {
		env_field("SLURM_JOB_UID", idbuf, sizeof(idbuf), false);
		e->uid = (uint32_t)strtoul(idbuf, NULL, 10);
	}
	/* slurmd's environment for this job: refuse one that names another */
	env_field("SLURM_JOB_ID", idbuf, sizeof(idbuf), false);
	if (strtoul(idbuf, NULL, 10) != jobid)
		return;
	env_field("SLURM_JOB_ACCOUNT", e->account, sizeof(e->account), false);
	env_field("SLURM_JOB_PARTITION", e->partition, sizeof(e->partition), false);
	env_field("SLURM_CLUSTER_NAME", e->cluster, sizeof(e->cluster), true);
	/* the job's GPUs on this node: slurmd sets it in the prolog's
	 * environment from the job's credential (docs/design.md, "Which GPUs a
	 * step owns"); the job's own variables never reach here */
	char gpus[sizeof(e->gpus)];
	env_field("SLURM_JOB_GPUS", gpus, sizeof(gpus), false);
	if (js_jobcache_gpus(gpus, e->gpus, sizeof(e->gpus)) < 0)
		slurm_error("joulestep: job %u: prolog: SLURM_JOB_GPUS='%s' is not a list of GPU indices; the job's GPUs are not measured",
			    jobid, gpus);
}
