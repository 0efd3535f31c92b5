"""joulestep model: the papers' energy models (damaris, dvfs).

Loaded only when the command runs (cli.LazyGroup): see docs/cli.md,
"Start-up".
"""
from __future__ import annotations

import os

import click

from ..store import db
from ..options import (Ctx, emit_frames, period, where_filter, period_options, query_options,
                   where_option)


@click.group()
def model():
    """The papers' energy models: Dorier et al. 2016 (damaris) and DVFS P(f)
    (dvfs, Wilkins 2023); docs/science.md."""


@model.command()
@click.option("--t-base", type=click.FloatRange(min=0, min_open=True),
              help="T_base: time of the run on one core of one node (s).")
@click.option("--s-cores", help="Core scalability table N:S,... e.g. 1:1,12:0.95,24:0.9")
@click.option("--s-nodes", help="Node scalability table N:S,... e.g. 1:1,16:0.97,32:0.95")
@click.option("--p-idle", type=click.FloatRange(min=0, min_open=True),
              help="P_idle: idle power per node (W).")
@click.option("--p-max", type=click.FloatRange(min=0, min_open=True),
              help="P_max: power per node running the simulation (W).")
@click.option("--n-iter", type=click.IntRange(1), default=1, show_default=True,
              help="Iterations (T_sim = n_iter*T_base/...).")
@click.option("--fit-where", "fit_where", multiple=True, metavar="KEY=VALUE",
              help="Fit the calibration from the recorded runs without I/O whose "
                   "column or tag KEY equals VALUE (repeatable), e.g. --fit-where "
                   "io=none; calibration options given as well override the fit.")
@click.option("--idle-where", "idle_where", multiple=True, metavar="KEY=VALUE",
              help="With --fit-where: recorded idle runs giving P_idle (mean node "
                   "power), e.g. --idle-where state=idle (else give --p-idle).")
@click.option("--cores-column", default="ncpus", show_default=True,
              help="With --fit-where: where a run's cores per node come from: "
                   "ncpus (the step's CPUs on the node) or tag:KEY.")
@click.option("--nodes", type=click.IntRange(1), required=True,
              help="Nodes in the allocation.")
@click.option("--cores-per-node", type=click.IntRange(1), required=True,
              help="Cores per node.")
@click.option("--approach", "approaches", multiple=True, required=True,
              metavar="DC(k)|DN(c:d)", help="Configuration to predict (repeatable).")
@click.option("--measured-by", default="tag:approach", show_default=True,
              help="Column naming each recorded run's configuration; recorded "
                   "runs give the accuracy column (Table 3).")
@where_option
@query_options
def damaris(c: Ctx, t_base, s_cores, s_nodes, p_idle, p_max, n_iter, fit_where,
            idle_where, cores_column, nodes, cores_per_node, approaches, measured_by,
            where):
    """Dorier et al. 2016 energy model (eqs. 1-4, docs/science.md): predict
    DC(k) / DN(c:d) energy.

    E = T_sim * P_sim; T_sim = T_base / ((n_cores s_cores(n_cores)) (n_nodes
    s_nodes(n_nodes))); DN: P_sim = (c P_max + (P_idle + P_max)/2 d)/(c + d);
    DC: P_sim = P_max.  The calibration comes from the options, or is fitted
    from recorded runs without I/O (--fit-where): T_base and the scalability
    tables from their run times, P_max from their node power at the most
    cores per node, P_idle from idle runs (--idle-where) or --p-idle.
    Prints the prediction per configuration, the model's pick, and the
    accuracy against recorded runs where there are any.
    """
    from .. import studies
    fit = _damaris_fit(c, fit_where, idle_where, cores_column, n_iter, p_idle, p_max,
                       (t_base, s_cores, s_nodes))
    cal, sources = _damaris_calibration(fit, n_iter, t_base, s_cores, s_nodes,
                                        p_idle, p_max)
    measured = None
    target = c.db_path(False)
    if db.is_url(target) or os.path.exists(target):
        conn = c.connect()
        try:
            measured = studies.measured_runs(conn, measured_by, where_filter(where),
                                             cluster=c.settings().cluster)
        finally:
            conn.close()
    try:
        r = studies.model_damaris(cal, approaches, nodes, cores_per_node, measured)
    except studies.StudyError as e:
        raise click.ClickException(str(e)) from None
    _damaris_emit(c, r, fit, cal, sources, nodes, cores_per_node)


def _damaris_fit(c: Ctx, fit_where, idle_where, cores_column, n_iter, p_idle,
                 p_max, given) -> dict | None:
    """The calibration fitted from recorded runs (--fit-where), or None when
    the options give it all."""
    from .. import studies
    if fit_where:
        conn = c.connect()
        try:
            return studies.fit_damaris(conn, where_filter(fit_where),
                                       where_filter(idle_where), cores_column, n_iter,
                                       p_idle, p_max, cluster=c.settings().cluster)
        except studies.StudyError as e:
            raise click.ClickException(str(e)) from None
        finally:
            conn.close()
    if idle_where:
        raise click.UsageError("--idle-where needs --fit-where")
    t_base, s_cores, s_nodes = given
    missing = [n for n, v in (("--t-base", t_base), ("--s-cores", s_cores),
                              ("--s-nodes", s_nodes), ("--p-idle", p_idle),
                              ("--p-max", p_max)) if v is None]
    if missing:
        raise click.UsageError("calibration needs " + ", ".join(missing)
                               + " (or fit it from recorded runs with --fit-where)")
    return None


