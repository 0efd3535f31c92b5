/* Shared helpers of the MPI benchmarks bench/ckpt and bench/damaris
 * (docs/experiments.md): sizes, clocks, node names, phase markers.
 * Header-only (static functions): each benchmark is one translation unit. */
#ifndef JSBENCH_H
#define JSBENCH_H

#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "joulestep/client.h"

#define JSB_NODE_MAX 64

/* "4096", "64K", "8M", "2G" (powers of 1024) -> bytes; -1 when malformed. */
static inline long long jsb_parse_size(const char *s)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || v < 0)
		return -1;
	long long mul = 1;
	switch (*end) {
	case 'k': case 'K': mul = 1LL << 10; end++; break;
	case 'm': case 'M': mul = 1LL << 20; end++; break;
	case 'g': case 'G': mul = 1LL << 30; end++; break;
	case '\0': break;
	default: return -1;
	}
	if (*end == 'i' && end[1] == 'B')
		end += 2;
	if (*end || (v && mul > 1 && v > (1LL << 62) / mul))
		return -1;
	return v * mul;
}

static inline double jsb_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static inline void jsb_die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	MPI_Abort(MPI_COMM_WORLD, 2);
	exit(2);
}

/* Phase markers. Outside a joulestep step the client is a no-op; a marker
 * the plugin refused is reported once per process and the run goes on (the
 * benchmark's own timings stay valid). */
static inline void jsb_marker_rc(int rc, const char *what)
{
	static int told;
	if (rc < 0 && !told) {
		told = 1;
		fprintf(stderr, "jsbench: phase %s: %s (markers of this rank may be missing)\n",
			what, strerror(-rc));
	}
}

/* Synchronous markers (the default of both benchmarks): each returns once the
 * plugin handled it, so the clock is set at the phase boundary (Mills 2013)
 * and an END sent before a barrier is handled before any BEGIN sent after
 * it by another rank (markers of different ranks travel on different
 * connections: without the wait the plugin may see them in either order and
 * the node's phases would overlap). Costs one round trip per marker. */
static inline void jsb_markers_sync(int on)
{
	js_phase_set_sync(on);
}

static inline void jsb_begin(const char *kind, const char *label)
{
	jsb_marker_rc(js_phase_begin(kind, label), "begin");
}

static inline void jsb_end(long long bytes)
{
	jsb_marker_rc(js_phase_end(bytes), "end");
}

/* Which node each rank runs on: Slurm's node name (SLURMD_NODENAME, so that
 * several slurmd on one host count as several nodes), else the host name.
 * node_of[r] = index of rank r's node, numbered in order of first appearance
 * (the node of rank 0 is 0). Returns the number of nodes. */
static inline int jsb_nodes(MPI_Comm comm, int *node_of)
{
	int n;
	MPI_Comm_size(comm, &n);
	char me[JSB_NODE_MAX] = {0};
	const char *s = getenv("SLURMD_NODENAME");
	if (s && *s)
		snprintf(me, sizeof(me), "%s", s);
	else
		gethostname(me, sizeof(me) - 1);
	char *all = calloc((size_t)n, JSB_NODE_MAX);
	if (!all)
		jsb_die("out of memory");
	MPI_Allgather(me, JSB_NODE_MAX, MPI_CHAR, all, JSB_NODE_MAX, MPI_CHAR, comm);
	int nnodes = 0;
	for (int r = 0; r < n; r++) {
		node_of[r] = -1;
		for (int q = 0; q < r; q++)
			if (!strncmp(all + (size_t)q * JSB_NODE_MAX, all + (size_t)r * JSB_NODE_MAX, JSB_NODE_MAX)) {
				node_of[r] = node_of[q];
				break;
			}
		if (node_of[r] < 0)
			node_of[r] = nnodes++;
	}
	free(all);
	return nnodes;
}

/* Write all of buf at offset off (pwrite loop); 0 or -errno. */
static inline int jsb_pwrite_all(int fd, const char *buf, size_t len, off_t off)
{
	while (len) {
		ssize_t w = pwrite(fd, buf, len > (1u << 30) ? (1u << 30) : len, off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		buf += w;
		len -= (size_t)w;
		off += w;
	}
	return 0;
}

/* mkdir -p of one level, fine if it exists. */
static inline void jsb_mkdir(const char *path)
{
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		jsb_die("mkdir %s: %s", path, strerror(errno));
}

#endif
