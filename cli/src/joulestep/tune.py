"""`joulestep tune`: write a frequency-sweep batch script (Wilkins 2023 §2.3.2:
every frequency step from fmin to fmax, repetitions at each), for `joulestep
model dvfs` to fit afterwards."""
from __future__ import annotations

import os
import pathlib
import shlex

from . import doctor


class TuneError(ValueError):
    pass


#: the plugin's default min_ratio= (spank/js_parse.c)
MIN_RATIO = 0.5


def frequencies(sysfs: str | None = None, fmin_khz: int | None = None,
                fmax_khz: int | None = None, step_khz: int = 50_000,
                freqs: list[int] | None = None,
                min_ratio: float = MIN_RATIO) -> tuple[list[int], int]:
    """The sweep's frequencies, highest first, and how many were left out
    below ``min_ratio``: the given list; else the node's
    scaling_available_frequencies; else fmin..fmax in step_khz.  None is
    below min_ratio x the highest, as the script writes the ratio (six
    decimals): the plugin refuses fixed:R under its min_ratio=."""
    if not 0 < min_ratio <= 1:
        raise TuneError(f"--min-ratio {min_ratio}: a number in (0, 1], the "
                        "plugin's min_ratio=")
    if freqs:
        out = sorted(set(freqs), reverse=True)
    else:
        cf = doctor.cpufreq(pathlib.Path(sysfs)) if sysfs else None
        if cf and cf["available_khz"] and fmin_khz is None and fmax_khz is None:
            out = sorted(cf["available_khz"], reverse=True)
        else:
            lo = fmin_khz or (cf and cf["cpuinfo_min_khz"])
            hi = fmax_khz or (cf and cf["cpuinfo_max_khz"])
            if not lo or not hi:
                raise TuneError("no frequency range: give --fmin-khz and --fmax-khz, "
                                "--freqs, or --sysfs of a node with cpufreq")
            if step_khz <= 0 or lo > hi:
                raise TuneError("need 0 < --step-khz and --fmin-khz <= --fmax-khz")
            out = list(range(hi, lo - 1, -step_khz))
            if out[-1] != lo:
                out.append(lo)
    if any(f <= 0 for f in out):
        raise TuneError("frequencies must be positive kHz")
    kept = [f for f in out if float(f"{f / out[0]:.6f}") >= min_ratio]
    if len(kept) < 4:
        raise TuneError(f"{len(kept)} frequencies at or above min_ratio {min_ratio:g} "
                        f"x {out[0]} kHz: a fit of a*f^b + c needs at least 4")
    return kept, len(out) - len(kept)


def script(command: list[str], kind: str, freqs: list[int], reps: int = 10,
           name: str = "joulestep-sweep", partition: str | None = None,
           nodes: int = 1, ntasks: int = 1, time_limit: str = "02:00:00",
           phase_bin: str = "joulestep-phase", exclusive: bool = True) -> str:
    """The batch script: for each repetition and frequency, one srun at
    `--energy-policy=fixed:R` (R = f/fmax) tagged sweep=NAME,freq_khz=F,rep=I,
    whose command runs inside a phase of kind KIND."""
    if not command:
        raise TuneError("give the workload command after --")
    if reps < 1:
        raise TuneError("--reps must be >= 1")
    fmax = max(freqs)
    cmd = " ".join(shlex.quote(c) for c in command)
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={name}",
        f"#SBATCH --nodes={nodes}",
        f"#SBATCH --ntasks={ntasks}",
        f"#SBATCH --time={time_limit}",
    ]
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    if exclusive:
        lines.append("#SBATCH --exclusive")
    lines += [
        "# Written by `joulestep tune`: a frequency sweep (Wilkins 2023 §2.3.2).",
        f"# {len(freqs)} frequencies x {reps} repetitions of phase kind {kind!r}.",
        "# Afterwards: joulestep ingest && joulestep model dvfs "
        f"--where sweep={name} --kind {kind}",
        "set -u",
        f"FREQS=({' '.join(str(f) for f in freqs)})",
        f"FMAX={fmax}",
        f"for rep in $(seq 1 {reps}); do",
        "  for f in \"${FREQS[@]}\"; do",
        "    ratio=$(awk -v f=\"$f\" -v m=\"$FMAX\" 'BEGIN { printf \"%.6f\", f / m }')",
        "    srun --energy-policy=fixed:$ratio "
        f"--energy-tag=sweep={name},freq_khz=$f,rep=$rep \\",
        "      bash -c " + shlex.quote(
            f"{shlex.quote(phase_bin)} begin {shlex.quote(kind)} sweep; {cmd}; "
            f"rc=$?; {shlex.quote(phase_bin)} end; exit $rc")
        + " || echo \"rep $rep at $f kHz failed\" >&2",
        "  done",
        "done",
    ]
    return "\n".join(lines) + "\n"


def write(path: str, text: str) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)
