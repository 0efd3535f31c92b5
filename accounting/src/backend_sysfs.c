/* sysfs backend: plain powercap files under any sysfs root. The energy_uj
 * descriptors stay open and are read with pread (one syscall per zone). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "js_internal.h"

struct sysfs_priv {
	int fd[JS_MAX_ZONES];
};

static void sysfs_close(struct js_energy *e)
{
	struct sysfs_priv *p = e->priv;
	size_t i;

	if (!p)
		return;
	for (i = 0; i < e->zones.nzones; i++)
		if (p->fd[i] >= 0)
			close(p->fd[i]);
	free(p);
	e->priv = NULL;
}

static int sysfs_open(struct js_energy *e, const char *sysfs_root, char *why, size_t whylen)
{
	struct sysfs_priv *p;
	size_t i;
	int rc;

	rc = js_zones_discover(sysfs_root, &e->zones);
	if (rc == -ENOENT) {
		js_fmt(why, whylen, "unavailable: no RAPL zones under %s/class/powercap",
		       sysfs_root ? sysfs_root : JS_SYSFS_DEFAULT);
		return -ENOENT;
	}
	if (rc < 0)
		return rc;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	for (i = 0; i < JS_MAX_ZONES; i++)
		p->fd[i] = -1;
	e->priv = p;
	for (i = 0; i < e->zones.nzones; i++) {
		char path[JS_PATH_LEN + 16];

		if (js_path(path, sizeof(path), "%s/energy_uj", e->zones.zones[i].path) < 0) {
			sysfs_close(e);
			return -ENAMETOOLONG;
		}
		p->fd[i] = open(path, O_RDONLY | O_CLOEXEC);
		if (p->fd[i] < 0) {
			rc = -errno;
			js_open_why(why, whylen, rc, path);
			sysfs_close(e);
			return rc;
		}
	}
	return 0;
}

static int sysfs_read(struct js_energy *e, uint64_t *raw_uj, int *err)
{
	struct sysfs_priv *p = e->priv;

	return js_read_counters(e, p->fd, raw_uj, err);
}

const struct js_backend_ops js_backend_sysfs = {
	.name = "sysfs",
	.open = sysfs_open,
	.read = sysfs_read,
	.close = sysfs_close,
};
