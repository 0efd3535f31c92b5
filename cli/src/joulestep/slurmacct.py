"""Slurm accounting (slurmdbd) at ingest: trusted job fields from sacct, and an
energy summary written back into the job's AdminComment.

After `joulestep ingest` has stored the spool's records, :func:`sync` looks the
recently seen jobs up in Slurm's accounting database with ONE batched sacct call

    sacct -n -P -D --delimiter=<US> -M <clusters> -j <ids> -S <oldest - 1 day>
          -o JobIDRaw,Cluster,Submit,Account,Partition,QOS,UID,State,End,
             ElapsedRaw,NNodes,ExitCode,ConsumedEnergyRaw,AdminComment

(SLURM_TIME_FORMAT=%s: times as epoch seconds) and stores slurmctld's own record
of each job: submit time, account, partition and QOS (migration 006); its
state, exit code, elapsed time and node count, and the energy Slurm's own
acct_gather_energy plugin read from the node's meter, for the job and for each
of its steps (the step rows that follow the job's row; migration 015).  A job
that had not ended is looked up again by the next ingest.  Where
there is no slurmdbd (sacct absent, accounting disabled, slurmdbd down, output
not understood) ingest keeps what the records have and says once what it could
not fill.  With ``admin_comment`` it then writes, for each ended job, a short
summary (:func:`format_summary`) with ``sacctmgr -i modify job``.

docs/admin-guide.md, "Slurm accounting (slurmdbd)", documents the behaviour and
the summary format; the pure parts (parse_sacct, match, format/parse_summary)
are unit-tested in tests/cli/test_slurmacct.py, the round trip against a real
slurmdbd in tests/cluster/test_slurmdbd.py.
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import shutil
import subprocess
import time

from .store import read_slurm

SACCT_FIELDS = ("JobIDRaw", "Cluster", "Submit", "Account", "Partition", "QOS",
                "UID", "State", "End", "ElapsedRaw", "NNodes", "ExitCode",
                "ConsumedEnergyRaw", "AdminComment")
#: a count sacct prints at or above this is Slurm's "no value" (NO_VAL64,
#: INFINITE64), not a figure (and would not fit a 64-bit column)
NO_VALUE_MIN = 2**63
DELIM = "\x1f"                   # ASCII unit separator: in no name Slurm allows
LOOKBACK_DAYS = 2.0              # jobs last seen this recently are looked up
MAX_JOBS = 5000                  # job ids per sacct call (argv stays small)
SUBMIT_SLACK_S = 60              # node vs controller clock skew
SACCT_TIMEOUT_S = 120
#: sacct states of jobs that have not ended (no AdminComment yet)
NOT_ENDED = frozenset(("PENDING", "RUNNING", "REQUEUED", "RESIZING", "SUSPENDED",
                       "REQUEUE_FED", "REQUEUE_HOLD", "SIGNALING", "STAGE_OUT",
                       "CONFIGURING", "COMPLETING"))
COMMENT_PREFIX = "joulestep:v1"
COMMENT_OURS = "joulestep:"      # any version of ours: ours to replace
MODES = ("auto", "on", "off")
SLURM_CONF_PATHS = ("/etc/slurm/slurm.conf", "/run/slurm/conf/slurm.conf")


class SacctError(ValueError):
    """sacct output that does not have the shape we asked for."""


@dataclasses.dataclass(frozen=True)
class StepRow:
    """One of a job's step rows (JobIDRaw 12345.batch, .extern, .0, ...)."""
    step_id: str
    state: str
    exit_code: str | None
    elapsed_s: int | None
    nnodes: int | None
    energy_j: int | None     # ConsumedEnergyRaw; None: Slurm has none


@dataclasses.dataclass(frozen=True)
class AcctRow:
    job_id: int
    cluster: str
    submit_s: int
    account: str | None
    partition: str | None
    qos: str | None
    uid: int | None
    state: str
    end_s: int | None
    admin_comment: str
    elapsed_s: int | None = None
    nnodes: int | None = None
    exit_code: str | None = None
    energy_j: int | None = None
    steps: tuple = ()        # StepRow of the job's steps, in sacct's order

    @property
    def complete(self) -> bool:
        """False for the placeholder slurmdbd makes when a job's step or end
        message arrives before its start message (seen with short jobs: uid 0,
        no partition, QOS "Unknown" for about a second): not usable yet."""
        return self.partition is not None

    @property
    def ended(self) -> bool:
        return self.end_s is not None and self.state.split()[0] not in NOT_ENDED


# --------------------------------------------------------------------------
# pure parts

