"""The store (SQLite or PostgreSQL, db.py): opening + migrations, record
validation, ingest.

The schema lives in versioned migration files ``sql/NNN_name.sql`` (the
repository's top-level sql/; joulestep/sql is a symlink to it, shipped as
package data).
Each file ends with ``PRAGMA user_version = NNN``.  :func:`connect` applies
the pending ones, in one transaction, whenever a database is opened.
"""
from __future__ import annotations

import contextlib
import gc
import json
import operator
import os
import re
import sqlite3
import stat
import time
from itertools import accumulate, chain, islice, repeat
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from . import db, nesting

if TYPE_CHECKING:
    import pathlib

#: the migrations (a path; text, so that opening a store needs no pathlib:
#: `joulestep job` starts without importing it, docs/cli.md "Start-up")
SQL_DIR = os.path.join(os.path.dirname(os.path.realpath(__file__)), "sql")
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

def _migration_files() -> list[tuple[int, str]]:
    """(number, file name) of the migrations NNN_name.sql in SQL_DIR, in
    order (os.listdir, not a glob and a pattern: every open of a store asks)."""
    out = []
    for name in sorted(os.listdir(SQL_DIR)):
        num, sep, _ = name.partition("_")
        if sep and num.isdigit() and name.endswith(".sql"):
            out.append((int(num), name))
    return out


def migrations() -> list[tuple[int, pathlib.Path]]:
    import pathlib
    return [(num, pathlib.Path(SQL_DIR, name)) for num, name in _migration_files()]


def latest_version() -> int:
    return max((v for v, _ in _migration_files()), default=0)


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


def migrate(conn) -> int:
    """Apply pending migrations; returns the schema version afterwards."""
    if conn.dialect == db.POSTGRESQL:
        return _migrate_pg(conn)
    return _migrate_sqlite(conn)


