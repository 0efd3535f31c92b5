/* CPU frequency: CPU sets, cpufreq discovery, clamp/round, apply. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "js_internal.h"

/* ---- CPU sets (pure) --------------------------------------------------------- */

void js_cpuset_zero(struct js_cpuset *s)
{
	memset(s, 0, sizeof(*s));
}

void js_cpuset_set(struct js_cpuset *s, int cpu)
{
	if (cpu >= 0 && cpu < JS_MAX_CPUS)
		s->bits[cpu / 64] |= 1ULL << (cpu % 64);
}

bool js_cpuset_isset(const struct js_cpuset *s, int cpu)
{
	return cpu >= 0 && cpu < JS_MAX_CPUS && (s->bits[cpu / 64] >> (cpu % 64)) & 1;
}

int js_cpuset_count(const struct js_cpuset *s)
{
	int i, n = 0;

	for (i = 0; i < JS_MAX_CPUS / 64; i++)
		n += __builtin_popcountll(s->bits[i]);
	return n;
}

static int parse_cpu(const char **p, int *out)
{
	const char *s = *p;
	long v = 0;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	while (*s >= '0' && *s <= '9') {
		v = v * 10 + (*s - '0');
		if (v >= JS_MAX_CPUS)
			return -EINVAL;
		s++;
	}
	*out = (int)v;
	*p = s;
	return 0;
}

/* Accepts "0-3,8" (Slurm, cpulist files) and "0 1 2" (related_cpus). */
int js_cpuset_parse(const char *list, struct js_cpuset *out)
{
	const char *p = list;
	struct js_cpuset s;

	if (!list || !out)
		return -EINVAL;
	js_cpuset_zero(&s);
	while (*p == ' ' || *p == '\n' || *p == '\t')
		p++;
	while (*p) {
		int a, b, c;

		if (parse_cpu(&p, &a) < 0)
			return -EINVAL;
		b = a;
		if (*p == '-') {
			p++;
			if (parse_cpu(&p, &b) < 0 || b < a)
				return -EINVAL;
		}
		for (c = a; c <= b; c++)
			js_cpuset_set(&s, c);
		if (*p == ',') {
			p++;
			if (*p < '0' || *p > '9')
				return -EINVAL;
			continue;
		}
		if (*p && *p != ' ' && *p != '\n' && *p != '\t')
			return -EINVAL;
		while (*p == ' ' || *p == '\n' || *p == '\t')
			p++;
	}
	*out = s;
	return 0;
}

int js_cpuset_format(const struct js_cpuset *s, char *buf, size_t len)
{
	size_t used = 0;
	int c = 0;

	if (!s || !buf || !len)
		return -EINVAL;
	buf[0] = '\0';
	while (c < JS_MAX_CPUS) {
		int a, n;

		if (!js_cpuset_isset(s, c)) {
			c++;
			continue;
		}
		a = c;
		while (c + 1 < JS_MAX_CPUS && js_cpuset_isset(s, c + 1))
			c++;
		if (a == c)
			n = snprintf(buf + used, len - used, "%s%d", used ? "," : "", a);
		else
			n = snprintf(buf + used, len - used, "%s%d-%d", used ? "," : "", a, c);
		if (n < 0 || (size_t)n >= len - used) {
			buf[0] = '\0';
			return -ENOSPC;
		}
		used += (size_t)n;
		c++;
	}
	return 0;
}

/* ---- pure frequency logic --------------------------------------------------- */

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

int js_parse_khz_list(const char *buf, uint32_t *out, size_t max, size_t *n)
{
	const char *p = buf;
	size_t k = 0, i, j;

	if (!buf || !out || !n)
		return -EINVAL;
	for (;;) {
		uint64_t v = 0;

		while (*p == ' ' || *p == '\n' || *p == '\t')
			p++;
		if (!*p)
			break;
		if (*p < '0' || *p > '9')
			return -EINVAL;
		while (*p >= '0' && *p <= '9') {
			v = v * 10 + (uint64_t)(*p - '0');
			if (v > UINT32_MAX)
				return -EINVAL;
			p++;
		}
		if (*p && *p != ' ' && *p != '\n' && *p != '\t')
			return -EINVAL;
		if (v == 0)
			return -EINVAL;
		if (k == max)
			return -E2BIG;
		out[k++] = (uint32_t)v;
	}
	qsort(out, k, sizeof(out[0]), cmp_u32);
	for (i = j = 0; i < k; i++)
		if (j == 0 || out[i] != out[j - 1])
			out[j++] = out[i];
	*n = j;
	return 0;
}

