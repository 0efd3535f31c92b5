/* joulestep SPANK plugin: the phase socket and the step thread
 * (js_server.c; all signals blocked). js_server_listen runs on slurmstepd's
 * main thread in a SPANK callback (privileged work never runs in the
 * thread: slurmstepd switches its euid, for every thread, while it starts
 * the tasks). The thread, started at the end of the step's setup, serves
 * markers on the descriptors opened here and, when the meter has no thread
 * of its own, samples it every js_meter_period_ns(). */
#ifndef JS_SERVER_H
#define JS_SERVER_H

struct js_step;

/* Check socket_dir (root-owned, not group/world writable, no symlink;
 * created when missing) and the path's length, bind and listen on
 * <socket_dir>/<job>.<step>.sock (replacing only a stale root-owned socket;
 * anything else there is left alone) and open /proc for the peer checks;
 * sets sock_path. On failure sock_path stays empty (error recorded): no
 * markers. docs/security.md, "Socket access". */
void js_server_listen(struct js_step *s);
void js_server_unlisten(struct js_step *s); /* close + unlink, no markers */
int js_server_start(struct js_step *s);     /* 0 or -errno (logged)       */
void js_server_stop_request(struct js_step *s); /* wake it up, no wait     */
void js_server_stop(struct js_step *s);     /* bounded drain, join, unlink */

#endif
