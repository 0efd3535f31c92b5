/* joulestep SPANK plugin: the step thread and its phase socket
 * (docs/phase-protocol.md). One thread per step: it binds the socket (the
 * path is exported before the tasks start; clients retry a connect that
 * comes too early), runs the setup left over from step start
 * (js_step_deferred), then ppoll()s an eventfd (stop), the listening socket
 * and the connections, and samples the energy meter at its period. All
 * signals blocked in the thread; every fd O_CLOEXEC|O_NONBLOCK; the thread
 * never blocks on a peer. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <slurm/spank.h>

#include "js_step.h"

#define MAX_CONNS 512
#define MSGS_PER_WAKEUP 64
#define ACCEPTS_PER_WAKEUP 64
#define REFUSALS_LOGGED 16

struct conn {
	int fd;
	bool logged;
};

static uint64_t mono_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void reply(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void reply(int fd, const char *fmt, ...)
{
	char buf[JS_MSG_MAX + 1];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > JS_MSG_MAX)
		n = JS_MSG_MAX;
	/* Never block: a peer that does not read its replies loses them. */
	(void)send(fd, buf, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* Close a refused connection so that the peer still reads our ERR reply.
 * Closing a UNIX socket with unread data in its queue makes the peer's next
 * recv fail with ECONNRESET before it sees what we sent; so stop the peer
 * from sending (SHUT_RDWR makes its sends fail with EPIPE), drain what it
 * already sent, then close. Never blocks: the socket is non-blocking. */
static void refuse_close(int fd)
{
	char buf[JS_MSG_MAX + 64];

	shutdown(fd, SHUT_RDWR);
	for (int k = 0; k < 64 && recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0; k++)
		;
	close(fd);
}

/* "id=N" of the request, echoed in replies so that clients match them. */
static void find_id(const char *buf, size_t len, char *id, size_t idlen)
{
	id[0] = 0;
	for (size_t i = 0; i + 3 < len; i++) {
		if ((i == 0 || buf[i - 1] == ' ') && !memcmp(buf + i, "id=", 3)) {
			size_t j = i + 3, k = 0;
			while (j < len && buf[j] >= '0' && buf[j] <= '9' && k + 1 < idlen - 4)
				j++, k++;
			if (k)
				snprintf(id, idlen, " id=%.*s", (int)k, buf + i + 3);
			return;
		}
	}
}

static void handle(struct js_step *s, struct conn *c, const char *buf, size_t len, bool truncated)
{
	char id[32];
	struct js_msg m;
	const char *why = NULL;
	int code;

	find_id(buf, len > JS_MSG_MAX ? JS_MSG_MAX : len, id, sizeof(id));
	/* Strip "id=N" before parsing (the parser does not know it). */
	char clean[JS_MSG_MAX + 1];
	size_t cl = 0;
	if (!truncated && len <= JS_MSG_MAX) {
		for (size_t i = 0; i < len;) {
			size_t j = i;
			while (j < len && buf[j] != ' ')
				j++;
			if (!(j - i > 3 && !memcmp(buf + i, "id=", 3))) {
				if (cl)
					clean[cl++] = ' ';
				memcpy(clean + cl, buf + i, j - i);
				cl += j - i;
			}
			i = j + 1;
		}
		clean[cl] = 0;
		code = js_msg_parse(clean, cl, &m, &why);
	} else {
		memset(&m, 0, sizeof(m));
		code = EMSGSIZE;
		why = "message longer than 256 bytes";
		m.sync = true;
	}
	if (code) {
		s->rejected++;
		if (!c->logged) {
			c->logged = true;
			slurm_error("joulestep: job %u step %s: malformed phase message (%s); further errors on this connection are not logged",
				    s->job_id, s->step_id, why);
		}
		reply(c->fd, "JS1 ERR %d%s %s", code, id, why);
		return;
	}
	int rank = m.rank >= 0 ? m.rank : 0;
	uint32_t seq = 0, khz = 0;
	int rc;
	switch (m.op) {
	case JS_OP_PING:
		reply(c->fd, "JS1 OK%s PONG job=%u step=%s", id, s->job_id, s->step_id);
		return;
	case JS_OP_BEGIN:
		rc = js_phases_begin(s->phases, rank, m.kind, m.label,
				     js_policy_kind_ratio(&s->policy, &s->conf, m.kind), m.t_ns,
				     &seq, &khz);
		if (rc == 0) {
			const struct js_sphase *p = js_phases_get(s->phases, seq);
			if (p && p->freq_lag_ns > s->max_lag_ns)
				s->max_lag_ns = p->freq_lag_ns;
			if (m.sync) {
				if (khz)
					reply(c->fd, "JS1 OK%s seq=%u freq_khz=%u", id, seq, khz);
				else
					reply(c->fd, "JS1 OK%s seq=%u freq_khz=-", id, seq);
			}
			return;
		}
		break;
	case JS_OP_END:
		rc = js_phases_end(s->phases, rank, m.bytes, m.t_ns, &seq);
		if (rc == 0) {
			if (m.sync)
				reply(c->fd, "JS1 OK%s seq=%u", id, seq);
			return;
		}
		break;
	default:
		rc = -EINVAL;
	}
	s->rejected++;
	const char *msg = rc == -ERANGE ? "nesting deeper than max_depth"
			: rc == -ENOSPC ? "max_phases (or 1048576 rank entries) reached for this step"
			: rc == -EUSERS ? "more than 4096 distinct ranks in this step"
			: rc == -ENOENT ? "no open phase for this rank"
			: rc == -ENOMEM ? "out of memory"
			: "rejected";
	if (!c->logged) {
		c->logged = true;
		slurm_error("joulestep: job %u step %s: phase message rejected (rank %d: %s); further errors on this connection are not logged",
			    s->job_id, s->step_id, rank, msg);
	}
	reply(c->fd, "JS1 ERR %d%s %s", -rc, id, msg);
}

/* Bind and listen on sock_path (thread). No umask games: umask is process
 * wide and slurmstepd forks tasks meanwhile; the socket is made 0666 at once
 * (SO_PEERCRED is the guard) in a root-only directory. */
static void bind_socket(struct js_step *s)
{
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		js_step_error(s, "socket: %s; no phase markers", strerror(errno));
		return;
	}
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	memcpy(sa.sun_path, s->sock_path, strlen(s->sock_path) + 1);
	(void)unlink(s->sock_path); /* stale socket of a killed step */
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(s->sock_path, 0666) < 0 ||
	    listen(fd, 128) < 0) {
		js_step_error(s, "socket: %s: %s; no phase markers", s->sock_path, strerror(errno));
		close(fd);
		(void)unlink(s->sock_path);
		return;
	}
	s->listen_fd = fd;
}

