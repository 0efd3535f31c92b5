"""Shared nodes in `joulestep job` and `report` (issue 24 part 1): records
with the attribution's inputs (step.cpu_time_ns, packages[]) ingested into
a store; the estimated figures are checked against the rule worked out by
hand, and labelled; the measured ones stay beside them.

One package of 4 CPUs whose power is 12 W + 14 W per busy CPU. Two jobs
alone on the node first (0.4 and 3.6 busy CPUs: the fit's points), then
three jobs at once for 10 s on 2, 1 and 1 CPUs with 20, 10 and 2 CPU-seconds,
the package busy 34 CPU-seconds (2 of the system's)."""
import recgen
from recgen import J, S

from conftest import jrun

P0, PB = 12, 14


def rec(job_id, start_s, step_cpus, cpu_s, busy_s, dur_s=10):
    e = P0 * dur_s + PB * busy_s
    r = recgen.record(job_id=job_id, node="n1", start_s=start_s, dur_s=dur_s, cpu_j=e,
                      dram_j=10, exclusive=False, ncpus=step_cpus, first_seen_s=start_s - 1)
    r["zones"] = [{"name": "package-0", "id": "intel-rapl:0", "kind": "package",
                   "energy_uj": e * J, "wraps": 0},
                  {"name": "dram", "id": "intel-rapl:0:0", "kind": "dram",
                   "energy_uj": 10 * J, "wraps": 0}]
    r["step"]["cpu_time_ns"] = int(cpu_s * S)
    r["packages"] = [{"package": 0, "cpus": 4, "step_cpus": step_cpus,
                      "busy_ns": int(busy_s * S), "total_ns": 4 * dur_s * S}]
    return r


def load(run, tmp_path):
    spool = tmp_path / "spool"
    for r in (rec(10, 100, 4, 4, 4), rec(11, 200, 4, 36, 36),
              rec(1, 300, 2, 20, 34), rec(2, 300, 1, 10, 34), rec(3, 300, 1, 2, 34)):
        recgen.write(spool, r)
    run("ingest", spool)


def test_job_shows_the_estimate_labelled(run, tmp_path):
    load(run, tmp_path)
    e = P0 * 10 + PB * 34
    got = {}
    for job, n, c in ((1, 2, 20), (2, 1, 10), (3, 1, 2)):
        d = jrun(run, "job", job)
        t, st = d["totals"], d["steps"][0]
        want = P0 * 10 * n / 4 + (e - P0 * 10) * c / 34
        assert abs(t["energy_cpu_j"] - want) < 1e-4, (job, t["energy_cpu_j"], want)
        assert t["energy_basis"] == "estimated"
        assert t["measured_energy_cpu_j"] == e and st["energy_cpu_j"] == e
        assert st["sharing"] == "shared" and st["energy_basis"] == "estimated"
        assert abs(st["estimated_energy_dram_j"] - 10 * want / e) < 1e-4
        assert any("estimated" in c for c in d["caveats"])
        assert not any("energy includes theirs" in c for c in d["caveats"])
        got[job] = t["energy_cpu_j"]
        text = run("job", job).stdout
        assert "Energy (estimated: shared node)" in text
        assert f"Measured {e + 10:g} J (CPU {e:g} J)" in text, text
    assert sum(got.values()) <= e  # never more than the package measured
    alone = jrun(run, "job", 11)
    assert alone["totals"]["energy_basis"] == "measured"
    assert alone["steps"][0]["sharing"] == "exclusive"
    assert alone["totals"]["energy_cpu_j"] == P0 * 10 + PB * 36
    assert "measured_energy_cpu_j" not in alone["totals"]


def test_report_counts_shares_not_whole_packages(run, tmp_path):
    """The three jobs' package is counted once: its measured energy (their
    shares and the rest unattributed), never three times."""
    load(run, tmp_path)
    d = jrun(run, "report", "--since", "2025-01-01", "--by", "user")
    t = d["totals"]
    e = P0 * 10 + PB * 34
    alone = (P0 * 10 + PB * 4) + (P0 * 10 + PB * 36)
    shares = [P0 * 10 * n / 4 + (e - P0 * 10) * c / 34 for n, c in ((2, 20), (1, 10), (1, 2))]
    assert t["energy_basis"] == "estimated" and t["estimated_steps"] == 3
    assert abs(t["energy_cpu_j"] - (alone + sum(shares))) < 1e-3
    assert t["energy_cpu_j"] <= alone + e
    dram = 10 + 10 + sum(10 * x / e for x in shares)
    assert abs(t["energy_total_j"] - (alone + sum(shares) + dram)) < 1e-3
    assert "Total (estimated: shared nodes)" in run("report", "--since", "2025-01-01").stdout


