/* A test double of VELOC's client library (libveloc-client): the C API of
 * veloc.h (VELOC 1.8), with real files. The hook is tested live against the
 * real VELOC 1.8 (tests/cluster/test_plugin_hooks.py); this double remains
 * only where the real one cannot serve:
 *   - bench/hooks: the hook's own cost, without any I/O (discard = 1);
 *   - tests/install/test_deb.py: the packaged hook on a machine where only
 *     the .debs are installed (no VELOC build in the package test);
 *   - tests/hooks/prog_hooks_mt.c: a thread held inside
 *     VELOC_Checkpoint_begin (fake_veloc_hold), for the hooks' fork and
 *     thread tests (issue 23, defect 9);
 *   - built with -DFAKE_VELOC_MASTER (libfakeveloc-master.so): VELOC master's
 *     API, which 1.8 (the pinned version) lacks: VELOC_Region_protect's named
 *     region groups (a checkpoint writes its name's group, else the default
 *     one) and VELOC_Checkpoint_finished as a status (VELOC_SUCCESS when
 *     finished); its first call after a checkpoint lets the backend copy and
 *     answers "not finished", the next one "finished".
 *
 * VELOC_Init(comm, cfg) / VELOC_Init_single(id, cfg) read a config of
 * `key = value` lines: scratch (local tier), persistent (parallel FS), mode
 * (sync | async, default async), discard (1: no file I/O at all, for the
 * bench: the hook's cost alone). A memory checkpoint writes the protected
 * regions to scratch/<name>-<version>.dat; VELOC_Checkpoint_end then copies
 * it to persistent/: inline in sync mode; in async mode a backend thread
 * does, which starts the copy only once the program waits (a lazy backend:
 * VELOC_Checkpoint_finished() is 0 until then, so a test knows what it sees;
 * 1 in sync mode, as VELOC 1.8's).
 * VELOC_Checkpoint is wait + begin + mem + end through internal calls, as
 * in VELOC (its C entry points call C++ methods, not each other). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OK 0
#define FAIL (-1)
#define MAXR 64
#define EXPORT __attribute__((visibility("default")))

static struct {
	int id;
	char group[64]; /* "" for VELOC_Mem_protect's regions */
	void *ptr;
	size_t size;
} reg[MAXR];
static char cur_name[256];
static int nreg, inited, sync_mode, discard, in_progress, pending, go;
static char scratch[512], persistent[512], cur[1100];
static pthread_t backend;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

static int copy_to_persistent(const char *src)
{
	char dst[1700], buf[65536];
	snprintf(dst, sizeof(dst), "%s/%s", persistent, strrchr(src, '/') + 1);
	int in = open(src, O_RDONLY | O_CLOEXEC), out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ssize_t n = 0;
	while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, (size_t)n) != n)
			n = -1;
	int rc = in >= 0 && out >= 0 && n == 0 && fsync(out) == 0 ? OK : FAIL;
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	return rc;
}

static void *backend_main(void *arg)
{
	pthread_mutex_lock(&mu);
	while (!go)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	copy_to_persistent(arg);
	free(arg);
	return NULL;
}

static int init(const char *cfg)
{
	char line[600], k[64], v[512];
	FILE *f = fopen(cfg, "re");
	if (!f)
		return FAIL;
	sync_mode = discard = 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, " %63[a-z_] = %511s", k, v) == 2) {
			if (!strcmp(k, "scratch"))
				snprintf(scratch, sizeof(scratch), "%s", v);
			else if (!strcmp(k, "persistent"))
				snprintf(persistent, sizeof(persistent), "%s", v);
			else if (!strcmp(k, "mode"))
				sync_mode = !strcmp(v, "sync");
			else if (!strcmp(k, "discard"))
				discard = !strcmp(v, "1");
		}
	fclose(f);
	inited = scratch[0] && persistent[0];
	return inited ? OK : FAIL;
}

EXPORT int VELOC_Init(void *comm, const char *cfg)
{
	(void)comm;
	return init(cfg);
}

EXPORT int VELOC_Init_single(unsigned int id, const char *cfg)
{
	(void)id;
	return init(cfg);
}

static int protect(int id, void *ptr, size_t count, size_t base_size, const char *group)
{
	int i = 0;
	while (i < nreg && (reg[i].id != id || strcmp(reg[i].group, group)))
		i++;
	if (!inited || i == MAXR || strlen(group) >= sizeof(reg[0].group))
		return FAIL;
	if (i == nreg)
		nreg++;
	reg[i].id = id;
	snprintf(reg[i].group, sizeof(reg[i].group), "%s", group);
	reg[i].ptr = ptr;
	reg[i].size = count * base_size;
	return OK;
}

