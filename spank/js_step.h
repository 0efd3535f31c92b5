/* joulestep SPANK plugin: per-step state shared by the plugin's parts
 * (joulestep.c glue, js_server.c phase socket, js_record.c record). */
#ifndef JS_STEP_H
#define JS_STEP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <joulestep/energy.h>
#include <joulestep/node.h>
#include <joulestep/freq.h>
#include <joulestep/gpu.h>

#include "../accounting/src/fsutil.h" /* js_root_dirfd, js_write_atomicat */

#include "js_parse.h"
#include "js_phase.h"
#include "js_share.h"

/* The slurm_* functions the plugin calls are exported by the host process
 * (srun, sbatch, salloc, slurmstepd and slurmd link libslurmfull). Weak
 * references keep the link strict (-z defs) without a DT_NEEDED on
 * libslurm.so: loading that second copy of the Slurm library cost every srun
 * and slurmstepd ~0.2 ms per step launch, for symbols that resolve to the
 * host's copy anyway. */
#pragma weak slurm_error
#pragma weak slurm_info
#pragma weak slurm_verbose

#define JS_PLUGIN_VERSION "0.3.0"
#define JS_MAX_ERRORS 32
#define JS_ERR_LEN 256
#define JS_MAX_STEP_CPUS 256
#define JS_MAX_CONNS 512           /* phase-socket connections per step     */
#define JS_ERRORS_LOGGED 16        /* js_step_error lines logged per step   */

struct js_conn {                   /* one accepted phase-socket connection  */
	int fd;
	bool logged;               /* its first error was logged            */
};