def _migrate_sqlite(conn: sqlite3.Connection) -> int:
    """Foreign keys are off while migrations run (SQLite's table-rebuild
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


#: advisory lock held while a PostgreSQL database is migrated
PG_MIGRATE_LOCK = 0x6A6F756C6573  # "joules"


def _pg_version(conn) -> int:
    """The schema version of a PostgreSQL database (0: empty).  It lives in
    the one-row table joulestep_schema, as PRAGMA user_version in SQLite."""
    if conn.execute("SELECT to_regclass('joulestep_schema')").fetchone()[0] is None:
        return 0
    row = conn.execute("SELECT version FROM joulestep_schema").fetchone()
    return row[0] if row else 0


def _migrate_pg(conn) -> int:
    """The same migration files as SQLite, through db.pg_ddl, in one
    transaction under an advisory lock (ingesters on many nodes may open a
    new database at once)."""
    latest = latest_version()
    conn.execute("BEGIN")
    try:
        conn.execute("SELECT pg_advisory_xact_lock(?)", (PG_MIGRATE_LOCK,))
        conn.execute("CREATE TABLE IF NOT EXISTS joulestep_schema "
                     "(version BIGINT NOT NULL)")
        if conn.execute("SELECT version FROM joulestep_schema").fetchone() is None:
            conn.execute("INSERT INTO joulestep_schema (version) VALUES (0)")
        v = _pg_version(conn)
        if v > latest:
            raise StoreError(f"database schema version {v} is newer than this "
                             f"joulestep understands ({latest}); upgrade joulestep")
        for num, path in migrations():
            if num <= v:
                continue
            with db.pg_rebuild_fks(conn) as drop:
                for stmt in _statements(path.read_text(encoding="utf-8")):
                    table = db.dropped_table(stmt)
                    if table:
                        drop(table)
                    else:
                        conn.execute(db.pg_ddl(stmt))
            if _pg_version(conn) != num:
                raise StoreError(f"{path.name} did not set the version to {num}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return latest


def connect(path: str | os.PathLike, *, write: bool = True,
            create: bool = True):
    """Open (and if needed create and migrate) a joulestep database: a
    SQLite file, or a PostgreSQL database named by a ``postgresql://`` URL
    (db.py: the one dialect seam).

    The connection is in autocommit mode (``isolation_level=None``); callers
    open their own transactions.  Foreign keys are on.
    """
    if db.is_url(path):
        return _connect_pg(path)
    p = os.fspath(path)
    if p != ":memory:" and not os.path.exists(p):
        if not create:
            raise StoreError(f"no database at {p} (run `joulestep ingest` "
                             "first, or pass --db)")
        parent = os.path.dirname(p) or "."
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot create {parent}: {e.strerror}") from None
    can_write = p == ":memory:" or (os.access(p, os.W_OK) if os.path.exists(p) else True)
    try:
        if not can_write and write:
            raise StoreError(f"database {p} is not writable by this user")
        conn = db.open_sqlite(p, read_only=not can_write)
        conn.execute("PRAGMA foreign_keys = ON")
        v = conn.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.DatabaseError as e:
        raise StoreError(f"cannot open database {p}: {e}") from None
    latest = latest_version()
    if v < latest:
        if not can_write:
            conn.close()
            raise StoreError(f"database {p} has schema version {v} < "
                             f"{latest} and is read-only here; "
                             "open it once as its owner to migrate it")
        try:
            migrate(conn)
        except sqlite3.DatabaseError as e:
            conn.close()
            raise StoreError(f"cannot migrate {p}: {e}") from None
        except StoreError:
            conn.close()
            raise
    elif v > latest:
        conn.close()
        raise StoreError(f"database {p} has schema version {v}, newer than "
                         f"this joulestep ({latest}); upgrade joulestep")
    else:
        try:   # prepared, not run: costs microseconds
            conn.execute("SELECT counted_total_uj FROM steps LIMIT 0")
        except sqlite3.OperationalError:
            conn.close()
            raise StoreError(f"database {p} was made by a pre-release joulestep "
                             "(steps.counted_* missing): move it away and "
                             "ingest the spool again") from None
    return conn


def _connect_pg(url: str):
    """A PostgreSQL database: the password comes from libpq (PGPASSFILE,
    ~/.pgpass, PGPASSWORD), never from the command line."""
    try:
        conn = db.open_pg(url)
    except ImportError as e:
        raise StoreError(str(e)) from None
    except Exception as e:  # psycopg.Error: its message names the cause
        raise StoreError(f"cannot open database {db.redact(url)}: "
                         f"{str(e).strip()}") from None
    try:
        v = _pg_version(conn)
        if v > latest_version():
            raise StoreError(f"database {db.redact(url)} has schema version {v}, "
                             f"newer than this joulestep ({latest_version()}); "
                             "upgrade joulestep")
        if v < latest_version():
            migrate(conn)
    except StoreError:
        conn.close()
        raise
    except conn.Error as e:
        conn.close()
        raise StoreError(f"cannot migrate {db.redact(url)}: {str(e).strip()}") \
            from None
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
    try:
        return float(v)
    except OverflowError:
        raise RecordError(f"{where}: {str(v)[:20]}... is out of range") from None


def _bool(v, where: str, *, null: bool = True):
    if v is None and null:
        return None
    if type(v) is not bool:
        raise RecordError(f"{where}: expected true or false, got {json.dumps(v)[:40]}")
    return int(v)


class Parsed:
    """One validated record, as rows without their surrogate keys.  (Plain
    classes here and in IngestResult, not dataclasses: generating a
    dataclass costs start-up time that `joulestep job` pays.)"""
    __slots__ = ("cluster", "job", "tags", "node", "step", "zones", "phases", "ranks")

    def __init__(self, cluster: str, job: tuple, tags: list, node: str, step: tuple,
                 zones: list, phases: list, ranks: list):
        self.cluster = cluster
        self.job = job          # jobs columns after job_pk
        self.tags = tags        # [(key, value)]
        self.node = node
        self.step = step        # steps columns after job_pk and node_pk (TABLES["steps"])
        self.zones = zones      # [(name, zone_id, kind, energy_uj, wraps)]
        self.phases = phases    # [(seq, kind, ..., nranks)]
        self.ranks = ranks      # [(seq, rank, start_ns, end_ns, bytes)]

    def __eq__(self, other) -> bool:
        return type(other) is Parsed and all(
            getattr(self, k) == getattr(other, k) for k in self.__slots__)

    def __repr__(self) -> str:
        return "Parsed(" + ", ".join(f"{k}={getattr(self, k)!r}"
                                     for k in self.__slots__) + ")"

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
#: a step id, matched whole (fullmatch: `$` would let a final newline by) and
#: ASCII only (\d would take any Unicode digit)
_STEP_ID = re.compile(r"\d+|batch|extern|interactive|[A-Za-z0-9_.+-]{1,64}", re.ASCII)


def parse_record(rec) -> Parsed:
    """Validate a decoded v1 record; raise RecordError naming the bad field.

    Three paths, one result: the C check (:mod:`joulestep._speedups`, when
    it was built) and :func:`_parse_fast` check a well-formed record in bulk
    and return its rows; anything they do not accept (a bad field, or merely
    a rare shape: null energies, ranks, non-ASCII text, ...) goes to
    :func:`_parse_checked`, which checks field by field and names the first
    bad field.  The fast paths accept only records the checked path
    accepts, with the same rows (tests/fuzz/test_parse_paths.py)."""
    p = _speedups.parse(rec) if _speedups is not None else None
    return _parse_record_py(rec) if p is None else p


def _parse_record_py(rec) -> Parsed:
    """parse_record on the Python paths."""
    try:
        p = _parse_fast(rec)
    except Exception:   # an odd shape (e.g. a missing key): the checked path names it
        p = None
    return _parse_checked(rec) if p is None else p


# ---- the fast path: field specs checked per type signature
#: what each value may be, in _parse_fast's value list (None: checked there)
_I0, _I0N, _I1N, _IN, _S, _SN, _B, _BN, _NN = (
    "int>=0", "int>=0|null", "int>=1|null", "int|null", "str", "str|null",
    "bool", "bool|null", "number|null")
_JOB_F = ("job_id", "submit_time_ns", "first_seen_ns", "start_time_ns", "name",
          "user", "uid", "gid", "account", "partition", "tags")
_STEP_F = ("step_id", "het_component", "node", "node_model", "ntasks", "nnodes",
           "cpus", "ncpus", "exclusive", "policy", "base_freq_khz",
           "freq_min_ratio", "start_ns", "end_ns", "duration_ns", "energy_cpu_uj",
           "energy_dram_uj", "energy_total_uj", "exit_code", "nominal_freq_khz",
           "fixed_freq_khz")
_PROV_F = ("backend", "wrap_uncertain", "sample_period_ns", "errors",
           "plugin_version", "job_source", "freq_control", "min_phase_ns",
           "energy_resolution_uj")
# cluster, job, step, provenance values (stricter than _parse_checked where
# that is simpler: a missing het_component, duration_ns or wrap_uncertain,
# a null energy_cpu_uj go the checked way)
_FAST_SPEC = (
    (_S,)
    + (_I0, _I0N, _I0N, _IN, _SN, _SN, _I0N, _I0N, _SN, _SN, None)
    + (None, _I0, _S, _SN, _I0N, _I0N, _SN, _I0N, _BN, _SN, _I1N, _NN, _I0, _I0,
       _I0, _I0, _I0N, _I0N, _IN, _I1N, _I1N)
    + (_SN, _B, _I0N, None, _SN, _SN, _SN, _I0N, _I1N))
_NONE_T = type(None)
_FAST_TYPES = {_I0: {int}, _I0N: {int, _NONE_T}, _I1N: {int, _NONE_T},
               _IN: {int, _NONE_T}, _S: {str}, _SN: {str, _NONE_T}, _B: {bool},
               _BN: {bool, _NONE_T}, _NN: {int, float, _NONE_T}}
#: type signature of the value list -> its checks (False: not for the fast path)
_FAST_SIGS: dict = {}
_FAST_SIGS_MAX = 4096
_REC_GET = operator.itemgetter("format", "version", "cluster", "job", "step")
_ZONE_GET = operator.itemgetter("name", "id", "kind", "energy_uj", "wraps")
_EMPTY: dict = {}
_LO64, _HI64 = -(1 << 63), 1 << 63


def _fast_checks(sig: tuple):
    """Getters of the values a type signature needs checked: (strings,
    ints, ints >= 0, ints >= 1), each with sentinels ("" and 1, the two
    last values) so every getter returns a tuple; False when a type is not
    one the field may have."""
    strs, ints, nonneg, pos = [], [], [], []
    for i, (t, kind) in enumerate(zip(sig, _FAST_SPEC)):
        if kind is None:
            continue
        if t not in _FAST_TYPES[kind]:
            return False
        if t is str:
            strs.append(i)
        elif t is int:
            ints.append(i)
            if kind in (_I0, _I0N):
                nonneg.append(i)
            elif kind == _I1N:
                pos.append(i)
    s, n = len(_FAST_SPEC), len(_FAST_SPEC) + 1
    return (operator.itemgetter(s, s, *strs), operator.itemgetter(n, n, *ints),
            operator.itemgetter(n, n, *nonneg), operator.itemgetter(n, n, *pos))


def _parse_fast(rec):
    """A well-formed record's rows, checked in bulk; None for anything
    else (parse_record then asks _parse_checked, which names the fault)."""
    if type(rec) is not dict:
        return None
    fmt, ver, cluster, job, step = _REC_GET(rec)
    if fmt != RECORD_FORMAT or ver != RECORD_VERSION or type(job) is not dict \
            or type(step) is not dict:
        return None
    prov = rec.get("provenance") or _EMPTY
    if type(prov) is not dict:
        return None
    vals = [cluster, *map(job.get, _JOB_F), *map(step.get, _STEP_F),
            *map(prov.get, _PROV_F), "", 1]
    sig = tuple(map(type, vals))
    checks = _FAST_SIGS.get(sig)
    if checks is None:
        checks = _fast_checks(sig)
        if len(_FAST_SIGS) < _FAST_SIGS_MAX:
            _FAST_SIGS[sig] = checks
    if not checks:
        return None
    g_str, g_int, g_nonneg, g_pos = checks
    if not "".join(g_str(vals)).isascii():
        return None
    ints = g_int(vals)
    if min(ints) < _LO64 or max(ints) >= _HI64 or min(g_nonneg(vals)) < 0 \
            or min(g_pos(vals)) < 1:
        return None
    (cluster, job_id, submit, first, jstart, name, user, uid, gid, account,
     partition, tags_obj,
     step_id, het, node, node_model, ntasks, nnodes, cpus, ncpus, exclusive,
     policy, base_freq, fmin, start, end, dur, cpu, dram, total, exit_code,
     nominal, fixed,
     backend, wrap, sample, errors, plugin_version, _job_source, freq_control,
     min_phase, eres, _, _) = vals
    if not cluster or not node or end < start:
        return None
    if total is None:
        total = cpu + (dram or 0)
        if total >= _HI64:
            return None
    if type(step_id) is int:
        step_id = str(step_id)
    elif type(step_id) is not str:
        return None
    if not _STEP_ID.fullmatch(step_id):
        return None
    if first is None:
        if submit is None:
            return None
        first = submit
    if not tags_obj:
        tags = []
    elif type(tags_obj) is dict:
        keys, tvals = tuple(tags_obj), tuple(tags_obj.values())
        if set(map(type, tvals)) != _STRS or not all(keys) or \
                not "".join(keys + tvals).isascii():
            return None
        tags = list(tags_obj.items())
    else:
        return None
    if not errors:
        errors_json = "[]"
    elif type(errors) is list and set(map(type, errors)) == _STRS:
        errors_json = json.dumps(errors)
    else:
        return None
    zl = rec.get("zones") or []
    if type(zl) is not list:
        return None
    zones = _zone_rows(zl, [len(zl)]) if zl else []
    if zones is None:
        return None
    pl = rec.get("phases") or []
    if type(pl) is not list:
        return None
    phases = _phases_fast(pl)
    if phases is None:
        return None
    job_row = (cluster, job_id, min(first, start), end, submit, jstart, name, user,
               uid, gid, account, partition)
    step_row = (
        step_id, het, node_model, ntasks, nnodes, cpus, ncpus,
        None if exclusive is None else int(exclusive),
        policy, int(policy is not None and policy not in INACTIVE_POLICIES),
        base_freq, None if fmin is None else float(fmin),
        start, end, dur, cpu, dram, total, exit_code, backend, int(wrap), sample,
        errors_json, plugin_version, cpu, dram, total, dur, nominal, fixed,
        freq_control, min_phase, eres)
    return Parsed(cluster, job_row, tags, node, step_row, zones, phases, [])


# ---- the batch path: a whole batch checked a field at a time
#: records checked together by the batch path: its columns and rows stay
#: in the CPU caches (a 1,000-record batch of the bench is ~10 MB of dicts;
#: 100 records check ~5-10 % faster than 250 on freshly made records)
PARSE_CHUNK = 100


def parse_batch(recs: list) -> list:
    """parse_record over a batch: per record, its Parsed or the RecordError
    parse_record raises (returned, not raised).  The C check takes each
    record it can; the rest go :func:`_parse_batch_py`'s way."""
    if _speedups is None:
        return _parse_batch_py(recs)
    out = _speedups.parse_list(recs if type(recs) is list else list(recs))
    todo = [i for i, p in enumerate(out) if p is None]
    if todo:
        for i, p in zip(todo, _parse_batch_py([recs[i] for i in todo])):
            out[i] = p
    return out


