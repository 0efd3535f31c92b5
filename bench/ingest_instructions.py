#!/usr/bin/env python3
"""Instructions per record of the ingest core and of its baseline (the
bench's bare executemany of the same rows), counted by callgrind: the same
for the same code whatever else the machine does, so a change's effect on
the ingest ratio shows without timing noise (docs/design.md, "Ingest
speed").  Each side runs twice, with and without 3 batches of 1,000
records after a first batch; the difference over 3,000 records is its cost
per record.  Needs valgrind (`make deps`).  Run: .venv/bin/python
bench/ingest_instructions.py"""
import os
import pathlib
import re
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
BATCHES = 3


def child(mode: str, work: str) -> None:
    """One measured process: records, their baseline rows, then ingest."""
    import gc
    sys.path.insert(0, str(HERE))
    import bench_cli as b
    from joulestep import store
    n = 1000 * (BATCHES + 1)
    batches = [b.make_records(f, 1000, n) for f in range(0, n, 1000)]
    conn = store.connect(pathlib.Path(work) / f"{mode}.db")
    base = b.Baseline(conn)
    gc.disable()
    rows = [base.rows(r) for r in batches]
    side, timed = mode.rstrip("0"), not mode.endswith("0")
    for recs, brows in list(zip(batches, rows))[:BATCHES + 1 if timed else 1]:
        if side == "ours":
            store.ingest_records(conn, recs, batch=1000)
        else:
            base.insert(brows)


def count(mode: str, work: str) -> int:
    env = dict(os.environ, PYTHONHASHSEED="0")
    p = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                        sys.executable, __file__, mode, work],
                       env=env, capture_output=True, text=True, check=True)
    return int(re.search(r"Collected : (\d+)", p.stderr).group(1))


def main() -> int:
    if len(sys.argv) == 3:
        child(*sys.argv[1:])
        return 0
    with tempfile.TemporaryDirectory(dir="/var/tmp") as work:
        per = {side: (count(side, work) - count(side + "0", work)) / (1000 * BATCHES)
               for side in ("ours", "base")}
    print(f"ingest instructions per record: joulestep {per['ours']:,.0f}, baseline "
          f"(bare executemany) {per['base']:,.0f}: ratio {per['base'] / per['ours']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
