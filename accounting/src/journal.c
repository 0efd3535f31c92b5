/* The clock journal shared by the CPU, uncore and GPU clocks (journal.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "fsutil.h"
#include "journal.h"
#include "js_internal.h"

int js_journal_open(const char *state_dir, bool create, struct js_journal *j)
{
	int rc;

	if (!state_dir || state_dir[0] != '/' || strlen(state_dir) >= JS_PATH_LEN)
		return -EINVAL;
	j->dfd = js_root_dirfd(state_dir, 0700, create);
	if (j->dfd < 0)
		return j->dfd;
	j->lfd = openat(j->dfd, "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (j->lfd < 0) {
		rc = -errno;
		close(j->dfd);
		return rc;
	}
	while (flock(j->lfd, LOCK_EX) < 0) {
		if (errno != EINTR) {
			rc = -errno;
			close(j->lfd);
			close(j->dfd);
			return rc;
		}
	}
	if (js_boot_id(j->boot, sizeof(j->boot)) < 0)
		j->boot[0] = '\0';
	return 0;
}

/* Unlock explicitly before closing: a process that forked meanwhile (the
 * library may run in a thread of slurmstepd while it forks tasks) holds a
 * copy of lfd until its exec, and closing ours alone would keep the lock. */
void js_journal_close(struct js_journal *j)
{
	if (j->lfd >= 0) {
		(void)flock(j->lfd, LOCK_UN);
		close(j->lfd);
	}
	if (j->dfd >= 0)
		close(j->dfd);
	j->lfd = j->dfd = -1;
}

int js_journal_put(struct js_journal *j, const char *name, const char *text, bool no_replace)
{
	return js_write_atomic(j->dfd, name, text, strlen(text), 0600, (uid_t)-1, (gid_t)-1,
			       JS_ATOMIC_HIDDEN_TMP | (no_replace ? JS_ATOMIC_NO_REPLACE : 0));
}

int js_proc_starttime(int pid, unsigned long long *st)
{
	char path[64], buf[1024], *p;
	ssize_t n;
	int field;

	js_fmt(path, sizeof(path), "/proc/%d/stat", pid);
	n = js_read_file(path, buf, sizeof(buf));
	if (n < 0)
		return n == -ENOENT ? -ESRCH : (int)n;
	p = strrchr(buf, ')'); /* comm may contain spaces and parens */
	if (!p)
		return -EINVAL;
	/* after ')' comes field 3 (state); walk to field 22 */
	for (field = 3, p++; p && field <= 22; field++) {
		char *end;

		while (*p == ' ')
			p++;
		/* a zombie (its parent never reaped it, as happens to a killed
		 * slurmstepd under an init that does not reap) owns nothing */
		if (field == 3 && (*p == 'Z' || *p == 'X' || *p == 'x'))
			return -ESRCH;
		if (field == 22) {
			errno = 0;
			*st = strtoull(p, &end, 10);
			return (end == p || errno) ? -EINVAL : 0;
		}
		p = strchr(p, ' ');
	}
	return -EINVAL;
}

int js_owner_self(int pid, struct js_owner *o)
{
	memset(o, 0, sizeof(*o));
	o->pid = pid ? pid : (int)getpid();
	if (js_boot_id(o->boot, sizeof(o->boot)) < 0)
		o->boot[0] = '\0';
	return js_proc_starttime(o->pid, &o->start);
}

int js_owner_format(const struct js_owner *o, char *buf, size_t len)
{
	int n = snprintf(buf, len, "%d %llu %s", o->pid, o->start, o->boot[0] ? o->boot : "-");

	return n < 0 || (size_t)n >= len ? -ENOSPC : 0;
}

int js_owner_parse(const char *buf, struct js_owner *o, const char **rest)
{
	char boot[JS_BOOT_ID_LEN + 1] = "";
	int off = 0, n;

	memset(o, 0, sizeof(*o));
	n = sscanf(buf, "%d %llu%n %37[-0-9a-f]%n", &o->pid, &o->start, &off, boot, &off);
	if (n < 2 || o->pid <= 0)
		return -EINVAL;
	if (n == 3 && js_boot_id_ok(boot))
		js_fmt(o->boot, sizeof(o->boot), "%s", boot);
	else if (n == 3 && strcmp(boot, "-"))
		return -EINVAL;
	if (rest)
		*rest = buf + off;
	return 0;
}

