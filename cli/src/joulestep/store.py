"""SQLite store: opening + migrations, record validation, ingest.

The schema lives in versioned migration files ``sql/NNN_name.sql`` (the
repository's top-level sql/; joulestep/sql is a symlink to it, shipped as
package data).
Each file ends with ``PRAGMA user_version = NNN``.  :func:`connect` applies
the pending ones, in one transaction, whenever a database is opened.
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import operator
import os
import pathlib
import re
import sqlite3
import stat
from typing import Callable, Iterable, Iterator

from . import nesting

SQL_DIR = pathlib.Path(__file__).resolve().parent / "sql"
RECORD_FORMAT = "joulestep-record"
RECORD_VERSION = 1
BATCH_RECORDS = 1000
#: default gap G of the job identity rule (site config job_gap_hours)
JOB_GAP_HOURS = 24.0
JOB_GAP_NS = int(JOB_GAP_HOURS * 3600) * 10**9
#: policies that never change the clock (not counted as policy adoption)
INACTIVE_POLICIES = frozenset(("monitor", "none", "off", "base", ""))


class StoreError(Exception):
    """A database that cannot be opened or migrated (message says why)."""


class RecordError(ValueError):
    """A spool record that does not follow record format v1."""


# --------------------------------------------------------------------------
# opening and migrations

def migrations() -> list[tuple[int, pathlib.Path]]:
    out = []
    for p in sorted(SQL_DIR.glob("*.sql")):
        m = re.match(r"(\d+)_", p.name)
        if m:
            out.append((int(m.group(1)), p))
    return out


def latest_version() -> int:
    return max((v for v, _ in migrations()), default=0)


def _statements(script: str) -> Iterator[str]:
    buf = ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            yield buf
            buf = ""
    if buf.strip() and not all(l.strip().startswith("--") or not l.strip()
                               for l in buf.splitlines()):
        raise StoreError("migration ends with an incomplete SQL statement")


def migrate(conn: sqlite3.Connection) -> int:
    """Apply pending migrations; returns the schema version afterwards.

    Foreign keys are off while migrations run (SQLite's table-rebuild
    procedure: dropping a rebuilt parent table must not cascade into its
    children); PRAGMA foreign_key_check must come back empty before the
    transaction commits.  The pragma cannot change inside a transaction,
    hence here and not in the migration files."""
    latest = latest_version()
    v = conn.execute("PRAGMA user_version").fetchone()[0]
    if v > latest:
        raise StoreError(f"database schema version {v} is newer than this "
                         f"joulestep understands ({latest}); upgrade joulestep")
    if v == latest:
        return v
    fk = conn.execute("PRAGMA foreign_keys").fetchone()[0]
    conn.execute("PRAGMA foreign_keys = OFF")
    try:
        _apply_migrations(conn)
    finally:
        conn.execute(f"PRAGMA foreign_keys = {'ON' if fk else 'OFF'}")
    return latest


def _apply_migrations(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        v = conn.execute("PRAGMA user_version").fetchone()[0]  # raced?
        for num, path in migrations():
            if num <= v:
                continue
            for stmt in _statements(path.read_text(encoding="utf-8")):
                conn.execute(stmt)
            got = conn.execute("PRAGMA user_version").fetchone()[0]
            if got != num:
                raise StoreError(f"{path.name} did not set user_version = {num}")
        bad = conn.execute("PRAGMA foreign_key_check").fetchmany(3)
        if bad:
            raise StoreError(f"migration left rows without their parent: {bad}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def connect(path: str | os.PathLike, *, write: bool = True,
            create: bool = True) -> sqlite3.Connection:
    """Open (and if needed create and migrate) a joulestep database.

    The connection is in autocommit mode (``isolation_level=None``); callers
    open their own transactions.  Foreign keys are on.
    """
    p = pathlib.Path(path)
    if str(path) != ":memory:" and not p.exists():
        if not create:
            raise StoreError(f"no database at {p} (run `joulestep ingest` "
                             "first, or pass --db)")
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot create {p.parent}: {e.strerror}") from None
    can_write = str(path) == ":memory:" or (
        os.access(p, os.W_OK) if p.exists() else True)
    try:
        if can_write:
            conn = sqlite3.connect(str(p), isolation_level=None, timeout=30.0)
        else:
            if write:
                raise StoreError(f"database {p} is not writable by this user")
            conn = sqlite3.connect(f"file:{p}?mode=ro", uri=True,
                                   isolation_level=None, timeout=30.0)
        conn.execute("PRAGMA foreign_keys = ON")
        v = conn.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.DatabaseError as e:
        raise StoreError(f"cannot open database {p}: {e}") from None
    if v < latest_version():
        if not can_write:
            conn.close()
            raise StoreError(f"database {p} has schema version {v} < "
                             f"{latest_version()} and is read-only here; "
                             "open it once as its owner to migrate it")
        try:
            migrate(conn)
        except sqlite3.DatabaseError as e:
            conn.close()
            raise StoreError(f"cannot migrate {p}: {e}") from None
        except StoreError:
            conn.close()
            raise
    elif v > latest_version():
        conn.close()
        raise StoreError(f"database {p} has schema version {v}, newer than "
                         f"this joulestep ({latest_version()}); upgrade joulestep")
    else:
        try:   # prepared, not run: costs microseconds
            conn.execute("SELECT counted_total_uj FROM steps LIMIT 0")
        except sqlite3.OperationalError:
            conn.close()
            raise StoreError(f"database {p} was made by a pre-release joulestep "
                             "(steps.counted_* missing): move it away and "
                             "ingest the spool again") from None
    return conn


# --------------------------------------------------------------------------
# record validation: dict (from json) -> rows

def _get(d: dict, key: str, where: str):
    try:
        return d[key]
    except KeyError:
        raise RecordError(f"{where}.{key}: missing") from None


def _int(v, where: str, *, null: bool = False, minimum: int | None = None):
    if v is None and null:
        return None
    if type(v) is not int:
        raise RecordError(f"{where}: expected an integer{' or null' if null else ''}"
                          f", got {json.dumps(v)[:40]}")
    if minimum is not None and v < minimum:
        raise RecordError(f"{where}: must be >= {minimum}, got {v}")
    if not -(1 << 63) <= v < 1 << 63:
        raise RecordError(f"{where}: {v} does not fit in 64 bits")
    return v


def _text_ok(v: str) -> bool:
    """False for text SQLite cannot store: a lone surrogate, which JSON
    can carry ("\\ud800") and json.loads returns as is."""
    if v.isascii():
        return True
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _str(v, where: str, *, null: bool = False):
    if v is None and null:
        return None
    if not isinstance(v, str) or (not null and v == ""):
        raise RecordError(f"{where}: expected a non-empty string"
                          f"{' or null' if null else ''}, got {json.dumps(v)[:40]}")
    if not _text_ok(v):
        raise RecordError(f"{where}: not valid Unicode (a lone surrogate), got "
                          f"{json.dumps(v)[:40]}")
    return v


def _num(v, where: str, *, null: bool = True):
    if v is None and null:
        return None
    if type(v) not in (int, float):
        raise RecordError(f"{where}: expected a number, got {json.dumps(v)[:40]}")
    return float(v)


def _bool(v, where: str, *, null: bool = True):
    if v is None and null:
        return None
    if type(v) is not bool:
        raise RecordError(f"{where}: expected true or false, got {json.dumps(v)[:40]}")
    return int(v)


@dataclasses.dataclass
class Parsed:
    """One validated record, as rows without their surrogate keys."""
    cluster: str
    job: tuple          # jobs columns after job_pk
    tags: list          # [(key, value)]
    node: str
    step: tuple         # steps columns after job_pk and node_pk (_STEP_INSERT)
    zones: list         # [(name, zone_id, kind, energy_uj, wraps)]
    phases: list        # [(seq, kind, ..., nranks)]
    ranks: list         # [(seq, rank, start_ns, end_ns, bytes)]

    @property
    def window_ns(self) -> tuple[int, int]:
        """[start, end] of the record's job window (job identity)."""
        return self.job[2], self.job[3]

    @property
    def job_key(self) -> tuple[str, int]:
        return self.job[0], self.job[1]


