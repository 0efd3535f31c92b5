# Sourced by bench/jobs/dump-*.sh: settings and one srun step of the dump benchmark.
# Every setting is an environment variable (sbatch --export=ALL,DUMP_SIZE=512,...):
#
#   JS_REPO           the joulestep checkout (default: the submit directory)
#   DUMP_PYTHON       Python with numpy, pysz, zfpy (default $JS_REPO/build/dump-venv,
#                     made by `make deps` / bench/dump/venv.sh)
#   DUMP_SIZE         generated field: points per edge (default 64: 1 MiB of float32)
#   DUMP_INPUT        an SDRBench-format file instead (.f32/.d64); needs DUMP_DIMS, e.g. 100x500x500
#   DUMP_DTYPE        f32 or f64 (default: from DUMP_INPUT's extension, else f32)
#   DUMP_REPS         repetitions per step (default 3; the paper: 10)
#   DUMP_COMPRESSORS  default "sz zfp"
#   DUMP_BOUNDS       absolute error bounds, default "1e-1 1e-2 1e-3 1e-4"
#   DUMP_NTASKS       ranks per step (default $SLURM_NTASKS); each compresses and writes its own
#                     field, with MPI barriers between the phases (mpi4py; srun --mpi=$DUMP_MPI)
#   DUMP_MPI          srun's MPI plugin when DUMP_NTASKS > 1 (default pmix: Debian's Open MPI)
#   DUMP_OUT          directory of the dump files (default $SLURM_SUBMIT_DIR/dump-$SLURM_JOB_ID);
#                     point it at the file system the paper's dumps went to (NFS / PFS)
#   DUMP_TAGS         more energy tags for every step, e.g. "site=x,fs=nfs"

JS_REPO=${JS_REPO:-${SLURM_SUBMIT_DIR:-$PWD}}
DUMP_DRIVER=${DUMP_DRIVER:-$JS_REPO/bench/dump/dump.py}
if [ -z "${DUMP_PYTHON:-}" ]; then
	DUMP_PYTHON=$JS_REPO/build/dump-venv/bin/python
	[ -x "$DUMP_PYTHON" ] || DUMP_PYTHON=python3
fi
DUMP_SIZE=${DUMP_SIZE:-64}
DUMP_REPS=${DUMP_REPS:-3}
DUMP_COMPRESSORS=${DUMP_COMPRESSORS:-sz zfp}
DUMP_BOUNDS=${DUMP_BOUNDS:-1e-1 1e-2 1e-3 1e-4}
DUMP_NTASKS=${DUMP_NTASKS:-${SLURM_NTASKS:-1}}
DUMP_OUT=${DUMP_OUT:-${SLURM_SUBMIT_DIR:-$PWD}/dump-${SLURM_JOB_ID:-local}}
DUMP_TAGS=${DUMP_TAGS:-}

if [ -n "${DUMP_INPUT:-}" ]; then
	[ -n "${DUMP_DIMS:-}" ] || { echo "dump: DUMP_INPUT needs DUMP_DIMS (e.g. 100x500x500)" >&2; exit 2; }
	dump_field="--input $DUMP_INPUT --dims $DUMP_DIMS"
	# tag values allow [A-Za-z0-9_.:+-]: the file's base name with anything else as _
	dump_fieldtag=$(printf %s "$(basename "$DUMP_INPUT")" | tr -c 'A-Za-z0-9_.:+-' '_' | cut -c1-64)
else
	dump_field="--size $DUMP_SIZE"
	dump_fieldtag=gen$DUMP_SIZE
fi
[ -n "${DUMP_DTYPE:-}" ] && dump_field="$dump_field --dtype $DUMP_DTYPE"
mkdir -p "$DUMP_OUT"
echo "dump: field $dump_fieldtag, reps $DUMP_REPS, ranks $DUMP_NTASKS, out $DUMP_OUT, python $DUMP_PYTHON"

# dump_step POLICY COMPRESSOR EB [TAGS]: one srun step, tagged dump=COMPRESSOR,eb=EB.
# POLICY "-" keeps the job's --energy-policy; COMPRESSOR raw ignores EB.
dump_step() {
	_pol=$1 _c=$2 _eb=$3 _extra=${4:-}
	if [ "$_c" = raw ]; then
		_tags=dump=raw _args="-c raw"
	else
		_tags=dump=$_c,eb=$_eb _args="-c $_c --eb $_eb"
	fi
	_tags=$_tags,field=$dump_fieldtag${_extra:+,$_extra}${DUMP_TAGS:+,$DUMP_TAGS}
	set -- -n "$DUMP_NTASKS" "--energy-tag=$_tags"
	[ "$DUMP_NTASKS" -le 1 ] || set -- "$@" "--mpi=${DUMP_MPI:-pmix}"
	[ "$_pol" = - ] || set -- "$@" "--energy-policy=$_pol"
	echo "dump: srun $* ($_c ${_eb})"
	# shellcheck disable=SC2086  # the argument lists are built above, word splitting wanted
	srun "$@" "$DUMP_PYTHON" "$DUMP_DRIVER" $_args $dump_field --reps "$DUMP_REPS" --out "$DUMP_OUT"
}
