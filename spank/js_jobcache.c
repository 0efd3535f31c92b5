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

struct sweep {
	uint32_t job_id;
	uint64_t max_age_ns, now_ns;
	unsigned n;
	int rc;
	const char *state;
	char *out;
	size_t len, used;
};

static int remove_one(int dfd, const char *name, void *arg)
{
	struct sweep *w = arg;
	struct stat st;
	if (name[0] == '.')
		return 0;
	if (!js_jobcache_is_job_file(name, w->job_id) &&
	    (!w->max_age_ns || fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
	     w->now_ns <= mtime_ns(&st) || w->now_ns - mtime_ns(&st) <= w->max_age_ns))
		return 0;
	if (unlinkat(dfd, name, 0) == 0)
		w->n++;
	else if (errno != ENOENT && !w->rc)
		w->rc = -errno;
	return 0;
}

int js_jobcache_remove(const char *state, uint32_t job_id, uint64_t max_age_ns, uint64_t now_ns,
		       unsigned *nremoved)
{
	struct sweep w = {.job_id = job_id, .max_age_ns = max_age_ns, .now_ns = now_ns};
	*nremoved = 0;
	int dfd = open_jobs_dir(state, false);
	if (dfd < 0)
		return dfd;
	int rc = js_dir_foreach(dfd, remove_one, &w);
	close(dfd);
	*nremoved = w.n;
	return rc < 0 ? rc : w.rc;
}

static int gpus_of_one(int dfd, const char *name, void *arg)
{
	struct sweep *w = arg;
	char *end;
	(void)dfd;
	unsigned long id = strtoul(name, &end, 10);
	if (name[0] < '0' || name[0] > '9' || *end || id == w->job_id)
		return 0; /* temporaries, dot files, this job */
	struct js_jobcache e;
	uint64_t mt;
	if (js_jobcache_load(w->state, (uint32_t)id, &e, &mt) < 0 || !e.gpus[0] ||
	    (w->max_age_ns && w->now_ns > mt && w->now_ns - mt > w->max_age_ns))
		return 0;
	int n = snprintf(w->out + w->used, w->len - w->used, "%s%s", w->used ? "," : "", e.gpus);
	if (n < 0 || (size_t)n >= w->len - w->used)
		return -ENOSPC; /* cannot tell which: the caller shares them all */
	w->used += (size_t)n;
	return 0;
}

int js_jobcache_other_gpus(const char *state, uint32_t job_id, uint64_t max_age_ns,
			   uint64_t now_ns, char *out, size_t len)
{
	struct sweep w = {.job_id = job_id, .max_age_ns = max_age_ns, .now_ns = now_ns,
			  .state = state, .out = out, .len = len};
	out[0] = 0;
	int dfd = open_jobs_dir(state, false);
	if (dfd < 0)
		return dfd;
	int rc = js_dir_foreach(dfd, gpus_of_one, &w);
	close(dfd);
	return rc;
}
