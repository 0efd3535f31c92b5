/* RAPL zone classification and discovery, wrap-safe arithmetic. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "js_internal.h"

/* ---- pure ------------------------------------------------------------------ */

static int parse_uint(const char **p, int *out)
{
	long v = 0;
	const char *s = *p;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	while (*s >= '0' && *s <= '9') {
		v = v * 10 + (*s - '0');
		if (v > INT_MAX)
			return -ERANGE;
		s++;
	}
	*out = (int)v;
	*p = s;
	return 0;
}

int js_zone_parse_package(const char *name, int *pkg, int *die)
{
	const char *p = name;
	int n, m = -1;

	if (strncmp(p, "package-", 8) != 0)
		return -EINVAL;
	p += 8;
	if (parse_uint(&p, &n) < 0)
		return -EINVAL;
	if (strncmp(p, "-die-", 5) == 0) {
		p += 5;
		if (parse_uint(&p, &m) < 0)
			return -EINVAL;
	}
	if (*p != '\0')
		return -EINVAL;
	*pkg = n;
	*die = m;
	return 0;
}

int js_zone_classify(const char *control_type, const char *name, uint32_t depth,
		     enum js_zone_kind *kind, const char **why)
{
	int pkg, die;
	const char *w = NULL;

	if (!control_type || !name || !kind || !why)
		return -EINVAL;
	if (strcmp(control_type, "intel-rapl-mmio") == 0)
		w = "intel-rapl-mmio duplicates the MSR package zone";
	else if (strcmp(control_type, "intel-rapl") != 0)
		w = "not a RAPL control type";
	else if (strcmp(name, "psys") == 0)
		w = "psys overlaps the packages";
	else if (strcmp(name, "core") == 0)
		w = "core is nested inside a package (never added)";
	else if (strcmp(name, "uncore") == 0)
		w = "uncore is nested inside a package (never added)";
	else if (js_zone_parse_package(name, &pkg, &die) == 0) {
		if (depth == 1) {
			*kind = JS_ZONE_PACKAGE;
			return 0;
		}
		w = "package zone below the top level: unexpected layout";
	} else if (strcmp(name, "dram") == 0) {
		if (depth == 2) {
			*kind = JS_ZONE_DRAM;
			return 0;
		}
		w = "dram zone outside a package: unexpected layout";
	} else
		w = "unknown zone name";
	*why = w;
	return -ENOENT;
}

int js_wrap_delta_uj(uint64_t prev_uj, uint64_t cur_uj, uint64_t max_uj,
		     uint64_t *delta_uj, bool *wrapped)
{
	if (max_uj && (prev_uj > max_uj || cur_uj > max_uj))
		return -ERANGE;
	if (cur_uj >= prev_uj) {
		*delta_uj = cur_uj - prev_uj;
		*wrapped = false;
		return 0;
	}
	if (!max_uj)
		return -ERANGE; /* went backwards and no known range */
	*delta_uj = (max_uj - prev_uj) + cur_uj;
	*wrapped = true;
	return 0;
}

uint64_t js_wrap_time_ns(uint64_t max_energy_range_uj, uint64_t max_power_uw)
{
	unsigned __int128 t;

	if (!max_power_uw)
		max_power_uw = JS_DEFAULT_MAX_POWER_UW;
	/* uj / uw = seconds */
	t = (unsigned __int128)max_energy_range_uj * 1000000000u / max_power_uw;
	return t > UINT64_MAX ? UINT64_MAX : (uint64_t)t;
}

#define JS_MIN_PERIOD_NS 1000000ULL
#define JS_NO_ZONE_PERIOD_NS 1000000000ULL

uint64_t js_sample_period_ns(const struct js_zone_set *zs, uint64_t cap_ns)
{
	uint64_t p = UINT64_MAX;
	size_t i;

	for (i = 0; zs && i < zs->nzones; i++) {
		uint64_t h = js_wrap_time_ns(zs->zones[i].max_energy_range_uj,
					     zs->zones[i].max_power_uw) / 2;
		if (h < p)
			p = h;
	}
	if (p == UINT64_MAX && !cap_ns)
		p = JS_NO_ZONE_PERIOD_NS;
	if (cap_ns && cap_ns < p)
		p = cap_ns;
	if (p < JS_MIN_PERIOD_NS)
		p = JS_MIN_PERIOD_NS;
	return p;
}

int js_parse_energy_uj(const char *buf, size_t len, uint64_t max_uj, uint64_t *out_uj)
{
	uint64_t v;
	int rc;

	if (!buf || !out_uj)
		return -EINVAL;
	rc = js_parse_u64(buf, len, &v);
	if (rc < 0)
		return rc;
	if (max_uj && v > max_uj)
		return -ERANGE;
	*out_uj = v;
	return 0;
}

