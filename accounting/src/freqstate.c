/* Crash-safe save/restore journal for CPU frequency settings.
 *
 * <state_dir>/lock               flock()ed around every operation
 * <state_dir>/cpuN.orig          original settings; created with link(), so an
 *                                existing backup is never overwritten
 * <state_dir>/cpuN.owners/<own>  "pid starttime\n", one file per owner
 * Every file is written tmp + link/rename, every open is relative to the
 * verified directory fd with O_NOFOLLOW|O_CLOEXEC.
 *
 * No fsync: cpufreq settings do not survive a reboot, so the journal only
 * has to be right within the boot that wrote it, where the page cache is the
 * truth whatever happens to a process (a killed slurmstepd loses nothing it
 * wrote). Each backup records that boot (boot_id); a backup of another boot
 * describes hardware settings that are gone, and is dropped, never
 * replayed. A file a crash left torn can only be of another boot: one that
 * does not parse is dropped the same way. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fsutil.h"
#include "journal.h"
#include "js_internal.h"
#include "sampler.h"

/* ---- pure: backup record ------------------------------------------------------ */

static bool gov_ok(const char *g)
{
	size_t i, n = strlen(g);

	if (n == 0 || n >= JS_GOV_LEN)
		return false;
	for (i = 0; i < n; i++)
		if (!((g[i] >= 'a' && g[i] <= 'z') || (g[i] >= 'A' && g[i] <= 'Z') ||
		      (g[i] >= '0' && g[i] <= '9') || g[i] == '_' || g[i] == '-'))
			return false;
	return true;
}

int js_freq_saved_format(const struct js_freq_saved *s, char *buf, size_t len)
{
	int n;

	if (!s || !buf || !gov_ok(s->governor) || s->cpu < 0 ||
	    (s->boot_id[0] && !js_boot_id_ok(s->boot_id)))
		return -EINVAL;
	n = snprintf(buf, len, "cpu=%d\ngovernor=%s\nmin_khz=%u\nmax_khz=%u\nsetspeed_khz=%u\n%s%s%s",
		     s->cpu, s->governor, s->min_khz, s->max_khz, s->setspeed_khz,
		     s->boot_id[0] ? "boot_id=" : "", s->boot_id, s->boot_id[0] ? "\n" : "");
	if (n < 0 || (size_t)n >= len)
		return -ENOSPC;
	return 0;
}

static int parse_u32(const char *v, uint32_t *out)
{
	uint64_t x;
	int rc = js_parse_u64(v, strlen(v), &x);

	if (rc < 0 || x > UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)x;
	return 0;
}

int js_freq_saved_parse(const char *buf, struct js_freq_saved *out)
{
	struct js_freq_saved s;
	unsigned seen = 0;
	const char *p = buf;

	if (!buf || !out)
		return -EINVAL;
	memset(&s, 0, sizeof(s));
	while (*p) {
		char line[128], *eq;
		size_t n = strcspn(p, "\n");
		uint32_t v;

		if (n >= sizeof(line))
			return -EINVAL;
		memcpy(line, p, n);
		line[n] = '\0';
		p += n;
		if (*p == '\n')
			p++;
		if (n == 0)
			continue;
		eq = strchr(line, '=');
		if (!eq)
			return -EINVAL;
		*eq++ = '\0';
		if (!strcmp(line, "governor")) {
			if (!gov_ok(eq))
				return -EINVAL;
			js_fmt(s.governor, sizeof(s.governor), "%s", eq);
			seen |= 1;
			continue;
		}
		if (!strcmp(line, "boot_id")) { /* optional: absent in older backups */
			if (!js_boot_id_ok(eq) || s.boot_id[0])
				return -EINVAL;
			js_fmt(s.boot_id, sizeof(s.boot_id), "%s", eq);
			continue;
		}
		if (parse_u32(eq, &v) < 0)
			return -EINVAL;
		if (!strcmp(line, "cpu") && v < JS_MAX_CPUS) {
			s.cpu = (int)v;
			seen |= 2;
		} else if (!strcmp(line, "min_khz")) {
			s.min_khz = v;
			seen |= 4;
		} else if (!strcmp(line, "max_khz")) {
			s.max_khz = v;
			seen |= 8;
		} else if (!strcmp(line, "setspeed_khz")) {
			s.setspeed_khz = v;
			seen |= 16;
		} else {
			return -EINVAL;
		}
	}
	if (seen != 31 || s.min_khz == 0 || s.max_khz < s.min_khz)
		return -EINVAL;
	*out = s;
	return 0;
}

