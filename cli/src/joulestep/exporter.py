"""`joulestep exporter`: the store's totals as metrics for Prometheus.

Counters, totals over every step in the store (docs/admin-guide.md,
"Prometheus and Grafana"):

- joulestep_energy_joules_total: each step's counted energy (a step inside
  another counts once: nesting.py), as `joulestep report` sums it: CPU +
  DRAM (RAPL), plus the GPUs of the steps whose total includes them;
- joulestep_gpu_energy_joules_total: that GPU part; joulestep_gpu_steps_total
  counts the steps it holds, joulestep_gpu_steps_unmeasured_total the steps
  with GPUs not in it (never added as 0);
- joulestep_step_seconds_total: step time (node-seconds, counted the same way);
- joulestep_cost_total: the cost of that energy, each step's at the price
  its energy met (imported prices over time, gridfigures.step_prices; the
  site's price where none covers it), with the site's scope (`report`'s
  derive: CPU + DRAM, or a node estimate); a change of the imported prices
  makes the next refresh a full read;
- joulestep_steps_total: steps;
- joulestep_steps_unmeasured_total: steps without energy (no backend, an
  untrusted counter);
- joulestep_estimated_steps_total: steps that shared a CPU package with
  another job; their part of the energy is their attributed share
  (store/read_sharing.py), not the whole package's; a new step makes the jobs that ran
  beside it on its node be read again (those that started within
  --settle-hours of it; an older neighbour waits for the next full read);
  all nine labelled cluster, user, account, partition and policy (or the
  subset --labels names);
- joulestep_saving_joules_total{cluster, policy}: the estimated saving of the
  steps whose clock a policy lowered, against their original clock: the
  estimate `joulestep job` shows (report.step_savings, on the same rows);
  joulestep_saving_not_estimated_steps_total counts the steps it could not
  estimate (no power model);
- joulestep_records_quarantined (gauge): records in the quarantine directory;
- joulestep_records_lost_total: records the plugin could not write (lost.py).
- joulestep_ingest_conflicts_total: copies of stored steps that differed
  from them (quarantined at ingest; the first stored copy kept).

No label names a job: the series are bounded by the (cluster, user, account,
partition, policy) tuples that occur, the policy label being the policy's
family (`fixed`, not `fixed:0.6`; `phase`, not `phase:write=0.5`: a user may
write any ratio, and each would be a series of its own), and --labels drops labels a large site
does not want.  Top jobs come from the store itself (etc/grafana).

Reading the store costs time (step_savings for every step: about a minute
for a million steps), so the exporter keeps a view of the store in memory
and serves every scrape from it; a scrape never touches the database.  The
view is brought up to date every --refresh seconds, incrementally:

- a job's figures change only when ingest gives it a new step (its steps'
  counted figures, its attributes and job merges all happen then), so a
  refresh reads the steps added since the last one (step_pk above the last
  seen) and recomputes the jobs they belong to, whole;
- jobs whose last step ended more than --settle-hours before the newest step
  in the store are folded into fixed per-label totals and forgotten, so the
  memory held is that of the recent jobs only;
- anything else -- a step added to a folded job (a late record), steps or
  jobs deleted or merged, the power models changed, --reload-hours elapsed
  -- makes the next refresh read the whole store again (counted in
  joulestep_exporter_full_reads_total).

The queries are plain SQL with ? placeholders (store/engines.py).
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
import signal
import sys
import threading
import time

from . import gpus as gpumod
from . import report as rep
from . import store
from .store import lost, read_exporter, read_jobs, read_sharing

LABELS = ("cluster", "user", "account", "partition", "policy")
SAVING_LABELS = ("cluster", "policy")
NONE = "(none)"              # a NULL attribute, as `joulestep report` shows it
DEFAULT_PORT = 9817
DEFAULT_SETTLE_HOURS = 48.0  # twice the default job gap (store.JOB_GAP_HOURS)
DEFAULT_RELOAD_HOURS = 24.0
RANGE_STEPS = 20_000         # steps per query when reading the whole store
CHUNK_JOBS = 500             # job keys per IN (...) list

# the sums kept per label tuple
(STEPS, CPU, DRAM, DRAM_N, TOTAL, DUR, NODE, SAVING, NOT_EST, UNMEASURED, GPU,
 GPU_N, GPU_NOT, ESTIMATED, P_RAPL, P_GPU, P_NODE) = range(17)
#: P_*: the RAPL part, GPU part and node time of TOTAL and NODE, each step's
#: weighted by the price its energy met (gridfigures.step_prices: the
#: site's price_per_kwh where no imported value covers it)
WIDTH = 17


class ExporterError(Exception):
    """The exporter cannot start (message says why)."""


class _Reread(Exception):
    """The incremental refresh cannot account for a change: read it all."""


LOST = "joulestep_records_lost"


NO_POLICY = "none"


def policy_label(policy) -> str:
    """The policy's family: monitor, io-dvfs, ckpt-dvfs, tuned, fixed, phase
    (the part before a ':'); the ratios stay in the store.  No policy (NULL
    or empty) is "none", the value records write for it: one series, not
    two ("none" and "(none)")."""
    if not isinstance(policy, str) or not policy:
        return NO_POLICY
    return policy.split(":", 1)[0]


def records_lost(conn) -> int | None:
    """The store's count of records the plugin could not write (store/lost.py,
    lost_records): joulestep_records_lost_total."""
    return lost.count(conn)


def count_quarantined(qdir) -> int:
    """Records in a quarantine directory (store.quarantine writes one
    <name>.reason beside each record it moves there)."""
    n = 0
    if qdir is None:
        return 0
    for _, _, files in os.walk(qdir):
        n += sum(1 for f in files if f.endswith(".reason"))
    return n


def _add(into: dict, parts: dict) -> None:
    for key, vec in parts.items():
        acc = into.get(key)
        if acc is None:
            into[key] = list(vec)
        else:
            for i in range(WIDTH):
                acc[i] += vec[i]


def _contributions(conn, settings, models, where: str, args) -> dict:
    """{job_pk: [max end_ns, {label tuple: sums}]} of the steps `where`
    selects (a condition on steps s): what each adds, by the rules of
    `report` (counted_* figures) and `job` (step_savings)."""
    from .gridfigures import step_prices        # cost over time
    price = step_prices(conn, settings, where, args)
    static = settings.price_per_kwh
    phases = read_exporter.phase_rows(conn, where, args)
    out: dict = {}
    outer: dict = {}             # step_pk -> (its vec, CPU µJ, DRAM µJ)
    for r in read_exporter.contribution_rows(conn, where, args):
        n = len(r) - read_exporter.EXTRA_COLS
        job_pk = r[n]
        key = tuple(NONE if v is None else str(v) for v in (*r[n + 1:n + 5],
                                                            policy_label(r[8])))
        job = out.get(job_pk)
        if job is None:
            job = out[job_pk] = [r[11], {}]
        job[0] = max(job[0], r[11])
        vec = job[1].get(key)
        if vec is None:
            vec = job[1][key] = [0] * WIDTH
        ccpu, cdram, ctotal, cdur = r[21], r[22], r[23], r[28]
        vec[STEPS] += 1
        p = price.get(r[0], static)
        if r[20] is None and r[13] is not None:
            outer[r[0]] = (vec, r[13], r[14], job_pk, p)
        if r[13] is None:           # no CPU energy: the step was not measured
            vec[UNMEASURED] += 1
        vec[CPU] += ccpu or 0
        if cdram is not None:
            vec[DRAM] += cdram
            vec[DRAM_N] += 1
        vec[TOTAL] += ctotal or 0
        # the GPUs' part of the counted total (gpus.py); a step whose GPUs
        # were not measured is counted, never added as 0
        gpu = gpumod.counted_uj(r[n + 5], ccpu, cdram, ctotal)
        if gpu is not None:
            vec[GPU] += gpu
            vec[GPU_N] += 1
            vec[P_GPU] += p * gpu
        elif gpumod.unmeasured(*r[n + 5:n + 8]):
            vec[GPU_NOT] += 1
        vec[P_RAPL] += p * ((ctotal or 0) - (gpu or 0))
        vec[DUR] += cdur or 0
        if ctotal is not None:
            vec[NODE] += cdur or 0
            vec[P_NODE] += p * (cdur or 0)
        _, sav = rep.step_savings(r[:n], phases.get(r[0], ()), models, settings,
                                  detail=False)
        if sav["saving_status"] == "estimated":
            vec[SAVING] += sav["saving_j"]
        elif sav["saving_status"] == "not estimated":
            vec[NOT_EST] += 1
    _shared(conn, outer)
    return out


def _shared(conn, outer: dict) -> None:
    """Steps that shared a package with another job add their attributed
    share (read_sharing.estimates), as `report` sums them, not the packages'."""
    est = read_sharing.estimates(conn, sorted({v[3] for v in outer.values()}))
    for spk, e in est.items():
        if spk not in outer or e.cpu_uj is None:
            continue
        vec, cpu, dram, _, p = outer[spk]
        dc = e.cpu_uj - cpu
        dd = (e.dram_uj or 0) - dram if dram is not None else 0
        vec[CPU] += dc
        vec[DRAM] += dd
        vec[TOTAL] += dc + dd
        vec[P_RAPL] += p * (dc + dd)
        vec[ESTIMATED] += e.sharing == "shared"


