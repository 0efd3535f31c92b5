/* joulestep SPANK plugin: --energy-hooks, pure logic. See js_hooks.h. */
#include "js_hooks.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static const char *const names[JS_HOOK_COUNT] = {"mpiio", "veloc"};
static const char *const libs[JS_HOOK_COUNT] = {"libjoulestep-mpiio.so", "libjoulestep-veloc.so"};

const char *js_hook_name(enum js_hook h)
{
	return h < JS_HOOK_COUNT ? names[h] : "?";
}

const char *js_hook_lib(enum js_hook h)
{
	return h < JS_HOOK_COUNT ? libs[h] : "?";
}

int js_hooks_parse(const char *s, unsigned *mask, char *err, size_t errlen)
{
	char buf[256];
	*mask = 0;
	if (!s || !*s || !strcmp(s, "none"))
		return 0;
	if (strlen(s) >= sizeof(buf)) {
		snprintf(err, errlen, "value too long (allowed: %s)", JS_HOOKS_ALLOWED);
		return -EINVAL;
	}
	snprintf(buf, sizeof(buf), "%s", s);
	int rc = 0;
	char *p = buf;
	for (;;) {
		char *comma = strchr(p, ',');
		if (comma)
			*comma = 0;
		int found = -1;
		for (int i = 0; i < JS_HOOK_COUNT; i++)
			if (!strcmp(p, names[i]))
				found = i;
		if (found >= 0) {
			*mask |= 1u << found;
		} else if (!rc) { /* report the first bad name */
			rc = -EINVAL;
			if (!strcmp(p, "none"))
				snprintf(err, errlen, "'none' cannot be combined with hook names (allowed: %s)",
					 JS_HOOKS_ALLOWED);
			else
				snprintf(err, errlen, "unknown hook '%.40s' (allowed: %s)", p,
					 JS_HOOKS_ALLOWED);
		}
		if (!comma)
			break;
		p = comma + 1;
	}
	return rc;
}

void js_hooks_format(unsigned mask, char *buf, size_t len)
{
	size_t o = 0;
	if (len)
		buf[0] = 0;
	for (int i = 0; i < JS_HOOK_COUNT; i++) {
		if (!(mask & (1u << i)))
			continue;
		int n = snprintf(buf + o, o < len ? len - o : 0, "%s%s", o ? "," : "", names[i]);
		if (n < 0 || o + (size_t)n >= len) { /* whole names only */
			if (o < len)
				buf[o] = 0;
			return;
		}
		o += (size_t)n;
	}
}

static bool in_list(const char *p, size_t n, const char *const *list, size_t nlist)
{
	for (size_t i = 0; i < nlist; i++)
		if (list[i] && strlen(list[i]) == n && !strncmp(list[i], p, n))
			return true;
	return false;
}

static int append(char *out, size_t len, size_t *o, const char *p, size_t n)
{
	size_t need = n + (*o ? 1 : 0);
	if (*o + need >= len)
		return -ENAMETOOLONG;
	if (*o)
		out[(*o)++] = ':';
	memcpy(out + *o, p, n);
	*o += n;
	out[*o] = 0;
	return 0;
}

int js_hooks_preload(const char *old, const char *const *add, size_t nadd,
		     const char *const *drop, size_t ndrop, char *out, size_t len)
{
	size_t o = 0;
	if (!len)
		return -ENAMETOOLONG;
	out[0] = 0;
	for (size_t i = 0; i < nadd; i++)
		if (append(out, len, &o, add[i], strlen(add[i])))
			goto toolong;
	for (const char *p = old ? old : ""; *p;) {
		size_t n = strcspn(p, ": ");
		if (n && !in_list(p, n, drop, ndrop) && !in_list(p, n, add, nadd) &&
		    append(out, len, &o, p, n))
			goto toolong;
		p += n;
		if (*p)
			p++;
	}
	return 0;
toolong:
	out[0] = 0;
	return -ENAMETOOLONG;
}

int js_hooks_default_dir(const char *plugin_path, char *out, size_t len)
{
	if (!plugin_path || plugin_path[0] != '/')
		return -EINVAL;
	const char *slash = strrchr(plugin_path, '/'); /* the plugin's directory ends here */
	if (slash == plugin_path)
		return -EINVAL;
	const char *up = slash - 1; /* its parent ends at the previous '/' */
	while (up > plugin_path && *up != '/')
		up--;
	int n = snprintf(out, len, "%.*s/joulestep", (int)(up - plugin_path), plugin_path);
	if (n < 0 || (size_t)n >= len) {
		if (len)
			out[0] = 0;
		return -ENAMETOOLONG;
	}
	return 0;
}