/* ---- the state directory --------------------------------------------------------- */

static bool owner_ok(const char *o)
{
	size_t i, n;

	if (!o)
		return false;
	n = strlen(o);
	if (n == 0 || n > 64 || o[0] == '.')
		return false;
	for (i = 0; i < n; i++)
		if (!((o[i] >= 'a' && o[i] <= 'z') || (o[i] >= 'A' && o[i] <= 'Z') ||
		      (o[i] >= '0' && o[i] <= '9') || o[i] == '_' || o[i] == '-' || o[i] == '.'))
			return false;
	return true;
}

/* Open cpuN.owners (creating it when asked) as a verified directory fd. */
static int open_owners(int dfd, int cpu, bool create)
{
	char name[32];
	int fd;

	js_fmt(name, sizeof(name), "cpu%d.owners", cpu);
	if (create && mkdirat(dfd, name, 0700) < 0 && errno != EEXIST)
		return -errno;
	fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ELOOP || errno == ENOTDIR ? -EPERM : -errno;
	if (js_check_dirfd(fd) < 0) {
		close(fd);
		return -EPERM;
	}
	return fd;
}

/* Process still the one that registered ("pid starttime ...")? */
static bool owner_alive(int odfd, const char *name)
{
	char buf[64];
	struct js_owner o = {0};

	return js_read_fileat(odfd, name, buf, sizeof(buf)) > 0 &&
	       sscanf(buf, "%d %llu", &o.pid, &o.start) == 2 && o.pid > 0 &&
	       js_owner_alive(&o, NULL);
}

struct prune {
	bool prune, force;
	int n;
};

static int count_one(int odfd, const char *name, void *arg)
{
	struct prune *p = arg;

	if (name[0] == '.')
		return 0;
	if (p->prune && (p->force || !owner_alive(odfd, name)) && unlinkat(odfd, name, 0) == 0)
		return 0;
	p->n++;
	return 0;
}

/* Count owners (entries without a leading dot), optionally dropping dead
 * ones (or all with force). */
static int count_owners(int odfd, bool prune, bool force)
{
	struct prune p = {prune, force, 0};
	int rc = js_dir_foreach(odfd, count_one, &p);

	return rc < 0 ? rc : p.n;
}

static int restore_cpu(const char *sysfs_root, const struct js_freq_saved *s);

/* An owner file: "pid starttime seq\n" and then the settings in force when
 * it registered (the js_freq_saved format): what the owner returns to, and
 * what its death gives back. seq is CLOCK_MONOTONIC ns at registration, so
 * owners are ordered within a boot. Older files hold "pid starttime". */
struct owner_info {
	char name[72];
	bool alive, has_entry;
	unsigned long long seq;
	struct js_freq_saved entry;
};

#define JS_MAX_OWNERS 256

static void owner_read(int odfd, const char *name, struct owner_info *o)
{
	char buf[512];
	unsigned long long st;
	int pid, off = 0;

	memset(o, 0, sizeof(*o));
	js_fmt(o->name, sizeof(o->name), "%s", name);
	o->alive = owner_alive(odfd, name);
	if (js_read_fileat(odfd, name, buf, sizeof(buf)) <= 0)
		return;
	if (sscanf(buf, "%d %llu %llu%n", &pid, &st, &o->seq, &off) == 3 && buf[off] == '\n')
		o->has_entry = js_freq_saved_parse(buf + off + 1, &o->entry) == 0;
	else
		o->seq = 0;
}

/* Pure: the settings to write back for dead owners, given every owner of a
 * CPU. Only dead owners registered after the newest live one have changes
 * in force; the oldest of them found the clock as the live owners expect
 * it. false: none to undo (no dead owner above a live one, no live owner at
 * all: the backup is the answer, or an older file without its entry). */
static bool undo_for_dead(const struct owner_info *o, int n, struct js_freq_saved *out)
{
	unsigned long long live_top = 0;
	int nlive = 0, pick = -1;

	for (int i = 0; i < n; i++)
		if (o[i].alive) {
			nlive++;
			if (o[i].seq > live_top)
				live_top = o[i].seq;
		}
	if (!nlive)
		return false;
	for (int i = 0; i < n; i++)
		if (!o[i].alive && o[i].seq > live_top && (pick < 0 || o[i].seq < o[pick].seq))
			pick = i;
	if (pick < 0 || !o[pick].has_entry)
		return false;
	*out = o[pick].entry;
	return true;
}

