/* joulestep SPANK plugin: pure parsing and policy logic. */
#include "js_parse.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const pol_names[JS_POL_COUNT] = {
	"monitor", "io-dvfs", "ckpt-dvfs", "fixed", "phase", "tuned", "auto",
};

const char *js_pol_name(enum js_pol p)
{
	return (p >= 0 && p < JS_POL_COUNT) ? pol_names[p] : "?";
}

static int fail(char *err, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t len, const char *fmt, ...)
{
	if (err && len) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, len, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

/* Copy a string already validated to fit (truncates defensively). */
static void scopy(char *dst, size_t size, const char *src)
{
	size_t n = strlen(src);
	if (n >= size)
		n = size - 1;
	memcpy(dst, src, n);
	dst[n] = 0;
}

static bool charset_ok(const char *s, size_t maxlen, const char *extra, bool lower_only)
{
	size_t n = strlen(s);
	if (n == 0 || n > maxlen)
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		bool ok = (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') ||
			  (!lower_only && ch >= 'A' && ch <= 'Z') ||
			  (ch && strchr(extra, ch));
		if (!ok)
			return false;
	}
	return true;
}

bool js_kind_valid(const char *s) { return charset_ok(s, JS_KIND_LEN, "_-", true); }
bool js_label_valid(const char *s) { return charset_ok(s, JS_LABEL_LEN, "_.:+/-", false) && strcmp(s, "-"); }
bool js_name_safe(const char *s)
{
	return charset_ok(s, 63, "_.-", false) && strcmp(s, ".") && strcmp(s, "..");
}
static bool tag_key_ok(const char *s) { return charset_ok(s, JS_TAG_KEY_LEN, "_.:+-", false); }
static bool tag_val_ok(const char *s) { return charset_ok(s, JS_TAG_VAL_LEN, "_.:+-", false); }

/* Strict number parsing: the whole string must be consumed. */
static int parse_uint(const char *s, unsigned long long max, unsigned long long *out)
{
	if (!*s || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

static int parse_ratio(const char *s, double *out)
{
	if (!*s || !(isdigit((unsigned char)*s) || *s == '.'))
		return -EINVAL;
	errno = 0;
	char *end;
	double v = strtod(s, &end);
	if (errno || *end || !isfinite(v) || v <= 0.0 || v > 1.0)
		return -EINVAL;
	*out = v;
	return 0;
}

void js_conf_defaults(struct js_conf *c)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->spool, sizeof(c->spool), "/var/spool/joulestep");
	snprintf(c->state, sizeof(c->state), "/var/lib/joulestep");
	snprintf(c->sysfs, sizeof(c->sysfs), "/sys");
	snprintf(c->procfs, sizeof(c->procfs), "/proc");
	snprintf(c->socket_dir, sizeof(c->socket_dir), "/run/joulestep");
	snprintf(c->backend, sizeof(c->backend), "powercap,sysfs");
	/* tuned and auto join the defaults only with their file (js_conf_parse) */
	c->policies_mask = ((1u << JS_POL_COUNT) - 1) & ~(1u << JS_POL_TUNED) & ~(1u << JS_POL_AUTO);
	c->default_policy = JS_POL_MONITOR;
	c->min_ratio = 0.5;
	c->sample_ms = 1000;
	c->max_phases = 10000;
	c->max_depth = 4;
	c->rate = 1000;
	c->max_markers_per_step = 1000000;
	c->min_phase_ms = 10;
	c->job_cache_hours = 168;
}

static int parse_policy_list(const char *v, unsigned *mask, char *err, size_t errlen)
{
	char buf[256];
	if (strlen(v) >= sizeof(buf))
		return fail(err, errlen, "policies=: value too long");
	snprintf(buf, sizeof(buf), "%s", v);
	unsigned m = 0;
	char *save = NULL;
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		int found = -1;
		for (int i = 0; i < JS_POL_COUNT; i++)
			if (!strcmp(t, pol_names[i]))
				found = i;
		if (found < 0)
			return fail(err, errlen,
				    "policies=: unknown policy '%s' (allowed: monitor,io-dvfs,ckpt-dvfs,fixed,phase,tuned,auto)",
				    t);
		m |= 1u << found;
	}
	if (!(m & (1u << JS_POL_MONITOR)))
		return fail(err, errlen, "policies=: must include monitor");
	*mask = m;
	return 0;
}

static int check_socket_dir(const char *d, char *err, size_t errlen)
{
	if (!strcmp(d, "/tmp") || !strncmp(d, "/tmp/", 5) || !strcmp(d, "/var/tmp") ||
	    !strncmp(d, "/var/tmp/", 9) || !strcmp(d, "/dev/shm") || !strncmp(d, "/dev/shm/", 9))
		return fail(err, errlen, "socket_dir=: must not be under a world-writable directory (/tmp, /var/tmp, /dev/shm)");
	return 0;
}

