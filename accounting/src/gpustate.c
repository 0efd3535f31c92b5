/* The GPU clock journal: one root-only file per GPU whose clocks a process
 * has locked, in the same state directory and under the same lock as the CPU
 * journal (freqstate.c):
 *
 *   <state_dir>/gpu-<uuid>   "pid starttime\n" of the process that locked it
 *
 * Written before the lock, removed after the unlock, so a GPU left locked by
 * a process that died (kill -9) has an entry whose owner is gone, and
 * joulestep-restore (or the next owner) unlocks it. Unlocking returns the
 * GPU to the driver's default, which is also what a reboot or a driver
 * reload does: the entry needs no fsync. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "joulestep/gpu.h"
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

/* 1 when the entry's owner is the same process still, 0 when it is gone. */
static int owner_alive(int dfd, const char *name, int *pid_out)
{
	char buf[64];
	int pid;
	unsigned long long st, now;

	*pid_out = 0;
	if (js_read_fileat(dfd, name, buf, sizeof(buf)) <= 0 || sscanf(buf, "%d %llu", &pid, &st) != 2 ||
	    pid <= 0)
		return 0;
	*pid_out = pid;
	return js_proc_starttime(pid, &now) == 0 && now == st;
}

int js_gpu_journal_acquire(const char *state_dir, const char *uuid, int pid)
{
	char name[JS_GPU_UUID_LEN + 8], line[64];
	unsigned long long st;
	int dfd, lfd, fd, owner, rc = entry_name(name, sizeof(name), uuid);

	if (rc < 0)
		return rc;
	pid = pid ? pid : (int)getpid();
	if ((rc = js_proc_starttime(pid, &st)) < 0)
		return rc;
	if ((rc = js_state_open_locked(state_dir, true, &dfd, &lfd)) < 0)
		return rc;
	if (owner_alive(dfd, name, &owner) && owner != pid) {
		js_state_unlock(dfd, lfd);
		return -EBUSY; /* another live process has lowered this GPU */
	}
	fd = openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
	} else {
		int n = snprintf(line, sizeof(line), "%d %llu\n", pid, st);

		rc = write(fd, line, (size_t)n) == n ? 0 : -EIO;
		close(fd);
	}
	js_state_unlock(dfd, lfd);
	return rc;
}

int js_gpu_journal_release(const char *state_dir, const char *uuid)
{
	char name[JS_GPU_UUID_LEN + 8];
	int dfd, lfd, rc = entry_name(name, sizeof(name), uuid);

	if (rc < 0)
		return rc;
	if ((rc = js_state_open_locked(state_dir, false, &dfd, &lfd)) < 0)
		return rc;
	rc = unlinkat(dfd, name, 0) < 0 && errno != ENOENT ? -errno : 0;
	js_state_unlock(dfd, lfd);
	return rc;
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

int js_gpu_journal_recover(const char *state_dir, struct js_gpus *g, bool force,
			   struct js_gpu_recovery *out)
{
	int dfd, lfd, dup, rc;
	DIR *d;
	struct dirent *de;

	memset(out, 0, sizeof(*out));
	rc = js_state_open_locked(state_dir, false, &dfd, &lfd);
	if (rc == -ENOENT)
		return 0;
	if (rc < 0)
		return rc;
	dup = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
	d = dup >= 0 ? fdopendir(dup) : NULL;
	while (d && (de = readdir(d))) {
		int pid, i;

		if (strncmp(de->d_name, PREFIX, strlen(PREFIX)))
			continue;
		out->entries++;
		if (!force && owner_alive(dfd, de->d_name, &pid)) {
			out->busy++;
			continue;
		}
		i = gpu_of(g, de->d_name);
		if (i < 0) {
			out->unknown++; /* not a GPU this library sees: left for another */
			continue;
		}
		if (js_gpu_unlock(g, (size_t)i) < 0) {
			out->failed++;
			continue;
		}
		unlinkat(dfd, de->d_name, 0);
		out->restored++;
	}
	if (d)
		closedir(d);
	else if (dup >= 0)
		close(dup);
	js_state_unlock(dfd, lfd);
	return 0;
}

int js_gpu_journal_count(const char *state_dir)
{
	int dfd, lfd, dup, n = 0, rc = js_state_open_locked(state_dir, false, &dfd, &lfd);
	DIR *d;
	struct dirent *de;

	if (rc < 0)
		return rc == -ENOENT ? 0 : rc;
	dup = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
	d = dup >= 0 ? fdopendir(dup) : NULL;
	while (d && (de = readdir(d)))
		n += !strncmp(de->d_name, PREFIX, strlen(PREFIX));
	if (d)
		closedir(d);
	else if (dup >= 0)
		close(dup);
	js_state_unlock(dfd, lfd);
	return n;
}
