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

/* ---- journal ------------------------------------------------------------ */
struct entry {
	int pid;
	unsigned long long start;
	char boot[40];
	uint32_t min_khz, max_khz;
};

static int entry_name(char *buf, size_t len, const char *dom)
{
	for (const char *p = dom; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_'))
			return -EINVAL;
	return snprintf(buf, len, PREFIX "%s", dom) < (int)len && *dom ? 0 : -EINVAL;
}

/* 0 with e filled, -ENOENT, or -EINVAL (torn: dropped by the caller) */
static int entry_read(int dfd, const char *name, struct entry *e)
{
	char buf[160];
	ssize_t n = js_read_fileat(dfd, name, buf, sizeof(buf));
	if (n < 0)
		return (int)n;
	if (sscanf(buf, "%d %llu %39s %u %u", &e->pid, &e->start, e->boot, &e->min_khz,
		   &e->max_khz) != 5 || e->pid <= 0 || !e->max_khz)
		return -EINVAL;
	return 0;
}

static bool entry_alive(const struct entry *e)
{
	unsigned long long now;
	return js_proc_starttime(e->pid, &now) == 0 && now == e->start;
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

static int entry_write(int dfd, const char *name, const struct entry *e)
{
	char line[160];
	int n = snprintf(line, sizeof(line), "%d %llu %s %u %u\n", e->pid, e->start, e->boot,
			 e->min_khz, e->max_khz);
	int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	int rc = write(fd, line, (size_t)n) == n ? 0 : -EIO;
	close(fd);
	return rc;
}

int js_uncore_journal_acquire(const char *state_dir, const char *sysfs_root,
			      const struct js_uncore_dom *d, int pid, uint32_t *orig_max_khz)
{
	const char *root = sysfs_root ? sysfs_root : JS_SYSFS_DEFAULT;
	char name[64];
	struct entry e = {0}, old;
	int dfd, lfd, rc = d ? entry_name(name, sizeof(name), d->name) : -EINVAL;
	if (rc < 0)
		return rc;
	e.pid = pid ? pid : (int)getpid();
	if ((rc = js_proc_starttime(e.pid, &e.start)) < 0 || (rc = js_boot_id(e.boot, sizeof(e.boot))) < 0)
		return rc;
	if ((rc = js_state_open_locked(state_dir, true, &dfd, &lfd)) < 0)
		return rc;
	rc = entry_read(dfd, name, &old);
	if (rc == 0 && !strcmp(old.boot, e.boot)) {
		if (entry_alive(&old) && old.pid != e.pid) {
			js_state_unlock(dfd, lfd);
			return -EBUSY;
		}
		restore(root, d->name, &old); /* a dead owner's change undone */
		e.min_khz = old.min_khz;
		e.max_khz = old.max_khz;
	} else {
		struct js_uncore_dom now;
		rc = 0;
		if (read_khz(root, d->name, "min_freq_khz", &now.min_khz) < 0 ||
		    read_khz(root, d->name, "max_freq_khz", &now.max_khz) < 0)
			rc = -EIO;
		e.min_khz = now.min_khz;
		e.max_khz = now.max_khz;
	}
	if (rc == 0)
		rc = entry_write(dfd, name, &e);
	if (rc == 0 && orig_max_khz)
		*orig_max_khz = e.max_khz;
	js_state_unlock(dfd, lfd);
	return rc;
}

int js_uncore_journal_release(const char *state_dir, const char *sysfs_root,
			      const struct js_uncore_dom *d)
{
	const char *root = sysfs_root ? sysfs_root : JS_SYSFS_DEFAULT;
	char name[64], boot[40];
	struct entry e;
	int dfd, lfd, rc = d ? entry_name(name, sizeof(name), d->name) : -EINVAL;
	if (rc < 0)
		return rc;
	if ((rc = js_state_open_locked(state_dir, false, &dfd, &lfd)) < 0)
		return rc == -ENOENT ? 0 : rc;
	rc = entry_read(dfd, name, &e);
	if (rc == 0 && js_boot_id(boot, sizeof(boot)) == 0 && !strcmp(boot, e.boot))
		rc = restore(root, d->name, &e);
	else
		rc = rc == -ENOENT ? 0 : rc;
	if (rc == 0 || rc == -EINVAL)
		unlinkat(dfd, name, 0);
	js_state_unlock(dfd, lfd);
	return rc == -EINVAL ? 0 : rc;
}

int js_uncore_journal_recover(const char *state_dir, const char *sysfs_root, bool force,
			      struct js_uncore_recovery *out)
{
	const char *root = sysfs_root ? sysfs_root : JS_SYSFS_DEFAULT;
	char boot[40] = "";
	int dfd, lfd, dup;
	memset(out, 0, sizeof(*out));
	int rc = js_state_open_locked(state_dir, false, &dfd, &lfd);
	if (rc == -ENOENT)
		return 0;
	if (rc < 0)
		return rc;
	js_boot_id(boot, sizeof(boot));
	dup = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
	DIR *dir = dup >= 0 ? fdopendir(dup) : NULL;
	struct dirent *de;
	while (dir && (de = readdir(dir))) {
		struct entry e;
		const char *dom = de->d_name + strlen(PREFIX);
		if (strncmp(de->d_name, PREFIX, strlen(PREFIX)))
			continue;
		out->entries++;
		if (entry_read(dfd, de->d_name, &e) < 0 || strcmp(e.boot, boot)) {
			unlinkat(dfd, de->d_name, 0); /* torn, or of another boot */
			continue;
		}
		if (!force && entry_alive(&e)) {
			out->busy++;
			continue;
		}
		if (restore(root, dom, &e) < 0) {
			out->failed++;
			continue;
		}
		unlinkat(dfd, de->d_name, 0);
		out->restored++;
	}
	if (dir)
		closedir(dir);
	else if (dup >= 0)
		close(dup);
	js_state_unlock(dfd, lfd);
	return 0;
}