struct owners {
	struct owner_info *o;
	int n;
};

static int read_one(int odfd, const char *name, void *arg)
{
	struct owners *a = arg;

	if (name[0] != '.' && a->n < JS_MAX_OWNERS)
		owner_read(odfd, name, &a->o[a->n++]);
	return 0;
}

/* Drop cpu's dead owners, first undoing their changes back to what the live
 * owners expect (undo_for_dead). Returns the live owners' count (or
 * -errno); *ndead the dead ones dropped. */
static int settle_owners(int odfd, const char *sysfs_root, int cpu, const char *boot, int *ndead)
{
	struct owner_info *o = calloc(JS_MAX_OWNERS, sizeof(*o));
	struct js_freq_saved undo;
	struct owners all = {o, 0};
	int n, nlive = 0, rc = 0;

	*ndead = 0;
	if (!o)
		return -ENOMEM;
	if ((rc = js_dir_foreach(odfd, read_one, &all)) < 0) {
		free(o);
		return rc;
	}
	n = all.n;
	if (undo_for_dead(o, n, &undo) && undo.cpu == cpu &&
	    (!undo.boot_id[0] || !boot[0] || !strcmp(undo.boot_id, boot)))
		rc = restore_cpu(sysfs_root, &undo);
	for (int i = 0; i < n; i++) {
		if (o[i].alive)
			nlive++;
		else if (rc == 0 && unlinkat(odfd, o[i].name, 0) == 0)
			(*ndead)++; /* kept when the undo failed: a later pass retries */
	}
	free(o);
	return rc < 0 ? rc : nlive;
}

static int saved_read_at(int dfd, int cpu, struct js_freq_saved *out)
{
	char name[32], buf[512];
	ssize_t n;
	int rc;

	js_fmt(name, sizeof(name), "cpu%d.orig", cpu);
	n = js_read_fileat(dfd, name, buf, sizeof(buf));
	if (n < 0)
		return (int)n;
	rc = js_freq_saved_parse(buf, out);
	if (rc == 0 && out->cpu != cpu)
		rc = -EINVAL;
	return rc;
}

/* Restore: max before min, then governor, then setspeed when userspace. */
static int restore_cpu(const char *sysfs_root, const struct js_freq_saved *s)
{
	struct js_cpufreq now;
	int rc, first = 0;

	rc = js_domain_write_khz(sysfs_root, s->cpu, "scaling_max_freq", s->max_khz);
	if (rc < 0 && !first)
		first = rc;
	rc = js_domain_write_khz(sysfs_root, s->cpu, "scaling_min_freq", s->min_khz);
	if (rc < 0 && !first)
		first = rc;
	if (js_cpufreq_read_domain(sysfs_root, s->cpu, &now) < 0 || strcmp(now.governor, s->governor)) {
		char g[JS_GOV_LEN + 2];

		js_fmt(g, sizeof(g), "%s\n", s->governor);
		rc = js_domain_write(sysfs_root, s->cpu, "scaling_governor", g);
		if (rc < 0 && !first)
			first = rc;
	}
	if (!strcmp(s->governor, "userspace") && s->setspeed_khz) {
		rc = js_domain_write_khz(sysfs_root, s->cpu, "scaling_setspeed", s->setspeed_khz);
		if (rc < 0 && !first)
			first = rc;
	}
	return first;
}

/* Restore cpu from its backup and delete the backup (and owners dir).
 * The backup stays when restoring fails, so a later recover retries. */
