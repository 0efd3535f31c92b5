/* joulestep SPANK plugin: the phase socket and the step thread
 * (docs/phase-protocol.md).
 *
 * The socket is bound and listening before the tasks start, by
 * js_server_listen on slurmstepd's main thread in a SPANK callback, as root:
 * slurmstepd switches its effective uid to the job's user (for every thread:
 * glibc's setxid broadcast) while it starts the tasks, and a bind made by a
 * thread in that window fails with EACCES. The step thread only uses
 * descriptors opened here (the listening socket, an eventfd, /proc) and the
 * connections it accepts; it ppoll()s the eventfd (stop), the listening socket
 * and the connections, and samples the energy meter at its period. All
 * signals blocked in the thread; every fd O_CLOEXEC|O_NONBLOCK; the thread
 * never blocks on a peer.
 *
 * Peers: root, or a process of this step (a descendant of this slurmstepd),
 * checked at accept through /proc with a guard against pid reuse.
 *
 * Step end is bounded: the thread leaves its loop between two messages once
 * the stop is requested, then reads at most DRAIN_MAX_MSGS queued messages
 * for at most DRAIN_MAX_NS; queued BEGINs are not replayed and the clock is
 * no longer changed (js_phases_hold_clock): queued ENDs close their phases,
 * the rest is dropped and the caller closes what is still open. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <slurm/spank.h>

#include "js_sidechan.h"
#include "js_fs.h"
#include "js_server.h"
#include "js_step.h"
#include "../accounting/src/sampler.h" /* js_mono_ns */

#define MSGS_PER_WAKEUP 64
#define ACCEPTS_PER_WAKEUP 64
#define REFUSALS_LOGGED 16
#define MSG_ERRORS_LOGGED 16                /* bad messages logged per step      */
#define DRAIN_MAX_MSGS 1024                 /* read at step end, all connections */
#define DRAIN_MAX_NS (20ULL * 1000000ULL)   /* and for at most this long         */
#define PEER_MAX_DEPTH 64                   /* processes between peer and us     */

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77 /* Linux 6.5 */
#endif

/* The thread's own state (one per step, on the thread's stack). */
struct srv {
	struct js_markcap cap;     /* BEGIN markers only: per second, per step */
	bool rate_logged, cap_logged;
	unsigned long refused;
	unsigned long msg_errors;  /* malformed or rejected messages, all conns */
};

