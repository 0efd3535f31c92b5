/* Node-level sources: HPE/Cray pm_counters and hwmon power sensors (NVIDIA
 * Grace). Pure parsing first, then discovery and reading under a root. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "js_internal.h"
#include "node_internal.h"

#define PM_RETRIES 3

/* ---- pure ------------------------------------------------------------------ */

static const char *skip_spaces(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	return p;
}

/* An unsigned decimal at *p (at least one digit). */
static int take_u64(const char **p, const char *end, uint64_t *out)
{
	const char *s = *p;
	uint64_t v = 0;

	if (s >= end || *s < '0' || *s > '9')
		return -EINVAL;
	while (s < end && *s >= '0' && *s <= '9') {
		if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
			return -ERANGE;
		v = v * 10 + (uint64_t)(*s - '0');
		s++;
	}
	*out = v;
	*p = s;
	return 0;
}

int js_pm_parse_energy(const char *buf, size_t len, uint64_t *joules, uint64_t *t_us)
{
	const char *p = buf, *end;
	uint64_t j, t = 0;
	int rc;

	if (!buf || !joules || !t_us)
		return -EINVAL;
	end = buf + strnlen(buf, len);
	while (end > p && (end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
		end--;
	if ((rc = take_u64(&p, end, &j)) < 0)
		return rc;
	p = skip_spaces(p, end);
	if (p >= end || *p != 'J')
		return -EINVAL;
	p = skip_spaces(p + 1, end);
	if (p < end) {
		if ((rc = take_u64(&p, end, &t)) < 0)
			return rc;
		p = skip_spaces(p, end);
		if (end - p != 2 || p[0] != 'u' || p[1] != 's')
			return -EINVAL;
	}
	if (j > UINT64_MAX / 1000000)
		return -ERANGE;
	*joules = j;
	*t_us = t;
	return 0;
}

int js_pm_classify(const char *file, char *what, size_t wlen, bool *total)
{
	size_t l;

	if (!file || !what || !total)
		return -EINVAL;
	if (!strcmp(file, "energy")) {
		js_fmt(what, wlen, "node");
		*total = true;
		return 0;
	}
	*total = false;
	if (!strcmp(file, "cpu_energy")) {
		js_fmt(what, wlen, "cpu");
		return 0;
	}
	if (!strcmp(file, "memory_energy")) {
		js_fmt(what, wlen, "memory");
		return 0;
	}
	l = strlen(file);
	if (!strncmp(file, "accel", 5) && l > 12 && !strcmp(file + l - 7, "_energy")) {
		for (size_t i = 5; i < l - 7; i++)
			if (file[i] < '0' || file[i] > '9')
				return -ENOENT;
		js_fmt(what, wlen, "%.*s", (int)(l - 7), file);
		return 0;
	}
	return -ENOENT;
}

int js_grace_label(const char *label, char *what, size_t wlen, int *socket, bool *total)
{
	static const char *const kinds[][2] = {
		{"Module", "module"}, {"CPU", "cpu"}, {"SysIO", "sysio"}, {"Grace", "grace"}};
	char kind[16], tail;
	int sock, n = 0;

	if (!label || !what || !socket || !total)
		return -EINVAL;
	if (sscanf(label, "%15s Power Socket %d%n%c", kind, &sock, &n, &tail) != 2 ||
	    sock < 0 || sock > 4095 || label[n] != '\0')
		return -EINVAL;
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		if (strcmp(kind, kinds[i][0]))
			continue;
		js_fmt(what, wlen, "%s", kinds[i][1]);
		*socket = sock;
		*total = i == 0;
		return 0;
	}
	return -EINVAL;
}

uint64_t js_power_integrate_uj(uint64_t p0_uw, uint64_t p1_uw, uint64_t dt_ns)
{
	/* uW * ns = 1e-15 J = 1e-9 uJ */
	unsigned __int128 e = ((unsigned __int128)p0_uw + p1_uw) * dt_ns / 2;

	e /= 1000000000u;
	return e > UINT64_MAX ? UINT64_MAX : (uint64_t)e;
}

/* ---- discovery ------------------------------------------------------------------ */

static int cmp_ch(const void *a, const void *b)
{
	const struct js_node_channel *x = a, *y = b;

	if (x->socket != y->socket)
		return x->socket < y->socket ? -1 : 1;
	if (x->total != y->total)
		return x->total ? -1 : 1;
	return strcmp(x->name, y->name);
}

static int pm_discover(const char *root, struct js_node *n, char *why, size_t whylen)
{
	struct dirent *de;
	DIR *d;

	if (js_path(n->dir, sizeof(n->dir), "%s/cray/pm_counters", root) < 0)
		return -ENAMETOOLONG;
	d = opendir(n->dir);
	if (!d) {
		int rc = -errno;

		js_fmt(why, whylen, "no %s", n->dir);
		return rc == -ENOTDIR ? -ENOENT : rc;
	}
	while ((de = readdir(d))) {
		struct js_node_channel *c;
		char what[JS_NAME_LEN];
		bool total;

		if (js_pm_classify(de->d_name, what, sizeof(what), &total) < 0)
			continue;
		if (n->n >= JS_NODE_MAX_CH)
			break;
		c = &n->ch[n->n++];
		js_fmt(c->name, sizeof(c->name), "%s", de->d_name);
		js_fmt(c->what, sizeof(c->what), "%s", what);
		c->socket = -1;
		c->total = total;
		if (js_path(c->path, sizeof(c->path), "%s/%s", n->dir, de->d_name) < 0)
			n->n--;
	}
	closedir(d);
	if (!n->n) {
		js_fmt(why, whylen, "no energy counter in %s", n->dir);
		return -ENOENT;
	}
	n->src = JS_NODE_PM_COUNTERS;
	qsort(n->ch, n->n, sizeof(n->ch[0]), cmp_ch);
	return 0;
}

static int hwmon_discover(const char *root, struct js_node *n, char *why, size_t whylen)
{
	char base[JS_PATH_LEN];
	struct dirent *de;
	DIR *d;

	if (js_path(base, sizeof(base), "%s/class/hwmon", root) < 0)
		return -ENAMETOOLONG;
	d = opendir(base);
	if (!d) {
		js_fmt(why, whylen, "no %s", base);
		return -ENOENT;
	}
	while ((de = readdir(d)) && n->n < JS_NODE_MAX_CH) {
		char p[JS_PATH_LEN + 32], label[JS_NAME_LEN], what[JS_NAME_LEN];
		struct js_node_channel *c;
		int sock;
		bool total;

		if (strncmp(de->d_name, "hwmon", 5) ||
		    js_path(p, sizeof(p), "%s/%s/power1_oem_info", base, de->d_name) < 0 ||
		    js_read_file(p, label, sizeof(label)) <= 0 ||
		    js_grace_label(label, what, sizeof(what), &sock, &total) < 0)
			continue;
		c = &n->ch[n->n];
		js_fmt(c->name, sizeof(c->name), "%s", label);
		js_fmt(c->what, sizeof(c->what), "%s", what);
		c->socket = sock;
		c->total = total;
		if (js_path(c->path, sizeof(c->path), "%s/%s/power1_average", base, de->d_name) == 0)
			n->n++;
	}
	closedir(d);
	if (!n->n) {
		js_fmt(why, whylen, "no power sensor with a power1_oem_info label under %s", base);
		return -ENOENT;
	}
	n->src = JS_NODE_HWMON_POWER;
	qsort(n->ch, n->n, sizeof(n->ch[0]), cmp_ch);
	return 0;
}

int js_node_open(const char *sysfs_root, const char *order, struct js_node **out,
		 char *why, size_t whylen)
{
	const char *root = sysfs_root ? sysfs_root : JS_SYSFS_DEFAULT, *p;
	int rc = -ENOENT;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (why && whylen)
		why[0] = '\0';
	if (!order)
		order = "pm_counters,hwmon";
	for (p = order; *p;) {   /* bad input first, before anything is tried */
		size_t len = strcspn(p, ",");

		if (!((len == 11 && !strncmp(p, "pm_counters", 11)) ||
		      (len == 5 && !strncmp(p, "hwmon", 5)))) {
			js_fmt(why, whylen, "%.*s: unknown node source (allowed: pm_counters, hwmon)",
			       (int)(len < 40 ? len : 40), p);
			return -EINVAL;
		}
		p += len + (p[len] == ',');
	}
	for (p = order; *p;) {
		size_t len = strcspn(p, ","), used = why ? strlen(why) : 0;
		struct js_node *n = calloc(1, sizeof(*n));
		char reason[JS_WHY_LEN * 2] = "";

		if (!n)
			return -ENOMEM;
		rc = len == 5 ? hwmon_discover(root, n, reason, sizeof(reason))
			      : pm_discover(root, n, reason, sizeof(reason));
		if (rc == 0) {
			*out = n;
			return 0;
		}
		free(n);
		if (why && used + 1 < whylen)
			js_fmt(why + used, whylen - used, "%s%.*s: %s", used ? "\n" : "", (int)len, p,
			       reason[0] ? reason : strerror(-rc));
		p += len + (p[len] == ',');
	}
	return rc;
}

void js_node_close(struct js_node *n)
{
	free(n);
}

enum js_node_source js_node_source_of(const struct js_node *n)
{
	return n->src;
}

const char *js_node_source_name(const struct js_node *n)
{
	return n && n->src == JS_NODE_HWMON_POWER ? "hwmon" : "pm_counters";
}

size_t js_node_nchannels(const struct js_node *n)
{
	return n ? n->n : 0;
}

const struct js_node_channel *js_node_channel(const struct js_node *n, size_t i)
{
	return n && i < n->n ? &n->ch[i] : NULL;
}

/* ---- reading ------------------------------------------------------------------ */

static int read_u64_path(const char *path, uint64_t *v)
{
	char buf[64];
	ssize_t r = js_read_file(path, buf, sizeof(buf));

	if (r < 0)
		return (int)r;
	return js_parse_u64(buf, (size_t)r, v);
}

static int pm_read_once(const struct js_node *n, uint64_t *val, int *err)
{
	int first = 0;

	for (size_t i = 0; i < n->n; i++) {
		char buf[128];
		uint64_t j, t;
		ssize_t r = js_read_file(n->ch[i].path, buf, sizeof(buf));

		err[i] = r < 0 ? (int)r : js_pm_parse_energy(buf, (size_t)r, &j, &t);
		if (!err[i])
			val[i] = j * 1000000u;
		else if (!first)
			first = err[i];
	}
	return first;
}

int js_node_read(const struct js_node *n, uint64_t *val, int *err, uint64_t *generation,
		 bool *gen_known)
{
	char path[JS_PATH_LEN + 16];
	int rc = 0;

	*gen_known = false;
	if (n->src == JS_NODE_HWMON_POWER) {
		for (size_t i = 0; i < n->n; i++) {
			err[i] = read_u64_path(n->ch[i].path, &val[i]);
			if (err[i] && !rc)
				rc = err[i];
		}
		return rc;
	}
	for (int t = 0; t < PM_RETRIES; t++) {
		uint64_t f0 = 0, f1 = 0;
		int rf0, rf1;

		js_path(path, sizeof(path), "%s/freshness", n->dir);
		rf0 = read_u64_path(path, &f0);
		rc = pm_read_once(n, val, err);
		js_path(path, sizeof(path), "%s/generation", n->dir);
		*gen_known = read_u64_path(path, generation) == 0;
		js_path(path, sizeof(path), "%s/freshness", n->dir);
		rf1 = read_u64_path(path, &f1);
		if (rf0 || rf1 || f0 == f1)
			break; /* a consistent set (or no freshness to tell) */
	}
	return rc;
}
