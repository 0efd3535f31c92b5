"""Reading the plugin's spool records in the live-cluster tests."""
from __future__ import annotations

import json
import pathlib
import time


def records(spool: pathlib.Path, job, by_node: bool = False) -> dict:
    """step_id -> record (or (step_id, node) -> record with by_node) for one
    job of the test cluster "jstest". Every record must be named after its
    key, and no key may appear twice."""
    d = pathlib.Path(spool) / "jstest" / str(job)
    out = {}
    for f in sorted(d.glob("*.json")) if d.exists() else []:
        r = json.loads(f.read_text())
        step, node = r["step"]["step_id"], r["step"]["node"]
        key = (step, node) if by_node else step
        assert key not in out, f"two records for {key}"
        # the incarnation (issue 23, defect 5): the record's job.incarnation_ns
        inc = r["job"]["incarnation_ns"]
        assert inc == r["job"]["first_seen_ns"], r["job"]
        assert f.name == f"{job}.{step}.{r['step']['het_component']}-{inc}.{node}.json", f.name
        out[key] = r
    return out


def wait_records(spool, job, want, logs, timeout=20, by_node=False) -> dict:
    """Wait until the records of every key in `want` exist; `logs()` gives the
    daemons' logs for the failure message."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        recs = records(spool, job, by_node)
        if set(want) <= set(recs):
            return recs
        time.sleep(0.2)
    raise AssertionError(f"job {job}: records {sorted(records(spool, job, by_node))}, "
                         f"want {sorted(want)}\n{logs()}")
