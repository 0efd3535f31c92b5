"""joulestep exporter: the store's totals for Prometheus.

Loaded only when the command runs (cli.LazyGroup): see docs/cli.md,
"Start-up".
"""
from __future__ import annotations

import os

import click

from ..options import merge, db_options


@click.command()
@click.option("--listen", "host", default="127.0.0.1", show_default=True,
              help="Address to listen on: loopback by default; give the "
                   "host's address (or 0.0.0.0, ::) for a Prometheus "
                   "elsewhere, behind a firewall or proxy.")
@click.option("--port", type=click.IntRange(0, 65535), default=9817,
              show_default=True, help="TCP port (0: any free port; the "
                                      "address is printed on stderr).")
@click.option("--refresh", type=click.FloatRange(0.05), default=30.0,
              show_default=True, help="Seconds between reads of the store; "
                                      "scrapes are served from the last read.")
@click.option("--labels", default="cluster,user,account,partition,policy",
              show_default=True,
              help="Labels of the energy, time, cost and step counters (a "
                   "subset of the default): fewer labels, fewer series.")
@click.option("--settle-hours", type=click.FloatRange(0), default=48.0,
              show_default=True,
              help="Jobs whose last step ended this long before the newest "
                   "one are folded into fixed totals (a later step of such a "
                   "job makes the exporter read the whole store again).")
@click.option("--reload-hours", type=click.FloatRange(0, min_open=True),
              default=24.0, show_default=True,
              help="Read the whole store again at least this often.")
@click.option("--once", is_flag=True,
              help="Print the metrics once (Prometheus text format, e.g. for "
                   "node_exporter's textfile collector) and exit.")
@db_options
@click.pass_context
def exporter(ctx, host, port, refresh, labels, settle_hours, reload_hours,
             once, **kw):
    """Serve the store's totals to Prometheus (OpenMetrics, /metrics).

    Counters of energy (CPU + DRAM, each step counted once as in
    `report`), step time, cost and steps by cluster, user, account,
    partition and policy; the estimated saving by policy (as `job`
    estimates it); records quarantined.  No label names a job.  The store
    is read every --refresh seconds, incrementally, and scrapes are served
    from memory.  See docs/admin-guide.md, "Prometheus and Grafana".
    """
    from .. import exporter as ex
    kw.pop("fmt", None)
    c = merge(ctx, kw)
    s = c.settings()
    try:
        keep = ex.parse_labels(labels)
    except ex.ExporterError as e:
        raise click.BadParameter(str(e)) from None
    view = ex.StoreView(lambda: c.connect(), s, settle_hours, reload_hours,
                        s.quarantine or os.path.join(s.spool, ".quarantine"))
    view.refresh()
    if once:
        click.echo(ex.text(view, keep).decode(), nl=False)
        return
    try:
        ex.serve(view, keep, host, port, refresh)
    except ex.ExporterError as e:
        raise click.ClickException(str(e)) from None
