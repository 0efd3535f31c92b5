"""The auto policy's learner: from each application's own runs, the core
clock ratio of each of its phase kinds that uses the least energy per unit
of work without slowing the phase past a bound (docs/design.md, "The auto
policy"; the file: docs/admin-guide.md, "The auto policy").

A sample is one step's phases of one kind at one ratio (phases[].freq_khz /
the step's fmax_khz, snapped to the nearest allowed ratio): its energy and
time per GiB where every phase of the kind reports bytes, else per phase.
Per (app, kind), over the samples since the kind's window start:

- exploring: some allowed ratio still needs runs (fewer than min_samples,
  or a slowdown neither shown within the bound nor beyond it); the next run
  tries the least-sampled of them, the higher ratio first, 1.0 (the
  baseline) included; once each has min_samples, the side of an unresolved
  slowdown (that ratio or 1.0) whose next run shrinks its standard error
  most;
- settled: the ratio of least mean energy per unit among 1.0 and the ratios
  whose slowdown's one-sided 95 % upper confidence limit is within the
  bound;
- guarded: a settled ratio whose last min_samples runs are shown slower
  than the bound (their lower confidence limit above it) goes back to 1.0;
  only runs after that update count, and the kind is explored again.

The slowdown of ratio r is mean_t(r) / mean_t(1.0) - 1, its standard error
by the delta method for a ratio of independent means, and its limits use
Student's t with min(n_r, n_1) - 1 degrees of freedom.  A ratio shown
beyond the bound (lower limit above it) is not tried again, nor is any lower
one (a lower clock never makes a phase faster).  A ratio still unresolved
after 4 x min_samples runs is dropped as not shown within the bound.

Pure functions over rows read by store/read_policy.py; the file is written
atomically (temporary name, fsync, rename) and holds no measured figure.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field

FILE_FORMAT = "joulestep-auto"
FILE_VERSION = 1
DEFAULT_RATIOS = (1.0, 0.85, 0.7, 0.55)
#: io-dvfs's fixed ratios: what apps the file does not list run at
DEFAULT_MAP = {"compress": 0.875, "write": 0.85}
CONFIDENCE = 0.95
CV_MAX = 0.5
MAX_SAMPLES_FACTOR = 4
SNAP = 0.03          # a phase's ratio is the allowed one within this
GIB = float(1 << 30)
STATES = ("exploring", "settled", "guarded")
UNCERTAIN = "energy uncertain (reset or wrap)"
CONFLICT = "conflicting copies of the step"
NO_CLOCK = "clock not set by a policy (no freq_khz or fmax)"
OFF_GRID = "ran at a ratio outside --ratios"


class PolicyError(ValueError):
    """Bad options or a bad previous file: the message says what is allowed."""


@dataclass(frozen=True)
class Settings:
    ratios: tuple = DEFAULT_RATIOS
    bound_pct: float = 5.0
    min_samples: int = 3
    baseline_every: int = 10
    default: dict = field(default_factory=lambda: dict(DEFAULT_MAP))

    @property
    def bound(self) -> float:
        return self.bound_pct / 100.0


@dataclass
class Sample:
    ratio: float
    units: float
    energy_j: float
    time_s: float
    start_ns: int
    baseline: bool = False

    @property
    def e(self) -> float:
        return self.energy_j / self.units

    @property
    def t(self) -> float:
        return self.time_s / self.units


@dataclass
class Decision:
    app: str
    kind: str
    state: str
    ratio: float
    reason: str
    unit: str
    rows: list
    since_ns: int | None = None
    saving_pct: float | None = None
    exploring_j: float = 0.0
    baseline_j: float = 0.0


# ------------------------------------------------------------------ options
def parse_ratios(text: str | None, min_ratio: float) -> tuple[tuple, list[str]]:
    """'1,0.85,0.7' -> the allowed ratios (descending) and notes on those
    dropped below min_ratio."""
    if text is None:
        vals = list(DEFAULT_RATIOS)
    else:
        try:
            vals = [float(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise PolicyError(f"--ratios {text!r}: allowed a comma-separated list of "
                              "numbers in (0, 1] that includes 1") from None
    if not vals or any(not (0 < v <= 1) or math.isnan(v) for v in vals):
        raise PolicyError(f"--ratios {text!r}: every ratio must be in (0, 1], and 1 among them")
    if 1.0 not in vals:
        raise PolicyError(f"--ratios {text!r}: must include 1 (fmax: the baseline every "
                          "slowdown is measured against)")
    keep = sorted({v for v in vals if v >= min_ratio}, reverse=True)
    notes = [f"ratio {v:g} dropped: below the plugin's min_ratio {min_ratio:g}"
             for v in sorted(set(vals) - set(keep), reverse=True)]
    return tuple(keep), notes


def parse_default(text: str) -> dict:
    out = {}
    for part in text.split(","):
        k, sep, v = part.partition("=")
        try:
            r = float(v)
        except ValueError:
            r = float("nan")
        if not sep or not k or not (0 < r <= 1):
            raise PolicyError(f"--default {text!r}: allowed KIND=R[,KIND=R...] with R in (0, 1]")
        out[k.strip()] = r
    return out


def read_file(path: str) -> dict | None:
    """The previous file (None: there is none)."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise PolicyError(f"{path}: not a {FILE_FORMAT} file ({e}); fix or remove it") from None
    if not isinstance(doc, dict) or doc.get("format") != FILE_FORMAT \
            or doc.get("version") != FILE_VERSION or not isinstance(doc.get("apps", {}), dict):
        raise PolicyError(f"{path}: not a {FILE_FORMAT} version {FILE_VERSION} file; "
                          "fix or remove it")
    return doc