_PHASE_GET = operator.itemgetter(
    "seq", "kind", "label", "depth", "parent_seq", "start_ns", "end_ns",
    "duration_ns", "freq_khz", "freq_change_ns", "energy_cpu_uj",
    "energy_dram_uj", "bytes", "nranks")
_PHASE_DEFAULTS = {"label": None, "depth": 0, "parent_seq": None,
                   "freq_khz": None, "freq_change_ns": None,
                   "energy_dram_uj": None, "bytes": None, "nranks": None}
_STEP_ID = re.compile(r"^(\d+|batch|extern|interactive|[A-Za-z0-9_.+-]{1,64})$")


def parse_record(rec) -> Parsed:
    """Validate a decoded v1 record; raise RecordError naming the bad field."""
    if not isinstance(rec, dict):
        raise RecordError("record: expected a JSON object")
    if rec.get("format") != RECORD_FORMAT:
        raise RecordError(f"format: expected {RECORD_FORMAT!r}, got "
                          f"{json.dumps(rec.get('format'))[:40]}")
    ver = rec.get("version")
    if ver != RECORD_VERSION:
        raise RecordError(f"version: this joulestep reads version {RECORD_VERSION},"
                          f" got {json.dumps(ver)[:20]}")
    cluster = _str(_get(rec, "cluster", "record"), "cluster")
    job = _get(rec, "job", "record")
    step = _get(rec, "step", "record")
    if not isinstance(job, dict) or not isinstance(step, dict):
        raise RecordError("job/step: expected JSON objects")
    g = job.get
    tags_obj = g("tags") or {}
    if not isinstance(tags_obj, dict):
        raise RecordError("job.tags: expected an object of strings")
    tags = []
    for k, v in tags_obj.items():
        if not _text_ok(k) or (isinstance(v, str) and not _text_ok(v)):
            raise RecordError(f"job.tags: {json.dumps(k)[:40]}: not valid Unicode "
                              "(a lone surrogate)")
        if not isinstance(v, (str, int, float)) or isinstance(v, bool) or k == "":
            raise RecordError(f"job.tags.{k}: expected a string value")
        tags.append((k, str(v)))

    s = step.get
    step_id = _get(step, "step_id", "step")
    if type(step_id) is int:
        step_id = str(step_id)
    if not isinstance(step_id, str) or not _STEP_ID.match(step_id):
        raise RecordError(f"step.step_id: expected a step number, batch, extern "
                          f"or interactive, got {json.dumps(step_id)[:40]}")
    node = _str(_get(step, "node", "step"), "step.node")
    start_ns = _int(_get(step, "start_ns", "step"), "step.start_ns", minimum=0)
    end_ns = _int(_get(step, "end_ns", "step"), "step.end_ns", minimum=0)
    if end_ns < start_ns:
        raise RecordError(f"step.end_ns: {end_ns} is before start_ns {start_ns}")
    # null energies: the plugin could not measure (provenance.errors says why)
    cpu = _int(_get(step, "energy_cpu_uj", "step"), "step.energy_cpu_uj",
               null=True, minimum=0)
    dram = _int(s("energy_dram_uj"), "step.energy_dram_uj", null=True, minimum=0)
    total = _int(s("energy_total_uj"), "step.energy_total_uj", null=True, minimum=0)
    if total is None and cpu is not None:
        total = _int(cpu + (dram or 0), "step.energy_total_uj (cpu + dram)")
    prov = rec.get("provenance") or {}
    if not isinstance(prov, dict):
        raise RecordError("provenance: expected an object")
    _str(prov.get("job_source"), "provenance.job_source", null=True)
    job_row = _job_row(cluster, job, start_ns, end_ns)
    errors = prov.get("errors") or []
    if not isinstance(errors, list) or not all(isinstance(e, str) for e in errors):
        raise RecordError("provenance.errors: expected a list of strings")
    policy = _str(s("policy"), "step.policy", null=True)
    step_row = (
        step_id,
        _int(s("het_component", 0), "step.het_component", minimum=0),
        _str(s("node_model"), "step.node_model", null=True),
        _int(s("ntasks"), "step.ntasks", null=True, minimum=0),
        _int(s("nnodes"), "step.nnodes", null=True, minimum=0),
        _str(s("cpus"), "step.cpus", null=True),
        _int(s("ncpus"), "step.ncpus", null=True, minimum=0),
        _bool(s("exclusive"), "step.exclusive"),
        policy, int(policy is not None and policy not in INACTIVE_POLICIES),
        _int(s("base_freq_khz"), "step.base_freq_khz", null=True, minimum=1),
        _num(s("freq_min_ratio"), "step.freq_min_ratio"),
        start_ns, end_ns,
        _int(s("duration_ns", end_ns - start_ns), "step.duration_ns", minimum=0),
        cpu, dram, total,
        _int(s("exit_code"), "step.exit_code", null=True),
        _str(prov.get("backend"), "provenance.backend", null=True),
        _bool(prov.get("wrap_uncertain", False), "provenance.wrap_uncertain",
              null=False),
        _int(prov.get("sample_period_ns"), "provenance.sample_period_ns",
             null=True, minimum=0),
        json.dumps(errors),
        _str(prov.get("plugin_version"), "provenance.plugin_version", null=True),
    )
    # counted_* start as the step's own figures; Ingester.flush() corrects
    # them when the step shares its (job, node) with others (nesting.py)
    step_row += (cpu, dram, total, step_row[14])
    # the clocks (migration 003): nominal, fixed:R's, who controlled them
    step_row += (
        _int(s("nominal_freq_khz"), "step.nominal_freq_khz", null=True, minimum=1),
        _int(s("fixed_freq_khz"), "step.fixed_freq_khz", null=True, minimum=1),
        _str(prov.get("freq_control"), "provenance.freq_control", null=True))

    zones = []
    zl = rec.get("zones") or []
    if not isinstance(zl, list):
        raise RecordError("zones: expected a list")
    seen = set()
    for i, z in enumerate(zl):
        w = f"zones[{i}]"
        if not isinstance(z, dict):
            raise RecordError(f"{w}: expected an object")
        name = _str(_get(z, "name", w), f"{w}.name")
        # zones are told apart by id: every package has a zone named "dram"
        zid = _str(_get(z, "id", w), f"{w}.id")
        if zid in seen:
            raise RecordError(f"{w}.id: zone {zid!r} appears twice")
        seen.add(zid)
        zones.append((name, zid, _str(z.get("kind"), f"{w}.kind", null=True),
                      _int(_get(z, "energy_uj", w), f"{w}.energy_uj", minimum=0),
                      _int(z.get("wraps", 0), f"{w}.wraps", minimum=0)))

    phases, ranks = [], []
    pl = rec.get("phases") or []
    if not isinstance(pl, list):
        raise RecordError("phases: expected a list")
    seqs = set()
    for i, p in enumerate(pl):
        w = f"phases[{i}]"
        if type(p) is not dict:
            raise RecordError(f"{w}: expected an object")
        try:
            row = _PHASE_GET(_PHASE_DEFAULTS | p)
        except KeyError as e:
            raise RecordError(f"{w}.{e.args[0]}: missing") from None
        (seq, kind, label, depth, parent, pst, pend, pdur, freq, fch, pcpu, pdram,
         pbytes, nranks) = row
        # fast path: everything is a plain int where it must be
        if not (type(seq) is int and type(pst) is int and type(pend) is int
                and type(pdur) is int and seq >= 0 and pst >= 0 and pdur >= 0
                and pend >= pst
                and (pcpu is None or (type(pcpu) is int and pcpu >= 0))
                and (pdram is None or (type(pdram) is int and pdram >= 0))
                and (pbytes is None or (type(pbytes) is int and pbytes >= 0))
                and (freq is None or (type(freq) is int and freq > 0))
                and type(kind) is str and kind and kind.isascii()
                and (label is None or (type(label) is str and label.isascii()))
                and type(depth) is int
                and 0 <= depth and (parent is None or type(parent) is int)
                and (fch is None or type(fch) is int)
                and (nranks is None or type(nranks) is int)
                and seq < 1 << 63 and pend < 1 << 63 and (pcpu or 0) < 1 << 63
                and (pbytes is None or pbytes < 1 << 63)
                # every int fits in SQLite's 64 bits, or the slow path says which
                and pdur < 1 << 63 and (pdram or 0) < 1 << 63
                and (freq or 0) < 1 << 63 and depth < 1 << 63
                and all(x is None or -(1 << 63) <= x < 1 << 63
                        for x in (parent, fch, nranks))):
            _int(seq, f"{w}.seq", minimum=0)
            _int(pst, f"{w}.start_ns", minimum=0)
            _int(pend, f"{w}.end_ns", minimum=0)
            if pend < pst:
                raise RecordError(f"{w}.end_ns: {pend} is before start_ns {pst}")
            _int(pdur, f"{w}.duration_ns", minimum=0)
            _int(pcpu, f"{w}.energy_cpu_uj", null=True, minimum=0)
            _int(pdram, f"{w}.energy_dram_uj", null=True, minimum=0)
            _int(pbytes, f"{w}.bytes", null=True, minimum=0)
            _int(freq, f"{w}.freq_khz", null=True, minimum=1)
            _str(kind, f"{w}.kind")
            _str(label, f"{w}.label", null=True)
            _int(depth, f"{w}.depth", minimum=0)
            _int(parent, f"{w}.parent_seq", null=True)
            _int(fch, f"{w}.freq_change_ns", null=True)
            _int(nranks, f"{w}.nranks", null=True)
        if seq in seqs:
            raise RecordError(f"{w}.seq: {seq} appears twice")
        seqs.add(seq)
        phases.append(row)
        rl = p.get("ranks")
        if rl:
            if not isinstance(rl, list):
                raise RecordError(f"{w}.ranks: expected a list")
            rseen = set()
            for j, r in enumerate(rl):
                rw = f"{w}.ranks[{j}]"
                if not isinstance(r, dict):
                    raise RecordError(f"{rw}: expected an object")
                rank = _int(_get(r, "rank", rw), f"{rw}.rank", minimum=0)
                if rank in rseen:
                    raise RecordError(f"{rw}.rank: {rank} appears twice")
                rseen.add(rank)
                ranks.append((seq, rank,
                              _int(r.get("start_ns"), f"{rw}.start_ns", null=True),
                              _int(r.get("end_ns"), f"{rw}.end_ns", null=True),
                              _int(r.get("bytes"), f"{rw}.bytes", null=True,
                                   minimum=0)))
    for i, p in enumerate(phases):
        if p[4] is not None and p[4] not in seqs:
            raise RecordError(f"phases[{i}].parent_seq: {p[4]} is not the seq "
                              "of a phase in this record")
    return Parsed(cluster, job_row, tags, node, step_row, zones, phases, ranks)


