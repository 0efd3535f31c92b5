"""Slurm's job ID forms on the command line: ``12345``, ``12345_7`` (array
task), ``12345+1`` (het job component), ``12345.0`` / ``12345.batch``
(step), and ``12345_7.0`` / ``12345+1.0``.

The records carry each job's own ID (SLURM_JOB_ID: an array task's and a
het component's own, docs/record-format.md), so an array task or het
component is mapped to it by sacct (JobID -> JobIDRaw); a step names the
job it belongs to.  Anything else is refused with the forms allowed: a
plain int() would read ``4_2`` as 42.
"""
from __future__ import annotations

import re

FORMS = ("JOBID (12345), JOBID_TASK for an array task (12345_7), JOBID+N for a "
         "het job component (12345+1), each optionally with .STEP (12345.0, "
         "12345.batch, 12345_7.0)")
_RE = re.compile(r"([0-9]{1,10})(?:_([0-9]{1,10})|\+([0-9]{1,4}))?"
                 r"(?:\.([0-9]{1,10}|batch|extern|interactive))?")
SACCT_TIMEOUT_S = 60
MAX_JOB_ID = 2**31 - 1           # Slurm's are below 0x04000000


class JobIdError(ValueError):
    """Not a job ID, or one that cannot be mapped to a job."""


class JobRef:
    """A parsed JOBID: job_id is the number before _ + and ."""
    __slots__ = ("text", "job_id", "array_task", "het_component", "step")

    def __init__(self, text: str, job_id: int, array_task: int | None = None,
                 het_component: int | None = None, step: str | None = None):
        self.text, self.job_id, self.array_task = text, job_id, array_task
        self.het_component, self.step = het_component, step

    @property
    def base(self) -> str:
        """The job part, without the step (what sacct -j takes)."""
        if self.array_task is not None:
            return f"{self.job_id}_{self.array_task}"
        if self.het_component is not None:
            return f"{self.job_id}+{self.het_component}"
        return str(self.job_id)

    @property
    def needs_sacct(self) -> bool:
        return self.array_task is not None or self.het_component is not None


def parse(text: str) -> JobRef:
    m = _RE.fullmatch(text)
    if not m or int(m.group(1)) > MAX_JOB_ID:
        raise JobIdError(f"'{text}' is not a Slurm job ID; allowed: {FORMS}")
    job, task, het, step = m.groups()
    return JobRef(text, int(job), None if task is None else int(task),
                  None if het is None else int(het), step)


def parse_raw_ids(out: str, base: str) -> list[int]:
    """JobIDRaw of the rows of `sacct -X -n -P -o JobIDRaw,JobID` whose
    JobID is ``base``."""
    ids = []
    for line in out.splitlines():
        raw, _, shown = line.strip().partition("|")
        if shown == base and raw.isdigit():
            ids.append(int(raw))
    return ids


def resolve(ref: JobRef, cluster: str | None = None) -> int:
    """The job ID the records carry for ``ref``."""
    if not ref.needs_sacct:
        return ref.job_id
    from .slurmacct import Unavailable, _run
    what = "an array task" if ref.array_task is not None else "a het job component"
    argv = ["sacct", "-X", "-n", "-P", f"--jobs={ref.base}",
            "--format=JobIDRaw,JobID"]
    if cluster:
        argv.append(f"--clusters={cluster}")
    try:
        out = _run(argv, SACCT_TIMEOUT_S)
    except Unavailable as e:
        raise JobIdError(f"{ref.base} is {what}, whose own job ID (the one the "
                         f"records carry) comes from sacct: {e}; give that ID "
                         f"instead (`sacct -X -j {ref.base} -o JobIDRaw`, or "
                         "SLURM_JOB_ID in the job)") from None
    ids = sorted(set(parse_raw_ids(out, ref.base)))
    if not ids:
        raise JobIdError(f"sacct knows no job {ref.base}")
    if len(ids) > 1:
        raise JobIdError(f"sacct has several jobs {ref.base} (job IDs "
                         f"{', '.join(map(str, ids))}): give one of them")
    return ids[0]
