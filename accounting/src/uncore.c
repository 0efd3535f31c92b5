/* Intel uncore clock (joulestep/uncore.h): discovery of both sysfs
 * layouts, the cap, and its journal (one owner per domain). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "joulestep/uncore.h"
#include "journal.h"
#include "js_internal.h"

#define DIR_REL "devices/system/cpu/intel_uncore_frequency"
#define PREFIX "uncore-"

static int read_khz(const char *root, const char *name, const char *file, uint32_t *out)
{
	char path[4200];
	uint64_t v;
	int rc = js_path(path, sizeof(path), "%s/" DIR_REL "/%s/%s", root, name, file);
	if (rc == 0)
		rc = js_read_u64_file(path, &v);
	if (rc == 0 && v > UINT32_MAX)
		rc = -ERANGE;
	if (rc == 0)
		*out = (uint32_t)v;
	return rc;
}

/* "package_XX_die_YY" or "uncoreNN" (tpmi): the domain's identity. */
static int parse_name(const char *root, const char *name, bool tpmi, struct js_uncore_dom *d)
{
	memset(d, 0, sizeof(*d));
	if (strlen(name) >= sizeof(d->name))
		return -EINVAL;
	if (tpmi) {
		char *end;
		uint32_t pkg, dom;
		if (strncmp(name, "uncore", 6) || name[6] < '0' || name[6] > '9')
			return -EINVAL;
		strtoul(name + 6, &end, 10);
		if (*end || read_khz(root, name, "package_id", &pkg) < 0 ||
		    read_khz(root, name, "domain_id", &dom) < 0 || pkg > 4095 || dom > 4095)
			return -EINVAL;
		d->pkg = (int)pkg;
		d->die = (int)dom;
	} else {
		int pkg, die, n = 0;
		if (sscanf(name, "package_%d_die_%d%n", &pkg, &die, &n) != 2 || name[n] || pkg < 0 ||
		    die < 0 || pkg > 4095 || die > 4095)
			return -EINVAL;
		d->pkg = pkg;
		d->die = die;
	}
	snprintf(d->name, sizeof(d->name), "%s", name);
	if (read_khz(root, name, "min_freq_khz", &d->min_khz) < 0 ||
	    read_khz(root, name, "max_freq_khz", &d->max_khz) < 0 ||
	    read_khz(root, name, "initial_min_freq_khz", &d->initial_min_khz) < 0 ||
	    read_khz(root, name, "initial_max_freq_khz", &d->initial_max_khz) < 0)
		return -EINVAL;
	return 0;
}

static int cmp_dom(const void *a, const void *b)
{
	const struct js_uncore_dom *x = a, *y = b;
	if (x->pkg != y->pkg)
		return x->pkg < y->pkg ? -1 : 1;
	return (x->die > y->die) - (x->die < y->die);
}

static int scan(const char *root, bool tpmi, struct js_uncore_dom *out, int max)
{
	char base[4200];
	int rc = js_path(base, sizeof(base), "%s/" DIR_REL, root);
	if (rc < 0)
		return rc;
	DIR *dir = opendir(base);
	if (!dir)
		return errno == ENOENT ? 0 : -errno;
	struct dirent *de;
	int n = 0;
	while ((de = readdir(dir)) && n < max)
		if (parse_name(root, de->d_name, tpmi, &out[n]) == 0)
			n++;
	closedir(dir);
	qsort(out, (size_t)n, sizeof(*out), cmp_dom);
	return n;
}

int js_uncore_list(const char *sysfs_root, struct js_uncore_dom *out, int max)
{
	const char *root = sysfs_root ? sysfs_root : JS_SYSFS_DEFAULT;
	if (!out || max <= 0)
		return -EINVAL;
	int n = scan(root, true, out, max);
	return n != 0 ? n : scan(root, false, out, max);
}

uint32_t js_uncore_cap_khz(const struct js_uncore_dom *d, uint32_t want_khz,
			   uint32_t entry_max_khz)
{
	uint32_t k = want_khz < entry_max_khz ? want_khz : entry_max_khz;
	return k < d->min_khz ? d->min_khz : k;
}

static int write_khz(const char *root, const char *name, const char *file, uint32_t khz)
{
	char path[4200], val[16];
	int rc = js_path(path, sizeof(path), "%s/" DIR_REL "/%s/%s", root, name, file);
	if (rc < 0)
		return rc;
	snprintf(val, sizeof(val), "%u", khz);
	return js_write_file(path, val);
}

int js_uncore_set_max(const char *sysfs_root, const struct js_uncore_dom *d, uint32_t khz)
{
	if (!d || !khz)
		return -EINVAL;
	return write_khz(sysfs_root ? sysfs_root : JS_SYSFS_DEFAULT, d->name, "max_freq_khz", khz);
}

/* ---- journal (journal.h): <state>/uncore-<name> = "pid start boot min max" */
struct entry {
	struct js_owner o;
	uint32_t min_khz, max_khz;
};