def _job_row(cluster: str, job: dict, start_ns: int, end_ns: int) -> tuple:
    """The jobs columns after job_pk (_JOB_INSERT).  The window starts when
    the job was first seen on the node (job.first_seen_ns), or for records
    of plugins before it, at job.submit_time_ns; never after the step's own
    start, so the window always holds the step."""
    g = job.get
    submit = _int(g("submit_time_ns"), "job.submit_time_ns", null=True, minimum=0)
    first = g("first_seen_ns")
    if first is None and submit is None:
        raise RecordError("job.first_seen_ns: missing (and job.submit_time_ns "
                          "is null)")
    first = submit if first is None else _int(first, "job.first_seen_ns",
                                              minimum=0)
    return (
        cluster,
        _int(_get(job, "job_id", "job"), "job.job_id", minimum=0),
        min(first, start_ns), end_ns, submit,
        _int(g("start_time_ns"), "job.start_time_ns", null=True),
        _str(g("name"), "job.name", null=True),
        _str(g("user"), "job.user", null=True),
        _int(g("uid"), "job.uid", null=True, minimum=0),
        _int(g("gid"), "job.gid", null=True, minimum=0),
        _str(g("account"), "job.account", null=True),
        _str(g("partition"), "job.partition", null=True),
    )


# --------------------------------------------------------------------------
# ingest core

