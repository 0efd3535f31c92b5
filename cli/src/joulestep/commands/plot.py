"""joulestep plot: the papers' figures from the store.

Loaded only when the command runs (cli.LazyGroup): see docs/cli.md,
"Start-up".
"""
from __future__ import annotations

import click

from ..options import Ctx, period, where_filter, period_options, query_options, where_option


@click.command()
@click.argument("figure", type=click.Choice(["scaling", "io", "power", "dumps"]))
@click.argument("output", type=click.Path(dir_okay=False))
@click.option("--by", help="Strategy column (default tag:strategy for scaling, "
                           "tag:approach for io, tag:compressor for dumps).")
@where_option
@click.option("--kind", help="power: the phase kind to fit.")
@click.option("--node-model", help="power: the node model to fit.")
@click.option("--part", type=click.Choice(["local", "flush", "total"]),
              default="total", show_default=True, help="scaling: which part.")
@click.option("--scaling", type=click.Choice(["weak", "strong"]), default="weak",
              show_default=True, help="scaling: weak or strong.")
@click.option("--error-bound", default="tag:error_bound", show_default=True,
              help="dumps: the column holding the error bound (as compare's).")
@click.option("--max-slowdown", type=click.FloatRange(0), default=0.10,
              show_default=True, help="power: recommendation constraint.")
@period_options
@query_options
def plot(c: Ctx, figure, output, by, where, kind, node_model, part, scaling,
         error_bound, max_slowdown, since, until):
    """Draw a figure like the papers' as PNG or SVG (from OUTPUT's suffix).

    scaling: energy and throughput vs ranks with error bars; io: energy per
    I/O approach; power: power vs frequency with the fitted curve; dumps:
    dump energy by error bound.
    """
    from .. import models, studies
    from .. import plot as pl
    since_ns, until_ns = period(since, until)
    conn = c.connect()
    w = where_filter(where)
    try:
        if figure == "power":
            rows = studies.sweep_rows(conn, w + ([("node_model", node_model)]
                                                 if node_model else []),
                                      kind, "phases", since_ns, until_ns)
            _one_model_and_kind(rows)
            fit = models.fit_dvfs(rows)
            rec = models.recommend_frequency(fit, max_slowdown)
            path = pl.plot_power_fit(models.sweep_samples(rows), fit, output, rec)
        else:
            what = {"scaling": "checkpoint", "io": "io", "dumps": "dump"}[figure]
            by = by or {"scaling": "tag:strategy", "io": "tag:approach",
                        "dumps": "tag:compressor"}[figure]
            r = studies.compare(conn, by, w, what, scaling, None, since_ns, until_ns,
                                error_bound=error_bound)
            col = r["table"].columns[0]
            if figure == "scaling":
                path = pl.plot_scaling(r["table"], output, by=col, part=part)
            elif figure == "io":
                path = pl.plot_io_approaches(r["table"], output, by=col)
            else:
                path = pl.plot_dump_energy(r["table"], output, policy="policy"
                                           if "policy" in r["table"].columns
                                           and r["table"]["policy"].nunique() > 1
                                           else None)
    except (studies.StudyError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    except OSError as e:        # the figure's folder missing or not writable
        raise click.ClickException(f"cannot write {output}: {e.strerror}") from None
    finally:
        conn.close()
    click.echo(f"wrote {path}")


def _one_model_and_kind(rows):
    """A fit is of one node model and one phase kind: name the ones found."""
    from .. import studies
    msgs = []
    for col, opt, what in (("node_model", "--node-model", "node models"),
                           ("kind", "--kind", "phase kinds")):
        vals = sorted(map(str, rows[col].dropna().unique()))
        if len(vals) > 1:
            msgs.append(f"{len(vals)} {what} ({', '.join(vals)}): pick one with {opt}")
    if msgs:
        raise studies.StudyError("; ".join(msgs))
