"""The store's one dialect seam: SQLite (default) or PostgreSQL 15.

Every query in joulestep is written once, in the SQL both engines take,
with ``?`` placeholders.  :func:`open_target` returns a connection whose
``execute``/``executemany`` take that SQL on either engine:

- SQLite: a plain :class:`sqlite3.Connection` (subclass), so the embedded
  default pays nothing for the seam;
- PostgreSQL (a ``postgresql://`` URL): psycopg 3 in autocommit mode behind
  :class:`PgConnection`, which translates each statement once (``?`` ->
  ``%s``, ``BEGIN IMMEDIATE`` -> ``BEGIN``) and caches the result.

The few things that must differ are methods of both connection classes,
named for what they do (``dialect``, ``insert_many``, ``reserve_ids``,
``lock_keys``, ``columns``, ``IntegrityError``, ``RetryError``), and
:func:`pg_ddl`, the substitution that turns the migrations' SQLite DDL into
PostgreSQL's (docs/design.md, "Store engines").
"""
from __future__ import annotations

import contextlib
import functools
import operator
import re
import sqlite3
from itertools import chain

SQLITE = "sqlite"
POSTGRESQL = "postgresql"
URL_PREFIXES = ("postgresql://", "postgres://")


def is_url(target) -> bool:
    """True when ``target`` names a PostgreSQL database (a libpq URL)."""
    return isinstance(target, str) and target.startswith(URL_PREFIXES)


def redact(url: str) -> str:
    """A URL fit for messages: any password replaced by ***."""
    return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)


# --------------------------------------------------------------------------
# SQLite

#: SQLite's limit of bound parameters per statement (999 before 3.32)
MAX_PARAMS = 32766 if sqlite3.sqlite_version_info >= (3, 32) else 999
#: rows per multi-row INSERT (insert_many) below the largest: 4**k
LADDER = 4


_IS_NONE = functools.partial(operator.is_, None)


class SqliteConnection(sqlite3.Connection):
    """sqlite3.Connection plus the seam's methods (no wrapper: no cost)."""
    dialect = SQLITE
    IntegrityError = sqlite3.IntegrityError
    #: errors after which a whole transaction may simply be run again
    RetryError = ()
    Error = sqlite3.Error
    #: what store.connect opened (a path): a second connection to the same
    #: store opens it again (report.py's concurrent read of the grid's cells)
    target = None
    _ins: dict
    _nulls: dict

    def insert_many(self, table: str, cols: tuple, rows, keys=None) -> None:
        """Plain INSERT of many rows (COPY on PostgreSQL) in multi-row
        statements (``VALUES (...), (...)``): per row, the fewer statements
        the less time, so as many rows per statement as the bound-parameter
        limit allows, the remainder in statements of 4**k rows (a few sizes,
        each prepared once: sqlite3 caches them).  With ``keys`` (a tuple
        per row), each row written is keys[i] + rows[i], joined as the
        values are bound.  Every row has len(cols) values (the callers build
        them so).

        A NULL costs the sqlite3 module ~3,300 instructions to bind (it
        tries to adapt None first), more than SQLite spends storing it: a
        column that is NULL in every row and whose default is NULL is left
        out of the statements (the stored rows are the same)."""
        if not isinstance(rows, list):
            rows = list(rows)
        if not rows:
            return
        cols, rows = self._null_free(table, cols, rows)
        self._insert_rows(table, cols, rows, keys)

    def _null_free(self, table: str, cols: tuple, rows: list) -> tuple:
        """(columns, rows) without the columns that are NULL in every row
        and whose default is NULL: leaving them out stores the same rows,
        in the same order (the keys they get).  Only the columns NULL in
        the first row are looked at, by identity (a comparison with None
        costs more than the NULL's binding)."""
        first = rows[0]
        nk = len(cols) - len(first)             # key columns come first
        drop = [j for j, v in enumerate(first) if v is None]
        if drop:
            nullable = self._null_default(table)
            drop = [j for j in drop if cols[nk + j] in nullable and
                    all(map(_IS_NONE, map(operator.itemgetter(j), rows)))]
        if not drop:
            return cols, rows
        keep = [j for j in range(len(first)) if j not in drop]
        get = operator.itemgetter(*keep) if len(keep) > 1 else \
            (lambda r, k=keep[0]: (r[k],))
        return cols[:nk] + tuple(cols[nk + j] for j in keep), list(map(get, rows))

    def _null_default(self, table: str) -> frozenset:
        """The columns of a table whose default is NULL (leaving them out of
        an INSERT stores NULL)."""
        try:
            return self._nulls[table]
        except AttributeError:
            self._nulls = {}
        except KeyError:
            pass
        got = self._nulls[table] = frozenset(
            r[1] for r in self.execute(f"PRAGMA table_info({table})") if r[4] is None)
        return got

    def _insert_rows(self, table: str, cols: tuple, rows: list, keys) -> None:
        n, done = len(rows), 0
        for size, sql in self._insert_plan(table, cols):
            k = (n - done) // size
            if not k:
                continue
            spans = list(map(slice, range(done, n, size),
                             range(done + size, done + k * size + 1, size)))
            if keys is None:
                parts = map(rows.__getitem__, spans)
            else:   # each row's key tuple, then the row (zip reuses its pair)
                parts = map(chain.from_iterable, map(zip, map(keys.__getitem__, spans),
                                                     map(rows.__getitem__, spans)))
            self.executemany(sql, [tuple(chain.from_iterable(p)) for p in parts])
            done += k * size
            if done == n:
                return

    def _insert_plan(self, table: str, cols: tuple) -> list:
        """[(rows, INSERT statement)] of insert_many, largest first, down to 1."""
        key = (table, cols)
        try:
            return self._ins[key]
        except AttributeError:
            self._ins = {}
        except KeyError:
            pass
        head = f"INSERT INTO {table} ({', '.join(cols)}) VALUES "
        row = f"({', '.join('?' * len(cols))})"
        top = max(1, MAX_PARAMS // len(cols))
        sizes = [top] + [LADDER ** k for k in range(8, -1, -1) if LADDER ** k < top]
        plan = self._ins[key] = [(s, head + ", ".join([row] * s)) for s in sizes]
        return plan

    def reserve_ids(self, table: str, col: str, n: int) -> range:
        """n unused values of an INTEGER PRIMARY KEY, above the stored ones
        and above those reserved before (maybe not written yet).  Valid in
        a write transaction (BEGIN IMMEDIATE: no other writer)."""
        top = self.execute(f"SELECT coalesce(max({col}), 0) FROM {table}").fetchone()[0]
        try:
            tops = self._tops
        except AttributeError:
            tops = self._tops = {}
        top = max(top, tops.get(table, 0))
        tops[table] = top + n
        return range(top + 1, top + 1 + n)

    def lock_keys(self, keys) -> None:
        """Serialize writers per key: BEGIN IMMEDIATE already serializes all."""

    def columns(self, table: str) -> list[tuple[str, str]]:
        """(name, declared type) of a table's columns, in order."""
        return [(r[1], r[2].upper()) for r in
                self.execute(f"PRAGMA table_info({table})")]


def open_sqlite(path: str, read_only: bool) -> SqliteConnection:
    if read_only:
        return sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None,
                               timeout=30.0, factory=SqliteConnection)
    return sqlite3.connect(path, isolation_level=None, timeout=30.0,
                           factory=SqliteConnection)