@dataclasses.dataclass
class Snapshot:
    """What a scrape shows: per label tuple (LABELS order) the sums."""
    totals: dict
    quarantined: int
    lost: int | None
    steps: int
    read_s: float
    read_at: float
    conflicts: int | None = None


class StoreView:
    """The store's totals, kept up to date incrementally (module doc).

    connect(): a new read connection to the store.  refresh() reads
    what changed since the last call (or everything) and publishes a new
    Snapshot in .snapshot; it raises what the store raises."""

    def __init__(self, connect, settings, settle_hours=DEFAULT_SETTLE_HOURS,
                 reload_hours=DEFAULT_RELOAD_HOURS, quarantine_dir=None):
        self.connect, self.settings = connect, settings
        self.settle_ns = int(settle_hours * 3600e9)
        self.reload_s = reload_hours * 3600.0
        self.quarantine_dir = quarantine_dir
        self.snapshot: Snapshot | None = None
        self.full_reads = 0
        self.errors = 0
        self._loaded_at = None      # monotonic time of the last full read
        self._models = None

    # ------------------------------------------------------------ reading

    def refresh(self) -> Snapshot:
        t0 = time.monotonic()
        try:
            self._read()
        except BaseException:
            self._loaded_at = None      # state half-updated: read it all next
            raise
        totals = {k: list(v) for k, v in self.frozen.items()}
        for _, parts in self.recent.values():
            _add(totals, parts)
        self.snapshot = Snapshot(totals, count_quarantined(self.quarantine_dir),
                                 self._lost, self.nsteps, time.monotonic() - t0,
                                 time.time(), self._conflicts)
        return self.snapshot

    def _read(self) -> None:
        conn = self.connect()
        try:
            conn.execute("BEGIN")       # one consistent view of the store
            try:
                models = read_jobs.power_models(conn)
                fp = sorted((k, tuple(sorted(v.items()))) for k, v in models.items())
                # imported prices changed: every cost changes (a full read)
                fp.append(read_exporter.price_mark(conn))
                full = (self._loaded_at is None or fp != self._models or
                        time.monotonic() - self._loaded_at >= self.reload_s)
                if not full:
                    try:
                        self._incremental(conn, models)
                    except _Reread:
                        full = True
                if full:
                    self._read_all(conn, models)
                    self._models = fp
                self._lost = records_lost(conn)
                self._conflicts = store.conflict_count(conn)
            finally:
                conn.execute("COMMIT")
        finally:
            conn.close()

    def _marks(self, conn) -> tuple:
        """What the incremental refresh checks the store against: counts,
        and the newest step and job as they were (a key reused after a
        delete)."""
        return read_exporter.marks(conn)

    def _read_all(self, conn, models) -> None:
        self.nsteps, self.njobs, self.last_step, self.last_job = self._marks(conn)
        self.newest_end = read_exporter.newest_end(conn)
        recent_jobs = read_exporter.jobs_ended_since(conn, self.newest_end - self.settle_ns)
        self.frozen: dict = {}
        self.recent: dict = {}
        top = self.last_step[0] if self.last_step else 0
        for lo in range(0, top, RANGE_STEPS):
            got = _contributions(conn, self.settings, models,
                                 "s.step_pk > ? AND s.step_pk <= ?",
                                 (lo, lo + RANGE_STEPS))
            for job_pk, (end, parts) in got.items():
                if job_pk in recent_jobs:
                    job = self.recent.setdefault(job_pk, [end, {}])
                    job[0] = max(job[0], end)
                    _add(job[1], parts)
                else:
                    _add(self.frozen, parts)
        self.full_reads += 1
        self._loaded_at = time.monotonic()

    def _incremental(self, conn, models) -> None:
        old_top = self.last_step[0] if self.last_step else 0
        old_job = self.last_job[0] if self.last_job else 0
        if self.last_step and read_exporter.step_mark(conn, old_top) != \
                tuple(self.last_step):
            raise _Reread("the newest step changed")
        if self.last_job and read_exporter.job_mark(conn, old_job) != \
                tuple(self.last_job):
            raise _Reread("the newest job changed")
        new = read_exporter.new_steps_jobs(conn, old_top)
        new_jobs = read_exporter.new_jobs(conn, old_job)
        nsteps, njobs, last_step, last_job = self._marks(conn)
        if nsteps != self.nsteps + len(new) or njobs != self.njobs + new_jobs:
            raise _Reread("steps or jobs were deleted or merged")
        touched = set(new)
        # the jobs that ran beside a new step on its node: their shares change
        # (new steps with the inputs only; neighbours that started within the settle
        # window: an older one, still running, is brought up to date by the reload)
        touched |= read_exporter.neighbours_of_new(conn, old_top, self.settle_ns)
        touched = sorted(touched)
        if any(j <= old_job and j not in self.recent for j in touched):
            raise _Reread("a step joined a settled job")
        for i in range(0, len(touched), CHUNK_JOBS):
            part = touched[i:i + CHUNK_JOBS]
            got = _contributions(conn, self.settings, models,
                                 f"s.job_pk IN ({','.join('?' * len(part))})",
                                 part)
            for j in part:
                if j in got:
                    self.recent[j] = got[j]
                    self.newest_end = max(self.newest_end, got[j][0])
                else:       # cannot be: it has a new step; be safe
                    raise _Reread("a job lost its steps")
        self.nsteps, self.njobs = nsteps, njobs
        self.last_step, self.last_job = last_step, last_job
        cutoff = self.newest_end - self.settle_ns
        for j in [j for j, (end, _) in self.recent.items() if end < cutoff]:
            _add(self.frozen, self.recent.pop(j)[1])