/* A "." or ".." component anywhere, the last one included ("/a/.."). */
static bool has_dot_component(const char *v)
{
	for (const char *p = v; (p = strchr(p, '/')); p++) {
		size_t n = strcspn(p + 1, "/");
		if ((n == 1 && p[1] == '.') || (n == 2 && p[1] == '.' && p[2] == '.'))
			return true;
	}
	return false;
}

/* allow_node: the path may contain %n (the node name, js_conf_expand_node);
 * any other '%' is refused so a later escape can be added without surprise. */
static int set_path(char *dst, const char *key, const char *v, bool allow_node, char *err,
		    size_t errlen)
{
	if (v[0] != '/' || strlen(v) >= JS_PATH_MAX - 64 || has_dot_component(v) ||
	    strchr(v, ' '))
		return fail(err, errlen, "%s=: must be an absolute path without . or .. components, at most %d characters",
			    key, JS_PATH_MAX - 65);
	for (const char *p = strchr(v, '%'); p; p = strchr(p + 2, '%'))
		if (!allow_node || p[1] != 'n')
			return fail(err, errlen, "%s=: '%%' is not allowed here%s", key,
				    allow_node ? " except in %n (the node name)" : "");
	scopy(dst, JS_PATH_MAX, v);
	size_t n = strlen(dst);
	while (n > 1 && dst[n - 1] == '/')
		dst[--n] = 0;
	return 0;
}

static int expand_node(char *path, const char *key, const char *node, char *err, size_t errlen)
{
	char out[JS_PATH_MAX];
	size_t o = 0, nl = strlen(node);
	if (!strstr(path, "%n"))
		return 0;
	if (!js_name_safe(node))
		return fail(err, errlen, "%s=%s: node name '%.63s' unknown or not [A-Za-z0-9_.-]{1,63}",
			    key, path, node);
	for (const char *p = path; *p; p++) {
		const char *add = p;
		size_t len = 1;
		if (p[0] == '%' && p[1] == 'n') {
			add = node;
			len = nl;
			p++;
		}
		if (o + len >= JS_PATH_MAX - 64)
			return fail(err, errlen, "%s=%s: longer than %d characters with %%n=%s", key,
				    path, JS_PATH_MAX - 65, node);
		memcpy(out + o, add, len);
		o += len;
	}
	out[o] = 0;
	scopy(path, JS_PATH_MAX, out);
	return 0;
}

int js_conf_expand_node(struct js_conf *c, const char *node, char *err, size_t errlen)
{
	if (expand_node(c->state, "state", node, err, errlen) ||
	    expand_node(c->sysfs, "sysfs", node, err, errlen) ||
	    expand_node(c->procfs, "procfs", node, err, errlen) ||
	    expand_node(c->socket_dir, "socket_dir", node, err, errlen) ||
	    check_socket_dir(c->socket_dir, err, errlen))
		return -EINVAL;
	return 0;
}

#define KEY(k) (kl == strlen(k) && !strncmp(a, k, kl))

/* The path keys (key a of length kl, value v):
 * 1 when the key is not one of them, 0 when set, -EINVAL (err). */
static int conf_path(struct js_conf *c, const char *a, size_t kl, const char *v, char *err,
		      size_t errlen)
{
	if (KEY("spool")) {
		if (set_path(c->spool, "spool", v, false, err, errlen))
			return -EINVAL;
	} else if (KEY("state")) {
		if (set_path(c->state, "state", v, true, err, errlen))
			return -EINVAL;
	} else if (KEY("sysfs")) {
		if (set_path(c->sysfs, "sysfs", v, true, err, errlen))
			return -EINVAL;
	} else if (KEY("procfs")) {
		if (set_path(c->procfs, "procfs", v, true, err, errlen))
			return -EINVAL;
	} else if (KEY("socket_dir")) {
		if (set_path(c->socket_dir, "socket_dir", v, true, err, errlen))
			return -EINVAL;
		if (check_socket_dir(c->socket_dir, err, errlen))
			return -EINVAL;
	} else if (KEY("tuned")) {
		if (set_path(c->tuned, "tuned", v, false, err, errlen))
			return -EINVAL;
	} else if (KEY("auto")) {
		if (set_path(c->autofile, "auto", v, false, err, errlen))
			return -EINVAL;
	} else if (KEY("hooks_dir")) {
		if (set_path(c->hooks_dir, "hooks_dir", v, false, err, errlen))
			return -EINVAL;
	} else if (KEY("gpu_lib")) {
		if (set_path(c->gpu_lib, "gpu_lib", v, false, err, errlen))
			return -EINVAL;
	} else {
		return 1;
	}
	return 0;
}