# --------------------------------------------------------------------------
# PostgreSQL

_STATEMENTS = {"BEGIN IMMEDIATE": "BEGIN"}


def translate(sql: str, params: bool) -> str:
    """A statement in the SQL both engines take, for psycopg."""
    sql = _STATEMENTS.get(sql, sql)
    if params:
        sql = sql.replace("%", "%%").replace("?", "%s")
    return sql


def lock_key(key) -> int:
    """A signed 64-bit advisory-lock key for a (text, int) pair."""
    a, b = key
    import zlib     # here: only PostgreSQL's advisory locks need it
    h = (zlib.crc32(str(a).encode()) << 32) ^ (int(b) & 0xFFFFFFFF) ^ (int(b) >> 32)
    return h - (1 << 64) if h >= 1 << 63 else h


class PgConnection:
    """psycopg 3 connection (autocommit: callers BEGIN/COMMIT themselves,
    as with sqlite3's isolation_level=None) taking ``?`` SQL."""
    dialect = POSTGRESQL
    target = None           # the URL store.connect opened (SqliteConnection)

    def __init__(self, raw):
        import psycopg
        self.raw = raw
        self._sql: dict = {}
        self._seq: dict = {}
        self.IntegrityError = psycopg.IntegrityError
        self.RetryError = (psycopg.errors.SerializationFailure,
                           psycopg.errors.DeadlockDetected)
        self.Error = psycopg.Error

    def _tr(self, sql: str, params: bool) -> str:
        key = (sql, params)
        t = self._sql.get(key)
        if t is None:
            t = self._sql[key] = translate(sql, params)
        return t

    def execute(self, sql: str, params=None):
        cur = self.raw.cursor()
        has = params is not None
        cur.execute(self._tr(sql, has), tuple(params) if has else None)
        return cur

    def executemany(self, sql: str, rows):
        cur = self.raw.cursor()
        cur.executemany(self._tr(sql, True), rows)
        return cur

    def insert_many(self, table: str, cols: tuple, rows, keys=None) -> None:
        cur = self.raw.cursor()
        with cur.copy(f"COPY {table} ({', '.join(cols)}) FROM STDIN") as cp:
            w = cp.write_row
            for r in (rows if keys is None else map(tuple.__add__, keys, rows)):
                w(r)

    def reserve_ids(self, table: str, col: str, n: int) -> list:
        seq = self._seq.get((table, col))
        if seq is None:
            seq = self._seq[(table, col)] = self.execute(
                "SELECT pg_get_serial_sequence(?, ?)", (table, col)).fetchone()[0]
        return [r[0] for r in self.execute(
            "SELECT nextval(?) FROM generate_series(1, ?)", (seq, n))]

    def lock_keys(self, keys) -> None:
        """Transaction-scoped advisory locks on the keys, taken in one
        sorted order (so two writers never deadlock on them)."""
        ks = sorted({lock_key(k) for k in keys})
        if ks:
            self.execute("SELECT count(pg_advisory_xact_lock(k)) FROM "
                         "unnest(?::bigint[]) AS u(k)", (ks,)).fetchone()

    def columns(self, table: str) -> list[tuple[str, str]]:
        return [(n, "INTEGER" if t in ("bigint", "integer", "smallint") else t.upper())
                for n, t in self.execute(
                    "SELECT column_name, data_type FROM information_schema.columns "
                    "WHERE table_schema = current_schema() AND table_name = ? "
                    "ORDER BY ordinal_position", (table,))]

    def close(self) -> None:
        self.raw.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _numeric_loader(psycopg):
    """sum() of BIGINT is NUMERIC in PostgreSQL: load it as int when whole,
    else float, as sqlite3 returns such sums."""
    from psycopg.adapt import Loader

    class NumericLoader(Loader):
        def load(self, data):
            s = bytes(data)
            if b"." in s or b"e" in s.lower() or b"N" in s:
                return float(s)
            return int(s)
    return NumericLoader