# --------------------------------------------------------------------------
# metrics

def _project(totals: dict, labels) -> dict:
    """The totals summed over the labels not kept."""
    idx = [LABELS.index(x) for x in labels]
    out: dict = {}
    for key, vec in totals.items():
        _add(out, {tuple(key[i] for i in idx): vec})
    return out


def families(view: StoreView, labels=LABELS) -> list:
    """The metric families of the view's snapshot (prometheus_client)."""
    labels = list(labels)
    return (_energy_families(view, labels) + _saving_families(view, labels)
            + _store_families(view))


def _energy_families(view: StoreView, labels: list) -> list:
    """Energy, GPU, time, cost and step counts per label tuple."""
    from prometheus_client.core import CounterMetricFamily
    s, st = view.snapshot, view.settings
    energy = CounterMetricFamily(
        "joulestep_energy_joules", "Energy of the steps in the store, each "
        "counted once (steps inside others: nesting rule): CPU + DRAM (RAPL), "
        "and the GPUs of the steps whose GPUs were all measured "
        "(joulestep_gpu_energy_joules_total is that part)",
        labels=labels, unit="joules")
    gpu = CounterMetricFamily(
        "joulestep_gpu_energy_joules", "GPU energy in joulestep_energy_joules_"
        "total: the steps whose GPUs were all measured, counted once",
        labels=labels, unit="joules")
    gpu_steps = CounterMetricFamily(
        "joulestep_gpu_steps", "Steps whose GPU energy is in the totals",
        labels=labels)
    gpu_not = CounterMetricFamily(
        "joulestep_gpu_steps_unmeasured", "Steps with GPUs whose energy is not "
        "in the totals (a GPU split by MIG, shared with another job or "
        "uncertain, or GPUs not measured: see `joulestep job`)", labels=labels)
    seconds = CounterMetricFamily(
        "joulestep_step_seconds", "Step time (node-seconds) of the steps in "
        "the store, counted as their energy", labels=labels, unit="seconds")
    cost = CounterMetricFamily(
        "joulestep_cost", "Cost of that energy at the site's price_per_kwh, "
        "in the site's currency and scope (joulestep_site_info)",
        labels=labels + ["currency"])
    steps = CounterMetricFamily("joulestep_steps", "Steps in the store",
                                labels=labels)
    estimated = CounterMetricFamily(
        "joulestep_estimated_steps", "Steps that shared a CPU package with "
        "another job: their part of joulestep_energy_joules_total is their "
        "attributed share (estimated; docs/accounting.md, \"Shared nodes\"), "
        "never the whole package's measurement", labels=labels)
    unmeasured = CounterMetricFamily(
        "joulestep_steps_unmeasured", "Steps in the store without energy (no "
        "energy backend on the node, a counter that could not be trusted): "
        "see the records' provenance.errors", labels=labels)
    for key, v in sorted(_project(s.totals, labels).items()):
        # cost of the same energy as joulestep_energy_joules: the site's
        # scope on its RAPL part, the GPUs' as measured (`report`'s rule)
        kwh = (st.scoped_j((v[TOTAL] - v[GPU]) / 1e6, v[NODE] / 1e9)
               + v[GPU] / 1e6) / 3.6e6
        # the same kWh, each step's at the price it met (time-varying)
        cost_kwh = (st.scoped_j(v[P_RAPL] / 1e6, v[P_NODE] / 1e9)
                    + v[P_GPU] / 1e6) / 3.6e6
        energy.add_metric(key, v[TOTAL] / 1e6)
        gpu.add_metric(key, v[GPU] / 1e6)
        gpu_steps.add_metric(key, v[GPU_N])
        gpu_not.add_metric(key, v[GPU_NOT])
        seconds.add_metric(key, v[DUR] / 1e9)
        cost.add_metric(list(key) + [st.currency], cost_kwh)
        steps.add_metric(key, v[STEPS])
        unmeasured.add_metric(key, v[UNMEASURED])
        estimated.add_metric(key, v[ESTIMATED])
    return [energy, gpu, gpu_steps, gpu_not, seconds, cost, steps, unmeasured,
            estimated]