/* Where energy and clocks come from, and the node's layout:
 * 1 when the key is not one of them, 0 when set, -EINVAL (err). */
static int conf_source(struct js_conf *c, const char *a, size_t kl, const char *v, char *err,
		       size_t errlen)
{
	unsigned long long u;
	if (KEY("cluster")) {
		if (!js_name_safe(v))
			return fail(err, errlen, "cluster=: allowed characters [A-Za-z0-9_.-], 1-63");
		scopy(c->cluster, sizeof(c->cluster), v);
	} else if (KEY("node_energy")) {
		if (!charset_ok(v, sizeof(c->node_energy) - 1, ",_", true))
			return fail(err, errlen, "node_energy=: none, auto, or a comma list of pm_counters,hwmon");
		char tmp[32], *save = NULL;
		snprintf(tmp, sizeof(tmp), "%s", v);
		for (char *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save))
			if (strcmp(t, "pm_counters") && strcmp(t, "hwmon") &&
			    ((strcmp(t, "auto") && strcmp(t, "none")) || strcmp(v, t)))
				return fail(err, errlen, "node_energy=: unknown source '%s' (allowed: none, auto, or a comma list of pm_counters,hwmon)", t);
		scopy(c->node_energy, sizeof(c->node_energy), strcmp(v, "none") ? v : "");
	} else if (KEY("backend")) {
		if (!charset_ok(v, sizeof(c->backend) - 1, ",_", true))
			return fail(err, errlen, "backend=: comma list of powercap,sysfs,amd_energy");
		scopy(c->backend, sizeof(c->backend), v);
		char tmp[64], *save = NULL;
		snprintf(tmp, sizeof(tmp), "%s", v);
		for (char *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
			/* PAPI stays out of slurmstepd: its rapl component opens
			 * MSRs without O_CLOEXEC and exit()s on a failed read
			 * (docs/design.md); joulestep-run may still use it. */
			if (!strcmp(t, "papi"))
				return fail(err, errlen, "backend=: papi is not used inside slurmstepd (docs/admin-guide.md); allowed: powercap,sysfs,amd_energy");
			if (strcmp(t, "powercap") && strcmp(t, "sysfs") && strcmp(t, "amd_energy"))
				return fail(err, errlen, "backend=: unknown backend '%s' (allowed: powercap,sysfs,amd_energy)", t);
		}
	} else if (KEY("gpu_backend")) {
		if (strcmp(v, "nvml") && strcmp(v, "amdsmi") && strcmp(v, "off") && strcmp(v, "auto"))
			return fail(err, errlen, "gpu_backend=: one of auto, nvml, amdsmi, off");
		scopy(c->gpu_backend, sizeof(c->gpu_backend), strcmp(v, "auto") ? v : "");
	} else if (KEY("threads_per_core")) {
		if (!strcmp(v, "auto"))
			c->threads_per_core = 0;
		else if (parse_uint(v, 256, &u) || u < 1)
			return fail(err, errlen, "threads_per_core=: auto (the hardware's) or an integer in [1, 256] (slurm.conf's ThreadsPerCore for the node; 1 where the node is given as CPUs= only)");
		else
			c->threads_per_core = (unsigned)u;
	} else {
		return 1;
	}
	return 0;
}

/* The numeric bounds and periods:
 * 1 when the key is not one of them, 0 when set, -EINVAL (err). */