# jobs columns after job_pk, in Parsed.job order.  No ON CONFLICT: a row
# with the same first_seen_ns would have been found by _JOB_ROWS.
_JOB_COLS = ("cluster", "job_id", "first_seen_ns", "last_seen_ns",
             "submit_time_ns", "start_time_ns", "name", "user_name", "uid",
             "gid", "account", "partition")
_JOB_INSERT = (f"INSERT INTO jobs ({', '.join(_JOB_COLS)}) VALUES "
               f"({', '.join('?' * len(_JOB_COLS))})")
_JOB_ROWS = (f"SELECT job_pk, {', '.join(_JOB_COLS[2:])} FROM jobs "
             "WHERE cluster = ? AND job_id = ?")
_JOB_UPDATE = (f"UPDATE jobs SET {', '.join(c + ' = ?' for c in _JOB_COLS[2:])}"
               " WHERE job_pk = ?")
_STEP_KEY_SELECT = (
    "SELECT step_pk, start_ns, end_ns FROM steps WHERE job_pk = ? AND "
    "node_pk = ? AND step_id = ? AND het_component = ?")
# steps of a merged job whose natural key the surviving job already has
_STEP_TWINS = (
    "SELECT o.step_pk, o.start_ns, o.end_ns, k.step_pk, k.start_ns, k.end_ns, "
    "o.node_pk FROM steps o JOIN steps k ON k.job_pk = ? AND k.node_pk = "
    "o.node_pk AND k.step_id = o.step_id AND k.het_component = o.het_component"
    " WHERE o.job_pk = ?")
