/* joulestep SPANK plugin: the state of one step in slurmstepd, shared by
 * the plugin's modules (docs/design.md, "The plugin's modules"), and its
 * error list (js_step.c). Each module has its own header; this one declares
 * only the struct, js_step_error and the clock. */
#ifndef JS_STEP_H
#define JS_STEP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include <joulestep/energy.h>
#include <joulestep/node.h>
#include <joulestep/freq.h>
#include <joulestep/gpu.h>

#include "js_auto.h"
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

#define JS_PLUGIN_VERSION "0.4.0"
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
	struct js_auto autop;       /* auto: what the step took from the file   */
	struct js_tags tags;
	/* cpus */
	struct js_cpuset cpus;
	struct js_cpuset smt_aside; /* step CPUs whose core has a thread outside
				     * the step: their clocks are left alone */
	int ncpus;
	int cpu_list[JS_MAX_STEP_CPUS];
	struct js_cpufreq *cf;      /* ncpus entries (~1 kB each), NULL if none */
	bool acquired[JS_MAX_STEP_CPUS];
	uint32_t base_khz;          /* the original clock (scaling_max_freq)   */
	uint32_t fmax_khz;
	char owner[64];
	/* shared-node inputs (js_share.h): at s0 and s1 */
	struct js_cpu_topo *topo;   /* js_cpu_step_map's, NULL if none         */
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
	 * the step thread (js_server.c): serves markers and samples the
	 * meter */
	char sock_path[108];        /* exported; "" = no markers               */
	int listen_fd, stop_fd;     /* -1 when none                            */
	pthread_t server;
	bool server_running, stop_requested;
	bool defer_cpus;            /* monitor: cpufreq read at step end       */
	/* ---- frequency control (js_cpu_step.c) ------------------------------ *
	 * One handle per controlled cpufreq policy, opened by slurmstepd's main
	 * thread at step start (js_cpu_step_setup); the step thread changes
	 * clocks only through their descriptors (js_cpu_step_set_ratio: pwrite,
	 * no open). */
	struct js_freq_ctl *ctl;    /* nctl entries, NULL if none              */
	int nctl;
	uint32_t nominal_khz;       /* nominal non-turbo clock, 0 unknown      */
	uint32_t fixed_khz;         /* fixed:R's clock once applied, else 0    */
	const char *freq_mode;      /* provenance.freq_control: "joulestep",
				     * "monitor", "slurm-cpu-freq" or "none"   */
	/* provenance */
	pthread_mutex_t err_mu;
	size_t nerrors;
	char errors[JS_MAX_ERRORS][JS_ERR_LEN];
	/* ---- phase socket, step-end drain, error count ------------------
	 * (js_server.c, js_record.c; errors_total: js_step_error) */
	int proc_fd;                /* /proc (main thread): peer checks, -1    */
	atomic_bool stopping;       /* js_server_stop_request: leave the loop  */
	size_t nconns;              /* accepted connections (thread-owned)     */
	struct js_conn conns[JS_MAX_CONNS];
	uint64_t drained;           /* markers read at step end (bounded)      */
	uint64_t skipped_at_end;    /* of which BEGINs, not replayed           */
	bool drain_truncated;       /* drain stopped at its bound, markers left */
	uint64_t errors_total;      /* js_step_error calls (errors[]: first 32) */
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
	/* ---- +uncore-io (js_uncore_step.c; docs/design.md, "Uncore clocks") - */
	struct js_cpuset pkgs_owned; /* package ids whose every CPU is the step's */
	int nuncore;                 /* domains journaled, fd open            */
	struct js_uncore_step_dom {
		char name[32];
		int fd;                  /* max_freq_khz, opened on the main thread */
		uint32_t entry_khz, cap_khz;
	} *uncore;
	struct js_cgroup_step *cgs;  /* the step's cgroup (js_cgroup_step.h)   */
	bool fixed_done;             /* fixed:R applied (task_post_fork)       */
};

/* Record a failure in provenance.errors (the first JS_MAX_ERRORS; all are
 * counted in errors_total) and log it with slurm_error (the first
 * JS_ERRORS_LOGGED of the step). Thread-safe. */
void js_step_error(struct js_step *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* CLOCK_MONOTONIC or CLOCK_REALTIME now, in ns. */
uint64_t js_now_ns(clockid_t c);

#endif
