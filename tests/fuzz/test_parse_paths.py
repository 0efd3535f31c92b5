"""The two paths of store.parse_record give one result (docs/design.md,
"Ingest speed").

parse_record first tries store._parse_fast, which checks a well-formed
record in bulk, and falls back to store._parse_checked, which checks field by
field and names the first bad field.  The fast path may decline any record
(it then costs only time), but when it accepts one, the checked path must
accept it too, with the same rows: else ingest would store a record the
checked path refuses, or store different rows.  Property, over mutants of
valid records (tests/fuzz/test_ingest_fuzz.py's mutations) and over valid
records with varied optional fields:

- _parse_fast returns None, or exactly what _parse_checked returns;
- the C check (joulestep._speedups.parse) returns None, or exactly what
  _parse_checked returns;
- parse_record raises what _parse_checked raises (the quarantine reason),
  with the C check and without it (the Python paths alone).

The batch path (store._parse_batch, which store.parse_batch tries first on a
whole batch and ingest_records uses) checks a field across all records at
once; over batches of such records:

- _parse_batch returns None, or exactly [_parse_fast(r) for r in batch]
  (so, by the above, what _parse_checked returns for each);
- store.parse_batch gives, per record, what parse_record gives or raises,
  with the C check and without it.
"""
from __future__ import annotations

import contextlib
import json
import pathlib
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "cli"))
import recgen  # noqa: E402
import test_ingest_fuzz as tif  # noqa: E402

from joulestep import store  # noqa: E402

EXAMPLES = tif.EXAMPLES * 4
STATS = {"fast": 0, "checked": 0, "batch": 0, "unbatched": 0, "c": 0, "c_declined": 0}


@contextlib.contextmanager
def python_only():
    """store as where the C check was not built."""
    saved, store._speedups = store._speedups, None
    try:
        yield
    finally:
        store._speedups = saved


def c_path(rec):
    """The C check (built by `make venv`: test_the_c_check_is_built)."""
    return store._speedups.parse(rec) if store._speedups is not None else None


def outcome(fn, rec):
    try:
        return ("ok", fn(rec))
    except store.RecordError as e:
        return ("refused", str(e))


def fast_path(rec):
    """_parse_fast as parse_record calls it: an exception means "not me"."""
    try:
        return store._parse_fast(rec)
    except Exception:
        return None


def check(rec) -> None:
    want = outcome(store._parse_checked, rec)
    fast = fast_path(rec)
    if fast is not None:
        STATS["fast"] += 1
        assert want == ("ok", fast), (want, fast)
    else:
        STATS["checked"] += 1
    c = c_path(rec)
    if c is not None:
        STATS["c"] += 1
        assert want == ("ok", c), (want, c)
    else:
        STATS["c_declined"] += 1
    assert outcome(store.parse_record, rec) == want
    with python_only():
        assert outcome(store.parse_record, rec) == want


def batch_path(recs):
    """_parse_batch as parse_batch calls it: an exception means "not us"."""
    try:
        return store._parse_batch(recs)
    except Exception:
        return None


def check_batch(recs) -> None:
    got = batch_path(recs)
    if got is not None:
        STATS["batch"] += 1
        assert got == [fast_path(r) for r in recs]
        assert None not in got
    else:
        STATS["unbatched"] += 1
    want = [outcome(store.parse_record, r) for r in recs]

    def got():
        return [("refused", str(p)) if isinstance(p, store.RecordError) else ("ok", p)
                for p in store.parse_batch(recs)]
    assert got() == want
    with python_only():
        assert got() == want


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(tif.mutant())
def test_fast_path_agrees_on_mutants(data):
    try:
        rec = json.loads(data)
    except (ValueError, RecursionError):
        return      # not JSON: parse_record never sees it
    check(rec)


NULLABLE_STEP = ["node_model", "ntasks", "nnodes", "cpus", "ncpus", "exclusive",
                 "policy", "base_freq_khz", "freq_min_ratio", "energy_dram_uj",
                 "energy_total_uj", "exit_code", "nominal_freq_khz", "fixed_freq_khz"]
NULLABLE_JOB = ["submit_time_ns", "start_time_ns", "name", "user", "uid", "gid",
                "account", "partition"]
NULLABLE_PROV = ["backend", "sample_period_ns", "plugin_version", "job_source",
                 "freq_control", "min_phase_ns", "energy_resolution_uj"]
small = st.one_of(st.none(), st.sampled_from([0, 1, 7, (1 << 63) - 1, 1 << 63, -1,
                                              0.5, True, "", "x", "é", "1\n"]))


