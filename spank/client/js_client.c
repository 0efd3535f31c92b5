/* libjoulestep-client: see joulestep/client.h and docs/phase-protocol.md. */
#include "joulestep/client.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MSG_MAX 256
#define REPLY_TIMEOUT_MS 5000
/* The plugin exports JOULESTEP_SOCKET before its thread has bound the
 * socket (docs/phase-protocol.md): a connect that fails with ENOENT or
 * ECONNREFUSED is retried, for at most this long after the process's first
 * attempt. Later failures return at once. */
#define CONNECT_RETRY_MS 200
#define CONNECT_PAUSE_MS 2

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int g_fd = -1;
static pid_t g_pid;
static int g_rank = -1;
static int g_sync = -1;          /* -1: not decided yet (read JOULESTEP_SYNC) */
static unsigned long g_id;
static pid_t g_retry_pid;
static unsigned long long g_retry_until;  /* CLOCK_MONOTONIC ns */

/* Back-pressure (docs/phase-protocol.md, "Limits"). A marker that finds the
 * connection's queue full waits for room, up to the 1 s send timeout, once:
 * after a wait that expired (the plugin is stalled, not just behind) the
 * connection is congested and later asynchronous markers do not wait, until
 * one is sent. What cannot be sent must not break the plugin's view of this
 * rank's nesting (an END closes the rank's latest open BEGIN):
 *   - a BEGIN that could not be sent returns -EAGAIN, and the caller sends
 *     no END for it (as for a refused sync BEGIN);
 *   - an END that could not be sent is owed: kept (bytes, t) and sent before
 *     any later marker of this process, in order, and at exit; a BEGIN that
 *     finds ENDs still owed is not sent (it would nest inside them).
 * Reset in a forked child (its own connection). */
#define OWED_MAX 64
static int g_congested;
static struct owed_end {
	long long bytes;
	unsigned long long t_ns;
} g_owed[OWED_MAX];
static int g_nowed;

static unsigned long long mono_ns(void);

/* fork() while another thread holds mu (e.g. waiting up to 5 s for a sync
 * reply) would leave the child's copy locked forever: its first marker would
 * hang. The child starts with a fresh, unlocked mutex (it reconnects anyway:
 * ensure_conn notices the new pid). glibc drops the handler at dlclose. */
static void atfork_child(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
	mu = fresh;
}

__attribute__((constructor)) static void client_init(void)
{
	(void)pthread_atfork(NULL, NULL, atfork_child);
}

static int charset(const char *s, size_t max, int upper, const char *extra)
{
	size_t n = s ? strlen(s) : 0;
	if (n == 0 || n > max)
		return 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
		      (upper && c >= 'A' && c <= 'Z') || strchr(extra, c)))
			return 0;
	}
	return 1;
}

static int ensure_conn(void)
{
	pid_t pid = getpid();
	if (g_fd >= 0 && g_pid == pid)
		return 0;
	if (g_fd >= 0 && g_pid != pid) {
		/* forked child: the inherited connection belongs to the parent */
		close(g_fd);
		g_fd = -1;
		g_congested = g_nowed = 0;
	}
	const char *path = getenv("JOULESTEP_SOCKET");
	if (!path || !*path)
		return JS_NOT_IN_STEP;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	struct timeval tv = {1, 0}; /* never hang the application for long */
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (g_retry_pid != pid) {
		g_retry_pid = pid;
		g_retry_until = mono_ns() + CONNECT_RETRY_MS * 1000000ULL;
	}
	while (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = -errno;
		if ((e == -ENOENT || e == -ECONNREFUSED) && mono_ns() < g_retry_until) {
			struct timespec ts = {0, CONNECT_PAUSE_MS * 1000000L};
			nanosleep(&ts, NULL);
			continue;
		}
		close(fd);
		return e;
	}
	g_fd = fd;
	g_pid = pid;
	if (g_rank < 0) {
		const char *r = getenv("SLURM_PROCID");
		g_rank = r && *r ? atoi(r) : 0;
		if (g_rank < 0)
			g_rank = 0;
	}
	if (g_sync < 0) {
		const char *s = getenv("JOULESTEP_SYNC");
		g_sync = s && *s && strcmp(s, "0") ? 1 : 0;
	}
	return 0;
}

static void drop_conn(void)
{
	if (g_fd >= 0)
		close(g_fd);
	g_fd = -1;
}

static unsigned long long mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
}

/* Wait for the reply carrying our id; stray replies (errors for earlier
 * asynchronous markers) are skipped. */
