/* The GPU clock journal: a thin user of the clock journal (journal.h), one
 * entry per GPU whose clock a process has locked:
 *
 *   <state_dir>/gpu-<uuid>   "pid starttime boot_id\n" of the process that locked it
 *
 * An entry exists only while a lock may be in force: written before the
 * lock, dropped after the unlock, and dropped again at once when the lock
 * was refused (a GPU that cannot change its clock was never changed). So a
 * GPU left locked by a process that died (kill -9) has an entry whose
 * owner is gone, and joulestep-restore (or the next owner) unlocks it.
 * Unlocking returns the GPU to the driver's default, which is also what a
 * reboot or a driver reload does: an entry of another boot is dropped. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gpu_internal.h"
#include "journal.h"
#include "js_internal.h"

#define PREFIX "gpu-"

/* "gpu-" + the UUID's [A-Za-z0-9-] characters: never a path. */
static int entry_name(char *buf, size_t len, const char *uuid)
{
	size_t n = strlen(PREFIX);

	if (!uuid || !*uuid || len < n + 2)
		return -EINVAL;
	memcpy(buf, PREFIX, n);
	for (; *uuid && n < len - 1; uuid++)
		if ((*uuid >= 'A' && *uuid <= 'Z') || (*uuid >= 'a' && *uuid <= 'z') ||
		    (*uuid >= '0' && *uuid <= '9') || *uuid == '-')
			buf[n++] = *uuid;
	buf[n] = '\0';
	return n > strlen(PREFIX) ? 0 : -EINVAL;
}

/* Under j's lock: name's entry for me, or -EBUSY for another live owner. */
static int acquire_in(struct js_journal *j, const char *name, const struct js_owner *me)
{
	char text[1024];
	struct js_owner old;
	int rc;

	if (js_read_fileat(j->dfd, name, text, sizeof(text)) > 0 && js_owner_parse(text, &old, NULL) == 0 &&
	    old.pid != me->pid && js_owner_alive(&old, j->boot))
		return -EBUSY; /* another live process has lowered this GPU */
	if ((rc = js_owner_format(me, text, sizeof(text) - 1)) < 0)
		return rc;
	strcat(text, "\n");
	return js_journal_put(j, name, text, false);
}

int js_gpu_journal_acquire(const char *state_dir, const char *uuid, int pid)
{
	char name[JS_GPU_UUID_LEN + 8];
	struct js_owner me;
	struct js_journal j;
	int rc = entry_name(name, sizeof(name), uuid);

	if (rc < 0 || (rc = js_owner_self(pid, &me)) < 0)
		return rc;
	if ((rc = js_journal_open(state_dir, true, &j)) < 0)
		return rc;
	rc = acquire_in(&j, name, &me);
	js_journal_close(&j);
	return rc;
}

int js_gpu_journal_release(const char *state_dir, const char *uuid)
{
	char name[JS_GPU_UUID_LEN + 8];
	struct js_journal j;
	int rc = entry_name(name, sizeof(name), uuid);

	if (rc < 0 || (rc = js_journal_open(state_dir, false, &j)) < 0)
		return rc;
	rc = unlinkat(j.dfd, name, 0) < 0 && errno != ENOENT ? -errno : 0;
	js_journal_close(&j);
	return rc;
}

/* A clock call the device refused: nothing was changed by it. */
static bool refused(int rc)
{
	return rc == -ENOSYS || rc == -EOPNOTSUPP || (rc == -EPERM && geteuid() == 0);
}

/* Journal every GPU of want in one pass of the journal (one lock, not one
 * per GPU: a boundary locks all of a step's GPUs at once); rc[i] set. */
static void acquire_n(const char *state_dir, struct js_gpus *g, const bool *want, int *rc)
{
	char name[JS_GPU_UUID_LEN + 8];
	struct js_owner me;
	struct js_journal j;
	size_t n = js_gpu_count(g);
	int first = js_owner_self(0, &me);

	if (first == 0)
		first = js_journal_open(state_dir, true, &j);
	for (size_t i = 0; i < n; i++) {
		if (!want[i] || rc[i])
			continue;
		rc[i] = first < 0 ? first : entry_name(name, sizeof(name), js_gpu_info(g, i)->uuid);
		if (rc[i] == 0)
			rc[i] = acquire_in(&j, name, &me);
	}
	if (first == 0)
		js_journal_close(&j);
}