@st.composite
def varied(draw):
    """A valid record (every key the plugin writes), then nullable fields
    nulled, dropped or set to edge values; phases with and without the
    optional fields."""
    n = draw(st.integers(0, 5))
    phases = [recgen.phase(k, draw(st.sampled_from(["compute", "checkpoint"] * 4 + ["é"])),
                           k, 1, 2, 1, label=draw(st.sampled_from([None, "", "l"])),
                           freq_khz=draw(st.sampled_from([None, 1, 1_200_000] * 4 + [0])),
                           nbytes=draw(st.sampled_from([None, 0, 5])),
                           parent=(k - 1 if k and draw(st.booleans()) else None),
                           depth=draw(st.sampled_from([0, 1])),
                           nranks=draw(st.sampled_from([None, 2, -3])))
              for k in range(n)]
    rec = recgen.record(7, draw(st.sampled_from(["0", "batch", 3] * 4 + ["x y", "1\n"])),
                        "n1", phases=phases, first_seen_s=draw(st.sampled_from([None, 0])),
                        tags=draw(st.sampled_from([{}, {"a": "b"}] * 4 + [{"a": 1}, {"": "x"}])),
                        errors=draw(st.sampled_from([[], ["rapl: gone"]] * 4 + [["é"]])))
    rec["step"].update(nominal_freq_khz=2_000_000, fixed_freq_khz=None)
    rec["provenance"].update(freq_control="plugin", min_phase_ns=0,
                             energy_resolution_uj=61)
    for obj, keys in ((rec["step"], NULLABLE_STEP), (rec["job"], NULLABLE_JOB),
                      (rec["provenance"], NULLABLE_PROV)):
        for k in draw(st.lists(st.sampled_from(keys), max_size=2)):
            if draw(st.booleans()):
                obj.pop(k, None)
            else:
                obj[k] = draw(small)
    return rec


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(varied())
def test_fast_path_agrees_on_varied_records(rec):
    check(rec)


@pytest.mark.parametrize("rec", [
    recgen.record(),
    recgen.record(first_seen_s=0, phases=[
        recgen.phase(0, "compute", 1, 2, 3, 1),
        recgen.phase(1, "checkpoint", 2, 1, 1, 1, label="c", freq_khz=1_200_000,
                     nbytes=10, depth=1, parent=0, nranks=4)]),
], ids=["plain", "phases"])
def test_fast_path_takes_what_the_plugin_writes(rec):
    """The common record goes the fast ways (else ingest is slow, silently),
    as built in memory and as json.loads gives it from a spool file (keys
    not interned)."""
    assert fast_path(rec) is not None
    assert c_path(rec) is not None
    assert c_path(json.loads(json.dumps(rec))) == c_path(rec)
    check(rec)


def test_the_c_check_is_built():
    """make venv builds joulestep._speedups (it is optional to pip: a site
    without a compiler gets the Python paths); here it must be there, or
    every C property above is vacuous and ingest silently slow."""
    assert store._speedups is not None, "joulestep._speedups was not built"


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.lists(varied(), min_size=1, max_size=4))
def test_batch_path_agrees_on_varied_batches(recs):
    check_batch(recs)


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(tif.mutant(), st.integers(0, 2))
def test_batch_path_agrees_with_a_mutant_among_valid(data, where):
    """One mutant among valid records: the batch check across records must
    fail over to the per-record paths, or accept the mutant's own rows."""
    try:
        rec = json.loads(data)
    except (ValueError, RecursionError):
        return
    recs = [recgen.record(1, "0", "n1", phases=PLUGIN_PHASES),
            recgen.record(2, "batch", "n2", phases=PLUGIN_PHASES)]
    recs.insert(where, rec)
    check_batch(recs)


PLUGIN_PHASES = [recgen.phase(0, "compute", 1, 2, 3, 1),
                 recgen.phase(1, "checkpoint", 2, 1, 1, 1, label="c", freq_khz=1_200_000,
                              nbytes=10, depth=1, parent=0, nranks=4)]


def test_batch_path_takes_what_the_plugin_writes():
    """A batch of common records goes the batch way (else ingest is slow)."""
    recs = [recgen.record(j, s, f"n{j}", phases=PLUGIN_PHASES if j % 2 else [])
            for j in range(5) for s in ("0", "batch", 3)]
    assert batch_path(recs) is not None
    check_batch(recs)


def test_batch_path_checks_seq_and_parent_per_record():
    """seq unique and parent_seq one of them within each record, not
    across the batch: a parent naming a seq of another record is refused."""
    a = recgen.record(1, "0", "n1", phases=[recgen.phase(0, "compute", 1, 2, 3, 1),
                                             recgen.phase(5, "compute", 1, 2, 3, 1)])
    b = recgen.record(2, "0", "n1", phases=[recgen.phase(0, "compute", 1, 2, 3, 1,
                                                         parent=5, depth=1)])
    c = recgen.record(3, "0", "n1", phases=[recgen.phase(5, "compute", 1, 2, 3, 1)])
    assert batch_path([a, c]) is not None         # seq 5 twice, not in one record
    assert batch_path([a, b]) is None
    check_batch([a, b, c])
    assert isinstance(store.parse_batch([a, b, c])[1], store.RecordError)


