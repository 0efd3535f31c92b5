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

/* ---- discovery ------------------------------------------------------------ */
enum js_freq_method {
	JS_FREQ_SETSPEED = 0, /* userspace governor + scaling_setspeed (acpi-cpufreq) */
	JS_FREQ_MAXCAP = 1,   /* cap scaling_max_freq (intel_pstate active, amd-pstate) */
};

struct js_cpufreq {
	int cpu;
	char driver[JS_GOV_LEN];               /* scaling_driver                  */
	char governor[JS_GOV_LEN];             /* scaling_governor                */
	char governors[256];                   /* scaling_available_governors     */
	uint32_t cpuinfo_min_khz, cpuinfo_max_khz;
	uint32_t scaling_min_khz, scaling_max_khz;
	uint32_t setspeed_khz;                 /* 0 when unsupported/<unsupported> */
	size_t navail;                         /* 0: continuous (no list)         */
	uint32_t avail_khz[JS_MAX_FREQS];      /* ascending                       */
	struct js_cpuset related;              /* related_cpus                    */
	enum js_freq_method method;
};

/* Read cpuN/cpufreq under <sysfs_root>/devices/system/cpu. -ENOENT when the
 * CPU has no cpufreq directory. */
int js_cpufreq_read(const char *sysfs_root, int cpu, struct js_cpufreq *out);
/* Which CPUs exist (cpuN directories with cpufreq). */
int js_cpufreq_online(const char *sysfs_root, struct js_cpuset *out);

/* Pure: clamp to [cpuinfo_min, cpuinfo_max] and round to the nearest
 * available step (ties go down); continuous drivers round to 1 MHz. */
uint32_t js_freq_clamp_round_khz(const struct js_cpufreq *f, uint32_t req_khz);
/* Pure: ratio of cpuinfo_max, then clamp and round. ratio must be in (0, 1]. */
int js_freq_ratio_to_khz(const struct js_cpufreq *f, double ratio, uint32_t *khz);
/* Pure: parse "800000 900000 ..." into ascending kHz; -EINVAL on garbage. */
int js_parse_khz_list(const char *buf, uint32_t *out, size_t max, size_t *n);

/* Apply khz (already clamped) on one CPU with f->method. readback_khz gets
 * what the hardware reports afterwards; *ignored is set when it differs.
 * Does NOT save state: use js_freq_acquire first. */
int js_freq_apply(const char *sysfs_root, const struct js_cpufreq *f, uint32_t khz,
		  uint32_t *readback_khz, bool *ignored);

/* ---- save / restore journal ------------------------------------------------
 * State directory (root-only, 0700) holds per CPU:
 *   cpuN.orig            original governor/min/max/setspeed; never overwritten
 *   cpuN.owners/<owner>  one file per owner ("pid starttime")
 * Writes are tmp + fsync + rename (link for no-overwrite) + fsync(dir). */
struct js_freq_saved {
	int cpu;
	char governor[JS_GOV_LEN];
	uint32_t min_khz, max_khz, setspeed_khz;
};

/* Save cpu's original settings (unless a backup exists) and register owner.
 * owner: [A-Za-z0-9._-]{1,64}; pid 0 means the caller's pid. */
int js_freq_acquire(const char *state_dir, const char *sysfs_root, int cpu,
		    const char *owner, int pid);
/* Drop owner; when it was the last one, restore (max before min, then
 * governor/setspeed) and delete the backup. *restored tells which. */
int js_freq_release(const char *state_dir, const char *sysfs_root, int cpu,
		    const char *owner, bool *restored);
/* After a crash: drop owners whose process is gone (or all with force) and
 * restore every CPU left without owners. Counts restored CPUs. */
int js_freq_recover(const char *state_dir, const char *sysfs_root, bool force,
		    int *nrestored);
/* Read a backup (for tools and tests). */
int js_freq_saved_read(const char *state_dir, int cpu, struct js_freq_saved *out);
/* Pure: serialise / parse a backup record. */
int js_freq_saved_format(const struct js_freq_saved *s, char *buf, size_t len);
int js_freq_saved_parse(const char *buf, struct js_freq_saved *out);

#ifdef __cplusplus
}
#endif
#endif
