/* joulestep SPANK plugin: pure parsing and policy logic (no I/O, no Slurm).
 * Unit-tested directly by tests/spank/test_parse.c. Functions return 0 or a
 * negative errno and, where they take one, fill err with a message that says
 * what is allowed. */
#ifndef JS_PARSE_H
#define JS_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JS_PATH_MAX 256
#define JS_KIND_LEN 32
/* max_phases= at most: a record stays within docs/record-format.md's bound
 * (128 KiB + 1.5 KiB x phases + 160 B x 4096 rank entries: ~147 MiB at this
 * cap, every string and number at full length). */
#define JS_MAX_PHASES_LIMIT 100000
#define JS_LABEL_LEN 64
#define JS_TAG_KEY_LEN 32
#define JS_TAG_VAL_LEN 64
#define JS_MAX_TAGS 16
#define JS_MAX_MAP 16
#define JS_MSG_MAX 256
#define JS_DEPTH_LIMIT 8 /* hard upper bound for max_depth= */

enum js_pol {
	JS_POL_MONITOR = 0,
	JS_POL_IO_DVFS,
	JS_POL_CKPT_DVFS,
	JS_POL_FIXED,
	JS_POL_PHASE,
	JS_POL_TUNED,               /* the admin's tuned= file: a phase map      */
	JS_POL_AUTO,                /* the admin's auto= file: a map per app     */
	JS_POL_COUNT
};

/* Plugstack configuration (key=value arguments). */
struct js_conf {
	char spool[JS_PATH_MAX];
	char state[JS_PATH_MAX];
	char sysfs[JS_PATH_MAX];
	char procfs[JS_PATH_MAX];    /* /proc: <procfs>/stat (shared-node inputs) */
	char socket_dir[JS_PATH_MAX];
	char cluster[64];           /* "" = slurmd's SLURM_CLUSTER_NAME (prolog) */
	char backend[64];
	char node_energy[32];       /* node_energy=: "" (none), "auto" or a list
				     * of pm_counters,hwmon (joulestep/node.h) */
	char tuned[JS_PATH_MAX];    /* tuned= policy file; "" = none            */
	char autofile[JS_PATH_MAX]; /* auto= per-app policy file (js_auto.h)    */
	char hooks_dir[JS_PATH_MAX]; /* --energy-hooks libraries; "" = the
				      * plugin's directory/../joulestep      */
	unsigned policies_mask;     /* bit (1u << enum js_pol)                  */
	enum js_pol default_policy;
	double min_ratio;
	unsigned sample_ms;
	unsigned max_phases;
	unsigned max_depth;
	unsigned rate;              /* max_markers_per_s= (alias rate=): BEGIN
				     * markers per second per step (burst=rate) */
	/* RAPL side-channel limits (js_sidechan.h, docs/security.md) */
	uint64_t max_markers_per_step; /* BEGIN markers recorded per step    */
	unsigned min_phase_ms;      /* shorter intervals: no energy for users   */
	unsigned job_cache_hours;   /* trust the prolog's job cache this long; 0 = none */
	/* GPUs (docs/design.md, "GPUs in the plugin"): the vendor library, loaded
	 * with dlopen per step; gpu_backend "" = the first that sees a GPU
	 * (nvml, amdsmi), "off" = none; gpu_lib "" = the backend's own soname */
	char gpu_backend[16];
	char gpu_lib[JS_PATH_MAX];
	unsigned uncore_io_mhz;     /* +uncore-io: the uncore's max clock in
				     * flush and write phases of a step that
				     * owns whole packages; 0 = not allowed */
	unsigned threads_per_core;  /* Slurm's ThreadsPerCore for the node, as
				     * slurm.conf gives it; 0 (auto) = the
				     * hardware's (docs/design.md, "SMT") */
	unsigned gpu_io_mhz;        /* +gpu-io: the GPUs' graphics clock is locked
				     * to at most this in checkpoint, flush and
				     * write phases; 0 = not allowed (default:
				     * NVML cannot report an admin's own lock) */
};

void js_conf_defaults(struct js_conf *c);
/* Parse plugstack arguments. Unknown keys, bad values: -EINVAL + err. */
int js_conf_parse(int ac, char **av, struct js_conf *c, char *err, size_t errlen);
/* Replace each %n in state, sysfs, procfs and socket_dir by `node` (the Slurm node
 * name; several slurmd on one host, each with its own node name). Paths
 * without %n are left alone. -EINVAL + err if a path has %n and node is not
 * [A-Za-z0-9_.-]{1,63} (nor . or ..), or the result is too long. */
