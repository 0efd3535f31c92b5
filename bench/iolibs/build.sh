#!/bin/sh
# bench/iolibs/build.sh SRC PREFIX [veloc] [genericio] [damaris]
#
# Builds the pinned I/O libraries the papers measured (VELOC 1.8 with its
# ECP components, HACC GenericIO, Damaris 1.7.1) from the archives in SRC
# (a site's offline mirror of the upstream tags: `make iolibs IOLIBS_SRC=..`)
# into PREFIX/<lib>, one prefix per library. Each archive must match its
# sha256 in bench/iolibs/SHA256SUMS; a library is rebuilt only when the sums
# of its archives, its patches or this recipe change (PREFIX/<lib>/.stamp).
# Never fails `make deps`: a library that cannot be built is said in one
# line, and the experiments fall back to the imitations (docs/experiments.md).
# The patch set is bench/iolibs/patches/ (one comment each; docs/design.md).
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$1
prefix=$2
shift 2
libs=${*:-veloc genericio damaris}
jobs=${IOLIBS_JOBS:-$(nproc)}
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)

archives_veloc="KVTree-1.4.0 AXL-0.8.0 rankstr-0.3.0 shuffile-0.3.0 redset-0.3.0 er-0.4.0 VELOC-1.8"
archives_genericio="genericio"
archives_damaris="Damaris-1.7.1"
HDF5_MPI=/usr/lib/x86_64-linux-gnu/hdf5/openmpi

# bump when a library's build_<lib> below changes (rebuilds that one only)
recipe_veloc=2
recipe_genericio=1
recipe_damaris=1

# the key of a library: its archives' pinned sums, its patches, its recipe
key_of() {
	lib=$1
	eval "names=\$archives_$lib recipe=\$recipe_$lib"
	{
		for n in $names; do
			grep "  $n.tar.gz  " "$here/SHA256SUMS"
			cat "$here"/patches/"$n"-*.patch 2>/dev/null
		done
		echo "recipe $recipe"
	} | sha256sum | cut -c1-32
}

# every archive of the library present with its pinned sum (else say why)
check_sums() {
	lib=$1
	eval "names=\$archives_$lib"
	for n in $names; do
		f=$src/$n.tar.gz
		want=$(awk -v f="$n.tar.gz" '$2 == f {print $1}' "$here/SHA256SUMS")
		[ -n "$want" ] || { echo "no pinned sum for $n.tar.gz"; return 1; }
		[ -f "$f" ] || { echo "$f missing"; return 1; }
		got=$(sha256sum "$f" | cut -d' ' -f1)
		[ "$got" = "$want" ] || { echo "$f: sha256 $got, pinned $want"; return 1; }
	done
}

unpack() { # archive-name -> $work/<dir>, patched
	rm -rf "$work/$1" && tar -xzf "$src/$1.tar.gz" -C "$work" || return 1
	for p in "$here"/patches/"$1"-*.patch; do
		[ -f "$p" ] || continue
		patch -s -d "$work/$1" -p1 <"$p" || return 1
	done
}

cmake_install() { # dir [cmake args]: configure, build, install into $dest
	d=$1
	shift
	cmake -S "$work/$d" -B "$work/$d/_build" -DCMAKE_INSTALL_PREFIX="$dest" \
		-DCMAKE_PREFIX_PATH="$dest" -DCMAKE_INSTALL_LIBDIR=lib \
		-DCMAKE_INSTALL_RPATH="$dest/lib" "$@" &&
		cmake --build "$work/$d/_build" -j "$jobs" &&
		cmake --install "$work/$d/_build"
}

build_veloc() {
	for d in KVTree-1.4.0 AXL-0.8.0 rankstr-0.3.0 shuffile-0.3.0 redset-0.3.0 er-0.4.0; do
		unpack $d && cmake_install $d -DCMAKE_BUILD_TYPE=Release -DENABLE_TESTS=OFF \
			-DMPI=ON || return 1
	done
	# VELOC's auto-install.py defaults, but POSIX_IO=rw: "direct" copies the
	# scratch tier to the persistent one with copy_file_range(), which Linux
	# (5.19 on) refuses across file systems (EXDEV): tmpfs -> disk, the DRAM
	# tier, fails every flush
	unpack VELOC-1.8 && cmake_install VELOC-1.8 -DCMAKE_BUILD_TYPE=Release \
		-DCOMM_QUEUE=socket_queue -DPOSIX_IO=rw -DVELOC_RESOURCE_MANAGER=NONE
}

# GenericIO has no install target: its MPI programs, its header and a static
# library of what they link (GenericIO.o and the Blosc compressor objects).
build_genericio() {
	unpack genericio || return 1
	(cd "$work/genericio" && make -j "$jobs" MPICC=mpicc MPICXX=mpicxx mpi-progs) || return 1
	mkdir -p "$dest/bin" "$dest/include" "$dest/lib" &&
		cp "$work/genericio/GenericIO.h" "$dest/include/" &&
		(cd "$work/genericio/mpi" && cp GenericIOBenchmarkWrite GenericIOBenchmarkRead \
			GenericIOVerify GenericIOPrint "$dest/bin/") &&
		find "$work/genericio/mpi" -name '*.o' ! -name 'GenericIO[A-Z]*.o' -print |
		xargs ar rcs "$dest/lib/libGenericIO.a"
}

# Its HDF5 storage plugin against Debian's parallel HDF5; no examples (its
# Example wraps every call in assert(): a Release build's does nothing).
build_damaris() {
	unpack Damaris-1.7.1 && cmake_install Damaris-1.7.1 -DCMAKE_BUILD_TYPE=Release \
		-DCMAKE_C_COMPILER=mpicc -DCMAKE_CXX_COMPILER=mpicxx -DENABLE_TESTS=OFF \
		-DENABLE_EXAMPLES=OFF -DENABLE_HDF5=ON -DHDF5_ROOT="$HDF5_MPI" \
		-DENABLE_FORTRAN=OFF -DENABLE_PYTHON=OFF -DENABLE_VISIT=OFF \
		-DENABLE_CATALYST=OFF
}

rc=0
for lib in $libs; do
	dest=$prefix/$lib
	key=$(key_of "$lib")
	if [ -f "$dest/.stamp" ] && [ "$(cat "$dest/.stamp")" = "$key" ]; then
		echo "iolibs: $lib up to date in $dest"
		continue
	fi
	if ! why=$(check_sums "$lib"); then
		echo "iolibs: $lib not built ($why); experiments use the imitation"
		continue
	fi
	log=$prefix/$lib.log
	work=$prefix/src
	mkdir -p "$work"
	rm -rf "$dest"
	echo "iolibs: building $lib into $dest (log: $log)"
	t0=$(date +%s)
	if build_$lib >"$log" 2>&1; then
		echo "$key" >"$dest/.stamp"
		echo "iolibs: $lib built in $(($(date +%s) - t0)) s"
	else
		tail -n 15 "$log"
		echo "iolibs: $lib build failed (log: $log); experiments use the imitation"
		rc=1
	fi
done
rm -rf "$prefix/src"
exit $rc
