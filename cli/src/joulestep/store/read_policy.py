"""What the auto policy's learner reads (autopolicy.py): every phase of the
steps tagged ``app=NAME``, with the step's clock reference and whether its
energy can be trusted.  One query, prepared, on either engine."""
from __future__ import annotations

from typing import NamedTuple


class PhaseRow(NamedTuple):
    """One phase of a step of an app.  ``fmax_khz``: the step's cpuinfo max
    (older records: its base clock); ``baseline``: the plugin ran the
    app's settled kinds at fmax in this job (auto's baseline runs);
    ``uncertain``: the step's energy is
    wrap-uncertain or the phase has none; ``conflict``: another copy of the
    step differs (quarantined, store/ingest.py)."""
    app: str
    kind: str
    step_pk: int
    job_id: int
    account: str | None
    start_ns: int
    duration_ns: int
    energy_uj: int | None
    bytes: int | None
    freq_khz: int | None
    fmax_khz: int | None
    min_ratio: float | None
    uncertain: bool
    conflict: bool
    baseline: bool


_SQL = (
    "SELECT t.value, p.kind, s.step_pk, j.job_id, j.account, s.start_ns, p.duration_ns, "
    "p.energy_cpu_uj + COALESCE(p.energy_dram_uj, 0), p.bytes, p.freq_khz, "
    "COALESCE(s.fmax_khz, s.base_freq_khz), s.freq_min_ratio, "
    "CASE WHEN s.wrap_uncertain = 1 OR p.energy_cpu_uj IS NULL THEN 1 ELSE 0 END, "
    "CASE WHEN EXISTS (SELECT 1 FROM step_conflicts c WHERE c.cluster = j.cluster "
    "AND c.job_id = j.job_id AND c.step_id = s.step_id "
    "AND c.het_component = s.het_component AND c.node = n.name) THEN 1 ELSE 0 END, "
    "COALESCE(s.policy_baseline, 0) "
    "FROM steps s JOIN jobs j ON j.job_pk = s.job_pk JOIN nodes n ON n.node_pk = s.node_pk "
    "JOIN step_tags t ON t.step_pk = s.step_pk AND t.key = 'app' "
    "JOIN phases p ON p.step_pk = s.step_pk")


def app_phases(conn, *, cluster: str | None = None, apps=None,
               accounts=None) -> list[PhaseRow]:
    """Phases of tagged steps, oldest step first; only these apps and
    accounts when given (None: all)."""
    where, args = [], []
    if cluster:
        where.append("j.cluster = ?")
        args.append(cluster)
    for col, vals in (("t.value", apps), ("j.account", accounts)):
        if vals is not None:
            vals = list(vals)
            if not vals:
                return []
            where.append(f"{col} IN ({', '.join('?' * len(vals))})")
            args.extend(vals)
    sql = _SQL + (" WHERE " + " AND ".join(where) if where else "") \
        + " ORDER BY s.start_ns, s.step_pk, p.seq"
    return [PhaseRow(r[0], r[1], int(r[2]), int(r[3]), r[4], int(r[5]), int(r[6]),
                     None if r[7] is None else int(r[7]),
                     None if r[8] is None else int(r[8]),
                     None if r[9] is None else int(r[9]),
                     None if r[10] is None else int(r[10]),
                     None if r[11] is None else float(r[11]), bool(r[12]), bool(r[13]),
                     bool(r[14]))
            for r in conn.execute(sql, args).fetchall()]
