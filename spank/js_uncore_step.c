/* +uncore-io: the uncore (mesh, memory controller) clock of the packages a
 * step owns whole is capped at the admin's uncore_io_mhz in flush and write
 * phases (docs/design.md, "Uncore clocks in I/O phases"). The uncore is one
 * clock per package (or die/TPMI domain) shared by every CPU on it, so a
 * package with a CPU outside the step is never touched. As for the cores:
 * the journal first (accounting/src/uncore.c), descriptors opened on
 * slurmstepd's main thread, the step thread only pwrites. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <slurm/spank.h>

#include "joulestep/uncore.h"
#include "js_cgroup_step.h"
#include "js_step.h"
#include "js_uncore_step.h"

static int open_max(const char *sysfs, const char *name)
{
	char path[JS_PATH_MAX + 128];
	snprintf(path, sizeof(path), "%s/devices/system/cpu/intel_uncore_frequency/%s/max_freq_khz",
		 sysfs, name);
	int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	return fd < 0 ? -errno : fd;
}

static int pwrite_khz(int fd, uint32_t khz)
{
	char v[16];
	int n = snprintf(v, sizeof(v), "%u", khz);
	return pwrite(fd, v, (size_t)n, 0) == n ? 0 : -errno;
}

/* One domain of an owned package: journal, then its descriptor. */
static void take(struct js_step *s, const struct js_uncore_dom *d)
{
	uint32_t orig = 0;
	int rc = js_uncore_journal_acquire(s->conf.state, s->conf.sysfs, d, (int)getpid(), &orig);
	if (rc < 0) {
		js_step_error(s, "uncore: %s: %s; uncore clock left alone", d->name,
			      rc == -EBUSY ? "held by another step" : strerror(-rc));
		return;
	}
	int fd = open_max(s->conf.sysfs, d->name);
	if (fd < 0) {
		js_step_error(s, "uncore: %s: open max_freq_khz: %s; uncore clock left alone", d->name,
			      strerror(-fd));
		js_uncore_journal_release(s->conf.state, s->conf.sysfs, d);
		return;
	}
	struct js_uncore_step_dom *u = &s->uncore[s->nuncore++];
	snprintf(u->name, sizeof(u->name), "%s", d->name);
	u->fd = fd;
	u->entry_khz = orig;
	u->cap_khz = js_uncore_cap_khz(d, s->conf.uncore_io_mhz * 1000u, orig);
}

void js_uncore_step_setup(struct js_step *s)
{
	if (!s->policy.uncore_io || !s->conf.uncore_io_mhz)
		return;
	struct js_uncore_dom *d = calloc(JS_UNCORE_MAX, sizeof(*d));
	int n = d ? js_uncore_list(s->conf.sysfs, d, JS_UNCORE_MAX) : -ENOMEM;
	if (n <= 0) {
		js_step_error(s, "uncore: %s; +uncore-io not applied",
			      n == 0 ? "no intel_uncore_frequency on this node" : strerror(-n));
		free(d);
		return;
	}
	s->uncore = calloc((size_t)n, sizeof(*s->uncore));
	for (int i = 0; s->uncore && i < n; i++) {
		if (d[i].pkg >= JS_MAX_CPUS || !js_cpuset_isset(&s->pkgs_owned, d[i].pkg)) {
			js_step_error(s, "uncore: package %d has CPUs outside the step; its uncore clock (%s) left alone",
				      d[i].pkg, d[i].name);
			continue;
		}
		take(s, &d[i]);
	}
	free(d);
}

int js_uncore_step_set(void *ctx, bool low, uint32_t *khz)
{
	struct js_step *s = ctx;
	int rc = 0;
	*khz = 0;
	if (low && js_cgroup_step_vetoed(s))
		return 0; /* the step's cpuset disagrees: no clock lowered */
	for (int i = 0; i < s->nuncore; i++) {
		struct js_uncore_step_dom *u = &s->uncore[i];
		int r = pwrite_khz(u->fd, low ? u->cap_khz : u->entry_khz);
		if (r < 0)
			rc = r;
		else if (low && !*khz)
			*khz = u->cap_khz;
	}
	return rc;
}

void js_uncore_step_restore(struct js_step *s)
{
	for (int i = 0; i < s->nuncore; i++) {
		struct js_uncore_step_dom *u = &s->uncore[i];
		struct js_uncore_dom d = {0};
		snprintf(d.name, sizeof(d.name), "%s", u->name);
		pwrite_khz(u->fd, u->entry_khz);
		close(u->fd);
		int rc = js_uncore_journal_release(s->conf.state, s->conf.sysfs, &d);
		if (rc < 0)
			js_step_error(s, "uncore: %s: restore: %s", u->name, strerror(-rc));
	}
	s->nuncore = 0;
	free(s->uncore);
	s->uncore = NULL;
}

void js_uncore_recover_node(const struct js_conf *c, uint32_t jobid, const char *when)
{
	struct js_uncore_recovery r;
	memset(&r, 0, sizeof(r));
	int rc = js_uncore_journal_recover(c->state, c->sysfs, false, &r);
	if (rc < 0 && rc != -ENOENT)
		slurm_error("joulestep: job %u: %s: recover uncore clocks: %s", jobid, when,
			    strerror(-rc));
	if (r.restored)
		slurm_info("joulestep: job %u: %s: restored %d uncore clock(s) left changed by a killed step",
			   jobid, when, r.restored);
	if (r.failed)
		slurm_error("joulestep: job %u: %s: recover uncore clocks: %d could not be written back (the journal keeps them for the next prolog, epilog or joulestep-restore)",
			    jobid, when, r.failed);
}
