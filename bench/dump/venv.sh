#!/bin/sh
# Create or update the Python environment the dump jobs run in (bench/dump/dump.py):
# numpy, SZ3 (pysz) and ZFP (zfpy) from bench/dump/requirements.txt.
#
#   bench/dump/venv.sh DIR [PYTHON]
#
# PYTHON (default $JOB_PYTHON, else /usr/bin/python3) must be an interpreter every
# job user may run: the venv links to it. `make deps` calls this with build/dump-venv.
set -eu
dir=${1:?usage: venv.sh DIR [PYTHON]}
py=${2:-${JOB_PYTHON:-/usr/bin/python3}}
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$dir/bin/python" ] || "$py" -m venv "$dir"
"$dir/bin/pip" install -q --disable-pip-version-check -r "$here/requirements.txt"
chmod -R a+rX "$dir"
