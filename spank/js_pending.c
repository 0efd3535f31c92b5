/* joulestep SPANK plugin: records the spool could not take (issue 11,
 * "Records survive"; docs/reliability.md "Faults: records and counters").
 *
 * At step end a record that cannot be written into the spool (full,
 * read-only, a directory that cannot be made) is written, the same way
 * (tmp + fsync + rename, never partial), into the root-only fallback
 * <state>/pending/<cluster>/<job_id>/. When that fails too, an empty marker
 * <name>.lost is left there (a file without data needs no free block, so it
 * fits on a full file system), with the two errors written into it when
 * they fit. The job prolog and epilog of every job on the node move the
 * pending records into the spool (js_pending_flush), and turn each marker
 * into <spool>/<cluster>/lost/<name> (format "joulestep-lost"), which
 * `joulestep ingest` counts in its lost_records table: the figure `doctor`
 * and `report` show. All of it runs only after a failure, or in the job
 * prolog/epilog: never on a healthy step's critical path. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <slurm/spank.h>

#include "js_pending.h"
#include "js_step.h"

#define PENDING_DIR "pending"
#define LOST_SUFFIX ".lost"
#define PENDING_MAX_BYTES (64u << 20) /* far above a record's size bound */
#define JS_PENDING_TMP_AGE_S 600      /* a tmp file older than this: a killed writer */

static int pending_dirfd(const char *state, const char *cluster, uint32_t job_id, bool create)
{
	char dir[JS_PATH_MAX * 2];
	if (snprintf(dir, sizeof(dir), "%s/" PENDING_DIR "/%s/%u", state, cluster, job_id) >=
	    (int)sizeof(dir))
		return -ENAMETOOLONG;
	return js_root_dirfd(dir, 0700, create);
}

int js_pending_keep(const char *state, const char *cluster, uint32_t job_id, const char *name,
		    const char *data, size_t len, int spool_err)
{
	int dfd = -1, rc = -ENOENT;
	/* twice: a flush (another job's prolog/epilog) may remove the empty
	 * job directory between its creation and the write (-ENOENT) */
	for (int tries = 0; tries < 2 && rc == -ENOENT; tries++) {
		if (dfd >= 0)
			close(dfd);
		dfd = pending_dirfd(state, cluster, job_id, true);
		rc = dfd < 0 ? dfd : js_write_atomicat(dfd, name, data, len, 0600, false);
	}
	if (!rc && fsync(dfd) < 0) /* the spool is failing: make this one durable */
		rc = -errno;
	if (!rc) {
		close(dfd);
		return 0;
	}
	if (dfd >= 0) {
		char marker[300];
		snprintf(marker, sizeof(marker), "%s" LOST_SUFFIX, name);
		int fd = openat(dfd, marker, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd >= 0) {
			char why[160];
			int n = snprintf(why, sizeof(why), "spool: %s; fallback: %s\n", strerror(-spool_err),
					 strerror(-rc));
			ssize_t w = write(fd, why, (size_t)n); /* may not fit: the name says enough */
			(void)w;
			(void)fsync(fd);
			close(fd);
			(void)fsync(dfd);
			close(dfd);
			return 1;
		}
		close(dfd);
	}
	return rc;
}

/* Pure: the "joulestep-lost" document for a marker named <record>.lost
 * (record = <job>.<step>.<het>.<node>.json). NULL when the name is not one
 * the plugin writes. */
char *js_pending_lost_json(const char *cluster, const char *record, uint64_t lost_at_ns,
			   const char *reason)
{
	char buf[256];
	unsigned long job, het;
	char step[32];
	int used = 0;
	size_t n = strlen(record);
	if (n < 6 || n >= sizeof(buf) || strcmp(record + n - 5, ".json"))
		return NULL;
	memcpy(buf, record, n - 5);
	buf[n - 5] = 0;
	if (sscanf(buf, "%lu.%31[A-Za-z0-9_].%lu.%n", &job, step, &het, &used) != 3 || !used ||
	    !buf[used] || !js_name_safe(buf + used))
		return NULL;
	json_t *o = json_object();
	json_object_set_new(o, "format", json_string("joulestep-lost"));
	json_object_set_new(o, "version", json_integer(1));
	json_object_set_new(o, "cluster", json_string(cluster));
	json_object_set_new(o, "job_id", json_integer((json_int_t)job));
	json_object_set_new(o, "step_id", json_string(step));
	json_object_set_new(o, "het_component", json_integer((json_int_t)het));
	json_object_set_new(o, "node", json_string(buf + used));
	json_object_set_new(o, "lost_at_ns", json_integer((json_int_t)lost_at_ns));
	json_object_set_new(o, "reason", reason && *reason ? json_string(reason)
							  : json_string("spool and fallback not writable"));
	char *text = json_dumps(o, JSON_SORT_KEYS | JSON_ENSURE_ASCII);
	json_decref(o);
	return text;
}

