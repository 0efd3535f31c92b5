/* Intel uncore (mesh, memory controller) clock: the intel_uncore_frequency
 * sysfs, both layouts:
 *   devices/system/cpu/intel_uncore_frequency/package_XX_die_YY/   (classic)
 *   devices/system/cpu/intel_uncore_frequency/uncoreNN/            (TPMI, with
 *        package_id and domain_id files)
 * each with {min,max}_freq_khz and initial_{min,max}_freq_khz. Where a node
 * has uncoreNN directories only those are used (TPMI kernels may keep
 * package_XX_die_YY views of the same domains). Functions return 0 or
 * -errno, silently; hardware readers take the sysfs root (NULL: /sys). */
#ifndef JOULESTEP_UNCORE_H
#define JOULESTEP_UNCORE_H

#include <stdbool.h>
#include <stdint.h>

#define JS_UNCORE_MAX 64

struct js_uncore_dom {
	char name[32];             /* "package_00_die_00" or "uncore00"      */
	int pkg;                   /* physical package id                   */
	int die;                   /* die (classic) or domain_id (TPMI)     */
	uint32_t min_khz, max_khz; /* {min,max}_freq_khz now                */
	uint32_t initial_min_khz, initial_max_khz;
};

/* The node's uncore domains, sorted by (pkg, die); returns how many (0:
 * none) or -errno. */
int js_uncore_list(const char *sysfs_root, struct js_uncore_dom *out, int max);
/* Pure: the max_freq_khz to set for a wanted cap: never above entry_max_khz
 * (what was in force: an admin's own cap stays), never below the domain's
 * min_khz. */
uint32_t js_uncore_cap_khz(const struct js_uncore_dom *d, uint32_t want_khz,
			   uint32_t entry_max_khz);
int js_uncore_set_max(const char *sysfs_root, const struct js_uncore_dom *d, uint32_t khz);

/* The uncore journal, in the CPU journal's state directory and under its
 * lock: <state>/uncore-<name> = "pid starttime boot_id min_khz max_khz",
 * written before the first change, removed after the restore. One owner
 * per domain: -EBUSY while another live process holds it. A dead owner's
 * entry is restored (its saved values are the original) before a new one
 * is written; an entry of another boot is dropped unreplayed.
 * acquire: *orig_max_khz gets the original max. */
int js_uncore_journal_acquire(const char *state_dir, const char *sysfs_root,
			      const struct js_uncore_dom *d, int pid, uint32_t *orig_max_khz);
/* Restore the saved min/max and remove the entry (0 when there is none). */
int js_uncore_journal_release(const char *state_dir, const char *sysfs_root,
			      const struct js_uncore_dom *d);
struct js_uncore_recovery {
	int entries, restored, busy, failed;
};
/* Restore every domain whose owner is gone (force: every one). */
int js_uncore_journal_recover(const char *state_dir, const char *sysfs_root, bool force,
			      struct js_uncore_recovery *out);

#endif