int js_conf_expand_node(struct js_conf *c, const char *node, char *err, size_t errlen);

struct js_kind_ratio {
	char kind[JS_KIND_LEN + 1];
	double ratio;
};

struct js_policy {
	enum js_pol type;
	double fixed_ratio;                     /* fixed:R                     */
	size_t nmap;                            /* phase:KIND=R,..., tuned, auto */
	struct js_kind_ratio map[JS_MAX_MAP];
	bool gpu_io;                            /* "+gpu-io": lower the GPUs'
						   clock in I/O phases      */
	bool uncore_io;                         /* "+uncore-io": lower the
						   uncore's clock in flush and
						   write phases             */
};

const char *js_pol_name(enum js_pol p);
/* Syntax only (and R in (0,1]). "tuned" gives type JS_POL_TUNED with an
 * empty map: slurmstepd fills it from the tuned= file (js_tuned.h). Any
 * policy may end in "+gpu-io": the step's GPUs run at the admin's
 * gpu_io_mhz in checkpoint, flush and write phases (js_gpu_io_kind,
 * js_phase.h). */
int js_policy_parse(const char *s, struct js_policy *p, char *err, size_t errlen);
/* Admin bounds: policy allowed and every R >= min_ratio; tuned needs a
 * tuned= file. */
int js_policy_check(const struct js_policy *p, const struct js_conf *c, char *err,
		    size_t errlen);
/* "monitor, io-dvfs, fixed:R, ..." as allowed by c. */
void js_policy_allowed(const struct js_conf *c, char *buf, size_t len);
/* Remote enforcement: if the policy is not allowed fall back to the default
 * policy; clamp every ratio into [min_ratio, 1]. Returns the number of
 * corrections made (0 = none) and describes them in err. */
int js_policy_enforce(struct js_policy *p, const struct js_conf *c, char *err,
		      size_t errlen);
/* Canonical text form ("phase:write=0.85,compress=0.875"). */
int js_policy_format(const struct js_policy *p, char *buf, size_t len);

/* What a phase of `kind` asks for under policy p:
 *   JS_RATIO_INHERIT: nothing of its own: an I/O kind (js_io_kind) keeps
 *                     its enclosing phase's clock, any other the base one;
 *   JS_RATIO_BASE:    the step's base clock;
 *   > 0:              that ratio of fmax. */
#define JS_RATIO_INHERIT (-1.0)
#define JS_RATIO_BASE (0.0)
double js_policy_kind_ratio(const struct js_policy *p, const struct js_conf *c,
			    const char *kind);
/* The step's base ratio: fixed:R gives R, everything else 1 (fmax). */
double js_policy_base_ratio(const struct js_policy *p);

struct js_tag {
	char key[JS_TAG_KEY_LEN + 1];
	char val[JS_TAG_VAL_LEN + 1];
};
struct js_tags {
	size_t n;
	struct js_tag t[JS_MAX_TAGS];
};
/* "k=v[,k=v...]": key [A-Za-z0-9_.:+-]{1,32}, value {1,64}, <= 16 tags;
 * a repeated key keeps the last value. Appends to *tags. */
int js_tags_parse(const char *s, struct js_tags *tags, char *err, size_t errlen);

bool js_kind_valid(const char *s);
bool js_label_valid(const char *s);
/* [A-Za-z0-9_.-]{1,63}: safe as a path component. */
bool js_name_safe(const char *s);

/* ---- phase protocol, version 1 ------------------------------------------ */
enum js_op { JS_OP_BEGIN = 1, JS_OP_END, JS_OP_PING };

struct js_msg {
	enum js_op op;
	char kind[JS_KIND_LEN + 1];
	char label[JS_LABEL_LEN + 1];   /* "" when "-"                          */
	long long bytes;                /* -1 when unknown                      */
	int rank;                       /* -1 when absent                       */
	uint64_t t_ns;                  /* client CLOCK_MONOTONIC, 0 if absent  */
	bool sync;
};

/* Parse one message (not NUL-terminated, len <= JS_MSG_MAX). On error
 * returns a positive protocol error code (EINVAL, EPROTO, EMSGSIZE) and sets
 * *why to a static message; m->sync is still set when it could be seen. */
int js_msg_parse(const char *buf, size_t len, struct js_msg *m, const char **why);

/* Token bucket (pure; times in ns). */
struct js_bucket {
	double tokens, capacity, per_ns;
	uint64_t last_ns;
};
void js_bucket_init(struct js_bucket *b, unsigned rate_per_s, uint64_t now_ns);
bool js_bucket_take(struct js_bucket *b, uint64_t now_ns);

#endif
