"""Cross-field rules of the one record checker (store/records.py,
docs/record-format.md "Rules across fields").

A record whose fields contradict each other is refused whole, and the
refusal names the field by its path: the parts of a total never exceed it,
a phase lies within its step's time and energy, a phase kind is what the
plugin accepts, a null figure says why, and durations and powers are ones
a node can have.  The truths here are written out (a 110 J step, a 1 MJ
phase, 31 years), not taken from the checker.
"""
from __future__ import annotations

import copy

import pytest

import recgen
from recgen import J, S
from joulestep.store import RecordError, parse_record

YEAR_NS = 365 * 86400 * S


def base(**kw):
    """A plain step: 10 s, CPU 100 J + DRAM 10 J = 110 J, one phase."""
    rec = recgen.record(7, "0", dur_s=10, cpu_j=100, dram_j=10,
                        phases=[recgen.phase(0, "checkpoint", 2, 3, 30, 3)], **kw)
    rec["version"] = 3
    rec["step"]["total_includes"] = "cpu+dram"
    return rec


def refused(rec, path):
    with pytest.raises(RecordError) as e:
        parse_record(rec)
    assert str(e.value).startswith(path + ":"), str(e.value)
    return str(e.value)


def test_the_base_record_is_accepted():
    parse_record(base())


def test_a_total_below_its_parts_is_refused():
    rec = base()
    rec["step"]["energy_total_uj"] = 1          # 1 uJ on a 110 J step
    refused(rec, "step.energy_total_uj")
    rec["step"]["energy_total_uj"] = 105 * J    # above the CPU, below CPU + DRAM
    refused(rec, "step.energy_total_uj")


def test_a_total_that_says_it_holds_the_gpus_must_hold_them():
    rec = base()
    rec["step"].update(energy_gpu_uj=500 * J, total_includes="cpu+dram+gpu",
                       energy_total_uj=110 * J)
    refused(rec, "step.energy_total_uj")
    rec["step"]["energy_total_uj"] = 610 * J
    parse_record(rec)
    # a total of CPU + DRAM leaves the GPUs out: 110 J is right
    rec["step"].update(total_includes="cpu+dram", energy_total_uj=110 * J)
    parse_record(rec)


def test_a_phase_with_more_energy_than_its_step_is_refused():
    rec = base()
    rec["phases"][0]["energy_cpu_uj"] = 1_000_000 * J    # 1 MJ in a 110 J step
    refused(rec, "phases[0].energy_cpu_uj")
    rec = base()
    rec["phases"][0]["energy_dram_uj"] = 11 * J          # DRAM 10 J in the step
    refused(rec, "phases[0].energy_dram_uj")
    rec = base()
    rec["step"].update(energy_gpu_uj=50 * J, total_includes="cpu+dram+gpu",
                       energy_total_uj=160 * J)
    rec["phases"][0]["energy_gpu_uj"] = 51 * J
    refused(rec, "phases[0].energy_gpu_uj")
    rec["phases"][0]["energy_gpu_uj"] = 50 * J           # all of it: fine
    parse_record(rec)


@pytest.mark.parametrize("start_s,dur_s,path", [
    (3600, 1, "phases[0].start_ns"),       # an hour after the step ended
    (-600, 1, "phases[0].start_ns"),       # ten minutes before it started
    (5, 3600, "phases[0].end_ns"),         # starts inside, ends an hour after
])
def test_a_phase_outside_its_step_window_is_refused(start_s, dur_s, path):
    rec = base()
    st = recgen.T0 + (1 + start_s) * S              # the step starts at T0 + 1 s
    rec["phases"][0].update(start_ns=st, end_ns=st + dur_s * S, duration_ns=dur_s * S)
    refused(rec, path)


