"""`joulestep policy update|show`: the auto policy's learner, on stores whose
optimum is known (docs/design.md, "The auto policy").

Each store holds runs of one app whose phases ran at known ratios with known
energies and durations; the truths (which ratio is cheapest within the bound,
whether a slowdown is resolved) are computed here from those numbers, never
read back from the program."""
from __future__ import annotations

import json
import math
import os
import statistics

import pytest
import recgen
from scipy import stats

FMAX = 2_400_000
BOUND = 0.05


def _run(spool, job, app, kind, ratio, t_s, e_j, *, start_s, nbytes=None, account="physics",
         extra=(), wrap_uncertain=False, cpu_null=False, baseline=None):
    """One run (job) of `app`: one phase of `kind` at `ratio` taking t_s and e_j."""
    t0 = recgen.T0 + int(start_s * recgen.S)        # the step's start
    ph = [recgen.phase(0, kind, 1, t_s, e_j * 0.8, e_j * 0.2,
                       freq_khz=int(round(ratio * FMAX)), nbytes=nbytes, t0=t0)]
    for i, (k2, r2, t2, e2) in enumerate(extra, 1):
        ph.append(recgen.phase(i, k2, 2 + t_s, t2, e2 * 0.8, e2 * 0.2,
                               freq_khz=int(round(r2 * FMAX)), t0=t0))
    if cpu_null:
        ph[0]["energy_cpu_uj"] = None
    rec = recgen.record(job, "batch", "node01", start_s=start_s, submit_s=start_s,
                        dur_s=t_s + 30, cpu_j=500, dram_j=50, policy="auto",
                        tags={"app": app}, phases=ph, account=account,
                        wrap_uncertain=wrap_uncertain)
    rec["step"]["fmax_khz"] = FMAX
    if baseline is not None:
        rec["step"]["policy_baseline"] = baseline
    recgen.write(spool, rec)


def _store(run, tmp_path, samples, app="lammps", kind="write", job0=1000, t0=0):
    """samples: [(ratio, t_s, e_j)] in run order; ingested into run's database."""
    spool = tmp_path / f"spool{job0}"
    for i, (r, t, e) in enumerate(samples):
        _run(spool, job0 + i, app, kind, r, t, e, start_s=t0 + 100 * i)
    run("ingest", spool)


def _update(run, path, *args, ok=True):
    res = run("policy", "update", "--save", path, *map(str, args), ok=ok)
    return res, (json.loads(path.read_text()) if res.exit_code == 0 else None)


def _slowdown_ci(t_r, t_1):
    """(slowdown, one-sided 95 % upper and lower limits) as docs/design.md states
    the rule: the ratio of means, its delta-method standard error, Student's t
    with min(n) - 1 degrees of freedom."""
    m_r, m_1 = statistics.mean(t_r), statistics.mean(t_1)
    s = m_r / m_1 - 1
    se = (m_r / m_1) * math.sqrt(statistics.variance(t_r) / (len(t_r) * m_r ** 2)
                                 + statistics.variance(t_1) / (len(t_1) * m_1 ** 2))
    q = stats.t.ppf(0.95, min(len(t_r), len(t_1)) - 1)
    return s, s + q * se, s - q * se


# ---------------------------------------------------------------- the bound
BOUND_STORE = {  # ratio: [(t_s, e_j)] ; 0.7 is the cheapest and ~15 % slower
    1.0: [(10.0, 100.0), (10.1, 101.0), (9.9, 99.0)],
    0.85: [(10.2, 92.0), (10.3, 93.0), (10.1, 91.0)],
    0.7: [(11.5, 85.0), (11.6, 86.0), (11.4, 84.0)],
}


def _interleaved(store):
    rs = list(store)
    return [(r, *store[r][i]) for i in range(3) for r in rs]


def _truth_choice(store, bound):
    """The cheapest ratio whose slowdown's upper limit is within the bound."""
    t1 = [t for t, _ in store[1.0]]
    ok = [r for r in store if r == 1.0 or _slowdown_ci([t for t, _ in store[r]], t1)[1] <= bound]
    return min(ok, key=lambda r: statistics.mean(e for _, e in store[r]))