struct js_step {
	struct js_conf conf;
	char cluster[64];
	/* identity */
	uint32_t job_id;
	char step_id[24];          /* "batch", "interactive" or a number     */
	uint32_t het;
	uid_t uid;
	gid_t gid;
	/* trusted sources only (docs/admin-guide.md): SPANK items, the job
	 * prolog's cache of slurmd's environment, the plugstack; never the
	 * job's environment. job_name has no trusted source: always "". */
	char user[64], account[64], partition[64], job_name[128], node[64];
	char node_model[128];
	uint32_t ntasks, nnodes, nodeid;
	uint64_t first_seen_ns;     /* job prolog on this node, else step start */
	uint64_t start_ns, end_ns;                /* CLOCK_REALTIME             */
	uint64_t start_mono_ns, end_mono_ns;
	int64_t mono_to_real_ns;                  /* real = mono + this         */
	const char *job_source;     /* "prolog" (job cache) or "step"           */
	int exit_code;                            /* -1 unknown                 */
	/* policy */
	struct js_policy policy;
	char tuned_model[128];      /* tuned: the file's node_model, "" = none  */
	struct js_tags tags;
	/* cpus */
	struct js_cpuset cpus;
	struct js_cpuset smt_aside; /* step CPUs whose core has a thread outside
				     * the step: their clocks are left alone */
	int ncpus;
	bool exclusive;
	int cpu_list[JS_MAX_STEP_CPUS];
	struct js_cpufreq *cf;      /* ncpus entries (~1 kB each), NULL if none */
	bool acquired[JS_MAX_STEP_CPUS];
	uint32_t base_khz;          /* the original clock (scaling_max_freq)   */
	uint32_t fmax_khz;
	char owner[64];
	/* shared-node inputs (js_share.h): at s0 and s1 */
	struct js_cpu_topo *topo;   /* read at step start, NULL if none        */
	struct js_share_snap sh0, sh1;
	bool have_sh0, have_sh1;
	/* energy */
	struct js_energy *energy;
	struct js_meter *meter;
	struct js_snapshot s0, s1;
	bool have_s0;
	/* node-level energy (node_energy=, joulestep/node.h): n0/n1 at the
	 * step's first and final readings */
	struct js_node *nsrc;
	struct js_node_meter *node_meter;
	struct js_node_snapshot n0, n1;
	bool have_n0, have_n1;
	char node_why[256];         /* why no node source (record)              */
	bool ended;                 /* s1 taken (atomic): phases end at s1     */
	/* phases */
	struct js_phases *phases;
	uint64_t dropped_rate, rejected;
	uint64_t dropped_step_cap;  /* BEGINs over max_markers_per_step         */
	uint64_t energy_resolution_uj; /* user-visible rounding (js_sidechan.h) */
	uint64_t max_lag_ns;
	/* the phase socket (bound on the main thread, js_server_listen) and
	 * the step thread (js_server.c): runs the deferred setup, serves
	 * markers and samples the meter */
	char sock_path[108];        /* exported; "" = no markers               */
	int listen_fd, stop_fd;     /* -1 when none                            */
	pthread_t server;
	bool server_running, stop_requested;
	bool defer_cpus;            /* cpufreq reads left to the thread        */
	/* ---- frequency control (issue 8, branch h-freq) -------------------- *
	 * One handle per controlled cpufreq policy, opened by slurmstepd's main
	 * thread at step start (setup_freq); the step thread changes clocks
	 * only through their descriptors (ph_set_ratio: pwrite, no open). */
	struct js_freq_ctl *ctl;    /* nctl entries, NULL if none              */
	int nctl;
	uint32_t nominal_khz;       /* nominal non-turbo clock, 0 unknown      */
	uint32_t fixed_khz;         /* fixed:R's clock once applied, else 0    */
	const char *freq_mode;      /* provenance.freq_control: "joulestep",
				     * "monitor", "slurm-cpu-freq" or "none"   */
	/* ---- end of frequency control -------------------------------------- */
	/* provenance */
	pthread_mutex_t err_mu;
	size_t nerrors;
	char errors[JS_MAX_ERRORS][JS_ERR_LEN];
	/* ---- issue 8: phase socket, step-end drain, error count ----------
	 * (js_server.c, js_record.c; errors_total: js_step_error) */
	int proc_fd;                /* /proc (main thread): peer checks, -1    */
	atomic_bool stopping;       /* js_server_stop_request: leave the loop  */
	size_t nconns;              /* accepted connections (thread-owned)     */
	struct js_conn conns[JS_MAX_CONNS];
	uint64_t drained;           /* markers read at step end (bounded)      */
	uint64_t skipped_at_end;    /* of which BEGINs, not replayed           */
	bool drain_truncated;       /* drain stopped at its bound, markers left */
	uint64_t errors_total;      /* js_step_error calls (errors[]: first 32) */
	/* ---- end of issue 8 fields ---------------------------------------- */
	unsigned hooks_mask;        /* --energy-hooks preloaded (js_hooks.h)   */
	/* ---- GPUs (js_gpu_step.c; docs/design.md, "Which GPUs a step owns") */
	char gpu_sel[128];          /* the job's GPU indices (job cache), "" none */
	char gpu_others[256];       /* GPU indices other jobs on the node hold   */
	char gpu_why[200];          /* why the job's GPUs are not measured, ""   */
	struct js_gpus *gpus;       /* opened on the main thread at step start  */
	struct js_gpu_meter *gmeter;
	struct js_gpu_snapshot g0, g1;
	uint64_t g0_ticket;         /* the meter's request for g0 (step start)  */
	bool have_g0, have_g1;
	/* +gpu-io: the step's whole GPUs (eligible, main thread at step
	 * start); the step thread journals one before locking it and releases
	 * it after unlocking (journaled); step end unlocks what is left */
	bool gpu_eligible[JS_MAX_GPUS];
	bool gpu_journaled[JS_MAX_GPUS];
	const char *gpu_clock_mode; /* provenance.gpu_clock_control           */
	/* ---- +uncore-io (js_uncore_step.c; docs/design.md, "Uncore") ------- */
	struct js_cpuset pkgs_owned; /* package ids whose every CPU is the step's */
	int nuncore;                 /* domains journaled, fd open            */
	struct js_uncore_step_dom {
		char name[32];
		int fd;                  /* max_freq_khz, opened on the main thread */
		uint32_t entry_khz, cap_khz;
	} *uncore;
};

/* js_uncore_step.c (+uncore-io): journal and open the uncore domains of the
 * packages the step owns whole (main thread, step start); the phase
 * logic's set_uncore (step thread: pwrite on those descriptors only); step
 * end: write back, release the journal; job prolog/epilog: recover. */
void js_uncore_step_setup(struct js_step *s);
int js_uncore_step_set(void *ctx, bool low, uint32_t *khz);
void js_uncore_step_restore(struct js_step *s);
void js_uncore_recover_node(const struct js_conf *c, uint32_t jobid, const char *when);

/* js_gpu_step.c: the step's GPUs. Open the vendor library on the selected
 * GPUs and take the first reading (main thread, step start); the final
 * reading (step end); a phase boundary's (the step thread); the record's
 * "gpus" list and a phase's; close. */
