"""The `joulestep` command line: a thin click layer over plain functions.

Commands delegate to store.py (schema, ingest), report.py (job, report),
export.py, doctor.py, tune.py, and the models helper's models.py,
analysis.py and plot.py.  Heavy modules (pandas, scipy, matplotlib) are
imported inside the commands that need them, so `joulestep job` starts fast.
User errors are click.ClickException: one line on stderr, exit status 1.
"""
from __future__ import annotations

import gc

# Start-up (docs/cli.md, "Benchmarks"): importing click and defining the
# commands creates tens of thousands of objects that live as long as the
# process, and almost no garbage; the cyclic collector would run some 30
# times over them meanwhile, and once more at exit.  It is paused while
# this module loads; at its end those objects are frozen (gc.freeze: never
# scanned again, also not at exit) and it is resumed.
_GC_WAS_ENABLED = gc.isenabled()
gc.disable()

import functools  # noqa: E402
import os  # noqa: E402
import pathlib  # noqa: E402
import sys  # noqa: E402

import click  # noqa: E402

from . import __version__, config, store  # noqa: E402

FORMATS = ("table", "json", "csv")


class Ctx:
    """Global options, merged with per-command ones."""

    def __init__(self, db=None, cfg=None, fmt=None):
        self.db, self.cfg, self.fmt = db, cfg, fmt
        self._settings = None

    def settings(self) -> config.Settings:
        if self._settings is None:
            try:
                self._settings = config.load(self.cfg)
            except config.ConfigError as e:
                raise click.ClickException(str(e)) from None
        return self._settings

    def db_path(self, write: bool) -> pathlib.Path | str:
        return config.resolve_db(self.db, self.settings(), write)

    def connect(self, write: bool = False):
        path = self.db_path(write)
        try:
            return store.connect(path, write=write, create=write)
        except store.StoreError as e:
            raise click.ClickException(str(e)) from None


def _merge(ctx: click.Context, kw: dict) -> Ctx:
    base = ctx.find_object(Ctx) or Ctx()
    c = Ctx(kw.pop("db", None) or base.db, kw.pop("config_path", None) or base.cfg,
            kw.pop("fmt", None) or base.fmt or "table")
    return c


def db_options(f):
    """--db and --config on a command (they may also precede the command)."""
    f = click.option("--config", "config_path", type=click.Path(dir_okay=False),
                     help="Site config file (INI; default $JOULESTEP_CONFIG or "
                          "/etc/joulestep/joulestep.conf).")(f)
    f = click.option("--db", type=click.Path(dir_okay=False),
                     help="SQLite database file or postgresql:// URL (default "
                          "$JOULESTEP_DB, then [paths] db, then "
                          "/var/lib/joulestep/joulestep.db, then a per-user file).")(f)
    return f


def format_option(f):
    return click.option("--format", "fmt", type=click.Choice(FORMATS),
                        help="Output format (default table; JSON and CSV are "
                             "stable, see docs/cli.md).")(f)


def query_options(f):
    """Options shared by every command that reads the database:
    --db, --config, --format, --ingest.  Passes a Ctx as first argument."""
    @functools.wraps(f)
    def wrapper(*args, ingest_first=False, **kw):
        ctx = click.get_current_context()
        c = _merge(ctx, kw)
        if ingest_first:
            c.db = str(c.db_path(True))   # query the database just loaded
            _do_ingest(c, [], None, quiet=True)
        return f(c, *args, **kw)
    wrapper = click.option("--ingest", "ingest_first", is_flag=True,
                           help="Ingest the default spool before answering.")(wrapper)
    return db_options(format_option(wrapper))


def emit(text: str):
    click.echo(text, nl=False)


# --------------------------------------------------------------------------

@click.group(context_settings={"help_option_names": ["-h", "--help"],
                               "max_content_width": 100})
