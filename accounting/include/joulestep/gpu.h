/* joulestep accounting library: GPU energy and GPU clocks.
 *
 * The vendor management library (NVIDIA NVML: libnvidia-ml.so.1; AMD SMI:
 * libamd_smi.so) is loaded with dlopen() at run time, so a node without it
 * still runs and measures CPU and DRAM. Conventions as energy.h: every function returns 0 or -errno
 * and never logs; the vendor library's own words for the last failure are
 * kept for the caller (js_gpu_last_error). Units are in every name.
 */
#ifndef JOULESTEP_GPU_H
#define JOULESTEP_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define JS_MAX_GPUS 16
#define JS_GPU_UUID_LEN 96
#define JS_GPU_NAME_LEN 96
#define JS_GPU_ERR_LEN 160

struct js_gpu_info {
	unsigned index;                  /* the vendor library's device index     */
	char uuid[JS_GPU_UUID_LEN];      /* "GPU-8c3b..."                         */
	char name[JS_GPU_NAME_LEN];      /* "NVIDIA H100 80GB HBM3"               */
	bool energy_counter;             /* has a total-energy counter; without
	                                    one, power is integrated ("integrated") */
	bool mig;                        /* split by MIG: no per-job counter      */
	uint32_t max_power_mw;           /* plausibility bound for the counter    */
	uint32_t max_sm_mhz, min_sm_mhz; /* supported graphics clock range (0: ?) */
	int minor;                       /* device minor: the N of /dev/nvidiaN
	                                    (AMD: of /dev/dri/renderD<128+N>), the
	                                    number Slurm's gres.conf names; -1: the
	                                    library cannot say                     */
};

/* One reading of one GPU. */
struct js_gpu_raw {
	bool have_energy, have_power;
	uint64_t energy_uj;              /* counter in uJ (NVML: mJ since the driver
	                                    loaded, x 1000; AMD SMI: accumulator x
	                                    its resolution)                        */
	uint32_t power_mw;               /* instantaneous board power             */
};

struct js_gpus; /* opaque: the opened library and its devices */

struct js_gpu_opts {
	const char *backend;             /* "nvml", "amdsmi"; NULL = the first that
	                                    loads and sees a GPU, in that order      */
	const char *lib;                 /* NULL = the backend's library:
	                                    libnvidia-ml.so.1, libamd_smi.so        */
	const char *select;              /* NULL/"all", or a comma list of indices
	                                    and UUIDs                              */
	bool select_minor;               /* the numbers in select are device minors
	                                    (js_gpu_info.minor: Slurm's GPU numbers),
	                                    not the library's indices, whose order
	                                    may differ; a GPU whose minor cannot be
	                                    read is not selected by number         */
};

/* Open the library and the selected devices. -ENOENT when the library is
 * absent, -ENODEV when no (selected) GPU; why says so for each backend tried. */
int js_gpu_open(const struct js_gpu_opts *o, struct js_gpus **out, char *why, size_t whylen);
void js_gpu_close(struct js_gpus *g);
const char *js_gpu_backend_name(const struct js_gpus *g);
size_t js_gpu_count(const struct js_gpus *g);
const struct js_gpu_info *js_gpu_info(const struct js_gpus *g, size_t i);
/* The vendor library's words for the last failed call ("Insufficient Permissions"). */
const char *js_gpu_last_error(const struct js_gpus *g);

/* Read GPU i's counter and power (thread-safe). */
int js_gpu_read(struct js_gpus *g, size_t i, struct js_gpu_raw *out);
int js_gpu_sm_clock_mhz(struct js_gpus *g, size_t i, uint32_t *mhz);
/* Lock the graphics clock of GPU i into [min_mhz, max_mhz]; unlock returns
 * it to the driver's default (NVML cannot report an earlier lock: see
 * docs/design.md, "GPU clocks"). Root only on real hardware. */
int js_gpu_lock_mhz(struct js_gpus *g, size_t i, uint32_t min_mhz, uint32_t max_mhz);
/* Can GPU i's clock be locked at all with this library (AMD SMI: not
 * implemented)? A GPU that cannot is never asked, nor journaled. */
bool js_gpu_can_lock(struct js_gpus *g, size_t i);
int js_gpu_unlock(struct js_gpus *g, size_t i);

/* ---- the GPU clock journal (crash-safe restore) ------------------------- */

/* In the clock journal's state directory (joulestep/freq.h), one root-only
 * entry per locked GPU names its owner (pid, 0 = the caller; its start
 * time and boot id). Acquire before
 * locking (-EBUSY when another live process holds the GPU lowered), release
 * after unlocking. */
int js_gpu_journal_acquire(const char *state_dir, const char *uuid, int pid);
int js_gpu_journal_release(const char *state_dir, const char *uuid);

/* Journal GPU i, then lock its clock: 0, -ENOSYS for a GPU that cannot be
 * locked (nothing written, nothing asked), -EBUSY (another live owner), or
 * the lock's -errno. A refused lock is reset and its entry dropped: an
 * entry exists only while a lock may be in force. */
int js_gpu_lock_journaled(const char *state_dir, struct js_gpus *g, size_t i, uint32_t lo_mhz,
			  uint32_t hi_mhz);
/* Unlock GPU i, then drop its entry (kept when the unlock fails: the epilog
 * and joulestep-restore retry). */