static int await(unsigned long id)
{
	char want[32];
	snprintf(want, sizeof(want), " id=%lu", id);
	unsigned long long deadline = mono_ns() + REPLY_TIMEOUT_MS * 1000000ULL;
	for (;;) {
		unsigned long long now = mono_ns();
		if (now >= deadline)
			return -ETIMEDOUT;
		struct pollfd p = {.fd = g_fd, .events = POLLIN};
		int n = poll(&p, 1, (int)((deadline - now) / 1000000ULL) + 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n == 0 ? -ETIMEDOUT : -errno;
		char buf[MSG_MAX + 1];
		ssize_t r = recv(g_fd, buf, MSG_MAX, MSG_DONTWAIT);
		if (r < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (r <= 0)
			return r == 0 ? -ECONNRESET : -errno;
		buf[r] = 0;
		char *hit = strstr(buf, want);
		if (!hit || (hit[strlen(want)] != ' ' && hit[strlen(want)] != 0))
			continue;
		if (!strncmp(buf, "JS1 OK", 6))
			return 0;
		int code = 0;
		if (sscanf(buf, "JS1 ERR %d", &code) == 1 && code > 0)
			return -code;
		return -EPROTO;
	}
}

static int send_msg(const char *body, int sync)
{
	char msg[MSG_MAX + 64];
	unsigned long id = 0;
	int n;
	if (sync) {
		id = ++g_id;
		n = snprintf(msg, sizeof(msg), "%s id=%lu sync", body, id);
	} else {
		n = snprintf(msg, sizeof(msg), "%s", body);
	}
	if (n < 0 || n > MSG_MAX)
		return -EMSGSIZE;
	/* A marker that finds this connection's queue full waits for room (up
	 * to the 1 s send timeout); an asynchronous one does not wait while the
	 * connection is congested (see g_congested). */
	for (int attempt = 0; attempt < 2; attempt++) {
		int rc = ensure_conn();
		if (rc)
			return rc;
		int flags = MSG_NOSIGNAL | (!sync && g_congested ? MSG_DONTWAIT : 0);
		if (send(g_fd, msg, (size_t)n, flags) == n) {
			g_congested = 0;
			return sync ? await(id) : 0;
		}
		rc = -errno;
		if (rc == -EWOULDBLOCK)
			rc = -EAGAIN;
		if (rc == -EAGAIN) {
			g_congested = 1;
			return rc;
		}
		drop_conn();
		/* The server may have dropped an idle connection: retry once. */
		if (rc != -EPIPE && rc != -ECONNRESET && rc != -ENOTCONN)
			return rc;
	}
	return -ECONNRESET;
}

static int send_end(long long bytes, unsigned long long t_ns, int sync)
{
	char body[MSG_MAX], b[32];
	if (bytes >= 0)
		snprintf(b, sizeof(b), "%lld", bytes);
	else
		snprintf(b, sizeof(b), "-");
	snprintf(body, sizeof(body), "JS1 END bytes=%s rank=%d t=%llu", b, g_rank, t_ns);
	return send_msg(body, sync);
}

/* Send the owed ENDs, oldest first; 0 when none is left. */
static int flush_owed(void)
{
	int i = 0, rc = 0;
	while (i < g_nowed && (rc = send_end(g_owed[i].bytes, g_owed[i].t_ns, 0)) == 0)
		i++;
	memmove(g_owed, g_owed + i, (size_t)(g_nowed - i) * sizeof(g_owed[0]));
	g_nowed -= i;
	return rc;
}

/* At exit, the ENDs still owed get one more chance (the plugin closes the
 * phases they would have closed at step end otherwise). */
__attribute__((destructor)) static void client_fini(void)
{
	if (pthread_mutex_trylock(&mu) != 0)
		return;
	if (g_nowed && g_fd >= 0 && g_pid == getpid()) {
		g_congested = 0;
		(void)flush_owed();
	}
	pthread_mutex_unlock(&mu);
}

int js_phase_begin(const char *kind, const char *label)
{
	if (!charset(kind, 32, 0, "_-"))
		return -EINVAL;
	if (label && (!charset(label, 64, 1, "_.:+/-") || !strcmp(label, "-")))
		return -EINVAL;
	pthread_mutex_lock(&mu);
	int rc = ensure_conn();
	if (rc == 0) {
		char body[MSG_MAX];
		snprintf(body, sizeof(body), "JS1 BEGIN %s %s rank=%d t=%llu", kind, label ? label : "-",
			 g_rank, mono_ns());
		rc = flush_owed(); /* else it would nest inside the phases they close */
		if (rc == 0)
			rc = send_msg(body, g_sync);
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

int js_phase_end(long long bytes)
{
	pthread_mutex_lock(&mu);
	int rc = ensure_conn();
	if (rc == 0) {
		unsigned long long t = mono_ns();
		rc = flush_owed();
		if (rc == 0)
			rc = send_end(bytes, t, g_sync);
		/* No room (behind owed ENDs, or for itself): owed, sent in order
		 * before the next marker or at exit. A sync END says so (the
		 * plugin has not handled it yet); an async one is as good as
		 * sent. Only when OWED_MAX are owed is one dropped. */
		if (rc == -EAGAIN && g_nowed < OWED_MAX) {
			g_owed[g_nowed++] = (struct owed_end){bytes, t};
			rc = g_sync ? -EAGAIN : 0;
		}
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

int js_phase_set_sync(int on)
{
	pthread_mutex_lock(&mu);
	g_sync = on ? 1 : 0;
	pthread_mutex_unlock(&mu);
	return 0;
}

int js_phase_ping(void)
{
	pthread_mutex_lock(&mu);
	int rc = ensure_conn();
	if (rc == 0)
		rc = flush_owed(); /* the reply means every earlier marker was handled */
	if (rc == 0)
		rc = send_msg("JS1 PING", 1);
	pthread_mutex_unlock(&mu);
	return rc;
}