void js_gpu_step_open(struct js_step *s);
void js_gpu_step_end(struct js_step *s);
void js_gpu_step_mark(struct js_step *s, uint64_t at_ns, struct js_gpu_mark *out);
bool js_gpu_step_mark_result(struct js_step *s, struct js_gpu_mark *m, bool wait);
void js_gpu_step_close(struct js_step *s);
/* +gpu-io (main thread, after js_gpu_step_open): the GPUs whose clock the
 * step may change (whole GPUs; none when Slurm's --gpu-freq was asked
 * for: slurm_gpu_freq). */
void js_gpu_step_clock_setup(struct js_step *s, bool slurm_gpu_freq, const char *req);
/* The phase logic's set_gpu (step thread). */
int js_gpu_step_set_clock(void *ctx, bool low, uint32_t *mhz);
/* Step end: unlock the journaled GPUs, then release their entries. */
void js_gpu_step_clock_restore(struct js_step *s);
/* Job prolog and epilog: unlock the node's GPUs whose journal entry names a
 * dead owner (a killed slurmstepd). */
void js_gpu_recover_node(const struct js_conf *c, uint32_t jobid, const char *when);
/* Why GPU i of the step has no per-job energy ("split by MIG", "shared
 * with another job"), or NULL. */
const char *js_gpu_step_unowned(const struct js_step *s, size_t i);
/* The record's step "gpus" list and a phase's; *sum_uj: the GPUs' energy,
 * *all_ok: every GPU of the step has it (else the sum is not reported). */
typedef struct json_t json_t;
json_t *js_gpu_step_json(const struct js_step *s, uint64_t *sum_uj, bool *all_ok);
json_t *js_gpu_phase_json(const struct js_step *s, const struct js_sphase *p, uint64_t *sum_uj,
			  bool *all_ok);
/* The user's summary (js_record.c): the step's GPUs (uuid, energy_uj
 * rounded to JS_GPU_USER_RES_UJ or null, reason), none shown when !shown
 * (shorter than min_phase_ms); *sum_uj and *all_ok as above. A phase's
 * sum: true when every GPU has a figure. */
#define JS_GPU_USER_RES_UJ 1000ULL /* 1 mJ: NVML's counter unit */
json_t *js_gpu_user_json(const struct js_step *s, bool shown, uint64_t *sum_uj, bool *all_ok);
bool js_gpu_user_phase(const struct js_step *s, const struct js_sphase *p, bool shown, uint64_t *uj);

/* Record a failure in provenance.errors (the first JS_MAX_ERRORS; all are
 * counted in errors_total) and log it with slurm_error (the first
 * JS_ERRORS_LOGGED of the step). Thread-safe. */
void js_step_error(struct js_step *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* js_server.c: the phase socket and the step thread (all signals blocked).
 * js_server_listen runs on slurmstepd's main thread in a SPANK callback
 * (privileged work never runs in the thread: slurmstepd switches its euid,
 * for every thread, while it starts the tasks). The thread, started at the
 * end of the step's setup, runs js_step_deferred(), then serves markers on
 * the descriptors opened here and, when the meter has no thread of its own,
 * samples it every js_meter_period_ns(). */
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


/* js_record.c */
/* The record's directory <spool>/<cluster>/<job_id> (created; logged on
 * failure): a directory fd or -errno. */
int js_record_dir(struct js_step *s);
/* The record's file name <job>.<step>.<het>-<incarnation>.<node>.json:
 * incarnation = first_seen_ns (the job prolog's time on this node), so that
 * each run of a requeued job has its own records (docs/design.md, "A
 * requeued job's incarnations"). js_record_name_of (js_pending.h) is the
 * pure part. */
void js_record_name(const struct js_step *s, char *name, size_t len);
/* Write the record into dfd (from js_record_dir; closed here): tmp + fsync
 * + rename. When that fails (or dfd < 0), the record goes to the fallback
 * <state>/pending (js_pending.h), or is counted as lost; logged. Returns the
 * spool's error (0 when written there). */
int js_record_write(struct js_step *s, int dfd);
/* Job epilog: fsync <spool>/<cluster>/<job_id> and its parents, making the
 * job's record renames durable (cluster NULL or "": every cluster
 * directory). -ENOENT when the job has no record directory. */
int js_record_sync_job(const char *spool, const char *cluster, uint32_t job_id);
#endif
