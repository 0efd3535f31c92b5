"""Ingest: checked records (records.py) into the store, in batches; job
identity, nesting and job totals; the first stored copy of a step wins
(docs/cli.md, "Two copies of one step")."""
from __future__ import annotations

import contextlib
import gc
import operator
import time
from itertools import chain, islice, repeat
from typing import Iterable

from .. import nesting
from .records import (GPU_COLUMNS, JOB_COLUMNS, PACKAGE_COLUMNS, PHASE_COLUMNS,
                      PHASE_GPU_COLUMNS, RANK_COLUMNS, STEP_AT,
                      STEP_COLUMNS, ZONE_COLUMNS, Parsed, RecordError,
                      parse_record)

BATCH_RECORDS = 1000
#: default gap G of the job identity rule (site config job_gap_hours)
JOB_GAP_HOURS = 24.0
JOB_GAP_NS = int(JOB_GAP_HOURS * 3600) * 10**9

# --------------------------------------------------------------------------
# ingest core

# jobs columns after job_pk, in Parsed.job order.  No ON CONFLICT: a row
# with the same first_seen_ns would have been found by _JOB_ROWS.
_JOB_COLS = JOB_COLUMNS
_JOB_ROWS = (f"SELECT job_pk, {', '.join(_JOB_COLS[2:])}, cluster, job_id "
             "FROM jobs WHERE job_id IN ")
_JOB_UPDATE = (f"UPDATE jobs SET {', '.join(c + ' = ?' for c in _JOB_COLS[2:])}"
               " WHERE job_pk = ?")
# the natural keys of the steps of some jobs (with the incarnation of a
# requeued job, migration 012), and what tells copies apart
_STEP_KEYS = ("SELECT job_pk, node_pk, step_id, het_component, incarnation_ns, step_pk, "
              "start_ns, end_ns, record_digest, source FROM steps WHERE job_pk IN ")
# steps of a merged job whose natural key the surviving job already has
_STEP_TWINS = (
    "SELECT o.step_pk, o.record_digest, o.source, k.step_pk, k.record_digest, "
    "k.source, o.node_pk, k.start_ns, k.end_ns, o.start_ns, o.end_ns FROM steps o "
    "JOIN steps k ON k.job_pk = ? AND k.node_pk = o.node_pk AND k.step_id = "
    "o.step_id AND k.het_component = o.het_component AND k.incarnation_ns = "
    "o.incarnation_ns WHERE o.job_pk = ?")
# a copy of a stored step that differs from it (migration 008)
_CONFLICT_INSERT = (
    "INSERT INTO step_conflicts (cluster, job_id, step_id, het_component, node, "
    "record_digest, source, stored_source, seen_ns, reason) VALUES "
    "(?,?,?,?,?,?,?,?,?,?) ON CONFLICT (cluster, job_id, step_id, het_component,"
    " node, record_digest) DO NOTHING")
# where the Ingester finds a step's figures in Parsed.step
_ID, _HET, _START, _END, _INC = (STEP_AT[c] for c in (
    "step_id", "het_component", "start_ns", "end_ns", "incarnation_ns"))
#: (table, columns) of the rows Ingester writes with db insert_many, in
#: the order they are written (parents first); a steps row ends with the
#: file it came from and its record's digest (records.digest)
TABLES = {
    "jobs": ("job_pk",) + _JOB_COLS,
    "steps": ("step_pk", "job_pk", "node_pk") + STEP_COLUMNS + ("source",
                                                                "record_digest"),
    "step_tags": ("step_pk", "key", "value"),
    "step_zones": ("step_pk",) + ZONE_COLUMNS,
    "phases": ("step_pk",) + PHASE_COLUMNS,
    "phase_ranks": ("step_pk",) + RANK_COLUMNS,
    "step_gpus": ("step_pk",) + GPU_COLUMNS,
    "phase_gpus": ("step_pk",) + PHASE_GPU_COLUMNS,
    "step_packages": ("step_pk",) + PACKAGE_COLUMNS,
}
#: what Ingester.add found for a record
NEW, PRESENT, CONFLICT = 0, 1, 2
#: the child tables of a step, with the Parsed field that holds their rows
_CHILDREN = tuple((t, operator.attrgetter(f)) for t, f in (
    ("step_tags", "tags"), ("step_zones", "zones"), ("phases", "phases"),
    ("phase_ranks", "ranks"), ("step_gpus", "gpus"), ("phase_gpus", "phase_gpus"),
    ("step_packages", "packages")))
