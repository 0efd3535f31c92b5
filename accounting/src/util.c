/* Small file and formatting helpers. Every fd is O_CLOEXEC. */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "js_internal.h"

void js_fmt(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!buf || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, len, fmt, ap);
	va_end(ap);
}

int js_path(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, len, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -EINVAL;
	if ((size_t)n >= len)
		return -ENAMETOOLONG;
	return 0;
}

static ssize_t read_fd(int fd, char *buf, size_t len)
{
	ssize_t n;

	if (len < 2)
		return -EINVAL;
	do {
		n = pread(fd, buf, len - 1, 0);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	if (n > 0 && buf[n - 1] == '\n')
		buf[--n] = '\0';
	return n;
}

ssize_t js_read_fileat(int dirfd, const char *name, char *buf, size_t len)
{
	ssize_t n;
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

	if (fd < 0)
		return -errno;
	n = read_fd(fd, buf, len);
	close(fd);
	return n;
}

ssize_t js_read_file(const char *path, char *buf, size_t len)
{
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	n = read_fd(fd, buf, len);
	close(fd);
	return n;
}

bool js_boot_id_ok(const char *b)
{
	size_t i, n = strlen(b);

	if (n != JS_BOOT_ID_LEN - 1)
		return false;
	for (i = 0; i < n; i++)
		if (!((b[i] >= '0' && b[i] <= '9') || (b[i] >= 'a' && b[i] <= 'f') || b[i] == '-'))
			return false;
	return true;
}

int js_boot_id(char *buf, size_t len)
{
	ssize_t n = js_read_file("/proc/sys/kernel/random/boot_id", buf, len);
	int rc = n < 0 ? (int)n : js_boot_id_ok(buf) ? 0 : -EINVAL;

	if (rc < 0 && len)
		buf[0] = '\0';
	return rc;
}

int js_parse_u64(const char *buf, size_t len, uint64_t *out)
{
	uint64_t v = 0;
	size_t i = 0;

	while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == ' ' ||
			   buf[len - 1] == '\t' || buf[len - 1] == '\0'))
		len--;
	if (len == 0)
		return -EINVAL;
	for (; i < len; i++) {
		unsigned d;

		if (buf[i] < '0' || buf[i] > '9')
			return -EINVAL;
		d = (unsigned)(buf[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

int js_read_u64_file(const char *path, uint64_t *out)
{
	char buf[64];
	ssize_t n = js_read_file(path, buf, sizeof(buf));

	if (n < 0)
		return (int)n;
	return js_parse_u64(buf, (size_t)n, out);
}

int js_write_file(const char *path, const char *s)
{
	size_t len = strlen(s);
	ssize_t n;
	int rc = 0;
	/* No O_TRUNC: on a tree of regular files (a fake or test sysfs) it leaves
	 * the file empty until write() runs, and a concurrent reader sees "". The
	 * value is written in place and a longer old value cut off after; sysfs
	 * ignores the offset, and is never truncated. */
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	struct statfs fs;
	struct stat st;

	if (fd < 0)
		return -errno;
	do {
		n = pwrite(fd, s, len, 0);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		rc = -errno;
	else if ((size_t)n != len)
		rc = -EIO;
	else if (fstatfs(fd, &fs) == 0 && fs.f_type != SYSFS_MAGIC && fstat(fd, &st) == 0 &&
		 S_ISREG(st.st_mode) && st.st_size > (off_t)len && ftruncate(fd, (off_t)len) < 0)
		rc = -errno;
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	return rc;
}

void js_open_why(char *why, size_t whylen, int rc, const char *what)
{
	if (rc == -EACCES || rc == -EPERM)
		js_fmt(why, whylen, "no permission: energy counters are root-only (%s)", what);
	else
		js_fmt(why, whylen, "unavailable: cannot open %s: %s", what, strerror(-rc));
}