def _parse_batch_py(recs: list) -> list:
    """parse_batch on the Python paths.  Well-formed records of the common
    shape are checked PARSE_CHUNK at a time, one field at a time across the
    chunk (:func:`_parse_batch`: one builtin pass per field per chunk, not
    per record); a chunk where any check fails goes record by record (the
    same result)."""
    out = []
    for i in range(0, len(recs), PARSE_CHUNK):
        chunk = recs[i:i + PARSE_CHUNK]
        try:
            got = _parse_batch(chunk)
        except Exception:   # an odd shape: the per-record paths sort it out
            got = None
        if got is not None:
            out += got
            continue
        for rec in chunk:
            try:
                out.append(_parse_record_py(rec))
            except RecordError as e:
                out.append(e)
    return out


_get_prov = operator.methodcaller("get", "provenance")
_EXCLUSIVE = {True: 1, False: 0, None: None}
#: step ids _STEP_ID accepted (a handful at a site: 0, 1, ..., batch, extern)
_GOOD_STEP_IDS: set = set()
_GOOD_STEP_IDS_MAX = 4096
_VERSIONS, _FORMATS = {RECORD_VERSION}, {RECORD_FORMAT}
_LISTS, _NULLS = {list}, {type(None)}
_STEP_ID_TYPES = {int, str}