def open_pg(url: str) -> PgConnection:
    try:
        import psycopg
    except ImportError:
        raise ImportError("a postgresql:// database needs psycopg 3 (Debian: "
                          "python3-psycopg; pip: joulestep[postgresql])") from None
    raw = psycopg.connect(url, autocommit=True)
    raw.adapters.register_loader("numeric", _numeric_loader(psycopg))
    return PgConnection(raw)


# --------------------------------------------------------------------------
# migrations on PostgreSQL

# Patterns as text, compiled (and cached by re) on first use: a SQLite
# store never needs them, and compiling costs start-up time.
_DDL = [
    (r"\bINTEGER PRIMARY KEY\b", "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"),
    (r"\bINTEGER\b", "BIGINT"),           # SQLite's are 64-bit
    (r"\bREAL\b", "DOUBLE PRECISION"),     # SQLite's are doubles
    (r"\)\s*WITHOUT ROWID", ")"),
    (r"PRAGMA user_version\s*=\s*(\d+)", r"UPDATE joulestep_schema SET version = \1"),
]
_DROP_TABLE = r"^\s*(?:--[^\n]*\n\s*)*DROP TABLE (\w+)\s*;?\s*$"


def dropped_table(stmt: str) -> str | None:
    """The table a migration statement that is only ``DROP TABLE t`` drops."""
    m = re.match(_DROP_TABLE, stmt)
    return m.group(1) if m else None


def pg_ddl(stmt: str) -> str:
    """A migration statement (SQLite DDL) as PostgreSQL takes it."""
    for rx, rep in _DDL:
        stmt = re.sub(rx, rep, stmt)
    return stmt


@contextlib.contextmanager
def pg_rebuild_fks(conn: PgConnection):
    """SQLite's table-rebuild procedure (create new, copy, DROP old, RENAME
    new) keeps other tables' foreign keys, which name the table.  In
    PostgreSQL they point at the dropped table itself: ``drop(table)`` saves
    them and drops with CASCADE; they are re-created, by name, on exit.
    The rebuilt table's identity column starts past the rows copied into it
    (its new sequence would otherwise hand out their keys again)."""
    saved, dropped = [], []

    def drop(table: str) -> None:
        saved.extend(conn.execute(
            "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) "
            "FROM pg_constraint WHERE contype = 'f' AND confrelid = ?::regclass "
            "AND conrelid <> confrelid", (table,)).fetchall())
        conn.execute(f"DROP TABLE {table} CASCADE")
        dropped.append(table)
    yield drop
    for rel, name, definition in saved:
        conn.execute(f"ALTER TABLE {rel} ADD CONSTRAINT {name} {definition}")
    for table in dropped:
        for (col,) in conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = ?::regclass "
                "AND attidentity <> ''", (table,)).fetchall():
            conn.execute(f"SELECT setval(pg_get_serial_sequence(?, ?), "
                         f"(SELECT coalesce(max({col}), 0) + 1 FROM {table}), false)",
                         (table, col)).fetchone()