uint32_t js_freq_clamp_round_khz(const struct js_cpufreq *f, uint32_t req_khz)
{
	uint32_t lo = f->cpuinfo_min_khz, hi = f->cpuinfo_max_khz, v = req_khz, best;
	size_t i;

	if (hi < lo)
		hi = lo;
	if (v < lo)
		v = lo;
	if (v > hi)
		v = hi;
	if (f->navail > 0) {
		/* nearest available step; ties go down (list is ascending) */
		best = f->avail_khz[0];
		for (i = 1; i < f->navail; i++) {
			uint32_t c = f->avail_khz[i];
			uint32_t dc = c > v ? c - v : v - c;
			uint32_t db = best > v ? best - v : v - best;

			if (dc < db)
				best = c;
		}
		return best;
	}
	/* continuous: nearest MHz, ties down, kept inside the range */
	best = (v / 1000) * 1000;
	if (v - best > 500)
		best += 1000;
	if (best > hi)
		best -= 1000;
	if (best < lo)
		best = lo;
	return best;
}

int js_freq_ratio_to_khz(const struct js_cpufreq *f, double ratio, uint32_t *khz)
{
	if (!f || !khz || !(ratio > 0.0 && ratio <= 1.0))
		return -EINVAL;
	/* positive, so truncating v + 0.5 rounds to nearest (no libm needed) */
	*khz = js_freq_clamp_round_khz(f, (uint32_t)(ratio * (double)f->cpuinfo_max_khz + 0.5));
	return 0;
}

uint32_t js_freq_nominal_khz(const struct js_cpufreq *f)
{
	if (!f)
		return 0;
	if (f->base_frequency_khz)
		return f->base_frequency_khz;
	if (f->navail == 0)
		return 0;
	/* acpi-cpufreq shows turbo as one entry 1 MHz above the nominal top */
	if (f->navail >= 2 && f->avail_khz[f->navail - 1] == f->avail_khz[f->navail - 2] + 1000)
		return f->avail_khz[f->navail - 2];
	return f->avail_khz[f->navail - 1];
}

bool js_freq_policy_shared(const struct js_cpufreq *f, const struct js_cpuset *mine)
{
	for (int i = 0; i < JS_MAX_CPUS / 64; i++)
		if (f->related.bits[i] & ~mine->bits[i])
			return true;
	return false;
}

int js_freq_domain_key(const struct js_cpufreq *f)
{
	return f->policy >= 0 ? f->policy : f->cpu;
}

int js_parse_policy_link(const char *target, int *policy)
{
	const char *p;
	int v;

	if (!target || !policy)
		return -EINVAL;
	p = strrchr(target, '/');
	p = p ? p + 1 : target;
	if (strncmp(p, "policy", 6))
		return -EINVAL;
	p += 6;
	if (parse_cpu(&p, &v) < 0 || *p)
		return -EINVAL;
	*policy = v;
	return 0;
}

/* ---- discovery (file I/O) --------------------------------------------------- */

static int cpufreq_dir(char *buf, size_t len, const char *root, int cpu)
{
	return js_path(buf, len, "%s/devices/system/cpu/cpu%d/cpufreq", root ? root : JS_SYSFS_DEFAULT,
		       cpu);
}

static int read_str(const char *dir, const char *file, char *buf, size_t len)
{
	char path[JS_PATH_LEN];
	ssize_t n;
	int rc = js_path(path, sizeof(path), "%s/%s", dir, file);

	if (rc < 0)
		return rc;
	n = js_read_file(path, buf, len);
	if (n < 0)
		return (int)n;
	while (n > 0 && (buf[n - 1] == ' ' || buf[n - 1] == '\n'))
		buf[--n] = '\0';
	return 0;
}

static int read_khz(const char *dir, const char *file, uint32_t *out)
{
	char buf[32];
	uint64_t v;
	int rc = read_str(dir, file, buf, sizeof(buf));

	if (rc < 0)
		return rc;
	rc = js_parse_u64(buf, strlen(buf), &v);
	if (rc < 0)
		return rc;
	if (v > UINT32_MAX)
		return -ERANGE;
	*out = (uint32_t)v;
	return 0;
}

static bool has_word(const char *list, const char *word)
{
	size_t wl = strlen(word);
	const char *p = list;

	while ((p = strstr(p, word))) {
		if ((p == list || p[-1] == ' ') && (p[wl] == '\0' || p[wl] == ' ' || p[wl] == '\n'))
			return true;
		p += wl;
	}
	return false;
}

/* A clock domain's directory for the journal (key: its policy number):
 * cpufreq/policyN, which stays while its CPUs are unplugged; cpuN/cpufreq on
 * kernels without policy directories. */
