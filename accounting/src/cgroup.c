/* A Slurm step's cgroup: paths, cpuset and CPU time (joulestep/cgroup.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "joulestep/cgroup.h"
#include "js_internal.h"

/* a path component Slurm could have made: no '/', not "." or ".." */
static bool name_ok(const char *s)
{
	return s && s[0] && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..") &&
	       !strchr(s, '\n');
}

int js_cg_version(const char *root, int *version)
{
	char path[JS_CG_PATH_MAX], buf[512];
	struct stat st;
	int rc = js_path(path, sizeof(path), "%s/cgroup.controllers", root);
	if (rc < 0)
		return rc;
	if (js_read_file(path, buf, sizeof(buf)) >= 0) {
		/* a v2 root: cpuset must be among its controllers */
		for (char *save = NULL, *t = strtok_r(buf, " \n", &save); t;
		     t = strtok_r(NULL, " \n", &save))
			if (!strcmp(t, "cpuset")) {
				*version = JS_CG_V2;
				return 0;
			}
	}
	rc = js_path(path, sizeof(path), "%s/cpuset", root);
	if (rc < 0)
		return rc;
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		*version = JS_CG_V1;
		return 0;
	}
	*version = JS_CG_NONE;
	return -ENOENT;
}

/* v2: the part of slurmstepd's cgroup up to .../job_<job>/ (the step's
 * directory is job_<job>/step_<step> under it) */
static int v2_job_dir(const char *self_cgroup, uint32_t job, char *out, size_t len)
{
	char want[32];
	snprintf(want, sizeof(want), "/job_%u", job);
	const char *line = self_cgroup;
	while (line && *line) {
		const char *end = strchr(line, '\n');
		size_t n = end ? (size_t)(end - line) : strlen(line);
		if (n > 3 && !strncmp(line, "0::", 3)) {
			const char *path = line + 3;
			size_t plen = n - 3, wl = strlen(want);
			if (path[0] != '/')
				return -EINVAL; /* the kernel's are absolute */
			for (size_t i = 0; i + wl <= plen; i++) {
				if (strncmp(path + i, want, wl) || (i + wl < plen && path[i + wl] != '/'))
					continue;
				if (i + wl >= len)
					return -ENAMETOOLONG;
				memcpy(out, path, i + wl);
				out[i + wl] = 0;
				return strstr(out, "/../") || strstr(out, "/./") ? -EINVAL : 0;
			}
			return -EINVAL;
		}
		line = end ? end + 1 : NULL;
	}
	return -EINVAL;
}

int js_cg_step_paths(const char *root, int version, const char *node, uid_t uid, uint32_t job,
		     const char *step, const char *self_cgroup, struct js_cg_step *out)
{
	memset(out, 0, sizeof(*out));
	if (!root || !name_ok(step))
		return -EINVAL;
	out->version = version;
	if (version == JS_CG_V1) {
		char top[128];
		if (node && node[0]) {
			if (!name_ok(node))
				return -EINVAL;
			snprintf(top, sizeof(top), "slurm_%s", node);
		} else {
			snprintf(top, sizeof(top), "slurm");
		}
		int rc = js_path(out->cpuset_dir, sizeof(out->cpuset_dir),
				 "%s/cpuset/%s/uid_%u/job_%u/step_%s", root, top, (unsigned)uid, job, step);
		if (rc == 0)
			rc = js_path(out->cpu_dir, sizeof(out->cpu_dir), "%s/cpuacct/%s/uid_%u/job_%u/step_%s",
				     root, top, (unsigned)uid, job, step);
		return rc;
	}
	if (version == JS_CG_V2) {
		char jd[JS_CG_PATH_MAX];
		int rc = self_cgroup ? v2_job_dir(self_cgroup, job, jd, sizeof(jd)) : -EINVAL;
		if (rc == 0)
			rc = js_path(out->cpuset_dir, sizeof(out->cpuset_dir), "%s%s/step_%s", root, jd, step);
		if (rc == 0)
			memcpy(out->cpu_dir, out->cpuset_dir, sizeof(out->cpu_dir));
		return rc;
	}
	return -EINVAL;
}

