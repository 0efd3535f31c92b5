/* joulestep SPANK plugin: job metadata cache files, <state>/jobs/<job_id>
 * (see js_jobcache.h). Everything is relative to a verified directory fd. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "js_jobcache.h"
#include "js_fs.h"
#include "js_parse.h"

#define JOBS_DIR "jobs"

/* <state>/jobs as a directory fd; state must pass js_root_dir's walk, jobs
 * must be a root-owned directory that only root can use. */
static int open_jobs_dir(const char *state, bool create)
{
	int sfd = js_root_dirfd(state, 0700, create);
	if (sfd < 0)
		return sfd;
	if (create && mkdirat(sfd, JOBS_DIR, 0700) < 0 && errno != EEXIST) {
		int e = -errno;
		close(sfd);
		return e;
	}
	int fd = openat(sfd, JOBS_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int e = fd < 0 ? (errno == ELOOP || errno == ENOTDIR ? -EPERM : -errno) : 0;
	close(sfd);
	if (fd < 0)
		return e;
	struct stat st;
	if (fstat(fd, &st) < 0 || st.st_uid != 0 || (st.st_mode & 077)) {
		close(fd);
		return -EPERM;
	}
	return fd;
}

static bool safe_file(const struct stat *st)
{
	return S_ISREG(st->st_mode) && st->st_uid == 0 && st->st_nlink == 1 && !(st->st_mode & 077);
}

static uint64_t mtime_ns(const struct stat *st)
{
	return (uint64_t)st->st_mtim.tv_sec * 1000000000ULL + (uint64_t)st->st_mtim.tv_nsec;
}

int js_jobcache_load(const char *state, uint32_t job_id, struct js_jobcache *e, uint64_t *mtime)
{
	int dfd = open_jobs_dir(state, false);
	if (dfd < 0)
		return dfd;
	char name[16];
	snprintf(name, sizeof(name), "%u", job_id);
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	int rc = fd < 0 ? (errno == ELOOP ? -EPERM : -errno) : 0;
	close(dfd);
	if (fd < 0)
		return rc;
	struct stat st;
	char buf[JS_JOBCACHE_MAX + 1];
	ssize_t n = -1;
	if (fstat(fd, &st) < 0)
		rc = -errno;
	else if (!safe_file(&st))
		rc = -EPERM;
	else if (st.st_size > JS_JOBCACHE_MAX)
		rc = -EFBIG;
	else if ((n = read(fd, buf, sizeof(buf))) < 0)
		rc = -errno;
	else
		rc = js_jobcache_decode(buf, (size_t)n, e);
	close(fd);
	if (!rc)
		*mtime = mtime_ns(&st);
	return rc;
}

int js_jobcache_store(const char *state, const struct js_jobcache *e)
{
	char text[JS_JOBCACHE_MAX];
	int rc = js_jobcache_encode(e, text, sizeof(text));
	if (rc < 0)
		return rc;
	int dfd = open_jobs_dir(state, true);
	if (dfd < 0)
		return dfd;
	char name[16];
	snprintf(name, sizeof(name), "%u", e->job_id);
	rc = js_write_atomicat(dfd, name, text, strlen(text), 0600, true);
	if (!rc && fsync(dfd) < 0)
		rc = -errno;
	close(dfd);
	return rc;
}

int js_jobcache_remove(const char *state, uint32_t job_id, uint64_t max_age_ns, uint64_t now_ns,
		       unsigned *nremoved)
{
	*nremoved = 0;
	int dfd = open_jobs_dir(state, false);
	if (dfd < 0)
		return dfd;
	int rfd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = rfd >= 0 ? fdopendir(rfd) : NULL;
	if (!d) {
		int e = -errno;
		if (rfd >= 0)
			close(rfd);
		close(dfd);
		return e;
	}
	int rc = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		bool mine = js_jobcache_is_job_file(de->d_name, job_id);
		struct stat st;
		if (!mine) {
			if (!max_age_ns || fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
			    now_ns <= mtime_ns(&st) || now_ns - mtime_ns(&st) <= max_age_ns)
				continue;
		}
		if (unlinkat(dfd, de->d_name, 0) == 0)
			(*nremoved)++;
		else if (errno != ENOENT && !rc)
			rc = -errno;
	}
	closedir(d);
	close(dfd);
	return rc;
}

int js_jobcache_other_gpus(const char *state, uint32_t job_id, uint64_t max_age_ns,
			   uint64_t now_ns, char *out, size_t len)
{
	size_t n = 0;
	out[0] = 0;
	int dfd = open_jobs_dir(state, false);
	if (dfd < 0)
		return dfd;
	int rfd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = rfd >= 0 ? fdopendir(rfd) : NULL;
	if (!d) {
		int e = -errno;
		if (rfd >= 0)
			close(rfd);
		close(dfd);
		return e;
	}
	struct dirent *de;
	while ((de = readdir(d))) {
		char *end;
		unsigned long id = strtoul(de->d_name, &end, 10);
		if (de->d_name[0] < '0' || de->d_name[0] > '9' || *end || id == job_id)
			continue; /* temporaries, dot files, this job */
		struct js_jobcache e;
		uint64_t mt;
		if (js_jobcache_load(state, (uint32_t)id, &e, &mt) < 0 || !e.gpus[0] ||
		    (max_age_ns && now_ns > mt && now_ns - mt > max_age_ns))
			continue;
		int w = snprintf(out + n, len - n, "%s%s", n ? "," : "", e.gpus);
		if (w < 0 || (size_t)w >= len - n) {
			closedir(d);
			close(dfd);
			return -ENOSPC; /* cannot tell which: the caller shares them all */
		}
		n += (size_t)w;
	}
	closedir(d);
	close(dfd);
	return 0;
}