static int domain_dir(char *buf, size_t len, const char *root, int key)
{
	struct stat st;
	int rc = js_path(buf, len, "%s/devices/system/cpu/cpufreq/policy%d",
			 root ? root : JS_SYSFS_DEFAULT, key);

	if (rc == 0 && stat(buf, &st) == 0 && S_ISDIR(st.st_mode))
		return 0;
	return cpufreq_dir(buf, len, root, key);
}

static int read_dir(const char *dir, int cpu, struct js_cpufreq *out);

int js_cpufreq_read(const char *sysfs_root, int cpu, struct js_cpufreq *out)
{
	char dir[JS_PATH_LEN];
	int rc;

	if (!out || cpu < 0 || cpu >= JS_MAX_CPUS)
		return -EINVAL;
	rc = cpufreq_dir(dir, sizeof(dir), sysfs_root, cpu);
	return rc < 0 ? rc : read_dir(dir, cpu, out);
}

int js_cpufreq_read_domain(const char *sysfs_root, int key, struct js_cpufreq *out)
{
	char dir[JS_PATH_LEN];
	int rc;

	if (!out || key < 0 || key >= JS_MAX_CPUS)
		return -EINVAL;
	rc = domain_dir(dir, sizeof(dir), sysfs_root, key);
	if (rc == 0)
		rc = read_dir(dir, key, out);
	if (rc == 0)
		out->policy = key;
	return rc;
}