static int restore_and_drop(int dfd, const char *sysfs_root, int cpu)
{
	struct js_freq_saved s;
	char name[32];
	int rc = saved_read_at(dfd, cpu, &s);

	if (rc < 0)
		return rc;
	rc = restore_cpu(sysfs_root, &s);
	if (rc < 0)
		return rc;
	js_fmt(name, sizeof(name), "cpu%d.owners", cpu);
	unlinkat(dfd, name, AT_REMOVEDIR);
	js_fmt(name, sizeof(name), "cpu%d.orig", cpu);
	if (unlinkat(dfd, name, 0) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

/* Drop cpu's backup and owners without restoring anything (a backup of
 * another boot). */
static void drop_stale(int dfd, int cpu)
{
	char name[32];
	int odfd = open_owners(dfd, cpu, false);

	if (odfd >= 0) {
		count_owners(odfd, true, true);
		close(odfd);
	}
	js_fmt(name, sizeof(name), "cpu%d.owners", cpu);
	unlinkat(dfd, name, AT_REMOVEDIR);
	js_fmt(name, sizeof(name), "cpu%d.orig", cpu);
	unlinkat(dfd, name, 0);
}

/* Is cpu's backup one to drop unreplayed: of another boot, or torn? */
static bool backup_stale(int dfd, int cpu, const char *boot)
{
	struct js_freq_saved s;
	int rc = saved_read_at(dfd, cpu, &s);

	if (rc == -ENOENT)
		return false;
	if (rc < 0)
		return true; /* unparseable: only a crash of another boot leaves that */
	return boot[0] && s.boot_id[0] && strcmp(boot, s.boot_id);
}

/* ---- public ------------------------------------------------------------------------ */

int js_freq_acquire(const char *state_dir, const char *sysfs_root, int cpu,
		    const char *owner, int pid)
{
	return js_freq_acquire_saved(state_dir, sysfs_root, cpu, owner, pid, NULL);
}

int js_freq_acquire_saved(const char *state_dir, const char *sysfs_root, int cpu,
			  const char *owner, int pid, struct js_freq_saved *saved)
{
	return js_freq_acquire_entry(state_dir, sysfs_root, cpu, owner, pid, saved, NULL);
}

int js_freq_acquire_entry(const char *state_dir, const char *sysfs_root, int cpu,
			  const char *owner, int pid, struct js_freq_saved *saved,
			  struct js_freq_saved *entry)
{
	struct js_cpufreq f;
	struct js_freq_saved s;
	unsigned long long st;
	char buf[256], obuf[320], name[32];
	struct js_journal j;
	int dfd, odfd, rc;

	if (cpu < 0 || cpu >= JS_MAX_CPUS || !owner_ok(owner) || pid < 0)
		return -EINVAL;
	if (pid == 0)
		pid = (int)getpid();
	rc = js_proc_starttime(pid, &st);
	if (rc < 0)
		return rc;
	memset(&s, 0, sizeof(s));
	if (js_boot_id(s.boot_id, sizeof(s.boot_id)) < 0)
		s.boot_id[0] = '\0'; /* no /proc boot_id: backups stay boot-less */
	rc = js_journal_open(state_dir, true, &j);
	dfd = j.dfd;
	if (rc < 0)
		return rc;
	if (backup_stale(dfd, cpu, s.boot_id))
		drop_stale(dfd, cpu);
	/* dead owners' changes are undone before the settings in force are read
	 * (issue 23, defect 2); when they were the only owners, the original */
	odfd = open_owners(dfd, cpu, false);
	if (odfd >= 0) {
		int ndead = 0, nlive = settle_owners(odfd, sysfs_root, cpu, s.boot_id, &ndead);

		close(odfd);
		if (nlive == 0 && ndead > 0)
			restore_and_drop(dfd, sysfs_root, cpu);
	}
	rc = js_cpufreq_read_domain(sysfs_root, cpu, &f);
	if (rc < 0)
		goto out;
	s.cpu = cpu;
	js_fmt(s.governor, sizeof(s.governor), "%s", f.governor);
	s.min_khz = f.scaling_min_khz;
	s.max_khz = f.scaling_max_khz;
	s.setspeed_khz = f.setspeed_khz;
	rc = js_freq_saved_format(&s, buf, sizeof(buf));
	if (rc < 0)
		goto out;
	if (entry)
		*entry = s; /* what is in force now, read under the lock */
	js_fmt(name, sizeof(name), "cpu%d.orig", cpu);
	rc = js_write_atomic(dfd, name, buf, strlen(buf), 0600, (uid_t)-1, (gid_t)-1,
			     JS_ATOMIC_HIDDEN_TMP | JS_ATOMIC_NO_REPLACE);
	if (rc == -EEXIST)
		rc = 0; /* keep the existing (older, truly original) backup */
	if (rc < 0)
		goto out;
	if (saved) {
		rc = saved_read_at(dfd, cpu, saved);
		if (rc < 0)
			goto out;
	}
	odfd = open_owners(dfd, cpu, true);
	if (odfd < 0) {
		rc = odfd;
		goto out;
	}
	js_fmt(obuf, sizeof(obuf), "%d %llu %llu\n%s", pid, st, (unsigned long long)js_mono_ns(), buf);
	rc = js_write_atomic(odfd, owner, obuf, strlen(obuf), 0600, (uid_t)-1, (gid_t)-1,
			     JS_ATOMIC_HIDDEN_TMP);
	close(odfd);
out:
	js_journal_close(&j);
	return rc;
}

int js_freq_release(const char *state_dir, const char *sysfs_root, int cpu,
		    const char *owner, bool *restored)
{
	char boot[JS_BOOT_ID_LEN];
	struct js_journal j;
	int dfd, odfd, rc, n, ndead;

	if (restored)
		*restored = false;
	if (cpu < 0 || cpu >= JS_MAX_CPUS || !owner_ok(owner))
		return -EINVAL;
	rc = js_journal_open(state_dir, false, &j);
	dfd = j.dfd;
	if (rc < 0)
		return rc;
	odfd = open_owners(dfd, cpu, false);
	if (odfd < 0) {
		rc = odfd == -ENOENT ? -ENOENT : odfd;
		goto out;
	}
	if (unlinkat(odfd, owner, 0) < 0) {
		rc = -errno;
		close(odfd);
		goto out;
	}
	/* owners whose process died (a killed slurmstepd) do not hold the CPU:
	 * their changes are undone for the live ones, and the last live owner
	 * restores the original */
	if (js_boot_id(boot, sizeof(boot)) < 0)
		boot[0] = '\0';
	n = settle_owners(odfd, sysfs_root, cpu, boot, &ndead);
	close(odfd);
	if (n < 0) {
		rc = n;
		goto out;
	}
	if (n == 0) {
		rc = restore_and_drop(dfd, sysfs_root, cpu);
		if (rc == 0 && restored)
			*restored = true;
	}
out:
	js_journal_close(&j);
	return rc;
}

/* cpuN.orig into sets[0], cpuN.owners into sets[1]. */
static int scan_one(int dfd, const char *name, void *arg)
{
	struct js_cpuset *sets = arg;
	char rest[16];
	int cpu;

	(void)dfd;
	if (sscanf(name, "cpu%d.%15s", &cpu, rest) != 2 || cpu < 0 || cpu >= JS_MAX_CPUS)
		return 0;
	if (!strcmp(rest, "owners"))
		js_cpuset_set(&sets[1], cpu);
	else if (!strcmp(rest, "orig"))
		js_cpuset_set(&sets[0], cpu);
	return 0;
}

int js_freq_recover(const char *state_dir, const char *sysfs_root, bool force,
		    int *nrestored)
{
	struct js_cpuset sets[2]; /* backups, owned */
	struct js_journal j;
	char boot[JS_BOOT_ID_LEN];
	int dfd, rc, first = 0, cpu, count = 0;

	if (nrestored)
		*nrestored = 0;
	rc = js_journal_open(state_dir, false, &j);
	dfd = j.dfd;
	if (rc == -ENOENT)
		return 0; /* nothing was ever saved */
	if (rc < 0)
		return rc;
	js_cpuset_zero(&sets[0]);
	js_cpuset_zero(&sets[1]);
	if ((rc = js_dir_foreach(dfd, scan_one, sets)) < 0)
		goto out;
	if (js_boot_id(boot, sizeof(boot)) < 0)
		boot[0] = '\0';
	for (cpu = 0; cpu < JS_MAX_CPUS; cpu++) {
		bool backup = js_cpuset_isset(&sets[0], cpu);
		int odfd, n = 0, ndead;

		if (backup && backup_stale(dfd, cpu, boot)) {
			drop_stale(dfd, cpu);
			continue;
		}
		if (js_cpuset_isset(&sets[1], cpu) && (odfd = open_owners(dfd, cpu, false)) >= 0) {
			/* dead owners: undone for the live ones (or all dropped with force) */
			n = force ? count_owners(odfd, true, true)
				  : settle_owners(odfd, sysfs_root, cpu, boot, &ndead);
			close(odfd);
		}
		if (!backup || n != 0)
			continue; /* still owned (or unreadable: leave it) */
		rc = restore_and_drop(dfd, sysfs_root, cpu);
		if (rc == 0)
			count++;
		else if (!first)
			first = rc;
	}
	rc = first;
out:
	if (nrestored)
		*nrestored = count;
	js_journal_close(&j);
	return rc;
}

int js_freq_saved_read(const char *state_dir, int cpu, struct js_freq_saved *out)
{
	int dfd, rc;

	if (!out || cpu < 0 || cpu >= JS_MAX_CPUS)
		return -EINVAL;
	dfd = js_root_dirfd(state_dir, 0700, false);
	if (dfd < 0)
		return dfd;
	rc = saved_read_at(dfd, cpu, out);
	close(dfd);
	return rc;
}