static int conf_number(struct js_conf *c, const char *a, size_t kl, const char *v, char *err,
		       size_t errlen)
{
	unsigned long long u;
	if (KEY("min_ratio")) {
		if (parse_ratio(v, &c->min_ratio))
			return fail(err, errlen, "min_ratio=: a number in (0, 1]");
	} else if (KEY("sample_ms")) {
		if (parse_uint(v, 3600000, &u) || u < 1)
			return fail(err, errlen, "sample_ms=: an integer in [1, 3600000]");
		c->sample_ms = (unsigned)u;
	} else if (KEY("max_phases")) {
		if (parse_uint(v, JS_MAX_PHASES_LIMIT, &u) || u < 1)
			return fail(err, errlen, "max_phases=: an integer in [1, %d] (each phase adds up to 1.5 KiB to the step's record: docs/record-format.md, \"Size\")",
				    JS_MAX_PHASES_LIMIT);
		c->max_phases = (unsigned)u;
	} else if (KEY("max_depth")) {
		if (parse_uint(v, JS_DEPTH_LIMIT, &u) || u < 1)
			return fail(err, errlen, "max_depth=: an integer in [1, %d]", JS_DEPTH_LIMIT);
		c->max_depth = (unsigned)u;
	} else if (KEY("max_markers_per_s") || KEY("rate")) {
		/* rate: the key's name before 0.3 */
		if (parse_uint(v, 1000000, &u) || u < 1)
			return fail(err, errlen, "%.*s=: an integer in [1, 1000000] (BEGIN markers per second per step)",
				    (int)kl, a);
		c->rate = (unsigned)u;
	} else if (KEY("max_markers_per_step")) {
		if (parse_uint(v, 1000000000ULL, &u) || u < 1)
			return fail(err, errlen, "max_markers_per_step=: an integer in [1, 1000000000] (BEGIN markers recorded per step)");
		c->max_markers_per_step = u;
	} else if (KEY("min_phase_ms")) {
		if (parse_uint(v, 3600000, &u))
			return fail(err, errlen, "min_phase_ms=: an integer in [0, 3600000] (shorter phases are shown to users without energy)");
		c->min_phase_ms = (unsigned)u;
	} else if (KEY("job_cache_hours") || KEY("submit_cache_hours")) {
		/* submit_cache_hours: the key's name before 0.2 */
		if (parse_uint(v, 8760, &u))
			return fail(err, errlen, "%.*s=: an integer in [0, 8760] (0 = no job cache)",
				    (int)kl, a);
		c->job_cache_hours = (unsigned)u;
	} else if (KEY("gpu_io_mhz")) {
		if (parse_uint(v, 100000, &u))
			return fail(err, errlen, "gpu_io_mhz=: an integer in [0, 100000] (MHz; 0 = +gpu-io not allowed)");
		c->gpu_io_mhz = (unsigned)u;
	} else if (KEY("uncore_io_mhz")) {
		if (parse_uint(v, 100000, &u))
			return fail(err, errlen, "uncore_io_mhz=: an integer in [0, 100000] (MHz; 0 = +uncore-io not allowed)");
		c->uncore_io_mhz = (unsigned)u;
	} else {
		return 1;
	}
	return 0;
}

/* After every key: tuned allowed only with its file, the default policy
 * among the allowed ones. 0 or -EINVAL (err). */
static int conf_finish(struct js_conf *c, const char *default_pol, bool policies_given, char *err,
		       size_t errlen)
{
	/* tuned is allowed by default only when there is a tuned= file; an
	 * explicit policies=...,tuned needs one too. */
	if (c->tuned[0] && !policies_given)
		c->policies_mask |= 1u << JS_POL_TUNED;
	if (!c->tuned[0] && (c->policies_mask & (1u << JS_POL_TUNED)))
		return fail(err, errlen, "policies=: tuned needs tuned=FILE (the policy file written by `joulestep model dvfs --save`)");
	if (c->autofile[0] && !policies_given)
		c->policies_mask |= 1u << JS_POL_AUTO;
	if (!c->autofile[0] && (c->policies_mask & (1u << JS_POL_AUTO)))
		return fail(err, errlen, "policies=: auto needs auto=FILE (the file written by `joulestep policy update --save`)");
	if (default_pol) {
		struct js_policy p;
		char e2[200];
		if (js_policy_parse(default_pol, &p, e2, sizeof(e2)))
			return fail(err, errlen, "default_policy=: %s", e2);
		if (p.type == JS_POL_AUTO && !(c->policies_mask & (1u << JS_POL_AUTO)))
			return fail(err, errlen, "default_policy=: auto needs auto=FILE and auto among policies=");
		if (p.type != JS_POL_MONITOR && p.type != JS_POL_IO_DVFS && p.type != JS_POL_CKPT_DVFS &&
		    p.type != JS_POL_AUTO)
			return fail(err, errlen, "default_policy=: one of monitor, io-dvfs, ckpt-dvfs, auto (with auto=FILE)");
		c->default_policy = p.type;
	}
	if (!(c->policies_mask & (1u << c->default_policy)))
		return fail(err, errlen, "default_policy=%s is not in policies=", js_pol_name(c->default_policy));
	return 0;
}

