/* joulestep SPANK plugin: per-step state shared by the plugin's parts
 * (joulestep.c glue, js_server.c phase socket, js_record.c record). */
#ifndef JS_STEP_H
#define JS_STEP_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <joulestep/energy.h>
#include <joulestep/freq.h>

#include "js_parse.h"
#include "js_phase.h"

#define JS_PLUGIN_VERSION "0.1.0"
#define JS_MAX_ERRORS 32
#define JS_ERR_LEN 256
#define JS_MAX_STEP_CPUS 256

struct js_step {
	struct js_conf conf;
	char cluster[64];
	/* identity */
	uint32_t job_id;
	char step_id[24];          /* "batch", "interactive" or a number     */
	uint32_t het;
	uid_t uid;
	gid_t gid;
	char user[64], account[64], partition[64], job_name[128], node[64];
	char node_model[128];
	uint32_t ntasks, nnodes, nodeid;
	uint64_t submit_ns, start_ns, end_ns;     /* CLOCK_REALTIME             */
	uint64_t start_mono_ns, end_mono_ns;
	int64_t mono_to_real_ns;                  /* real = mono + this         */
	const char *submit_source;  /* "slurmctld", "cache" or "step_start"     */
	int exit_code;                            /* -1 unknown                 */
	/* policy */
	struct js_policy policy;
	struct js_tags tags;
	/* cpus */
	struct js_cpuset cpus;
	int ncpus;
	bool exclusive;
	int cpu_list[JS_MAX_STEP_CPUS];
	struct js_cpufreq cf[JS_MAX_STEP_CPUS];
	bool acquired[JS_MAX_STEP_CPUS];
	bool freq_control;          /* CPUs acquired: the policy may set clocks */
	uint32_t base_khz;
	uint32_t fmax_khz;
	char owner[64];
	/* energy */
	struct js_energy *energy;
	struct js_meter *meter;
	struct js_snapshot s0, s1;
	bool have_s0;
	/* phases */
	struct js_phases *phases;
	uint64_t dropped_rate, rejected;
	uint64_t max_lag_ns;
	/* socket server */
	char sock_path[108];
	int listen_fd, stop_fd;
	pthread_t server;
	bool server_running;
	/* provenance */
	pthread_mutex_t err_mu;
	size_t nerrors;
	char errors[JS_MAX_ERRORS][JS_ERR_LEN];
};

/* Record a failure in provenance.errors and log it with slurm_error. */
void js_step_error(struct js_step *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* js_server.c */
int js_server_start(struct js_step *s);     /* 0 or -errno (logged)       */
void js_server_stop(struct js_step *s);

/* js_record.c */
int js_record_write(struct js_step *s);
/* Create dir (0755, root) when missing; refuse symlinks, non-root owners and
 * group/world-writable modes. */
int js_root_dir(const char *path, mode_t mode);
/* The same walk, returning the directory fd (O_CLOEXEC); with create false a
 * missing component gives -ENOENT. */
int js_root_dirfd(const char *path, mode_t mode, bool create);

#endif
