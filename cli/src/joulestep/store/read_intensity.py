"""The rows behind a job's CO2 and cost over time (gridfigures.for_job),
read by `joulestep job`'s load step (jobsummary.load) apart from the
figures: whether values were imported, the job's steps and phases with
their zones, and the series around them."""
from __future__ import annotations

from . import intensity as sto

#: the series are read this far around the job (the zone's day, its what-if)
MARGIN_NS = 86400 * 10**9
#: the job's caveat where this role may not read the imported values
UNREADABLE_NOTE = ("the grid's imported values are not readable by this database role "
                   "(GRANT SELECT ON grid_intensity): CO2 and cost are at the static "
                   "factors")


def job_grid(conn, job_pk: int, settings) -> dict:
    """{"have": has_values' answer (False without a zone configured),
    "spans": (steps, phases) of job_spans or None, "series": series_rows
    around the steps or None, "lo_ns"}: nothing more is read than the
    figures need (no zone: nothing at all)."""
    zoned = settings.zone is not None or bool(settings.zone_rules)
    have = sto.has_values(conn) if zoned else False
    out = {"have": have, "spans": None, "series": None, "lo_ns": None}
    if have is not True:
        if settings.zone_rules:         # each step's zone, for the static figures
            out["spans"] = sto.job_spans(conn, job_pk, settings)
        return out
    steps, phases = sto.job_spans(conn, job_pk, settings)
    out["spans"] = (steps, phases)
    if steps:
        lo, hi = min(r[2] for r in steps), max(r[3] for r in steps)
        out["lo_ns"] = lo - MARGIN_NS
        out["series"] = sto.series_rows(conn, {r[1] for r in steps}, lo - MARGIN_NS,
                                        hi + MARGIN_NS)
    return out