def test_a_phase_closed_by_the_step_end_may_pass_it_by_clock_slew():
    """Phase times are the monotonic clock moved to wall time once, at the
    step's start; the step's end is the wall clock.  NTP may slew the wall
    clock by up to 500 ppm: a phase that ran to the step's end may end up
    to that much after end_ns (the rule allows 1 s + 1/1000 of the step)."""
    rec = base()
    end = rec["step"]["end_ns"]
    p = rec["phases"][0]
    p.update(end_ns=end + S // 2, duration_ns=end + S // 2 - p["start_ns"])
    parse_record(rec)


@pytest.mark.parametrize("kind,ok", [
    ("WRITE NOW", False), ("Write", False), ("ckpt/1", False), ("x" * 33, False),
    ("é", False), ("write", True), ("ckpt-1_a", True), ("x" * 32, True)])
def test_a_phase_kind_has_the_plugins_charset(kind, ok):
    """The kinds the plugin accepts from a marker: [a-z0-9_-]{1,32}
    (spank/js_parse.c js_kind_valid)."""
    rec = base()
    rec["phases"][0]["kind"] = kind
    if ok:
        parse_record(rec)
    else:
        msg = refused(rec, "phases[0].kind")
        assert "[a-z0-9_-]" in msg


def test_a_null_dram_needs_its_reason():
    rec = base()
    rec["step"].update(energy_dram_uj=None, energy_total_uj=100 * J)
    refused(rec, "step.energy_dram_uj")
    ok = copy.deepcopy(rec)     # not measured, and why: an AMD node
    ok["step"]["dram_not_measured"] = "no dram zone"
    ok["phases"][0]["energy_dram_uj"] = None
    parse_record(ok)
    ok = copy.deepcopy(rec)     # measured, but its counter is uncertain
    ok["provenance"]["wrap_uncertain"] = True
    ok["step"]["energy_total_uj"] = None
    parse_record(ok)
    ok = copy.deepcopy(rec)     # no energy at all: the CPU's null says so
    ok["step"].update(energy_cpu_uj=None, energy_total_uj=None)
    ok["phases"][0].update(energy_cpu_uj=None, energy_dram_uj=None)
    ok["provenance"]["errors"] = ["energy: no source"]
    parse_record(ok)


def test_a_null_gpu_needs_its_reason():
    rec = base()
    rec["gpus"] = [{"index": 0, "uuid": "GPU-0", "model": "x", "energy_uj": None,
                    "reason": None, "integrated": False, "resets": 0}]
    refused(rec, "gpus[0].reason")
    rec["gpus"][0]["reason"] = "split by MIG"
    parse_record(rec)
    rec["phases"][0]["gpus"] = [{"uuid": "GPU-0", "energy_uj": None, "reason": None}]
    refused(rec, "phases[0].gpus[0].reason")


def test_a_31_year_step_is_refused():
    rec = base()
    st = rec["step"]
    st["end_ns"] = st["start_ns"] + 31 * YEAR_NS
    del st["duration_ns"]
    refused(rec, "step.end_ns")
    rec = base()
    rec["step"]["duration_ns"] = 31 * YEAR_NS
    refused(rec, "step.duration_ns")


@pytest.mark.parametrize("field", ["energy_cpu_uj", "energy_total_uj", "energy_node_uj",
                                   "energy_gpu_uj"])
def test_an_impossible_power_is_refused(field):
    """2^63 - 1 uJ in 10 s is 9e14 W.  A node draws far less than 100 kW
    (an 8-GPU node about 10 kW)."""
    rec = base()
    st = rec["step"]
    st[field] = (1 << 63) - 1
    if field == "energy_cpu_uj":
        st["energy_total_uj"] = None
    if field == "energy_gpu_uj":
        st["total_includes"] = "cpu+dram"
    refused(rec, f"step.{field}")


def test_a_plausible_big_node_is_accepted():
    """A week on an 8-GPU node at 10 kW: 6 GJ, accepted."""
    rec = base()
    st = rec["step"]
    week = 7 * 86400
    st.update(end_ns=st["start_ns"] + week * S, duration_ns=week * S,
              energy_cpu_uj=1_000 * week * J, energy_dram_uj=200 * week * J,
              energy_gpu_uj=8_800 * week * J, total_includes="cpu+dram+gpu",
              energy_total_uj=10_000 * week * J)
    parse_record(rec)


def test_an_impossible_zone_or_gpu_power_is_refused():
    rec = base()
    rec["zones"][0]["energy_uj"] = (1 << 62)
    refused(rec, "zones[0].energy_uj")
    rec = base()
    rec["gpus"] = [{"index": 0, "uuid": "GPU-0", "model": "x", "energy_uj": 1 << 62,
                    "reason": None, "integrated": False, "resets": 0}]
    refused(rec, "gpus[0].energy_uj")
