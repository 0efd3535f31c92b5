"""Properties of the one record checker (store/records.py parse_record),
with Hypothesis (docs/reliability.md, "Fuzzing").

- On any decoded record (mutants of a valid one, valid ones with nullable
  fields nulled, dropped or set to edge values): parse_record returns rows
  or raises RecordError; never anything else.
- A refusal names the field by its path (``phases[1].energy_cpu_uj``): a
  path of the schema once its indexes are taken out, or the record itself.
- What is accepted follows the rules of docs/record-format.md, written out
  here as the truth (phases_ok, STEP_RULES), not taken from the schema.
- The digest tells copies apart by content only: a record and its JSON round
  trip, or with an optional null field dropped, have one digest; a changed
  energy gives another.

Short in `make test` (derandomized); `make fuzz` runs more examples.
"""
from __future__ import annotations

import json
import pathlib
import re
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "cli"))
import recgen  # noqa: E402
import test_ingest_fuzz as tif  # noqa: E402

from joulestep import store  # noqa: E402
from joulestep.store import records  # noqa: E402

EXAMPLES = tif.EXAMPLES * 2
STATS = {"ok": 0, "refused": 0}
PATHS = {f.path for f in records.SCHEMA} | {f.section for f in records.SCHEMA} | {
    f.section.removesuffix("[]") for f in records.SCHEMA} | {
    "record", "format", "version", "phases[].ranks", "phases[].gpus",
    "step.exclusive"}  # versions 1-3 only: checked, then dropped (version 4)


def outcome(rec):
    try:
        p = store.parse_record(rec)
    except store.RecordError as e:
        return ("refused", str(e))
    assert isinstance(p, store.Parsed)
    return ("ok", p)


def named_path(reason: str) -> str:
    """The schema path a refusal names: its text before ': ', without
    indexes (``phases[1].x`` -> ``phases[].x``) or a tag key."""
    path = reason.split(": ", 1)[0].split(" ", 1)[0]
    path = re.sub(r"\[\d+\]", "[]", path)
    return "job.tags" if path.startswith("job.tags") else path


def check(rec):
    got = outcome(rec)
    STATS[got[0]] += 1
    if got[0] == "refused":
        assert named_path(got[1]) in PATHS, got[1]
    else:
        again = store.parse_record(json.loads(json.dumps(rec)))
        assert again == got[1]          # JSON round trip: same rows, same digest
    return got


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(tif.mutant())
def test_mutants_are_rows_or_a_named_refusal(data):
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
def test_varied_records_follow_the_rules(rec):
    got = check(rec)
    assert (got[0] == "ok") == record_ok(rec), got


def test_both_outcomes_were_exercised():
    """The properties above are vacuous unless both outcomes came up."""
    if not STATS["ok"] + STATS["refused"]:
        pytest.skip("run with the property tests above")
    assert STATS["ok"] >= 20 and STATS["refused"] >= 20, STATS


def test_huge_ratio_is_refused_not_a_crash():
    """An integer past a double's range where a number is expected:
    OverflowError out of parse_record (ingest stopped) before the fix."""
    rec = recgen.record()
    rec["step"]["freq_min_ratio"] = 10 ** 400
    with pytest.raises(store.RecordError, match=r"step\.freq_min_ratio"):
        store.parse_record(rec)


YEAR_S = 366 * 86400     # the longest step (docs/record-format.md)


@pytest.mark.parametrize("cpu,dram,ok", [
    (3 * 10 ** 18, 10 ** 17, True), (1 << 62, 0, False), ((1 << 63) - 1, 1, False),
    ((1 << 63) - 1, None, False), (1 << 62, 1 << 62, False)])
def test_total_from_cpu_and_dram_stays_in_int64(cpu, dram, ok):
    """A null energy_total_uj is cpu + dram.  Over the longest step (a
    year) at the most a node draws (100 kW), no part comes near 2^63: a
    figure past that is refused by its path before any sum."""
    rec = recgen.record(dur_s=YEAR_S)
    rec["step"].update(energy_cpu_uj=cpu, energy_dram_uj=dram, energy_total_uj=None,
                       dram_not_measured=None if dram is not None else "no dram zone")
    got = outcome(rec)
    assert (got[0] == "ok") == ok, got
    if ok:
        assert got[1].step[records.STEP_AT["energy_total_uj"]] == cpu + (dram or 0)
    else:
        assert got[1].startswith("step.energy_cpu_uj:"), got


def test_digest_tells_copies_apart_by_content():
    rec = recgen.record(first_seen_s=0, phases=PLUGIN_PHASES)
    d = store.parse_record(rec).digest
    assert store.parse_record(json.loads(json.dumps(rec))).digest == d
    absent = json.loads(json.dumps(rec))
    del absent["step"]["exit_code"], absent["phases"][0]["label"]
    rec["step"]["exit_code"] = None
    assert store.parse_record(rec).digest == store.parse_record(absent).digest
    rec["step"]["energy_cpu_uj"] += 1
    rec["step"]["energy_total_uj"] += 1
    assert store.parse_record(rec).digest != d


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


