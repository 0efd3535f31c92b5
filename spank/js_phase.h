/* joulestep SPANK plugin: phase bookkeeping (collective merging, nesting,
 * clock level). No I/O: the frequency and the meter are reached through
 * callbacks so that this logic is unit-tested on its own. Not thread-safe:
 * the caller serialises (the plugin's server thread is the only user). */
#ifndef JS_PHASE_H
#define JS_PHASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "js_parse.h"

/* Hard bounds on what untrusted markers can make the server keep, besides
 * max_phases: distinct ranks per step, and rank entries (one per rank per
 * step-level phase it entered) per step. Only the first JS_RANK_DETAIL_MAX
 * rank entries of a step keep their own timing (32 bytes each, and one
 * ranks[] entry in the record); every phase keeps min/max/mean of all its
 * entries (struct js_rank_stats), so the record's size does not grow with
 * the rank entries past that cap (docs/record-format.md, "Size"). */
#define JS_MAX_RANKS 4096
#define JS_MAX_RANK_ENTRIES (1u << 20)
#define JS_RANK_DETAIL_MAX 4096

struct js_rank_timing {
	int rank;
	uint64_t start_ns, end_ns;   /* CLOCK_MONOTONIC, end 0 while open      */
	long long bytes;             /* -1 unknown                             */
};

/* Aggregates over every rank entry of a phase (detailed or not). Sums are
 * 128-bit: 2^20 entries of 64-bit values cannot overflow them. */
struct js_minmax {
	uint64_t n;
	uint64_t min, max;
	unsigned __int128 sum;
};
struct js_rank_stats {
	struct js_minmax start_ns, end_ns; /* CLOCK_MONOTONIC (client t)       */
	struct js_minmax bytes;            /* over the entries that gave bytes= */
};

/* The step's GPUs' cumulative figures at a phase boundary (a compact
 * js_gpu_snapshot: a phase keeps two). Only the first JS_PHASE_GPUS of a
 * step's GPUs have per-phase figures. */
#define JS_PHASE_GPUS 8
enum { JS_GPU_ASK, JS_GPU_POLL, JS_GPU_WAIT };
struct js_gpu_mark {
	uint64_t ticket;             /* the meter's request, until resolved    */
	uint8_t n;                   /* 0: the step measures no GPU            */
	uint8_t err;                 /* bit i: GPU i's reading failed          */
	uint8_t integrated;          /* bit i: energy is the power integral    */
	uint64_t uj[JS_PHASE_GPUS];
	uint32_t uncertain[JS_PHASE_GPUS];
};

struct js_sphase {                   /* one step-level (collective) phase    */
	uint32_t seq;
	char kind[JS_KIND_LEN + 1];
	char label[JS_LABEL_LEN + 1];
	unsigned depth;
	int parent_seq;              /* -1 for outermost                       */
	uint32_t nth;                /* n-th phase of kind at depth, per rank  */
	/* CLOCK_MONOTONIC. start/end: when the plugin handled the first rank's
	 * BEGIN and the last rank's END, i.e. when the meter was read for
	 * e_*0/e_*1: the interval the energy covers (power = energy/duration).
	 * marker_*: the clients' own t= (first begin, last end). */
	uint64_t start_ns, end_ns;
	uint64_t marker_start_ns, marker_end_ns;
	unsigned nopen;              /* ranks currently inside                 */
	double eff_ratio;            /* JS_RATIO_BASE or a ratio of fmax       */
	uint32_t freq_khz;           /* 0 = clock left at the step's base      */
	uint64_t freq_change_ns;     /* time the apply took (0 if none)        */
	uint64_t freq_lag_ns;        /* client marker t -> clock applied       */
	int freq_err;                /* last apply error (-errno), 0 = fine    */
	bool gpu_low;                /* +gpu-io: a checkpoint/flush/write phase
				        or inside one: GPUs lowered while it is
				        the innermost open phase              */
	uint32_t gpu_mhz;            /* GPU clock cap it set (0: none)         */
	int gpu_err;                 /* its lock's error (-errno), 0 = fine    */
	bool uncore_low;             /* +uncore-io: a flush/write phase or inside
				        one: uncore lowered while innermost   */
	uint32_t uncore_khz;         /* uncore max clock it set (0: none)      */
	int uncore_err;              /* its write's error (-errno), 0 = fine   */
	uint64_t e_cpu0_uj, e_dram0_uj, e_cpu1_uj, e_dram1_uj; /* meter totals */
	struct js_gpu_mark g0, g1;   /* GPU meter at start_ns and end_ns        */
	bool uncertain;
	bool closed_by_step_end;     /* a rank never sent END                  */
	long long bytes;             /* sum over ranks, -1 when none gave one  */
	size_t nranks;               /* rank entries (joins), all of them      */
	size_t ndetail, cap;         /* ranks[]: the first entries of the step */
	struct js_rank_timing *ranks;
	struct js_rank_stats stats;  /* over all nranks entries                */
};