EXPORT int VELOC_Mem_protect(int id, void *ptr, size_t count, size_t base_size)
{
	return protect(id, ptr, count, base_size, "");
}

#ifdef FAKE_VELOC_MASTER
EXPORT int VELOC_Region_protect(int id, void *ptr, size_t count, size_t base_size, const char *name)
{
	return protect(id, ptr, count, base_size, name ? name : "");
}
#endif

EXPORT int VELOC_Mem_unprotect(int id)
{
	for (int i = 0; i < nreg; i++)
		if (reg[i].id == id && !reg[i].group[0]) {
			reg[i] = reg[--nreg];
			return OK;
		}
	return FAIL;
}

static int wait_backend(void)
{
	if (!pending)
		return OK;
	pthread_mutex_lock(&mu);
	go = 1;
	pthread_cond_signal(&cv);
	pthread_mutex_unlock(&mu);
	pthread_join(backend, NULL);
	pending = 0;
	return OK;
}

static int begin(const char *name, int version)
{
	if (!inited || in_progress || version < 0)
		return FAIL;
	snprintf(cur, sizeof(cur), "%s/%s-%d.dat", scratch, name, version);
	snprintf(cur_name, sizeof(cur_name), "%s", name);
	in_progress = 1;
	return OK;
}

static int mem(int mode, const int *ids, int n)
{
	if (!in_progress)
		return FAIL;
	if (discard)
		return OK;
	int fd = open(cur, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), rc = fd < 0 ? FAIL : OK;
	const char *group = "";  /* VELOC master: the checkpoint's name's group, else "" */
	for (int i = 0; i < nreg; i++)
		if (!strcmp(reg[i].group, cur_name))
			group = cur_name;
	for (int i = 0; rc == OK && i < nreg; i++) {
		int listed = 0;
		if (strcmp(reg[i].group, group))
			continue;
		for (int k = 0; k < n; k++)
			listed |= ids[k] == reg[i].id;
		if ((mode == 0 || (mode == 1 && listed) || (mode == 2 && !listed)) &&
		    write(fd, reg[i].ptr, reg[i].size) != (ssize_t)reg[i].size)
			rc = FAIL;
	}
	if (fd >= 0)
		close(fd);
	return rc;
}

static int end(void)
{
	if (!in_progress)
		return FAIL;
	in_progress = 0;
	if (sync_mode)
		return discard ? OK : copy_to_persistent(cur);
	wait_backend(); /* one checkpoint in flight at a time */
	go = 0;
	char *arg = strdup(cur);
	if (!arg || pthread_create(&backend, NULL, backend_main, arg)) {
		free(arg);
		return FAIL;
	}
	pending = 1;
	return OK;
}


/* For the hooks' fork and thread tests (tests/hooks/prog_hooks_mt.c): a
 * thread that called fake_veloc_hold(in, rel) first makes its next
 * VELOC_Checkpoint_begin write one byte to `in` and wait for one byte on
 * `rel`, i.e. stay inside the wrapped library until released (as a slow
 * write or a VELOC call waiting for its backend would). Per thread. */
static __thread int hold_in = -1, hold_rel = -1;

EXPORT void fake_veloc_hold(int in, int rel)
{
	hold_in = in;
	hold_rel = rel;
}

static void held(void)
{
	char c = 'h';
	if (hold_in < 0)
		return;
	int in = hold_in, rel = hold_rel;
	hold_in = hold_rel = -1;
	if (write(in, &c, 1) != 1 || read(rel, &c, 1) != 1)
		_exit(3);
}

EXPORT int VELOC_Checkpoint_begin(const char *name, int version)
{
	held();
	return begin(name, version);
}
EXPORT int VELOC_Checkpoint_mem(void) { return mem(0, NULL, 0); }
EXPORT int VELOC_Checkpoint_selective(int mode, int *ids, int n) { return mem(mode, ids, n); }
EXPORT int VELOC_Checkpoint_end(int success) { (void)success; return end(); }
EXPORT int VELOC_Checkpoint_wait(void) { return wait_backend(); }
#ifndef FAKE_VELOC_MASTER
EXPORT int VELOC_Checkpoint_finished(void) { return inited ? sync_mode || !pending : FAIL; }
#else
EXPORT int VELOC_Checkpoint_finished(void)
{
	if (!inited)
		return FAIL;
	if (!pending)
		return OK;
	wait_backend();
	return FAIL; /* not finished on this call; the next one says so */
}
#endif

EXPORT int VELOC_Checkpoint(const char *name, int version)
{
	if (wait_backend() || begin(name, version))
		return FAIL;
	int rc = mem(0, NULL, 0);
	return end() == OK && rc == OK ? OK : FAIL;
}

EXPORT int VELOC_Finalize(int drain)
{
	if (drain)
		wait_backend();
	inited = 0;
	return OK;
}