def _epoch(v: str, what: str, lineno: int, null_ok: bool) -> int | None:
    if null_ok and v in ("Unknown", "None", ""):
        return None
    if not re.fullmatch(r"[0-9]{1,12}", v):
        raise SacctError(f"sacct output line {lineno}: {what} {v!r} is not epoch "
                         "seconds (SLURM_TIME_FORMAT=%s not honoured?)")
    return int(v)


def _count(v: str, what: str, lineno: int) -> int | None:
    """A count sacct prints (ElapsedRaw, NNodes, ConsumedEnergyRaw): None for
    none ("", Unknown, NO_VAL64); SacctError for anything not a number."""
    if v in ("", "Unknown", "None"):
        return None
    if not re.fullmatch(r"[0-9]{1,20}", v):
        raise SacctError(f"sacct output line {lineno}: {what} {v!r} is not a number")
    n = int(v)
    return None if n >= NO_VALUE_MIN else n


def _energy(v: str, lineno: int) -> int | None:
    """ConsumedEnergyRaw in J; None where Slurm has none: without an
    acct_gather_energy plugin sacct prints 0 (or nothing), so 0 is "none"."""
    n = _count(v, "ConsumedEnergyRaw", lineno)
    return n or None


def _lines(text: str) -> list[list]:
    """The fields of each row, and its line number last.  The last field
    (AdminComment, written by any admin tool) may contain newlines: a line
    with too few fields right after a complete one continues it."""
    rows: list[list] = []
    n = len(SACCT_FIELDS)
    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split(DELIM, n - 1)
        if len(parts) == n:
            parts.append(lineno)
            rows.append(parts)
        elif rows and DELIM not in line:
            rows[-1][n - 1] += "\n" + line
        elif not line.strip():
            continue
        else:
            raise SacctError(f"sacct output line {lineno}: {len(parts)} fields, "
                             f"expected {n} ({','.join(SACCT_FIELDS)}): {line[:80]!r}")
    return rows


#: a step row's JobIDRaw: job.step, the step a number, batch, extern,
#: interactive, or a het step's 0+1 (any plain word: a later Slurm's names)
_STEP_ID = r"([0-9]{1,10})\.([A-Za-z0-9_]{1,32}(?:\+[0-9]{1,5})?)"


def _step_row(f: list, lineno: int) -> StepRow:
    state = f[7]
    if not state:
        raise SacctError(f"sacct output line {lineno}: empty state")
    return StepRow(f[0].split(".", 1)[1], state, f[11] or None,
                   _count(f[9], "ElapsedRaw", lineno), _count(f[10], "NNodes", lineno),
                   _energy(f[12], lineno))


def parse_sacct(text: str) -> list[AcctRow]:
    """Rows of `sacct -n -P --delimiter=DELIM -o SACCT_FIELDS` output: one
    AcctRow per job, with its step rows (which sacct prints right after the
    job's own row) in AcctRow.steps.

    Refuses (SacctError, naming the line) output of another shape: a wrong
    number of fields, a job id, submit time, uid or count that is not a
    number, a step row that does not follow its job's row."""
    out: list[AcctRow] = []
    for f in _lines(text):
        (jid, cluster, submit, account, partition, qos, uid, state, end,
         elapsed, nnodes, exit_code, energy, comment, lineno) = f
        m = re.fullmatch(_STEP_ID, jid)
        if m:
            if not out or out[-1].job_id != int(m.group(1)) or \
                    (cluster and out[-1].cluster != cluster):
                raise SacctError(f"sacct output line {lineno}: step {jid!r} does not "
                                 "follow its job's row")
            out[-1] = dataclasses.replace(out[-1], steps=(*out[-1].steps,
                                                          _step_row(f, lineno)))
            continue
        if not re.fullmatch(r"[0-9]{1,10}", jid):
            raise SacctError(f"sacct output line {lineno}: job id {jid!r} is not a "
                             "number (JobIDRaw gives plain ids)")
        if not cluster or not state:
            raise SacctError(f"sacct output line {lineno}: empty cluster or state")
        if uid and not re.fullmatch(r"[0-9]{1,10}", uid):
            raise SacctError(f"sacct output line {lineno}: uid {uid!r} is not a number")
        out.append(AcctRow(int(jid), cluster, _epoch(submit, "submit", lineno, False),
                           account or None, partition or None, qos or None,
                           int(uid) if uid else None, state,
                           _epoch(end, "end", lineno, True), comment,
                           _count(elapsed, "ElapsedRaw", lineno),
                           _count(nnodes, "NNodes", lineno), exit_code or None,
                           _energy(energy, lineno)))
    return out


