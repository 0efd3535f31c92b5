/* joulestep SPANK plugin: job metadata cache, pure logic (see
 * js_jobcache.h). No I/O; jansson for the JSON. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "js_jobcache.h"

int js_jobcache_encode(const struct js_jobcache *e, char *buf, size_t len)
{
	if (!e->first_seen_ns || e->first_seen_ns > (uint64_t)INT64_MAX)
		return -EINVAL;
	json_t *o = json_pack("{s:I,s:I,s:I,s:s,s:s,s:s,s:s}", "job_id", (json_int_t)e->job_id, "uid",
			      (json_int_t)e->uid, "first_seen_ns", (json_int_t)e->first_seen_ns,
			      "account", e->account, "partition", e->partition, "cluster", e->cluster,
			      "gpus", e->gpus);
	if (!o)
		return -EINVAL; /* a name that is not UTF-8 */
	size_t n = json_dumpb(o, buf, len, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(o);
	if (n == 0 || n >= len)
		return -ENOSPC;
	buf[n] = 0;
	return 0;
}

static int get_str(json_t *o, const char *key, char *dst, size_t len)
{
	json_t *v = json_object_get(o, key);
	if (!json_is_string(v) || json_string_length(v) >= len ||
	    strlen(json_string_value(v)) != json_string_length(v))
		return -EINVAL;
	memcpy(dst, json_string_value(v), json_string_length(v) + 1);
	return 0;
}

static int get_int(json_t *o, const char *key, json_int_t lo, json_int_t hi, json_int_t *out)
{
	json_t *v = json_object_get(o, key);
	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
		return -EINVAL;
	*out = json_integer_value(v);
	return 0;
}

int js_jobcache_decode(const char *buf, size_t len, struct js_jobcache *e)
{
	if (len > JS_JOBCACHE_MAX)
		return -EINVAL;
	json_t *o = json_loadb(buf, len, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(o)) {
		json_decref(o);
		return -EINVAL;
	}
	struct js_jobcache t;
	memset(&t, 0, sizeof(t));
	json_int_t job, uid, seen;
	int rc = -EINVAL;
	/* 6 keys: a file of a plugin before "gpus" (no GPUs known) */
	bool gpus = json_object_get(o, "gpus") != NULL;
	if (json_object_size(o) == (gpus ? 7u : 6u) && !get_int(o, "job_id", 0, UINT32_MAX, &job) &&
	    !get_int(o, "uid", 0, UINT32_MAX, &uid) &&
	    !get_int(o, "first_seen_ns", 1, INT64_MAX, &seen) &&
	    !get_str(o, "account", t.account, sizeof(t.account)) &&
	    !get_str(o, "partition", t.partition, sizeof(t.partition)) &&
	    !get_str(o, "cluster", t.cluster, sizeof(t.cluster)) &&
	    (!gpus || (!get_str(o, "gpus", t.gpus, sizeof(t.gpus)) &&
		       js_jobcache_gpus(t.gpus, t.gpus, sizeof(t.gpus)) == 0))) {
		t.job_id = (uint32_t)job;
		t.uid = (uint32_t)uid;
		t.first_seen_ns = (uint64_t)seen;
		*e = t;
		rc = 0;
	}
	json_decref(o);
	return rc;
}

int js_jobcache_check(const struct js_jobcache *e, uint32_t job_id, uint32_t uid,
		      uint64_t start_ns, uint64_t mtime_ns, uint64_t now_ns,
		      uint64_t max_age_ns)
{
	if (e->job_id != job_id || e->uid != uid || !e->first_seen_ns)
		return -EINVAL;
	if (e->first_seen_ns > start_ns + JS_JOBCACHE_FUTURE_NS)
		return -ERANGE;
	if (mtime_ns > now_ns + JS_JOBCACHE_FUTURE_NS)
		return -ESTALE;
	if (!max_age_ns || (now_ns > mtime_ns && now_ns - mtime_ns > max_age_ns))
		return -ESTALE;
	return 0;
}

int js_jobcache_gpus(const char *in, char *out, size_t len)
{
	char buf[256];
	size_t n = 0;
	const char *p = in;
	buf[0] = 0;
	while (*p) {
		char *end;
		if (*p < '0' || *p > '9')
			return -EINVAL;
		unsigned long lo = strtoul(p, &end, 10), hi = lo;
		if (*end == '-') {
			if (end[1] < '0' || end[1] > '9')
				return -EINVAL;
			hi = strtoul(end + 1, &end, 10);
		}
		if (lo > hi || hi >= 1024 || hi - lo >= 64 || (*end && *end != ','))
			return -EINVAL;
		for (unsigned long i = lo; i <= hi; i++) {
			int w = snprintf(buf + n, sizeof(buf) - n, "%s%lu", n ? "," : "", i);
			if (w < 0 || (size_t)w >= sizeof(buf) - n)
				return -ENOSPC;
			n += (size_t)w;
		}
		p = *end ? end + 1 : end;
		if (*end == ',' && !*p)
			return -EINVAL; /* "0," */
	}
	if (n >= len)
		return -ENOSPC;
	memcpy(out, buf, n + 1);
	return 0;
}

bool js_jobcache_is_job_file(const char *name, uint32_t job_id)
{
	char id[16];
	int n = snprintf(id, sizeof(id), "%u", job_id);
	if (strncmp(name, id, (size_t)n))
		return false;
	name += n;
	if (!*name)
		return true;
	if (strncmp(name, ".tmp.", 5) || !name[5])
		return false;
	for (name += 5; *name; name++)
		if (*name < '0' || *name > '9')
			return false;
	return true;
}