def test_bound_rejects_a_cheaper_but_slower_ratio(run, tmp_path):
    _store(run, tmp_path, _interleaved(BOUND_STORE))
    f = tmp_path / "auto.json"
    res, doc = _update(run, f, "--ratios", "1,0.85,0.7", "--bound-pct", 5)
    want = _truth_choice(BOUND_STORE, BOUND)
    assert want == 0.85  # the store is built so; 0.7 is cheaper
    assert min(BOUND_STORE, key=lambda r: statistics.mean(e for _, e in BOUND_STORE[r])) == 0.7
    k = doc["apps"]["lammps"]["phases"]["write"]
    assert k == {**k, "ratio": want, "state": "settled"}
    assert doc["format"] == "joulestep-auto" and doc["version"] == 1
    assert doc["bound_pct"] == 5 and doc["baseline_every"] == 10
    assert "lammps write" in res.output and "settled 0.85" in res.output
    # the same store under a looser bound takes 0.7
    _, doc = _update(run, f, "--ratios", "1,0.85,0.7", "--bound-pct", 20)
    assert _truth_choice(BOUND_STORE, 0.20) == 0.7
    assert doc["apps"]["lammps"]["phases"]["write"]["ratio"] == 0.7


def test_show_reports_per_ratio_figures_and_saving(run, tmp_path):
    _store(run, tmp_path, _interleaved(BOUND_STORE))
    f = tmp_path / "auto.json"
    _update(run, f, "--ratios", "1,0.85,0.7")
    doc = json.loads(run("policy", "show", "--file", f, "--ratios", "1,0.85,0.7",
                         "--format", "json").stdout)
    (k,) = [k for k in doc["kinds"] if k["app"] == "lammps" and k["kind"] == "write"]
    assert k["state"] == "settled" and k["ratio"] == 0.85 and k["unit"] == "phase"
    by = {r["ratio"]: r for r in k["ratios"]}
    t1 = [t for t, _ in BOUND_STORE[1.0]]
    for r, rows in BOUND_STORE.items():
        assert by[r]["samples"] == 3
        assert by[r]["energy_j"] == pytest.approx(statistics.mean(e for _, e in rows), rel=1e-6)
        assert by[r]["time_s"] == pytest.approx(statistics.mean(t for t, _ in rows), rel=1e-6)
        if r != 1.0:
            s, hi, lo = _slowdown_ci([t for t, _ in rows], t1)
            assert by[r]["slowdown_pct"] == pytest.approx(100 * s, abs=1e-6)
            assert by[r]["slowdown_hi_pct"] == pytest.approx(100 * hi, abs=1e-6)
    e1 = statistics.mean(e for _, e in BOUND_STORE[1.0])
    e85 = statistics.mean(e for _, e in BOUND_STORE[0.85])
    assert k["saving_pct"] == pytest.approx(100 * (1 - e85 / e1), abs=1e-6)
    # exploring energy: every run not at the chosen ratio, over what the chosen
    # ratio would have used
    extra = sum(e - e85 for r in (1.0, 0.7) for _, e in BOUND_STORE[r])
    assert k["exploring_j"] == pytest.approx(extra, rel=1e-6)
    out = run("policy", "show", "--file", f, "--ratios", "1,0.85,0.7").stdout
    assert "lammps" in out and "settled" in out and "0.85" in out


# ---------------------------------------------------------------- noise
def test_noise_keeps_a_kind_exploring(run, tmp_path):
    noisy = {1.0: [(10.0, 100.0), (10.6, 103.0), (9.4, 97.0)],
             0.85: [(9.0, 88.0), (11.6, 95.0), (10.2, 91.0)]}
    t1 = [t for t, _ in noisy[1.0]]
    s, hi, lo = _slowdown_ci([t for t, _ in noisy[0.85]], t1)
    assert lo < BOUND < hi and s < BOUND  # unresolved: neither within nor beyond
    _store(run, tmp_path, _interleaved(noisy))
    f = tmp_path / "auto.json"
    res, doc = _update(run, f, "--ratios", "1,0.85")
    k = doc["apps"]["lammps"]["phases"]["write"]
    assert k["state"] == "exploring"
    # the next run goes to the side whose next run shrinks the slowdown's
    # standard error most: here the noisier 0.85
    def gain(ts):
        return statistics.variance(ts) / statistics.mean(ts) ** 2 / (len(ts) * (len(ts) + 1))
    assert gain([t for t, _ in noisy[0.85]]) > gain(t1)
    assert k["ratio"] == 0.85
    show = json.loads(run("policy", "show", "--file", f, "--ratios", "1,0.85",
                          "--format", "json").stdout)["kinds"][0]
    assert "0.85" in show["reason"] and "bound" in show["reason"]


