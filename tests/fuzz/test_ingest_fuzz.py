"""Fuzz the record reader of `joulestep ingest` (store.ingest_paths) with
Hypothesis (docs/reliability.md, "Fuzzing").

Each example writes a spool of three records: two valid ones (A, B) and one
mutant M, a valid record after 1-3 random mutations (a value replaced by an
arbitrary or edge-case JSON value, a key deleted or added, the file's bytes
truncated, flipped, made non-UTF-8 or nested deeply), and ingests it.

Property:
- ingest never raises and reports no file error;
- M is either stored whole (one step, and every one of its phase, rank,
  zone and tag rows), or refused: moved into the quarantine with a
  non-empty reason, beside it <name>.reason, and not a single row of it in
  any table (no partial record);
- A and B are stored whole either way, with their energies.

Short in `make test` (derandomized: the same examples every run); `make fuzz`
sets JS_FUZZ_SECONDS and runs fresh random examples for that long.
"""
from __future__ import annotations

import json
import os
import pathlib
import sqlite3
import sys
import tempfile
import time

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "cli"))
import recgen  # noqa: E402

from joulestep import store  # noqa: E402
from joulestep.store import db  # noqa: E402

EXAMPLES = int(os.environ.get("JS_FUZZ_EXAMPLES", "150"))
FUZZ_SECONDS = float(os.environ.get("JS_FUZZ_SECONDS", "0"))
STATS = {"examples": 0, "quarantined": 0, "accepted": 0}

# ---------------------------------------------------------------- strategies

EDGE_INTS = [-(1 << 64), -(1 << 63) - 1, -(1 << 63), -1, 0, 1, (1 << 31), (1 << 32),
             (1 << 62), (1 << 63) - 1, 1 << 63, 1 << 64, 10 ** 30]
leaf = st.one_of(
    st.none(), st.booleans(), st.sampled_from(EDGE_INTS), st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    # any code point, lone surrogates included (JSON can carry them as \udXXX)
    st.text(st.characters(codec=None, exclude_categories=()), max_size=12),
    st.sampled_from(["", "-", "0", "batch", "extern", "io-dvfs", "1\n", "a" * 300]))
json_value = st.recursive(leaf, lambda kids: st.one_of(
    st.lists(kids, max_size=3), st.dictionaries(st.text(max_size=6), kids, max_size=3)),
    max_leaves=6)


