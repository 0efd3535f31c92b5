"""The job summary's saving against the clock a step would have had
(issue 9, defects 1 and 3): the fitted model is applied to exactly the
energy it was fitted on, and fixed:R steps compare with their original
clock.  Truths are worked out here from the power curves that generated
the records, not from the program."""

import pytest

from joulestep import store

import recgen
from conftest import jrun

FMAX = 2.0          # GHz
ALPHA = 0.5         # runtime share that scales with 1/f
T_BASE = 10.0       # s at FMAX


def cpu_w(f):
    """The issue's CPU power curve (W), f in GHz."""
    return 8.0 + 24.0 * (f / FMAX) ** 3


DRAM_W = 8.0


def runtime(f, t_base=T_BASE):
    return t_base * (ALPHA * FMAX / f + 1.0 - ALPHA)


def sweep(first_job=9000, freqs=(1.2, 1.4, 1.6, 1.8, 2.0)):
    """A noiseless sweep of 'write' phases: CPU and DRAM energy from the
    curves above, durations from the runtime model."""
    recs = []
    for i, f in enumerate(freqs):
        t = runtime(f)
        ph = [recgen.phase(0, "write", 1, t, cpu_w(f) * t, DRAM_W * t,
                           freq_khz=int(round(f * 1e6)),
                           t0=recgen.T0 + (1000 * i - 1) * recgen.S)]
        recs.append(recgen.record(first_job + i, "0", "node01", start_s=1000 * i,
                                  submit_s=1000 * i, dur_s=t + 1,
                                  cpu_j=cpu_w(f) * t + 10, dram_j=DRAM_W * t + 1,
                                  base_khz=int(FMAX * 1e6), policy="phase:write=0.8",
                                  tags={"sweep": "issue9"}, phases=ph))
    return recs


@pytest.fixture
def fitted(run, tmp_path):
    sp = tmp_path / "sweep"
    for r in sweep():
        recgen.write(sp, r)
    run("ingest", sp)
    run("model", "dvfs", "--where", "sweep=issue9", "--save", tmp_path / "tuned.json")
    return run


def test_saving_applies_the_model_to_cpu_plus_dram(fitted, tmp_path):
    """Issue 9 defect 1: CPU 8 + 24 (f/2)^3 W, DRAM 8 W, alpha 0.5, a phase
    at 1.6 GHz on a 2.0 GHz base clock."""
    f = 1.6
    t = runtime(f)
    e_cpu, e_dram = cpu_w(f) * t, DRAM_W * t
    e_base = (cpu_w(FMAX) + DRAM_W) * runtime(FMAX)   # the same work at 2.0 GHz
    truth = e_base - (e_cpu + e_dram)
    assert truth == pytest.approx(81.76, abs=0.01)     # the 81.8 J
    rec = recgen.record(9100, "0", "node01", start_s=50_000, submit_s=50_000,
                        dur_s=t + 1, cpu_j=e_cpu + 10, dram_j=e_dram + 1,
                        base_khz=int(FMAX * 1e6), policy="phase:write=0.8",
                        phases=[recgen.phase(0, "write", 50_001, t, e_cpu, e_dram,
                                             freq_khz=int(f * 1e6))])
    recgen.write(tmp_path / "job", rec)
    fitted("ingest", tmp_path / "job")
    s = jrun(fitted, "job", 9100)
    p = s["steps"][0]["phases"][0]
    assert p["saving_j"] == pytest.approx(truth, rel=0.005)
    assert p["saving_pct"] == pytest.approx(100 * truth / e_base, rel=0.005)
    assert p["saving_basis"] == "cpu+dram"
    assert s["steps"][0]["saving_j"] == pytest.approx(truth, rel=0.005)
    assert s["totals"]["saving_basis"] == "cpu+dram"
    out = fitted("job", 9100).stdout
    assert "CPU+DRAM" in out


# --------------------------------------------------------------------------
# defect 3: fixed:R steps, and what a baseline's clock was


def clocks(rec, *, fixed_khz=None, nominal_khz=int(FMAX * 1e6),
           control="joulestep"):
    """The step clocks of a current plugin's record (docs/record-format.md)."""
    rec["step"].update(nominal_freq_khz=nominal_khz, fixed_freq_khz=fixed_khz)
    rec["provenance"]["freq_control"] = control
    return rec


def fixed_step(job, ratio, fixed_ghz, start_s, tags=None):
    """A whole step held at fixed_ghz under fixed:ratio; the original clock
    (base_freq_khz) is FMAX.  No phases."""
    t = runtime(fixed_ghz)
    rec = recgen.record(job, "0", "node01", start_s=start_s, submit_s=start_s,
                        dur_s=t, cpu_j=cpu_w(fixed_ghz) * t, dram_j=DRAM_W * t,
                        base_khz=int(FMAX * 1e6), policy=f"fixed:{ratio}",
                        tags=tags or {})
    return clocks(rec, fixed_khz=int(round(fixed_ghz * 1e6)))


