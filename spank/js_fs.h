/* joulestep SPANK plugin: directories root may write into, and atomic
 * writes (js_fs.c). Used by the record, the pending fallback, the job
 * cache, the phase socket and the clock journals' state directory. */
#ifndef JS_FS_H
#define JS_FS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* 0 when fd is a root-owned directory not group/world writable, else
 * -ENOTDIR/-EPERM/-errno. */
int js_check_dirfd(int fd);
/* Create dir (mode, root) when missing; refuse symlinks, non-root owners and
 * group/world-writable modes in every component from /. 0 or -errno. */
int js_root_dir(const char *path, mode_t mode);
/* The same walk, returning the directory fd (O_CLOEXEC); with create false a
 * missing component gives -ENOENT. */
int js_root_dirfd(const char *path, mode_t mode, bool create);
/* Write data to dfd/name atomically: name.tmp.<pid> (O_EXCL|O_NOFOLLOW),
 * fsync, rename; never a partial file. The caller fsyncs dfd when the rename
 * must be durable now. Optionally chown root:root. 0 or -errno. */
int js_write_atomicat(int dfd, const char *name, const char *data, size_t len, mode_t mode,
		      bool chown_root);
/* js_write_atomicat with the file's owner: uid (uid_t)-1 keeps the
 * creator's (root's). */
int js_write_atomic_owned(int dfd, const char *name, const char *data, size_t len, mode_t mode,
			  uid_t uid, gid_t gid);
/* fsync the directory dfd/name (no symlinks). 0 or -errno. */
int js_fsync_dirat(int dfd, const char *name);

#endif