def paths(obj, prefix=()):
    """Every (path, container) position in a decoded record."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield prefix + (k,)
            yield from paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield prefix + (i,)
            yield from paths(v, prefix + (i,))


def parent_of(rec, path):
    for k in path[:-1]:
        rec = rec[k]
    return rec


def mutant_base() -> dict:
    ranks = [{"rank": r, "start_ns": recgen.T0 + 5 * recgen.S,
              "end_ns": recgen.T0 + 7 * recgen.S, "bytes": 1000 + r} for r in range(2)]
    ph = [recgen.phase(0, "checkpoint", 5, 2, 20, 4, label="c1", freq_khz=1_200_000,
                       nbytes=2000, nranks=2, ranks=ranks),
          recgen.phase(1, "flush", 5, 1, 6, 2, depth=1, parent=0, nbytes=5)]
    return recgen.record(1002, "0", "mut", phases=ph, tags={"exp": "fuzz", "n": 3})


@st.composite
def mutant(draw):
    """(bytes of the mutant file, its decoded record when still JSON)."""
    rec = mutant_base()
    for _ in range(draw(st.integers(1, 3))):
        where = list(paths(rec))
        op = draw(st.sampled_from(["set", "set", "set", "delete", "add"]))
        if not where:
            break
        path = draw(st.sampled_from(where))
        par = parent_of(rec, path)
        if op == "set":
            par[path[-1]] = draw(json_value)
        elif op == "delete":
            del par[path[-1]]
        elif isinstance(par, dict):
            par[draw(st.text(max_size=8))] = draw(json_value)
    data = json.dumps(rec).encode()
    raw = draw(st.sampled_from(["none"] * 6 + ["truncate", "flip", "latin1", "nest",
                                                 "empty"]))
    if raw == "truncate":
        data = data[:draw(st.integers(0, max(0, len(data) - 1)))]
    elif raw == "flip":
        i = draw(st.integers(0, len(data) - 1))
        data = data[:i] + bytes([draw(st.integers(0, 255))]) + data[i + 1:]
    elif raw == "latin1":
        data = data.replace(b'"mut"', b'"m\xe9t"')
    elif raw == "nest":
        depth = draw(st.sampled_from([10, 1000, 100_000]))
        data = data.replace(b'"errors": []', b'"errors": ' + b"[" * depth + b"]" * depth)
    elif raw == "empty":
        data = b""
    return data


# ---------------------------------------------------------------- the check

_TEMPLATE: list = []


def fresh_db() -> sqlite3.Connection:
    """An empty, migrated database (copied from one migrated once)."""
    if not _TEMPLATE:
        _TEMPLATE.append(store.connect(":memory:"))
    conn = sqlite3.connect(":memory:", isolation_level=None, factory=db.SqliteConnection)
    _TEMPLATE[0].backup(conn)
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def counts(conn) -> dict:
    return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("steps", "phases", "phase_ranks", "step_zones", "step_tags",
                      "spool_files")}


def rows_of(rec: dict) -> dict:
    """The rows a stored record must have, counted from the record itself."""
    def seq(v):
        return v if isinstance(v, list) else []
    phases = seq(rec.get("phases") or [])
    tags = rec["job"].get("tags") or {}
    return {"steps": 1, "phases": len(phases),
            "phase_ranks": sum(len(seq(p.get("ranks") or [])) for p in phases),
            # a zone whose counter went back or vanished (energy_uj null) has
            # no row (docs/record-format.md, zones[].uncertain)
            "step_zones": sum(1 for z in seq(rec.get("zones") or [])
                              if isinstance(z, dict) and z.get("energy_uj") is not None),
            "step_tags": len(tags) if isinstance(tags, dict) else 0,
            "spool_files": 1}


def check_one(data: bytes, name: bytes = b"1002.0.0.mut.json") -> None:
    good_a = recgen.record(1001, "0", "good-a", cpu_j=11, dram_j=1, tags={"k": "a"})
    good_b = recgen.record(1003, "batch", "good-b", cpu_j=13, dram_j=3)
    with tempfile.TemporaryDirectory(prefix="js-fuzz-") as td:
        spool = pathlib.Path(td) / "spool"
        pa, pb = recgen.write(spool, good_a), recgen.write(spool, good_b)
        pm = spool / "demo" / "1002" / os.fsdecode(name)
        pm.parent.mkdir(parents=True, exist_ok=True)
        pm.write_bytes(data)
        conn = fresh_db()
        try:
            res = store.ingest_paths(conn, [spool])
            assert res.errors == [], res.errors
            n = counts(conn)
            want = {k: rows_of(good_a)[k] + rows_of(good_b)[k] for k in n}
            qm = spool / ".quarantine" / pm.relative_to(spool)
            if pm.exists():
                # stored whole: all of M's rows, nothing quarantined
                STATS["accepted"] += 1
                assert res.quarantined == [] and not qm.exists()
                m = rows_of(json.loads(data))
                assert n == {k: want[k] + m[k] for k in n}, (n, want, m)
                assert res.new_steps == 3
            else:
                # refused: quarantined with its reason, none of its rows
                STATS["quarantined"] += 1
                assert [(s, d) for s, d, _ in res.quarantined] == [(pm, qm)]
                reason = res.quarantined[0][2]
                assert reason.strip()
                assert qm.read_bytes() == data
                assert (qm.parent / (qm.name + ".reason")).read_text() == reason + "\n"
                assert n == want, (n, want, reason)
                assert res.new_steps == 2
            for rec, path in ((good_a, pa), (good_b, pb)):
                got = conn.execute(
                    "SELECT s.energy_cpu_uj, s.energy_dram_uj FROM steps s JOIN nodes n "
                    "USING (node_pk) WHERE n.name = ?", (rec["step"]["node"],)).fetchall()
                assert got == [(rec["step"]["energy_cpu_uj"], rec["step"]["energy_dram_uj"])]
                assert path.exists()
        finally:
            conn.close()
    STATS["examples"] += 1


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(mutant())
def test_ingest_refuses_malformed_records_whole(data):
    check_one(data)


def test_ingest_fuzz_for_a_while():
    """`make fuzz`: fresh random examples for JS_FUZZ_SECONDS."""
    if FUZZ_SECONDS <= 0:
        pytest.skip("long run: make fuzz (JS_FUZZ_SECONDS)")
    t_end = time.monotonic() + FUZZ_SECONDS
    start = dict(STATS)
    batch = 0

    def one(data):
        check_one(data)
    while time.monotonic() < t_end:
        batch += 1
        run = settings(max_examples=200, deadline=None, database=None,
                       suppress_health_check=list(HealthCheck))(
            seed(int(time.time() * 1000) + batch)(given(mutant())(one)))
        run()
    done = {k: STATS[k] - start[k] for k in STATS}
    print(f"\nfuzz: ingest {done['examples']} executions, crashes 0 "
          f"({done['quarantined']} quarantined, {done['accepted']} accepted)")


# ---------------------------------------------------------------- found by it
# Each of these crashed `joulestep ingest` (an exception out of ingest_paths:
# the whole batch rolled back, later records not read) before its fix.

def _mutated(**where) -> bytes:
    rec = mutant_base()
    for path, value in where.items():
        keys = [int(k) if k.isdigit() else k for k in path.split("__")]
        parent_of(rec, keys)[keys[-1]] = value
    return json.dumps(rec).encode()


@pytest.mark.parametrize("data", [
    # RecursionError out of json.loads
    _mutated(provenance__errors=[]).replace(b'"errors": []', b'"errors": ' + b"[" * 100_000
                                            + b"]" * 100_000),
    # integers below -2^63: OverflowError when sqlite3 binds them
    _mutated(step__exit_code=-(1 << 63) - 1),
    _mutated(job__start_time_ns=-(1 << 64)),
    _mutated(phases__0__ranks__1__start_ns=-(1 << 63) - 1),
    _mutated(phases__1__nranks=-(1 << 64)),
    # the step's cpu + dram past 2^63 - 1 (energy_total_uj absent)
    _mutated(step__energy_cpu_uj=(1 << 63) - 1, step__energy_dram_uj=1,
             step__energy_total_uj=None),
    # phase fields the fast path let through unbounded
    _mutated(phases__0__energy_dram_uj=1 << 63),
    _mutated(phases__0__duration_ns=1 << 64),
    _mutated(phases__1__depth=1 << 63),
    _mutated(phases__0__freq_change_ns=1 << 70),
    _mutated(phases__0__start_ns=-(1 << 64)),
    # lone surrogates (valid JSON "\ud800"): UnicodeEncodeError in sqlite3
    _mutated(step__node_model="\ud800"),
    _mutated(phases__0__kind="ckpt\udfff"),
    _mutated(phases__0__label="\ud800"),
    _mutated(job__tags={"exp": "\ud800"}),
    # ... and in a tag key, which the refusal's reason names
    _mutated(job__tags={"\ud800": []}),
], ids=["deep-nesting", "exit-code-int64", "start-time-int64", "rank-start-int64",
        "nranks-int64", "energy-sum", "phase-dram", "phase-duration", "phase-depth",
        "phase-freq-change", "phase-start", "surrogate-node-model", "surrogate-kind", "surrogate-label",
        "surrogate-tag-value", "surrogate-tag-key"])
def test_regression_refused_whole(data):
    check_one(data)


def test_regression_non_utf8_file_name():
    """A valid record under a name that is not UTF-8 (os.walk gives it with
    surrogate escapes): UnicodeEncodeError storing the path in spool_files.
    The plugin never writes such names: it is quarantined."""
    check_one(json.dumps(mutant_base()).encode(), name=b"1002.0.0.m\xfft.json")