def test_widely_varying_durations_keep_a_kind_exploring(run, tmp_path):
    rows = [(1.0, 2.0, 20.0), (1.0, 10.0, 100.0), (1.0, 20.0, 200.0),
            (0.85, 2.0, 18.0), (0.85, 10.0, 90.0), (0.85, 20.0, 180.0)]
    ts = [t for r, t, _ in rows if r == 1.0]
    assert statistics.stdev(ts) / statistics.mean(ts) > 0.5
    _store(run, tmp_path, rows)
    f = tmp_path / "auto.json"
    _update(run, f, "--ratios", "1,0.85")
    assert json.loads(f.read_text())["apps"]["lammps"]["phases"]["write"]["state"] == "exploring"
    show = json.loads(run("policy", "show", "--file", f, "--ratios", "1,0.85",
                          "--format", "json").stdout)["kinds"][0]
    assert "vary" in show["reason"] and "50 %" in show["reason"]


def test_per_byte_figures_where_phases_report_bytes(run, tmp_path):
    """Phases of different sizes: per byte, the cheapest within the bound wins."""
    spool = tmp_path / "spool"
    job = 2000
    for i in range(3):
        for r, per_gib_t, per_gib_e in ((1.0, 1.0, 10.0), (0.7, 1.01, 8.0)):
            gib = 1 + i  # 1, 2, 3 GiB: per-phase figures vary, per-byte ones do not
            _run(spool, job, "vpic", "write", r, per_gib_t * gib, per_gib_e * gib,
                 start_s=100 * job, nbytes=gib * recgen.GIB)
            job += 1
    run("ingest", spool)
    f = tmp_path / "auto.json"
    _, doc = _update(run, f, "--ratios", "1,0.7")
    k = doc["apps"]["vpic"]["phases"]["write"]
    assert (k["ratio"], k["state"]) == (0.7, "settled")
    show = json.loads(run("policy", "show", "--file", f, "--ratios", "1,0.7", "--app", "vpic",
                          "--format", "json").stdout)["kinds"][0]
    assert show["unit"] == "GiB"
    assert show["saving_pct"] == pytest.approx(20.0, abs=1e-6)


# ---------------------------------------------------------------- exploring
def test_exploring_starts_at_fmax_and_tries_the_least_sampled(run, tmp_path):
    f = tmp_path / "auto.json"
    (tmp_path / "empty").mkdir()
    run("ingest", tmp_path / "empty")  # a store without runs yet
    seen = []
    job = 3000
    for step in range(6):
        _, doc = _update(run, f, "--ratios", "1,0.85,0.7", "--apps", "lammps")
        k = doc["apps"].get("lammps", {}).get("phases", {}).get("write")
        r = 1.0 if k is None else k["ratio"]
        assert k is None or k["state"] == "exploring"
        seen.append(r)
        spool = tmp_path / f"s{step}"
        _run(spool, job, "lammps", "write", r, 10 / r ** 0.2, 100 * r, start_s=100 * job)
        job += 1
        run("ingest", spool)
    assert seen == [1.0, 0.85, 0.7, 1.0, 0.85, 0.7]


def test_a_ratio_shown_too_slow_is_not_tried_again_nor_any_lower(run, tmp_path):
    rows = [(1.0, 10.0, 100.0), (0.85, 11.8, 97.0), (0.7, 14.3, 95.0),
            (1.0, 10.05, 100.0), (0.85, 11.75, 97.0)]
    _store(run, tmp_path, rows)
    f = tmp_path / "auto.json"
    _, doc = _update(run, f, "--ratios", "1,0.85,0.7")
    k = doc["apps"]["lammps"]["phases"]["write"]
    # 0.85 is shown beyond the bound with 2 runs each; 0.7 is never tried again
    _, _, lo = _slowdown_ci([11.8, 11.75], [10.0, 10.05])
    assert lo > BOUND
    assert (k["ratio"], k["state"]) == (1.0, "exploring")  # fmax still needs a 3rd run
    _store(run, tmp_path, [(1.0, 10.0, 100.0)], job0=1100, t0=1000)
    _, doc = _update(run, f, "--ratios", "1,0.85,0.7")
    k = doc["apps"]["lammps"]["phases"]["write"]
    assert (k["ratio"], k["state"]) == (1.0, "settled")