int js_conf_parse(int ac, char **av, struct js_conf *c, char *err, size_t errlen)
{
	js_conf_defaults(c);
	const char *default_pol = NULL;
	bool policies_given = false;
	for (int i = 0; i < ac; i++) {
		const char *a = av[i];
		const char *eq = strchr(a, '=');
		if (!eq || eq == a)
			return fail(err, errlen, "argument '%s' is not key=value", a);
		size_t kl = (size_t)(eq - a);
		const char *v = eq + 1;
		if (KEY("policies")) {
			if (parse_policy_list(v, &c->policies_mask, err, errlen))
				return -EINVAL;
			policies_given = true;
		} else if (KEY("default_policy")) {
			default_pol = v;
		} else {
			int rc = conf_path(c, a, kl, v, err, errlen);
			if (rc == 1)
				rc = conf_source(c, a, kl, v, err, errlen);
			if (rc == 1)
				rc = conf_number(c, a, kl, v, err, errlen);
			if (rc < 0)
				return rc;
			if (rc == 1)
				return fail(err, errlen, "unknown key '%.*s' (allowed: spool state sysfs procfs socket_dir cluster policies default_policy min_ratio sample_ms max_phases max_depth max_markers_per_s max_markers_per_step min_phase_ms backend node_energy job_cache_hours tuned auto hooks_dir threads_per_core uncore_io_mhz gpu_backend gpu_io_mhz gpu_lib)",
					    (int)(kl > 40 ? 40 : kl), a);
		}
	}
	return conf_finish(c, default_pol, policies_given, err, errlen);
}
#undef KEY

#define GPU_IO_TERM "+gpu-io"
#define UNCORE_IO_TERM "+uncore-io"

static int parse_cpu_policy(const char *s, struct js_policy *p, char *err, size_t errlen);

/* Strip a trailing term from buf (length *n); true when it was there. */
static bool strip_term(char *buf, size_t *n, const char *term)
{
	size_t tl = strlen(term);
	if (*n <= tl || strcmp(buf + *n - tl, term))
		return false;
	*n -= tl;
	buf[*n] = 0;
	return true;
}

/* POLICY[+gpu-io][+uncore-io], each term at most once, in any order. */
int js_policy_parse(const char *s, struct js_policy *p, char *err, size_t errlen)
{
	size_t n = s ? strlen(s) : 0;
	char *buf = strdup(s ? s : "");
	if (!buf)
		return fail(err, errlen, "out of memory");
	bool gpu = false, unc = false;
	for (bool more = true; more;) {
		more = false;
		if (!gpu && strip_term(buf, &n, GPU_IO_TERM))
			more = gpu = true;
		if (!unc && strip_term(buf, &n, UNCORE_IO_TERM))
			more = unc = true;
	}
	int rc = parse_cpu_policy(buf, p, err, errlen);
	free(buf);
	p->gpu_io = rc == 0 && gpu;
	p->uncore_io = rc == 0 && unc;
	return rc;
}

static int parse_cpu_policy(const char *s, struct js_policy *p, char *err, size_t errlen)
{
	static const char allowed[] =
		"allowed: monitor, io-dvfs, ckpt-dvfs, fixed:R, phase:KIND=R[,KIND=R...] with R a ratio of fmax in (0, 1], tuned (the admin's tuned= file) or auto (the admin's auto= file, with --energy-tag=app=NAME); any of them +gpu-io and/or +uncore-io where the admin allows it";
	memset(p, 0, sizeof(*p));
	if (!s || !*s)
		return fail(err, errlen, "empty policy (%s)", allowed);
	if (!strcmp(s, "monitor")) {
		p->type = JS_POL_MONITOR;
	} else if (!strcmp(s, "io-dvfs")) {
		p->type = JS_POL_IO_DVFS;
	} else if (!strcmp(s, "ckpt-dvfs")) {
		p->type = JS_POL_CKPT_DVFS;
	} else if (!strcmp(s, "tuned")) {
		p->type = JS_POL_TUNED;
	} else if (!strcmp(s, "auto")) {
		p->type = JS_POL_AUTO;
	} else if (!strncmp(s, "fixed:", 6)) {
		p->type = JS_POL_FIXED;
		if (parse_ratio(s + 6, &p->fixed_ratio))
			return fail(err, errlen, "fixed:R: R must be a number in (0, 1], got '%.20s'", s + 6);
	} else if (!strncmp(s, "phase:", 6)) {
		p->type = JS_POL_PHASE;
		char buf[512];
		if (strlen(s + 6) >= sizeof(buf))
			return fail(err, errlen, "phase: map too long");
		snprintf(buf, sizeof(buf), "%s", s + 6);
		char *save = NULL;
		for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
			char *eq = strchr(t, '=');
			if (!eq)
				return fail(err, errlen, "phase: '%.40s' is not KIND=R", t);
			*eq = 0;
			if (!js_kind_valid(t))
				return fail(err, errlen, "phase: kind '%.40s' invalid (allowed [a-z0-9_-]{1,32})", t);
			double r;
			if (parse_ratio(eq + 1, &r))
				return fail(err, errlen, "phase: %s=R: R must be a number in (0, 1]", t);
			size_t i;
			for (i = 0; i < p->nmap; i++)
				if (!strcmp(p->map[i].kind, t))
					break;
			if (i == p->nmap) {
				if (p->nmap == JS_MAX_MAP)
					return fail(err, errlen, "phase: at most %d kinds", JS_MAX_MAP);
				p->nmap++;
			}
			scopy(p->map[i].kind, sizeof(p->map[i].kind), t);
			p->map[i].ratio = r;
		}
		if (p->nmap == 0)
			return fail(err, errlen, "phase: needs at least one KIND=R");
	} else {
		return fail(err, errlen, "unknown policy '%.40s' (%s)", s, allowed);
	}
	return 0;
}

