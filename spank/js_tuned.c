/* joulestep SPANK plugin: the `tuned` policy file (js_tuned.h). */
#include "js_tuned.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

static int fail(int rc, char *err, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int fail(int rc, char *err, size_t len, const char *fmt, ...)
{
	if (err && len) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, len, fmt, ap);
		va_end(ap);
	}
	return rc;
}

static int parse_root(json_t *root, struct js_policy *p, char *nm, size_t nmlen, char *err,
		      size_t errlen)
{
	static const char allowed[] =
		"{\"format\": \"joulestep-policy\", \"version\": 1, \"node_model\": S|null, "
		"\"phases\": {KIND: {\"ratio\": R}, ...}} with KIND [a-z0-9_-]{1,32}, R in (0, 1], "
		"at most 16 kinds";
	if (!json_is_object(root))
		return fail(-EINVAL, err, errlen, "not a JSON object (%s)", allowed);
	const char *fmt = json_string_value(json_object_get(root, "format"));
	if (!fmt || strcmp(fmt, "joulestep-policy"))
		return fail(-EINVAL, err, errlen, "\"format\" must be \"joulestep-policy\" (%s)", allowed);
	json_t *ver = json_object_get(root, "version");
	if (!json_is_integer(ver) || json_integer_value(ver) != 1)
		return fail(-EINVAL, err, errlen, "\"version\" must be 1 (the version this plugin reads)");
	json_t *model = json_object_get(root, "node_model");
	const char *m = "";
	if (model && !json_is_null(model)) {
		m = json_string_value(model);
		if (!m || strlen(m) >= nmlen)
			return fail(-EINVAL, err, errlen, "\"node_model\" must be null or a string of at most %zu characters",
				    nmlen - 1);
	}
	json_t *phases = json_object_get(root, "phases");
	if (!json_is_object(phases) || json_object_size(phases) == 0)
		return fail(-EINVAL, err, errlen, "\"phases\" must be a non-empty object (%s)", allowed);
	if (json_object_size(phases) > JS_MAX_MAP)
		return fail(-EINVAL, err, errlen, "%zu phase kinds; at most %d allowed",
			    json_object_size(phases), JS_MAX_MAP);
	struct js_policy out;
	memset(&out, 0, sizeof(out));
	out.type = JS_POL_TUNED;
	const char *kind;
	json_t *v;
	json_object_foreach(phases, kind, v) {
		if (!js_kind_valid(kind))
			return fail(-EINVAL, err, errlen, "phase kind '%.40s' invalid (allowed [a-z0-9_-]{1,32})", kind);
		json_t *r = json_object_get(v, "ratio");
		double ratio = json_number_value(r);
		if (!json_is_number(r) || !isfinite(ratio) || ratio <= 0.0 || ratio > 1.0)
			return fail(-EINVAL, err, errlen, "phases.%s.ratio must be a number in (0, 1]", kind);
		snprintf(out.map[out.nmap].kind, sizeof(out.map[out.nmap].kind), "%s", kind);
		out.map[out.nmap++].ratio = ratio;
	}
	*p = out;
	snprintf(nm, nmlen, "%s", m);
	return 0;
}

int js_tuned_parse(const char *text, size_t len, struct js_policy *p, char *node_model,
		   size_t nmlen, char *err, size_t errlen)
{
	json_error_t je;
	json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return fail(-EINVAL, err, errlen, "not valid JSON: line %d: %s", je.line, je.text);
	int rc = parse_root(root, p, node_model, nmlen, err, errlen);
	json_decref(root);
	return rc;
}

int js_rootfile_read(const char *path, size_t max_bytes, char **text, size_t *len, char *err,
		     size_t errlen)
{
	*text = NULL;
	*len = 0;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		int e = errno;
		if (e == ELOOP)
			return fail(-ELOOP, err, errlen, "is a symbolic link (refused: name the file itself)");
		return fail(-e, err, errlen, "cannot open: %s", strerror(e));
	}
	struct stat st;
	int rc = 0;
	char *buf = NULL;
	if (fstat(fd, &st) < 0) {
		rc = fail(-errno, err, errlen, "fstat: %s", strerror(errno));
	} else if (!S_ISREG(st.st_mode)) {
		rc = fail(-EINVAL, err, errlen, "not a regular file");
	} else if (st.st_uid != 0) {
		rc = fail(-EPERM, err, errlen, "owned by uid %u; must be owned by root",
			  (unsigned)st.st_uid);
	} else if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		rc = fail(-EPERM, err, errlen, "mode %04o is group- or world-writable; must be writable by root only",
			  (unsigned)(st.st_mode & 07777));
	} else if ((size_t)st.st_size > max_bytes) {
		rc = fail(-EFBIG, err, errlen, "larger than %zu bytes", max_bytes);
	} else if (!(buf = malloc((size_t)st.st_size + 1))) {
		rc = fail(-ENOMEM, err, errlen, "out of memory");
	}
	size_t n = 0;
	while (!rc && n <= (size_t)st.st_size) { /* one byte more: notice growth */
		ssize_t r = read(fd, buf + n, (size_t)st.st_size + 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			rc = fail(-errno, err, errlen, "read: %s", strerror(errno));
		else if (r == 0)
			break;
		else
			n += (size_t)r;
	}
	if (!rc && n > (size_t)st.st_size)
		rc = fail(-EAGAIN, err, errlen, "changed while being read");
	close(fd);
	if (rc) {
		free(buf);
		return rc;
	}
	*text = buf;
	*len = n;
	return 0;
}

int js_tuned_load(const char *path, struct js_policy *p, char *node_model, size_t nmlen,
		  char *err, size_t errlen)
{
	char *buf;
	size_t n;
	int rc = js_rootfile_read(path, JS_TUNED_MAX_BYTES, &buf, &n, err, errlen);
	if (rc)
		return rc;
	rc = js_tuned_parse(buf, n, p, node_model, nmlen, err, errlen);
	free(buf);
	return rc;
}