static int entry_name(char *buf, size_t len, const char *dom)
{
	for (const char *p = dom; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_'))
			return -EINVAL;
	return snprintf(buf, len, PREFIX "%s", dom) < (int)len && *dom ? 0 : -EINVAL;
}

/* 0 with e filled, -EINVAL (torn: dropped by the caller) */
static int entry_parse(const char *text, struct entry *e)
{
	const char *rest;
	if (js_owner_parse(text, &e->o, &rest) < 0 || !e->o.boot[0] ||
	    sscanf(rest, "%u %u", &e->min_khz, &e->max_khz) != 2 || !e->max_khz)
		return -EINVAL;
	return 0;
}

static int entry_read(int dfd, const char *name, struct entry *e)
{
	char buf[160];
	ssize_t n = js_read_fileat(dfd, name, buf, sizeof(buf));
	return n < 0 ? (int)n : entry_parse(buf, e);
}

/* Put the saved values back: max first when it goes up (the kernel refuses
 * a max below min), then min. A value already in force is not written: a
 * domain whose attributes cannot be written (read-only) but that nothing
 * changed is restored, and its entry dropped, instead of failing for good. */
static int restore(const char *root, const char *dom, const struct entry *e)
{
	uint32_t cur;
	bool max_set = read_khz(root, dom, "max_freq_khz", &cur) == 0 && cur == e->max_khz;
	bool min_set = !e->min_khz ||
		       (read_khz(root, dom, "min_freq_khz", &cur) == 0 && cur == e->min_khz);
	int rc = max_set ? 0 : write_khz(root, dom, "max_freq_khz", e->max_khz);
	int rc2 = min_set ? 0 : write_khz(root, dom, "min_freq_khz", e->min_khz);
	if (rc < 0 && rc2 == 0) /* the max was below the min: again, now */
		rc = write_khz(root, dom, "max_freq_khz", e->max_khz);
	return rc < 0 ? rc : rc2;
}

static int entry_write(struct js_journal *j, const char *name, const struct entry *e)
{
	char own[96], line[160];
	int rc = js_owner_format(&e->o, own, sizeof(own));
	if (rc == 0)
		snprintf(line, sizeof(line), "%s %u %u\n", own, e->min_khz, e->max_khz);
	return rc < 0 ? rc : js_journal_put(j, name, line, false);
}

/* What to save for d: a dead owner's saved values of this boot (its change
 * undone first), else what is in force now. -EBUSY for a live owner. */
static int entry_for(struct js_journal *j, const char *root, const char *name,
		     const struct js_uncore_dom *d, struct entry *e)
{
	struct entry old;
	if (entry_read(j->dfd, name, &old) == 0 && !strcmp(old.o.boot, j->boot)) {
		if (old.o.pid != e->o.pid && js_owner_alive(&old.o, j->boot))
			return -EBUSY;
		restore(root, d->name, &old); /* a dead owner's change undone */
		e->min_khz = old.min_khz;
		e->max_khz = old.max_khz;
		return 0;
	}
	if (read_khz(root, d->name, "min_freq_khz", &e->min_khz) < 0 ||
	    read_khz(root, d->name, "max_freq_khz", &e->max_khz) < 0)
		return -EIO;
	return 0;
}

int js_uncore_journal_acquire(const char *state_dir, const char *sysfs_root,
			      const struct js_uncore_dom *d, int pid, uint32_t *orig_max_khz)
{
	const char *root = sysfs_root ? sysfs_root : JS_SYSFS_DEFAULT;
	char name[64];
	struct entry e = {0};
	struct js_journal j;
	int rc = d ? entry_name(name, sizeof(name), d->name) : -EINVAL;
	if (rc < 0 || (rc = js_owner_self(pid, &e.o)) < 0)
		return rc;
	if (!e.o.boot[0])
		return -EIO; /* an uncore entry always names its boot */
	if ((rc = js_journal_open(state_dir, true, &j)) < 0)
		return rc;
	rc = entry_for(&j, root, name, d, &e);
	if (rc == 0)
		rc = entry_write(&j, name, &e);
	if (rc == 0 && orig_max_khz)
		*orig_max_khz = e.max_khz;
	js_journal_close(&j);
	return rc;
}

int js_uncore_journal_release(const char *state_dir, const char *sysfs_root,
			      const struct js_uncore_dom *d)
{
	const char *root = sysfs_root ? sysfs_root : JS_SYSFS_DEFAULT;
	char name[64];
	struct entry e;
	struct js_journal j;
	int rc = d ? entry_name(name, sizeof(name), d->name) : -EINVAL;
	if (rc < 0)
		return rc;
	if ((rc = js_journal_open(state_dir, false, &j)) < 0)
		return rc == -ENOENT ? 0 : rc;
	rc = entry_read(j.dfd, name, &e);
	if (rc == 0 && !strcmp(j.boot, e.o.boot))
		rc = restore(root, d->name, &e);
	else
		rc = rc == -ENOENT ? 0 : rc;
	if (rc == 0 || rc == -EINVAL)
		unlinkat(j.dfd, name, 0);
	js_journal_close(&j);
	return rc == -EINVAL ? 0 : rc;
}

static int undo(struct js_journal *j, const char *name, const char *text, void *arg)
{
	struct entry e;
	(void)j;
	if (entry_parse(text, &e) < 0)
		return 0; /* torn: nothing to put back */
	return restore(arg, name + strlen(PREFIX), &e);
}

int js_uncore_journal_recover(const char *state_dir, const char *sysfs_root, bool force,
			      struct js_uncore_recovery *out)
{
	struct js_journal_recovery r;
	int rc = js_journal_recover(state_dir, PREFIX, force, undo,
				    (void *)(sysfs_root ? sysfs_root : JS_SYSFS_DEFAULT), &r);
	memset(out, 0, sizeof(*out));
	out->entries = r.entries;
	out->restored = r.restored;
	out->busy = r.busy;
	out->failed = r.failed;
	return rc;
}
