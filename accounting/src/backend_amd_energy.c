/* amd_energy backend: the AMD hwmon energy driver under any sysfs root.
 *
 * <root>/class/hwmon/hwmonH/name is "amd_energy"; each counter is a pair
 * energyN_input (uJ, accumulated to 64 bits by the driver) and energyN_label,
 * "EsocketS" for a socket or "EcoreCCC" for one core. Only the socket
 * counters are zones (package S): a core's counter is part of its socket's,
 * so adding them would count the cores twice. The per-core counters are
 * summarised in one skip entry. There is no DRAM counter: DRAM is "not
 * measured" (js_zones_dram_why). Not in the default order: where powercap
 * has the AMD package zones it reads the same counter. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "js_internal.h"

#define AMD_LABEL_LEN 32

struct amd_priv {
	int fd[JS_MAX_ZONES];
};

/* Pure: "Esocket<S>" -> 0 and *socket; "Ecore<C>" -> 1 and *core; else -EINVAL. */
int js_amd_energy_label(const char *label, int *socket, int *core)
{
	const char *p;
	char *end;
	long v;

	if (!label)
		return -EINVAL;
	if (!strncmp(label, "Esocket", 7))
		p = label + 7;
	else if (!strncmp(label, "Ecore", 5))
		p = label + 5;
	else
		return -EINVAL;
	if (*p < '0' || *p > '9')
		return -EINVAL;
	errno = 0;
	v = strtol(p, &end, 10);
	if (errno || *end || v < 0 || v > 65535)
		return -EINVAL;
	if (p == label + 7) {
		*socket = (int)v;
		return 0;
	}
	*core = (int)v;
	return 1;
}

/* Add the socket counters of one amd_energy hwmon directory. */
static int add_hwmon(struct js_zone_set *zs, const char *dir, int *ncores)
{
	int n;

	for (n = 1; n <= 1024; n++) {
		char path[JS_PATH_LEN], label[AMD_LABEL_LEN];
		struct js_zone_info *z;
		int sock = -1, core = -1, kind;

		if (js_path(path, sizeof(path), "%s/energy%d_label", dir, n) < 0)
			return -ENAMETOOLONG;
		if (js_read_file(path, label, sizeof(label)) <= 0) {
			if (access(path, F_OK) == 0)
				continue;
			break; /* counters are numbered from 1 without gaps */
		}
		kind = js_amd_energy_label(label, &sock, &core);
		if (kind == 1) {
			(*ncores)++;
			continue;
		}
		if (kind < 0) {
			char id[JS_NAME_LEN];

			js_fmt(id, sizeof(id), "amd_energy-energy:%x", n);
			js_zone_set_skip(zs, id, label, "unknown amd_energy label");
			continue;
		}
		if (zs->nzones >= JS_MAX_ZONES)
			return -E2BIG;
		z = &zs->zones[zs->nzones];
		memset(z, 0, sizeof(*z));
		js_fmt(z->name, sizeof(z->name), "%s", label);
		js_fmt(z->id, sizeof(z->id), "amd_energy:%x", (unsigned)sock);
		if (js_path(z->path, sizeof(z->path), "%s/energy%d_input", dir, n) < 0)
			return -ENAMETOOLONG;
		z->kind = JS_ZONE_PACKAGE;
		z->package = sock;
		z->die = -1;
		z->depth = 1;
		z->index[0] = (uint32_t)sock;
		z->max_energy_range_uj = UINT64_MAX; /* the driver accumulates to 64 bits */
		z->max_power_uw = JS_DEFAULT_MAX_POWER_UW;
		zs->nzones++;
	}
	return 0;
}

/* Discover the amd_energy counters under <root>/class/hwmon. */
int js_amd_energy_discover(const char *sysfs_root, struct js_zone_set *zs)
{
	char base[JS_PATH_LEN];
	struct dirent *de;
	DIR *d;
	int rc = 0, ncores = 0;

	memset(zs, 0, sizeof(*zs));
	if (js_path(base, sizeof(base), "%s/class/hwmon", sysfs_root ? sysfs_root : JS_SYSFS_DEFAULT) < 0)
		return -ENAMETOOLONG;
	d = opendir(base);
	if (!d)
		return -errno;
	while (rc == 0 && (de = readdir(d))) {
		char dir[JS_PATH_LEN], name[JS_NAME_LEN], np[JS_PATH_LEN + 8];

		if (strncmp(de->d_name, "hwmon", 5))
			continue;
		if (js_path(dir, sizeof(dir), "%s/%s", base, de->d_name) < 0 ||
		    js_path(np, sizeof(np), "%s/name", dir) < 0)
			continue;
		if (js_read_file(np, name, sizeof(name)) <= 0 || strcmp(name, "amd_energy"))
			continue;
		rc = add_hwmon(zs, dir, &ncores);
	}
	closedir(d);
	if (rc < 0)
		return rc;
	if (ncores) {
		char why[JS_WHY_LEN];

		js_fmt(why, sizeof(why), "%d per-core counters are part of their socket's "
		       "(never added)", ncores);
		js_zone_set_skip(zs, "amd_energy-core:0", "Ecore", why);
	}
	js_zone_set_sort(zs);
	return zs->nzones ? 0 : -ENOENT;
}

static void amd_close(struct js_energy *e)
{
	struct amd_priv *p = e->priv;

	if (!p)
		return;
	for (size_t i = 0; i < e->zones.nzones; i++)
		if (p->fd[i] >= 0)
			close(p->fd[i]);
	free(p);
	e->priv = NULL;
}

static int amd_open(struct js_energy *e, const char *sysfs_root, char *why, size_t whylen)
{
	struct amd_priv *p;
	int rc = js_amd_energy_discover(sysfs_root, &e->zones);

	if (rc == -ENOENT) {
		js_fmt(why, whylen, "unavailable: no amd_energy socket counters under %s/class/hwmon",
		       sysfs_root ? sysfs_root : JS_SYSFS_DEFAULT);
		return -ENOENT;
	}
	if (rc < 0)
		return rc;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	for (size_t i = 0; i < JS_MAX_ZONES; i++)
		p->fd[i] = -1;
	e->priv = p;
	for (size_t i = 0; i < e->zones.nzones; i++) {
		p->fd[i] = open(e->zones.zones[i].path, O_RDONLY | O_CLOEXEC);
		if (p->fd[i] < 0) {
			rc = -errno;
			js_open_why(why, whylen, rc, e->zones.zones[i].path);
			amd_close(e);
			return rc;
		}
	}
	return 0;
}

static int amd_read(struct js_energy *e, uint64_t *raw_uj, int *err)
{
	struct amd_priv *p = e->priv;

	return js_read_counters(e, p->fd, raw_uj, err);
}

const struct js_backend_ops js_backend_amd_energy = {
	.name = "amd_energy",
	.open = amd_open,
	.read = amd_read,
	.close = amd_close,
};