static bool stopping(struct js_step *s)
{
	return atomic_load_explicit(&s->stopping, memory_order_relaxed);
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

/* A BEGIN that is not recorded. A sync client is told (and sends no END);
 * an asynchronous one will send its END, which must close nothing. */
static void not_recorded(struct js_step *s, struct js_conn *c, const struct js_msg *m, int rank,
			 const char *id, int code, const char *msg)
{
	if (m->sync)
		reply(c->fd, "JS1 ERR %d%s %s", code, id, msg);
	else
		(void)js_phases_skip(s->phases, rank);
}

/* A malformed or rejected message: one log line per connection at most,
 * and MSG_ERRORS_LOGGED per step in all (any process of the step may open
 * connections without end, issue 23 defect 4); every one is counted in
 * markers_rejected by the caller, and those not logged in errors_total. */
static void msg_error(struct js_step *s, struct srv *v, struct js_conn *c, const char *what)
{
	if (c->logged || v->msg_errors >= MSG_ERRORS_LOGGED) {
		pthread_mutex_lock(&s->err_mu);
		s->errors_total++;
		pthread_mutex_unlock(&s->err_mu);
		return;
	}
	c->logged = true;
	v->msg_errors++;
	slurm_error("joulestep: job %u step %s: %s; %s", s->job_id, s->step_id, what,
		    v->msg_errors == MSG_ERRORS_LOGGED
			    ? "further phase message errors of this step are not logged (counted in the record's provenance.errors_total)"
			    : "further errors on this connection are not logged");
}

/* Parse one message, "id=N" stripped first (the parser does not know it):
 * 0, or the error code for the reply with *why. */
static int parse_msg(const char *buf, size_t len, bool truncated, struct js_msg *m,
		     const char **why)
{
	char clean[JS_MSG_MAX + 1];
	size_t cl = 0;
	if (truncated || len > JS_MSG_MAX) {
		memset(m, 0, sizeof(*m));
		*why = "message longer than 256 bytes";
		m->sync = true;
		return EMSGSIZE;
	}
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
	return js_msg_parse(clean, cl, m, why);
}

/* Only BEGINs are rate-limited: each may change the clock; an END only
 * undoes what a BEGIN that passed did, and dropping one would leave a phase
 * open with the clock lowered. True when this BEGIN is dropped (answered). */
static bool begin_capped(struct js_step *s, struct srv *v, struct js_conn *c,
			 const struct js_msg *m, int rank, const char *id)
{
	enum js_cap cap = js_markcap_take(&v->cap, js_mono_ns());
	if (cap == JS_CAP_RATE) {
		s->dropped_rate++;
		if (!v->rate_logged) {
			v->rate_logged = true;
			slurm_error("joulestep: job %u step %s: phase BEGIN markers exceed rate=%u/s (max_markers_per_s); excess BEGINs are dropped (their ENDs close nothing)",
				    s->job_id, s->step_id, s->conf.rate);
		}
		not_recorded(s, c, m, rank, id, EAGAIN, "rate limit exceeded");
		return true;
	}
	if (cap == JS_CAP_STEP) { /* counted, never waited for */
		s->dropped_step_cap++;
		if (!v->cap_logged) {
			v->cap_logged = true;
			slurm_error("joulestep: job %u step %s: phase BEGIN markers exceed max_markers_per_step=%llu; further BEGINs of this step are dropped (their ENDs close nothing)",
				    s->job_id, s->step_id, (unsigned long long)s->conf.max_markers_per_step);
		}
		not_recorded(s, c, m, rank, id, EAGAIN, "max_markers_per_step exceeded");
		return true;
	}
	return false;
}

/* A BEGIN: 0 when handled (answered if sync), else the phase logic's
 * refusal. */
static int on_begin(struct js_step *s, struct js_conn *c, const struct js_msg *m, int rank,
		    const char *id)
{
	uint32_t seq = 0, khz = 0;
	int rc = js_phases_begin(s->phases, rank, m->kind, m->label,
				 js_policy_kind_ratio(&s->policy, &s->conf, m->kind), m->t_ns, &seq,
				 &khz);
	if (rc == 0) {
		const struct js_sphase *p = js_phases_get(s->phases, seq);
		if (p && p->freq_lag_ns > s->max_lag_ns)
			s->max_lag_ns = p->freq_lag_ns;
		if (m->sync) {
			if (khz)
				reply(c->fd, "JS1 OK%s seq=%u freq_khz=%u", id, seq, khz);
			else
				reply(c->fd, "JS1 OK%s seq=%u freq_khz=-", id, seq);
		}
		return 0;
	}
	if (!m->sync) /* refused below; its END will come */
		(void)js_phases_skip(s->phases, rank);
	return rc;
}

static int on_end(struct js_step *s, struct js_conn *c, const struct js_msg *m, int rank,
		  const char *id)
{
	uint32_t seq = 0;
	int rc = js_phases_end(s->phases, rank, m->bytes, m->t_ns, &seq);
	if (rc == JS_PHASE_SKIPPED) {
		if (m->sync)
			reply(c->fd, "JS1 OK%s seq=-", id);
		return 0;
	}
	if (rc == 0 && m->sync)
		reply(c->fd, "JS1 OK%s seq=%u", id, seq);
	return rc;
}

static void rejected(struct js_step *s, struct srv *v, struct js_conn *c, int rank,
		     const char *id, int rc)
{
	s->rejected++;
	const char *msg = rc == -ERANGE ? "nesting deeper than max_depth"
			: rc == -ENOSPC ? "max_phases (or 1048576 rank entries) reached for this step"
			: rc == -EUSERS ? "more than 4096 distinct ranks in this step"
			: rc == -ENOENT ? "no open phase for this rank"
			: rc == -ENOMEM ? "out of memory"
			: "rejected";
	char what[160];
	snprintf(what, sizeof(what), "phase message rejected (rank %d: %s)", rank, msg);
	msg_error(s, v, c, what);
	reply(c->fd, "JS1 ERR %d%s %s", -rc, id, msg);
}

static void handle(struct js_step *s, struct srv *v, struct js_conn *c, const char *buf,
		   size_t len, bool truncated, bool draining)
{
	char id[32];
	struct js_msg m;
	const char *why = NULL;

	find_id(buf, len > JS_MSG_MAX ? JS_MSG_MAX : len, id, sizeof(id));
	int code = parse_msg(buf, len, truncated, &m, &why);
	if (code) {
		s->rejected++;
		char what[160];
		snprintf(what, sizeof(what), "malformed phase message (%s)", why);
		msg_error(s, v, c, what);
		reply(c->fd, "JS1 ERR %d%s %s", code, id, why);
		return;
	}
	int rank = m.rank >= 0 ? m.rank : 0;
	int rc;
	switch (m.op) {
	case JS_OP_PING:
		reply(c->fd, "JS1 OK%s PONG job=%u step=%s", id, s->job_id, s->step_id);
		return;
	case JS_OP_BEGIN:
		if (draining) { /* never replayed: the step is over */
			s->skipped_at_end++;
			not_recorded(s, c, &m, rank, id, ESHUTDOWN, "the step is ending");
			return;
		}
		if (begin_capped(s, v, c, &m, rank, id))
			return;
		rc = on_begin(s, c, &m, rank, id);
		break;
	case JS_OP_END:
		rc = on_end(s, c, &m, rank, id);
		break;
	default:
		rc = -EINVAL;
	}
	if (rc)
		rejected(s, v, c, rank, id, rc);
}

/* ---- peers --------------------------------------------------------------- */

/* /proc/<pid>/stat through the /proc fd opened on the main thread: the
 * parent pid and the start time (clock ticks since boot). The file is
 * world-readable: reading it needs no privilege, whatever slurmstepd's euid
 * is at this moment. */
static int proc_stat(int procfd, pid_t pid, pid_t *ppid, unsigned long long *start)
{
	char name[32], buf[1024];
	snprintf(name, sizeof(name), "%d/stat", (int)pid);
	int fd = openat(procfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	int e = errno;
	close(fd);
	if (n <= 0)
		return n < 0 ? -e : -EIO;
	buf[n] = 0;
	char *p = strrchr(buf, ')'); /* comm may hold spaces and ')' */
	if (!p)
		return -EIO;
	/* after comm: state(1) ppid(2) ... starttime(20) */
	char *save = NULL;
	int field = 0;
	long long pp = -1;
	unsigned long long st = 0;
	bool have_st = false;
	for (char *t = strtok_r(p + 1, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
		field++;
		if (field == 2)
			pp = strtoll(t, NULL, 10);
		if (field == 20) {
			st = strtoull(t, NULL, 10);
			have_st = true;
			break;
		}
	}
	if (pp < 0 || !have_st)
		return -EIO;
	*ppid = (pid_t)pp;
	*start = st;
	return 0;
}

/* Is pid (the peer of fd, from SO_PEERCRED) a process of this step, i.e. a
 * descendant of this slurmstepd? Walks the parents through /proc up to
 * getpid(), then reads every link again: each must still be the same
 * process (start time) with the same parent, so a pid reused during the walk
 * (or a parent that exited, reparenting its child) is caught. Where the
 * kernel gives a pidfd of the peer (SO_PEERPIDFD), the peer must still be
 * alive after the walk: then the pid we read was the peer's own. 0 or
 * -EACCES (not in this step) or -errno (cannot tell: refused too). */
static int peer_in_step(struct js_step *s, int fd, pid_t pid)
{
	pid_t chain[PEER_MAX_DEPTH], parent[PEER_MAX_DEPTH];
	unsigned long long start[PEER_MAX_DEPTH];
	pid_t self = getpid();
	int pidfd = -1, n = 0, rc = -EACCES;
	socklen_t l = sizeof(pidfd);

	if (s->proc_fd < 0)
		return -EBADF;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &l) < 0)
		pidfd = -1; /* older kernel: the start times are the guard */
	for (pid_t p = pid; n < PEER_MAX_DEPTH; n++) {
		if (p <= 1 || p == self)
			goto out; /* reached init (or it is us) without passing us */
		rc = proc_stat(s->proc_fd, p, &parent[n], &start[n]);
		if (rc < 0)
			goto out;
		chain[n] = p;
		if (parent[n] == self)
			break;
		p = parent[n];
		rc = -EACCES;
	}
	if (n == PEER_MAX_DEPTH) {
		rc = -EACCES;
		goto out;
	}
	for (int i = 0; i <= n; i++) {
		pid_t pp;
		unsigned long long st;
		rc = proc_stat(s->proc_fd, chain[i], &pp, &st);
		if (rc < 0)
			goto out;
		if (pp != parent[i] || st != start[i]) {
			rc = -ESTALE;
			goto out;
		}
	}
	rc = 0;
	if (pidfd >= 0 && syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) < 0 && errno != EPERM)
		rc = -ESRCH; /* the peer is gone: its pid may be someone else's now */
out:
	if (pidfd >= 0)
		close(pidfd);
	return rc;
}