void js_policy_allowed(const struct js_conf *c, char *buf, size_t len)
{
	buf[0] = 0;
	for (int i = 0; i < JS_POL_COUNT; i++)
		if (c->policies_mask & (1u << i)) {
			size_t n = strlen(buf);
			snprintf(buf + n, len - n, "%s%s%s", n ? ", " : "", pol_names[i],
				 i == JS_POL_FIXED ? ":R" : i == JS_POL_PHASE ? ":KIND=R,..." : "");
		}
}

int js_policy_check(const struct js_policy *p, const struct js_conf *c, char *err, size_t errlen)
{
	char al[160];
	js_policy_allowed(c, al, sizeof(al));
	if (p->type == JS_POL_TUNED && !c->tuned[0])
		return fail(err, errlen, "tuned needs the admin's tuned= file, and this cluster has none");
	if (p->type == JS_POL_AUTO && !c->autofile[0])
		return fail(err, errlen, "auto needs the admin's auto= file, and this cluster has none");
	if (!(c->policies_mask & (1u << p->type)))
		return fail(err, errlen, "policy %s is not allowed on this cluster (allowed: %s)",
			    js_pol_name(p->type), al);
	if (p->gpu_io && !c->gpu_io_mhz)
		return fail(err, errlen, "+gpu-io is not allowed on this cluster (the admin sets gpu_io_mhz= in plugstack.conf)");
	if (p->uncore_io && !c->uncore_io_mhz)
		return fail(err, errlen, "+uncore-io is not allowed on this cluster (the admin sets uncore_io_mhz= in plugstack.conf)");
	if (p->type == JS_POL_FIXED && p->fixed_ratio < c->min_ratio)
		return fail(err, errlen, "fixed:%g is below the minimum ratio %g allowed on this cluster (R in [%g, 1])",
			    p->fixed_ratio, c->min_ratio, c->min_ratio);
	for (size_t i = 0; i < p->nmap; i++)
		if (p->map[i].ratio < c->min_ratio)
			return fail(err, errlen, "phase:%s=%g is below the minimum ratio %g allowed on this cluster (R in [%g, 1])",
				    p->map[i].kind, p->map[i].ratio, c->min_ratio, c->min_ratio);
	return 0;
}

int js_policy_enforce(struct js_policy *p, const struct js_conf *c, char *err, size_t errlen)
{
	int n = 0;
	if (err && errlen)
		err[0] = 0;
	if (!(c->policies_mask & (1u << p->type))) {
		fail(err, errlen, "policy %s not allowed; using %s", js_pol_name(p->type),
		     js_pol_name(c->default_policy));
		memset(p, 0, sizeof(*p));
		p->type = c->default_policy;
		return 1;
	}
	if (p->gpu_io && !c->gpu_io_mhz) {
		fail(err, errlen, "+gpu-io not allowed (no gpu_io_mhz=); GPU clocks left alone");
		p->gpu_io = false;
		n++;
	}
	if (p->uncore_io && !c->uncore_io_mhz) {
		fail(err, errlen, "+uncore-io not allowed (no uncore_io_mhz=); uncore clock left alone");
		p->uncore_io = false;
		n++;
	}
	if (p->type == JS_POL_FIXED && p->fixed_ratio < c->min_ratio) {
		fail(err, errlen, "fixed:%g clamped to min_ratio %g", p->fixed_ratio, c->min_ratio);
		p->fixed_ratio = c->min_ratio;
		n++;
	}
	if (p->type == JS_POL_FIXED && p->fixed_ratio > 1.0) {
		p->fixed_ratio = 1.0;
		n++;
	}
	for (size_t i = 0; i < p->nmap; i++) {
		if (p->map[i].ratio < c->min_ratio) {
			fail(err, errlen, "%s:%s=%g clamped to min_ratio %g", js_pol_name(p->type),
			     p->map[i].kind, p->map[i].ratio, c->min_ratio);
			p->map[i].ratio = c->min_ratio;
			n++;
		}
		if (p->map[i].ratio > 1.0) {
			p->map[i].ratio = 1.0;
			n++;
		}
	}
	return n;
}

