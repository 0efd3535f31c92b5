/* joulestep accounting library: CPU frequency control with crash-safe
 * save/restore. Returns 0 or -errno, never logs. */
#ifndef JOULESTEP_FREQ_H
#define JOULESTEP_FREQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define JS_MAX_CPUS 1024
#define JS_MAX_FREQS 128
#define JS_GOV_LEN 32

/* ---- CPU sets (pure) ---------------------------------------------------- */
struct js_cpuset { uint64_t bits[JS_MAX_CPUS / 64]; };
void js_cpuset_zero(struct js_cpuset *s);
void js_cpuset_set(struct js_cpuset *s, int cpu);
bool js_cpuset_isset(const struct js_cpuset *s, int cpu);
int js_cpuset_count(const struct js_cpuset *s);
/* Parse a kernel/Slurm CPU list ("0-3,8,10-11"); -EINVAL on garbage. */
int js_cpuset_parse(const char *list, struct js_cpuset *out);
/* Format as a list; returns -ENOSPC when buf is too small. */
int js_cpuset_format(const struct js_cpuset *s, char *buf, size_t len);

/* ---- CPU topology: Slurm's abstract cores to Linux CPUs ------------------ */
/* Slurm numbers a node's cores abstractly (S_STEP_ALLOC_CORES): socket by
 * socket in hwloc's logical order, then core by core within a socket. Linux
 * numbers CPUs (hardware threads) as the firmware lists them: sockets may
 * alternate (cpu0 on socket 0, cpu1 on socket 1) and a core's SMT siblings
 * may be far apart (cpu0 and cpu64). */
struct js_cpu_topo {
	struct js_cpuset present;  /* CPUs described (cpuN/topology read)      */
	int16_t pkg[JS_MAX_CPUS];  /* physical_package_id                      */
	int16_t core[JS_MAX_CPUS]; /* the core's key: lowest CPU of its
				    * thread_siblings_list (the CPU itself when
				    * the list is absent)                     */
};
/* Read <sysfs_root>/devices/system/cpu/cpuN/topology/{physical_package_id,
 * thread_siblings_list}. A CPU without topology (offline) is left out;
 * -ENOENT when no CPU has any. */
int js_cpu_topo_read(const char *sysfs_root, struct js_cpu_topo *out);
/* Pure: Slurm's abstract cores to the Linux CPUs of those cores, every SMT
 * sibling included (as Slurm's xcpuinfo_abs_to_mac). -ERANGE when a core is
 * beyond the topology (slurm.conf's node layout does not match it). */
int js_cpu_topo_cores_to_cpus(const struct js_cpu_topo *t, const struct js_cpuset *cores,
			      struct js_cpuset *cpus);
/* Pure: as js_cpu_topo_cores_to_cpus, with Slurm's ThreadsPerCore for the
 * node (slurmd's conf->threads: slurm.conf's under select/cons_tres).
 * threads_per_core 0: the hardware's (every thread of each core); N: Slurm's
 * abstract CPU k*N+t (t < N) is the (k*N+t)-th thread in hwloc's logical
 * order (sockets, then cores, then each core's threads), as
 * xcpuinfo_abs_to_mac. With N = 1 on SMT hardware (a node given as CPUs=
 * only) each Slurm "core" is one thread, and CR_CPU gives a core's threads
 * to different jobs. -ERANGE beyond the topology. */
int js_cpu_topo_abs_to_cpus(const struct js_cpu_topo *t, const struct js_cpuset *cores,
			    unsigned threads_per_core, struct js_cpuset *cpus);
/* Pure: split cpus into whole (every described thread of each core they
 * touch is in cpus) and aside (CPUs of a core with a thread outside cpus). */
void js_cpu_topo_smt_split(const struct js_cpu_topo *t, const struct js_cpuset *cpus,
			   struct js_cpuset *whole, struct js_cpuset *aside);

/* ---- discovery ------------------------------------------------------------ */
/* How js_freq_apply (one-shot tools) pins a clock. The plugin's step path
 * caps scaling_max_freq on every driver (js_freq_ctl below). */
enum js_freq_method {
	JS_FREQ_SETSPEED = 0, /* userspace governor + scaling_setspeed (acpi-cpufreq) */
	JS_FREQ_MAXCAP = 1,   /* cap scaling_max_freq (intel_pstate active, amd-pstate) */
};

struct js_cpufreq {
	int cpu;
	int policy;                            /* N of cpufreq/policyN (cpuN/cpufreq's
						* link), else the lowest related CPU */
	char driver[JS_GOV_LEN];               /* scaling_driver                  */
	char governor[JS_GOV_LEN];             /* scaling_governor                */
	char governors[256];                   /* scaling_available_governors     */
	uint32_t cpuinfo_min_khz, cpuinfo_max_khz;
	uint32_t scaling_min_khz, scaling_max_khz;
	uint32_t setspeed_khz;                 /* 0 when unsupported/<unsupported> */
	uint32_t base_frequency_khz;           /* base_frequency (intel_pstate), 0 */
	size_t navail;                         /* 0: continuous (no list)         */
	uint32_t avail_khz[JS_MAX_FREQS];      /* ascending                       */
	struct js_cpuset related;              /* related_cpus (at least cpu)     */
	enum js_freq_method method;            /* for js_freq_apply                */
};

