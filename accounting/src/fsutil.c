/* Directories root writes into, atomic writes, directory loops (fsutil.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsutil.h"

#define WALK_MAX 4096

int js_check_dirfd(int fd)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	if ((st.st_uid != 0 && st.st_uid != geteuid()) || (st.st_mode & 022))
		return -EPERM;
	return 0;
}

/* One step of the walk: fd's component c, created when missing and asked. */
static int walk_one(int fd, const char *c, mode_t mode, bool create)
{
	int nfd = openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (nfd < 0 && errno == ENOENT && create) {
		if (mkdirat(fd, c, mode) < 0 && errno != EEXIST)
			return -errno;
		nfd = openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (nfd >= 0 && fchmod(nfd, mode) < 0) {
			int e = -errno;

			close(nfd);
			return e;
		}
	}
	if (nfd < 0)
		return errno == ELOOP || errno == ENOTDIR ? -EPERM : -errno;
	return nfd;
}

int js_root_dirfd(const char *path, mode_t mode, bool create)
{
	char buf[WALK_MAX], *save = NULL;
	int fd, rc;

	if (!path || path[0] != '/' || strlen(path) >= sizeof(buf))
		return -EINVAL;
	fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	snprintf(buf, sizeof(buf), "%s", path);
	for (char *c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		int nfd = walk_one(fd, c, mode, create);

		close(fd);
		if (nfd < 0)
			return nfd;
		fd = nfd;
		if ((rc = js_check_dirfd(fd)) < 0) {
			close(fd);
			return rc;
		}
	}
	return fd;
}

int js_root_dir(const char *path, mode_t mode)
{
	int fd = js_root_dirfd(path, mode, true);

	if (fd < 0)
		return fd;
	close(fd);
	return 0;
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

int js_write_atomic(int dfd, const char *name, const char *data, size_t len, mode_t mode,
		    uid_t uid, gid_t gid, int flags)
{
	char tmp[320];
	int rc = 0, fd;

	if (snprintf(tmp, sizeof(tmp), "%s%s.tmp.%d", flags & JS_ATOMIC_HIDDEN_TMP ? "." : "", name,
		     (int)getpid()) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	/* a temporary file of this pid can only be left by a killed writer */
	(void)unlinkat(dfd, tmp, 0);
	fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	if (fd < 0)
		return -errno;
	/* root:root (journals, the job cache) even if the process's egid is a
	 * user's at this moment; the job's user for its summary */
	if (uid != (uid_t)-1 && fchown(fd, uid, gid) < 0)
		rc = -errno;
	if (!rc)
		rc = write_all(fd, data, len);
	if (!rc && (flags & JS_ATOMIC_FSYNC) && fsync(fd) < 0)
		rc = -errno;
	if (close(fd) < 0 && !rc)
		rc = -errno;
	if (!rc && (flags & JS_ATOMIC_NO_REPLACE)) {
		rc = linkat(dfd, tmp, dfd, name, 0) < 0 ? -errno : 0; /* -EEXIST: kept */
		(void)unlinkat(dfd, tmp, 0);
		return rc;
	}
	if (!rc && renameat(dfd, tmp, dfd, name) < 0)
		rc = -errno;
	if (rc)
		(void)unlinkat(dfd, tmp, 0);
	return rc;
}

int js_write_atomicat(int dfd, const char *name, const char *data, size_t len, mode_t mode,
		      bool chown_root)
{
	return js_write_atomic(dfd, name, data, len, mode, chown_root ? 0 : (uid_t)-1,
			       chown_root ? 0 : (gid_t)-1, JS_ATOMIC_FSYNC);
}

int js_dir_foreach(int dfd, int (*fn)(int dfd, const char *name, void *arg), void *arg)
{
	int fd = fcntl(dfd, F_DUPFD_CLOEXEC, 0), rc = 0;
	struct dirent *de;
	DIR *d;

	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		rc = -errno;
		close(fd);
		return rc;
	}
	rewinddir(d); /* the duplicate shares dfd's offset: from the start */
	while (rc >= 0 && (de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			rc = fn(dfd, de->d_name, arg);
	closedir(d);
	return rc < 0 ? rc : 0;
}