def test_step_clocks_are_stored(run, db, tmp_path):
    sp = tmp_path / "sp"
    recgen.write(sp, fixed_step(9300, 0.83, 1.7, 10))
    recgen.write(sp, recgen.record(9301, "0", "node01", start_s=100, submit_s=100))
    run("ingest", sp)
    run("ingest", sp)                              # idempotent
    rows = store.connect(db).execute(
        "SELECT base_freq_khz, nominal_freq_khz, fixed_freq_khz, freq_control "
        "FROM steps JOIN jobs USING (job_pk) ORDER BY job_id").fetchall()
    assert rows == [(2_000_000, 2_000_000, 1_700_000, "joulestep"),
                    (2_400_000, None, None, None)]


@pytest.fixture
def step_model(run, tmp_path):
    """A step-level model (kind 'step', `model dvfs --level steps`) from a
    sweep of fixed:R steps (rounded clocks: R x fmax is not the clock they
    ran at)."""
    sp = tmp_path / "stepsweep"
    for i, (r, f) in enumerate(((0.63, 1.3), (0.73, 1.5), (0.83, 1.7),
                                (0.93, 1.9), (1, 2.0))):
        recgen.write(sp, fixed_step(9200 + i, r, f, 1000 * i, {"sweep": "fx"}))
    run("ingest", sp)
    run("model", "dvfs", "--level", "steps", "--where", "sweep=fx", "--save",
        tmp_path / "tuned.json")
    return run


def test_fixed_step_shows_its_saving_vs_the_original_clock(step_model, tmp_path):
    """A fixed:0.8 step: its saving against the original 2.0 GHz clock."""
    run = step_model
    recgen.write(tmp_path / "job", fixed_step(9250, 0.8, 1.6, 50_000))
    run("ingest", tmp_path / "job")
    truth = ((cpu_w(FMAX) + DRAM_W) * runtime(FMAX)
             - (cpu_w(1.6) + DRAM_W) * runtime(1.6))
    s = jrun(run, "job", 9250)
    st = s["steps"][0]
    assert st["freq_mhz"] == 1600
    assert st["saving_status"] == "estimated"
    assert st["saving_j"] == pytest.approx(truth, rel=0.005)
    assert (st["saving_vs"], st["saving_ref_mhz"]) == ("original clock", 2000)
    assert s["totals"]["saving_j"] == pytest.approx(truth, rel=0.005)
    assert "saving vs original clock" in run("job", 9250).stdout


def test_fixed_step_of_an_old_plugin_says_why_not(loaded, tmp_path):
    """Plugin 0.1.0 records: base_freq_khz was R x fmax, no original clock."""
    rec = recgen.record(9260, "0", "node01", policy="fixed:0.8",
                        base_khz=1_920_000, start_s=9000, submit_s=9000)
    recgen.write(tmp_path / "old", rec)
    loaded("ingest", tmp_path / "old")
    st = jrun(loaded, "job", 9260)["steps"][0]
    assert st["saving_status"] == "not estimated"
    assert "original clock not recorded" in st["saving_note"]
    assert "original clock not recorded" in loaded("job", 9260).stdout


def dump_run(job, policy, comp, *, fixed_khz=None, nominal_khz=2_000_000,
             control="joulestep"):
    ph = [recgen.phase(0, "compress", job + 1, 2, 20, 2),
          recgen.phase(1, "write", job + 3, 2, 10, 2)]
    rec = recgen.record(job, "0", "node01", start_s=job, submit_s=job, dur_s=6,
                        cpu_j=40, dram_j=5, policy=policy, base_khz=2_000_000,
                        tags={"compressor": comp, "study": "dump"}, phases=ph)
    return clocks(rec, fixed_khz=fixed_khz, nominal_khz=nominal_khz,
                  control=control)


@pytest.mark.parametrize("baseline,label", [
    ("monitor", "governor default"),
    ("fixed:1", "base clock"),
    ("fixed:0.95", "pinned at 1900 MHz, not the nominal clock")])
