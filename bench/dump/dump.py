#!/usr/bin/env python3
"""Compressed dumps vs raw writes (docs/science.md §3, Wilkins 2023 ch. 2).

Each rank compresses one 3-D field with SZ3 (pysz) or ZFP (zfpy) at an absolute
error bound, and writes the compressed stream to a file; `raw` writes the field
as it is (the baseline). The phases are marked for the joulestep plugin:

    compress   the library's compression          bytes = the field's raw size
    verify     decompression + maximum error       (not part of a dump; its own kind
               so io-dvfs leaves it at the base clock and compare leaves it out)
    write      write(2) of the stream + fsync       bytes = bytes written (= file size)

A raw dump has only `write`. The write phase's label says what was achieved,
`cr:<ratio>:maxerr:<max abs error>` (`joulestep compare --what dump` reads it),
and every repetition prints one JSON line on stdout with the same figures.

    dump.py --compressor zfp --eb 1e-3 --size 128 --out /scratch/$USER
    dump.py --compressor sz --eb 1e-2 --input CLOUDf48.bin.f32 --dims 100x500x500

The field is either generated (a smooth 3-D field, `--size` points per edge) or
read from an SDRBench-format file: raw little-endian float32 (.f32, .dat) or
float64 (.d64, .f64) values without header, `--dims` slowest first (C order, as
SDRBench lists them, e.g. 100x500x500 for Hurricane ISABEL). The compression runs
in the libraries; Python only moves buffers. See docs/experiments.md.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
try:
    import joulestep.phase as jsp
except ImportError:  # not installed in this environment: the repository's copy (stdlib only)
    sys.path.insert(0, str(HERE.parent.parent / "cli" / "src"))
    import joulestep.phase as jsp

COMPRESSORS = ("sz", "zfp", "raw")
DTYPES = {"f32": np.float32, "float32": np.float32, "f64": np.float64, "float64": np.float64}
EXT_DTYPE = {".f32": "f32", ".dat": "f32", ".d64": "f64", ".f64": "f64"}


def rank() -> int:
    try:
        return max(0, int(os.environ.get("SLURM_PROCID", "0")))
    except ValueError:
        return 0


class Solo:
    """One rank, or ranks that do not synchronise (--sync none)."""
    size = 1

    def barrier(self):
        pass

    def allmax(self, x):
        return x

    def allsum(self, x):
        return x


class Mpi:
    """MPI ranks (mpi4py on the site's MPI, launched by srun --mpi=pmix): a barrier
    before every phase, so the plugin's step-level phases (n-th phase of every rank,
    first begin to last end) are disjoint and no energy is in two of them; ratio and
    error are reported for the whole step."""

    def __init__(self):
        from mpi4py import MPI
        self.MPI, self.comm = MPI, MPI.COMM_WORLD
        self.size = self.comm.Get_size()

    def barrier(self):
        self.comm.Barrier()

    def allmax(self, x):
        return self.comm.allreduce(x, op=self.MPI.MAX)

    def allsum(self, x):
        return self.comm.allreduce(x, op=self.MPI.SUM)


def communicator(mode: str):
    try:
        ntasks = int(os.environ.get("SLURM_STEP_NUM_TASKS") or os.environ.get("SLURM_NTASKS") or 1)
    except ValueError:
        ntasks = 1
    if mode == "none" or (mode == "auto" and ntasks <= 1):
        return Solo()
    try:
        return Mpi()
    except ImportError as e:
        raise SystemExit(f"dump.py: {ntasks} ranks need mpi4py for their barriers ({e}); "
                         "install it (bench/dump/venv.sh) or give --sync none") from None


def parse_dims(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(x) for x in text.lower().replace(",", "x").split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--dims {text!r}: expected e.g. 100x500x500") from None
    if not dims or len(dims) > 4 or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"--dims {text!r}: 1 to 4 positive sizes")
    return dims


def smooth_field(n: int, dtype, seed: int) -> np.ndarray:
    """A smooth n^3 field of values in about [-1.5, 1.5] (a few low modes, a phase per
    seed), deterministic: same n, dtype and seed give the same bytes."""
    x = np.linspace(0.0, 1.0, n, dtype=np.float64)
    ph = 0.37 * seed
    a = np.sin(2 * np.pi * x + ph)
    b = np.cos(3 * np.pi * x + ph)
    c = np.sin(np.pi * x)
    f = a[:, None, None] * b[None, :, None] * c[None, None, :]
    f += 0.3 * np.sin(7 * np.pi * (x[:, None, None] + x[None, :, None] + x[None, None, :]) + ph)
    return np.ascontiguousarray(f, dtype=dtype)


def load_field(path: str, dims, dtype) -> np.ndarray:
    want = int(np.prod(dims)) * np.dtype(dtype).itemsize
    have = os.path.getsize(path)
    if have != want:
        raise SystemExit(f"dump.py: {path}: {have} bytes, but --dims {'x'.join(map(str, dims))} "
                         f"of {np.dtype(dtype).name} needs {want}")
    return np.fromfile(path, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype).reshape(dims)


def compress(comp: str, data: np.ndarray, eb: float):
    """The compressed stream (bytes-like) from the library."""
    if comp == "zfp":
        import zfpy
        return zfpy.compress_numpy(data, tolerance=eb)  # fixed-accuracy mode
    from pysz import sz, szConfig, szErrorBoundMode
    conf = szConfig()
    conf.errorBoundMode = szErrorBoundMode.ABS
    conf.absErrorBound = eb
    stream, _ratio = sz.compress(data, conf)
    return stream


def decompress(comp: str, stream, dtype, shape) -> np.ndarray:
    if comp == "zfp":
        import zfpy
        return zfpy.decompress_numpy(bytes(stream))
    from pysz import sz
    out, _conf = sz.decompress(np.frombuffer(stream, dtype=np.uint8), dtype, tuple(shape))
    return out


def max_abs_error(a: np.ndarray, b: np.ndarray) -> float:
    if a.shape != b.shape:
        raise SystemExit(f"dump.py: decompressed shape {b.shape} != {a.shape}")
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0


def write_file(path: pathlib.Path, buf) -> int:
    """write(2) all of buf, then fsync: the dump is on the storage when this returns."""
    mv = memoryview(buf).cast("B")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        done = 0
        while done < len(mv):
            done += os.write(fd, mv[done:])
        os.fsync(fd)
    finally:
        os.close(fd)
    return done


def fmt_eb(eb: float) -> str:
    return f"{eb:g}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compressor", "-c", required=True, choices=COMPRESSORS + ("none",))
    ap.add_argument("--eb", type=float, help="absolute error bound (sz, zfp), e.g. 1e-3")
    ap.add_argument("--size", type=int, default=128,
                    help="generated field: points per edge of the cube (default 128)")
    ap.add_argument("--input", help="SDRBench-format raw file instead of the generated field")
    ap.add_argument("--dims", type=parse_dims, help="with --input: e.g. 100x500x500 (C order)")
    ap.add_argument("--dtype", choices=sorted(DTYPES),
                    help="f32 or f64 (default: from --input's extension, else f32)")
    ap.add_argument("--out", default=".", help="directory the dump files go to")
    ap.add_argument("--reps", type=int, default=1, help="repetitions (each overwrites the file)")
    ap.add_argument("--no-verify", action="store_true",
                    help="skip decompression (max_err is then null)")
    ap.add_argument("--sync", choices=("auto", "mpi", "none"), default="auto",
                    help="barrier between the phases of all ranks: mpi (mpi4py), none, or "
                         "auto = mpi when the step has more than one task")
    a = ap.parse_args(argv)
    comp = "raw" if a.compressor == "none" else a.compressor
    if comp != "raw" and not (a.eb and a.eb > 0):
        ap.error(f"--compressor {comp} needs --eb > 0")
    if a.reps < 1 or a.size < 1:
        ap.error("--reps and --size must be >= 1")
    comm = communicator(a.sync)
    r = rank()
    if a.input:
        if not a.dims:
            ap.error("--input needs --dims")
        dt = DTYPES[a.dtype or EXT_DTYPE.get(pathlib.Path(a.input).suffix.lower(), "f32")]
        data = load_field(a.input, a.dims, dt)
    else:
        data = smooth_field(a.size, DTYPES[a.dtype or "f32"], seed=r)
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    name = f"dump-raw-rank{r}.bin" if comp == "raw" else f"dump-{comp}-{fmt_eb(a.eb)}-rank{r}.bin"
    path = out / name
    raw_bytes = data.nbytes

    for rep in range(a.reps):
        t0 = time.perf_counter()
        if comp == "raw":
            stream, max_err = data, 0.0
        else:
            comm.barrier()
            with jsp.phase("compress", f"{comp}:{fmt_eb(a.eb)}", nbytes=raw_bytes, sync=True):
                stream = compress(comp, data, a.eb)
            max_err = None
            if not a.no_verify:
                comm.barrier()
                with jsp.phase("verify", sync=True):
                    max_err = max_abs_error(data, decompress(comp, stream, data.dtype, data.shape))
        t1 = time.perf_counter()
        nbytes = memoryview(stream).nbytes
        ratio = raw_bytes / nbytes if nbytes else float("inf")
        # the label is the step's: all ranks' bytes and their largest error
        step_ratio = comm.allsum(raw_bytes) / max(1, comm.allsum(nbytes))
        step_err = None if max_err is None else comm.allmax(max_err)
        label = f"cr:{step_ratio:.4g}:maxerr:{'-' if step_err is None else f'{step_err:.4e}'}"
        comm.barrier()
        with jsp.phase("write", label, sync=True) as p:
            p["nbytes"] = write_file(path, stream)
        t2 = time.perf_counter()
        print(json.dumps({
            "dump": comp, "eb": None if comp == "raw" else a.eb, "rep": rep, "rank": r,
            "dims": list(data.shape), "dtype": data.dtype.name, "raw_bytes": raw_bytes,
            "bytes_written": p["nbytes"], "ratio": ratio, "max_err": max_err,
            "within_bound": None if max_err is None or comp == "raw" else max_err <= a.eb,
            "file": str(path), "compress_s": t1 - t0, "write_s": t2 - t1}), flush=True)
        if comp != "raw" and max_err is not None and max_err > a.eb:
            print(f"dump.py: {comp} eb={a.eb:g}: max error {max_err:g} exceeds the bound",
                  file=sys.stderr)
            return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