def _column_ok(col: tuple, kind: str) -> bool:
    """One field of _parse_fast's value list over a batch holds only what
    its kind allows (what _fast_checks checks per record)."""
    ts = set(map(type, col))
    if not ts <= _FAST_TYPES[kind]:
        return False
    if str in ts:   # an empty cluster or node (_S): _parse_fast says no
        return "".join(filter(None, col)).isascii() and (kind != _S or all(col))
    if int not in ts:
        return True                     # bools, nulls, floats: no range
    if kind == _I1N and 0 in col:       # (None == 0 is False; no bools here)
        return False
    if float in ts:
        col = tuple(v for v in col if type(v) is int)
    elif _NONE_T in ts:
        col = tuple(filter(None, col))  # 0 goes too: 0 is in every range left
        if not col:
            return True
    return min(col) >= (_LO64 if kind in (_IN, _NN) else 0) and max(col) < _HI64


def _tags_batch(objs: tuple):
    """Each record's job.tags as rows, or None (as _parse_fast checks)."""
    if set(map(type, objs)) != _DICTS:
        objs = tuple(t or _EMPTY for t in objs)
        if set(map(type, objs)) != _DICTS:
            return None
    keys = tuple(chain.from_iterable(objs))
    if keys:
        vals = tuple(chain.from_iterable(map(dict.values, objs)))
        if set(map(type, vals)) != _STRS or not all(keys) or \
                not "".join(keys + vals).isascii():
            return None
    return list(map(list, map(dict.items, objs)))


def _record_index(lens: list) -> tuple:
    """For children flattened over a batch: the index of each one's record."""
    return tuple(chain.from_iterable(map(repeat, range(len(lens)), lens)))


def _zone_rows(flat: list, lens: list):
    """Rows of a batch's zones (flattened), checked as _parse_fast does."""
    if set(map(type, flat)) != _DICTS:
        return None
    rows = list(map(_ZONE_GET, flat))
    names, ids, kinds, en, wr = zip(*rows)
    txt = names + ids
    nums = en + wr
    if set(map(type, txt)) != _STRS or not all(txt) or \
            not set(map(type, kinds)) <= _NSTRS or \
            not "".join(txt + tuple(filter(None, kinds))).isascii() or \
            set(map(type, nums)) != _INTS or min(nums) < 0 or \
            max(nums) >= _HI64 or len(set(zip(_record_index(lens), ids))) != len(ids):
        return None
    return rows


