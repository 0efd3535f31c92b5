#!/bin/sh
# Build the current Slurm release for the test cluster (make slurm-latest;
# docs/design.md "Which Slurm, which configuration"), once:
#   slurm-latest.sh ARCHIVE SHA256 DEST
# ARCHIVE: a source tarball of a Slurm tag with its generated configure
# (the Makefile's SLURM_SRC: slurm-26.05.3.tar.gz); it must match SHA256.
# DEST gets what the one-node test cluster needs and nothing else: the
# daemons (sbin/slurmctld, slurmd, slurmstepd), the clients the harness runs
# (bin/sbatch, srun, scontrol, squeue, scancel, sinfo), libslurm, the plugins
# (lib/slurm) and the headers (include/slurm, for building joulestep).
# DEST/.ok records the archive's sha256: a second run with the same archive
# does nothing. The build log is DEST.log; the build tree DEST.src is removed
# after a successful build.
set -eu
archive=$1 sha=$2 dest=$3
case $dest in /*) ;; *) dest=$(pwd)/$dest ;; esac
if [ -e "$dest/.ok" ] && [ "$(cat "$dest/.ok")" = "$sha" ]; then
    echo "slurm-latest: $dest is built ($(cat "$dest/version" 2>/dev/null))"; exit 0
fi
if [ ! -r "$archive" ]; then
    echo "slurm-latest: no Slurm source archive at '$archive' (set SLURM_SRC to a slurm-*.tar.gz whose sha256 is $sha)" >&2
    exit 1
fi
got=$(sha256sum "$archive" | cut -d' ' -f1)
if [ "$got" != "$sha" ]; then
    echo "slurm-latest: $archive has sha256 $got, expected $sha (SLURM_SHA256)" >&2
    exit 1
fi
command -v pkg-config >/dev/null && pkg-config --exists munge 2>/dev/null || [ -e /usr/include/munge.h ] || {
    echo "slurm-latest: munge.h not found: install libmunge-dev (make deps)" >&2; exit 1; }
src=$dest.src log=$dest.log
rm -rf "$dest" "$src" && mkdir -p "$src"
start=$(date +%s)
echo "slurm-latest: building $(basename "$archive") into $dest (log: $log)"
tar -xzf "$archive" -C "$src" --strip-components=1
jobs=$(nproc 2>/dev/null || echo 2)
# a shell of its own: errexit holds in it (in a ( ) list tested by || it would not)
jobs=$jobs src=$src dest=$dest sh -euc '
    cd "$src"
    # --enable-multiple-slurmd: as Debian builds it (the cgroups of a slurmd
    # started with -N NAME are slurm_NAME, so test clusters do not share them);
    # --without-hdf5: configure would find Debian'"'"'s HDF5-OpenMPI (installed for
    # Damaris) and sh5util then fails on mpi.h; --disable-static halves the build
    ./configure --prefix="$dest" --sysconfdir="$dest/etc" --disable-debug --without-hdf5 \
        --disable-static --enable-multiple-slurmd
    # only the parts the test cluster runs, in src/Makefile.am'"'"'s order (stepmgr
    # before the daemons that link it)
    for d in api common conmgr curl database interfaces stepmgr plugins \
             slurmctld slurmd sbatch srun scontrol squeue scancel sinfo; do
        make -j"$jobs" -C src/$d
    done
    make install-pkgincludeHEADERS
    for d in api plugins slurmctld slurmd sbatch srun scontrol squeue scancel sinfo; do
        make -C src/$d install
    done
    test -x "$dest/sbin/slurmd" && test -r "$dest/include/slurm/spank.h"
' > "$log" 2>&1 || { tail -n 40 "$log" >&2; echo "slurm-latest: build failed (log: $log)" >&2; exit 1; }
rm -rf "$dest/share" "$src"
find "$dest" -name '*.la' -delete
"$dest/sbin/slurmd" -V > "$dest/version"
echo "$sha" > "$dest/.ok"
echo "slurm-latest: $(cat "$dest/version") in $(( $(date +%s) - start )) s"