/* Read cpuN/cpufreq under <sysfs_root>/devices/system/cpu. -ENOENT when the
 * CPU has no cpufreq directory. */
int js_cpufreq_read(const char *sysfs_root, int cpu, struct js_cpufreq *out);
/* Pure: the journal's key for f's clock domain: its cpufreq policy number
 * (policyN), stable whichever of its CPUs could be read. */
int js_freq_domain_key(const struct js_cpufreq *f);
/* Which CPUs exist (cpuN directories with cpufreq). */
int js_cpufreq_online(const char *sysfs_root, struct js_cpuset *out);

/* Pure: clamp to [cpuinfo_min, cpuinfo_max] and round to the nearest
 * available step (ties go down); continuous drivers round to 1 MHz. */
uint32_t js_freq_clamp_round_khz(const struct js_cpufreq *f, uint32_t req_khz);
/* Pure: ratio of cpuinfo_max, then clamp and round. ratio must be in (0, 1]. */
int js_freq_ratio_to_khz(const struct js_cpufreq *f, double ratio, uint32_t *khz);
/* Pure: parse "800000 900000 ..." into ascending kHz; -EINVAL on garbage. */
int js_parse_khz_list(const char *buf, uint32_t *out, size_t max, size_t *n);
/* Pure: the nominal (non-turbo) clock, 0 when the driver does not tell:
 * base_frequency where the driver exposes it (intel_pstate); else, with a
 * list of available steps, the top step unless it is acpi-cpufreq's turbo
 * entry (the next step + 1000 kHz), then that next step. */
uint32_t js_freq_nominal_khz(const struct js_cpufreq *f);
/* Pure: does f's policy (related_cpus) cover a CPU outside mine? */
bool js_freq_policy_shared(const struct js_cpufreq *f, const struct js_cpuset *mine);
/* Pure: "../cpufreq/policy12" (a cpuN/cpufreq link) -> 12; -EINVAL. */
int js_parse_policy_link(const char *target, int *policy);

/* One-shot (tools such as joulestep-run, which pin the clock of a whole
 * command for a measurement): apply khz (already clamped) on one CPU with
 * f->method, re-reading the CPU's state and opening the files on every call
 * (~12 opens): not for a path that changes clocks often, see js_freq_ctl.
 * readback_khz gets what the hardware reports afterwards; *ignored is set
 * when it differs. Does NOT save state: use js_freq_acquire first. */
int js_freq_apply(const char *sysfs_root, const struct js_cpufreq *f, uint32_t khz,
		  uint32_t *readback_khz, bool *ignored);

/* ---- clock control: one handle per CPU, one pwrite per change ---------------
 * Every driver is controlled the same way: by capping scaling_max_freq (and
 * lowering scaling_min_freq first when the cap goes below it). The governor is
 * never changed, so going back to the original settings is writing the
 * original scaling_max_freq (and min) back, and ondemand, schedutil or
 * performance keep working under the cap. A cap is never raised above the
 * original scaling_max_freq (a site's turbo cap stays).
 *
 * js_freq_ctl_open() (after js_freq_acquire_saved, in the thread allowed to
 * open files) opens scaling_max_freq and scaling_min_freq O_WRONLY|O_CLOEXEC;
 * js_freq_ctl_set() then issues only pwrite()s on those descriptors: no
 * open, no read, no allocation (callable from a thread that must not open
 * files). Not thread-safe: one user per handle. */
enum js_freq_file { JS_FREQ_MAX = 0, JS_FREQ_MIN = 1 };

struct js_freq_ctl {
	int cpu;
	int fd[2];                     /* by enum js_freq_file; -1 when closed */
	struct js_cpufreq info;        /* read once, at step start            */
	uint32_t orig_khz[2];          /* the original settings (restored to) */
	uint32_t cur_khz[2];           /* what the files hold (last written)  */
};

/* One planned write. */
struct js_freq_write {
	enum js_freq_file file;
	uint32_t khz;
};
struct js_freq_plan {
	size_t n;                      /* 0, 1 or 2 writes, in this order     */
	struct js_freq_write w[2];
	uint32_t max_khz;              /* the ceiling in force afterwards     */
};

/* Pure: the cap for ratio (of this CPU's cpuinfo_max; (0, 1]) clamped and
 * rounded as js_freq_ratio_to_khz, and never above the original
 * scaling_max_freq. */
int js_freq_ctl_ratio_khz(const struct js_freq_ctl *c, double ratio, uint32_t *khz);
/* Pure: the writes taking the files from cur_khz to a ceiling of khz (0 =
 * back to the original settings). khz above the original max gives the
 * original max. Lowering min goes before max, raising it after. */
