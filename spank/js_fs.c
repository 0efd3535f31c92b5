/* joulestep SPANK plugin: directories root may write into, and atomic
 * writes (docs/security.md): root never writes under a directory a user
 * controls, and never leaves a partial file. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "js_fs.h"
#include "js_parse.h"

int js_check_dirfd(int fd)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	if (st.st_uid != 0 || (st.st_mode & 022))
		return -EPERM;
	return 0;
}

/* Walk the path from / with O_NOFOLLOW, creating missing components (root,
 * mode) when create is set (else -ENOENT). Every existing component must be
 * root-owned and not group/world writable: root never writes under a
 * user-controlled directory. Returns an O_PATH-less directory fd (O_CLOEXEC)
 * or -errno. */
int js_root_dirfd(const char *path, mode_t mode, bool create)
{
	if (path[0] != '/')
		return -EINVAL;
	int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	char buf[JS_PATH_MAX * 2];
	snprintf(buf, sizeof(buf), "%s", path);
	char *save = NULL;
	for (char *c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		int nfd = openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (nfd < 0 && errno == ENOENT && create) {
			if (mkdirat(fd, c, mode) < 0 && errno != EEXIST) {
				int e = -errno;
				close(fd);
				return e;
			}
			nfd = openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (nfd >= 0 && fchmod(nfd, mode) < 0) {
				int e = -errno;
				close(nfd);
				close(fd);
				return e;
			}
		}
		if (nfd < 0) {
			int e = errno == ELOOP ? -ELOOP : -errno;
			close(fd);
			return e;
		}
		close(fd);
		fd = nfd;
		int rc = js_check_dirfd(fd);
		if (rc < 0) {
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

int js_write_atomic_owned(int dfd, const char *name, const char *data, size_t len,
			      mode_t mode, uid_t uid, gid_t gid)
{
	char tmp[320];
	int rc = 0, fd;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", name, (int)getpid()) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	/* a tmp file of this pid can only be left by a killed slurmstepd */
	(void)unlinkat(dfd, tmp, 0);
	fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	if (fd < 0)
		return -errno;
	/* root:root (the journal, the job cache) even if slurmstepd's egid is
	 * the user's at this moment; the job's user for its summary */
	if (uid != (uid_t)-1 && fchown(fd, uid, gid) < 0)
		rc = -errno;
	if (!rc)
		rc = write_all(fd, data, len);
	if (!rc && fsync(fd) < 0)
		rc = -errno;
	if (close(fd) < 0 && !rc)
		rc = -errno;
	if (!rc && renameat(dfd, tmp, dfd, name) < 0)
		rc = -errno;
	if (rc)
		(void)unlinkat(dfd, tmp, 0);
	return rc;
}

int js_write_atomicat(int dfd, const char *name, const char *data, size_t len, mode_t mode,
		      bool chown_root)
{
	return js_write_atomic_owned(dfd, name, data, len, mode, chown_root ? 0 : (uid_t)-1,
				  chown_root ? 0 : (gid_t)-1);
}

/* fsync a directory given relative to dfd (no symlinks). */
int js_fsync_dirat(int dfd, const char *name)
{
	int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = fsync(fd) < 0 ? -errno : 0;
	close(fd);
	return rc;
}