int js_cg_parse_percpu(const char *text, struct js_cg_usage *out)
{
	memset(out, 0, sizeof(*out));
	const char *p = text;
	size_t n = 0;
	while (*p) {
		while (*p == ' ' || *p == '\n' || *p == '\t')
			p++;
		if (!*p)
			break;
		if (*p < '0' || *p > '9')
			return -EINVAL;
		char *end;
		errno = 0;
		unsigned long long v = strtoull(p, &end, 10);
		if (errno || (*end && *end != ' ' && *end != '\n' && *end != '\t'))
			return -EINVAL;
		if (n >= JS_MAX_CPUS)
			return -E2BIG;
		out->cpu_ns[n++] = v;
		if (out->total_ns + v < out->total_ns)
			return -EOVERFLOW;
		out->total_ns += v;
		p = end;
	}
	if (!n)
		return -EINVAL;
	out->ncpu = n;
	out->per_cpu = true;
	return 0;
}

int js_cg_parse_cpu_stat(const char *text, struct js_cg_usage *out)
{
	memset(out, 0, sizeof(*out));
	const char *line = text;
	while (line && *line) {
		if (!strncmp(line, "usage_usec ", 11)) {
			char *end;
			const char *v = line + 11;
			if (*v < '0' || *v > '9')
				return -EINVAL;
			errno = 0;
			unsigned long long us = strtoull(v, &end, 10);
			if (errno || (*end && *end != '\n') || us > UINT64_MAX / 1000)
				return -EINVAL;
			out->total_ns = us * 1000;
			return 0;
		}
		line = strchr(line, '\n');
		if (line)
			line++;
	}
	return -EINVAL;
}

int js_cg_read_cpuset(const struct js_cg_step *st, struct js_cpuset *out)
{
	char path[JS_CG_PATH_MAX + 32], buf[4096];
	int rc = js_path(path, sizeof(path), "%s/%s", st->cpuset_dir,
			 st->version == JS_CG_V2 ? "cpuset.cpus.effective" : "cpuset.cpus");
	if (rc < 0)
		return rc;
	ssize_t n = js_read_file(path, buf, sizeof(buf));
	if (n < 0)
		return (int)n;
	if (n == 0)
		return -ENODATA;
	rc = js_cpuset_parse(buf, out);
	if (rc < 0)
		return rc;
	return js_cpuset_count(out) > 0 ? 0 : -ENODATA;
}

int js_cg_read_usage(const struct js_cg_step *st, struct js_cg_usage *out)
{
	char path[JS_CG_PATH_MAX + 32];
	static __thread char buf[JS_MAX_CPUS * 21 + 64];
	int v2 = st->version == JS_CG_V2;
	int rc = js_path(path, sizeof(path), "%s/%s", st->cpu_dir, v2 ? "cpu.stat" : "cpuacct.usage_percpu");
	if (rc < 0)
		return rc;
	ssize_t n = js_read_file(path, buf, sizeof(buf));
	if (n < 0)
		return (int)n;
	return v2 ? js_cg_parse_cpu_stat(buf, out) : js_cg_parse_percpu(buf, out);
}

void js_cg_usage_delta(const struct js_cg_usage *a, const struct js_cg_usage *b,
		       struct js_cg_usage *out)
{
	memset(out, 0, sizeof(*out));
	out->total_ns = b->total_ns > a->total_ns ? b->total_ns - a->total_ns : 0;
	out->per_cpu = a->per_cpu && b->per_cpu;
	if (!out->per_cpu)
		return;
	out->ncpu = b->ncpu;
	for (size_t i = 0; i < b->ncpu; i++) {
		uint64_t was = i < a->ncpu ? a->cpu_ns[i] : 0;
		out->cpu_ns[i] = b->cpu_ns[i] > was ? b->cpu_ns[i] - was : 0;
	}
}