/* The counter readers (every backend's read) beside the strict parse they
 * use, so that util.c's file helpers and this file do not call each other. */
int js_read_counter_fd(int fd, uint64_t max_uj, uint64_t *out_uj)
{
	char buf[32];
	ssize_t n;

	*out_uj = 0;
	do {
		n = pread(fd, buf, sizeof(buf), 0);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if ((size_t)n == sizeof(buf))
		return -ERANGE; /* longer than any 64-bit number */
	return js_parse_energy_uj(buf, (size_t)n, max_uj, out_uj);
}

int js_read_counters(const struct js_energy *e, const int *fds, uint64_t *raw_uj, int *err)
{
	int first = 0;

	for (size_t i = 0; i < e->zones.nzones; i++) {
		err[i] = js_read_counter_fd(fds[i], e->zones.zones[i].max_energy_range_uj, &raw_uj[i]);
		if (err[i] && !first)
			first = err[i];
	}
	return first;
}

int js_zones_dram_why(const struct js_zone_set *zs, char *why, size_t whylen)
{
	const struct js_zone_info *bare = NULL;
	size_t i, j, npkg = 0, ndram = 0;

	if (!zs)
		return -EINVAL;
	for (i = 0; i < zs->nzones; i++) {
		const struct js_zone_info *p = &zs->zones[i];
		bool found = false;

		if (p->kind != JS_ZONE_PACKAGE)
			continue;
		npkg++;
		for (j = 0; j < zs->nzones && !found; j++)
			found = zs->zones[j].kind == JS_ZONE_DRAM &&
				zs->zones[j].package == p->package && zs->zones[j].die == p->die;
		if (found)
			ndram++;
		else if (!bare)
			bare = p;
	}
	if (npkg && ndram == npkg)
		return 0;
	if (!npkg)
		js_fmt(why, whylen, "no package zone");
	else if (ndram)
		js_fmt(why, whylen, "%s (%s) has no dram zone: DRAM energy of %zu of %zu "
		       "packages only", bare->name, bare->id, ndram, npkg);
	else
		js_fmt(why, whylen, "no dram zone: the energy source gives package energy "
		       "only (as AMD RAPL does)");
	return -ENOENT;
}

/* ---- sorting ---------------------------------------------------------------- */

/* Split "ctype:a:b" into control type and up to two hex indices. */
static int split_id(const char *id, char *ctype, size_t clen, uint32_t idx[2],
		    uint32_t *depth)
{
	const char *c = strchr(id, ':');
	uint32_t d = 0;

	if (!c || (size_t)(c - id) >= clen)
		return -EINVAL;
	memcpy(ctype, id, (size_t)(c - id));
	ctype[c - id] = '\0';
	while (c && *c == ':') {
		char *end;
		unsigned long v;

		if (d == 2 || !((c[1] >= '0' && c[1] <= '9') ||
				(c[1] >= 'a' && c[1] <= 'f')))
			return -EINVAL;
		errno = 0;
		v = strtoul(c + 1, &end, 16);
		if (errno || v > UINT32_MAX)
			return -EINVAL;
		idx[d++] = (uint32_t)v;
		c = end;
	}
	if (c && *c)
		return -EINVAL;
	*depth = d;
	return 0;
}

static int cmp_ids(const char *a, const char *b)
{
	char ca[JS_NAME_LEN], cb[JS_NAME_LEN];
	uint32_t ia[2] = {0, 0}, ib[2] = {0, 0}, da, db;
	int c;

	if (split_id(a, ca, sizeof(ca), ia, &da) < 0 ||
	    split_id(b, cb, sizeof(cb), ib, &db) < 0)
		return strcmp(a, b);
	c = strcmp(ca, cb);
	if (c)
		return c;
	if (ia[0] != ib[0])
		return ia[0] < ib[0] ? -1 : 1;
	if (da != db)
		return da < db ? -1 : 1;
	if (ia[1] != ib[1])
		return ia[1] < ib[1] ? -1 : 1;
	return 0;
}

static int cmp_zone(const void *a, const void *b)
{
	return cmp_ids(((const struct js_zone_info *)a)->id,
		       ((const struct js_zone_info *)b)->id);
}

static int cmp_skip(const void *a, const void *b)
{
	return cmp_ids(((const struct js_zone_skip *)a)->id,
		       ((const struct js_zone_skip *)b)->id);
}

void js_zone_set_sort(struct js_zone_set *zs)
{
	qsort(zs->zones, zs->nzones, sizeof(zs->zones[0]), cmp_zone);
	qsort(zs->skipped, zs->nskipped, sizeof(zs->skipped[0]), cmp_skip);
}

void js_zone_set_skip(struct js_zone_set *zs, const char *id, const char *name,
		      const char *why)
{
	struct js_zone_skip *s;

	if (zs->nskipped >= JS_MAX_SKIPPED)
		return;
	s = &zs->skipped[zs->nskipped++];
	js_fmt(s->id, sizeof(s->id), "%s", id);
	js_fmt(s->name, sizeof(s->name), "%s", name ? name : "");
	js_fmt(s->why, sizeof(s->why), "%s", why);
}

/* ---- discovery (file I/O) ---------------------------------------------------- *
 * Every file is opened relative to a directory fd (openat), with no
 * realpath(): a zone costs one openat per attribute read, not a path walk
 * through the sysfs symlinks. This runs at every step start. */

static int read_u64_at(int dfd, const char *name, uint64_t *out)
{
	char buf[64];
	ssize_t n = js_read_fileat(dfd, name, buf, sizeof(buf));

	if (n < 0)
		return (int)n;
	return js_parse_u64(buf, (size_t)n, out);
}

/* Examine one zone directory (zfd, shown as dir); its parent zone's name
 * file is pname relative to pfd (read only for a dram zone; pfd -1: none).
 * Add it to zs or record why it was skipped. */
static int add_zone(struct js_zone_set *zs, int zfd, const char *dir, const char *id, int pfd,
		    const char *pname_rel)
{
	char ctype[JS_NAME_LEN], name[JS_NAME_LEN], pname[JS_NAME_LEN];
	uint32_t idx[2] = {0, 0}, depth;
	enum js_zone_kind kind;
	const char *why;
	struct js_zone_info *z;
	uint64_t v;
	ssize_t n;

	if (split_id(id, ctype, sizeof(ctype), idx, &depth) < 0 || depth == 0) {
		js_zone_set_skip(zs, id, "", "not a zone id (control-type:N[:M])");
		return 0;
	}
	n = zfd >= 0 ? js_read_fileat(zfd, "name", name, sizeof(name)) : -EBADF;
	if (n <= 0) {
		js_zone_set_skip(zs, id, "", "no readable name file");
		return 0;
	}
	if (js_zone_classify(ctype, name, depth, &kind, &why) < 0) {
		js_zone_set_skip(zs, id, name, why);
		return 0;
	}
	if (zs->nzones >= JS_MAX_ZONES)
		return -E2BIG;
	z = &zs->zones[zs->nzones];
	memset(z, 0, sizeof(*z));
	js_fmt(z->name, sizeof(z->name), "%s", name);
	js_fmt(z->id, sizeof(z->id), "%s", id);
	js_fmt(z->path, sizeof(z->path), "%s", dir);
	z->kind = kind;
	z->depth = depth;
	z->index[0] = idx[0];
	z->index[1] = idx[1];
	z->die = -1;
	if (kind == JS_ZONE_PACKAGE) {
		js_zone_parse_package(name, &z->package, &z->die);
	} else {
		/* dram: the package is the parent's */
		z->package = -1;
		if (pfd >= 0 && js_read_fileat(pfd, pname_rel, pname, sizeof(pname)) > 0 &&
		    js_zone_parse_package(pname, &z->package, &z->die) == 0) {
			/* parent found */
		} else {
			js_zone_set_skip(zs, id, name, "dram zone whose parent is not a package");
			return 0;
		}
	}
	if (read_u64_at(zfd, "max_energy_range_uj", &v) < 0 || v == 0) {
		js_zone_set_skip(zs, id, name, "max_energy_range_uj missing or unreadable");
		return 0;
	}
	z->max_energy_range_uj = v;
	z->max_power_uw = JS_DEFAULT_MAX_POWER_UW;
	if (read_u64_at(zfd, "constraint_0_max_power_uw", &v) == 0 && v > 0)
		z->max_power_uw = v;
	zs->nzones++;
	return 0;
}

static bool is_zone_entry(const char *d_name)
{
	return strncmp(d_name, "intel-rapl", 10) == 0 && strchr(d_name, ':');
}

static int parent_id(const char *id, char *out, size_t len)
{
	const char *last = strrchr(id, ':');

	if (!last || last == strchr(id, ':'))
		return -EINVAL;
	if ((size_t)(last - id) >= len)
		return -ENAMETOOLONG;
	memcpy(out, id, (size_t)(last - id));
	out[last - id] = '\0';
	return 0;
}

static int open_dir_at(int dfd, const char *name)
{
	return openat(dfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

/* A readable directory stream on a dup of dfd (dfd stays the caller's). */
static DIR *dir_stream(int dfd)
{
	int fd = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;

	if (!d && fd >= 0)
		close(fd);
	return d;
}

static int discover_flat(int bfd, const char *base, struct js_zone_set *zs, int *nflat)
{
	DIR *d = dir_stream(bfd);
	struct dirent *de;
	int rc = 0;

	if (!d)
		return -errno;
	*nflat = 0;
	while (rc == 0 && (de = readdir(d))) {
		char dir[JS_PATH_LEN], pid[JS_NAME_LEN], pname[JS_NAME_LEN + 8];
		bool parent;
		int zfd;

		if (!is_zone_entry(de->d_name))
			continue;
		(*nflat)++;
		if (js_path(dir, sizeof(dir), "%s/%s", base, de->d_name) < 0)
			continue;
		zfd = open_dir_at(bfd, de->d_name);
		parent = parent_id(de->d_name, pid, sizeof(pid)) == 0 &&
			 js_path(pname, sizeof(pname), "%s/name", pid) == 0;
		rc = add_zone(zs, zfd, dir, de->d_name, parent ? bfd : -1, pname);
		if (zfd >= 0)
			close(zfd);
	}
	closedir(d);
	return rc;
}

/* Nested form: base/<ctype>/<ctype>:N/<ctype>:N:M */
static int discover_nested(int bfd, const char *base, struct js_zone_set *zs)
{
	static const char *const ctypes[] = {"intel-rapl", "intel-rapl-mmio"};
	size_t c;
	int rc = 0;

	for (c = 0; rc == 0 && c < sizeof(ctypes) / sizeof(ctypes[0]); c++) {
		int cfd = open_dir_at(bfd, ctypes[c]);
		DIR *d = cfd >= 0 ? dir_stream(cfd) : NULL;
		struct dirent *de;

		if (!d) {
			if (cfd >= 0)
				close(cfd);
			continue;
		}
		while (rc == 0 && (de = readdir(d))) {
			char zdir[JS_PATH_LEN];
			DIR *sd;
			struct dirent *se;
			size_t cl = strlen(ctypes[c]);
			int zfd;

			if (strncmp(de->d_name, ctypes[c], cl) || de->d_name[cl] != ':')
				continue;
			if (js_path(zdir, sizeof(zdir), "%s/%s/%s", base, ctypes[c], de->d_name) < 0)
				continue;
			zfd = open_dir_at(cfd, de->d_name);
			rc = add_zone(zs, zfd, zdir, de->d_name, -1, NULL);
			sd = zfd >= 0 ? dir_stream(zfd) : NULL;
			while (rc == 0 && sd && (se = readdir(sd))) {
				char sdir[JS_PATH_LEN];
				size_t pl = strlen(de->d_name);
				int sfd;

				if (strncmp(se->d_name, de->d_name, pl) || se->d_name[pl] != ':')
					continue;
				if (js_path(sdir, sizeof(sdir), "%s/%s", zdir, se->d_name) < 0)
					continue;
				sfd = open_dir_at(zfd, se->d_name);
				rc = add_zone(zs, sfd, sdir, se->d_name, zfd, "name");
				if (sfd >= 0)
					close(sfd);
			}
			if (sd)
				closedir(sd);
			if (zfd >= 0)
				close(zfd);
		}
		closedir(d);
		close(cfd);
	}
	return rc;
}

int js_zones_discover(const char *sysfs_root, struct js_zone_set *out)
{
	char base[JS_PATH_LEN], real[PATH_MAX];
	int rc, bfd, nflat = 0;

	if (!out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	if (!sysfs_root)
		sysfs_root = JS_SYSFS_DEFAULT;
	rc = js_path(base, sizeof(base), "%s/class/powercap", sysfs_root);
	if (rc < 0)
		return rc;
	/* zone paths are absolute: resolve a relative root once */
	if (base[0] != '/') {
		if (!realpath(base, real))
			return -errno;
		rc = js_path(base, sizeof(base), "%s", real);
		if (rc < 0)
			return rc;
	}
	bfd = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (bfd < 0)
		return -errno;
	rc = discover_flat(bfd, base, out, &nflat);
	if (rc == 0 && nflat == 0) {
		memset(out, 0, sizeof(*out));
		rc = discover_nested(bfd, base, out);
	}
	close(bfd);
	if (rc < 0)
		return rc;
	js_zone_set_sort(out);
	return out->nzones ? 0 : -ENOENT;
}