@click.version_option(__version__, prog_name="joulestep")
@click.option("--db", type=click.Path(dir_okay=False),
              help="SQLite database file or postgresql:// URL (default "
                   "$JOULESTEP_DB, then [paths] db, then "
                   "/var/lib/joulestep/joulestep.db, then a per-user file).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="Site config file (INI).")
@click.option("--format", "fmt", type=click.Choice(FORMATS),
              help="Output format for every command (default table).")
@click.pass_context
def cli(ctx, db, config_path, fmt):
    """Energy accounting and frequency control for Slurm job steps.

    Load the plugin's spool records with `ingest`, then ask `job` (what did my
    job cost?), `report` (who uses the energy?), `compare` (which strategy is
    cheaper?) and `model` (what should the policy be?).  See docs/cli.md.
    """
    ctx.obj = Ctx(db, config_path, fmt)


# ---------------------------------------------------------------- ingest

def _do_ingest(c: Ctx, spools, quarantine_dir, quiet=False, batch=None,
               gap_hours=None):
    s = c.settings()
    gap_ns = int((s.job_gap_hours if gap_hours is None else gap_hours) * 3600e9)
    spools = [pathlib.Path(p) for p in spools] or [s.spool]
    if quarantine_dir is None and s.quarantine is not None:
        quarantine_dir = s.quarantine
    conn = c.connect(write=True)

    def progress(items):
        if len(items) < 500 or quiet:
            return items
        return click.progressbar(items, label="ingesting", file=sys.stderr,
                                 show_pos=True)

    def bar(items):
        pb = progress(items)
        if pb is items:
            return items

        def gen():
            with pb as it:
                yield from it
        return gen()
    try:
        res = store.ingest_paths(conn, spools, quarantine_dir,
                                 batch=batch or store.BATCH_RECORDS, progress=bar,
                                 gap_ns=gap_ns)
    except conn.Error as e:     # the engine's own error (db.py)
        raise click.ClickException("database error during ingest: "
                                   f"{str(e).strip()}") from None
    finally:
        conn.close()
    if quiet and (res.quarantined or res.errors):
        click.echo(f"joulestep: ingest: {len(res.quarantined)} record(s) "
                   f"quarantined, {len(res.errors)} error(s); run `joulestep "
                   "ingest` for details", err=True)
    return res


@cli.command()
@click.argument("spool", nargs=-1, type=click.Path())
@click.option("--quarantine", "quarantine_dir", type=click.Path(file_okay=False),
              help="Where bad records go (default <spool>/.quarantine).")
@click.option("--batch", type=click.IntRange(1, 1_000_000), default=store.BATCH_RECORDS,
              show_default=True, help="Records per transaction.")
@click.option("--job-gap-hours", "gap_hours",
              type=click.FloatRange(0, config.MAX_JOB_GAP_HOURS),
              help="Records of one job ID less than this far apart are one job "
                   "(default: config [site] job_gap_hours, else 24).")
@click.option("--sacct", "sacct_mode", type=click.Choice(("auto", "on", "off")),
              default="auto", show_default=True,
              help="Take submit time, account, partition and QOS from Slurm's "
                   "accounting (sacct); auto: when slurm.conf uses slurmdbd.")
@click.option("--sacct-days", type=click.FloatRange(0, 3650), default=2.0,
              show_default=True, help="Look up jobs last seen this many days ago or later.")
@click.option("--admin-comment", is_flag=True,
              help="Write each ended job's energy summary into its Slurm "
                   "AdminComment (sacctmgr; a Slurm admin only).")
@db_options
@format_option
@click.pass_context
def ingest(ctx, spool, quarantine_dir, batch, gap_hours, sacct_mode, sacct_days,
           admin_comment, **kw):
    """Load spool records (files or directories) into the database.

    With no SPOOL, reads the configured spool (default /var/spool/joulestep).
    Only complete *.json records are read (the plugin renames them into place
    atomically), so it is safe while the plugin writes.  Ingesting again
    changes nothing.  A malformed or truncated record is named, moved to the
    quarantine directory, and the rest still land.  Exit status 1 when any
    record was quarantined or unreadable.  Records of one job ID whose
    windows (first seen .. step end) overlap or are less than the job gap
    apart are one job; farther apart, the ID was recycled (docs/cli.md).
    """
    c = _merge(ctx, kw)
    res = _do_ingest(c, spool, quarantine_dir, batch=batch, gap_hours=gap_hours)
    acct = _slurm_acct(c, sacct_mode, sacct_days, admin_comment)
    from .output import to_csv, to_json
    if c.fmt == "json":
        emit(to_json({**res.as_dict(), "slurm_accounting": acct.as_dict()}))
    elif c.fmt == "csv":
        rows = [{"file": q["file"], "status": "quarantined", "detail": q["reason"],
                 "moved_to": q["moved_to"]} for q in res.as_dict()["quarantined"]]
        rows += [{"file": e["file"], "status": "error", "detail": e["reason"]}
                 for e in res.as_dict()["errors"]]
        emit(to_csv(["file", "status", "detail", "moved_to"], rows))
    else:
        click.echo(f"{res.files_seen} files: {res.new_steps} new steps, "
                   f"{res.duplicate_steps} already present, "
                   f"{res.files_skipped} unchanged, "
                   f"{len(res.quarantined)} quarantined, {len(res.errors)} errors")
        for src, dst, reason in res.quarantined:
            click.echo(f"quarantined {src} -> {dst}: {reason}", err=True)
        for p, reason in res.errors:
            click.echo(f"error {p}: {reason}", err=True)
    if res.quarantined or res.errors:
        ctx.exit(1)


def _slurm_acct(c: Ctx, mode: str, days: float, admin_comment: bool):
    """ingest's sacct pass (slurmacct.py); says once what it could not fill."""
    from . import slurmacct
    if admin_comment and mode == "off":
        raise click.UsageError("--admin-comment needs sacct (not --sacct off)")
    if slurmacct.resolve_mode(mode, admin_comment) == "off":
        return slurmacct.AcctResult()
    conn = c.connect(write=True)
    try:
        acct = slurmacct.sync(conn, mode, admin_comment, days)
    except store.sqlite3.OperationalError as e:
        raise click.ClickException(f"database error during the sacct pass: {e}") from None
    finally:
        conn.close()
    if acct.note():
        click.echo(acct.note(), err=True)
    return acct


# ---------------------------------------------------------------- job

def tuned_option(f):
    return click.option(
        "--tuned", "tuned_path", type=click.Path(dir_okay=False),
        help="The tuned policy's file (written by `model dvfs --save`) for "
             "the what-if estimate of `tuned`; without it, tuned is not "
             "estimated.")(f)


def _tuned(path):
    from . import whatif
    if path is None:
        return None
    try:
        return whatif.load_tuned(path)
    except whatif.WhatIfError as e:
        raise click.ClickException(str(e)) from None


@cli.command()
@click.argument("jobid", type=click.IntRange(0))
@click.option("--cluster", help="Cluster name (default: config [site] cluster, "
                                "else any).")
@click.option("--first-seen", "first_seen_ns", type=int,
              help="When the job was first seen, in ns (as `job` lists them), "
                   "to pick one of several jobs with the same ID (recycled "
                   "job ID); default the latest.")
@click.option("--submit-time", "submit_ns", type=int, hidden=True,
              help="Deprecated alias of --first-seen.")
@click.option("--user-view", "user_view", is_flag=True,
              help="Show what a user who is not an admin sees: energies "
                   "rounded to the counter's resolution, none for phases "
                   "shorter than min_phase_ms (the default for anyone who "
                   "cannot write the database; docs/security.md).")
@tuned_option
@query_options
def job(c: Ctx, jobid, cluster, first_seen_ns, submit_ns, tuned_path, user_view):
    """After-job summary: energy, power, throughput, cost per step and phase.

    Per step and phase: CPU, DRAM and total energy, duration, average power,
    bytes, GiB/s, J/GiB, the frequency used, kWh, CO2 and cost, and the
    estimated saving against the step's original clock where a policy
    lowered it (from a fitted power model when one exists, else "not
    estimated").  For steps run under monitor with marked phases: what
    io-dvfs, ckpt-dvfs and tuned would have saved or cost per phase kind,
    an estimate from the same models.  Flags a node shared with other jobs.
    A step inside another on the same node (srun inside batch) is shown
    with its own energy but added to the job's total once (docs/cli.md,
    steps inside other steps); so is a phase inside another phase.  kWh,
    CO2 and cost cover CPU + DRAM (RAPL), or the whole node when the site
    sets node_overhead_w or node_factor; the output says which.  Who cannot
    write the database (not an admin) sees energies rounded to the
    counter's resolution and none for steps and phases shorter than
    min_phase_ms (docs/security.md, "Threat model: RAPL side channels").
    """
    from . import report as rep
    from .userview import is_admin
    from .output import to_csv, to_json
    s = c.settings()
    pick = _first_seen(first_seen_ns, submit_ns)
    tuned = _tuned(tuned_path)
    conn = c.connect()
    try:
        user_view = user_view or not is_admin(c.db_path(False), conn)
        summary = rep.job_summary(conn, jobid, s, cluster or s.cluster, pick,
                                  tuned, user_view=user_view)
    except rep.QueryError as e:
        raise click.ClickException(str(e)) from None
    finally:
        conn.close()
    if c.fmt == "json":
        emit(to_json(summary))
    elif c.fmt == "csv":
        emit(to_csv(rep.JOB_CSV_COLUMNS, rep.job_rows(summary)))
    else:
        from .render import job_text
        emit(job_text(summary))


def _first_seen(first_seen_ns, submit_ns):
    """--first-seen, or its deprecated alias --submit-time (jobs ingested
    from records with a submit time were first seen at it)."""
    if submit_ns is None:
        return first_seen_ns
    if first_seen_ns is not None and first_seen_ns != submit_ns:
        raise click.ClickException("--submit-time is an alias of --first-seen; "
                                   "give only one")
    click.echo("joulestep: --submit-time is deprecated; use --first-seen",
               err=True)
    return submit_ns


# ---------------------------------------------------------------- report

@cli.command()
@click.option("--since", help="Start: ISO date/time, or an age like 30d "
                              "(default: everything).")
@click.option("--until", help="End (exclusive): ISO date/time, 'now' or an age.")
@click.option("--by", default="user", show_default=True,
              help="Group by user, account, partition, qos, node, policy or tag:KEY.")
@click.option("--top", type=click.IntRange(1), default=10, show_default=True,
              help="Groups listed in the table; the rest are summed.")
@click.option("--cluster", help="Only this cluster (default: config, else all).")
@click.option("--what-if", "what_if", type=click.Choice(["io-dvfs", "ckpt-dvfs",
                                                         "tuned"]),
              help="Instead: what this policy would have saved or cost on "
                   "the steps that ran under monitor with marked phases (an "
                   "estimate from the fitted power models), in MWh, CO2 and "
                   "cost.")
@tuned_option
@query_options
def report(c: Ctx, since, until, by, top, cluster, what_if, tuned_path):
    """Admin view: energy totals, shares, top consumers, policy adoption.

    A step counts in the period when it started in [--since, --until).
    Policy adoption is the share of steps (and of energy) that ran under a
    frequency policy other than none.  A step inside another on the same
    node (srun inside batch) is counted once.  kWh, CO2 and cost cover CPU
    + DRAM (RAPL), or a node estimate (site node_overhead_w or node_factor).
    With --what-if POLICY: the estimated saving of that policy per group
    over the period, counting only jobs that marked phases (docs/cli.md).
    """
    from . import report as rep
    s = c.settings()
    try:
        since_ns, until_ns = rep.parse_time(since), rep.parse_time(until)
    except rep.QueryError as e:
        raise click.BadParameter(str(e)) from None
    if what_if:
        return _what_if_report(c, what_if, _tuned(tuned_path), by, top,
                               since_ns, until_ns, cluster or s.cluster)
    conn = c.connect()
    try:
        r = rep.report(conn, s, by, since_ns, until_ns, cluster or s.cluster, top)
    except rep.QueryError as e:
        raise click.ClickException(str(e)) from None
    finally:
        conn.close()
    from .render import report_text
    _emit_groups(c, r, rep.REPORT_CSV_COLUMNS, report_text)


def _what_if_report(c: Ctx, policy, tuned, by, top, since_ns, until_ns,
                    cluster):
    from . import report as rep
    from . import whatif
    conn = c.connect()
    try:
        r = whatif.fleet(conn, c.settings(), policy, by, since_ns, until_ns,
                         cluster, tuned)
    except (rep.QueryError, whatif.WhatIfError) as e:
        raise click.ClickException(str(e)) from None
    finally:
        conn.close()
    from .render import whatif_report_text
    _emit_groups(c, r, whatif.CSV_COLUMNS, lambda r: whatif_report_text(r, top))


def _emit_groups(c: Ctx, r: dict, csv_columns, text):
    """A grouped report: JSON as is, CSV one row per group with the report's scope,
    or text(r)."""
    from .output import to_csv, to_json
    if c.fmt == "json":
        emit(to_json(r))
    elif c.fmt == "csv":
        emit(to_csv(csv_columns, [{**g, "scope": r["scope"]} for g in r["groups"]]))
    else:
        emit(text(r))


# ---------------------------------------------------------------- helpers

def _period(since, until):
    from . import report as rep
    try:
        return rep.parse_time(since), rep.parse_time(until)
    except rep.QueryError as e:
        raise click.BadParameter(str(e)) from None


def _where(items):
    from . import frames
    try:
        return frames.parse_where(items)
    except frames.FilterError as e:
        raise click.BadParameter(str(e)) from None


def _emit_frames(c: Ctx, parts: list, title_json: dict | None = None):
    """parts: [(name, DataFrame|None, preferred columns, heading)]; the first
    frame is the CSV output; JSON gets all of them by name."""
    from .frames import frame_table, records
    from .output import to_csv, to_json
    parts = [p for p in parts if p[1] is not None]
    if c.fmt == "json":
        doc = dict(title_json or {})
        for name, df, _, _ in parts:
            doc[name] = records(df)
        emit(to_json(doc))
    elif c.fmt == "csv":
        df = parts[0][1]
        emit(to_csv([str(x) for x in df.columns], records(df)))
    else:
        out = []
        for name, df, prefer, heading in parts:
            if heading:
                out.append(heading)
            out.append(frame_table(df, prefer))
            out.append("")
        emit("\n".join(out))


def period_options(f):
    f = click.option("--until", help="Only steps that started before this time.")(f)
    f = click.option("--since", help="Only steps that started at/after this time "
                                     "(ISO date/time or an age like 30d).")(f)
    return f


def where_option(f):
    return click.option("--where", "where", multiple=True, metavar="KEY=VALUE",
                        help="Keep rows whose column or tag KEY equals VALUE "
                             "(repeatable), e.g. --where tier=dram.")(f)


# ---------------------------------------------------------------- compare

@cli.command()
@click.option("--by", required=True, help="Strategy column: tag:KEY (e.g. "
              "tag:strategy), or policy, user, node_model.")
@where_option
@click.option("--what", type=click.Choice(["auto", "checkpoint", "io", "dump",
                                           "steps", "phases"]),
              default="auto", show_default=True,
              help="Comparison: checkpoint (phases checkpoint/flush), io "
                   "(TP/DC/DN per node), dump (compress/write by error bound), "
                   "or generic steps/phases; auto picks from the phase kinds.")
@click.option("--scaling", type=click.Choice(["weak", "strong"]), default="weak",
              show_default=True, help="Checkpoint tables: weak (by GiB per rank) "
              "or strong (by total GiB) scaling.")
@click.option("--baseline", help="Strategy (or policy, for dumps) the ratios "
                                 "are taken against (default: first in order; "
                                 "monitor for dumps).")
@click.option("--error-bound", default="tag:error_bound", show_default=True,
              help="Column holding the error bound (dump comparison).")
@period_options
@query_options
def compare(c: Ctx, by, where, what, scaling, baseline, error_bound, since, until):
    """Compare strategies in the papers' terms.

    checkpoint: per part (local checkpoint, flush, total) energy CPU/DRAM,
    throughput and J/GiB by rank count and size, mean and spread over
    repetitions, with ratios to the baseline (paper 001).  io: total energy,
    run time, average power and per-node mean/min/max/std per approach
    (Dorier Table 2).  dump: compress and write energy per compressor and
    error bound vs a raw write, and policy vs a baseline policy (Wilkins
    Fig. 2.6), saying what clock the baseline had: "governor default" for
    monitor, "base clock" only for runs held at the nominal clock.  A phase
    marked inside another (a flush inside its checkpoint) is counted once:
    local = checkpoint - flush, total = the enclosing measurement.
    """
    from . import studies
    since_ns, until_ns = _period(since, until)
    conn = c.connect()
    try:
        r = studies.compare(conn, by, _where(where), what, scaling, baseline,
                            since_ns, until_ns, c.settings().cluster,
                            error_bound=error_bound)
    except studies.StudyError as e:
        raise click.ClickException(str(e)) from None
    finally:
        conn.close()
    col = r["table"].columns[0]
    pref = {
        "checkpoint": [col, "part", "gib_per_rank", "total_gib", "nranks", "runs",
                       "energy_j", "energy_j_std", "throughput_gibs", "j_per_gib",
                       "throughput_gibs_std", "energy_cpu_j",
                       "energy_dram_j", "duration_s"],
        "io": [col, "runs", "energy_j", "energy_j_std", "runtime_s", "avg_power_w",
               "node_mean_j", "node_min_j", "node_max_j", "node_std_j", "cpu_usage"],
        "dump": ["compressor", "error_bound", "policy", "runs", "total_j",
                 "compress_j", "write_j", "ratio", "max_err", "total_vs_raw",
                 "raw_write_j"],
    }.get(r["what"])
    parts = [("table", r["table"], pref, f"{r['what']} comparison by {by}:")]
    if r["ratios"] is not None:
        rp = ["part", "gib_per_rank", "total_gib", "nranks", r["ratios"].columns[3]
              if len(r["ratios"].columns) > 3 else None, "energy_j_ratio",
              "throughput_gibs_ratio", "j_per_gib_ratio"]
        parts.append(("ratios", r["ratios"], [x for x in rp if x] + list(
            r["ratios"].columns), f"ratios to {r['baseline']}:"))
    if r["policy_saving"] is not None:
        parts.append(("policy_saving", r["policy_saving"], None,
                      f"policy vs {r['baseline']} ({r['baseline_clock']}):"))
    _emit_frames(c, parts, {"what": r["what"], "by": by,
                            "baseline": r.get("baseline"),
                            "baseline_clock": r.get("baseline_clock")})


# ---------------------------------------------------------------- model

@cli.group()
def model():
    """The papers' energy models: Dorier (damaris) and DVFS P(f) (dvfs)."""


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
    """Dorier energy model (eqs. 1-4): predict DC(k) / DN(c:d) energy.

    E = T_sim * P_sim; T_sim = T_base / ((n_cores s_cores(n_cores)) (n_nodes
    s_nodes(n_nodes))); DN: P_sim = (c P_max + (P_idle + P_max)/2 d)/(c + d);
    DC: P_sim = P_max.  The calibration comes from the options, or is fitted
    from recorded runs without I/O (--fit-where): T_base and the scalability
    tables from their run times, P_max from their node power at the most
    cores per node, P_idle from idle runs (--idle-where) or --p-idle.
    Prints the prediction per configuration, the model's pick, and the
    accuracy against recorded runs where there are any.
    """
    import dataclasses

    from . import models, studies
    fit = None
    if fit_where:
        conn = c.connect()
        try:
            fit = studies.fit_damaris(conn, _where(fit_where), _where(idle_where),
                                      cores_column, n_iter, p_idle, p_max,
                                      cluster=c.settings().cluster)
        except studies.StudyError as e:
            raise click.ClickException(str(e)) from None
        finally:
            conn.close()
    else:
        if idle_where:
            raise click.UsageError("--idle-where needs --fit-where")
        missing = [n for n, v in (("--t-base", t_base), ("--s-cores", s_cores),
                                  ("--s-nodes", s_nodes), ("--p-idle", p_idle),
                                  ("--p-max", p_max)) if v is None]
        if missing:
            raise click.UsageError("calibration needs " + ", ".join(missing)
                                   + " (or fit it from recorded runs with --fit-where)")
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
    measured = None
    target = c.db_path(False)
    if isinstance(target, str) or target.exists():   # str: a postgresql:// URL
        conn = c.connect()
        try:
            measured = studies.measured_runs(conn, measured_by, _where(where),
                                             cluster=c.settings().cluster)
        finally:
            conn.close()
    try:
        r = studies.model_damaris(cal, approaches, nodes, cores_per_node, measured)
    except studies.StudyError as e:
        raise click.ClickException(str(e)) from None
    parts = [("prediction", r["prediction"],
              ["config", "compute_nodes", "io_nodes", "cores_per_node", "t_sim_s",
               "p_sim_w", "energy_j", "best"],
              f"Dorier model, {nodes} nodes x {cores_per_node} cores:")]
    if r["accuracy"] is not None:
        parts.append(("accuracy", r["accuracy"], None,
                      "accuracy against recorded runs (Table 3):"))
    doc = {"pick": r["pick"]}
    if fit is not None:
        from .frames import frame_table, records
        calt = studies.calibration_table(cal, sources)
        doc["calibration"] = records(calt)
        doc["calibration_runs"] = records(fit["runs"])
        if c.fmt == "table":
            click.echo("calibration runs (without I/O):")
            click.echo(frame_table(fit["runs"]))
            click.echo("\ncalibration:")
            click.echo(frame_table(calt) + "\n")
    _emit_frames(c, parts, doc)
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

    Power is scaled by the power at fmax, f in GHz (Wilkins eq. 2.2).  Prints
    a, b, c with their standard errors, SSE, RMSE = sqrt(SSE/(n-3)) (the
    thesis' definition) and R^2, and the frequency minimising energy within
    --max-slowdown.  Warns when the sweep cannot determine a to 10 %, with
    the repetitions per frequency that would.  Rows need a frequency: the phase's freq_khz, a
    freq_khz tag (written by `joulestep tune`), or a fixed:R policy.
    """
    from . import studies
    since_ns, until_ns = _period(since, until)
    conn = c.connect(write=bool(save_path))
    try:
        fits = studies.model_dvfs(conn, _where(where), kind, level, max_slowdown,
                                  since_ns, until_ns, c.settings().cluster)
        policy = None
        if save_path:
            policy = studies.save_dvfs(conn, fits, save_path, max_slowdown, node_model)
    except (studies.StudyError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    finally:
        conn.close()
    warnings = studies.dvfs_warnings(fits)
    _emit_frames(c, [("fits", fits, ["node_model", "kind", "a", "b", "c", "sse",
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
        from .frames import frame_table
        se = fits[[k for k in ("node_model", "kind", "se_a", "rel_se_a", "se_b",
                               "se_c", "reps", "reps_needed") if k in fits.columns]]
        click.echo("standard errors (rel_se_a = se_a/a; RMSE = sqrt(SSE/(n-3))):")
        click.echo(frame_table(se))
    import textwrap
    for w in warnings:
        click.echo(textwrap.fill(f"warning: {w}", 80, subsequent_indent="  ",
                                 break_on_hyphens=False), err=c.fmt != "table")


# ---------------------------------------------------------------- tune

@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("--kind", default="compute", show_default=True,
              help="Phase kind the workload is marked as.")
@click.option("--reps", type=click.IntRange(1), default=10, show_default=True,
              help="Repetitions at each frequency.")
@click.option("--sysfs", help="Read the node's available frequencies from this "
                              "sysfs root (e.g. /sys).")
@click.option("--fmin-khz", type=click.IntRange(1), help="Lowest frequency.")
@click.option("--fmax-khz", type=click.IntRange(1), help="Highest frequency.")
@click.option("--step-khz", type=click.IntRange(1), default=50_000,
              show_default=True, help="Step between frequencies (paper: 50 MHz).")
@click.option("--freqs", help="Explicit list of kHz values, comma-separated.")
@click.option("--name", default="joulestep-sweep", show_default=True,
              help="Job name, also the sweep=NAME tag.")
@click.option("--partition", help="Slurm partition.")
@click.option("--ntasks", type=click.IntRange(1), default=1, show_default=True,
              help="Tasks (ranks) per srun of the workload.")
@click.option("--time", "time_limit", default="02:00:00", show_default=True,
              help="Slurm time limit.")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              default="joulestep-sweep.sh", show_default=True, help="Script to write.")
@click.option("--submit", is_flag=True, help="Submit the script with sbatch.")
def tune(command, kind, reps, sysfs, fmin_khz, fmax_khz, step_khz, freqs, name,
         partition, ntasks, time_limit, output, submit):
    """Write (and with --submit, submit) a frequency-sweep job.

    Runs COMMAND as a phase of kind --kind at every available frequency
    step, --reps times each (paper 000 sec. 2.3.2).  Then ingest and fit:
    joulestep model dvfs --where sweep=NAME --kind KIND --save tuned.json
    """
    import re
    import subprocess
    from . import tune as tn
    if not re.fullmatch(r"[A-Za-z0-9_.:+-]{1,64}", name):
        raise click.BadParameter("allowed characters [A-Za-z0-9_.:+-], 1-64",
                                 param_hint="--name")
    try:
        fl = [int(x) for x in freqs.split(",") if x.strip()] if freqs else None
    except ValueError:
        raise click.BadParameter("comma-separated kHz integers", param_hint="--freqs")             from None
    try:
        fs = tn.frequencies(sysfs, fmin_khz, fmax_khz, step_khz, fl)
        text = tn.script(list(command), kind, fs, reps, name, partition,
                         ntasks=ntasks, time_limit=time_limit)
    except tn.TuneError as e:
        raise click.ClickException(str(e)) from None
    tn.write(output, text)
    click.echo(f"wrote {output}: {len(fs)} frequencies "
               f"({fs[-1] / 1e6:.2f}-{fs[0] / 1e6:.2f} GHz) x {reps} repetitions")
    if submit:
        try:
            p = subprocess.run(["sbatch", output], capture_output=True, text=True)
        except FileNotFoundError:
            raise click.ClickException("sbatch not found on PATH") from None
        if p.returncode:
            raise click.ClickException(f"sbatch failed: {p.stderr.strip()}")
        click.echo(p.stdout.strip())
    click.echo(f"then: joulestep ingest && joulestep model dvfs --where sweep={name} "
               f"--kind {kind} --save tuned.json")


# ---------------------------------------------------------------- plot

@cli.command()
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
@click.option("--max-slowdown", type=click.FloatRange(0), default=0.10,
              show_default=True, help="power: recommendation constraint.")
@period_options
@query_options
def plot(c: Ctx, figure, output, by, where, kind, node_model, part, scaling,
         max_slowdown, since, until):
    """Draw a figure like the papers' as PNG or SVG (from OUTPUT's suffix).

    scaling: energy and throughput vs ranks with error bars; io: energy per
    I/O approach; power: power vs frequency with the fitted curve; dumps:
    dump energy by error bound.
    """
    from . import models, studies
    from . import plot as pl
    since_ns, until_ns = _period(since, until)
    conn = c.connect()
    w = _where(where)
    try:
        if figure == "power":
            rows = studies.sweep_rows(conn, w + ([("node_model", node_model)]
                                                 if node_model else []),
                                      kind, "phases", since_ns, until_ns)
            if rows["node_model"].nunique() > 1 or rows["kind"].nunique() > 1:
                raise studies.StudyError(
                    "several node models/kinds: pick one with --node-model/--kind")
            fit = models.fit_dvfs(rows)
            rec = models.recommend_frequency(fit, max_slowdown)
            path = pl.plot_power_fit(models.sweep_samples(rows), fit, output, rec)
        else:
            what = {"scaling": "checkpoint", "io": "io", "dumps": "dump"}[figure]
            by = by or {"scaling": "tag:strategy", "io": "tag:approach",
                        "dumps": "tag:compressor"}[figure]
            r = studies.compare(conn, by, w, what, scaling, None, since_ns, until_ns)
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
    finally:
        conn.close()
    click.echo(f"wrote {path}")


# ---------------------------------------------------------------- export

@cli.command()
@click.argument("tables", nargs=-1)
@click.option("--format", "efmt", type=click.Choice(["csv", "json", "parquet"]),
              default="csv", show_default=True, help="File format.")
@click.option("-o", "--output", type=click.Path(),
              help="File (one table) or directory (one file per table); "
                   "default stdout for csv/json.")
@period_options
@db_options
@click.option("--ingest", "ingest_first", is_flag=True,
              help="Ingest the default spool before exporting.")
@click.pass_context
def export(ctx, tables, efmt, output, since, until, ingest_first, **kw):
    """Write tables to CSV, JSON or Parquet.

    TABLES: nodes, jobs, steps, step_tags, step_zones, phases, phase_ranks,
    power_models (schema columns), or the joined views steps_full and
    phases_full (job, node and tag:KEY columns); default steps_full.
    """
    from . import export as ex
    kw.pop("fmt", None)
    c = _merge(ctx, kw)
    if ingest_first:
        c.db = str(c.db_path(True))
        _do_ingest(c, [], None, quiet=True)
    since_ns, until_ns = _period(since, until)
    conn = c.connect()
    try:
        files = ex.export(conn, tables, efmt, output, since_ns, until_ns)
    except ex.ExportError as e:
        raise click.ClickException(str(e)) from None
    finally:
        conn.close()
    if output is not None:
        for f in files:
            click.echo(f"wrote {f}", err=True)


# ---------------------------------------------------------------- exporter

@cli.command()
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
    from . import exporter as ex
    kw.pop("fmt", None)
    c = _merge(ctx, kw)
    s = c.settings()
    try:
        keep = ex.parse_labels(labels)
    except ex.ExporterError as e:
        raise click.BadParameter(str(e)) from None
    view = ex.StoreView(lambda: c.connect(), s, settle_hours, reload_hours,
                        s.quarantine or s.spool / ".quarantine")
    view.refresh()
    if once:
        click.echo(ex.text(view, keep).decode(), nl=False)
        return
    try:
        ex.serve(view, keep, host, port, refresh)
    except ex.ExporterError as e:
        raise click.ClickException(str(e)) from None


# ---------------------------------------------------------------- doctor

@cli.command()
@click.option("--sysfs", default="/sys", show_default=True,
              help="sysfs root to inspect (a fake tree in tests).")
@click.option("--write-test", is_flag=True,
              help="As root: write a lower max frequency on CPU 0, read it back, "
                   "restore it.")
@click.option("--libdir", default="/usr/local/lib/slurm", show_default=True,
              help="Where joulestep.so is installed (for the plugstack line).")
@format_option
@db_options
@click.pass_context
def doctor(ctx, sysfs, write_test, libdir, fmt, db=None, config_path=None):
    """Report what this node can measure and control.

    RAPL zones found (and which are counted), whether this user can read
    them, the shortest counter wrap period, the cpufreq driver and
    governors, optionally whether a written frequency sticks, and the
    plugstack.conf line to use.
    """
    from . import doctor as dr
    from .output import table, to_csv, to_json
    c = _merge(ctx, {"fmt": fmt, "db": db, "config_path": config_path})
    if not pathlib.Path(sysfs).is_dir():
        raise click.BadParameter(f"{sysfs} is not a directory", param_hint="--sysfs")
    r = dr.diagnose(sysfs, write_test, libdir)
    r["records_lost"] = dr.records_lost(c)
    if c.fmt == "json":
        emit(to_json(r))
        return
    if c.fmt == "csv":
        emit(to_csv(["id", "name", "counted", "reason", "readable",
                     "max_energy_range_uj", "max_power_uw", "wrap_period_s"],
                    r["zones"]))
        return
    rows = [[z["id"], z["name"] or "-", "yes" if z["counted"] else "no",
             "yes" if z["readable"] else "NO",
             f"{z['wrap_period_s']:.0f}" if z["wrap_period_s"] else "-",
             z["reason"] or ""] for z in r["zones"]]
    click.echo(f"sysfs {r['sysfs']}: {r['counted']['package']} package zone(s), "
               f"{r['counted']['dram']} dram zone(s) counted")
    if rows:
        click.echo(table(["ZONE", "NAME", "COUNTED", "READABLE", "WRAP_S", "NOTE"],
                         rows, right={4}))
    if r["min_wrap_period_s"]:
        click.echo(f"shortest wrap period {r['min_wrap_period_s']:.0f} s at max "
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
    for p in r["problems"]:
        click.echo(f"problem: {p}")
    click.echo("plugstack.conf:")
    click.echo(f"  {r['plugstack']}")


# ---------------------------------------------------------------- restore

def _find_tool(name: str) -> str | None:
    import shutil
    here = pathlib.Path(__file__).resolve()
    for d in [here.parents[3] / "build" / "bin"] if len(here.parents) > 3 else []:
        if (d / name).is_file() and os.access(d / name, os.X_OK):
            return str(d / name)
    return shutil.which(name)


@cli.command()
@click.option("--state", default="/var/lib/joulestep", show_default=True,
              help="The plugin's state (journal) directory.")
@click.option("--sysfs", default="/sys", show_default=True, help="sysfs root.")
@click.option("--force", is_flag=True,
              help="Restore CPUs even if their owners still run (drained node).")
@click.option("--list", "list_only", is_flag=True, help="Only list saved CPUs.")
def restore(state, sysfs, force, list_only):
    """Restore CPU frequencies from the plugin's journal (admins, after a crash).

    Runs joulestep-restore (build/bin or PATH).  Without --force only CPUs
    whose owners are all gone are restored.
    """
    import subprocess
    tool = _find_tool("joulestep-restore")
    if tool is None:
        raise click.ClickException("joulestep-restore not found in build/bin or on "
                                   "PATH (make, or make install)")
    args = [tool, "--state", state, "--sysfs", sysfs]
    if force:
        args.append("--force")
    if list_only:
        args.append("--list")
    p = subprocess.run(args)
    sys.exit(p.returncode)


# ---------------------------------------------------------------- phase

@cli.group()
def phase():
    """Mark phases of the running step (same protocol as joulestep-phase).

    Outside a joulestep step (no JOULESTEP_SOCKET) they do nothing.  From
    Python use the context manager: `with joulestep.phase("write"): ...`.
    """


@phase.command("begin")
@click.argument("kind")
@click.argument("label", required=False)
def phase_begin(kind, label):
    """Begin a phase of KIND ([a-z0-9_-]{1,32}) with an optional LABEL."""
    from . import phase as ph
    try:
        ph.begin(kind, label, sync=True)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None
    except OSError as e:
        raise click.ClickException(f"phase begin: {e}") from None


@phase.command("end")
@click.option("--bytes", "nbytes", type=click.IntRange(0),
              help="Bytes written/read in the phase.")
def phase_end(nbytes):
    """End this rank's innermost open phase."""
    from . import phase as ph
    try:
        ph.end(nbytes, sync=True)
    except OSError as e:
        raise click.ClickException(f"phase end: {e}") from None


def main(argv=None):
    """Console-script entry point."""
    return cli.main(args=argv, prog_name="joulestep")


gc.freeze()
if _GC_WAS_ENABLED:
    gc.enable()


if __name__ == "__main__":
    sys.exit(main())