/* A marker's reason: its first line, printable ASCII only. */
static void read_reason(int dfd, const char *name, char *buf, size_t len)
{
	buf[0] = 0;
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t n = read(fd, buf, len - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	for (char *p = buf; *p; p++)
		if (*p == '\n' || *p < 0x20 || *p > 0x7e) {
			*p = 0;
			break;
		}
}

/* One pending file into the spool directory sfd (and lost/ for markers):
 * 1 moved, 0 nothing to do, -errno (the spool still fails). */
static int flush_one(int jfd, int sfd, const char *spool, const char *cluster, const char *name,
		     unsigned *lost)
{
	struct stat st;
	size_t n = strlen(name);
	if (strstr(name, ".tmp.")) { /* being written now, or left by a killed writer */
		if (fstatat(jfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    time(NULL) - st.st_mtim.tv_sec > JS_PENDING_TMP_AGE_S)
			(void)unlinkat(jfd, name, 0);
		return 0;
	}
	int fd = openat(jfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return 0;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != 0 ||
	    (size_t)st.st_size > PENDING_MAX_BYTES) {
		close(fd);
		return 0;
	}
	int rc;
	if (n > strlen(LOST_SUFFIX) && !strcmp(name + n - strlen(LOST_SUFFIX), LOST_SUFFIX)) {
		close(fd);
		char record[300], reason[160], ldir[JS_PATH_MAX * 2];
		snprintf(record, sizeof(record), "%.*s", (int)(n - strlen(LOST_SUFFIX)), name);
		read_reason(jfd, name, reason, sizeof(reason));
		uint64_t at = (uint64_t)st.st_mtim.tv_sec * 1000000000ULL + (uint64_t)st.st_mtim.tv_nsec;
		char *text = js_pending_lost_json(cluster, record, at, reason);
		if (!text) {
			(void)unlinkat(jfd, name, 0);
			return 0;
		}
		snprintf(ldir, sizeof(ldir), "%s/%s/lost", spool, cluster);
		int lfd = js_root_dirfd(ldir, 0755, true);
		rc = lfd < 0 ? lfd : js_write_atomicat(lfd, record, text, strlen(text), 0644, false);
		if (!rc && fsync(lfd) < 0)
			rc = -errno;
		if (lfd >= 0)
			close(lfd);
		free(text);
		if (rc)
			return rc;
		(*lost)++;
		(void)unlinkat(jfd, name, 0);
		return 1;
	}
	if (n <= 5 || strcmp(name + n - 5, ".json")) {
		close(fd);
		return 0;
	}
	struct stat there; /* st keeps the pending file's size */
	if (fstatat(sfd, name, &there, AT_SYMLINK_NOFOLLOW) == 0) { /* already there */
		close(fd);
		(void)unlinkat(jfd, name, 0);
		return 0;
	}
	char *data = malloc((size_t)st.st_size + 1);
	ssize_t got = data ? pread(fd, data, (size_t)st.st_size, 0) : -1;
	close(fd);
	if (got != (ssize_t)st.st_size) {
		free(data);
		return 0;
	}
	rc = js_write_atomicat(sfd, name, data, (size_t)got, 0600, false);
	if (!rc && fsync(sfd) < 0)
		rc = -errno;
	free(data);
	if (rc)
		return rc;
	(void)unlinkat(jfd, name, 0);
	return 1;
}

/* A subdirectory of pfd, no symlink, root-owned and not group/world-writable
 * (js_check_dirfd); NULL otherwise. */
static DIR *opendir_checked(int pfd, const char *name)
{
	int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	DIR *d = js_check_dirfd(fd) == 0 ? fdopendir(fd) : NULL;
	if (!d)
		close(fd);
	return d;
}

int js_pending_flush(const char *spool, const char *state, unsigned max, unsigned *moved,
		     unsigned *lost)
{
	char dir[JS_PATH_MAX * 2];
	int rc = 0;
	*moved = *lost = 0;
	snprintf(dir, sizeof(dir), "%s/" PENDING_DIR, state);
	int pfd = js_root_dirfd(dir, 0700, false);
	if (pfd < 0)
		return pfd == -ENOENT ? 0 : pfd;
	DIR *pd = fdopendir(pfd);
	if (!pd) {
		rc = -errno;
		close(pfd);
		return rc;
	}
	struct dirent *ce;
	unsigned seen = 0;
	while (!rc && seen < max && (ce = readdir(pd))) {
		if (ce->d_name[0] == '.' || !js_name_safe(ce->d_name))
			continue;
		DIR *cd = opendir_checked(pfd, ce->d_name);
		if (!cd)
			continue;
		int cfd = dirfd(cd);
		struct dirent *je;
		while (!rc && seen < max && (je = readdir(cd))) {
			char *end;
			unsigned long job = strtoul(je->d_name, &end, 10);
			if (je->d_name[0] < '0' || je->d_name[0] > '9' || *end || job > UINT32_MAX)
				continue;
			DIR *jd = opendir_checked(cfd, je->d_name);
			if (!jd)
				continue;
			snprintf(dir, sizeof(dir), "%s/%s/%lu", spool, ce->d_name, job);
			int sfd = -1;
			struct dirent *fe;
			while (!rc && seen < max && (fe = readdir(jd))) {
				if (fe->d_name[0] == '.')
					continue;
				seen++;
				if (sfd < 0 && (sfd = js_root_dirfd(dir, 0755, true)) < 0) {
					rc = sfd; /* the spool still fails: try again later */
					break;
				}
				int e = flush_one(dirfd(jd), sfd, spool, ce->d_name, fe->d_name, lost);
				if (e < 0)
					rc = e;
				else
					*moved += (unsigned)e;
			}
			if (sfd >= 0)
				close(sfd);
			closedir(jd);
			(void)unlinkat(cfd, je->d_name, AT_REMOVEDIR); /* when empty */
		}
		closedir(cd);
	}
	closedir(pd);
	*moved -= *lost < *moved ? *lost : *moved;
	return rc;
}