int js_policy_format(const struct js_policy *p, char *buf, size_t len)
{
	int n;
	if (p->type == JS_POL_FIXED) {
		n = snprintf(buf, len, "fixed:%g", p->fixed_ratio);
	} else if (p->type == JS_POL_PHASE) {
		n = snprintf(buf, len, "phase:");
		for (size_t i = 0; i < p->nmap && n >= 0 && (size_t)n < len; i++)
			n += snprintf(buf + n, len - (size_t)n, "%s%s=%g", i ? "," : "",
				      p->map[i].kind, p->map[i].ratio);
	} else {
		n = snprintf(buf, len, "%s", js_pol_name(p->type));
	}
	if (p->gpu_io && n >= 0 && (size_t)n < len)
		n += snprintf(buf + n, len - (size_t)n, GPU_IO_TERM);
	if (p->uncore_io && n >= 0 && (size_t)n < len)
		n += snprintf(buf + n, len - (size_t)n, UNCORE_IO_TERM);
	return (n < 0 || (size_t)n >= len) ? -ENOSPC : 0;
}

double js_policy_kind_ratio(const struct js_policy *p, const struct js_conf *c, const char *kind)
{
	switch (p->type) {
	case JS_POL_IO_DVFS:
		if (!strcmp(kind, "compress"))
			return 0.875 < c->min_ratio ? c->min_ratio : 0.875;
		if (!strcmp(kind, "write"))
			return 0.85 < c->min_ratio ? c->min_ratio : 0.85;
		return JS_RATIO_INHERIT;
	case JS_POL_CKPT_DVFS:
		if (!strcmp(kind, "checkpoint"))
			return c->min_ratio; /* lowest allowed; clamped up to fmin later */
		if (!strcmp(kind, "flush"))
			return JS_RATIO_BASE; /* never throttle the asynchronous part */
		return JS_RATIO_INHERIT;
	case JS_POL_PHASE:
	case JS_POL_TUNED: /* the same map, read from the tuned= file */
	case JS_POL_AUTO:  /* the same map, the app's from the auto= file */
		for (size_t i = 0; i < p->nmap; i++)
			if (!strcmp(p->map[i].kind, kind))
				return p->map[i].ratio;
		return JS_RATIO_INHERIT;
	default:
		return JS_RATIO_INHERIT;
	}
}

double js_policy_base_ratio(const struct js_policy *p)
{
	return p->type == JS_POL_FIXED ? p->fixed_ratio : 1.0;
}

int js_tags_parse(const char *s, struct js_tags *tags, char *err, size_t errlen)
{
	static const char allowed[] =
		"allowed: KEY=VALUE[,KEY=VALUE...], key 1-32 and value 1-64 characters of [A-Za-z0-9_.:+-], at most 16 tags";
	char buf[JS_MAX_TAGS * (JS_TAG_KEY_LEN + JS_TAG_VAL_LEN + 2) + 1];
	if (!s || !*s)
		return fail(err, errlen, "empty tag list (%s)", allowed);
	if (strlen(s) >= sizeof(buf))
		return fail(err, errlen, "tag list too long (%s)", allowed);
	snprintf(buf, sizeof(buf), "%s", s);
	struct js_tags out = *tags;
	char *p = buf;
	for (;;) {
		char *comma = strchr(p, ',');
		if (comma)
			*comma = 0;
		char *eq = strchr(p, '=');
		if (!eq)
			return fail(err, errlen, "tag '%.40s' is not KEY=VALUE (%s)", p, allowed);
		*eq = 0;
		if (!tag_key_ok(p))
			return fail(err, errlen, "tag key '%.40s' invalid (%s)", p, allowed);
		if (!tag_val_ok(eq + 1))
			return fail(err, errlen, "tag %s: value '%.70s' invalid (%s)", p, eq + 1, allowed);
		size_t i;
		for (i = 0; i < out.n; i++)
			if (!strcmp(out.t[i].key, p))
				break;
		if (i == out.n) {
			if (out.n == JS_MAX_TAGS)
				return fail(err, errlen, "more than %d tags (%s)", JS_MAX_TAGS, allowed);
			out.n++;
		}
		scopy(out.t[i].key, sizeof(out.t[i].key), p);
		scopy(out.t[i].val, sizeof(out.t[i].val), eq + 1);
		if (!comma)
			break;
		p = comma + 1;
	}
	*tags = out;
	return 0;
}

/* ---- protocol ------------------------------------------------------------ */

/* The request and, for BEGIN, kind and label: the index of the first
 * key=value field, or -errno with *why. */