static void sample(struct js_step *s)
{
	struct js_snapshot sn;
	(void)js_meter_snapshot(s->meter, &sn); /* errors surface in the final reading */
}

static void *server_main(void *arg)
{
	struct js_step *s = arg;
	static struct conn conns[MAX_CONNS];
	struct pollfd pfd[MAX_CONNS + 2];
	size_t nc = 0;
	struct js_bucket bucket;
	bool rate_logged = false;
	unsigned long refused = 0;

	(void)pthread_setname_np(pthread_self(), "js-step");
	if (s->sock_path[0])
		bind_socket(s);
	/* The meter has no thread of its own: sample it at its period (half the
	 * shortest wrap time, capped by sample_ms), whatever the markers do. */
	uint64_t period = s->meter ? js_meter_period_ns(s->meter) : 0;
	uint64_t due = mono_now() + period;
	js_bucket_init(&bucket, s->conf.rate, mono_now());
	for (;;) {
		struct timespec ts, *tmo = NULL;
		if (period) {
			uint64_t now = mono_now();
			if (now >= due) {
				sample(s);
				now = mono_now();
				due = now + period;
			}
			uint64_t left = due - now;
			ts.tv_sec = (time_t)(left / 1000000000ULL);
			ts.tv_nsec = (long)(left % 1000000000ULL);
			tmo = &ts;
		}
		pfd[0].fd = s->stop_fd;
		pfd[0].events = POLLIN;
		pfd[1].fd = s->listen_fd;
		pfd[1].events = POLLIN;
		for (size_t i = 0; i < nc; i++) {
			pfd[i + 2].fd = conns[i].fd;
			pfd[i + 2].events = POLLIN;
			pfd[i + 2].revents = 0;
		}
		int n = ppoll(pfd, nc + 2, tmo, NULL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			slurm_error("joulestep: job %u step %s: poll: %m", s->job_id, s->step_id);
			break;
		}
		if (n == 0)
			continue; /* sampling time */
		if (pfd[0].revents)
			break;
		/* connections first: pending markers are handled before the
		 * stop request of the same round (the loop breaks above only
		 * when stop was already signalled at poll time). */
		for (size_t i = 0; i < nc; i++) {
			if (!pfd[i + 2].revents)
				continue;
			bool closed = false;
			for (int k = 0; k < MSGS_PER_WAKEUP; k++) {
				char buf[JS_MSG_MAX + 64];
				ssize_t r = recv(conns[i].fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC);
				if (r < 0) {
					if (errno == EAGAIN || errno == EINTR)
						break;
					closed = true;
					break;
				}
				if (r == 0) {
					closed = true;
					break;
				}
				if (!js_bucket_take(&bucket, mono_now())) {
					s->dropped_rate++;
					if (!rate_logged) {
						rate_logged = true;
						slurm_error("joulestep: job %u step %s: phase markers exceed rate=%u/s; excess markers are dropped",
							    s->job_id, s->step_id, s->conf.rate);
					}
					size_t l = (size_t)r < sizeof(buf) ? (size_t)r : sizeof(buf);
					if (l >= 5 && !memcmp(buf + l - 4, "sync", 4)) {
						char id[32];
						find_id(buf, l, id, sizeof(id));
						reply(conns[i].fd, "JS1 ERR %d%s rate limit exceeded", EAGAIN, id);
					}
					continue;
				}
				handle(s, &conns[i], buf, (size_t)r < sizeof(buf) ? (size_t)r : sizeof(buf),
				       (size_t)r > JS_MSG_MAX);
			}
			if (closed || (pfd[i + 2].revents & (POLLHUP | POLLERR | POLLNVAL) &&
				       !(pfd[i + 2].revents & POLLIN))) {
				close(conns[i].fd);
				conns[i].fd = -1;
			}
		}
		size_t w = 0;
		for (size_t i = 0; i < nc; i++)
			if (conns[i].fd >= 0)
				conns[w++] = conns[i];
		nc = w;
		if (pfd[1].revents & POLLIN) {
			/* bounded: a connect flood (any local user may connect)
			 * must not keep the thread from markers and stop */
			for (int a = 0; a < ACCEPTS_PER_WAKEUP; a++) {
				int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
				if (fd < 0)
					break;
				struct ucred cr;
				socklen_t cl = sizeof(cr);
				if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0 ||
				    (cr.uid != s->uid && cr.uid != 0)) {
					reply(fd, "JS1 ERR %d permission denied", EACCES);
					if (++refused <= REFUSALS_LOGGED)
						slurm_info("joulestep: job %u step %s: refused phase connection from uid %d pid %d (only uid %u and root)%s",
							   s->job_id, s->step_id, (int)cr.uid, (int)cr.pid, (unsigned)s->uid,
							   refused == REFUSALS_LOGGED ? "; further refusals in this step are not logged" : "");
					refuse_close(fd);
					continue;
				}
				if (nc == MAX_CONNS) {
					reply(fd, "JS1 ERR %d too many connections", EMFILE);
					refuse_close(fd);
					continue;
				}
				conns[nc].fd = fd;
				conns[nc].logged = false;
				nc++;
			}
		}
	}
	for (size_t i = 0; i < nc; i++) {
		/* Drain what is already queued so that END markers sent just
		 * before the tasks exited still count. Still rate-limited: a
		 * backlog of queued markers (each may set the clock of every
		 * step CPU) must not hold slurmstepd at step end. */
		for (int k = 0; k < 4096; k++) {
			char buf[JS_MSG_MAX + 64];
			ssize_t r = recv(conns[i].fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC);
			if (r <= 0)
				break;
			if (!js_bucket_take(&bucket, mono_now())) {
				s->dropped_rate++;
				continue;
			}
			handle(s, &conns[i], buf, (size_t)r < sizeof(buf) ? (size_t)r : sizeof(buf),
			       (size_t)r > JS_MSG_MAX);
		}
		close(conns[i].fd);
	}
	return NULL;
}