# ------------------------------------------------------------------ samples
def _snap(ratio: float, allowed) -> float | None:
    best = min(allowed, key=lambda a: abs(a - ratio))
    return best if abs(best - ratio) <= SNAP else None


def samples(rows, allowed, since_ns: dict) -> tuple[dict, Counter, dict]:
    """(app, kind) -> [Sample] (one per step, kind and ratio), the phases
    left out and why, and (app, kind) -> unit ("GiB" or "phase")."""
    excluded = Counter()
    groups = defaultdict(lambda: [0.0, 0.0, 0, 0, True, 0, False])
    keys = []
    for r in rows:
        key = (r.app, r.kind)
        if key not in since_ns:
            since_ns[key] = None
            keys.append(key)
        since = since_ns[key]
        if since is not None and r.start_ns < since:
            continue
        if r.conflict:
            excluded[CONFLICT] += 1
            continue
        if r.uncertain or r.energy_uj is None:
            excluded[UNCERTAIN] += 1
            continue
        if not r.freq_khz or not r.fmax_khz:
            excluded[NO_CLOCK] += 1
            continue
        ratio = _snap(r.freq_khz / r.fmax_khz, allowed)
        if ratio is None:
            excluded[OFF_GRID] += 1
            continue
        g = groups[(key, r.step_pk, ratio)]
        g[0] += r.energy_uj / 1e6
        g[1] += r.duration_ns / 1e9
        g[2] += 1
        g[3] += r.bytes or 0
        g[4] = g[4] and bool(r.bytes)
        g[5] = r.start_ns
        g[6] = r.baseline
    out = {k: [] for k in since_ns}
    units = {k: "phase" for k in since_ns}
    for k in out:
        gs = [g for (gk, _, _), g in groups.items() if gk == k]
        if gs and all(g[4] for g in gs):
            units[k] = "GiB"
    for (key, _, ratio), g in groups.items():
        n = g[3] / GIB if units[key] == "GiB" else g[2]
        out[key].append(Sample(ratio, n, g[0], g[1], g[5], g[6]))
    for v in out.values():
        v.sort(key=lambda s: s.start_ns)
    return out, excluded, units


# ------------------------------------------------------------------ statistics
def _tq(df: int) -> float:
    from scipy import stats
    return float(stats.t.ppf(CONFIDENCE, df))


def slowdown(t_r: list, t_1: list):
    """(slowdown, upper limit, lower limit) of mean(t_r)/mean(t_1) - 1;
    limits None with fewer than 2 samples on either side."""
    m_r, m_1 = statistics.fmean(t_r), statistics.fmean(t_1)
    s = m_r / m_1 - 1
    if len(t_r) < 2 or len(t_1) < 2:
        return s, None, None
    se = (m_r / m_1) * math.sqrt(statistics.variance(t_r) / (len(t_r) * m_r ** 2)
                                 + statistics.variance(t_1) / (len(t_1) * m_1 ** 2))
    q = _tq(min(len(t_r), len(t_1)) - 1)
    return s, s + q * se, s - q * se


def _cv(xs):
    return statistics.stdev(xs) / statistics.fmean(xs) if len(xs) >= 2 and \
        statistics.fmean(xs) > 0 else 0.0