def test_compare_names_the_baseline_clock(run, tmp_path, baseline, label):
    sp = tmp_path / "sp"
    runs = [("monitor", None, "monitor"), ("io-dvfs", None, "joulestep"),
            ("fixed:1", 2_000_000, "joulestep"), ("fixed:0.95", 1_900_000, "joulestep")]
    for i, (pol, fx, ctl) in enumerate(runs):
        for j, comp in enumerate(("sz", "none")):
            recgen.write(sp, dump_run(10_000 + 100 * i + 10 * j, pol, comp,
                                      fixed_khz=fx, control=ctl))
    run("ingest", sp)
    args = ("compare", "--what", "dump", "--by", "tag:compressor", "--where",
            "study=dump", "--baseline", baseline)
    r = jrun(run, *args)
    assert r["baseline_clock"] == label
    assert f"policy vs {baseline} ({label})" in run(*args).stdout


def test_lowered_phases_leave_the_nested_step_count_alone(loaded):
    """job 42: step 0 (lowered checkpoint with a lowered flush inside) runs
    inside batch: one step inside another, counted as the number 1 (the
    phase loop once reused the counter's name and left a boolean)."""
    t = jrun(loaded, "job", 42, "--first-seen", recgen.T0)["totals"]
    assert type(t["steps_inside_others"]) is int and t["steps_inside_others"] == 1


# --------------------------------------------------------------------------
# savings count every joule once (issue 9 defect 2's rule, nesting.py)


def test_job_saving_is_each_phase_own_part(fitted, tmp_path):
    """A lowered write phase (1.6 GHz) with a phase inside it that ran at
    the original clock (a flush under ckpt-dvfs): the saving is that of the
    write's own part; the flush ran at 2.0 GHz and saved nothing.  Applying
    the ratio to the whole enclosing measurement overstated it."""
    f, tb_own, tb_flush = 1.6, 10.0, 4.0
    t_own, t_flush = runtime(f, tb_own), runtime(FMAX, tb_flush)
    e_own = (cpu_w(f) * t_own, DRAM_W * t_own)
    e_flush = (cpu_w(FMAX) * t_flush, DRAM_W * t_flush)
    truth = ((cpu_w(FMAX) + DRAM_W) * runtime(FMAX, tb_own)
             - (cpu_w(f) + DRAM_W) * t_own)
    ph = [recgen.phase(0, "write", 60_001, t_own + t_flush, e_own[0] + e_flush[0],
                       e_own[1] + e_flush[1], freq_khz=int(f * 1e6)),
          recgen.phase(1, "flush", 60_001 + t_own, t_flush, *e_flush, depth=1,
                       parent=0, freq_khz=int(FMAX * 1e6))]
    rec = recgen.record(9110, "0", "node01", start_s=60_000, submit_s=60_000,
                        dur_s=t_own + t_flush + 2, cpu_j=e_own[0] + e_flush[0] + 10,
                        dram_j=e_own[1] + e_flush[1] + 1, base_khz=int(FMAX * 1e6),
                        policy="ckpt-dvfs", phases=ph)
    recgen.write(tmp_path / "job", rec)
    fitted("ingest", tmp_path / "job")
    s = jrun(fitted, "job", 9110)
    st = s["steps"][0]
    w, fl = st["phases"]
    assert w["counted_energy_total_j"] == pytest.approx(sum(e_own), rel=1e-6)
    assert w["saving_j"] == pytest.approx(truth, rel=0.005)
    assert fl["saving_status"] == "base clock"
    assert st["saving_j"] == pytest.approx(truth, rel=0.005)
    assert s["totals"]["saving_j"] == pytest.approx(truth, rel=0.005)


def test_nested_fixed_steps_save_once(step_model, tmp_path):
    """A batch step and an srun step inside it, both under fixed:0.8 at
    1.6 GHz: the batch step's measurement includes the srun step's, so the
    job saved what the whole batch window would have used at 2.0 GHz, not
    that plus the srun step's saving again."""
    f, tb_batch, tb_srun = 1.6, 30.0, 10.0
    t_b, t_s = runtime(f, tb_batch), runtime(f, tb_srun)
    p = cpu_w(f) + DRAM_W
    k = (cpu_w(FMAX) + DRAM_W) / p * runtime(FMAX) / runtime(f)
    truth = p * t_b * (k - 1)                   # the batch window, once
    recs = []
    for sid, start, t in (("batch", 70_000, t_b), ("0", 70_002, t_s)):
        rec = recgen.record(9120, sid, "node01", start_s=start, submit_s=70_000,
                            dur_s=t, cpu_j=cpu_w(f) * t, dram_j=DRAM_W * t,
                            base_khz=int(FMAX * 1e6), policy="fixed:0.8")
        recs.append(clocks(rec, fixed_khz=int(f * 1e6)))
    for r in recs:
        recgen.write(tmp_path / "job", r)
    step_model("ingest", tmp_path / "job")
    s = jrun(step_model, "job", 9120)
    assert s["totals"]["saving_status"] == "estimated"
    assert s["totals"]["saving_j"] == pytest.approx(truth, rel=0.005)