def _saving_families(view: StoreView, labels: list) -> list:
    """The policies' estimated saving per label tuple."""
    from prometheus_client.core import CounterMetricFamily
    s = view.snapshot
    slabels = [x for x in SAVING_LABELS if x in labels]
    saving = CounterMetricFamily(
        "joulestep_saving_joules", "Estimated energy saved by the policies "
        "that lowered clocks, against the steps' original clock (as "
        "`joulestep job` estimates it, from the fitted power models)",
        labels=slabels, unit="joules")
    not_est = CounterMetricFamily(
        "joulestep_saving_not_estimated_steps", "Steps whose lowered clock "
        "saved an amount not estimated (no power model: `joulestep model "
        "dvfs --save`)", labels=slabels)
    for key, v in sorted(_project(s.totals, slabels).items()):
        saving.add_metric(key, v[SAVING])
        not_est.add_metric(key, v[NOT_EST])
    return [saving, not_est]


def _store_families(view: StoreView) -> list:
    """The store's and the exporter's own state."""
    from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                        InfoMetricFamily)
    s, st = view.snapshot, view.settings
    out = []
    q = GaugeMetricFamily("joulestep_records_quarantined", "Records in the "
                          "quarantine directory (invalid; see their .reason "
                          "files)")
    q.add_metric([], s.quarantined)
    out.append(q)
    if s.lost is not None:
        lost = CounterMetricFamily(LOST, "Records lost "
                                   "before they reached the store")
        lost.add_metric([], s.lost)
        out.append(lost)
    if s.conflicts is not None:
        c = CounterMetricFamily("joulestep_ingest_conflicts", "Copies of "
                                "stored steps that differed from them "
                                "(quarantined at ingest; the first stored "
                                "copy kept)")
        c.add_metric([], s.conflicts)
        out.append(c)
    info = InfoMetricFamily("joulestep_site", "What cost covers")
    info.add_metric([], {"scope": st.scope, "currency": st.currency,
                         "price_per_kwh": f"{st.price_per_kwh:g}"})
    out.append(info)
    g = GaugeMetricFamily("joulestep_exporter_store_steps",
                          "Steps in the store at the last read")
    g.add_metric([], s.steps)
    out.append(g)
    g = GaugeMetricFamily("joulestep_exporter_read_seconds", "Time the last "
                          "read of the store took", unit="seconds")
    g.add_metric([], s.read_s)
    out.append(g)
    g = GaugeMetricFamily("joulestep_exporter_last_read_timestamp_seconds",
                          "When the store was last read", unit="seconds")
    g.add_metric([], s.read_at)
    out.append(g)
    c = CounterMetricFamily("joulestep_exporter_full_reads", "Reads of the "
                            "whole store (at start, after changes the "
                            "incremental read cannot follow, every "
                            "--reload-hours)")
    c.add_metric([], view.full_reads)
    out.append(c)
    c = CounterMetricFamily("joulestep_exporter_read_errors", "Reads of the "
                            "store that failed (the last good figures stay)")
    c.add_metric([], view.errors)
    out.append(c)
    return out