def test_exporter_counts_shares_and_rereads_a_late_neighbour(run, tmp_path):
    """The exporter sums what `report` sums; a record of a job that ran
    beside one already exported turns the latter's figure into its share."""
    from joulestep import config, exporter as ex, store
    spool = tmp_path / "spool"
    recgen.write(spool, rec(1, 300, 2, 20, 34))
    run("ingest", spool)
    view = ex.StoreView(lambda: store.connect(run.db, write=False), config.load())
    e = P0 * 10 + PB * 34
    v = view.refresh().totals[("demo", "alice", "physics", "debug", "io-dvfs")]
    assert v[ex.TOTAL] == (e + 10) * J and v[ex.ESTIMATED] == 0  # alone: measured
    for r in (rec(2, 300, 1, 10, 34), rec(3, 300, 1, 2, 34)):
        recgen.write(spool, r)
    run("ingest", spool)
    v = view.refresh().totals[("demo", "alice", "physics", "debug", "io-dvfs")]
    assert view.full_reads == 1  # incremental
    rep = jrun(run, "report", "--since", "2025-01-01")["totals"]
    assert v[ex.ESTIMATED] == 3
    assert abs(v[ex.TOTAL] / 1e6 - rep["energy_total_j"]) < 1e-3
    assert v[ex.TOTAL] < e * J


def test_compare_io_shows_cpu_usage_per_approach(run, tmp_path):
    """Yildiz et al. Table 1's CPU usage from the records' CPU time: per run
    CPU time / (duration x the step's CPUs), the mean over runs."""
    spool = tmp_path / "spool"
    usage = {"tp": (0.5, 0.7), "dc": (0.9, 0.95)}
    for i, (appr, us) in enumerate(sorted(usage.items())):
        for k, u in enumerate(us):
            r = recgen.record(job_id=100 + 10 * i + k, node="n2", start_s=1000 * (i + 1) + 100 * k,
                              dur_s=10, ncpus=4, tags={"approach": appr}, first_seen_s=0)
            r["step"]["cpu_time_ns"] = int(u * 10 * 4 * S)
            recgen.write(spool, r)
    run("ingest", spool)
    rows = {x["tag:approach"]: x for x in jrun(run, "compare", "--what", "io", "--by",
                                               "tag:approach")["table"]}
    for appr, us in usage.items():
        assert abs(rows[appr]["cpu_usage"] - sum(us) / 2) < 1e-9
    assert "cpu_usage" in run("compare", "--what", "io", "--by", "tag:approach").stdout


def rec_two_pkgs(job_id, node, pkgs, step_cpu):
    """A step of 10 s on a node of two packages (2 CPUs each; package 0
    measured 100 J, package 1 60 J over the interval), 10 CPU-seconds in all:
    pkgs {package: step_cpus}; step_cpu: {package: CPU-seconds there}, as the
    step's cgroup counted them per CPU (None: not per CPU, an older record)."""
    r = recgen.record(job_id=job_id, node=node, start_s=1000, dur_s=10, cpu_j=160,
                      dram_j=0, exclusive=False, ncpus=sum(pkgs.values()), first_seen_s=999)
    r["zones"] = [{"name": "package-0", "id": "intel-rapl:0", "kind": "package",
                   "energy_uj": 100 * J, "wraps": 0},
                  {"name": "package-1", "id": "intel-rapl:1", "kind": "package",
                   "energy_uj": 60 * J, "wraps": 0}]
    r["step"]["cpu_time_ns"] = 10 * S
    r["step"]["energy_dram_uj"] = None
    r["step"]["dram_not_measured"] = "no dram zone"
    r["packages"] = [{"package": p, "cpus": 2, "step_cpus": n, "busy_ns": 10 * S,
                      "total_ns": 20 * S} for p, n in pkgs.items()]
    if step_cpu is not None:
        r["step"]["cpu_time_source"] = "cgroup-percpu"
        for p in r["packages"]:
            p["step_cpu_ns"] = int(step_cpu[p["package"]] * S)
    return r


