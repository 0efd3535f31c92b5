/* joulestep SPANK plugin: the inputs of the shared-node attribution
 * (js_share.h). */
#include "js_share.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

int js_share_layout(const struct js_cpu_topo *topo, const struct js_cpuset *step_cpus,
		    struct js_share_snap *out)
{
	memset(out, 0, sizeof(*out));
	for (int c = 0; c < JS_MAX_CPUS; c++) {
		if (!js_cpuset_isset(&topo->present, c) || !js_cpuset_isset(step_cpus, c))
			continue;
		size_t i = 0;
		while (i < out->npkg && out->pkg[i].package != topo->pkg[c])
			i++;
		if (i == out->npkg) {
			if (out->npkg == JS_SHARE_MAX_PKGS)
				return -E2BIG;
			out->pkg[out->npkg++].package = topo->pkg[c];
		}
	}
	for (int c = 0; c < JS_MAX_CPUS; c++) {
		if (!js_cpuset_isset(&topo->present, c))
			continue;
		for (size_t i = 0; i < out->npkg; i++)
			if (out->pkg[i].package == topo->pkg[c]) {
				out->pkg[i].cpus++;
				out->pkg[i].step_cpus += js_cpuset_isset(step_cpus, c);
			}
	}
	return out->npkg ? 0 : -ENOENT;
}

/* One "cpuN a b c ..." line: N, busy and total ticks; false otherwise. */
static bool stat_line(const char *line, int *cpu, uint64_t *busy, uint64_t *total)
{
	if (strncmp(line, "cpu", 3) || line[3] < '0' || line[3] > '9')
		return false;
	char *end;
	errno = 0;
	long n = strtol(line + 3, &end, 10);
	if (errno || n < 0 || n >= JS_MAX_CPUS)
		return false;
	uint64_t v[8] = {0};
	const char *p = end;
	int k = 0;
	for (; k < 8; k++) {
		errno = 0;
		unsigned long long x = strtoull(p, &end, 10);
		if (end == p || errno)
			break;
		v[k] = x;
		p = end;
	}
	if (k < 4)
		return false;
	*cpu = (int)n;
	*total = 0;
	for (int i = 0; i < 8; i++) /* guest time is already in user/nice */
		*total += v[i];
	*busy = *total - v[3] - v[4];
	return true;
}

int js_share_read_stat(const char *procfs, const struct js_cpu_topo *topo,
		       struct js_share_snap *snap)
{
	char path[PATH_MAX];
	if (snprintf(path, sizeof(path), "%s/stat", procfs) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	FILE *f = fdopen(fd, "r");
	if (!f) {
		int e = errno;
		close(fd);
		return -e;
	}
	for (size_t i = 0; i < snap->npkg; i++)
		snap->pkg[i].busy_ticks = snap->pkg[i].total_ticks = 0;
	char line[512];
	int seen = 0;
	while (fgets(line, sizeof(line), f)) {
		int c;
		uint64_t busy, total;
		if (!stat_line(line, &c, &busy, &total) || !js_cpuset_isset(&topo->present, c))
			continue;
		for (size_t i = 0; i < snap->npkg; i++)
			if (snap->pkg[i].package == topo->pkg[c]) {
				snap->pkg[i].busy_ticks += busy;
				snap->pkg[i].total_ticks += total;
				seen++;
			}
	}
	fclose(f);
	return seen ? 0 : -ENODATA;
}

uint64_t js_share_children_us(void)
{
	struct rusage ru;
	if (getrusage(RUSAGE_CHILDREN, &ru) < 0)
		return 0;
	return (uint64_t)ru.ru_utime.tv_sec * 1000000u + (uint64_t)ru.ru_utime.tv_usec +
	       (uint64_t)ru.ru_stime.tv_sec * 1000000u + (uint64_t)ru.ru_stime.tv_usec;
}