# ---------------------------------------------------------------- the guard
def test_guard_takes_a_settled_kind_back_to_fmax(run, tmp_path):
    good = {1.0: [(10.0, 100.0), (10.1, 101.0), (9.9, 99.0)],
            0.7: [(10.2, 80.0), (10.3, 81.0), (10.1, 79.0)]}
    _store(run, tmp_path, _interleaved(good))
    f = tmp_path / "auto.json"
    _, doc = _update(run, f, "--ratios", "1,0.7")
    assert doc["apps"]["lammps"]["phases"]["write"] == {
        **doc["apps"]["lammps"]["phases"]["write"], "ratio": 0.7, "state": "settled"}
    # the app changes: its write phases become CPU-bound, 30 % slower at 0.7
    slow = [(0.7, 13.0, 95.0), (0.7, 13.1, 96.0), (0.7, 12.9, 94.0)]
    s, hi, lo = _slowdown_ci([t for _, t, _ in slow], [t for t, _ in good[1.0]])
    assert lo > BOUND
    _store(run, tmp_path, slow, job0=1100, t0=10_000)
    res, doc = _update(run, f, "--ratios", "1,0.7")
    k = doc["apps"]["lammps"]["phases"]["write"]
    assert (k["ratio"], k["state"]) == (1.0, "guarded")
    assert "guarded" in res.output
    # from now on only runs after the guard count: the kind is explored again from fmax
    _, doc = _update(run, f, "--ratios", "1,0.7")
    k = doc["apps"]["lammps"]["phases"]["write"]
    assert (k["ratio"], k["state"]) == (1.0, "guarded")


def test_a_settled_kind_whose_runs_stay_within_the_bound_stays_settled(run, tmp_path):
    good = {1.0: [(10.0, 100.0), (10.1, 101.0), (9.9, 99.0)],
            0.7: [(10.2, 80.0), (10.3, 81.0), (10.1, 79.0)]}
    _store(run, tmp_path, _interleaved(good))
    f = tmp_path / "auto.json"
    _update(run, f, "--ratios", "1,0.7")
    _store(run, tmp_path, [(0.7, 10.2, 80.0)] * 3, job0=1100, t0=10_000)
    _, doc = _update(run, f, "--ratios", "1,0.7")
    k = doc["apps"]["lammps"]["phases"]["write"]
    assert (k["ratio"], k["state"]) == (0.7, "settled")


# ---------------------------------------------------------------- bad input, safety
def test_uncertain_phases_are_left_out_and_said(run, tmp_path):
    spool = tmp_path / "spool"
    _run(spool, 5000, "lammps", "write", 0.7, 10.0, 1.0, start_s=1, wrap_uncertain=True)
    _run(spool, 5001, "lammps", "write", 0.7, 10.0, 1.0, start_s=2, cpu_null=True)
    run("ingest", spool)
    f = tmp_path / "auto.json"
    _update(run, f, "--ratios", "1,0.7")
    show = json.loads(run("policy", "show", "--file", f, "--ratios", "1,0.7",
                          "--format", "json").stdout)
    assert show["excluded"] == {"energy uncertain (reset or wrap)": 2}
    assert json.loads(f.read_text())["apps"]["lammps"]["phases"]["write"]["ratio"] == 1.0


def test_only_ratios_given_and_never_below_min_ratio(run, tmp_path):
    cheap_low = {1.0: [(10.0, 100.0)] * 3, 0.55: [(10.0, 50.0)] * 3, 0.4: [(10.0, 40.0)] * 3}
    _store(run, tmp_path, _interleaved(cheap_low))
    f = tmp_path / "auto.json"
    res, doc = _update(run, f, "--ratios", "1,0.55,0.4", "--min-ratio", 0.5)
    assert doc["apps"]["lammps"]["phases"]["write"]["ratio"] == 0.55
    assert "0.4" in res.output and "min_ratio" in res.output
    _update(run, f, "--ratios", "1,0.7,x", ok=False)
    _update(run, f, "--ratios", "1,1.2", ok=False)
    _update(run, f, "--ratios", "0.85,0.7", ok=False)  # needs 1 (the baseline)


