"""The store: SQLite or PostgreSQL (db.py), one concern per module.

- engines.py: opening a database, migrations;
- records.py: the record schema (declared once) and the one checker;
- ingest.py: batches, job identity, nesting, job totals, copies of a step;
- spool.py: spool files, the quarantine, lost documents, ingesting paths.
- db.py: the two engines behind one connection interface;
- the read side, every query the CLI runs, rows and no figures:
  read_jobs.py (one job; a user's jobs), read_report.py (a period's sums
  per group), read_sharing.py (shared-node inputs and estimates),
  read_frames.py (DataFrames, tables), read_exporter.py, read_slurm.py,
  lost.py (lost records); schema.py: sql/schema.sql.

The names callers use are re-exported here.
"""
from __future__ import annotations

import sqlite3  # noqa: F401  (callers catch store.sqlite3 errors)

from . import db  # noqa: F401
from .engines import (SQL_DIR, StoreError, connect, latest_version,  # noqa: F401
                      migrate, migrations, _pg_version)
from .ingest import (BATCH_RECORDS, CONFLICT, IN_CHUNK, JOB_GAP_HOURS,  # noqa: F401
                     JOB_GAP_NS, JOB_TOTAL_COLS, JOB_TOTAL_SQL, NEW, PRESENT,
                     TABLES, IngestResult, Ingester, conflict_count,
                     ingest_records)
from .records import (INACTIVE_POLICIES, RECORD_FORMAT, RECORD_VERSION,  # noqa: F401
                      SCHEMA, Field, Parsed, RecordError, parse_lost,
                      parse_record)
from .spool import (ingest_paths, insert_lost, quarantine, read_file,  # noqa: F401
                    spool_files)
