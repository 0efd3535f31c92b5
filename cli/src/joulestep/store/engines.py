"""Opening a store (SQLite or PostgreSQL, db.py) and its migrations.

The schema lives in versioned migration files ``sql/NNN_name.sql`` (the
repository's top-level sql/; joulestep/sql is a symlink to it, shipped as
package data).
Each file ends with ``PRAGMA user_version = NNN``.  :func:`connect` applies
the pending ones, in one transaction, whenever a database is opened.
"""
from __future__ import annotations

import os
import sqlite3
from typing import TYPE_CHECKING, Iterator

from . import db

if TYPE_CHECKING:
    import pathlib

#: the migrations (a path; text, so that opening a store needs no pathlib:
#: `joulestep job` starts without importing it, docs/cli.md "Start-up")
SQL_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))),
                       "sql")


class StoreError(Exception):
    """A database that cannot be opened or migrated (message says why)."""


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


def engine_extra(num: int, dialect: str):
    """The engine's own part of migration ``num`` (a path), or None:
    ``sql/<dialect>/NNN_name.sql``, run before the shared file.  PostgreSQL's
    row-level security (migration 016) is the one so far; the shared files
    stay plain SQL that both engines (and the sqlite3 shell) take."""
    import pathlib
    d = pathlib.Path(SQL_DIR, dialect)
    hits = sorted(d.glob(f"{num:03d}_*.sql")) if d.is_dir() else []
    return hits[0] if hits else None


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
        raise newer_schema("", v)
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


def newer_schema(where: str, v: int) -> StoreError:
    """The refusal of a store whose schema is newer than this joulestep
    (another host's newer release migrated it): what to do, on one line.
    Refused rather than read: an older release cannot know what a newer
    migration changed (docs/admin-guide.md, "Upgrading")."""
    return StoreError(
        f"database {where + ' ' if where else ''}has schema version {v}, newer than this joulestep "
        f"({latest_version()}): upgrade joulestep on this host to the release "
        "that migrated it; until then records stay in the spool, untouched, "
        "and the next ingest after the upgrade loads them (docs/admin-guide.md, "
        "\"Upgrading\")")


#: the migration that gave users' own PostgreSQL roles their views
USER_VIEWS_VERSION = 17


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
            raise newer_schema("", v)
        for num, path in migrations():
            if num <= v:
                continue
            extra = engine_extra(num, db.POSTGRESQL)
            text = path.read_text(encoding="utf-8")
            if extra is not None:
                text = extra.read_text(encoding="utf-8") + "\n" + text
            with db.pg_rebuild_fks(conn) as drop:
                for stmt in _statements(text):
                    table = db.dropped_table(stmt)
                    if table:
                        drop(table)
                    else:
                        conn.execute(db.pg_ddl(stmt))
            if _pg_version(conn) != num:
                raise StoreError(f"{path.name} did not set the version to {num}")
        if latest >= USER_VIEWS_VERSION:
            # users' own roles read views made from the tables as they are now
            from . import userviews
            userviews.refresh(conn)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return latest


def _create_private(p: str, group: str | None) -> None:
    """A new, empty SQLite file (a valid empty database): mode 0600, or
    0640 and this group (docs/security.md, "Who sees which jobs (the store)"), whatever
    the umask.  SQLite gives its journal the database's mode."""
    gid = None
    if group is not None:
        import grp
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            raise StoreError(f"[paths] db_group: no group {group!r} on this "
                             "host") from None
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC |
                     os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return      # made meanwhile by another ingest: its mode stands
    except OSError as e:
        raise StoreError(f"cannot create {p}: {e.strerror}") from None
    try:
        if gid is not None:
            os.fchown(fd, -1, gid)
        os.fchmod(fd, 0o600 if gid is None else 0o640)
    except OSError as e:
        os.close(fd)
        os.unlink(p)
        raise StoreError(f"cannot give {p} group {group!r}: {e.strerror}") from None
    os.close(fd)


def connect(path: str | os.PathLike, *, write: bool = True,
            create: bool = True, group: str | None = None):
    """Open (and if needed create and migrate) a joulestep database: a
    SQLite file, or a PostgreSQL database named by a ``postgresql://`` URL
    (db.py: the one dialect seam).  A new SQLite file is created 0600, or
    0640 with ``group`` (the config's ``[paths] db_group``).

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
        _create_private(p, group)
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
        raise newer_schema(p, v)
    else:
        try:   # prepared, not run: costs microseconds
            conn.execute("SELECT counted_total_uj FROM steps LIMIT 0")
        except sqlite3.OperationalError:
            conn.close()
            raise StoreError(f"database {p} was made by a pre-release joulestep "
                             "(steps.counted_* missing): move it away and "
                             "ingest the spool again") from None
    conn.target = p
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
        from . import userviews
        userviews.search_path(conn)     # a user's own role: its views first
        v = _pg_version(conn)
        if v > latest_version():
            raise newer_schema(db.redact(url), v)
        if v < latest_version():
            migrate(conn)
    except StoreError:
        conn.close()
        raise
    except conn.Error as e:
        conn.close()
        raise StoreError(f"cannot migrate {db.redact(url)}: {str(e).strip()}") \
            from None
    conn.target = url
    return conn



def may_insert_steps(conn) -> bool:
    """Whether the PostgreSQL role of conn may insert steps (an admin's or
    an ingester's; a reader's may not)."""
    row = conn.execute("SELECT has_table_privilege('steps', 'INSERT')").fetchone()
    return bool(row and row[0])