def _damaris_calibration(fit, n_iter, t_base, s_cores, s_nodes, p_idle, p_max):
    """(the calibration: the options over the fit, where each came from)."""
    import dataclasses

    from .. import models, studies
    try:
        given = {k: v for k, v in (
            ("t_base_s", t_base), ("p_idle_w", p_idle), ("p_max_w", p_max),
            ("s_cores", None if s_cores is None else studies.parse_table(s_cores,
                                                                         "--s-cores")),
            ("s_nodes", None if s_nodes is None else studies.parse_table(s_nodes,
                                                                         "--s-nodes")))
            if v is not None}
        if fit is None:
            cal = models.DamarisCalibration(n_iter=n_iter, **given)
        else:
            cal = dataclasses.replace(fit["calibration"], **given)
    except (ValueError, studies.StudyError) as e:
        raise click.ClickException(str(e)) from None
    sources = {k: "option" for k in given}
    if fit is not None:
        nruns = int(fit["runs"]["runs"].sum())
        for k, v in (("t_base_s", f"fitted, {nruns} runs"), ("s_cores", "fitted"),
                     ("s_nodes", "fitted"), ("p_max_w", f"fitted, {fit['p_max_from']}"),
                     ("p_idle_w", f"fitted, {fit['p_idle_from']}")):
            sources.setdefault(k, v)
    return cal, sources


def _damaris_emit(c: Ctx, r: dict, fit, cal, sources, nodes, cores_per_node) -> None:
    from .. import studies
    parts = [("prediction", r["prediction"],
              ["config", "compute_nodes", "io_nodes", "cores_per_node", "t_sim_s",
               "p_sim_w", "energy_j", "best"],
              f"Dorier model, {nodes} nodes x {cores_per_node} cores:")]
    if r["accuracy"] is not None:
        parts.append(("accuracy", r["accuracy"], None,
                      "accuracy against recorded runs (Table 3):"))
    doc = {"pick": r["pick"]}
    if fit is not None:
        from ..frames import frame_table, records
        calt = studies.calibration_table(cal, sources)
        doc["calibration"] = records(calt)
        doc["calibration_runs"] = records(fit["runs"])
        if c.fmt == "table":
            click.echo("calibration runs (without I/O):")
            click.echo(frame_table(fit["runs"]))
            click.echo("\ncalibration:")
            click.echo(frame_table(calt) + "\n")
    emit_frames(c, parts, doc)
    if c.fmt == "table":
        click.echo(f"The model picks {r['pick']}.")


@model.command()
@where_option
@click.option("--kind", help="Only this phase kind (default: each kind separately).")
@click.option("--level", type=click.Choice(["phases", "steps"]), default="phases",
              show_default=True, help="Fit phases, or whole steps (kind 'step').")
@click.option("--max-slowdown", type=click.FloatRange(0), default=0.10,
              show_default=True, help="Largest runtime increase allowed (0.1 = 10 %).")
@click.option("--save", "save_path", type=click.Path(dir_okay=False),
              help="Write a tuned policy file here and store the fits in the "
                   "database (used by `joulestep job` for savings).")
@click.option("--node-model", help="Node model to save when several were fitted.")
@period_options
@query_options
def dvfs(c: Ctx, where, kind, level, max_slowdown, save_path, node_model, since,
         until):
    """Fit P(f) = a f^b + c per node model and phase kind from sweeps.

    Power is scaled by the power at fmax, f in GHz (Wilkins 2023, eq. 2.2;
    docs/science.md).  Prints
    a, b, c with their standard errors, SSE, RMSE = sqrt(SSE/(n-3)) (the
    thesis' definition) and R^2, and the frequency minimising energy within
    --max-slowdown.  Warns when the sweep cannot determine a to 10 %, with
    the repetitions per frequency that would.  Rows need a frequency: the phase's freq_khz, a
    freq_khz tag (written by `joulestep tune`), or a fixed:R policy.
    """
    from .. import studies
    since_ns, until_ns = period(since, until)
    conn = c.connect(write=bool(save_path))
    try:
        fits = studies.model_dvfs(conn, where_filter(where), kind, level, max_slowdown,
                                  since_ns, until_ns, c.settings().cluster)
        policy = None
        if save_path:
            policy = studies.save_dvfs(conn, fits, save_path, max_slowdown, node_model)
    except (studies.StudyError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    finally:
        conn.close()
    warnings = studies.dvfs_warnings(fits)
    emit_frames(c, [("fits", fits, ["node_model", "kind", "a", "b", "c", "sse",
                                     "rmse", "r2", "n", "rec_freq_khz", "rec_ratio",
                                     "energy_saving", "slowdown", "error"],
                      "P(f)/P(fmax) = a f^b + c (f in GHz):")],
                 {"max_slowdown": max_slowdown, "warnings": warnings})
    _dvfs_se_text(c, fits, warnings)
    if save_path and c.fmt == "table":
        import json as _json
        click.echo(f"Wrote {save_path}: policy "
                   f"{_json.loads(policy)['policy']} (plugin: tuned=FILE, --energy-policy=tuned)")


def _dvfs_se_text(c: Ctx, fits, warnings: list) -> None:
    """Table format: each parameter's standard error and the warnings;
    CSV: the warnings on stderr (JSON has them as "warnings")."""
    if c.fmt == "table":
        from ..frames import frame_table
        se = fits[[k for k in ("node_model", "kind", "se_a", "rel_se_a", "se_b",
                               "se_c", "reps", "reps_needed") if k in fits.columns]]
        click.echo("standard errors (rel_se_a = se_a/a; RMSE = sqrt(SSE/(n-3))):")
        click.echo(frame_table(se))
    import textwrap
    for w in warnings:
        click.echo(textwrap.fill(f"warning: {w}", 80, subsequent_indent="  ",
                                 break_on_hyphens=False), err=c.fmt != "table")