struct js_phase_ops {
	void *ctx;
	/* Set the step's clock: ratio JS_RATIO_BASE = base clock. Reports the
	 * kHz applied and how long it took. Returns 0 or -errno. */
	int (*set_ratio)(void *ctx, double ratio, uint32_t *khz, uint64_t *took_ns);
	/* Cumulative meter totals now. */
	void (*snap)(void *ctx, uint64_t *cpu_uj, uint64_t *dram_uj, bool *uncertain);
	uint64_t (*now_ns)(void *ctx); /* CLOCK_MONOTONIC */
	/* +gpu-io: lock (low) or unlock the step's GPUs' clock; *mhz: the
	 * cap set. NULL: the GPUs' clocks are left alone. */
	int (*set_gpu)(void *ctx, bool low, uint32_t *mhz);
	/* The GPU meter, never waited for at a boundary. JS_GPU_ASK: ask for
	 * its figures as of at_ns (the boundary's now_ns; m keeps the ticket);
	 * JS_GPU_POLL, JS_GPU_WAIT: fill m once they are resolved (POLL: false
	 * while not yet). NULL: no GPUs. */
	bool (*snap_gpu)(void *ctx, uint64_t at_ns, struct js_gpu_mark *m, int op);
	/* +uncore-io: lower (low) or restore the uncore clock of the step's
	 * packages; *khz: the cap set. NULL: the uncore is left alone. */
	int (*set_uncore)(void *ctx, bool low, uint32_t *khz);
};

struct js_phases;

/* Is this a blocking I/O kind (checkpoint, flush, write)? Only these
 * inherit an enclosing phase's lowered clocks; any other kind (compute,
 * compress, flush-overlap, ...) runs at the base clocks whatever encloses
 * it, unless the policy names its kind. */
bool js_io_kind(const char *kind);
/* Does a phase of this kind lower the GPUs' clock under +gpu-io
 * (checkpoint, flush, write)? */
bool js_gpu_io_kind(const char *kind);
/* Does a phase of this kind lower the uncore clock under +uncore-io
 * (flush, write)? */
bool js_uncore_io_kind(const char *kind);

struct js_phases *js_phases_new(unsigned max_phases, unsigned max_depth,
				const struct js_phase_ops *ops, uint64_t step_start_ns);
void js_phases_free(struct js_phases *ps);

/* own_ratio from js_policy_kind_ratio(). t_ns: the client's CLOCK_MONOTONIC
 * (0 = now); clamped into [step start, now].
 * Errors: -ERANGE nesting deeper than max_depth, -ENOSPC max_phases or
 * JS_MAX_RANK_ENTRIES reached, -EUSERS more than JS_MAX_RANKS ranks, -ENOMEM.
 * A refused BEGIN changes nothing. */
int js_phases_begin(struct js_phases *ps, int rank, const char *kind, const char *label,
		    double own_ratio, uint64_t t_ns, uint32_t *seq, uint32_t *khz);
/* A BEGIN of this rank that was not recorded (rate limit, refused, step
 * ending) but whose END will come, because the client did not learn of the
 * refusal (asynchronous markers): the rank's next END matches it and closes
 * nothing, so the END of every recorded phase still closes that phase. Costs
 * no memory past the rank's state. -EUSERS when the rank is new and
 * JS_MAX_RANKS are known, -ENOMEM. */
int js_phases_skip(struct js_phases *ps, int rank);
/* 0: closed the rank's innermost phase; JS_PHASE_SKIPPED: matched a BEGIN
 * given to js_phases_skip (nothing closed, *seq untouched); -ENOENT when the
 * rank has no open phase. */
#define JS_PHASE_SKIPPED 1
int js_phases_end(struct js_phases *ps, int rank, long long bytes, uint64_t t_ns,
		  uint32_t *seq);
/* From now on never change the clock (step end: the caller restores it). */
void js_phases_hold_clock(struct js_phases *ps);
/* End of step: close every open phase at t_ns (flagged), back to base,
 * and wait for every GPU mark to be resolved (js_phases_gpu_settle). */
void js_phases_close_all(struct js_phases *ps, uint64_t t_ns);
/* Wait until every GPU mark asked so far is resolved into its phase. */
void js_phases_gpu_settle(struct js_phases *ps);

size_t js_phases_count(const struct js_phases *ps);
const struct js_sphase *js_phases_get(const struct js_phases *ps, size_t i);
/* Current clock level (ratio; JS_RATIO_BASE when at the base clock). */
double js_phases_level(const struct js_phases *ps);

#endif