/* Accept one connection: 0 accepted, 1 refused, -1 nothing pending. */
static int accept_one(struct js_step *s, struct srv *v)
{
	int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	if (fd < 0)
		return -1;
	struct ucred cr = {.pid = 0, .uid = (uid_t)-1, .gid = (gid_t)-1};
	socklen_t cl = sizeof(cr);
	char why[160];
	int rc = 0;
	int g = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl);
	if (g < 0 || cl != sizeof(cr)) { /* cr is not logged: it may be unset */
		rc = g < 0 ? -errno : -EIO;
		snprintf(why, sizeof(why), "a peer whose credentials cannot be read (%s)",
			 strerror(-rc));
	} else if (cr.uid != 0 && cr.uid != s->uid) {
		rc = -EACCES;
		snprintf(why, sizeof(why), "uid %u pid %d (only uid %u and root)", (unsigned)cr.uid,
			 (int)cr.pid, (unsigned)s->uid);
	} else if (cr.uid != 0 && (rc = peer_in_step(s, fd, cr.pid)) < 0) {
		snprintf(why, sizeof(why), "uid %u pid %d: not a process of this step (%s)",
			 (unsigned)cr.uid, (int)cr.pid,
			 rc == -EACCES ? "not a descendant of its slurmstepd" : strerror(-rc));
	}
	if (rc < 0) {
		reply(fd, "JS1 ERR %d permission denied", EACCES);
		if (++v->refused <= REFUSALS_LOGGED)
			slurm_info("joulestep: job %u step %s: refused phase connection from %s%s",
				   s->job_id, s->step_id, why,
				   v->refused == REFUSALS_LOGGED ? "; further refusals in this step are not logged" : "");
		refuse_close(fd);
		return 1;
	}
	if (s->nconns == JS_MAX_CONNS) {
		reply(fd, "JS1 ERR %d too many connections", EMFILE);
		refuse_close(fd);
		return 1;
	}
	s->conns[s->nconns].fd = fd;
	s->conns[s->nconns].logged = false;
	s->nconns++;
	return 0;
}

