#!/bin/sh
# Stop this user's VELOC backend daemon on this node (VELOC 1.8, async mode).
# VELOC's client starts `veloc-backend` with system(); it daemonises, writes
# its pid (a native int) to /dev/shm/veloc-backend-ready-<uid>, and outlives
# the job; a later job of the user would reuse it with the old job's config.
# Run at the end of a job (bench/jobs/ckpt-veloc-real.sbatch), or from a
# site's Slurm epilog as root with the job's uid: veloc-backend-stop.sh UID
# (docs/admin-guide.md). Only a process of that uid running veloc-backend is
# signalled; its /dev/shm files are removed. The pid file is the user's: it
# is read only when it is a regular file (no symlink, no FIFO) that uid owns.
uid=${1:-$(id -u)}
case $uid in '' | *[!0-9]*) echo "usage: $0 [UID]" >&2; exit 2 ;; esac
f=/dev/shm/veloc-backend-ready-$uid
if [ -f "$f" ] && [ ! -L "$f" ] && [ "$(stat -c %u "$f")" = "$uid" ]; then
	pid=$(od -An -td4 -N4 "$f" | tr -d ' ')
	if [ -n "$pid" ] && [ "$(stat -c %u "/proc/$pid" 2>/dev/null)" = "$uid" ] &&
		tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q veloc-backend; then
		kill -TERM "$pid" 2>/dev/null
		i=0
		while [ -d "/proc/$pid" ] && ! grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null &&
			[ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
		[ $i -lt 100 ] || kill -KILL "$pid" 2>/dev/null
	fi
fi
find /dev/shm -maxdepth 1 -name 'veloc-*' -uid "$uid" -delete 2>/dev/null
exit 0
