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
#include "js_fs.h"
#include "js_parse.h"

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

/* The record name: <job>.<step>.<het>-<incarnation>.<node>.json. The
 * incarnation (docs/design.md, "A requeued job's incarnations") follows the
 * het component, a number, so that a node name with dots stays unambiguous
 * and names of older plugins (<job>.<step>.<het>.<node>.json) still parse
 * (js_pending_lost_json). */
void js_record_name_of(uint32_t job_id, const char *step_id, uint32_t het,
		       uint64_t incarnation_ns, const char *node, char *name, size_t len)
{
	snprintf(name, len, "%u.%s.%u-%llu.%s.json", job_id, step_id, het,
		 (unsigned long long)incarnation_ns, node);
}

/* Pure: the "joulestep-lost" document for a marker named <record>.lost
 * (record = <job>.<step>.<het>-<incarnation>.<node>.json, or an older
 * plugin's <job>.<step>.<het>.<node>.json). NULL when the name is not one
 * the plugin writes. */
char *js_pending_lost_json(const char *cluster, const char *record, uint64_t lost_at_ns,
			   const char *reason, uint64_t start_ns, uint64_t first_reading_ns)
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
	if (sscanf(buf, "%lu.%31[A-Za-z0-9_].%lu%n", &job, step, &het, &used) != 3 || !used)
		return NULL;
	/* -<incarnation> (docs/design.md, "A requeued job's incarnations");
	 * absent in names of older plugins */
	unsigned long long inc = 0;
	if (buf[used] == '-') {
		char *end;
		if (buf[used + 1] < '0' || buf[used + 1] > '9')
			return NULL;
		errno = 0;
		inc = strtoull(buf + used + 1, &end, 10);
		if (errno || inc > (unsigned long long)INT64_MAX)
			return NULL;
		used = (int)(end - buf);
	}
	if (buf[used] != '.' || !buf[++used] || !js_name_safe(buf + used))
		return NULL;
	json_t *o = json_object();
	json_object_set_new(o, "format", json_string("joulestep-lost"));
	json_object_set_new(o, "version", json_integer(1));
	json_object_set_new(o, "cluster", json_string(cluster));
	json_object_set_new(o, "job_id", json_integer((json_int_t)job));
	json_object_set_new(o, "step_id", json_string(step));
	json_object_set_new(o, "het_component", json_integer((json_int_t)het));
	json_object_set_new(o, "node", json_string(buf + used));
	if (inc)
		json_object_set_new(o, "incarnation_ns", json_integer((json_int_t)inc));
	json_object_set_new(o, "lost_at_ns", json_integer((json_int_t)lost_at_ns));
	json_object_set_new(o, "reason", reason && *reason ? json_string(reason)
							  : json_string("spool and fallback not writable"));
	if (start_ns) /* a step-start marker's (issue 23, defect 6) */
		json_object_set_new(o, "step_start_ns", json_integer((json_int_t)start_ns));
	if (first_reading_ns)
		json_object_set_new(o, "first_reading_ns", json_integer((json_int_t)first_reading_ns));
	char *text = json_dumps(o, JSON_SORT_KEYS | JSON_ENSURE_ASCII);
	json_decref(o);
	return text;
}

/* A marker's reason: its first line, printable ASCII only; a step-start
 * marker's second line "start_ns=N first_reading_ns=M" into *start_ns and
 * *first_ns (0: not there). */