/* ---- the thread ----------------------------------------------------------- */

static void sample(struct js_step *s)
{
	struct js_snapshot sn;
	(void)js_meter_snapshot(s->meter, &sn); /* errors surface in the final reading */
}

/* Step end: what is already queued, within DRAIN_MAX_MSGS and DRAIN_MAX_NS;
 * the clock is held (the caller restores it through the journal). */
static void drain(struct js_step *s, struct srv *v)
{
	uint64_t deadline = js_mono_ns() + DRAIN_MAX_NS;
	bool done = false;
	if (s->phases)
		js_phases_hold_clock(s->phases);
	for (size_t i = 0; i < s->nconns; i++) {
		char buf[JS_MSG_MAX + 64];
		int fd = s->conns[i].fd;
		while (!done) {
			if (s->drained >= DRAIN_MAX_MSGS || js_mono_ns() >= deadline) {
				done = true;
				break;
			}
			ssize_t r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC);
			if (r <= 0)
				break;
			s->drained++;
			handle(s, v, &s->conns[i], buf, (size_t)r < sizeof(buf) ? (size_t)r : sizeof(buf),
			       (size_t)r > JS_MSG_MAX, true);
		}
		if (done && !s->drain_truncated && recv(fd, buf, 1, MSG_DONTWAIT | MSG_PEEK) > 0)
			s->drain_truncated = true; /* dropped unread: counted, not logged per marker */
		close(fd);
	}
	s->nconns = 0;
	if (s->drain_truncated)
		slurm_info("joulestep: job %u step %s: %llu queued phase markers handled at step end; the rest were dropped (bound %d markers, %llu ms)",
			   s->job_id, s->step_id, (unsigned long long)s->drained, DRAIN_MAX_MSGS,
			   DRAIN_MAX_NS / 1000000ULL);
}

/* Up to MSGS_PER_WAKEUP messages of connection i; true when it is closed
 * (by the peer, or an error), *stop when the step's end was asked for. */
