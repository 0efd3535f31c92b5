"""joulestep policy: the auto policy's learner (autopolicy.py) and its file.

Loaded only when the command runs (cli.LazyGroup): see docs/cli.md,
"Start-up".
"""
from __future__ import annotations

import time

import click

from ..options import Ctx, emit, emit_frames, query_options

_RATIOS_HELP = ("Allowed core-clock ratios of fmax, comma-separated, 1 included (default: "
                "the file's, else 1,0.85,0.7,0.55).")


def _names(text):
    return None if text is None else [x for x in text.split(",") if x]


def _settings(prev, ratios, bound_pct, min_samples, baseline_every, default, min_ratio, rows):
    from .. import autopolicy as ap
    prev = prev or {}
    if min_ratio is None:
        seen = [r.min_ratio for r in rows if r.min_ratio is not None]
        min_ratio = max(seen) if seen else 0.5
    if ratios is None and isinstance(prev.get("ratios"), list):
        ratios = ",".join(str(x) for x in prev["ratios"])
    allowed, notes = ap.parse_ratios(ratios, min_ratio)
    if default is not None:
        dmap = ap.parse_default(default)
    elif isinstance(prev.get("default"), dict):
        dmap = prev["default"]
    else:
        dmap = dict(ap.DEFAULT_MAP)
    dmap = {k: max(v, min_ratio) for k, v in dmap.items()}
    s = ap.Settings(ratios=allowed,
                    bound_pct=bound_pct if bound_pct is not None else prev.get("bound_pct", 5.0),
                    min_samples=min_samples or prev.get("min_samples", 3),
                    baseline_every=baseline_every or prev.get("baseline_every", 10),
                    default=dmap)
    return s, notes


def _learn(c: Ctx, file, apps, accounts, **opts):
    from .. import autopolicy as ap
    from ..store import read_policy
    try:
        prev = ap.read_file(file) if file else None
    except ap.PolicyError as e:
        raise click.ClickException(str(e)) from None
    conn = c.connect()
    try:
        rows = read_policy.app_phases(conn, cluster=c.settings().cluster,
                                      apps=_names(apps), accounts=_names(accounts))
    finally:
        conn.close()
    try:
        s, notes = _settings(prev, rows=rows, **opts)
    except ap.PolicyError as e:
        raise click.ClickException(str(e)) from None
    decisions, excluded = ap.learn(rows, s, prev, time.time_ns())
    return prev, s, notes, decisions, excluded


def _common(f):
    f = click.option("--accounts", metavar="A,B",
                     help="Only runs of these accounts count (default: every account).")(f)
    f = click.option("--min-ratio", type=click.FloatRange(0, 1, min_open=True),
                     help="The plugin's min_ratio: no ratio below it is tried (default: the "
                          "highest freq_min_ratio of the records read, else 0.5).")(f)
    f = click.option("--min-samples", type=click.IntRange(2, 1000),
                     help="Runs per ratio before it can be chosen (default 3).")(f)
    f = click.option("--bound-pct", type=click.FloatRange(0, 100),
                     help="Largest slowdown of a phase kind, %% of its time at fmax (default 5).")(f)
    f = click.option("--ratios", help=_RATIOS_HELP)(f)
    return f


@click.group()
def policy():
    """The auto policy: learn each application's I/O-phase clocks from its own
    runs, within a slowdown bound (docs/admin-guide.md, "The auto policy")."""


@policy.command()
@click.option("--save", "save", required=True, type=click.Path(dir_okay=False),
              help="The auto= file the plugin reads; read first (its states and windows), "
                   "then replaced atomically.")
@click.option("--baseline-every", type=click.IntRange(1, 1000000),
              help="K: jobs whose id mod K is 0 run settled kinds at fmax (default 10).")
@click.option("--default", "default",
              help="KIND=R,... for apps the file does not list (default: the file's, else "
                   "io-dvfs's compress=0.875,write=0.85).")
@click.option("--apps", metavar="A,B", help="Only these apps are learnt and listed.")
@_common
@query_options
def update(c: Ctx, save, baseline_every, default, apps, accounts, min_ratio, min_samples,
           bound_pct, ratios):
    """Learn from the store and write the auto= file; print what changed."""
    from .. import autopolicy as ap
    prev, s, notes, decisions, excluded = _learn(
        c, save, apps, accounts, ratios=ratios, bound_pct=bound_pct, min_samples=min_samples,
        baseline_every=baseline_every, default=default, min_ratio=min_ratio)
    doc = ap.document(decisions, s)
    lines = ap.changes(prev, doc, decisions)
    try:
        ap.write_atomic(save, doc)
    except OSError as e:
        raise click.ClickException(f"{save}: cannot write: {e.strerror}") from None
    out = [*notes]
    out += [f"left out of learning: {n} phase(s), {why}" for why, n in sorted(excluded.items())]
    out += lines or [f"no change ({len(decisions)} app kind(s))"]
    out.append(f"Wrote {save}")
    emit("\n".join(out) + "\n")


@policy.command()
@click.option("--file", "file", type=click.Path(dir_okay=False),
              help="The auto= file in force (its states, windows and settings).")
@click.option("--app", help="Only this app.")
@_common
@query_options
def show(c: Ctx, file, app, accounts, min_ratio, min_samples, bound_pct, ratios):
    """Per app and kind: state, ratio in force, per ratio the runs, mean energy
    and time per unit and the slowdown vs 1.0 with its confidence limits, the
    saving against fmax and the energy spent exploring."""
    import pandas as pd
    prev, s, notes, decisions, excluded = _learn(
        c, file, app, accounts, ratios=ratios, bound_pct=bound_pct, min_samples=min_samples,
        baseline_every=None, default=None, min_ratio=min_ratio)
    kinds = [{"app": d.app, "kind": d.kind, "state": d.state, "ratio": d.ratio,
              "unit": d.unit, "saving_pct": d.saving_pct, "exploring_j": d.exploring_j,
              "baseline_j": d.baseline_j, "reason": d.reason, "ratios": d.rows}
             for d in decisions]
    if c.fmt == "json":
        from ..output import to_json
        emit(to_json({"bound_pct": s.bound_pct, "excluded": dict(excluded), "kinds": kinds}))
        return
    per = pd.DataFrame([{"app": k["app"], "kind": k["kind"], "unit": k["unit"], **r}
                        for k in kinds for r in k["ratios"]])
    head = pd.DataFrame([{x: k[x] for x in ("app", "kind", "state", "ratio", "saving_pct",
                                            "exploring_j", "baseline_j", "reason")}
                         for k in kinds])
    if head.empty:
        emit("no runs tagged app=NAME in the store\n")
        return
    notes += [f"left out: {n} phase(s), {why}" for why, n in sorted(excluded.items())]
    emit_frames(c, [("kinds", head, None, f"auto policy, bound {s.bound_pct:g} %:"),
                     ("ratios", per, ["app", "kind", "unit", "ratio", "samples", "energy_j",
                                      "time_s", "slowdown_pct", "slowdown_hi_pct", "status"],
                      "per ratio (energy and time per unit; slowdown "
                      "vs 1.0 with its one-sided 95 % limits):")])
    if c.fmt == "table" and notes:
        emit("\n".join(notes) + "\n")