def _phase_rows(flat: list, lens: list):
    """Rows of a batch's phases (flattened), checked as _phases_fast does:
    seq unique and parent_seq one of them within each record."""
    got = _phase_columns(flat)
    if got is None:
        return None
    rows, seq, parent = got
    pairs = None
    if seq != tuple(chain.from_iterable(map(range, lens))):    # 0, 1, ...: unique
        pairs = set(zip(_record_index(lens), seq))
        if len(pairs) != len(seq):
            return None
    if parent.count(None) != len(parent):      # a phase names a parent
        idx = _record_index(lens)
        if pairs is None:
            pairs = set(zip(idx, seq))
        if not {(i, p) for i, p in zip(idx, parent) if p is not None} <= pairs:
            return None
    return rows


def _children_batch(recs: list, key: str, rows_of):
    """Each record's rows of a list field (zones, phases), checked over the
    whole batch at once by rows_of; None when a check fails."""
    lists = [r.get(key) or [] for r in recs]
    if set(map(type, lists)) != _LISTS:
        return None
    lens = list(map(len, lists))
    flat = list(chain.from_iterable(lists))
    if not flat:
        return list(map(list, repeat((), len(recs))))
    rows = rows_of(flat, lens)
    if rows is None:
        return None
    ends = list(accumulate(lens))
    return list(map(rows.__getitem__, map(slice, [0] + ends[:-1], ends)))


def _parse_batch(recs: list):
    """[_parse_fast(r) for r in recs] when it holds no None (every record
    well formed and of the common shape), each check made one field at a
    time over the batch; None otherwise (tests/fuzz/test_parse_paths.py)."""
    n = len(recs)
    if not n or set(map(type, recs)) != _DICTS:
        return None
    fmt, ver, cluster, job, step = zip(*map(_REC_GET, recs))
    if set(fmt) != _FORMATS or set(ver) != _VERSIONS or \
            set(map(type, job)) != _DICTS or set(map(type, step)) != _DICTS:
        return None
    prov = tuple(map(_get_prov, recs))
    if set(map(type, prov)) != _DICTS:
        prov = tuple(p or _EMPTY for p in prov)
        if set(map(type, prov)) != _DICTS:
            return None
    cols = [cluster]
    for objs, keys in ((job, _JOB_F), (step, _STEP_F), (prov, _PROV_F)):
        cols += [tuple(map(dict.get, objs, repeat(k))) for k in keys]
    for col, kind in zip(cols, _FAST_SPEC):
        if kind is not None and not _column_ok(col, kind):
            return None
    (cluster, job_id, submit, first, jstart, name, user, uid, gid, account,
     partition, tags_obj,
     step_id, het, node, node_model, ntasks, nnodes, cpus, ncpus, exclusive,
     policy, base_freq, fmin, start, end, dur, cpu, dram, total, exit_code,
     nominal, fixed,
     backend, wrap, sample, errors, plugin_version, _job_source, freq_control,
     min_phase, eres) = cols
    if not all(map(operator.ge, end, start)):
        return None
    if None in total:
        total = tuple(c + (d or 0) if t is None else t
                      for c, d, t in zip(cpu, dram, total))
        if max(total) >= _HI64:
            return None
    if set(map(type, step_id)) != _STRS:
        if not set(map(type, step_id)) <= _STEP_ID_TYPES:
            return None
        step_id = tuple(str(s) if type(s) is int else s for s in step_id)
    new_ids = set(step_id) - _GOOD_STEP_IDS
    if new_ids:
        if not all(map(_STEP_ID.fullmatch, new_ids)):
            return None
        if len(_GOOD_STEP_IDS) + len(new_ids) <= _GOOD_STEP_IDS_MAX:
            _GOOD_STEP_IDS.update(new_ids)
    if None in first:
        first = tuple(s if f is None else f for s, f in zip(submit, first))
        if None in first:
            return None
    tags = _tags_batch(tags_obj)
    if tags is None:
        return None
    if any(errors):
        errors_json = []
        for e in errors:
            if not e:
                errors_json.append("[]")
            elif type(e) is list and set(map(type, e)) == _STRS:
                errors_json.append(json.dumps(e))
            else:
                return None
    else:
        errors_json = repeat("[]")
    zones = _children_batch(recs, "zones", _zone_rows)
    if zones is None:
        return None
    phases = _children_batch(recs, "phases", _phase_rows)
    if phases is None:
        return None
    active = {p: int(p is not None and p not in INACTIVE_POLICIES) for p in set(policy)}
    if set(map(type, fmin)) != _NULLS:
        fmin = tuple(None if f is None else float(f) for f in fmin)
    job_rows = zip(cluster, job_id, map(min, first, start), end, submit, jstart,
                   name, user, uid, gid, account, partition)
    step_rows = zip(step_id, het, node_model, ntasks, nnodes, cpus, ncpus,
                    map(_EXCLUSIVE.__getitem__, exclusive), policy,
                    map(active.__getitem__, policy), base_freq, fmin, start, end,
                    dur, cpu, dram, total, exit_code, backend, map(int, wrap),
                    sample, errors_json, plugin_version, cpu, dram, total, dur,
                    nominal, fixed, freq_control, min_phase, eres)
    return list(map(Parsed, cluster, job_rows, tags, node, step_rows, zones, phases,
                    map(list, repeat((), n))))