def test_accounts_restrict_which_runs_count(run, tmp_path):
    spool = tmp_path / "spool"
    job = 6000
    for i in range(3):  # physics: 0.7 is within the bound; a stranger's runs say otherwise
        for r, t, e, acct in ((1.0, 10.0, 100.0, "physics"), (0.7, 10.1, 80.0, "physics"),
                              (0.7, 20.0, 200.0, "mallory")):
            _run(spool, job, "lammps", "write", r, t + 0.01 * i, e, start_s=100 * job,
                 account=acct)
            job += 1
    run("ingest", spool)
    f = tmp_path / "auto.json"
    _, doc = _update(run, f, "--ratios", "1,0.7", "--accounts", "physics")
    assert doc["apps"]["lammps"]["phases"]["write"]["ratio"] == 0.7
    # every account: the stranger's slow runs leave 0.7's slowdown unresolved
    # (half its runs twice as long), so it is not chosen
    _, doc = _update(run, f, "--ratios", "1,0.7")
    k = doc["apps"]["lammps"]["phases"]["write"]
    mixed = [10.1 + 0.01 * i for i in range(3)] + [20.0 + 0.01 * i for i in range(3)]
    _, hi, lo = _slowdown_ci(mixed, [10.0, 10.01, 10.02])
    assert lo < BOUND < hi
    assert k["state"] == "exploring"


def test_the_file_is_written_atomically_root_readable_and_tells_no_figures(run, tmp_path):
    _store(run, tmp_path, _interleaved(BOUND_STORE))
    f = tmp_path / "auto.json"
    _update(run, f, "--ratios", "1,0.85,0.7", "--default", "write=0.85,flush=0.9")
    st = os.stat(f)
    assert st.st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".auto.json")] == []
    doc = json.loads(f.read_text())
    assert doc["default"] == {"write": 0.85, "flush": 0.9}
    # per kind: what the plugin needs, and when (update times), nothing measured
    allowed = {"ratio", "state", "since_ns"}
    for app in doc["apps"].values():
        for k in app["phases"].values():
            assert set(k) <= allowed, k
    # unchanged store: unchanged file, and said
    res, doc2 = _update(run, f, "--ratios", "1,0.85,0.7")
    assert doc2["apps"] == doc["apps"] and "no change" in res.output


def test_a_bad_previous_file_is_a_clear_error(run, tmp_path):
    f = tmp_path / "auto.json"
    f.write_text("{not json")
    res, _ = _update(run, f, ok=False)
    assert "auto.json" in res.output and "joulestep-auto" in res.output
    assert f.read_text() == "{not json"  # left as it was


def test_baseline_runs_are_the_guards_price_apart_from_exploring(run, tmp_path):
    """Runs the plugin marked as baseline (settled kinds at fmax) are counted
    apart: their energy over the settled ratio's is the guard's price."""
    good = {1.0: [(10.0, 100.0), (10.1, 101.0), (9.9, 99.0)],
            0.7: [(10.2, 80.0), (10.3, 81.0), (10.1, 79.0)]}
    _store(run, tmp_path, _interleaved(good))
    spool = tmp_path / "base"
    for i, e in enumerate((102.0, 98.0)):
        _run(spool, 1200 + i, "lammps", "write", 1.0, 10.0, e, start_s=20_000 + 100 * i,
             baseline=True)
    run("ingest", spool)
    f = tmp_path / "auto.json"
    _update(run, f, "--ratios", "1,0.7")
    k = json.loads(run("policy", "show", "--file", f, "--ratios", "1,0.7",
                       "--format", "json").stdout)["kinds"][0]
    assert (k["state"], k["ratio"]) == ("settled", 0.7)
    e7 = statistics.mean(e for _, e in good[0.7])
    assert k["baseline_j"] == pytest.approx((102.0 - e7) + (98.0 - e7), rel=1e-9)
    assert k["exploring_j"] == pytest.approx(sum(e - e7 for _, e in good[1.0]), rel=1e-9)