#: the step, job and provenance rules of docs/record-format.md: field ->
#: a test of its value (written out here, not taken from the schema)
STEP_RULES = {
    **{f"step.{k}": (lambda v: _is_int(v, 0, null=True)) for k in (
        "ntasks", "nnodes", "ncpus", "energy_dram_uj", "energy_total_uj")},
    **{f"step.{k}": (lambda v: _is_int(v, 1, null=True)) for k in (
        "base_freq_khz", "nominal_freq_khz", "fixed_freq_khz")},
    **{f"step.{k}": (lambda v: _is_text(v, null=True)) for k in (
        "node_model", "cpus", "policy")},
    "step.exclusive": lambda v: v is None or type(v) is bool,  # versions 1-3 (recgen: 1)
    "step.freq_min_ratio": lambda v: v is None or type(v) in (int, float),
    "step.exit_code": lambda v: _is_int(v, null=True),
    **{f"job.{k}": (lambda v: _is_int(v, 0, null=True)) for k in (
        "submit_time_ns", "uid", "gid")},
    "job.start_time_ns": lambda v: _is_int(v, null=True),
    **{f"job.{k}": (lambda v: _is_text(v, null=True)) for k in (
        "name", "user", "account", "partition")},
    **{f"provenance.{k}": (lambda v: _is_text(v, null=True)) for k in (
        "backend", "plugin_version", "job_source", "freq_control")},
    **{f"provenance.{k}": (lambda v: _is_int(v, 0, null=True)) for k in (
        "sample_period_ns", "min_phase_ns")},
    "provenance.energy_resolution_uj": lambda v: _is_int(v, 1, null=True),
}


#: the rules across fields (docs/record-format.md), written out here
MAX_W = 100_000                     # the most a node draws
KIND = re.compile(r"[a-z0-9_-]{1,32}", re.ASCII)


def max_uj(s) -> int:
    """The most energy a node can use in step s (or in 1 s if shorter)."""
    return MAX_W * max(s["end_ns"] - s["start_ns"], 10 ** 9) // 1000


def step_fits(s, prov) -> bool:
    cpu, dram, total = s["energy_cpu_uj"], s.get("energy_dram_uj"), s.get("energy_total_uj")
    if any(v is not None and v > max_uj(s) for v in (cpu, dram, total)):
        return False
    if dram is None and not s.get("dram_not_measured") and cpu is not None \
            and not prov.get("wrap_uncertain"):
        return False            # a null DRAM needs its reason
    return total is None or (cpu or 0) + (dram or 0) <= total


def phase_fits(p, s) -> bool:
    """A phase in its step's window (give or take NTP's slew: 1 s + 1/1000
    of the step) with no more energy than the step; a kind the plugin
    accepts; a null DRAM only where the step's is or the phase has none."""
    slack = 10 ** 9 + (s["end_ns"] - s["start_ns"]) // 1000
    lo, hi = s["start_ns"] - slack, s["end_ns"] + slack
    if not (lo <= p["start_ns"] <= hi and lo <= p["end_ns"] <= hi):
        return False
    for k in ("energy_cpu_uj", "energy_dram_uj"):
        if p[k] is not None and (p[k] > max_uj(s) or (
                s.get(k) is not None and p[k] > s[k])):
            return False
    if p["energy_dram_uj"] is None and p["energy_cpu_uj"] is not None and \
            s.get("energy_dram_uj") is not None:
        return False
    return bool(KIND.fullmatch(p["kind"]))


def record_ok(rec) -> bool:
    """Whether a varied() record follows the rules."""
    s, j = rec["step"], rec["job"]
    sid = s["step_id"]
    sid = str(sid) if type(sid) is int else sid
    if not re.fullmatch(r"[0-9]+|[A-Za-z0-9_.+-]{1,64}", sid, re.ASCII):
        return False
    for path, ok in STEP_RULES.items():
        sec, key = path.split(".")
        obj = {"step": s, "job": j, "provenance": rec["provenance"]}[sec]
        if key in obj and not ok(obj[key]):
            return False
    if j.get("first_seen_ns") is None and j.get("submit_time_ns") is None:
        return False
    if any(not k or type(v) not in (str, int, float) or not _is_text(str(v))
           for k, v in j["tags"].items()):
        return False
    total = s.get("energy_total_uj")
    if total is None and s["energy_cpu_uj"] + (s.get("energy_dram_uj") or 0) >= HI:
        return False
    if not step_fits(s, rec["provenance"]):
        return False
    return phases_ok(rec["phases"], s)


def phases_ok(phases, step) -> bool:
    """The phase rules of docs/record-format.md, written out here."""
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
                and (p["parent_seq"] is None or p["parent_seq"] in seqs)
                and phase_fits(p, step)):
            return False
    return len(set(seqs)) == len(seqs)


PLUGIN_PHASES = [recgen.phase(0, "compute", 1, 2, 3, 1),
                 recgen.phase(1, "checkpoint", 2, 1, 1, 1, label="c", freq_khz=1_200_000,
                              nbytes=10, depth=1, parent=0, nranks=4)]


@pytest.mark.parametrize("field", sorted(PLUGIN_PHASES[1]))
def test_every_phase_field_at_every_edge(field):
    """Each phase field set to each edge value, in a phase list of one and
    of two: parse_record accepts exactly what the rules allow, and a
    refusal names the phase's field by its path."""
    for value in EDGES:
        for k in range(len(PLUGIN_PHASES)):
            phases = [dict(p) for p in PLUGIN_PHASES[:k + 1]]
            phases[k][field] = value
            rec = recgen.record(3, "0", "n3", phases=phases)
            want = phases_ok(phases, rec["step"])
            got = check(rec)
            assert (got[0] == "ok") == want, (value, k, got)
            if not want:    # this phase's field (or end_ns before start_ns)
                assert got[1].startswith(f"phases[{k}]."), got[1]
                if field not in ("start_ns", "end_ns"):
                    assert got[1].startswith(f"phases[{k}].{field}:"), got[1]