# ------------------------------------------------------------------ decisions
def _table(by: dict, s: Settings) -> tuple[list, dict]:
    """Per ratio: figures and status (within, beyond, pruned, needs runs,
    dropped); ratio -> status."""
    N, maxn = s.min_samples, MAX_SAMPLES_FACTOR * s.min_samples
    base = [x.t for x in by.get(1.0, [])]
    status, rows, beyond = {}, [], False
    for r in s.ratios:
        xs = by.get(r, [])
        row = {"ratio": r, "samples": len(xs),
               "energy_j": statistics.fmean(x.e for x in xs) if xs else None,
               "time_s": statistics.fmean(x.t for x in xs) if xs else None,
               "slowdown_pct": None, "slowdown_hi_pct": None, "slowdown_lo_pct": None}
        if r == 1.0:
            st = "baseline" if len(xs) >= N else "needs runs"
        elif beyond:
            st = "not tried: a higher ratio is beyond the bound"
        elif not xs or not base:
            st = "needs runs"
        else:
            sd, hi, lo = slowdown([x.t for x in xs], base)
            row.update(slowdown_pct=100 * sd,
                       slowdown_hi_pct=None if hi is None else 100 * hi,
                       slowdown_lo_pct=None if lo is None else 100 * lo)
            if lo is not None and lo > s.bound:
                st, beyond = "beyond the bound", True
            elif hi is not None and hi <= s.bound and len(xs) >= N and len(base) >= N:
                st = "within the bound"
            elif len(xs) >= maxn:
                st = f"dropped: not shown within the bound after {maxn} runs"
            else:
                st = "needs runs"
        row["status"] = st
        status[r] = st
        rows.append(row)
    return rows, status


def _rel_var(xs: list) -> float:
    """Squared coefficient of variation of the times per unit: a side's term
    in the slowdown's squared standard error, times its n."""
    ts = [x.t for x in xs]
    return statistics.variance(ts) / statistics.fmean(ts) ** 2 if len(ts) >= 2 else 0.0


def _next_try(by: dict, status: dict, s: Settings) -> float | None:
    """While some ratio has fewer than min_samples runs: the least-sampled,
    the higher first.  Then, while a slowdown is unresolved: the side (that
    ratio, or 1.0) whose next run shrinks the slowdown's standard error
    most, the higher first on a tie."""
    N, maxn = s.min_samples, MAX_SAMPLES_FACTOR * s.min_samples
    need = [r for r in s.ratios if r != 1.0 and status[r] == "needs runs"]
    n = {r: len(by.get(r, [])) for r in s.ratios}
    under = [r for r in need + [1.0] if n[r] < N]
    if under:
        return min(under, key=lambda r: (n[r], -r))
    if not need:
        return None
    gain = {r: _rel_var(by[r]) / (n[r] * (n[r] + 1)) for r in need}
    if n[1.0] < maxn:
        gain[1.0] = _rel_var(by[1.0]) / (n[1.0] * (n[1.0] + 1))
    return max(gain, key=lambda r: (gain[r], r))


def _energy(by: dict, ref: float, d: Decision) -> None:
    """Saving of ref vs 1.0; energy of runs not at ref over what ref uses."""
    xs = by.get(ref, [])
    e_ref = statistics.fmean(x.e for x in xs) if xs else None
    if e_ref is None:
        return
    if by.get(1.0):
        d.saving_pct = 100 * (1 - e_ref / statistics.fmean(x.e for x in by[1.0]))
    for r, ys in by.items():
        if r == ref:
            continue
        for y in ys:
            extra = y.energy_j - y.units * e_ref
            if r == 1.0 and y.baseline:
                d.baseline_j += extra
            else:
                d.exploring_j += extra


def _guard(by: dict, prev: dict | None, s: Settings) -> str | None:
    if not prev or prev.get("state") != "settled":
        return None
    r = prev.get("ratio")
    recent = [x.t for x in by.get(r, [])][-s.min_samples:]
    base = [x.t for x in by.get(1.0, [])]
    if r == 1.0 or len(recent) < s.min_samples or len(base) < 2:
        return None
    sd, _, lo = slowdown(recent, base)
    if lo is not None and lo > s.bound:
        return (f"guarded: the last {len(recent)} runs at {r:g} are {100 * sd:.1f} % slower "
                f"than at 1.0 (lower limit {100 * lo:.1f} % > {s.bound_pct:g} %); back to "
                "1.0, explored again")
    return None