class Collector:
    """prometheus_client collector over a StoreView (serves its snapshot)."""

    def __init__(self, view: StoreView, labels=LABELS):
        self.view, self.labels = view, tuple(labels)

    def collect(self):
        return families(self.view, self.labels)


def registry(view: StoreView, labels=LABELS):
    from prometheus_client import CollectorRegistry
    reg = CollectorRegistry(auto_describe=False)
    reg.register(Collector(view, labels))
    return reg


def text(view: StoreView, labels=LABELS, openmetrics=False) -> bytes:
    """The exposition of the view's snapshot (Prometheus text format, or
    OpenMetrics)."""
    if openmetrics:
        from prometheus_client.openmetrics.exposition import generate_latest
    else:
        from prometheus_client.exposition import generate_latest
    return generate_latest(registry(view, labels))


def parse_labels(spec: str) -> tuple:
    """--labels: a comma-separated subset of LABELS, kept in LABELS order."""
    got = [x.strip() for x in spec.split(",") if x.strip()]
    bad = [x for x in got if x not in LABELS]
    if bad:
        raise ExporterError(f"--labels: unknown label(s) {', '.join(bad)}; "
                            f"choose from {', '.join(LABELS)}")
    return tuple(x for x in LABELS if x in got)


# --------------------------------------------------------------------------
# serving