static bool read_conn(struct js_step *s, struct srv *v, size_t i, bool *stop)
{
	for (int k = 0; k < MSGS_PER_WAKEUP; k++) {
		if (stopping(s)) {
			*stop = true;
			return false;
		}
		char buf[JS_MSG_MAX + 64];
		ssize_t r = recv(s->conns[i].fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC);
		if (r < 0)
			return !(errno == EAGAIN || errno == EINTR);
		if (r == 0)
			return true;
		handle(s, v, &s->conns[i], buf, (size_t)r < sizeof(buf) ? (size_t)r : sizeof(buf),
		       (size_t)r > JS_MSG_MAX, false);
	}
	return false;
}

/* The connections' messages, then closed ones dropped; *stop as above.
 * Between two messages the stop request wins: what is left is for the
 * bounded drain. */
static void serve_conns(struct js_step *s, struct srv *v, const struct pollfd *pfd, size_t nc,
			bool *stop)
{
	for (size_t i = 0; i < nc && !*stop; i++) {
		if (!pfd[i].revents)
			continue;
		bool closed = read_conn(s, v, i, stop);
		if (!*stop && (closed || (pfd[i].revents & (POLLHUP | POLLERR | POLLNVAL) &&
					  !(pfd[i].revents & POLLIN)))) {
			close(s->conns[i].fd);
			s->conns[i].fd = -1;
		}
	}
	size_t w = 0;
	for (size_t i = 0; i < nc; i++)
		if (s->conns[i].fd >= 0)
			s->conns[w++] = s->conns[i];
	s->nconns = w;
}

/* The meter has no thread of its own: sample it at its period (half the
 * shortest wrap time, capped by sample_ms), whatever the markers do. The
 * poll's timeout until the next sample, or NULL (no meter). */
static struct timespec *sample_due(struct js_step *s, uint64_t period, uint64_t *due,
				   struct timespec *ts)
{
	if (!period)
		return NULL;
	uint64_t now = js_mono_ns();
	if (now >= *due) {
		sample(s);
		now = js_mono_ns();
		*due = now + period;
	}
	uint64_t left = *due - now;
	ts->tv_sec = (time_t)(left / 1000000000ULL);
	ts->tv_nsec = (long)(left % 1000000000ULL);
	return ts;
}