def _parse_checked(rec) -> Parsed:
    """parse_record field by field: names the first bad field."""
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
    if not isinstance(step_id, str) or not _STEP_ID.fullmatch(step_id):
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
    # what the job's user may see (migration 004, userview.py)
    step_row += (
        _int(prov.get("min_phase_ns"), "provenance.min_phase_ns", null=True, minimum=0),
        _int(prov.get("energy_resolution_uj"), "provenance.energy_resolution_uj",
             null=True, minimum=1))

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
        kind = _str(z.get("kind"), f"{w}.kind", null=True)
        # null: the zone's counter went back or vanished (zones[].uncertain):
        # no step_zones row, rather than a wrong number
        zuj = _int(_get(z, "energy_uj", w), f"{w}.energy_uj", null=True, minimum=0)
        wraps = _int(z.get("wraps", 0), f"{w}.wraps", minimum=0)
        if zuj is not None:
            zones.append((name, zid, kind, zuj, wraps))

    pl = rec.get("phases") or []
    if not isinstance(pl, list):
        raise RecordError("phases: expected a list")
    phases = _phases_fast(pl)
    if phases is not None:
        return Parsed(cluster, job_row, tags, node, step_row, zones, phases, [])
    phases, ranks = [], []
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


_INT64 = (-(1 << 63), (1 << 63) - 1)
_NONE = type(None)
_INTS, _NINTS = {int}, {int, _NONE}
_STRS, _NSTRS = {str}, {str, _NONE}
_DICTS = {dict}
_PHASE_LEN = {len(_PHASE_GET.__reduce__()[1])}
_get_ranks = operator.methodcaller("get", "ranks")


def _phases_fast(pl: list):
    """The phase rows of a record whose phases are all well formed, checked
    a column at a time with builtins (the common case: ~5x faster than
    field by field); None when any check fails or a phase has ranks, and
    the field-by-field path then finds (and names) what is wrong."""
    if not pl:
        return []
    got = _phase_columns(pl)
    if got is None:
        return None
    rows, seq, parent = got
    seqs, parents = set(seq), set(parent)
    parents.discard(None)
    if len(seqs) != len(seq) or not parents <= seqs:
        return None
    return rows


def _phase_columns(pl: list):
    """(rows, seq column, parent_seq column) of a list of phases when every
    value is what its field allows (all but the checks across a record's
    phases: unique seq, parent_seq naming one of them); else None."""
    try:
        try:        # the plugin writes every key: no defaults to merge
            rows = list(map(_PHASE_GET, pl))
            # every phase key and no other: no ranks
            exact = set(map(len, pl)) == _PHASE_LEN
        except KeyError:
            rows = list(map(_PHASE_GET, map(_PHASE_DEFAULTS.__or__, pl)))
            exact = False
        if set(map(type, pl)) != _DICTS or (not exact and any(map(_get_ranks, pl))):
            return None
    except (KeyError, TypeError):
        return None
    (seq, kind, label, depth, parent, pst, pend, pdur, freq, fch, pcpu, pdram,
     pbytes, nranks) = zip(*rows)
    # one pass over the numbers' types: each an int (not a bool) or null.
    # The required ones (seq, depth, start, end, duration) cannot be null:
    # min/max over them and the end >= start test raise TypeError on a
    # None among them (docs/design.md, "Ingest speed", fifth round)
    if not set(map(type, chain(seq, depth, pst, pend, pdur, pcpu, pdram, pbytes,
                               freq, parent, fch, nranks))) <= _NINTS:
        return None
    try:
        # >= 0 and in int64; end >= start bounds start above and end below
        if min(map(min, (seq, depth, pst, pdur))) < 0 or \
                max(map(max, (seq, depth, pend, pdur))) > _INT64[1] or \
                not all(map(operator.ge, pend, pst)):
            return None
    except TypeError:
        return None
    nz = tuple(filter(None, chain(pcpu, pdram, pbytes, freq)))   # 0 goes too
    if nz and (min(nz) < 0 or max(nz) > _INT64[1]) or 0 in freq:
        return None
    nz = tuple(filter(None, chain(parent, fch, nranks)))
    if nz and (min(nz) < _INT64[0] or max(nz) > _INT64[1]):
        return None
    # kind: non-empty text; label: text or null; all ASCII
    if not set(map(type, chain(kind, label))) <= _NSTRS or not all(kind) or \
            not "".join(chain(kind, filter(None, label))).isascii():
        return None
    return rows, seq, parent


#: the C check (cli/src/joulestep/_speedups.c; None where it was not built:
#: the Python paths give the same results, slower)
try:
    from . import _speedups
except ImportError:
    _speedups = None
else:
    _speedups.setup(Parsed, INACTIVE_POLICIES, json.dumps)


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
_JOB_ROWS = (f"SELECT job_pk, {', '.join(_JOB_COLS[2:])}, cluster, job_id "
             "FROM jobs WHERE job_id IN ")
_JOB_UPDATE = (f"UPDATE jobs SET {', '.join(c + ' = ?' for c in _JOB_COLS[2:])}"
               " WHERE job_pk = ?")