_STEP_INSERT = (
    "INSERT INTO steps (job_pk, node_pk, step_id, het_component, node_model, "
    "ntasks, nnodes, cpus, ncpus, exclusive, policy, policy_active, base_freq_khz, "
    "freq_min_ratio, start_ns, end_ns, duration_ns, energy_cpu_uj, "
    "energy_dram_uj, energy_total_uj, exit_code, backend, wrap_uncertain, "
    "sample_period_ns, errors_json, plugin_version, counted_cpu_uj, "
    "counted_dram_uj, counted_total_uj, counted_duration_ns, "
    "nominal_freq_khz, fixed_freq_khz, freq_control) "
    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) "
    "ON CONFLICT (job_pk, node_pk, step_id, het_component) DO NOTHING")
# CROSS JOIN: the few dirty groups drive indexed lookups in steps (SQLite
# has no statistics here and would otherwise scan steps)
_NEST_SELECT = (
    "SELECT s.job_pk, s.node_pk, s.step_pk, s.step_id, s.het_component, "
    "s.start_ns, s.end_ns, s.duration_ns, s.energy_cpu_uj, s.energy_dram_uj, "
    "s.energy_total_uj, s.inside_step_pk, s.counted_cpu_uj, s.counted_dram_uj, "
    "s.counted_total_uj, s.counted_duration_ns FROM temp.js_nest_dirty d CROSS "
    "JOIN steps s ON s.job_pk = d.job_pk AND s.node_pk = d.node_pk")
_NEST_UPDATE = (
    "UPDATE steps SET inside_step_pk = ?, counted_cpu_uj = ?, counted_dram_uj = ?,"
    " counted_total_uj = ?, counted_duration_ns = ? WHERE step_pk = ?")
_TAG_INSERT = "INSERT INTO step_tags (step_pk, key, value) VALUES (?,?,?)"
_ZONE_INSERT = ("INSERT INTO step_zones (step_pk, name, zone_id, kind, "
                "energy_uj, wraps) VALUES (?,?,?,?,?,?)")
_PHASE_INSERT = (
    "INSERT INTO phases (step_pk, seq, kind, label, depth, parent_seq, "
    "start_ns, end_ns, duration_ns, freq_khz, freq_change_ns, energy_cpu_uj, "
    "energy_dram_uj, bytes, nranks) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)")
_RANK_INSERT = ("INSERT INTO phase_ranks (step_pk, seq, rank, start_ns, "
                "end_ns, bytes) VALUES (?,?,?,?,?,?)")


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