bool js_owner_alive(const struct js_owner *o, const char *boot)
{
	unsigned long long now;

	if (o->boot[0] && boot && boot[0] && strcmp(o->boot, boot))
		return false; /* of another boot: that process is gone */
	return js_proc_starttime(o->pid, &now) == 0 && now == o->start;
}

struct each {
	struct js_journal *j;
	const char *prefix;
	int (*fn)(struct js_journal *j, const char *name, const char *text, void *arg);
	void *arg;
};

static int each_one(int dfd, const char *name, void *arg)
{
	struct each *e = arg;
	char text[1024];

	if (strncmp(name, e->prefix, strlen(e->prefix)))
		return 0;
	if (js_read_fileat(dfd, name, text, sizeof(text)) < 0)
		text[0] = '\0';
	return e->fn(e->j, name, text, e->arg);
}

int js_journal_foreach(struct js_journal *j, const char *prefix,
		       int (*fn)(struct js_journal *j, const char *name, const char *text, void *arg),
		       void *arg)
{
	struct each e = {j, prefix, fn, arg};

	return js_dir_foreach(j->dfd, each_one, &e);
}

struct recovery {
	bool force;
	int (*undo)(struct js_journal *j, const char *name, const char *text, void *arg);
	void *arg;
	struct js_journal_recovery *out;
};

static int recover_one(struct js_journal *j, const char *name, const char *text, void *arg)
{
	struct recovery *r = arg;
	struct js_owner o;

	r->out->entries++;
	if (js_owner_parse(text, &o, NULL) < 0 || (o.boot[0] && j->boot[0] && strcmp(o.boot, j->boot))) {
		unlinkat(j->dfd, name, 0); /* torn, or of another boot: nothing to undo */
		r->out->dropped++;
		return 0;
	}
	if (!r->force && js_owner_alive(&o, j->boot)) {
		r->out->busy++;
		return 0;
	}
	int rc = r->undo(j, name, text, r->arg);
	if (rc > 0) { /* left alone (another's) */
		r->out->skipped++;
		return 0;
	}
	if (rc < 0) {
		r->out->failed++;
		return 0;
	}
	unlinkat(j->dfd, name, 0);
	r->out->restored++;
	return 0;
}

int js_journal_recover(const char *state_dir, const char *prefix, bool force,
		       int (*undo)(struct js_journal *j, const char *name, const char *text, void *arg),
		       void *arg, struct js_journal_recovery *out)
{
	struct recovery r = {force, undo, arg, out};
	struct js_journal j;
	int rc;

	memset(out, 0, sizeof(*out));
	rc = js_journal_open(state_dir, false, &j);
	if (rc == -ENOENT)
		return 0;
	if (rc < 0)
		return rc;
	rc = js_journal_foreach(&j, prefix, recover_one, &r);
	js_journal_close(&j);
	return rc;
}

static int count_one(struct js_journal *j, const char *name, const char *text, void *arg)
{
	(void)j;
	(void)name;
	(void)text;
	(*(int *)arg)++;
	return 0;
}

int js_journal_count(const char *state_dir, const char *prefix)
{
	struct js_journal j;
	int n = 0, rc = js_journal_open(state_dir, false, &j);

	if (rc < 0)
		return rc == -ENOENT ? 0 : rc;
	rc = js_journal_foreach(&j, prefix, count_one, &n);
	js_journal_close(&j);
	return rc < 0 ? rc : n;
}

struct lister {
	void (*fn)(const char *name, const char *text, void *arg);
	void *arg;
	int n;
};

static int list_one(struct js_journal *j, const char *name, const char *text, void *arg)
{
	struct lister *l = arg;

	(void)j;
	l->fn(name, text, l->arg);
	l->n++;
	return 0;
}

int js_journal_list(const char *state_dir, void (*fn)(const char *name, const char *text, void *arg),
		    void *arg)
{
	static const char *const kinds[] = {"uncore-", "gpu-"};
	struct lister l = {fn, arg, 0};
	struct js_journal j;
	int rc = js_journal_open(state_dir, false, &j);

	if (rc < 0)
		return rc == -ENOENT ? 0 : rc;
	for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]) && rc >= 0; k++)
		rc = js_journal_foreach(&j, kinds[k], list_one, &l);
	js_journal_close(&j);
	return rc < 0 ? rc : l.n;
}