# the natural keys of the steps of some jobs
_STEP_KEYS = ("SELECT job_pk, node_pk, step_id, het_component, step_pk, start_ns, "
              "end_ns FROM steps WHERE job_pk IN ")
# steps of a merged job whose natural key the surviving job already has
_STEP_TWINS = (
    "SELECT o.step_pk, o.start_ns, o.end_ns, k.step_pk, k.start_ns, k.end_ns, "
    "o.node_pk FROM steps o JOIN steps k ON k.job_pk = ? AND k.node_pk = "
    "o.node_pk AND k.step_id = o.step_id AND k.het_component = o.het_component"
    " WHERE o.job_pk = ?")
# steps columns after step_pk, job_pk, node_pk, in Parsed.step order
_STEP_COLS = (
    "step_id", "het_component", "node_model", "ntasks", "nnodes", "cpus", "ncpus",
    "exclusive", "policy", "policy_active", "base_freq_khz", "freq_min_ratio",
    "start_ns", "end_ns", "duration_ns", "energy_cpu_uj", "energy_dram_uj",
    "energy_total_uj", "exit_code", "backend", "wrap_uncertain",
    "sample_period_ns", "errors_json", "plugin_version", "counted_cpu_uj",
    "counted_dram_uj", "counted_total_uj", "counted_duration_ns",
    "nominal_freq_khz", "fixed_freq_khz", "freq_control", "min_phase_ns",
    "energy_resolution_uj")
#: (table, columns) of the rows Ingester writes with db insert_many, in
#: the order they are written (parents first)
TABLES = {
    "jobs": ("job_pk",) + _JOB_COLS,
    "steps": ("step_pk", "job_pk", "node_pk") + _STEP_COLS,
    "step_tags": ("step_pk", "key", "value"),
    "step_zones": ("step_pk", "name", "zone_id", "kind", "energy_uj", "wraps"),
    "phases": ("step_pk", "seq", "kind", "label", "depth", "parent_seq",
               "start_ns", "end_ns", "duration_ns", "freq_khz", "freq_change_ns",
               "energy_cpu_uj", "energy_dram_uj", "bytes", "nranks"),
    "phase_ranks": ("step_pk", "seq", "rank", "start_ns", "end_ns", "bytes"),
}
#: the child tables of a step, with the Parsed field that holds their rows
_CHILDREN = tuple((t, operator.attrgetter(f)) for t, f in (
    ("step_tags", "tags"), ("step_zones", "zones"), ("phases", "phases"),
    ("phase_ranks", "ranks")))
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
    got a new or moved step (nesting.py).  A merge of jobs or a step
    replaced by an earlier one (rare) writes the buffers first and works in
    SQL.  The caches are dropped at every flush (another process may change
    jobs between transactions) and by :meth:`reset` after a rollback.
    """

    def __init__(self, conn, gap_ns: int = JOB_GAP_NS):
        self.conn = conn
        self.gap_ns = gap_ns
        self.reset()

    def reset(self):
        self.nodes: dict = {}
        self._clear()

    def _clear(self):
        self.jobs: dict = {}        # (cluster, job_id) -> [[job_pk, first, ...]]
        self.jobs_dirty: dict = {}  # job_pk -> its cached row, to write back
        self.new_jobs: dict = {}    # job_pk -> (cached row, cluster, job_id)
        self.step_keys: dict = {}   # (job_pk, node_pk, step_id, het) -> [pk, st, en]
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
            self.step_keys[r[:4]] = list(r[4:])
            g = r[:2]
            self.group_n[g] = self.group_n.get(g, 0) + 1

    def _job(self, p: Parsed) -> int:
        """job_pk of the record's job: joined, new, or merged."""
        job = p.job
        rows = self.jobs.get(job[:2])
        if rows is None:
            self.prepare([p])
            rows = self.jobs[job[:2]]
        lo, hi = job[2] - self.gap_ns, job[3] + self.gap_ns
        hits = [r for r in rows if r[1] <= hi and r[2] >= lo]
        if not hits:
            pk = self._id("jobs", "job_pk")
            row = [pk, *job[2:]]
            rows.append(row)
            self.new_jobs[pk] = (row, job[0], job[1])
            return pk
        if len(hits) > 1:
            hits.sort(key=lambda r: r[1])
            keep = hits[0]
            for other in hits[1:]:
                self._merge_job(keep, other)
                rows.remove(other)
        else:
            keep = hits[0]
        self._widen(keep, job[2:])
        return keep[0]

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
        with one natural key, the earlier (start_ns, end_ns) stays."""
        conn, kpk, opk = self.conn, keep[0], other[0]
        self._write()               # the merge works on the stored rows
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
        self.touched.discard(opk)
        self.touched.add(kpk)
        self.dirty.update((kpk, n) for n in nodes)
        self.step_keys = {k: v for k, v in self.step_keys.items()
                          if k[0] not in (kpk, opk)}
        self.group_n = {g: v for g, v in self.group_n.items()
                        if g[0] not in (kpk, opk)}
        self._load_steps([kpk])
        self._widen(keep, other[1:])

    # ---------------------------------------------------------------- steps

    def add(self, p: Parsed) -> bool:
        """Insert one record; False when its step was already stored (same
        natural key) with an earlier or equal window."""
        job_pk = self._job(p)
        node_pk = self.nodes.get((p.cluster, p.node)) or self._node(p.cluster, p.node)
        step = p.step
        key = (job_pk, node_pk, step[0], step[1])
        old = self.step_keys.get(key)
        if old is not None:
            if (old[1], old[2]) <= step[12:14]:
                return False
            self._write()           # the old row may still be buffered
            self.conn.execute("DELETE FROM steps WHERE step_pk = ?", (old[0],))
        spk = self._id("steps", "step_pk")
        self.touched.add(job_pk)
        self.step_keys[key] = [spk, step[12], step[13]]
        group = (job_pk, node_pk)
        n = self.group_n.get(group, 0) + (old is None)
        self.group_n[group] = n
        if n > 1:       # alone on its node, a step counts its own (parse)
            self.dirty.add(group)
        self.steps.append((spk, job_pk, node_pk) + step)
        self.added.append(((spk,), p))
        return True

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
        self.lost_records = 0         # new "joulestep-lost" documents (lost.py)
        self.quarantined: list = []
        self.errors: list = []

    def as_dict(self) -> dict:
        return {
            "files_seen": self.files_seen,
            "files_skipped_unchanged": self.files_skipped,
            "steps_new": self.new_steps,
            "steps_already_present": self.duplicate_steps,
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

    def run(items):
        def body():
            ing.prepare([p for _, p in items])
            new = sum(map(ing.add, [p for _, p in items]))
            ing.flush()
            return new
        new = _in_transaction(conn, ing, body)
        res.new_steps += new
        res.duplicate_steps += len(items) - new

    it = iter(records)
    with _no_gc():
        while True:
            first = res.files_seen
            chunk = list(islice(it, batch))
            if not chunk:
                break
            res.files_seen += len(chunk)
            for i, p in enumerate(parse_batch(chunk), first):
                if type(p) is RecordError:
                    res.errors.append((f"record {i}", str(p)))
                else:
                    buf.append((i, p))
            while len(buf) >= batch:
                run(buf[:batch])
                del buf[:batch]
        if buf:
            run(buf)
    return res


# --------------------------------------------------------------------------
# spool files (pathlib is imported here, not when the module loads: opening
# a store for a query does not need it)

def spool_files(root: pathlib.Path) -> Iterator[pathlib.Path]:
    """Complete records under ``root``: regular files named *.json, skipping
    hidden directories (the quarantine) and the plugin's *.tmp.<pid> files."""
    import pathlib
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
    import pathlib
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