def make_server(view: StoreView, labels, host: str, port: int):
    """A threading HTTP server (not started) answering /metrics (and /)
    with the view's snapshot, OpenMetrics when the client asks for it."""
    import socket
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer
    from wsgiref.simple_server import make_server as wsgi_server

    from prometheus_client import make_wsgi_app

    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args):
            pass

    try:
        return wsgi_server(host, port, make_wsgi_app(registry(view, labels)),
                           server_class=Server, handler_class=Quiet)
    except OSError as e:
        raise ExporterError(f"cannot listen on {host} port {port}: "
                            f"{e.strerror or e}") from None


def serve(view: StoreView, labels, host: str, port: int, refresh_s: float,
          log=None) -> None:
    """Serve until SIGTERM or SIGINT, reading the store every refresh_s."""
    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    httpd = make_server(view, labels, host, port)
    h, p = httpd.server_address[:2]
    url_host = f"[{h}]" if ":" in h else h
    s = view.snapshot
    log(f"joulestep: exporter: listening on http://{url_host}:{p}/metrics "
        f"({s.steps} steps read in {s.read_s:.2f} s)")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        while not stop.wait(refresh_s):
            try:
                view.refresh()
            except Exception as e:      # keep serving the last good figures
                view.errors += 1
                log(f"joulestep: exporter: reading the store failed: {e}")
    finally:
        httpd.shutdown()
        httpd.server_close()
        t.join()