def match(rows: list[AcctRow], cluster: str, job_id: int, first_seen_ns: int,
          uid: int | None) -> AcctRow | None:
    """The sacct row of one stored job: same cluster and id, submitted at or
    before the job was first seen on a node (with SUBMIT_SLACK_S for clock
    skew), the latest such (an earlier one is an older job of a recycled id);
    None when there is none, when slurmdbd's row is not complete yet
    (AcctRow.complete; a later ingest fills it), or when its uid is not the
    record's (then the id is another job's, and nothing of it is used)."""
    limit = first_seen_ns // 10**9 + SUBMIT_SLACK_S
    cands = [r for r in rows if r.cluster == cluster and r.job_id == job_id
             and r.submit_s <= limit]
    if not cands:
        return None
    best = max(cands, key=lambda r: r.submit_s)
    if not best.complete:
        return None
    if uid is not None and best.uid is not None and best.uid != uid:
        return None
    return best


def _safe_word(s: str) -> str:
    s = s.lower()   # sacctmgr (22.05) lowercases what it stores
    return s if re.fullmatch(r"[a-z0-9:._/-]{1,32}", s) else "other"


def format_summary(energy_uj, cpu_uj, dram_uj, node_ns, steps: int,
                   unmeasured: int, policies) -> str:
    """The AdminComment text: ``joulestep:v1`` then space-separated key=value,
    integers in J and s; a key whose value is unknown is left out:
        e_j      energy the job's steps count (CPU packages + DRAM, RAPL)
        cpu_j    of it, CPU packages
        dram_j   of it, DRAM (absent: no DRAM zone)
        node_s   node-seconds of the measured steps
        steps    step records (one per step and node)
        unmeasured  steps without an energy (present only when > 0)
        policy   the steps' policies, lowercase, sorted, joined with '+'
                 ("none": unset; "other": a name that is not a plain word)
    All lowercase: Slurm 22.05's sacctmgr lowercases an AdminComment it sets.
    e.g. ``joulestep:v1 e_j=51234 cpu_j=48000 dram_j=3234 node_s=61 steps=2
    policy=tuned``."""
    parts = [COMMENT_PREFIX]
    for key, v, scale in (("e_j", energy_uj, 1e6), ("cpu_j", cpu_uj, 1e6),
                          ("dram_j", dram_uj, 1e6), ("node_s", node_ns, 1e9)):
        if v is not None:
            parts.append(f"{key}={round(v / scale)}")
    parts.append(f"steps={int(steps)}")
    if unmeasured:
        parts.append(f"unmeasured={int(unmeasured)}")
    pol = sorted({_safe_word(p) if p else "none" for p in policies}) or ["none"]
    parts.append("policy=" + "+".join(pol))
    return " ".join(parts)


_INT_KEYS = ("e_j", "cpu_j", "dram_j", "node_s", "steps", "unmeasured")


def parse_summary(text: str) -> dict:
    """The fields of a :func:`format_summary` text (ints, and policy as a
    list); ValueError for anything else, including another version."""
    words = text.split(" ")
    if not words or words[0] != COMMENT_PREFIX:
        raise ValueError(f"not a {COMMENT_PREFIX} summary: {text[:40]!r}")
    out: dict = {}
    for w in words[1:]:
        key, eq, val = w.partition("=")
        if not eq or key in out or key not in (*_INT_KEYS, "policy"):
            raise ValueError(f"bad field {w!r} in {COMMENT_PREFIX} summary")
        if key == "policy":
            out[key] = val.split("+")
        elif re.fullmatch(r"[0-9]{1,20}", val):
            out[key] = int(val)
        else:
            raise ValueError(f"field {key}: {val!r} is not a whole number")
    if "steps" not in out or "policy" not in out:
        raise ValueError(f"{COMMENT_PREFIX} summary without steps or policy")
    return out


def slurm_conf_uses_slurmdbd(path: str | os.PathLike | None = None) -> bool:
    """True if the node's slurm.conf ($SLURM_CONF, else the usual places,
    incl. a configless slurmd's cache) sends accounting to slurmdbd."""
    paths = [path] if path else ([os.environ["SLURM_CONF"]] if os.environ.get(
        "SLURM_CONF") else list(SLURM_CONF_PATHS))
    for p in paths:
        try:
            text = pathlib.Path(p).read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            key, eq, val = line.split("#", 1)[0].strip().partition("=")
            if eq and key.strip().lower() == "accountingstoragetype":
                return val.strip().lower() == "accounting_storage/slurmdbd"
        return False
    return False