static void read_reason(int dfd, const char *name, char *buf, size_t len, uint64_t *start_ns,
			uint64_t *first_ns)
{
	char text[400];
	buf[0] = 0;
	*start_ns = *first_ns = 0;
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t n = read(fd, text, sizeof(text) - 1);
	close(fd);
	text[n > 0 ? n : 0] = 0;
	char *nl = strchr(text, '\n');
	if (nl) {
		unsigned long long a = 0, b = 0;
		if (sscanf(nl + 1, "start_ns=%llu first_reading_ns=%llu", &a, &b) >= 1) {
			*start_ns = a;
			*first_ns = b;
		}
	}
	size_t m = strnlen(text, len - 1);
	memcpy(buf, text, m);
	buf[m] = 0;
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
		uint64_t start_ns, first_ns;
		read_reason(jfd, name, reason, sizeof(reason), &start_ns, &first_ns);
		uint64_t at = (uint64_t)st.st_mtim.tv_sec * 1000000000ULL + (uint64_t)st.st_mtim.tv_nsec;
		char *text = js_pending_lost_json(cluster, record, at, reason, start_ns, first_ns);
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

/* <state>/pending as a directory stream (root-owned, 0700, no link
 * followed): 0 with *pd NULL when there is none yet, -errno on failure. */
static int open_pending(const char *state, DIR **pd)
{
	char dir[JS_PATH_MAX * 2];
	*pd = NULL;
	snprintf(dir, sizeof(dir), "%s/" PENDING_DIR, state);
	int pfd = js_root_dirfd(dir, 0700, false);
	if (pfd < 0)
		return pfd == -ENOENT ? 0 : pfd;
	*pd = fdopendir(pfd);
	if (!*pd) {
		int rc = -errno;
		close(pfd);
		return rc;
	}
	return 0;
}

int js_pending_flush(const char *spool, const char *state, unsigned max, unsigned *moved,
		     unsigned *lost)
{
	int rc = 0;
	*moved = *lost = 0;
	DIR *pd;
	int prc = open_pending(state, &pd);
	if (prc < 0 || !pd)
		return prc;
	int pfd = dirfd(pd);
	char dir[JS_PATH_MAX * 2];
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

/* ---- step-start markers (issue 23, defect 6) -------------------------- */

#define STARTED_SUFFIX ".started"
#define STARTED_REASON "slurmstepd ended without writing the record (killed?)"

static int started_name(char *out, size_t len, const char *record)
{
	return snprintf(out, len, "%s" STARTED_SUFFIX, record) >= (int)len ? -ENAMETOOLONG : 0;
}

int js_pending_started(const char *state, const char *cluster, uint32_t job_id, const char *record,
		       uint64_t start_ns, uint64_t first_reading_ns)
{
	char name[300], text[256];
	int rc = started_name(name, sizeof(name), record);
	if (rc)
		return rc;
	int n = snprintf(text, sizeof(text), STARTED_REASON "\nstart_ns=%llu first_reading_ns=%llu\n",
			 (unsigned long long)start_ns, (unsigned long long)first_reading_ns);
	int dfd = -ENOENT;
	for (int tries = 0; tries < 2 && dfd == -ENOENT; tries++) /* see js_pending_keep */
		dfd = pending_dirfd(state, cluster, job_id, true);
	if (dfd < 0)
		return dfd;
	/* root-only directory; a name left by an earlier step of the same
	 * name is replaced, never followed */
	int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	rc = fd < 0 ? -errno : 0;
	if (fd >= 0) {
		if (write(fd, text, (size_t)n) != n)
			rc = -EIO;
		close(fd);
	}
	close(dfd);
	return rc;
}

void js_pending_started_clear(const char *state, const char *cluster, uint32_t job_id,
			      const char *record)
{
	char name[300];
	if (started_name(name, sizeof(name), record))
		return;
	int dfd = pending_dirfd(state, cluster, job_id, false);
	if (dfd < 0)
		return;
	(void)unlinkat(dfd, name, 0);
	close(dfd);
}

static bool exists_at(int dfd, const char *name)
{
	struct stat st;
	return dfd >= 0 && fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

static int resolve_cluster(const char *spool, const char *state, const char *cluster,
			   uint32_t job_id, unsigned *lost)
{
	char dir[JS_PATH_MAX * 2];
	int jfd = pending_dirfd(state, cluster, job_id, false);
	if (jfd < 0)
		return jfd == -ENOENT ? 0 : jfd;
	int dup = fcntl(jfd, F_DUPFD_CLOEXEC, 0);
	DIR *d = dup < 0 ? NULL : fdopendir(dup);
	if (!d) {
		int rc = -errno;
		if (dup >= 0)
			close(dup);
		close(jfd);
		return rc;
	}
	snprintf(dir, sizeof(dir), "%s/%s/%u", spool, cluster, job_id);
	int sfd = js_root_dirfd(dir, 0755, false);
	snprintf(dir, sizeof(dir), "%s/%s/lost", spool, cluster);
	int lfd = js_root_dirfd(dir, 0755, false);
	struct dirent *e;
	while ((e = readdir(d))) {
		size_t n = strlen(e->d_name), k = strlen(STARTED_SUFFIX);
		if (e->d_name[0] == '.' || n <= k || strcmp(e->d_name + n - k, STARTED_SUFFIX))
			continue;
		char record[300], marker[320];
		snprintf(record, sizeof(record), "%.*s", (int)(n - k), e->d_name);
		snprintf(marker, sizeof(marker), "%s" LOST_SUFFIX, record);
		if (exists_at(sfd, record) || exists_at(lfd, record) || exists_at(jfd, record) ||
		    exists_at(jfd, marker)) { /* written, kept or counted */
			(void)unlinkat(jfd, e->d_name, 0);
			continue;
		}
		/* no record: a counted .lost marker (js_pending_flush turns it
		 * into a joulestep-lost document), lost now */
		if (renameat(jfd, e->d_name, jfd, marker) == 0) {
			(void)utimensat(jfd, marker, NULL, AT_SYMLINK_NOFOLLOW);
			(*lost)++;
		}
	}
	closedir(d);
	if (sfd >= 0)
		close(sfd);
	if (lfd >= 0)
		close(lfd);
	close(jfd);
	return 0;
}

int js_pending_started_resolve(const char *spool, const char *state, uint32_t job_id, unsigned *lost)
{
	*lost = 0;
	DIR *pd;
	int prc = open_pending(state, &pd);
	if (prc < 0 || !pd)
		return prc;
	int rc = 0;
	struct dirent *ce;
	while ((ce = readdir(pd))) /* every cluster: the step's may be Slurm's name */
		if (ce->d_name[0] != '.' && js_name_safe(ce->d_name)) {
			int e = resolve_cluster(spool, state, ce->d_name, job_id, lost);
			if (e < 0)
				rc = e;
		}
	closedir(pd);
	return rc;
}
