"""joulestep tune: a frequency-sweep job script.

Loaded only when the command runs (cli.LazyGroup): see docs/cli.md,
"Start-up".
"""
from __future__ import annotations

import click



@click.command(context_settings={"ignore_unknown_options": True})
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
@click.option("--min-ratio", type=float, default=0.5, show_default=True,
              help="The plugin's min_ratio= (plugstack.conf): frequencies below "
                   "it x the highest are left out, since the plugin refuses them.")
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
def tune(command, kind, reps, sysfs, fmin_khz, fmax_khz, step_khz, freqs, min_ratio,
         name, partition, ntasks, time_limit, output, submit):
    """Write (and with --submit, submit) a frequency-sweep job.

    Runs COMMAND as a phase of kind --kind at every available frequency
    step, --reps times each (Wilkins 2023, §2.3.2; docs/science.md).  Then
    ingest and fit:
    joulestep model dvfs --where sweep=NAME --kind KIND --save tuned.json
    """
    import re
    import subprocess
    from .. import tune as tn
    if not re.fullmatch(r"[A-Za-z0-9_.:+-]{1,64}", name):
        raise click.BadParameter("allowed characters [A-Za-z0-9_.:+-], 1-64",
                                 param_hint="--name")
    try:
        fl = [int(x) for x in freqs.split(",") if x.strip()] if freqs else None
    except ValueError:
        raise click.BadParameter("comma-separated kHz integers", param_hint="--freqs")             from None
    try:
        fs, below = tn.frequencies(sysfs, fmin_khz, fmax_khz, step_khz, fl, min_ratio)
        text = tn.script(list(command), kind, fs, reps, name, partition,
                         ntasks=ntasks, time_limit=time_limit)
    except tn.TuneError as e:
        raise click.ClickException(str(e)) from None
    try:
        tn.write(output, text)
    except OSError as e:
        raise click.ClickException(f"cannot write {output}: {e.strerror}") from None
    click.echo(f"wrote {output}: {len(fs)} frequencies "
               f"({fs[-1] / 1e6:.2f}-{fs[0] / 1e6:.2f} GHz) x {reps} repetitions"
               + (f"; {below} below min_ratio {min_ratio:g} left out (the plugin "
                  "refuses them)" if below else ""))
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
