"""Spool files: finding and reading records, the quarantine, "joulestep-lost"
documents (records the plugin could not write), and ingesting paths."""
from __future__ import annotations

import json
import os
import stat
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from .ingest import (BATCH_RECORDS, CONFLICT, JOB_GAP_NS, NEW, PRESENT,
                     IngestResult, Ingester, _in_rows, _in_transaction, _no_gc)
from .records import LOST_FORMAT, RecordError, _text_ok, parse_lost, parse_record

if TYPE_CHECKING:
    import pathlib

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
    So is a copy of a stored step that differs from it (a conflict: the
    first stored copy wins).  ``progress`` wraps the file list (e.g. a
    click progress bar).  ``gap_ns``: the gap G of the job identity rule
    (Ingester).  Safe to run at the same time as other ingesters on one
    database (on PostgreSQL: one per node, each on its own spool;
    docs/admin-guide.md).
    """
    run = _PathIngest(conn, quarantine_dir, gap_ns)
    todo = run.files(sources)
    # only this spool's files: a central database holds every node's
    known = {p: (sz, m) for p, sz, m in _in_rows(
        conn, "SELECT path, size_bytes, mtime_ns FROM spool_files WHERE path IN ",
        [str(f) for f, _ in todo if _text_ok(str(f))])}
    lost_rows: list = []
    from . import shares
    since = shares.top(conn)
    with _no_gc():
        _ingest_loop(progress(todo) if progress else todo, known, run.res, [],
                     run.bad, run.commit, batch, lost_rows)
    if lost_rows:   # records the plugin could not write
        run.res.lost_records += insert_lost(conn, lost_rows)
    for path, root, reason in run.bad_later:
        run.bad(path, root, reason)
    shares.refresh_after(conn, since)   # the users' roles' estimates
    return run.res


class _PathIngest:
    """One ingest_paths run: its result, and how a batch is committed."""

    def __init__(self, conn, quarantine_dir, gap_ns: int):
        self.conn, self.quarantine_dir = conn, quarantine_dir
        self.res = IngestResult()
        self.ing = Ingester(conn, gap_ns)
        self.bad_later: list = []   # (path, root, reason): after the commits

    def files(self, sources) -> list:
        """(file, spool root) of every record under the sources."""
        import pathlib
        todo = []
        for src in sources:
            src = pathlib.Path(src)
            if src.is_dir():
                todo.extend((f, src) for f in spool_files(src))
            elif src.is_file():
                todo.append((src, src.parent))
            else:
                self.res.errors.append((src, "no such file or directory"))
        self.res.files_seen = len(todo)
        return todo

    def bad(self, path, root, reason: str) -> None:
        import pathlib
        q = pathlib.Path(self.quarantine_dir) if self.quarantine_dir \
            else root / ".quarantine"
        try:
            dst = quarantine(path, root, q, reason)
        except OSError as e:
            self.res.errors.append((path, f"{reason} (could not quarantine: {e})"))
            return
        self.res.quarantined.append((path, dst, reason))

    def _add(self, item, counts: list, failed: list):
        """One record into the batch: counted; a conflict set aside for
        the quarantine (its file is not marked as ingested)."""
        path, root, p, size, mtime = item
        got = self.ing.add(p, str(path))
        counts[got] += 1
        if got == CONFLICT:
            failed.append((path, root, self.ing.last_conflict))
            return None
        return (str(path), size, mtime)

    def _whole(self, items):
        counts, failed = [0, 0, 0], []
        self.ing.prepare([i[2] for i in items])
        seen = [self._add(i, counts, failed) for i in items]
        self.ing.flush()
        self.conn.executemany(_SPOOL_UPSERT, [r for r in seen if r])
        return counts, failed

    def _one_by_one(self, items):
        """One savepoint per record: the records that break a constraint
        are set aside, the rest land."""
        conn, ing = self.conn, self.ing
        counts, failed = [0, 0, 0], []
        ing.prepare([i[2] for i in items])     # every lock at once, in order
        for item in items:
            conn.execute("SAVEPOINT rec")
            try:
                ing.prepare([item[2]])
                row = self._add(item, counts, failed)
                ing.flush()
                if row:
                    conn.execute(_SPOOL_UPSERT, row)
                conn.execute("RELEASE rec")
            except conn.IntegrityError as e:
                conn.execute("ROLLBACK TO rec")
                conn.execute("RELEASE rec")
                ing.reset()
                failed.append((item[0], item[1], "database constraint: "
                               + str(e).strip().splitlines()[0]))
        return counts, failed

    def commit(self, items) -> None:
        conn, ing = self.conn, self.ing
        try:
            counts, failed = _in_transaction(conn, ing, lambda: self._whole(items))
        except conn.IntegrityError:
            # A record the checker let through broke a constraint: redo
            # the batch record by record to find it; the rest land.
            counts, failed = _in_transaction(conn, ing,
                                             lambda: self._one_by_one(items))
        self.res.new_steps += counts[NEW]
        self.res.duplicate_steps += counts[PRESENT]
        self.res.conflicts += counts[CONFLICT]
        self.bad_later.extend(failed)


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
            if isinstance(rec, dict) and rec.get("format") == LOST_FORMAT:
                lost_rows.append(parse_lost(rec))
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



# --------------------------------------------------------------------------
# records the plugin could not write: "joulestep-lost" documents (migration
# 005; docs/reliability.md "Faults: records and counters")
#
# When neither the spool nor the node's fallback ``<state>/pending`` could
# take a step's record, the plugin keeps an empty marker; the node's next
# job prolog or epilog turns it into
# ``<spool>/<cluster>/lost/<job>.<step>.<het>-<incarnation>.<node>.json`` (checked by
# records.parse_lost).  Ingest stores each once (ON CONFLICT DO NOTHING:
# ingesting again changes nothing); lost.py counts them.

_LOST_INSERT = ("INSERT INTO lost_records (cluster, job_id, step_id, het_component, "
                "node, lost_at_ns, reason, step_start_ns, first_reading_ns, "
                "incarnation_ns) VALUES (?,?,?,?,?,?,?,?,?,?) "
                "ON CONFLICT (cluster, job_id, step_id, het_component, node, "
                "incarnation_ns) DO NOTHING")


def insert_lost(conn, rows: list) -> int:
    """Store lost rows (one transaction); the number new."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        n = 0
        for r in rows:
            # a row without the step-start fields (migration 011): NULL;
            # without the incarnation (migration 012): 0, unknown
            r = tuple(r) + (None,) * (9 - len(r))
            n += conn.execute(_LOST_INSERT, r + (0,) * (10 - len(r))).rowcount
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return n