def _pick(a, b):
    """Merge one job attribute of two records: the known one, and when both
    are known and differ (they should not), the smaller, so the result never
    depends on the order records arrive in."""
    if a is None:
        return b
    if b is None or a <= b:
        return a
    return b


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

    The rows of each (cluster, job_id) seen in a transaction are cached and
    written back by :meth:`flush`, which must run before the transaction
    commits; it also writes the buffered phase/zone/rank/tag rows, and
    brings steps.inside_step_pk / counted_* up to date for every (job, node)
    that got a new or moved step (nesting.py).  The cache is dropped at
    every flush (another process may merge jobs between transactions) and
    by :meth:`reset` after a rollback.
    """

    def __init__(self, conn: sqlite3.Connection, gap_ns: int = JOB_GAP_NS):
        self.conn = conn
        self.gap_ns = gap_ns
        self.reset()

    def reset(self):
        self.nodes: dict = {}
        self.jobs: dict = {}        # (cluster, job_id) -> [[job_pk, first, ...]]
        self.jobs_dirty: dict = {}  # job_pk -> its cached row, to write back
        self.tag_rows: list = []
        self.zone_rows: list = []
        self.phase_rows: list = []
        self.rank_rows: list = []
        self.dirty: set = set()     # (job_pk, node_pk) with a new step

    def _node(self, cluster: str, name: str) -> int:
        key = (cluster, name)
        pk = self.nodes.get(key)
        if pk is None:
            c = self.conn.execute(
                "INSERT INTO nodes (cluster, name) VALUES (?, ?) "
                "ON CONFLICT (cluster, name) DO NOTHING", key)
            if c.rowcount == 1:
                pk = c.lastrowid
            else:
                pk = self.conn.execute(
                    "SELECT node_pk FROM nodes WHERE cluster = ? AND name = ?",
                    key).fetchone()[0]
            self.nodes[key] = pk
        return pk

    # ---------------------------------------------------------------- jobs

    def _job(self, p: Parsed) -> int:
        """job_pk of the record's job: joined, new, or merged."""
        rows = self.jobs.get(p.job_key)
        if rows is None:
            rows = self.jobs[p.job_key] = [
                list(r) for r in self.conn.execute(_JOB_ROWS, p.job_key)]
        lo, hi = p.window_ns
        g = self.gap_ns
        hits = [r for r in rows if r[1] <= hi + g and r[2] >= lo - g]
        if not hits:
            pk = self.conn.execute(_JOB_INSERT, p.job).lastrowid
            rows.append([pk, *p.job[2:]])
            return pk
        hits.sort(key=lambda r: r[1])
        keep = hits[0]
        for other in hits[1:]:
            self._merge_job(keep, other)
            rows.remove(other)
        self._widen(keep, p.job[2:])
        return keep[0]

    def _widen(self, row: list, more) -> None:
        """Fold another window and attributes (jobs columns from
        first_seen_ns on) into a cached row; mark it for write-back."""
        new = [min(row[1], more[0]), max(row[2], more[1])]
        new += [_pick(a, b) for a, b in zip(row[3:], more[2:])]
        if new != row[1:]:
            row[1:] = new
            self.jobs_dirty[row[0]] = row

    def _merge_job(self, keep: list, other: list) -> None:
        """Move other's steps into keep and delete other.  Of two steps
        with one natural key, the earlier (start_ns, end_ns) stays."""
        conn, kpk, opk = self.conn, keep[0], other[0]
        self._write_children()      # steps may be deleted below
        nodes = {r[0] for r in conn.execute(
            "SELECT DISTINCT node_pk FROM steps WHERE job_pk = ?", (opk,))}
        for o_pk, o_st, o_en, k_pk, k_st, k_en, _ in conn.execute(
                _STEP_TWINS, (kpk, opk)).fetchall():
            if (o_st, o_en) < (k_st, k_en):
                conn.execute("DELETE FROM steps WHERE step_pk = ?", (k_pk,))
            else:
                conn.execute("DELETE FROM steps WHERE step_pk = ?", (o_pk,))
        conn.execute("UPDATE steps SET job_pk = ? WHERE job_pk = ?", (kpk, opk))
        conn.execute("DELETE FROM jobs WHERE job_pk = ?", (opk,))
        self.jobs_dirty.pop(opk, None)
        self.dirty = {((kpk if j == opk else j), n) for j, n in self.dirty}
        self.dirty.update((kpk, n) for n in nodes)
        self._widen(keep, other[1:])

    # ---------------------------------------------------------------- steps

    def _insert_step(self, job_pk: int, node_pk: int, p: Parsed):
        """step_pk of the new step row, or None when the job already has
        this step (same natural key) with an earlier or equal window."""
        c = self.conn.execute(_STEP_INSERT, (job_pk, node_pk) + p.step)
        if c.rowcount == 1:
            return c.lastrowid
        old_pk, st, en = self.conn.execute(
            _STEP_KEY_SELECT, (job_pk, node_pk) + p.step[:2]).fetchone()
        if (st, en) <= p.step[12:14]:
            return None
        self._write_children()
        self.conn.execute("DELETE FROM steps WHERE step_pk = ?", (old_pk,))
        return self.conn.execute(_STEP_INSERT, (job_pk, node_pk) + p.step).lastrowid

    def add(self, p: Parsed) -> bool:
        """Insert one record; False when its step was already stored."""
        job_pk = self._job(p)
        node_pk = self._node(p.cluster, p.node)
        spk = self._insert_step(job_pk, node_pk, p)
        if spk is None:
            return False
        self.dirty.add((job_pk, node_pk))
        if p.tags:
            self.tag_rows.extend((spk, k, v) for k, v in p.tags)
        if p.zones:
            self.zone_rows.extend((spk,) + z for z in p.zones)
        if p.phases:
            self.phase_rows.extend((spk,) + ph for ph in p.phases)
        if p.ranks:
            self.rank_rows.extend((spk,) + r for r in p.ranks)
        return True

    def _write_children(self):
        ex = self.conn.executemany
        if self.tag_rows:
            ex(_TAG_INSERT, self.tag_rows)
        if self.zone_rows:
            ex(_ZONE_INSERT, self.zone_rows)
        if self.phase_rows:
            ex(_PHASE_INSERT, self.phase_rows)
        if self.rank_rows:
            ex(_RANK_INSERT, self.rank_rows)
        self.tag_rows, self.zone_rows = [], []
        self.phase_rows, self.rank_rows = [], []

    def flush(self):
        self._write_children()
        if self.jobs_dirty:
            self.conn.executemany(_JOB_UPDATE, [r[1:] + [r[0]] for r in
                                                self.jobs_dirty.values()])
        self.jobs, self.jobs_dirty = {}, {}
        if self.dirty:
            self._renest()

    def _renest(self):
        """Recompute nesting for the (job, node) groups that got new or
        moved steps: one indexed join through a temp table of the groups,
        then updates of the rows whose stored figures differ."""
        conn, groups = self.conn, self.dirty
        self.dirty = set()
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS js_nest_dirty (job_pk "
                     "INTEGER, node_pk INTEGER, PRIMARY KEY (job_pk, node_pk)) "
                     "WITHOUT ROWID")
        conn.execute("DELETE FROM temp.js_nest_dirty")
        conn.executemany("INSERT INTO temp.js_nest_dirty VALUES (?, ?)", groups)
        by_group: dict = {}
        for r in conn.execute(_NEST_SELECT):
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
                if tuple(new) != r[11:16]:
                    updates.append(tuple(new) + (r[2],))
        if updates:
            conn.executemany(_NEST_UPDATE, updates)