def test_per_cpu_cgroup_time_splits_a_step_over_two_packages(run, tmp_path):
    """Job 1 has a CPU on each package but ran only on package 0 (its
    cgroup's per-CPU time says so); job 2 ran on package 1. Worked by hand
    (no idle power fitted: the two points do not spread; each package busy
    10 CPU-s): job 1 gets package 0's 100 J, job 2 package 1's 60 J. Split by
    CPUs instead (an older record), job 1 would get half of each package
    (50 + 30), and package 1's shares (30 + 60) be scaled to its 60 J."""
    def energies(with_cgroup, jobs, node):
        spool = tmp_path / node
        recgen.write(spool, rec_two_pkgs(jobs[0], node, {0: 1, 1: 1},
                                         {0: 10, 1: 0} if with_cgroup else None))
        recgen.write(spool, rec_two_pkgs(jobs[1], node, {1: 1}, {1: 10} if with_cgroup else None))
        run("ingest", spool)
        return [jrun(run, "job", j)["totals"]["energy_cpu_j"] for j in jobs]
    e1, e2 = energies(True, (21, 22), "n2")
    assert abs(e1 - 100) < 1e-3 and abs(e2 - 60) < 1e-3, (e1, e2)
    o1, o2 = energies(False, (23, 24), "n3")
    assert abs(o1 - (50 + 20)) < 1e-3 and abs(o2 - 40) < 1e-3, (o1, o2)


def test_caveat_without_inputs_comes_from_time_overlap(run, tmp_path):
    """Records without the attribution's inputs (older plugins): the store
    flags a shared node when another job's step on it overlaps in time,
    whatever step.exclusive said (dropped in record version 4)."""
    spool = tmp_path / "spool"
    # jobs 20 and 21 overlap on n1 (100-110 s and 105-115 s); job 22 is
    # alone on n1 later though it claimed a shared node; 23 on n2 at once
    for job_id, node, start, excl in ((20, "n1", 100, True), (21, "n1", 105, True),
                                      (22, "n1", 200, False), (23, "n2", 100, False)):
        recgen.write(spool, recgen.record(job_id=job_id, node=node, start_s=start,
                                          dur_s=10, exclusive=excl,
                                          first_seen_s=start - 1))
    run("ingest", spool)
    for job_id, shared in ((20, True), (21, True), (22, False), (23, False)):
        caveats = jrun(run, "job", job_id)["caveats"]
        assert any("node shared with other jobs" in c for c in caveats) == shared, \
            (job_id, caveats)


def test_a_whole_package_alone_in_the_store_is_never_called_measured(run, tmp_path):
    """Job 1 had 2 of the package's 4 CPUs; its neighbours are not in the
    store (not ingested yet, or another user's under row-level security):
    its figure is the whole package's, and says so on the line."""
    spool = tmp_path / "spool"
    recgen.write(spool, rec(1, 300, 2, 20, 34))
    run("ingest", spool)
    e = P0 * 10 + PB * 34
    d = jrun(run, "job", 1)
    t, st = d["totals"], d["steps"][0]
    assert t["energy_cpu_j"] == e                     # the package's figure
    assert t["energy_basis"] == "whole package" != "measured"
    assert st["energy_basis"] == "whole package" and st["sharing"] == "partial"
    assert any("2 of 4 CPUs" in c and "whole package" in c for c in d["caveats"])
    text = run("job", 1).stdout
    head = next(ln for ln in text.splitlines() if ln.startswith("Energy"))
    assert "whole package" in head, text
    step_line = next(ln for ln in text.splitlines() if "step 0 on n1" in ln
                     and "Shared node" in ln)
    assert "whole package" in step_line and "2 of 4 CPUs" in step_line
    assert "measured" not in head
    r = jrun(run, "report", "--by", "user", "--since", "2000-01-01")
    assert r["totals"]["energy_basis"] != "measured"
