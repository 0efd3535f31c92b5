/* Private to the accounting library; the plugin includes it too: the one
 * rule for a directory root may write into, the one atomic writer, and the
 * one directory loop (docs/design.md, "Directories root writes into"). */
#ifndef JOULESTEP_FSUTIL_H
#define JOULESTEP_FSUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* 0 when fd is a directory owned by root (or by this process's effective
 * user: the library run by a user on its own files) that neither group nor
 * others may write, else -ENOTDIR/-EPERM/-errno. */
int js_check_dirfd(int fd);
/* Walk path from / with O_NOFOLLOW, every component checked by
 * js_check_dirfd; missing components are created (mode) when create is
 * set, else -ENOENT. Returns a directory fd (O_CLOEXEC) or -errno. */
int js_root_dirfd(const char *path, mode_t mode, bool create);
/* The same walk, creating what is missing; 0 or -errno. */
int js_root_dir(const char *path, mode_t mode);

/* js_write_atomic flags */
#define JS_ATOMIC_FSYNC 1        /* fsync the file before the rename          */
#define JS_ATOMIC_NO_REPLACE 2   /* link, not rename: -EEXIST keeps the old one */
#define JS_ATOMIC_HIDDEN_TMP 4   /* the temporary name starts with a dot      */
/* Write data to dfd/name atomically: a temporary file (name.tmp.<pid>,
 * O_EXCL|O_NOFOLLOW|O_CLOEXEC, mode), optionally chowned to uid:gid
 * ((uid_t)-1: the creator's), then renamed (or linked) over name: never a
 * partial file. 0 or -errno. */
int js_write_atomic(int dfd, const char *name, const char *data, size_t len, mode_t mode,
		    uid_t uid, gid_t gid, int flags);
/* The plugin's: fsync, and root:root when chown_root. */
int js_write_atomicat(int dfd, const char *name, const char *data, size_t len, mode_t mode,
		      bool chown_root);

/* Call fn for every entry of the directory dfd but "." and ".." (dfd stays
 * open and usable); a negative return of fn stops the loop and is returned.
 * 0 or -errno. */
int js_dir_foreach(int dfd, int (*fn)(int dfd, const char *name, void *arg), void *arg);

#endif