static void *server_main(void *arg)
{
	struct js_step *s = arg;
	struct pollfd pfd[JS_MAX_CONNS + 2];
	struct srv v = {.rate_logged = false, .cap_logged = false, .refused = 0, .msg_errors = 0};

	(void)pthread_setname_np(pthread_self(), "js-step");
	uint64_t period = s->meter ? js_meter_period_ns(s->meter) : 0;
	uint64_t due = js_mono_ns() + period;
	js_markcap_init(&v.cap, s->conf.rate, s->conf.max_markers_per_step, js_mono_ns());
	bool stop = false;
	while (!stop && !stopping(s)) {
		struct timespec ts, *tmo = sample_due(s, period, &due, &ts);
		size_t nc = s->nconns;
		pfd[0].fd = s->stop_fd;
		pfd[0].events = POLLIN;
		pfd[1].fd = s->listen_fd;
		pfd[1].events = POLLIN;
		for (size_t i = 0; i < nc; i++) {
			pfd[i + 2].fd = s->conns[i].fd;
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
		serve_conns(s, &v, pfd + 2, nc, &stop);
		if (!stop && (pfd[1].revents & POLLIN)) {
			/* bounded: a connect flood (any local user may connect)
			 * must not keep the thread from markers and stop */
			for (int a = 0; a < ACCEPTS_PER_WAKEUP && !stopping(s); a++)
				if (accept_one(s, &v) < 0)
					break;
		}
	}
	drain(s, &v);
	return NULL;
}

/* ---- main thread ---------------------------------------------------------- */

/* What is at the socket's path before the bind: nothing, or a stale socket
 * of a killed step (root-owned: only root can write socket_dir), which is
 * removed. Anything else is not ours: it is left alone and the step gets no
 * markers (the record says what was there). 0 or -errno; why is set on
 * -EEXIST. */
static int clear_stale(int dfd, const char *name, char *why, size_t whylen)
{
	struct stat st;
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (S_ISSOCK(st.st_mode) && st.st_uid == 0)
		return unlinkat(dfd, name, 0) < 0 ? -errno : 0;
	snprintf(why, whylen, "%s of uid %u",
		 S_ISSOCK(st.st_mode) ? "a socket" : S_ISLNK(st.st_mode) ? "a symlink"
		 : S_ISREG(st.st_mode) ? "a file" : S_ISDIR(st.st_mode) ? "a directory" : "a special file",
		 (unsigned)st.st_uid);
	return -EEXIST;
}

void js_server_listen(struct js_step *s)
{
	s->sock_path[0] = 0;
	/* The length first: a path AF_UNIX cannot hold leaves nothing behind
	 * (not even socket_dir, which would be created below). */
	char path[sizeof(s->sock_path)], name[64];
	int n = snprintf(path, sizeof(path), "%s/%u.%s.sock", s->conf.socket_dir, s->job_id,
			 s->step_id);
	if (n < 0 || (size_t)n >= sizeof(path)) {
		js_step_error(s, "socket: path %s/%u.%s.sock too long for a UNIX socket (at most %zu bytes); no phase markers",
			      s->conf.socket_dir, s->job_id, s->step_id, sizeof(path) - 1);
		return;
	}
	snprintf(name, sizeof(name), "%u.%s.sock", s->job_id, s->step_id);
	/* Every component root-owned and not group/world-writable, no symlink:
	 * only root can change what the path names from here on. */
	int dfd = js_root_dirfd(s->conf.socket_dir, 0755, true);
	if (dfd < 0) {
		js_step_error(s, "socket: socket_dir %s: %s (must be root-owned, not group/world-writable, no symlink); no phase markers",
			      s->conf.socket_dir, strerror(-dfd));
		return;
	}
	char why[64] = "";
	int rc = clear_stale(dfd, name, why, sizeof(why));
	if (rc < 0) {
		if (rc == -EEXIST)
			js_step_error(s, "socket: %s exists and is not a stale root-owned socket (%s); left alone, no phase markers",
				      path, why);
		else
			js_step_error(s, "socket: %s: %s; no phase markers", path, strerror(-rc));
		close(dfd);
		return;
	}
	s->proc_fd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->proc_fd < 0) {
		js_step_error(s, "socket: /proc: %s (needed to check peers); no phase markers",
			      strerror(errno));
		close(dfd);
		return;
	}
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		js_step_error(s, "socket: %s; no phase markers", strerror(errno));
		close(dfd);
		close(s->proc_fd);
		s->proc_fd = -1;
		return;
	}
	/* No umask games: umask is process wide. The socket is made 0666 at
	 * once in a root-only directory (without following a symlink); the
	 * peer checks are the guard. Only what we bound is ever removed. */
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	memcpy(sa.sun_path, path, (size_t)n + 1);
	bool bound = false;
	if ((bound = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) &&
	    fchmodat(dfd, name, 0666, AT_SYMLINK_NOFOLLOW) == 0 && listen(fd, 128) == 0) {
		close(dfd);
		s->listen_fd = fd;
		memcpy(s->sock_path, path, (size_t)n + 1);
		return;
	}
	js_step_error(s, "socket: %s: %s; no phase markers", path, strerror(errno));
	close(fd);
	if (bound)
		(void)unlinkat(dfd, name, 0);
	close(dfd);
	close(s->proc_fd);
	s->proc_fd = -1;
}

void js_server_unlisten(struct js_step *s)
{
	if (s->listen_fd >= 0) {
		close(s->listen_fd);
		(void)unlink(s->sock_path);
	}
	if (s->proc_fd >= 0)
		close(s->proc_fd);
	s->listen_fd = s->proc_fd = -1;
	s->sock_path[0] = 0;
}

int js_server_start(struct js_step *s)
{
	int rc;
	atomic_store(&s->stopping, false);
	s->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->stop_fd < 0) {
		rc = -errno;
		js_step_error(s, "step thread: eventfd: %s", strerror(errno));
		js_server_unlisten(s);
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
		js_server_unlisten(s);
		return -rc;
	}
	s->server_running = true;
	return 0;
}

void js_server_stop_request(struct js_step *s)
{
	if (s->server_running && !s->stop_requested) {
		uint64_t one = 1;
		atomic_store(&s->stopping, true);
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
	js_server_unlisten(s);
	if (s->stop_fd >= 0)
		close(s->stop_fd);
	s->stop_fd = -1;
}