static int read_dir(const char *dir, int cpu, struct js_cpufreq *out)
{
	char buf[2048];
	struct stat st;
	ssize_t n;
	int rc;

	if (stat(dir, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	memset(out, 0, sizeof(*out));
	out->cpu = cpu;
	if ((rc = read_str(dir, "scaling_driver", out->driver, sizeof(out->driver))) < 0 ||
	    (rc = read_str(dir, "scaling_governor", out->governor, sizeof(out->governor))) < 0 ||
	    (rc = read_khz(dir, "cpuinfo_min_freq", &out->cpuinfo_min_khz)) < 0 ||
	    (rc = read_khz(dir, "cpuinfo_max_freq", &out->cpuinfo_max_khz)) < 0 ||
	    (rc = read_khz(dir, "scaling_min_freq", &out->scaling_min_khz)) < 0 ||
	    (rc = read_khz(dir, "scaling_max_freq", &out->scaling_max_khz)) < 0)
		return rc;
	if (read_str(dir, "scaling_available_governors", out->governors, sizeof(out->governors)) < 0)
		out->governors[0] = '\0';
	if (read_str(dir, "scaling_available_frequencies", buf, sizeof(buf)) == 0 &&
	    js_parse_khz_list(buf, out->avail_khz, JS_MAX_FREQS, &out->navail) < 0)
		out->navail = 0;
	js_cpuset_zero(&out->related);
	if (read_str(dir, "related_cpus", buf, sizeof(buf)) < 0 ||
	    js_cpuset_parse(buf, &out->related) < 0 || js_cpuset_count(&out->related) == 0)
		js_cpuset_set(&out->related, cpu);
	rc = read_khz(dir, "scaling_setspeed", &out->setspeed_khz);
	if (rc < 0)
		out->setspeed_khz = 0; /* "<unsupported>" or absent */
	out->method = JS_FREQ_MAXCAP;
	if (has_word(out->governors, "userspace")) {
		char path[JS_PATH_LEN];

		if (js_path(path, sizeof(path), "%s/scaling_setspeed", dir) == 0 &&
		    access(path, F_OK) == 0)
			out->method = JS_FREQ_SETSPEED;
	}
	if (read_khz(dir, "base_frequency", &out->base_frequency_khz) < 0)
		out->base_frequency_khz = 0;
	out->policy = -1;
	n = readlink(dir, buf, sizeof(buf) - 1);
	if (n > 0) {
		buf[n] = '\0';
		if (js_parse_policy_link(buf, &out->policy) < 0)
			out->policy = -1;
	}
	if (out->policy < 0) /* a real directory (older kernels): the first related CPU */
		for (int c = 0; c < JS_MAX_CPUS && out->policy < 0; c++)
			if (js_cpuset_isset(&out->related, c))
				out->policy = c;
	return 0;
}

int js_cpufreq_online(const char *sysfs_root, struct js_cpuset *out)
{
	char base[JS_PATH_LEN];
	DIR *d;
	struct dirent *de;
	int rc;

	if (!out)
		return -EINVAL;
	js_cpuset_zero(out);
	rc = js_path(base, sizeof(base), "%s/devices/system/cpu",
		     sysfs_root ? sysfs_root : JS_SYSFS_DEFAULT);
	if (rc < 0)
		return rc;
	d = opendir(base);
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		char dir[JS_PATH_LEN];
		const char *p = de->d_name + 3;
		struct stat st;
		int cpu;

		if (strncmp(de->d_name, "cpu", 3) || parse_cpu(&p, &cpu) < 0 || *p)
			continue;
		if (cpufreq_dir(dir, sizeof(dir), sysfs_root, cpu) == 0 && stat(dir, &st) == 0 &&
		    S_ISDIR(st.st_mode))
			js_cpuset_set(out, cpu);
	}
	closedir(d);
	return js_cpuset_count(out) ? 0 : -ENOENT;
}

/* ---- journal writes (paths; step start and end only) ---------------------------- */

static int write_in(int rc, const char *dir, const char *file, const char *val)
{
	char path[JS_PATH_LEN];

	if (rc == 0)
		rc = js_path(path, sizeof(path), "%s/%s", dir, file);
	if (rc < 0)
		return rc;
	return js_write_file(path, val);
}

int js_cpufreq_write(const char *sysfs_root, int cpu, const char *file, const char *val)
{
	char dir[JS_PATH_LEN];

	return write_in(cpufreq_dir(dir, sizeof(dir), sysfs_root, cpu), dir, file, val);
}

int js_domain_write(const char *sysfs_root, int key, const char *file, const char *val)
{
	char dir[JS_PATH_LEN];

	return write_in(domain_dir(dir, sizeof(dir), sysfs_root, key), dir, file, val);
}

int js_domain_write_khz(const char *sysfs_root, int key, const char *file, uint32_t khz)
{
	char v[16];

	js_freq_fmt_khz(v, sizeof(v), khz);
	return js_domain_write(sysfs_root, key, file, v);
}

int js_cpufreq_write_khz(const char *sysfs_root, int cpu, const char *file, uint32_t khz)
{
	char v[16];

	js_freq_fmt_khz(v, sizeof(v), khz);
	return js_cpufreq_write(sysfs_root, cpu, file, v);
}

/* ---- one-shot apply (tools) -------------------------------------------------------- */

static int read_back(const char *sysfs_root, int cpu, const char *file, uint32_t *khz)
{
	char dir[JS_PATH_LEN];
	int rc = cpufreq_dir(dir, sizeof(dir), sysfs_root, cpu);

	return rc < 0 ? rc : read_khz(dir, file, khz);
}

int js_freq_apply(const char *sysfs_root, const struct js_cpufreq *f, uint32_t khz,
		  uint32_t *readback_khz, bool *ignored)
{
	struct js_cpufreq now;
	const char *file;
	uint32_t rb = 0;
	int rc;

	if (!f || !khz)
		return -EINVAL;
	rc = js_cpufreq_read(sysfs_root, f->cpu, &now);
	if (rc < 0)
		return rc;
	if (f->method == JS_FREQ_SETSPEED) {
		if (strcmp(now.governor, "userspace") != 0) {
			rc = js_cpufreq_write(sysfs_root, f->cpu, "scaling_governor", "userspace\n");
			if (rc < 0)
				return rc;
		}
		file = "scaling_setspeed";
		rc = js_cpufreq_write_khz(sysfs_root, f->cpu, file, khz);
	} else {
		if (khz < now.scaling_min_khz) {
			rc = js_cpufreq_write_khz(sysfs_root, f->cpu, "scaling_min_freq", khz);
			if (rc < 0)
				return rc;
		}
		file = "scaling_max_freq";
		rc = js_cpufreq_write_khz(sysfs_root, f->cpu, file, khz);
	}
	if (rc < 0)
		return rc;
	rc = read_back(sysfs_root, f->cpu, file, &rb);
	if (rc < 0)
		return rc;
	if (readback_khz)
		*readback_khz = rb;
	if (ignored)
		*ignored = rb != khz;
	return 0;
}

/* ---- clock control handle -------------------------------------------------------- */

static const char *const ctl_file[2] = {"scaling_max_freq", "scaling_min_freq"};

size_t js_freq_fmt_khz(char *buf, size_t len, uint32_t khz)
{
	char tmp[16];
	size_t n = 0, i;

	/* by hand: async-signal-safe, no locale, never truncates silently */
	do {
		tmp[n++] = (char)('0' + khz % 10);
		khz /= 10;
	} while (khz);
	if (!buf || len < n + 2)
		return 0;
	for (i = 0; i < n; i++)
		buf[i] = tmp[n - 1 - i];
	buf[n] = '\n';
	buf[n + 1] = '\0';
	return n + 1;
}

int js_freq_ctl_ratio_khz(const struct js_freq_ctl *c, double ratio, uint32_t *khz)
{
	uint32_t k;
	int rc;

	if (!c || !khz)
		return -EINVAL;
	rc = js_freq_ratio_to_khz(&c->info, ratio, &k);
	if (rc < 0)
		return rc;
	*khz = k > c->orig_khz[JS_FREQ_MAX] ? c->orig_khz[JS_FREQ_MAX] : k;
	return 0;
}

void js_freq_ctl_plan(const struct js_freq_ctl *c, uint32_t khz, struct js_freq_plan *p)
{
	uint32_t omax = c->orig_khz[JS_FREQ_MAX], omin = c->orig_khz[JS_FREQ_MIN];
	uint32_t max = (khz == 0 || khz > omax) ? omax : khz;
	uint32_t min = omin > max ? max : omin; /* never min above max */
	bool wmax = max != c->cur_khz[JS_FREQ_MAX], wmin = min != c->cur_khz[JS_FREQ_MIN];

	memset(p, 0, sizeof(*p));
	p->max_khz = max;
	/* the kernel refuses (older) or clamps (newer) max below min: lower min
	 * first, raise it last */
	if (wmin && min < c->cur_khz[JS_FREQ_MIN])
		p->w[p->n++] = (struct js_freq_write){JS_FREQ_MIN, min};
	if (wmax)
		p->w[p->n++] = (struct js_freq_write){JS_FREQ_MAX, max};
	if (wmin && min > c->cur_khz[JS_FREQ_MIN])
		p->w[p->n++] = (struct js_freq_write){JS_FREQ_MIN, min};
}

int js_freq_ctl_open(const char *sysfs_root, const struct js_cpufreq *info, uint32_t orig_min_khz,
		     uint32_t orig_max_khz, struct js_freq_ctl *c)
{
	char dir[JS_PATH_LEN], path[JS_PATH_LEN];
	int rc, i;

	if (!info || !c || !orig_max_khz || orig_min_khz > orig_max_khz)
		return -EINVAL;
	memset(c, 0, sizeof(*c));
	c->fd[0] = c->fd[1] = -1;
	rc = cpufreq_dir(dir, sizeof(dir), sysfs_root, info->cpu);
	if (rc < 0)
		return rc;
	for (i = 0; i < 2; i++) {
		rc = js_path(path, sizeof(path), "%s/%s", dir, ctl_file[i]);
		if (rc < 0)
			goto fail;
		c->fd[i] = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
		if (c->fd[i] < 0) {
			rc = -errno;
			goto fail;
		}
	}
	c->cpu = info->cpu;
	c->info = *info;
	c->orig_khz[JS_FREQ_MAX] = orig_max_khz;
	c->orig_khz[JS_FREQ_MIN] = orig_min_khz;
	c->cur_khz[JS_FREQ_MAX] = info->scaling_max_khz;
	c->cur_khz[JS_FREQ_MIN] = info->scaling_min_khz;
	return 0;
fail:
	js_freq_ctl_close(c);
	return rc;
}

int js_freq_ctl_set(struct js_freq_ctl *c, uint32_t khz, uint32_t *applied_khz)
{
	struct js_freq_plan p;
	size_t i;

	if (!c || c->fd[0] < 0 || c->fd[1] < 0)
		return -EBADF;
	js_freq_ctl_plan(c, khz, &p);
	for (i = 0; i < p.n; i++) {
		char buf[16];
		size_t len = js_freq_fmt_khz(buf, sizeof(buf), p.w[i].khz);
		ssize_t n;

		/* sysfs takes one write() as the whole value and ignores the offset */
		do {
			n = pwrite(c->fd[p.w[i].file], buf, len, 0);
		} while (n < 0 && errno == EINTR);
		if (n < 0)
			return -errno;
		if ((size_t)n != len)
			return -EIO;
		c->cur_khz[p.w[i].file] = p.w[i].khz;
	}
	if (applied_khz)
		*applied_khz = p.max_khz;
	return 0;
}

int js_freq_ctl_restore(struct js_freq_ctl *c)
{
	return js_freq_ctl_set(c, 0, NULL);
}

void js_freq_ctl_close(struct js_freq_ctl *c)
{
	if (!c)
		return;
	for (int i = 0; i < 2; i++) {
		if (c->fd[i] >= 0)
			close(c->fd[i]);
		c->fd[i] = -1;
	}
}
