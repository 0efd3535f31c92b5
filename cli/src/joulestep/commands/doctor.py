"""joulestep doctor: what this node can measure and control.

Loaded only when the command runs (cli.LazyGroup): see docs/cli.md,
"Start-up".
"""
from __future__ import annotations

import pathlib

import click

from ..options import merge, db_options, emit, format_option


@click.command()
@click.option("--sysfs", default="/sys", show_default=True,
              help="sysfs root to inspect (a fake tree in tests).")
@click.option("--write-test", is_flag=True,
              help="As root: write a lower max frequency on CPU 0, read it back, "
                   "restore it.")
@click.option("--libdir",
              help="Where joulestep.so is installed, for the plugstack line "
                   "(default: where the packages or `make install` put it, "
                   "else its bare name, which Slurm looks up in PluginDir).")
@click.option("--node", "node", is_flag=True,
              help="Also check the plugstack.conf this node's Slurm uses: is "
                   "joulestep.so there, and does the plugin accept its "
                   "arguments (its own parser, joulestep-plugstack-check)? "
                   "Exit status 1 if not.")
@click.option("--plugstack", "plugstack", type=click.Path(dir_okay=False),
              help="With --node: the plugstack.conf to check (default "
                   "slurm.conf's PlugStackConfig).")
@format_option
@db_options
@click.pass_context
def doctor(ctx, sysfs, write_test, libdir, node, plugstack, fmt, db=None,
           config_path=None):
    """Report what this node can measure and control.

    RAPL zones found (and which are counted), whether this user can read
    them, the shortest counter wrap period, the cpufreq driver and
    governors, optionally whether a written frequency sticks, and the
    plugstack.conf line to use (one the plugin accepts).  With --node, also
    whether the node's own plugstack.conf enables the plugin with arguments
    it accepts: a refused line switches the plugin off while jobs run on,
    unmeasured.
    """
    from .. import doctor as dr
    from ..output import to_csv, to_json
    c = merge(ctx, {"fmt": fmt, "db": db, "config_path": config_path})
    if not pathlib.Path(sysfs).is_dir():
        raise click.BadParameter(f"{sysfs} is not a directory", param_hint="--sysfs")
    r = dr.diagnose(sysfs, write_test, libdir)
    r["records_lost"] = dr.records_lost(c)
    r["step_conflicts"] = dr.step_conflicts(c)
    if node:
        from .. import nodecheck
        r["node"] = nodecheck.check(plugstack)
        r["node"]["problems"] += dr.node_line_problems(r["node"], r["measures"])
    if c.fmt == "json":
        emit(to_json(r))
    elif c.fmt == "csv":
        emit(to_csv(["id", "name", "counted", "reason", "readable",
                     "max_energy_range_uj", "max_power_uw", "wrap_period_s"],
                    r["zones"]))
    else:
        _text(r)
    if node and r["node"]["problems"]:
        ctx.exit(1)


def _node_text(n: dict):
    click.echo(f"node plugstack {n['plugstack']}:")
    for d in n["lines"]:
        verdict = {True: "accepted", False: "REFUSED", None: "not checked"}[d["accepted"]]
        click.echo(f"  {d['file']}:{d['line']}: {d['mode']} {d['plugin']}: {verdict}")
    for p in n["problems"]:
        click.echo(f"problem: {p}")


def _text(r: dict):
    from ..output import table
    from ..render_units import fmt
    rows = [[z["id"], z["name"] or "-", "yes" if z["counted"] else "no",
             "yes" if z["readable"] else "NO",
             fmt(z["wrap_period_s"], "s") if z["wrap_period_s"] else "-",
             z["reason"] or ""] for z in r["zones"]]
    click.echo(f"sysfs {r['sysfs']}: {r['counted']['package']} package zone(s), "
               f"{r['counted']['dram']} dram zone(s) counted")
    if rows:
        click.echo(table(["ZONE", "NAME", "COUNTED", "READABLE", "WRAP", "NOTE"],
                         rows, right={4}))
    _print_measures(r["measures"])
    if r["min_wrap_period_s"]:
        click.echo(f"shortest wrap period {fmt(r['min_wrap_period_s'], 's', ' ')} at max "
                   "power: sample faster than that")
    cf = r["cpufreq"]
    if cf["cpus"]:
        click.echo(f"cpufreq: {cf['cpus']} CPUs, driver {', '.join(cf['drivers'])}, "
                   f"governor now {', '.join(cf['current_governors'])}")
        click.echo(f"  governors: {' '.join(cf['governors'])}")
        click.echo(f"  range {cf['cpuinfo_min_khz']}-{cf['cpuinfo_max_khz']} kHz, "
                   f"{len(cf['available_khz']) or 'no'} listed steps")
        click.echo(f"  control: {cf['control']}")
    wt = r["write_test"]
    if wt:
        click.echo(f"write test: {wt['detail']}"
                   + ("" if wt.get("restored", True) else " (RESTORE FAILED)"))
    if r["records_lost"] is not None:
        click.echo(f"records lost (spool and fallback not writable): {r['records_lost']}")
    if r["step_conflicts"] is not None:
        click.echo("conflicting copies of stored steps: "
                   f"{r['step_conflicts']} (quarantined at ingest)")
    for p in r["problems"]:
        click.echo(f"problem: {p}")
    if "node" in r:
        _node_text(r["node"])
    click.echo("plugstack.conf:")
    click.echo(f"  {r['plugstack']}")


def _print_measures(m: dict) -> None:
    """What the node measures (doctor.node_measures), two lines."""
    click.echo(f"CPU energy: {m['cpu']}"
               + (f" ({m['cpu_source']}; backend={m['backend']})" if m["cpu_source"] else ""))
    click.echo(f"DRAM energy: {m['dram']}"
               + (f" ({m['dram_not_measured']}): null in the records, never 0"
                  if m["dram_not_measured"] else ""))
    u = m.get("uncore")
    click.echo("uncore clock: " + (f"{len(u['domains'])} domain(s), intel_uncore_frequency "
                                   f"({u['layout']}): +uncore-io can cap it (uncore_io_mhz=)"
                                   if u else "none (no intel_uncore_frequency): +uncore-io "
                                   "not applied here"))
    g = m.get("gpus")
    vendor = {"nvidia": "NVIDIA", "amd": "AMD"}.get((g or {}).get("vendor"))
    click.echo("GPU energy: " + (f"{g['count']} {vendor} GPU(s) ({g['driver']} driver): "
                                 f"gpu_backend={g['backend']}" if g else
                                 "no GPU (no PCI device bound to nvidia or amdgpu)"))
    n = m["node_meter"]
    if n:
        click.echo(f"node meter: {n['source']} ({len(n['channels'])} channels; node total "
                   + (f"= {n['total']}" if n["total"] else "none: a socket lacks its Module "
                      "sensor, or no energy file") + f"): node_energy={n['source']}")