def decide(app: str, kind: str, xs: list, unit: str, prev: dict | None, s: Settings,
           now_ns: int) -> Decision:
    by = defaultdict(list)
    for x in xs:
        by[x.ratio].append(x)
    rows, status = _table(by, s)
    since = prev.get("since_ns") if prev else None
    since = since if isinstance(since, int) and not isinstance(since, bool) else None
    why = _guard(by, prev, s)
    if why:
        d = Decision(app, kind, "guarded", 1.0, why, unit, rows, since_ns=now_ns)
        _energy(by, 1.0, d)
        return d
    wide = [r for r in s.ratios if unit == "phase" and _cv([x.t for x in by.get(r, [])]) > CV_MAX]
    nxt = _next_try(by, status, s)
    within = [r for r in s.ratios if r == 1.0 and by.get(1.0)
              or status[r] == "within the bound"]
    best = min(within, key=lambda r: statistics.fmean(x.e for x in by[r])) if within else 1.0
    if wide:
        r = wide[0]
        d = Decision(app, kind, "exploring", 1.0,
                     f"durations vary widely at {r:g} (coefficient of variation "
                     f"{100 * _cv([x.t for x in by[r]]):.0f} % > 50 %) and the phases report "
                     "no bytes: no ratio can be judged; runs at 1.0", unit, rows)
    elif nxt is not None:
        pending = [f"{r:g}" for r in s.ratios if status[r] == "needs runs"]
        d = Decision(app, kind, "exploring", nxt,
                     f"needs runs at {', '.join(pending)} (at least {s.min_samples} each, and "
                     f"a slowdown shown within or beyond the {s.bound_pct:g} % bound); "
                     f"next: {nxt:g}", unit, rows)
    else:
        d = Decision(app, kind, "settled", best,
                     f"least energy per {unit} among 1.0 and the ratios shown within the "
                     f"{s.bound_pct:g} % bound", unit, rows)
    if prev and prev.get("state") == "guarded" and d.state != "settled":
        d.state = "guarded"
    d.since_ns = since
    _energy(by, d.ratio if d.state == "settled" else best, d)
    return d


def learn(rows, s: Settings, prev_doc: dict | None, now_ns: int) -> tuple[list, Counter]:
    """Every (app, kind) of the rows: its decision, given the previous file."""
    prev_apps = (prev_doc or {}).get("apps", {})
    since = {}
    for r in rows:
        key = (r.app, r.kind)
        if key not in since:
            p = prev_apps.get(r.app, {}).get("phases", {}).get(r.kind) or {}
            since[key] = p.get("since_ns") if isinstance(p.get("since_ns"), int) else None
    by_key, excluded, units = samples(rows, s.ratios, dict(since))
    out = []
    for (app, kind), xs in sorted(by_key.items()):
        prev = prev_apps.get(app, {}).get("phases", {}).get(kind)
        out.append(decide(app, kind, xs, units[(app, kind)], prev, s, now_ns))
    return out, excluded


def document(decisions: list, s: Settings) -> dict:
    apps = {}
    for d in decisions:
        k = {"ratio": d.ratio, "state": d.state}
        if d.since_ns is not None:
            k["since_ns"] = d.since_ns
        apps.setdefault(d.app, {"phases": {}})["phases"][d.kind] = k
    return {"format": FILE_FORMAT, "version": FILE_VERSION, "bound_pct": s.bound_pct,
            "baseline_every": s.baseline_every, "ratios": list(s.ratios),
            "min_samples": s.min_samples, "default": dict(s.default), "apps": apps}


def changes(prev_doc: dict | None, doc: dict, decisions: list) -> list[str]:
    """One line per (app, kind) whose ratio or state changed."""
    prev_apps = (prev_doc or {}).get("apps", {})
    lines = []
    for d in decisions:
        p = prev_apps.get(d.app, {}).get("phases", {}).get(d.kind)
        if p and p.get("ratio") == d.ratio and p.get("state") == d.state:
            continue
        was = f"{p.get('state')} {p.get('ratio'):g}" if p else "new"
        extra = f", saving {d.saving_pct:.1f} %" if d.state == "settled" and \
            d.saving_pct is not None else ""
        lines.append(f"{d.app} {d.kind}: {was} -> {d.state} {d.ratio:g}{extra} ({d.reason})")
    for key in ("default", "bound_pct", "baseline_every"):
        if prev_doc is not None and prev_doc.get(key) != doc[key]:
            lines.append(f"{key}: {prev_doc.get(key)} -> {doc[key]}")
    return lines


def write_atomic(path: str, doc: dict) -> None:
    """Temporary file in the same directory, mode 0644, fsync, rename."""
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), 0o644)
            json.dump(doc, f, indent=1, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
