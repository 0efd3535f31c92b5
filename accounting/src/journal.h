/* Private to the accounting library: the one clock journal the CPU
 * (freqstate.c), uncore (uncore.c) and GPU (gpustate.c) clock changes use
 * (docs/reliability.md, "Clock journals"):
 *   <state_dir>/lock     flock()ed around every operation
 *   <state_dir>/<entry>  written temporary file + rename, never in place
 * The state directory passes js_root_dirfd's walk (fsutil.h). An entry
 * names its owner: pid, start time (field 22 of /proc/PID/stat) and boot id;
 * an owner is alive while that process runs in this boot. No fsync: clock
 * settings do not survive a reboot, and an entry of another boot is
 * dropped unreplayed. */
#ifndef JOULESTEP_JOURNAL_H
#define JOULESTEP_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "joulestep/freq.h" /* JS_BOOT_ID_LEN */

struct js_journal {
	int dfd, lfd;
	char boot[JS_BOOT_ID_LEN]; /* this boot's id ("" when unknown) */
};

struct js_owner {
	int pid;
	unsigned long long start;
	char boot[JS_BOOT_ID_LEN];
};

/* Open (creating 0700 when asked) the state directory and take its lock:
 * 0, or -errno with nothing open. */
int js_journal_open(const char *state_dir, bool create, struct js_journal *j);
void js_journal_close(struct js_journal *j);
/* An entry, atomically: 0, or -errno (-EEXIST with no_replace when one is
 * there: kept). */
int js_journal_put(struct js_journal *j, const char *name, const char *text, bool no_replace);

/* pid (0: the caller) as an owner, as of now. */
int js_owner_self(int pid, struct js_owner *o);
/* "pid start boot" (the start of an entry's first line). */
int js_owner_format(const struct js_owner *o, char *buf, size_t len);
/* Parse an entry's owner; *rest: what follows it on its line. Entries
 * written before boot ids were recorded have none (boot ""). */
int js_owner_parse(const char *buf, struct js_owner *o, const char **rest);
/* The same process still, in this boot (boot: "" when unknown)? */
bool js_owner_alive(const struct js_owner *o, const char *boot);
/* pid + starttime identify a process for good; -ESRCH for one gone or a zombie. */
int js_proc_starttime(int pid, unsigned long long *st);

/* Every entry named prefix*: fn(j, name, text, arg) with the entry's text. */
int js_journal_foreach(struct js_journal *j, const char *prefix,
		       int (*fn)(struct js_journal *j, const char *name, const char *text, void *arg),
		       void *arg);

struct js_journal_recovery {
	int entries, restored, busy, failed, dropped, skipped;
};
/* For each entry named prefix* whose owner is gone (every one with force):
 * undo(j, name, text, arg) puts the clock back; 0 drops the entry, < 0
 * keeps it (failed: a later pass retries), > 0 leaves it (skipped). An entry of another boot, or one
 * that does not parse, is dropped unreplayed. */
int js_journal_recover(const char *state_dir, const char *prefix, bool force,
		       int (*undo)(struct js_journal *j, const char *name, const char *text, void *arg),
		       void *arg, struct js_journal_recovery *out);
/* Entries named prefix* (0 when the directory does not exist), or -errno. */
int js_journal_count(const char *state_dir, const char *prefix);

#endif