def test_batch_path_skips_the_parent_check_without_parents(monkeypatch):
    """No phase names a parent (what the plugin writes for flat phases):
    the batch path checks no (record, seq) pairs.  It compared the set of
    parent values with a set of types, never equal, so it indexed every
    phase by record on every batch (~15 % of the phase check)."""
    def indexed(lens):
        raise AssertionError("phases indexed by record")
    flat = [recgen.phase(k, "compute", k, 1, 2, 1) for k in range(3)] * 2
    monkeypatch.setattr(store, "_record_index", indexed)
    assert store._phase_rows(flat, [3, 3]) is not None


def test_both_paths_were_exercised():
    """The properties above are vacuous unless both paths ran (file order)."""
    if not STATS["fast"] + STATS["checked"]:
        pytest.skip("run with the property tests above")
    assert STATS["fast"] >= 20 and STATS["checked"] >= 20, STATS
    assert STATS["batch"] >= 20 and STATS["unbatched"] >= 20, STATS
    assert STATS["c"] >= 20 and STATS["c_declined"] >= 20, STATS


def test_huge_ratio_is_refused_not_a_crash():
    """An integer past a double's range where a number is expected:
    OverflowError out of parse_record (ingest stopped) before the fix."""
    rec = recgen.record()
    rec["step"]["freq_min_ratio"] = 10 ** 400
    with pytest.raises(store.RecordError, match=r"step\.freq_min_ratio"):
        store.parse_record(rec)




@pytest.mark.parametrize("cpu,dram,ok", [
    ((1 << 63) - 2, 1, True), ((1 << 63) - 1, 1, False), ((1 << 63) - 1, None, True),
    ((1 << 62), (1 << 62), False)])
def test_total_from_cpu_and_dram_stays_in_int64(cpu, dram, ok):
    """A null energy_total_uj is cpu + dram; past int64 the record is
    refused (on every path: the C check must not wrap around)."""
    rec = recgen.record()
    rec["step"].update(energy_cpu_uj=cpu, energy_dram_uj=dram, energy_total_uj=None)
    got = outcome(store.parse_record, rec)
    assert (got[0] == "ok") == ok, got
    if ok:
        assert got[1].step[17] == cpu + (dram or 0)
    check(rec)
    check_batch([recgen.record(), rec])


EDGES = [None, 0, 1, 7, (1 << 63) - 1, 1 << 63, -1, -(1 << 63), -(1 << 63) - 1,
         0.5, 1.0, True, False, "", "x", "é", "\ud800", "1\n", [], {}]
HI = 1 << 63


def _is_int(v, lo=-HI, null=False):
    return (null and v is None) or (type(v) is int and lo <= v < HI)


def _is_text(v, null=False):
    if null and v is None:
        return True
    if type(v) is not str or (not null and not v):
        return False
    try:
        v.encode("utf-8")       # a lone surrogate cannot be stored
    except UnicodeEncodeError:
        return False
    return True


def phases_ok(phases) -> bool:
    """The phase rules of docs/record-format.md, written out here (the
    checked path itself tries the fast check first, so it is no truth)."""
    seqs = [p["seq"] for p in phases]
    for p in phases:
        if not (_is_int(p["seq"], 0) and _is_int(p["depth"], 0)
                and _is_int(p["start_ns"], 0) and _is_int(p["end_ns"], 0)
                and _is_int(p["duration_ns"], 0) and p["end_ns"] >= p["start_ns"]
                and _is_text(p["kind"]) and _is_text(p["label"], null=True)
                and all(_is_int(p[k], 0, null=True)
                        for k in ("energy_cpu_uj", "energy_dram_uj", "bytes"))
                and _is_int(p["freq_khz"], 1, null=True)
                and all(_is_int(p[k], null=True)
                        for k in ("parent_seq", "freq_change_ns", "nranks"))
                and (p["parent_seq"] is None or p["parent_seq"] in seqs)):
            return False
    return len(set(seqs)) == len(seqs)


@pytest.mark.parametrize("field", sorted(PLUGIN_PHASES[1]))
def test_every_phase_field_at_every_edge(field):
    """Each phase field set to each edge value, in a phase list of one and
    of two, in a record alone and among valid records: parse_record and
    parse_batch accept exactly what the rules allow, and all paths agree
    (the batch check leans on min/max raising TypeError for a null among
    the required numbers, and on bool not being int)."""
    for value in EDGES:
        for k in range(len(PLUGIN_PHASES)):
            phases = [dict(p) for p in PLUGIN_PHASES[:k + 1]]
            phases[k][field] = value
            rec = recgen.record(3, "0", "n3", phases=phases)
            want = phases_ok(phases)
            assert (outcome(store.parse_record, rec)[0] == "ok") == want, (value, k)
            got = store.parse_batch([recgen.record(1, "0", "n1", phases=PLUGIN_PHASES),
                                     rec])
            assert isinstance(got[0], store.Parsed)
            assert isinstance(got[1], store.Parsed) == want, (value, k)
            check(rec)
            check_batch([rec])
