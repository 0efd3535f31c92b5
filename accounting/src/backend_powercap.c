/* powercap backend: libpowercap enumerates, names and opens the zones.
 *
 * libpowercap hard-codes /sys/class/powercap, so this backend only works for
 * the real sysfs root. Counter values are read from the descriptor that
 * libpowercap opened, with our strict parser: libpowercap 0.6's read_u64
 * uses strtoull without checking the whole string, so a garbled file would
 * read as 0 (or a prefix) and look like a counter wrap. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <powercap/powercap.h>
#include <powercap/powercap-sysfs.h>

#include "js_internal.h"

#define PC_MAX_TOP 64
#define PC_MAX_SUB 16

struct pc_priv {
	powercap_zone pz[JS_MAX_ZONES];
};

static void pc_close(struct js_energy *e)
{
	struct pc_priv *p = e->priv;
	size_t i;

	if (!p)
		return;
	for (i = 0; i < e->zones.nzones; i++)
		if (p->pz[i].energy_uj > 0)
			close(p->pz[i].energy_uj);
	free(p);
	e->priv = NULL;
}

static void zone_id(char *buf, size_t len, const char *ct, const uint32_t *idx, uint32_t depth)
{
	if (depth == 1)
		js_fmt(buf, len, "%s:%x", ct, idx[0]);
	else
		js_fmt(buf, len, "%s:%x:%x", ct, idx[0], idx[1]);
}

/* Examine one zone with libpowercap; add or record the skip. */
static int pc_add(struct js_zone_set *zs, const char *ct, const uint32_t *idx,
		  uint32_t depth)
{
	char name[JS_NAME_LEN], id[JS_NAME_LEN], pname[JS_NAME_LEN], path[JS_PATH_LEN];
	char real[PATH_MAX];
	enum js_zone_kind kind;
	const char *why;
	struct js_zone_info *z;
	uint64_t v;
	int pkg = -1, die = -1;

	zone_id(id, sizeof(id), ct, idx, depth);
	if (powercap_sysfs_zone_get_name(ct, idx, depth, name, sizeof(name)) <= 0) {
		js_zone_set_skip(zs, id, "", "no readable name file");
		return 0;
	}
	if (js_zone_classify(ct, name, depth, &kind, &why) < 0) {
		js_zone_set_skip(zs, id, name, why);
		return 0;
	}
	if (kind == JS_ZONE_PACKAGE) {
		js_zone_parse_package(name, &pkg, &die);
	} else if (powercap_sysfs_zone_get_name(ct, idx, 1, pname, sizeof(pname)) <= 0 ||
		   js_zone_parse_package(pname, &pkg, &die) < 0) {
		js_zone_set_skip(zs, id, name, "dram zone whose parent is not a package");
		return 0;
	}
	if (powercap_sysfs_zone_get_max_energy_range_uj(ct, idx, depth, &v) < 0 || v == 0) {
		js_zone_set_skip(zs, id, name, "max_energy_range_uj missing or unreadable");
		return 0;
	}
	if (zs->nzones >= JS_MAX_ZONES)
		return -E2BIG;
	z = &zs->zones[zs->nzones++];
	memset(z, 0, sizeof(*z));
	js_fmt(z->name, sizeof(z->name), "%s", name);
	js_fmt(z->id, sizeof(z->id), "%s", id);
	if (depth == 1)
		js_fmt(path, sizeof(path), "/sys/class/powercap/%s/%s", ct, id);
	else
		js_fmt(path, sizeof(path), "/sys/class/powercap/%s/%s:%x/%s", ct, ct, idx[0], id);
	js_fmt(z->path, sizeof(z->path), "%s",
	       realpath(path, real) && strlen(real) < sizeof(z->path) ? real : path);
	z->kind = kind;
	z->package = pkg;
	z->die = die;
	z->depth = depth;
	z->index[0] = idx[0];
	z->index[1] = depth > 1 ? idx[1] : 0;
	z->max_energy_range_uj = v;
	z->max_power_uw = JS_DEFAULT_MAX_POWER_UW;
	if (powercap_sysfs_constraint_get_max_power_uw(ct, idx, depth, 0, &v) == 0 && v > 0)
		z->max_power_uw = v;
	return 0;
}

static int pc_enumerate(const char *ct, struct js_zone_set *zs)
{
	uint32_t idx[2];
	int rc = 0;

	if (powercap_sysfs_control_type_exists(ct) != 0)
		return 0;
	for (idx[0] = 0; rc == 0 && idx[0] < PC_MAX_TOP; idx[0]++) {
		if (powercap_sysfs_zone_exists(ct, idx, 1) != 0)
			continue;
		rc = pc_add(zs, ct, idx, 1);
		for (idx[1] = 0; rc == 0 && idx[1] < PC_MAX_SUB; idx[1]++)
			if (powercap_sysfs_zone_exists(ct, idx, 2) == 0)
				rc = pc_add(zs, ct, idx, 2);
	}
	return rc;
}

static int pc_open(struct js_energy *e, const char *sysfs_root, char *why, size_t whylen)
{
	struct pc_priv *p;
	size_t i;
	int rc;

	if (sysfs_root && strcmp(sysfs_root, "/sys") && strcmp(sysfs_root, "/sys/")) {
		js_fmt(why, whylen, "unavailable: libpowercap reads only /sys/class/powercap");
		return -ENOTSUP;
	}
	memset(&e->zones, 0, sizeof(e->zones));
	rc = pc_enumerate("intel-rapl", &e->zones);
	if (rc == 0)
		rc = pc_enumerate("intel-rapl-mmio", &e->zones);
	if (rc < 0)
		return rc;
	if (e->zones.nzones == 0) {
		js_fmt(why, whylen, "unavailable: no RAPL zones");
		return -ENOENT;
	}
	js_zone_set_sort(&e->zones);
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	e->priv = p;
	for (i = 0; i < e->zones.nzones; i++) {
		const struct js_zone_info *z = &e->zones.zones[i];
		int fd;

		fd = powercap_zone_file_open(&p->pz[i], POWERCAP_ZONE_FILE_ENERGY_UJ, "intel-rapl",
					     z->index, z->depth, O_RDONLY | O_CLOEXEC);
		if (fd <= 0) {
			rc = fd < 0 && errno ? -errno : -ENOENT;
			p->pz[i].energy_uj = 0;
			if (rc == -EACCES || rc == -EPERM)
				js_fmt(why, whylen, "no permission: energy counters are root-only");
			else
				js_fmt(why, whylen, "unavailable: cannot open %s energy_uj: %s",
				       z->id, strerror(-rc));
			pc_close(e);
			return rc;
		}
	}
	return 0;
}

static int pc_read(struct js_energy *e, uint64_t *raw_uj, int *err)
{
	struct pc_priv *p = e->priv;
	size_t i;
	int first = 0;

	for (i = 0; i < e->zones.nzones; i++) {
		char buf[32];
		ssize_t n;

		raw_uj[i] = 0;
		do {
			n = pread(p->pz[i].energy_uj, buf, sizeof(buf), 0);
		} while (n < 0 && errno == EINTR);
		if (n < 0)
			err[i] = -errno;
		else if ((size_t)n == sizeof(buf))
			err[i] = -ERANGE;
		else
			err[i] = js_parse_energy_uj(buf, (size_t)n,
						    e->zones.zones[i].max_energy_range_uj,
						    &raw_uj[i]);
		if (err[i] && !first)
			first = err[i];
	}
	return first;
}

const struct js_backend_ops js_backend_powercap = {
	.name = "powercap",
	.open = pc_open,
	.read = pc_read,
	.close = pc_close,
};