@dataclasses.dataclass
class IngestResult:
    files_seen: int = 0
    files_skipped: int = 0        # unchanged since an earlier ingest
    new_steps: int = 0
    duplicate_steps: int = 0
    quarantined: list = dataclasses.field(default_factory=list)  # (src, dst, reason)
    errors: list = dataclasses.field(default_factory=list)       # (path, reason)

    def as_dict(self) -> dict:
        return {
            "files_seen": self.files_seen,
            "files_skipped_unchanged": self.files_skipped,
            "steps_new": self.new_steps,
            "steps_already_present": self.duplicate_steps,
            "quarantined": [{"file": str(s), "moved_to": (str(d) if d else None),
                             "reason": r} for s, d, r in self.quarantined],
            "errors": [{"file": str(p), "reason": r} for p, r in self.errors],
        }


def ingest_records(conn: sqlite3.Connection, records: Iterable,
                   batch: int = BATCH_RECORDS,
                   gap_ns: int = JOB_GAP_NS) -> IngestResult:
    """Ingest decoded records (dicts) from memory; invalid ones are counted
    in ``errors`` with their index.  Used by tests and the benchmark.
    ``gap_ns``: the gap G of the job identity rule (Ingester)."""
    res = IngestResult()
    ing = Ingester(conn, gap_ns)
    buf: list = []

    def run(items):
        try:
            conn.execute("BEGIN IMMEDIATE")
            for _, p in items:
                if ing.add(p):
                    res.new_steps += 1
                else:
                    res.duplicate_steps += 1
            ing.flush()
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            ing.reset()
            raise

    with _no_gc():
        for i, rec in enumerate(records):
            res.files_seen += 1
            try:
                buf.append((i, parse_record(rec)))
            except RecordError as e:
                res.errors.append((f"record {i}", str(e)))
            if len(buf) >= batch:
                run(buf)
                buf = []
        if buf:
            run(buf)
    return res


# --------------------------------------------------------------------------
# spool files

def spool_files(root: pathlib.Path) -> Iterator[pathlib.Path]:
    """Complete records under ``root``: regular files named *.json, skipping
    hidden directories (the quarantine) and the plugin's *.tmp.<pid> files."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for f in sorted(filenames):
            if f.endswith(".json") and not f.startswith("."):
                yield pathlib.Path(dirpath, f)


def read_file(path: pathlib.Path) -> tuple[bytes, int, int]:
    """Read a regular file without following symlinks: (data, size, mtime_ns)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RecordError("not a regular file")
        chunks, left = [], st.st_size
        while True:
            b = os.read(fd, max(left, 65536))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        return b"".join(chunks), st.st_size, st.st_mtime_ns
    finally:
        os.close(fd)


def quarantine(path: pathlib.Path, spool_root: pathlib.Path,
               qdir: pathlib.Path, reason: str) -> pathlib.Path:
    """Move a bad record into ``qdir`` keeping its spool-relative path, and
    write the reason beside it as <name>.reason.  Returns the new path."""
    try:
        rel = path.relative_to(spool_root)
    except ValueError:
        rel = pathlib.Path(path.name)
    dst = qdir / rel
    qdir.mkdir(parents=True, exist_ok=True, mode=0o750)
    st = os.lstat(qdir)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or \
            st.st_uid != os.geteuid():
        # never write through a directory someone else controls
        raise PermissionError(f"{qdir} is not a directory owned by uid "
                              f"{os.geteuid()}")
    dst.parent.mkdir(parents=True, exist_ok=True, mode=0o750)
    n, cand = 0, dst
    while cand.exists():
        n += 1
        cand = dst.with_name(f"{dst.name}.{n}")
    try:
        os.rename(path, cand)
    except OSError as e:
        if e.errno != 18:  # EXDEV: another file system
            raise
        import shutil   # here: `joulestep job` does not need it
        shutil.move(str(path), str(cand))
    with open(cand.with_name(cand.name + ".reason"), "w", encoding="utf-8",
              errors="backslashreplace") as fh:
        fh.write(reason + "\n")
    return cand


