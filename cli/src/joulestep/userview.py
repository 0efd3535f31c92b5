"""What a user who is not an admin sees of the store: the same rules as the
plugin's user summary (docs/security.md, "Threat model: RAPL side channels").

- A step or phase shorter than its record's ``min_phase_ns`` is shown
  without energy (and without what is computed from it: power, J/GiB, kWh,
  CO2, cost, savings), with a note.
- Every other energy is rounded to the record's ``energy_resolution_uj``
  (the measured zones' maximum power over one 1 ms counter update).
- Records of plugins before these fields: 10 ms and 61 uJ (the counter's
  unit).

Who is an admin (``is_admin``): root, or whoever may write the store (who
could ingest and so change any figure anyway).  Everyone else who can read
the store gets this view from ``joulestep job``; ``--user-view`` gives it to
admins too (what a front end for users should show).  The store file's mode
is the real boundary: a user who can read the database file can read every
figure in it with sqlite3, so a site keeps the store admin-only (0600/0640)
and shows users this view through a front end (docs/security.md).
"""
from __future__ import annotations

import os
from .store import db, engines
from .store.userviews import DEFAULT_MIN_PHASE_NS, DEFAULT_RESOLUTION_UJ  # noqa: F401
HIDDEN = "shorter than min_phase_ms"


def is_admin(db_path, conn=None) -> bool:
    """Root, or someone who may write the store: the file for SQLite; for a
    PostgreSQL URL, a role that may insert steps (readers may only read,
    docs/admin-guide.md "Which engine, and per-node ingest")."""
    if os.geteuid() == 0:
        return True
    if db.is_url(db_path):
        if conn is None:
            return False
        return engines.may_insert_steps(conn)
    try:
        return os.access(db_path, os.W_OK)
    except (TypeError, ValueError):
        return False


def round_uj(v, res: int):
    """v rounded to the nearest multiple of res (halves up); None stays None."""
    if v is None or res <= 1:
        return v
    q, r = divmod(v, res)
    return (q + (r >= res - r)) * res


def rules(min_phase_ns, resolution_uj) -> tuple[int, int]:
    return (DEFAULT_MIN_PHASE_NS if min_phase_ns is None else min_phase_ns,
            DEFAULT_RESOLUTION_UJ if resolution_uj is None else resolution_uj)


def step_row(r: tuple, dur_i: int, energy_i: tuple, counted_i: tuple,
             minp: int, res: int, gpu_in_total: bool = False) -> tuple:
    """A steps row as a user sees it: energy_i = (cpu, dram, total) and
    counted_i likewise, as column indices; totals are the rounded parts' sum,
    the GPUs' part (the total's rest) rounded too when gpu_in_total."""
    r = list(r)
    shown = r[dur_i] >= minp
    for cols in (energy_i, counted_i):
        cpu, dram, tot = cols
        if not shown or r[cpu] is None:
            r[cpu] = r[dram] = r[tot] = None
            continue
        gpu = r[tot] - r[cpu] - (r[dram] or 0) if gpu_in_total and r[tot] is not None else 0
        r[cpu] = round_uj(r[cpu], res)
        r[dram] = round_uj(r[dram], res)
        r[tot] = r[cpu] + (r[dram] or 0) + round_uj(gpu, res)
    return tuple(r)


def gpu_uj(v, shown: bool, res: int):
    """A GPU energy as a user sees it: rounded like RAPL's, none where the
    step or phase is shorter than min_phase_ns (shown False)."""
    return round_uj(v, res) if shown else None


def phase_row(r: tuple, dur_i: int, cpu_i: int, dram_i: int, minp: int,
              res: int) -> tuple[tuple, bool]:
    """(row as a user sees it, hidden)."""
    r = list(r)
    hidden = r[dur_i] < minp and r[cpu_i] is not None
    if hidden:
        r[cpu_i] = r[dram_i] = None
    else:
        r[cpu_i] = round_uj(r[cpu_i], res)
        r[dram_i] = round_uj(r[dram_i], res)
    return tuple(r), hidden


def note(min_phase_ns: int) -> str:
    return f"shorter than min_phase_ms ({min_phase_ns / 1e6:g} ms): energy not shown"