# CROSS JOIN: the few dirty groups drive indexed lookups in steps (SQLite
# has no statistics here and would otherwise scan steps)
_NEST_SELECT = (
    "SELECT s.job_pk, s.node_pk, s.step_pk, s.step_id, s.het_component, "
    "s.start_ns, s.end_ns, s.duration_ns, s.energy_cpu_uj, s.energy_dram_uj, "
    "s.energy_total_uj, s.inside_step_pk, s.counted_cpu_uj, s.counted_dram_uj, "
    "s.counted_total_uj, s.counted_duration_ns FROM js_nest_dirty d CROSS "
    "JOIN steps s WHERE s.job_pk = d.job_pk AND s.node_pk = d.node_pk")
_NEST_UPDATE = (
    "UPDATE steps SET inside_step_pk = ?, counted_cpu_uj = ?, counted_dram_uj = ?,"
    " counted_total_uj = ?, counted_duration_ns = ? WHERE step_pk = ?")
#: ids in an IN (...) list per statement (well below both engines' limits)
IN_CHUNK = 500
#: a job's totals over its steps (migration 007), each the aggregate over
#: the job's steps s that gives it: the one definition, which report.py
#: also sums over the steps of the jobs a window cuts
JOB_TOTAL_SQL = {
    "steps_n": "count(*)",
    "steps_first_start_ns": "min(s.start_ns)",
    "steps_last_start_ns": "max(s.start_ns)",
    "counted_cpu_uj": "sum(s.counted_cpu_uj)",
    "counted_dram_uj": "sum(s.counted_dram_uj)",
    "counted_total_uj": "sum(s.counted_total_uj)",
    "counted_duration_ns": "sum(s.counted_duration_ns)",
    "measured_duration_ns": ("sum(CASE WHEN s.counted_total_uj IS NOT NULL "
                             "THEN s.counted_duration_ns END)"),
    "policy_steps_n": "sum(s.policy_active)",
    "policy_total_uj": "sum(s.counted_total_uj * s.policy_active)",
}
JOB_TOTAL_COLS = tuple(JOB_TOTAL_SQL)
#: where _job_totals finds its inputs in a steps row (TABLES["steps"])
_TOTALS_IN = operator.itemgetter(*(TABLES["steps"].index(c) for c in (
    "start_ns", "counted_cpu_uj", "counted_dram_uj", "counted_total_uj",
    "counted_duration_ns", "policy_active")))
#: the same totals from the stored steps, for the jobs in the IN (...) list
#: that follows
_JOB_TOTALS = (
    f"UPDATE jobs SET ({', '.join(JOB_TOTAL_COLS)}) = (SELECT "
    f"{', '.join(JOB_TOTAL_SQL.values())} FROM steps s "
    "WHERE s.job_pk = jobs.job_pk) WHERE job_pk IN ")


def _in_rows(conn, sql: str, values: list) -> list:
    """Rows of ``sql + "(?, ?, ...)"`` over values, IN_CHUNK at a time."""
    out = []
    for i in range(0, len(values), IN_CHUNK):
        part = values[i:i + IN_CHUNK]
        out += conn.execute(sql + f"({', '.join('?' * len(part))})", part).fetchall()
    return out


