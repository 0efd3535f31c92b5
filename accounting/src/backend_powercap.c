/* powercap backend: the zones of /sys/class/powercap (js_zones_discover),
 * opened by libpowercap.
 *
 * libpowercap hard-codes /sys/class/powercap, so this backend only works for
 * the real sysfs root. Counter values are read from the descriptor that
 * libpowercap opened, with our strict parser: libpowercap 0.6's read_u64
 * uses strtoull without checking the whole string, so a garbled file would
 * read as 0 (or a prefix) and look like a counter wrap. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <powercap/powercap.h>
#include <powercap/powercap-sysfs.h>

#include "js_internal.h"


struct pc_priv {
	powercap_zone pz[JS_MAX_ZONES];
	int fd[JS_MAX_ZONES]; /* pz[i].energy_uj, for js_read_counters */
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

static int pc_open(struct js_energy *e, const char *sysfs_root, char *why, size_t whylen)
{
	struct pc_priv *p;
	size_t i;
	int rc;

	if (sysfs_root && strcmp(sysfs_root, "/sys") && strcmp(sysfs_root, "/sys/")) {
		js_fmt(why, whylen, "unavailable: libpowercap reads only /sys/class/powercap");
		return -ENOTSUP;
	}
	/* The zones are found by the library's own discovery (one readdir and
	 * a few openat per zone, the same classifier), not by probing
	 * libpowercap's zone_exists for every possible index: this runs at
	 * every step start. libpowercap opens the counters. */
	rc = js_zones_discover(JS_SYSFS_DEFAULT, &e->zones);
	if (rc == -ENOENT) {
		js_fmt(why, whylen, "unavailable: no RAPL zones");
		return -ENOENT;
	}
	if (rc < 0)
		return rc;
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
			js_open_why(why, whylen, rc, z->path);
			pc_close(e);
			return rc;
		}
		p->fd[i] = fd;
	}
	return 0;
}

static int pc_read(struct js_energy *e, uint64_t *raw_uj, int *err)
{
	struct pc_priv *p = e->priv;

	return js_read_counters(e, p->fd, raw_uj, err);
}

const struct js_backend_ops js_backend_powercap = {
	.name = "powercap",
	.open = pc_open,
	.read = pc_read,
	.close = pc_close,
};
