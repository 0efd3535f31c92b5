/* libjoulestep-client: mark application phases for the joulestep SPANK
 * plugin (protocol: docs/phase-protocol.md).
 *
 *   #include <joulestep/client.h>
 *   js_phase_begin("checkpoint", "ckpt-12");
 *   ...
 *   js_phase_end(nbytes);             // bytes < 0: unknown
 *
 * Build: cc app.c $(pkg-config --cflags --libs joulestep-client)
 *
 * Outside a joulestep step (no JOULESTEP_SOCKET in the environment) every
 * call is a no-op returning JS_NOT_IN_STEP. Errors are -errno (or the
 * negated protocol error code the plugin replied with, in sync mode).
 * Thread-safe; one connection per process, opened on first use (and again
 * after fork). The plugin binds the socket just after the step's tasks may
 * start: a connect that finds it missing or not yet listening is retried
 * for at most 200 ms from the process's first attempt. Markers are asynchronous by default (one send, no reply);
 * JOULESTEP_SYNC=1 or js_phase_set_sync(1) makes each call wait for the
 * plugin's reply, so the clock is already set when it returns.
 * When the plugin falls behind (the connection's queue is full), a marker
 * waits for room, at most 1 s; after such a wait expired (the plugin is
 * stalled) asynchronous markers do not wait until one gets through again.
 * A BEGIN that returned nonzero was not recorded: send no END for it. An
 * END that could not be sent is kept and sent, in order, before the next
 * marker (or at exit); asynchronous, it returns 0. So the plugin's nesting
 * stays right (docs/phase-protocol.md, "Limits"). */
#ifndef JOULESTEP_CLIENT_H
#define JOULESTEP_CLIENT_H

#ifdef __cplusplus
extern "C" {
#endif

#define JS_NOT_IN_STEP 1 /* positive: not an error, nothing was sent */

/* kind: [a-z0-9_-]{1,32} (compute, compress, write, checkpoint, flush,
 * restart or your own); label: [A-Za-z0-9_.:+/-]{1,64} or NULL. */
int js_phase_begin(const char *kind, const char *label);
/* Ends the innermost open phase of this rank. bytes < 0: unknown. */
int js_phase_end(long long bytes);
/* 1: wait for the plugin's reply on every marker; 0: asynchronous. */
int js_phase_set_sync(int on);
/* Round trip to the plugin: 0 when a step's socket answers. */
int js_phase_ping(void);

#ifdef __cplusplus
}
#endif
#endif