# --------------------------------------------------------------------------
# talking to Slurm

class Unavailable(Exception):
    """sacct or sacctmgr could not be run or failed (message says why)."""


def _env() -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SACCT_", "SLURM_TIME_FORMAT"))}
    env["SLURM_TIME_FORMAT"] = "%s"
    return env


def _run(argv: list[str], timeout: float) -> str:
    exe = shutil.which(argv[0])
    if not exe:
        raise Unavailable(f"{argv[0]} not found on PATH")
    try:
        res = subprocess.run([exe, *argv[1:]], capture_output=True, text=True,
                             errors="replace", timeout=timeout, env=_env(),
                             stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise Unavailable(f"{argv[0]} gave no answer in {timeout:.0f} s") from None
    except OSError as e:
        raise Unavailable(f"{argv[0]}: {e}") from None
    if res.returncode != 0:
        msg = " ".join(res.stderr.split())[-300:] or f"exit status {res.returncode}"
        raise Unavailable(f"{argv[0]} failed: {msg}")
    return res.stdout


def sacct_argv(keys, oldest_ns: int) -> list[str]:
    """The one sacct call for jobs ``keys`` [(cluster, job_id)]; -S a day before
    the oldest was first seen (a job that ran then is selected whatever its
    pending time; the day covers clock skew)."""
    clusters = sorted({c for c, _ in keys})
    ids = sorted({j for _, j in keys})
    start = time.strftime("%Y-%m-%dT%H:%M:%S",
                          time.localtime(oldest_ns // 10**9 - 86400))
    return ["sacct", "-n", "-P", "-D", f"--delimiter={DELIM}",
            f"--clusters={','.join(clusters)}", f"--jobs={','.join(map(str, ids))}",
            f"--starttime={start}", f"--format={','.join(SACCT_FIELDS)}"]


def write_comment(cluster: str, job_id: int, text: str,
                  timeout: float = SACCT_TIMEOUT_S) -> None:
    _run(["sacctmgr", "-i", "modify", "job", "where", f"jobid={job_id}",
          f"cluster={cluster}", "set", f"AdminComment={text}"], timeout)


# --------------------------------------------------------------------------
# ingest's pass

@dataclasses.dataclass
class AcctResult:
    mode: str = "off"                # off | on (auto resolves to one of them)
    looked_up: int = 0               # jobs asked of sacct
    filled: int = 0                  # jobs whose fields came from sacct
    not_found: int = 0               # asked, not in sacct (or another uid)
    error: str | None = None         # why sacct could not be used
    comments_written: int = 0
    comments_unchanged: int = 0
    comments_foreign: int = 0        # AdminComment held another tool's text
    comments_failed: int = 0
    comment_error: str | None = None

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def note(self) -> str | None:
        """The one line ingest prints about what it could not fill or write."""
        msgs = []
        if self.error:
            msgs.append(f"{self.looked_up} job(s) keep the records' fields "
                        f"(submit time and QOS unknown): {self.error}")
        elif self.not_found:
            msgs.append(f"{self.not_found} of {self.looked_up} job(s) not (yet) in "
                        "sacct: they keep the records' fields (submit time and QOS "
                        "unknown) until a later ingest finds them")
        if self.comments_foreign:
            msgs.append(f"{self.comments_foreign} AdminComment(s) hold another "
                        "tool's text: left alone")
        if self.comments_failed:
            msgs.append(f"{self.comments_failed} AdminComment(s) not written: "
                        f"{self.comment_error}")
        return ("joulestep: ingest: slurm accounting: " + "; ".join(msgs)) if msgs else None


def summaries(conn, since_ns: int) -> dict:
    """{job_pk: summary text} of the jobs last seen at or after since_ns."""
    pols: dict = {}
    for pk, pol in read_slurm.job_policies(conn, since_ns):
        pols.setdefault(pk, []).append(pol)
    return {r[0]: format_summary(r[2], r[3], r[4], r[5], r[1], r[6], pols.get(r[0], ()))
            for r in read_slurm.job_stats(conn, since_ns)}


def _scaled(v: int | None, unit: int) -> int | None:
    """sacct's whole seconds or joules in the store's ns or µJ; None for
    what a 64-bit column cannot hold (no real figure)."""
    return None if v is None or v * unit >= NO_VALUE_MIN else v * unit


def _ended_state(state: str | None) -> bool:
    """A job's stored sacct State says it has ended (then its figures are
    final and it is not looked up again)."""
    return bool(state) and state.split()[0] not in NOT_ENDED


def _unique_steps(steps: list) -> list:
    """One row per (job, step): the last sacct gave (a requeued job's -D
    rows repeat its step ids; the latest run's come last)."""
    return list({(s[0], s[1]): s for s in steps}.values())


def resolve_mode(mode: str, admin_comment: bool = False) -> str:
    """auto -> on where slurm.conf uses slurmdbd (or AdminComments are asked
    for), else off."""
    if mode not in MODES:
        raise ValueError(f"sacct mode {mode!r}: one of {', '.join(MODES)}")
    if mode == "auto":
        return "on" if (admin_comment or slurm_conf_uses_slurmdbd()) else "off"
    return mode


def _store(conn, updates: list, stored: list, steps: list, filled: list) -> None:
    """One transaction: the jobs' sacct fields, the AdminComments written,
    and each job's step rows as sacct has them now (a running job gains
    steps)."""
    conn.execute("BEGIN")
    try:
        conn.executemany("UPDATE jobs SET submit_time_ns = ?, account = ?, partition = ?, "
                         "qos = ?, sacct_ns = ?, slurm_state = ?, slurm_exit_code = ?, "
                         "slurm_elapsed_ns = ?, slurm_nnodes = ?, slurm_energy_uj = ? "
                         "WHERE job_pk = ?", updates)
        conn.executemany("DELETE FROM slurm_steps WHERE job_pk = ?", filled)
        conn.executemany("INSERT INTO slurm_steps (job_pk, step_id, state, exit_code, "
                         "elapsed_ns, nnodes, energy_uj) VALUES (?, ?, ?, ?, ?, ?, ?)",
                         _unique_steps(steps))
        conn.executemany("UPDATE jobs SET admin_comment = ? WHERE job_pk = ?", stored)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def sync(conn, mode: str = "auto", admin_comment: bool = False,
         lookback_days: float = LOOKBACK_DAYS, now_ns: int | None = None) -> AcctResult:
    """Fill the recently seen jobs' fields from sacct and (admin_comment) write
    the summaries of ended jobs; the caller has committed the ingest."""
    res = AcctResult(mode=resolve_mode(mode, admin_comment))
    if res.mode == "off":
        return res
    now_ns = time.time_ns() if now_ns is None else now_ns
    since = now_ns - int(lookback_days * 86400e9)
    texts = summaries(conn, since) if admin_comment else {}
    jobs = read_slurm.recent_jobs(conn, since)
    todo = [j[:7] for j in jobs if j[5] is None or not _ended_state(j[7])
            or (j[0] in texts and texts[j[0]] != j[6])]
    todo = todo[:MAX_JOBS]
    res.looked_up = len(todo)
    if not todo:
        return res
    try:
        rows = parse_sacct(_run(sacct_argv([(j[1], j[2]) for j in todo],
                                           min(j[3] for j in todo)), SACCT_TIMEOUT_S))
    except (Unavailable, SacctError) as e:
        res.error = str(e)
        return res
    latest: dict = {}
    for r in rows:
        k = (r.cluster, r.job_id)
        latest[k] = max(latest.get(k, r.submit_s), r.submit_s)
    updates, stored, steps, filled = [], [], [], []
    for pk, cluster, job_id, first_ns, uid, _, old_text in todo:
        r = match(rows, cluster, job_id, first_ns, uid)
        if r is None:
            res.not_found += 1
            continue
        res.filled += 1
        updates.append((r.submit_s * 10**9, r.account, r.partition, r.qos, now_ns,
                        r.state, r.exit_code, _scaled(r.elapsed_s, 10**9), r.nnodes,
                        _scaled(r.energy_j, 10**6), pk))
        steps.extend((pk, st.step_id, st.state, st.exit_code, _scaled(st.elapsed_s, 10**9),
                      st.nnodes, _scaled(st.energy_j, 10**6)) for st in r.steps)
        filled.append((pk,))
        text = texts.get(pk)
        if text is None or not r.ended:
            continue
        if r.admin_comment == text:
            res.comments_unchanged += 1
        elif r.admin_comment and not r.admin_comment.startswith(COMMENT_OURS):
            res.comments_foreign += 1   # another tool's, e.g. jobstats' JS1:...
            continue
        elif r.submit_s != latest[(cluster, job_id)]:
            continue  # an older job of a recycled id: `modify job where jobid=`
            #           addresses the newest one too
        else:
            try:
                write_comment(cluster, job_id, text)
            except Unavailable as e:
                res.comments_failed += 1
                res.comment_error = res.comment_error or str(e)
                continue
            res.comments_written += 1
        stored.append((text, pk))
    _store(conn, updates, stored, steps, filled)
    return res