static int msg_op(char **tok, int nt, struct js_msg *m, const char **why)
{
	if (!strcmp(tok[1], "END")) {
		m->op = JS_OP_END;
		return 2;
	}
	if (!strcmp(tok[1], "PING")) {
		m->op = JS_OP_PING;
		return 2;
	}
	if (strcmp(tok[1], "BEGIN")) {
		*why = "unknown request (BEGIN, END or PING)";
		return -EINVAL;
	}
	m->op = JS_OP_BEGIN;
	if (nt < 3 || !js_kind_valid(tok[2])) {
		*why = "BEGIN needs a kind of [a-z0-9_-]{1,32}";
		return -EINVAL;
	}
	scopy(m->kind, sizeof(m->kind), tok[2]);
	if (nt <= 3 || strchr(tok[3], '='))
		return 3;
	if (strcmp(tok[3], "-")) {
		if (!js_label_valid(tok[3])) {
			*why = "label must be [A-Za-z0-9_.:+/-]{1,64} or -";
			return -EINVAL;
		}
		scopy(m->label, sizeof(m->label), tok[3]);
	}
	return 4;
}

/* One key=value field (tok is changed): 0 or an errno with *why. */
static int msg_field(char *tok, struct js_msg *m, const char **why)
{
	char *eq = strchr(tok, '=');
	if (!eq) {
		*why = "unexpected field (expected key=value)";
		return EINVAL;
	}
	*eq = 0;
	const char *k = tok, *v = eq + 1;
	unsigned long long u;
	if (!strcmp(k, "rank")) {
		if (parse_uint(v, 0x7fffffff, &u)) {
			*why = "rank must be an integer in [0, 2^31)";
			return EINVAL;
		}
		m->rank = (int)u;
	} else if (!strcmp(k, "t")) {
		if (parse_uint(v, UINT64_MAX, &u)) {
			*why = "t must be CLOCK_MONOTONIC nanoseconds";
			return EINVAL;
		}
		m->t_ns = u;
	} else if (!strcmp(k, "bytes") && m->op == JS_OP_END) {
		if (strcmp(v, "-")) {
			if (parse_uint(v, (unsigned long long)INT64_MAX, &u)) {
				*why = "bytes must be a non-negative integer or -";
				return EINVAL;
			}
			m->bytes = (long long)u;
		}
	} else {
		*why = "unknown field";
		return EINVAL;
	}
	return 0;
}

int js_msg_parse(const char *buf, size_t len, struct js_msg *m, const char **why)
{
	char tmp[JS_MSG_MAX + 1];
	memset(m, 0, sizeof(*m));
	m->bytes = -1;
	m->rank = -1;
	if (len > JS_MSG_MAX) {
		*why = "message longer than 256 bytes";
		return EMSGSIZE;
	}
	memcpy(tmp, buf, len);
	tmp[len] = 0;
	if (memchr(buf, 0, len)) {
		*why = "NUL byte in message";
		return EINVAL;
	}
	while (len && (tmp[len - 1] == '\n' || tmp[len - 1] == '\r'))
		tmp[--len] = 0;
	char *tok[12];
	int nt = 0;
	char *save = NULL;
	for (char *t = strtok_r(tmp, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
		if (nt == 12) {
			*why = "too many fields";
			return EINVAL;
		}
		tok[nt++] = t;
	}
	/* sync is the last field when present: note it first so even a
	 * malformed sync request is answered. */
	if (nt && !strcmp(tok[nt - 1], "sync")) {
		m->sync = true;
		nt--;
	}
	if (nt < 2) {
		*why = "expected 'JS1 BEGIN|END|PING ...'";
		return EINVAL;
	}
	if (strcmp(tok[0], "JS1")) {
		*why = "unsupported protocol version (this server speaks JS1)";
		return EPROTO;
	}
	int i = msg_op(tok, nt, m, why);
	if (i < 0)
		return -i;
	for (; i < nt; i++) {
		int rc = msg_field(tok[i], m, why);
		if (rc)
			return rc;
	}
	return 0;
}

void js_bucket_init(struct js_bucket *b, unsigned rate_per_s, uint64_t now_ns)
{
	b->capacity = rate_per_s;
	b->tokens = rate_per_s;
	b->per_ns = rate_per_s / 1e9;
	b->last_ns = now_ns;
}

bool js_bucket_take(struct js_bucket *b, uint64_t now_ns)
{
	if (now_ns > b->last_ns) {
		b->tokens += (double)(now_ns - b->last_ns) * b->per_ns;
		if (b->tokens > b->capacity)
			b->tokens = b->capacity;
		b->last_ns = now_ns;
	}
	if (b->tokens >= 1.0) {
		b->tokens -= 1.0;
		return true;
	}
	return false;
}