_SPOOL_UPSERT = (
    "INSERT INTO spool_files (path, size_bytes, mtime_ns) VALUES (?,?,?) "
    "ON CONFLICT (path) DO UPDATE SET size_bytes = excluded.size_bytes, "
    "mtime_ns = excluded.mtime_ns")


def ingest_paths(conn, sources: Iterable[os.PathLike],
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
    Safe to run at the same time as other ingesters on one database (on
    PostgreSQL: one per node, each on its own spool; docs/admin-guide.md).
    """
    import pathlib
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
    # only this spool's files: a central database holds every node's
    known = {p: (sz, m) for p, sz, m in _in_rows(
        conn, "SELECT path, size_bytes, mtime_ns FROM spool_files WHERE path IN ",
        [str(f) for f, _ in todo if _text_ok(str(f))])}
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

    def whole(items):
        ing.prepare([i[2] for i in items])
        new = sum(map(ing.add, [i[2] for i in items]))
        ing.flush()
        conn.executemany(_SPOOL_UPSERT, [(str(i[0]), i[3], i[4]) for i in items])
        return new, len(items) - new, []

    def one_by_one(items):
        """One savepoint per record: the records that break a constraint
        are set aside, the rest land."""
        new, dup, failed = 0, 0, []
        ing.prepare([i[2] for i in items])     # every lock at once, in order
        for path, root, p, size, mtime in items:
            conn.execute("SAVEPOINT rec")
            try:
                ing.prepare([p])
                added = ing.add(p)
                ing.flush()
                conn.execute(_SPOOL_UPSERT, (str(path), size, mtime))
                conn.execute("RELEASE rec")
            except conn.IntegrityError as e:
                conn.execute("ROLLBACK TO rec")
                conn.execute("RELEASE rec")
                ing.reset()
                failed.append((path, root, "database constraint: "
                               + str(e).strip().splitlines()[0]))
                continue
            new += added
            dup += not added
        return new, dup, failed

    def commit(items):
        try:
            new, dup, failed = _in_transaction(conn, ing, lambda: whole(items))
        except conn.IntegrityError:
            # A record the validator let through broke a constraint: redo
            # the batch record by record to find it; the rest land.
            new, dup, failed = _in_transaction(conn, ing, lambda: one_by_one(items))
        res.new_steps += new
        res.duplicate_steps += dup
        bad_later.extend(failed)

    bad_later: list = []
    lost_rows: list = []
    with _no_gc():
        _ingest_loop(progress(todo) if progress else todo, known, res, pending,
                     bad, commit, batch, lost_rows)
    if lost_rows:   # records the plugin could not write (lost.py)
        from . import lost
        res.lost_records += lost.insert(conn, lost_rows)
    for path, root, reason in bad_later:
        bad(path, root, reason)
    return res


def _ingest_loop(it, known, res, pending, bad, commit, batch, lost_rows):
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
            if isinstance(rec, dict) and rec.get("format") == "joulestep-lost":
                from . import lost
                lost_rows.append(lost.parse(rec))
                continue
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