def ingest_paths(conn: sqlite3.Connection, sources: Iterable[os.PathLike],
                 quarantine_dir: os.PathLike | None = None,
                 batch: int = BATCH_RECORDS,
                 progress: Callable[[list], Iterable] | None = None,
                 gap_ns: int = JOB_GAP_NS) -> IngestResult:
    """Ingest spool directories and/or single record files.

    Each batch of ``batch`` records is one transaction.  A record that cannot
    be read, decoded or validated is moved to the quarantine directory
    (default ``<spool>/.quarantine``) and reported; the rest still land.
    ``progress`` wraps the file list (e.g. a click progress bar).
    ``gap_ns``: the gap G of the job identity rule (Ingester).
    """
    res = IngestResult()
    todo: list[tuple[pathlib.Path, pathlib.Path]] = []  # (file, spool root)
    for src in sources:
        src = pathlib.Path(src)
        if src.is_dir():
            todo.extend((f, src) for f in spool_files(src))
        elif src.is_file():
            todo.append((src, src.parent))
        else:
            res.errors.append((src, "no such file or directory"))
    res.files_seen = len(todo)
    known = {}
    if todo:
        known = dict(((p, (s, m)) for p, s, m in conn.execute(
            "SELECT path, size_bytes, mtime_ns FROM spool_files")))
    ing = Ingester(conn, gap_ns)
    pending: list = []   # (path, root, parsed, size, mtime)

    def bad(path, root, reason):
        q = pathlib.Path(quarantine_dir) if quarantine_dir else root / ".quarantine"
        try:
            dst = quarantine(path, root, q, reason)
        except OSError as e:
            res.errors.append((path, f"{reason} (could not quarantine: {e})"))
            return
        res.quarantined.append((path, dst, reason))

    def commit(items):
        new = dup = 0
        conn.execute("BEGIN IMMEDIATE")
        try:
            for path, root, p, size, mtime in items:
                if ing.add(p):
                    new += 1
                else:
                    dup += 1
            ing.flush()
            conn.executemany(
                "INSERT OR REPLACE INTO spool_files (path, size_bytes, mtime_ns) "
                "VALUES (?,?,?)", [(str(i[0]), i[3], i[4]) for i in items])
            conn.execute("COMMIT")
            res.new_steps += new
            res.duplicate_steps += dup
            return
        except sqlite3.IntegrityError:
            conn.execute("ROLLBACK")
            ing.reset()
        except BaseException:
            conn.execute("ROLLBACK")
            ing.reset()
            raise
        # A record the validator let through broke a constraint: redo the
        # batch with one savepoint per record to find it; the rest land.
        new = dup = 0
        failed = []
        conn.execute("BEGIN IMMEDIATE")
        try:
            for path, root, p, size, mtime in items:
                conn.execute("SAVEPOINT rec")
                try:
                    added = ing.add(p)
                    ing.flush()
                    conn.execute("INSERT OR REPLACE INTO spool_files "
                                 "(path, size_bytes, mtime_ns) VALUES (?,?,?)",
                                 (str(path), size, mtime))
                    conn.execute("RELEASE rec")
                except sqlite3.IntegrityError as e:
                    conn.execute("ROLLBACK TO rec")
                    conn.execute("RELEASE rec")
                    ing.reset()
                    failed.append((path, root, f"database constraint: {e}"))
                    continue
                if added:
                    new += 1
                else:
                    dup += 1
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            ing.reset()
            raise
        res.new_steps += new
        res.duplicate_steps += dup
        bad_later.extend(failed)

    bad_later: list = []
    with _no_gc():
        _ingest_loop(progress(todo) if progress else todo, known, res, pending,
                     bad, commit, batch)
    for path, root, reason in bad_later:
        bad(path, root, reason)
    return res


def _ingest_loop(it, known, res, pending, bad, commit, batch):
    for path, root in it:
        if not _text_ok(str(path)):  # undecodable bytes, as surrogate escapes
            bad(path, root, "file name is not valid UTF-8 (the plugin never "
                "writes such names)")
            continue
        try:
            data, size, mtime = read_file(path)
        except FileNotFoundError:
            continue  # vanished (quarantined or cleaned up by someone else)
        except (OSError, RecordError) as e:
            res.errors.append((path, f"cannot read: {e}"))
            continue
        if known.get(str(path)) == (size, mtime):
            res.files_skipped += 1
            continue
        try:
            rec = json.loads(data)
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            # RecursionError: nested deeper than the decoder's stack
            what = "truncated" if isinstance(e, json.JSONDecodeError) and \
                e.pos >= len(data.rstrip()) else "malformed"
            bad(path, root, f"{what} JSON: {e}")
            continue
        try:
            p = parse_record(rec)
        except RecordError as e:
            bad(path, root, f"invalid record: {e}")
            continue
        pending.append((path, root, p, size, mtime))
        if len(pending) >= batch:
            commit(pending)
            pending.clear()
    if pending:
        commit(pending)