int js_gpu_unlock_journaled(const char *state_dir, struct js_gpus *g, size_t i);
/* The same for every GPU i with want[i], in one pass of the journal (a
 * boundary changes all of a step's GPUs at once); rc[i]: each GPU's result
 * (arrays of js_gpu_count(g)). */
void js_gpu_lock_journaled_n(const char *state_dir, struct js_gpus *g, const bool *want,
			     const uint32_t *lo_mhz, const uint32_t *hi_mhz, int *rc);
void js_gpu_unlock_journaled_n(const char *state_dir, struct js_gpus *g, const bool *want, int *rc);

struct js_gpu_recovery {
	int entries, restored, busy, unknown, failed;
};
/* Unlock every GPU of g whose entry's owner is gone (every one with force)
 * and drop its entry. Entries of GPUs g does not see are left. */
int js_gpu_journal_recover(const char *state_dir, struct js_gpus *g, bool force,
			   struct js_gpu_recovery *out);
/* Entries in the journal (0 when the directory does not exist), or -errno. */
int js_gpu_journal_count(const char *state_dir);

/* ---- the counter rule (pure) ------------------------------------------- */

/* Per-GPU accumulator. The rule is RAPL's: an interval whose energy cannot
 * be known (a stuck counter while the board draws power, a jump beyond what
 * max power allows, a reset with no power samples around it) is counted
 * `uncertain` and contributes nothing; the caller reports it as null, never
 * a number. A counter that goes back (driver reload, a second die's 0) has
 * the span since the last reading filled from the power integral, which is
 * sampled beside it, and is counted in `resets`. */
struct js_gpu_acc {
	bool have_last, have_last_power;
	uint64_t last_uj, last_mono_ns, last_power_mono_ns;
	uint64_t moved_mono_ns;          /* when the counter last advanced        */
	uint32_t last_power_mw;
	uint64_t counter_uj;             /* cumulative from the counter           */
	uint64_t integrated_uj;          /* cumulative trapezoid integral of power */
	uint64_t integ_at_last_uj;       /* integrated_uj at the last counter reading */
	uint32_t uncertain;              /* intervals that could not be known     */
	uint32_t resets;                 /* counter went back / to 0: the span is
	                                    the power integral (or uncertain)     */
};

/* A counter that does not move for this long while the board draws at
 * least JS_GPU_STUCK_MIN_MW is stuck (NVML updates it every ~10-100 ms). */
#define JS_GPU_STUCK_NS (1000ULL * 1000 * 1000)
#define JS_GPU_STUCK_MIN_MW 1000u

/* Fold one reading taken at mono_ns into a (max_power_mw 0 = no bound). */
void js_gpu_acc_add(struct js_gpu_acc *a, const struct js_gpu_raw *r, uint64_t mono_ns,
		    uint32_t max_power_mw);

/* ---- meter: background sampler ------------------------------------------- */

struct js_gpu_meter;

struct js_gpu_snapshot {
	uint64_t mono_ns;
	size_t n;
	uint64_t energy_uj[JS_MAX_GPUS]; /* counter, or integral when no counter */
	uint64_t integrated_uj[JS_MAX_GPUS];
	uint32_t uncertain[JS_MAX_GPUS];
	uint32_t resets[JS_MAX_GPUS];
	bool integrated[JS_MAX_GPUS];    /* energy_uj is the power integral      */
	int err[JS_MAX_GPUS];
};

int js_gpu_meter_start(struct js_gpus *g, uint64_t period_ns, bool start_thread,
		       struct js_gpu_meter **out);
/* The GPUs' cumulative figures as of a CLOCK_MONOTONIC time (a phase
 * boundary: now, or a moment ago), without waiting for any GPU: the meter's
 * thread resolves each GPU's value there from its own readings around that
 * time, taken afterwards (a counter moves every ~10-100 ms; each GPU is
 * resolved within about two of its updates). The energies count from an
 * arbitrary origin: only differences mean something. *ticket: for
 * js_gpu_meter_result. 0 or -ENOMEM. */
int js_gpu_meter_request(struct js_gpu_meter *m, uint64_t at_mono_ns, uint64_t *ticket);
/* A request's figures, once: 0 (the ticket is then spent), -EAGAIN while it
 * is not resolved yet (wait false; with wait true, until it is), -ENOENT
 * for a ticket unknown or spent. */
int js_gpu_meter_result(struct js_gpu_meter *m, uint64_t ticket, bool wait,
			struct js_gpu_snapshot *out);
/* request + result(wait): as of at_mono_ns (snapshot: now). Blocks until
 * every GPU is resolved: for tools and the end of a step, never a marker. */
int js_gpu_meter_snapshot(struct js_gpu_meter *m, struct js_gpu_snapshot *out);
int js_gpu_meter_snapshot_at(struct js_gpu_meter *m, uint64_t at_mono_ns,
			     struct js_gpu_snapshot *out);
void js_gpu_meter_stop(struct js_gpu_meter *m);

struct js_gpu_interval {
	size_t n;
	uint64_t duration_ns;
	uint64_t energy_uj[JS_MAX_GPUS];
	bool uncertain[JS_MAX_GPUS];     /* report null for this GPU              */
	bool integrated[JS_MAX_GPUS];
	uint64_t total_uj;               /* of the GPUs that are not uncertain    */
	bool any_uncertain;
};
void js_gpu_interval_of(const struct js_gpu_snapshot *a, const struct js_gpu_snapshot *b,
			struct js_gpu_interval *out);

#ifdef __cplusplus
}
#endif
#endif