@contextlib.contextmanager
def _no_gc():
    """Bulk loading allocates millions of small tuples that are never cyclic:
    pausing the cyclic GC for a batch makes ingest ~1.5x faster."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class Ingester:
    """Insert parsed records; the caller owns the transaction.

    Job identity (docs/cli.md, "Which records are one job"): records of one
    (cluster, job_id) whose windows [first seen, step end] overlap or lie
    within ``gap_ns`` of each other are one job.  Each jobs row holds the
    hull [first_seen_ns, last_seen_ns] of its records' windows; a record
    joins every row within the gap, and when it bridges several, they merge
    into the earliest.  Grouping by hulls gives the same jobs as grouping
    the records themselves (a gap inside a hull is <= G), so the result does
    not depend on the order records arrive in.

    Batches: :meth:`prepare` takes the records of a transaction, locks their
    (cluster, job_id) keys (PostgreSQL: ingesters on many nodes write one
    database; SQLite's BEGIN IMMEDIATE already serializes writers) and
    loads those jobs and their steps' natural keys in a few statements.
    :meth:`add` then decides in memory, and buffers new rows with keys
    reserved from the database (db reserve_ids); :meth:`flush`, which must
    run before the transaction commits, writes them with one bulk insert
    per table (COPY on PostgreSQL), writes back widened jobs, and brings
    steps.inside_step_pk / counted_* up to date for every (job, node) that
    got a new or moved step (nesting.py).  A merge of jobs (rare) writes
    the buffers first and works in SQL.  Of two copies of one step the
    first stored stays (:meth:`add`, :meth:`_drop_twin`).  The caches are dropped at every flush (another process may change
    jobs between transactions) and by :meth:`reset` after a rollback.
    """

    def __init__(self, conn, gap_ns: int = JOB_GAP_NS):
        self.conn = conn
        self.gap_ns = gap_ns
        self.last_conflict = None   # the reason of add's last CONFLICT
        self.reset()

    def reset(self):
        self.nodes: dict = {}
        self._clear()

    def _clear(self):
        self.jobs: dict = {}        # (cluster, job_id) -> [[job_pk, first, ...]]
        self.jobs_dirty: dict = {}  # job_pk -> its cached row, to write back
        self.new_jobs: dict = {}    # job_pk -> (cached row, cluster, job_id)
        # (job_pk, node_pk, step_id, het, incarnation) -> [pk, start, end,
        # digest, source]
        self.step_keys: dict = {}
        self.conflicts: list = []   # step_conflicts rows to write
        self.steps: list = []       # steps rows to write
        self.added: list = []       # ((step_pk,), Parsed): its child rows to write
        self.dirty: set = set()     # (job_pk, node_pk) to renest
        self.touched: set = set()   # job_pk whose steps changed: totals to set
        self.group_n: dict = {}     # (job_pk, node_pk) -> steps (known here)
        self.ids: dict = {}         # table -> iterator of reserved keys
        # keys to reserve at once: what the prepared batch needs when every
        # record is new (no gaps on PostgreSQL in that common case)
        self.want = {"jobs": 1, "steps": 1}

    def _id(self, table: str, col: str) -> int:
        it = self.ids.get(table)
        if it is not None:
            v = next(it, None)
            if v is not None:
                return v
        self.ids[table] = iter(self.conn.reserve_ids(table, col, self.want[table]))
        self.want[table] = 1
        return next(self.ids[table])

    def _node(self, cluster: str, name: str) -> int:
        key = (cluster, name)
        pk = self.nodes.get(key)
        if pk is None:
            self.conn.execute("INSERT INTO nodes (cluster, name) VALUES (?, ?) "
                              "ON CONFLICT (cluster, name) DO NOTHING", key)
            pk = self.nodes[key] = self.conn.execute(
                "SELECT node_pk FROM nodes WHERE cluster = ? AND name = ?",
                key).fetchone()[0]
        return pk

    # ---------------------------------------------------------------- jobs

    def _load_nodes(self, keys) -> None:
        """node_pk of these (cluster, name) keys, inserting the new ones: a
        few statements per batch, not two per node."""
        by_cluster: dict = {}
        for c, n in keys:
            by_cluster.setdefault(c, []).append(n)
        missing = self._select_nodes(sorted(by_cluster.items()))
        if missing:     # sorted: concurrent PostgreSQL ingesters lock alike
            self.conn.executemany("INSERT INTO nodes (cluster, name) VALUES (?, ?) "
                                  "ON CONFLICT (cluster, name) DO NOTHING", missing)
            by_cluster = {}
            for c, n in missing:
                by_cluster.setdefault(c, []).append(n)
            self._select_nodes(by_cluster.items())

    def _select_nodes(self, by_cluster) -> list:
        """Cache the stored nodes among (cluster, [names]); the others."""
        missing = []
        for c, names in by_cluster:
            names.sort()
            for i in range(0, len(names), IN_CHUNK):
                part = names[i:i + IN_CHUNK]
                got = dict(self.conn.execute(
                    f"SELECT name, node_pk FROM nodes WHERE cluster = ? AND name IN "
                    f"({', '.join('?' * len(part))})", [c, *part]).fetchall())
                for n in part:
                    pk = got.get(n)
                    if pk is None:
                        missing.append((c, n))
                    else:
                        self.nodes[(c, n)] = pk
        return missing

    def prepare(self, parsed) -> None:
        """Lock and load the jobs of these records (and their steps' keys)."""
        nodes = {(p.cluster, p.node) for p in parsed} - self.nodes.keys()
        if nodes:
            self._load_nodes(nodes)
        keys = {p.job_key for p in parsed} - self.jobs.keys()
        if not keys:
            return
        self.conn.lock_keys(keys)
        for k in keys:
            self.jobs[k] = []
        found = []
        for r in _in_rows(self.conn, _JOB_ROWS, sorted({k[1] for k in keys})):
            rows = self.jobs.get((r[-2], r[-1]))
            if rows is not None:
                rows.append(list(r[:-2]))
                found.append(r[0])
        self._load_steps(found)
        self.want = {"jobs": max(1, sum(not self.jobs[k] for k in keys)),
                     "steps": len(parsed)}

    def _load_steps(self, job_pks) -> None:
        for r in _in_rows(self.conn, _STEP_KEYS, list(job_pks)):
            self.step_keys[r[:5]] = list(r[5:])
            g = r[:2]
            self.group_n[g] = self.group_n.get(g, 0) + 1

    def _hits(self, p: Parsed) -> tuple[list, list]:
        """The cached rows of the record's (cluster, job_id), and those
        within the gap of its window (the jobs it joins)."""
        job = p.job
        rows = self.jobs.get(job[:2])
        if rows is None:
            self.prepare([p])
            rows = self.jobs[job[:2]]
        lo, hi = job[2] - self.gap_ns, job[3] + self.gap_ns
        return rows, [r for r in rows if r[1] <= hi and r[2] >= lo]

    def _join(self, p: Parsed, rows: list, hits: list):
        """(job_pk, cached row) of the record's job: new, joined, or the
        hits merged.  Called once its step is known to be new (:meth:`add`):
        a copy of a stored step changes no job.  The row is None for a new
        job (already the record's window), else the caller widens it."""
        job = p.job
        if not hits:
            pk = self._id("jobs", "job_pk")
            row = [pk, *job[2:]]
            rows.append(row)
            self.new_jobs[pk] = (row, job[0], job[1])
            return pk, None
        if len(hits) > 1:
            hits.sort(key=lambda r: r[1])
            keep = hits[0]
            for other in hits[1:]:
                self._merge_job(keep, other)
                rows.remove(other)
        else:
            keep = hits[0]
        return keep[0], keep

    def _widen(self, row: list, more) -> None:
        """Fold another window and attributes (jobs columns from
        first_seen_ns on) into a cached row; mark it for write-back."""
        attrs = row[3:]
        if attrs != list(more[2:]):
            # each attribute: the known one, and when both are known and
            # differ (start_time_ns: the plugin writes each step's start),
            # the smaller, so the result never depends on the order records
            # arrive in
            attrs = [b if a is None else a if b is None or a <= b else b
                     for a, b in zip(attrs, more[2:])]
        elif more[0] >= row[1] and more[1] <= row[2]:
            return              # inside the window, same attributes
        new = [min(row[1], more[0]), max(row[2], more[1]), *attrs]
        if new != row[1:]:
            row[1:] = new
            if row[0] not in self.new_jobs:
                self.jobs_dirty[row[0]] = row

    def _merge_job(self, keep: list, other: list) -> None:
        """Move other's steps into keep and delete other.  Of two steps
        with one natural key, the first stored (the smaller step_pk) stays;
        the other is a copy of it, and a conflict when it differs."""
        conn, kpk, opk = self.conn, keep[0], other[0]
        self._write()               # the merge works on the stored rows
        nodes = {r[0] for r in conn.execute(
            "SELECT DISTINCT node_pk FROM steps WHERE job_pk = ?", (opk,))}
        for twin in conn.execute(_STEP_TWINS, (kpk, opk)).fetchall():
            self._drop_twin(twin)
        conn.execute("UPDATE steps SET job_pk = ? WHERE job_pk = ?", (kpk, opk))
        conn.execute("DELETE FROM jobs WHERE job_pk = ?", (opk,))
        self.jobs_dirty.pop(opk, None)
        self.dirty = {((kpk if j == opk else j), n) for j, n in self.dirty}
        self.touched.discard(opk)
        self.touched.add(kpk)
        self.dirty.update((kpk, n) for n in nodes)
        self.step_keys = {k: v for k, v in self.step_keys.items()
                          if k[0] not in (kpk, opk)}
        self.group_n = {g: v for g, v in self.group_n.items()
                        if g[0] not in (kpk, opk)}
        self._load_steps([kpk])
        self._widen(keep, other[1:])

    def _drop_twin(self, twin) -> None:
        """Two stored steps of one natural key met in a merge of jobs:
        delete the later stored one; record a conflict when they differ."""
        (o_pk, o_dig, o_src, k_pk, k_dig, k_src, node_pk) = twin[:7]
        first, later = ((o_pk, o_src), (k_pk, k_src, k_dig)) if o_pk < k_pk \
            else ((k_pk, k_src), (o_pk, o_src, o_dig))
        self.conn.execute("DELETE FROM steps WHERE step_pk = ?", (later[0],))
        if not same_copy(o_dig, k_dig, twin[7:9], twin[9:11]):
            name = self.conn.execute(
                "SELECT cluster, name FROM nodes WHERE node_pk = ?",
                (node_pk,)).fetchone()
            step = self.conn.execute("SELECT j.job_id, s.step_id, s.het_component"
                                     " FROM steps s JOIN jobs j USING (job_pk) "
                                     "WHERE s.step_pk = ?", (first[0],)).fetchone()
            key = (name[0], step[0], step[1], step[2], name[1])
            self.conflicts.append(key + (later[2] or "", later[1], first[1],
                                         time.time_ns(),
                                         conflict_reason(key, first[1], later[1])))

    # ---------------------------------------------------------------- steps

    def add(self, p: Parsed, source: str | None = None) -> int:
        """Insert one record (read from ``source``, a file name, or None):
        NEW; PRESENT when a copy with the same content is stored (same
        natural key, same digest); CONFLICT when the stored copy differs:
        the stored copy stays, and the conflict is kept (step_conflicts)
        and named in :attr:`last_conflict` (the first stored copy's source
        and the reason)."""
        rows, hits = self._hits(p)
        node_pk = self.nodes.get((p.cluster, p.node)) or self._node(p.cluster, p.node)
        step = p.step
        for h in hits:      # a stored copy, in any job the record would join
            # of this incarnation; or stored before migration 012, whose
            # incarnation is unknown (0): a copy, as it was before
            k = (h[0], node_pk, step[_ID], step[_HET])
            old = self.step_keys.get(k + (step[_INC],)) or self.step_keys.get(k + (0,))
            if old is not None:
                return self._copy(p, old, source)
        job_pk, job_row = self._join(p, rows, hits)
        key = (job_pk, node_pk, step[_ID], step[_HET], step[_INC])
        if job_row is not None:
            self._widen(job_row, p.job[2:])
        spk = self._id("steps", "step_pk")
        self.touched.add(job_pk)
        self.step_keys[key] = [spk, step[_START], step[_END], p.digest, source]
        group = (job_pk, node_pk)
        n = self.group_n.get(group, 0) + 1
        self.group_n[group] = n
        if n > 1:       # alone on its node, a step counts its own (parse)
            self.dirty.add(group)
        self.steps.append((spk, job_pk, node_pk) + step + (source, p.digest))
        self.added.append(((spk,), p))
        return NEW

    def _copy(self, p: Parsed, old: list, source) -> int:
        """A record whose step is stored (``old``: its step_keys entry):
        PRESENT when it is the same copy, else a CONFLICT, kept."""
        step = p.step
        if same_copy(old[3], p.digest, old[1:3], (step[_START], step[_END])):
            return PRESENT
        nk = (p.cluster, p.job[1], step[_ID], step[_HET], p.node)
        self.last_conflict = conflict_reason(nk, old[4], source)
        self.conflicts.append(nk + (p.digest, source, old[4], time.time_ns(),
                                    self.last_conflict))
        return CONFLICT

    def _write(self, totals: dict | None = None):
        """Write the buffered rows, parents first: new jobs with their
        totals where ``totals`` has them (job_pk -> JOB_TOTAL_COLS); each
        child row is its step's key (a 1-tuple) and its Parsed row, joined
        as they are bound (db insert_many ``keys``), not copied into a
        tuple of its own."""
        ins = self.conn.insert_many
        if self.new_jobs:
            none = (None,) * len(JOB_TOTAL_COLS)
            get = (totals or {}).get
            ins("jobs", TABLES["jobs"] + JOB_TOTAL_COLS,
                [(pk, c, j, *row[1:], *get(pk, none))
                 for pk, (row, c, j) in self.new_jobs.items()])
            self.new_jobs = {}
        if self.steps:
            ins("steps", TABLES["steps"], self.steps)
            self.steps = []
        if not self.added:
            return
        pres, parsed = zip(*self.added)
        self.added = []
        for table, get in _CHILDREN:
            parts = list(map(get, parsed))
            rows = list(chain.from_iterable(parts))
            if rows:
                ins(table, TABLES[table], rows,
                    keys=list(chain.from_iterable(map(repeat, pres, map(len, parts)))))

    def flush(self):
        # the totals of the jobs this batch created, whose steps are all
        # buffered and final (no step of theirs shares a node: no renest),
        # go in with their rows; the other touched jobs' come from SQL
        fresh = self.new_jobs.keys() - {j for j, _ in self.dirty}
        totals = _job_totals(self.steps, fresh) if fresh else {}
        self.touched.difference_update(totals)
        self._write(totals)
        if self.jobs_dirty:
            self.conn.executemany(_JOB_UPDATE, [r[1:] + [r[0]] for r in
                                                self.jobs_dirty.values()])
        if self.conflicts:
            self.conn.executemany(_CONFLICT_INSERT, self.conflicts)
        dirty, touched = self.dirty, self.touched
        self._clear()
        if dirty:
            self._renest(dirty)
        if touched:
            self._set_totals(sorted(touched))

    def _set_totals(self, job_pks) -> None:
        """Each job's totals over its steps (migration 007), after its steps
        and their counted_* figures are final for this batch."""
        for i in range(0, len(job_pks), IN_CHUNK):
            part = job_pks[i:i + IN_CHUNK]
            self.conn.execute(_JOB_TOTALS + f"({', '.join('?' * len(part))})", part)

    def _renest(self, groups):
        """Recompute nesting for the (job, node) groups that got new or
        moved steps: one indexed join through a temp table of the groups,
        then updates of the rows whose stored figures differ."""
        conn = self.conn
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS js_nest_dirty (job_pk "
                     "BIGINT, node_pk BIGINT, PRIMARY KEY (job_pk, node_pk))")
        conn.execute("DELETE FROM js_nest_dirty")
        conn.insert_many("js_nest_dirty", ("job_pk", "node_pk"), list(groups))
        by_group: dict = {}
        for r in conn.execute(_NEST_SELECT).fetchall():
            by_group.setdefault((r[0], r[1]), []).append(r)
        updates = []
        for rows in by_group.values():
            if len(rows) == 1:      # alone on its node: counts its own
                r = rows[0]
                got = {r[2]: (None,) + r[8:11] + (r[7],)}
            else:
                got = nesting.attribute([nesting.Step(*r[2:11]) for r in rows])
            for r in rows:
                new = got[r[2]]
                if tuple(new) != tuple(r[11:16]):
                    updates.append(tuple(new) + (r[2],))
        if updates:
            conn.executemany(_NEST_UPDATE, updates)


def same_copy(stored_digest, digest, stored_window, window) -> bool:
    """Whether a record is a copy of the stored step of its natural key:
    the same digest (records.digest).  A step stored before migration 008
    has no digest: the same window then."""
    if stored_digest is None or digest is None:
        return tuple(stored_window) == tuple(window)
    return stored_digest == digest


def conflict_count(conn) -> int:
    """Copies of stored steps that differed from them (step_conflicts,
    migration 008): quarantined at ingest, the first stored copy kept."""
    return conn.execute("SELECT count(*) FROM step_conflicts").fetchone()[0]


def conflict_reason(key: tuple, stored_source, source) -> str:
    """The quarantine reason of a copy that differs from the stored step:
    the step, and both sources."""
    cluster, job_id, step_id, het, node = key
    return (f"conflict: step {step_id}.{het} of job {job_id} on {node} "
            f"(cluster {cluster}) is stored from "
            f"{stored_source or 'a source not named (ingested from memory or before migration 008)'}"
            f"; this copy from {source or 'a source not named'} differs from "
            "it; the first stored copy is kept")


def _nsum(xs):
    """SQL's sum(): None when no value is known."""
    xs = [x for x in xs if x is not None]
    return sum(xs) if xs else None


def _job_totals(step_rows, job_pks) -> dict:
    """job_pk -> JOB_TOTAL_COLS of the jobs in job_pks, from their steps
    rows (TABLES["steps"]): the sums _JOB_TOTALS takes in SQL."""
    by_job: dict = {}
    for r in step_rows:
        if r[1] in job_pks:
            by_job.setdefault(r[1], []).append(_TOTALS_IN(r))
    out = {}
    for pk, rows in by_job.items():
        st, cpu, dram, tot, dur, pol = zip(*rows)
        if None in cpu or None in dram or None in tot:
            out[pk] = (len(rows), min(st), max(st), _nsum(cpu), _nsum(dram), _nsum(tot),
                       sum(dur), _nsum(d for d, t in zip(dur, tot) if t is not None),
                       sum(pol), _nsum(t * p for t, p in zip(tot, pol) if t is not None))
        else:       # every step measured (the common case): plain sums
            out[pk] = (len(rows), min(st), max(st), sum(cpu), sum(dram), sum(tot),
                       sum(dur), sum(dur), sum(pol), sum(map(operator.mul, tot, pol)))
    return out


class IngestResult:
    """What one ingest did: counts, quarantined files (src, dst, reason),
    errors (path, reason)."""

    def __init__(self):
        self.files_seen = 0
        self.files_skipped = 0        # unchanged since an earlier ingest
        self.new_steps = 0
        self.duplicate_steps = 0
        self.conflicts = 0            # copies that differ from the stored step
        self.lost_records = 0         # new "joulestep-lost" documents (lost.py)
        self.quarantined: list = []
        self.errors: list = []

    def as_dict(self) -> dict:
        return {
            "files_seen": self.files_seen,
            "files_skipped_unchanged": self.files_skipped,
            "steps_new": self.new_steps,
            "steps_already_present": self.duplicate_steps,
            "steps_conflicting": self.conflicts,
            "lost_records_new": self.lost_records,
            "quarantined": [{"file": str(s), "moved_to": (str(d) if d else None),
                             "reason": r} for s, d, r in self.quarantined],
            "errors": [{"file": str(p), "reason": r} for p, r in self.errors],
        }


#: attempts of a transaction that PostgreSQL aborted (deadlock, serialization)
TX_ATTEMPTS = 5


def _in_transaction(conn, ing: "Ingester", body):
    """body() inside one write transaction (BEGIN IMMEDIATE: SQLite takes
    the write lock at once); run again when PostgreSQL aborted it for a
    deadlock or a serialization failure (conn.RetryError)."""
    for attempt in range(TX_ATTEMPTS):
        conn.execute("BEGIN IMMEDIATE")
        try:
            out = body()
            conn.execute("COMMIT")
            return out
        except conn.RetryError:
            conn.execute("ROLLBACK")
            ing.reset()
            if attempt == TX_ATTEMPTS - 1:
                raise
            import random   # here: a retry is rare, and random costs start-up time
            time.sleep(random.uniform(0.01, 0.05) * (attempt + 1))
        except BaseException:
            conn.execute("ROLLBACK")
            ing.reset()
            raise


def ingest_records(conn, records: Iterable, batch: int = BATCH_RECORDS,
                   gap_ns: int = JOB_GAP_NS) -> IngestResult:
    """Ingest decoded records (dicts) from memory; invalid ones are counted
    in ``errors`` with their index.  Used by tests and the benchmark.
    ``gap_ns``: the gap G of the job identity rule (Ingester)."""
    res = IngestResult()
    ing = Ingester(conn, gap_ns)
    buf: list = []
    from . import shares
    since = shares.top(conn)

    def run(items):
        def body():
            ing.prepare([p for _, p in items])
            got = list(map(ing.add, [p for _, p in items]))
            ing.flush()
            return got
        got = _in_transaction(conn, ing, body)
        res.new_steps += got.count(NEW)
        res.duplicate_steps += got.count(PRESENT)
        res.conflicts += got.count(CONFLICT)

    it = iter(records)
    with _no_gc():
        while True:
            first = res.files_seen
            chunk = list(islice(it, batch))
            if not chunk:
                break
            res.files_seen += len(chunk)
            for i, rec in enumerate(chunk, first):
                try:
                    buf.append((i, parse_record(rec)))
                except RecordError as e:
                    res.errors.append((f"record {i}", str(e)))
            while len(buf) >= batch:
                run(buf[:batch])
                del buf[:batch]
        if buf:
            run(buf)
    shares.refresh_after(conn, since)   # the users' roles' estimates
    return res


