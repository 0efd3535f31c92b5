#!/usr/bin/env bash
# Copy the shared libraries joulestep-run needs besides glibc (libpowercap,
# libjansson) into build/device/lib, for a machine that has neither and no
# package registry (the H100 check: bench/gpu/device_check.sh).
set -eu
cd "$(dirname "$0")/../.."
mkdir -p build/device/lib
for lib in libpowercap.so.0 libjansson.so.4; do
  src=$(ldd build/bin/joulestep-run | awk -v l="$lib" '$1 == l {print $3}')
  cp -L "$src" build/device/lib/
done
ls -l build/device/lib