void js_gpu_lock_journaled_n(const char *state_dir, struct js_gpus *g, const bool *want,
			     const uint32_t *lo_mhz, const uint32_t *hi_mhz, int *rc)
{
	size_t n = js_gpu_count(g);

	for (size_t i = 0; i < n; i++) {
		rc[i] = 0;
		if (want[i] && !js_gpu_can_lock(g, i)) { /* not asked: no entry, no call */
			js_gpu_set_error(g, "lock", g->be->no_lock_why ? g->be->no_lock_why
								  : "this GPU library cannot lock clocks", 0);
			rc[i] = -ENOSYS;
		}
	}
	acquire_n(state_dir, g, want, rc);
	for (size_t i = 0; i < n; i++) {
		int u;

		if (!want[i] || rc[i] || (rc[i] = js_gpu_lock_mhz(g, i, lo_mhz[i], hi_mhz[i])) == 0)
			continue;
		/* a partial lock: back to the default; the entry goes once nothing
		 * can be in force (the reset worked, or the device refuses both) */
		u = js_gpu_unlock(g, i);
		if (u == 0 || (refused(rc[i]) && refused(u)))
			js_gpu_journal_release(state_dir, js_gpu_info(g, i)->uuid);
	}
}

int js_gpu_lock_journaled(const char *state_dir, struct js_gpus *g, size_t i, uint32_t lo_mhz,
			  uint32_t hi_mhz)
{
	bool want[JS_MAX_GPUS] = {false};
	uint32_t lo[JS_MAX_GPUS] = {0}, hi[JS_MAX_GPUS] = {0};
	int rc[JS_MAX_GPUS];

	if (i >= js_gpu_count(g))
		return -EINVAL;
	want[i] = true;
	lo[i] = lo_mhz;
	hi[i] = hi_mhz;
	js_gpu_lock_journaled_n(state_dir, g, want, lo, hi, rc);
	return rc[i];
}

void js_gpu_unlock_journaled_n(const char *state_dir, struct js_gpus *g, const bool *want, int *rc)
{
	char name[JS_GPU_UUID_LEN + 8];
	struct js_journal j;
	size_t n = js_gpu_count(g);
	int jr;

	for (size_t i = 0; i < n; i++)
		if (want[i] && (rc[i] = js_gpu_unlock(g, i)) < 0 && refused(rc[i]))
			rc[i] = 0; /* refused: it never was locked */
	if ((jr = js_journal_open(state_dir, false, &j)) < 0) {
		for (size_t i = 0; i < n; i++)
			if (want[i] && rc[i] == 0)
				rc[i] = jr;
		return;
	}
	for (size_t i = 0; i < n; i++) /* an entry stays when its unlock failed */
		if (want[i] && rc[i] == 0 && entry_name(name, sizeof(name), js_gpu_info(g, i)->uuid) == 0 &&
		    unlinkat(j.dfd, name, 0) < 0 && errno != ENOENT)
			rc[i] = -errno;
	js_journal_close(&j);
}

int js_gpu_unlock_journaled(const char *state_dir, struct js_gpus *g, size_t i)
{
	bool want[JS_MAX_GPUS] = {false};
	int rc[JS_MAX_GPUS];

	if (i >= js_gpu_count(g))
		return -EINVAL;
	want[i] = true;
	js_gpu_unlock_journaled_n(state_dir, g, want, rc);
	return rc[i];
}

/* Index in g of the GPU whose entry name is name, or -1. */
static int gpu_of(struct js_gpus *g, const char *name)
{
	char mine[JS_GPU_UUID_LEN + 8];

	for (size_t i = 0; g && i < js_gpu_count(g); i++)
		if (entry_name(mine, sizeof(mine), js_gpu_info(g, i)->uuid) == 0 && !strcmp(mine, name))
			return (int)i;
	return -1;
}

struct undo_arg {
	struct js_gpus *g;
	int unknown;
};

static int undo(struct js_journal *j, const char *name, const char *text, void *arg)
{
	struct undo_arg *a = arg;
	int i = gpu_of(a->g, name), rc;

	(void)j;
	(void)text;
	if (i < 0) {
		a->unknown++; /* not a GPU this library sees: left for another */
		return 1;
	}
	rc = js_gpu_unlock(a->g, (size_t)i);
	return rc == 0 || refused(rc) ? 0 : rc; /* refused: it never was locked */
}

int js_gpu_journal_recover(const char *state_dir, struct js_gpus *g, bool force,
			   struct js_gpu_recovery *out)
{
	struct undo_arg a = {g, 0};
	struct js_journal_recovery r;
	int rc = js_journal_recover(state_dir, PREFIX, force, undo, &a, &r);

	memset(out, 0, sizeof(*out));
	out->entries = r.entries;
	out->restored = r.restored + r.dropped;
	out->busy = r.busy;
	out->unknown = a.unknown;
	out->failed = r.failed;
	return rc;
}

int js_gpu_journal_count(const char *state_dir)
{
	return js_journal_count(state_dir, PREFIX);
}