void js_server_socket_path(struct js_step *s)
{
	s->sock_path[0] = 0;
	int rc = js_root_dir(s->conf.socket_dir, 0755);
	if (rc < 0) {
		js_step_error(s, "socket: socket_dir %s: %s (must be root-owned, not group/world-writable)",
			      s->conf.socket_dir, strerror(-rc));
		return;
	}
	int n = snprintf(s->sock_path, sizeof(s->sock_path), "%s/%u.%s.sock", s->conf.socket_dir,
			 s->job_id, s->step_id);
	if (n < 0 || (size_t)n >= sizeof(s->sock_path)) {
		js_step_error(s, "socket: path %s/... too long for a UNIX socket", s->conf.socket_dir);
		s->sock_path[0] = 0;
	}
}

int js_server_start(struct js_step *s)
{
	int rc;
	s->listen_fd = -1;
	s->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->stop_fd < 0) {
		rc = -errno;
		js_step_error(s, "step thread: eventfd: %s", strerror(errno));
		s->sock_path[0] = 0;
		return rc;
	}
	sigset_t all, oldmask;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &oldmask);
	rc = pthread_create(&s->server, NULL, server_main, s);
	pthread_sigmask(SIG_SETMASK, &oldmask, NULL);
	if (rc) {
		js_step_error(s, "step thread: pthread_create: %s", strerror(rc));
		close(s->stop_fd);
		s->stop_fd = -1;
		s->sock_path[0] = 0;
		return -rc;
	}
	s->server_running = true;
	return 0;
}

void js_server_stop_request(struct js_step *s)
{
	if (s->server_running && !s->stop_requested) {
		uint64_t one = 1;
		if (write(s->stop_fd, &one, sizeof(one)) < 0)
			slurm_error("joulestep: job %u step %s: stop server: %m", s->job_id, s->step_id);
		s->stop_requested = true;
	}
}

void js_server_stop(struct js_step *s)
{
	if (s->server_running) {
		js_server_stop_request(s);
		pthread_join(s->server, NULL);
		s->server_running = false;
	}
	if (s->listen_fd >= 0) { /* bound by the thread: ours to remove */
		close(s->listen_fd);
		(void)unlink(s->sock_path);
	}
	if (s->stop_fd >= 0)
		close(s->stop_fd);
	s->listen_fd = s->stop_fd = -1;
	s->sock_path[0] = 0;
}