void js_freq_ctl_plan(const struct js_freq_ctl *c, uint32_t khz, struct js_freq_plan *p);
/* Open the handle for info->cpu. orig: the settings to restore (the
 * journal's backup, js_freq_acquire_saved). The files are assumed to hold
 * info's scaling min/max. */
int js_freq_ctl_open(const char *sysfs_root, const struct js_cpufreq *info, uint32_t orig_min_khz,
		     uint32_t orig_max_khz, struct js_freq_ctl *c);
/* Cap at khz (0 = original settings): the plan's pwrites, nothing else.
 * *applied_khz (optional) gets the ceiling now in force. 0 or -errno (the
 * first failing write; cur_khz follows what was written). */
int js_freq_ctl_set(struct js_freq_ctl *c, uint32_t khz, uint32_t *applied_khz);
/* js_freq_ctl_set(c, 0, NULL). */
int js_freq_ctl_restore(struct js_freq_ctl *c);
/* Close the descriptors (idempotent; does not restore). */
void js_freq_ctl_close(struct js_freq_ctl *c);
/* Pure: format "<khz>\n" into buf (what a write sends); returns its length. */
size_t js_freq_fmt_khz(char *buf, size_t len, uint32_t khz);

/* ---- save / restore journal ------------------------------------------------
 * State directory (root-only, 0700) holds per clock domain, keyed by its
 * cpufreq policy number N (js_freq_domain_key; policyN is named after a CPU,
 * so the name stays cpuN; I/O goes through cpufreq/policyN where it exists):
 *   cpuN.orig            original governor/min/max/setspeed and the boot it
 *                        was saved in; never overwritten during that boot
 *   cpuN.owners/<owner>  one file per owner: "pid starttime seq", then the
 *                        settings in force when it registered (its entry)
 * Writes are tmp + rename (link for no-overwrite), without fsync: cpufreq
 * settings do not survive a reboot, so a backup only matters during the boot
 * that wrote it (where the page cache is coherent whatever happens to a
 * process), and a backup of another boot is dropped, never replayed. */
#define JS_BOOT_ID_LEN 37 /* 36 characters of /proc/sys/kernel/random/boot_id */
struct js_freq_saved {
	int cpu;
	char governor[JS_GOV_LEN];
	uint32_t min_khz, max_khz, setspeed_khz;
	char boot_id[JS_BOOT_ID_LEN];          /* "" in backups of older versions */
};

/* Save cpu's original settings (unless a backup of this boot exists) and
 * register owner. owner: [A-Za-z0-9._-]{1,64}; pid 0 means the caller's pid. */
int js_freq_acquire(const char *state_dir, const char *sysfs_root, int cpu,
		    const char *owner, int pid);
/* The same, and *saved (optional) gets the backup in force: the settings
 * releasing the CPU will restore (an older backup when one exists). */
int js_freq_acquire_saved(const char *state_dir, const char *sysfs_root, int cpu,
			  const char *owner, int pid, struct js_freq_saved *saved);
/* The same, and *entry (optional) gets the settings in force at this
 * registration (read under the journal's lock): the original settings for
 * the CPU's first owner, another live owner's changed ones for a later
 * owner (a step inside a step that lowered the clock). A step returns to
 * its entry settings at a phase end and at its end; the last owner's
 * release restores the backup. */
int js_freq_acquire_entry(const char *state_dir, const char *sysfs_root, int cpu,
			  const char *owner, int pid, struct js_freq_saved *saved,
			  struct js_freq_saved *entry);
/* Drop owner, and owners whose process is gone; when no live owner is
 * left, restore (max before min, then governor/setspeed) and delete the
 * backup. *restored tells which. */
int js_freq_release(const char *state_dir, const char *sysfs_root, int cpu,
		    const char *owner, bool *restored);
/* After a crash: drop backups of another boot (without restoring them),
 * drop owners whose process is gone (or all with force) and restore every
 * CPU left without owners. Counts restored CPUs. */
int js_freq_recover(const char *state_dir, const char *sysfs_root, bool force,
		    int *nrestored);
/* Read a backup (for tools and tests). */
int js_freq_saved_read(const char *state_dir, int cpu, struct js_freq_saved *out);
/* Pure: serialise / parse a backup record. */
int js_freq_saved_format(const struct js_freq_saved *s, char *buf, size_t len);
int js_freq_saved_parse(const char *buf, struct js_freq_saved *out);

/* The uncore and GPU entries of the clock journal in state_dir (the CPU
 * backups: js_freq_saved_read): fn(name, text) for each, name "uncore-<dom>"
 * or "gpu-<uuid>", text its owner ("pid starttime boot_id") and the values
 * it saved. Returns how many (0 when there is no journal) or -errno. */
int js_journal_list(const char *state_dir, void (*fn)(const char *name, const char *text, void *arg),
		    void *arg);

#ifdef __cplusplus
}
#endif
#endif
