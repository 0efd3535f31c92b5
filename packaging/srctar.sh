#!/bin/sh
# packaging/srctar.sh OUT.tar.gz PREFIX
#
# A source tarball of the working tree (as it is now, uncommitted edits
# included) for `make deb` and `make rpm-check`: in a git checkout the files
# git tracks or would track (git ls-files --cached --others --exclude-standard,
# so build/, .venv/ and other ignored files stay out); elsewhere (an unpacked
# tarball) every file but build/, .venv/ and .git/.  Every path is put under
# PREFIX/.  The tarball is reproducible (sorted names, fixed owner and mtime,
# gzip -n): the same sources give the same bytes, so its checksum can key a
# build cache.  Symlinks (cli/src/joulestep/sql -> ../../../sql) stay symlinks.
set -eu
out=$1
prefix=$2
top=$(cd "$(dirname "$0")/.." && pwd)
list=$(mktemp)
trap 'rm -f "$list"' EXIT
cd "$top"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    # a tracked file deleted in the working tree is left out
    git ls-files -z --cached --others --exclude-standard |
        xargs -0 -r sh -c 'for f; do [ -e "$f" ] || [ -L "$f" ] && printf "%s\0" "$f"; done; :' sh >"$list"
else
    find . \( -path ./build -o -path ./.venv -o -path ./.git \) -prune -o \
        \( -type f -o -type l \) -print0 | sed -z 's|^\./||' >"$list"
fi
mkdir -p "$(dirname "$out")"
tar --no-recursion --sort=name --mtime='2000-01-01 00:00:00 UTC' --owner=0 --group=0 \
    --numeric-owner --transform "s|^|$prefix/|S" --null -T "$list" -cf "$out.tar"
gzip -n -f "$out.tar"
mv "$out.tar.gz" "$out"
