"""Site settings (INI file) and default paths.

Lookup order for the config file: ``--config PATH``, ``$JOULESTEP_CONFIG``,
``/etc/joulestep/joulestep.conf``; a missing default file means built-in
defaults.  See etc/joulestep.conf.example for every key.
"""
from __future__ import annotations

import configparser
import os
import re

from .store import db
from .store import JOB_GAP_HOURS

# Paths are text here (os.path), not pathlib: `joulestep job` then starts
# without importing pathlib (docs/cli.md, "Start-up").
SYSTEM_CONFIG = "/etc/joulestep/joulestep.conf"
SYSTEM_DB = "/var/lib/joulestep/joulestep.db"
SYSTEM_SPOOL = "/var/spool/joulestep"
MAX_JOB_GAP_HOURS = 1e6               # ~114 years: keeps the gap in 64-bit ns


class ConfigError(Exception):
    """A config file that exists but cannot be used."""


class Settings:
    """Site settings; every field has a built-in default.

    A plain class, not a dataclass: generating a dataclass's methods costs
    about a millisecond at start-up, which every command pays (docs/cli.md,
    "Start-up")."""
    __slots__ = ("cluster", "co2_g_per_kwh", "price_per_kwh", "currency",
                 "job_gap_hours", "spool", "db", "quarantine", "source",
                 "node_overhead_w", "node_factor", "zone", "zone_rules", "db_group")

    def __init__(self, *,
                 cluster: str | None = None,      # default cluster for queries (None: any)
                 co2_g_per_kwh: float = 300.0,
                 price_per_kwh: float = 0.20,
                 currency: str = "EUR",
                 job_gap_hours: float = JOB_GAP_HOURS,  # gap G of the job identity rule
                 spool: str = SYSTEM_SPOOL,
                 # a file or postgresql:// URL; None: the default chain in resolve_db
                 db: str | None = None,
                 quarantine: str | None = None,  # None: <spool>/.quarantine
                 source: str = "built-in defaults",
                 node_overhead_w: float | None = None,  # rest of the node, W per node
                 node_factor: float | None = None,      # node energy / RAPL energy
                 zone: str | None = None,      # grid zone where nothing more specific is set
                 # ((field, names, zone), ...): [zones] nodes./partition./cluster.
                 # lines, most specific first (zones.py reads them)
                 zone_rules: tuple = (),
                 db_group: str | None = None):   # a new SQLite store: 0640, this group
        self.db_group = db_group
        self.cluster, self.co2_g_per_kwh = cluster, co2_g_per_kwh
        self.price_per_kwh, self.currency = price_per_kwh, currency
        self.job_gap_hours, self.spool, self.db = job_gap_hours, spool, db
        self.quarantine, self.source = quarantine, source
        self.node_overhead_w, self.node_factor = node_overhead_w, node_factor
        self.zone, self.zone_rules = zone, zone_rules

    def __repr__(self) -> str:
        return "Settings(" + ", ".join(f"{k}={getattr(self, k)!r}"
                                       for k in self.__slots__) + ")"

    def __eq__(self, other) -> bool:
        return type(other) is Settings and all(
            getattr(self, k) == getattr(other, k) for k in self.__slots__)

    @property
    def scope(self) -> str:
        """What kWh, CO2 and cost cover: "cpu+dram" (RAPL only) or, with
        node_overhead_w or node_factor, "node estimate"."""
        if self.node_overhead_w is None and self.node_factor is None:
            return "cpu+dram"
        return "node estimate"

    def scope_note(self) -> str:
        """One sentence saying what kWh, CO2 and cost cover."""
        if self.node_factor is not None:
            return (f"kWh, CO2 and cost are a node estimate: RAPL CPU + DRAM "
                    f"energy x {self.node_factor:g} (node_factor, calibrated "
                    "against a node meter)")
        if self.node_overhead_w is not None:
            return (f"kWh, CO2 and cost are a node estimate: RAPL CPU + DRAM "
                    f"energy + {self.node_overhead_w:g} W per node for the rest "
                    "of the node (node_overhead_w)")
        return ("kWh, CO2 and cost cover CPU packages and DRAM only (RAPL); "
                "the rest of the node is not measured")

    def scoped_j(self, rapl_j: float, node_s: float) -> float:
        """The energy kWh, CO2 and cost are computed from: the RAPL energy
        rapl_j of node_s node-seconds, with the rest of the node added."""
        if self.node_factor is not None:
            return rapl_j * self.node_factor
        if self.node_overhead_w is not None:
            return rapl_j + self.node_overhead_w * node_s
        return rapl_j


def _float(cp: configparser.ConfigParser, sect: str, key: str, default: float,
           path: str, maximum: float = 1e12) -> float:
    raw = cp.get(sect, key, fallback=None)
    if raw is None or raw.strip() == "":
        return default
    try:
        val = float(raw)
    except ValueError:
        raise ConfigError(f"{path}: [{sect}] {key} = {raw!r}: expected a number") from None
    if not 0 <= val <= maximum:     # also refuses nan
        raise ConfigError(f"{path}: [{sect}] {key} = {raw!r}: must be between "
                          f"0 and {maximum:g}")
    return val


MAX_NODE_OVERHEAD_W = 1e5
MAX_NODE_FACTOR = 100.0


def _node_scope(cp: configparser.ConfigParser, s: Settings, path: str) -> None:
    """[site] node_overhead_w / node_factor: at most one of them."""
    given = [k for k in ("node_overhead_w", "node_factor")
             if cp.get("site", k, fallback="").strip()]
    if len(given) > 1:
        raise ConfigError(f"{path}: [site] node_overhead_w and node_factor both "
                          "set: give one of them, not both (the overhead adds W "
                          "per node, the factor scales the RAPL energy)")
    if "node_overhead_w" in given:
        s.node_overhead_w = _float(cp, "site", "node_overhead_w", 0.0, path,
                                   maximum=MAX_NODE_OVERHEAD_W)
    if "node_factor" in given:
        f = _float(cp, "site", "node_factor", 1.0, path, maximum=MAX_NODE_FACTOR)
        if f < 1:
            raise ConfigError(f"{path}: [site] node_factor = {f:g}: must be at "
                              "least 1 (the node uses at least its CPU and DRAM "
                              f"energy) and at most {MAX_NODE_FACTOR:g}")
        s.node_factor = f


def load(path: str | os.PathLike | None = None) -> Settings:
    """Read settings; ``path`` None means $JOULESTEP_CONFIG or the system file."""
    explicit = path is not None or "JOULESTEP_CONFIG" in os.environ
    p = os.fspath(path if path is not None
                  else os.environ.get("JOULESTEP_CONFIG", SYSTEM_CONFIG))
    s = Settings()
    if not os.path.exists(p):
        if explicit:
            raise ConfigError(f"config file {p} does not exist")
        return s
    cp = configparser.ConfigParser(interpolation=None)
    try:
        with open(p, encoding="utf-8") as fh:
            cp.read_file(fh)
    except (OSError, configparser.Error, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read config {p}: {e}") from None
    known = {"site": {"cluster", "co2_g_per_kwh", "price_per_kwh", "currency",
                      "job_gap_hours", "node_overhead_w", "node_factor", "zone"},
             "paths": {"spool", "db", "quarantine", "db_group"}, "zones": None}
    for sect in cp.sections():
        if sect not in known:
            raise ConfigError(f"{p}: unknown section [{sect}] (allowed: site, "
                              "paths, zones)")
        if known[sect] is None:
            continue
        for key in cp[sect]:
            if key not in known[sect]:
                raise ConfigError(f"{p}: unknown key {key!r} in [{sect}] "
                                  f"(allowed: {', '.join(sorted(known[sect]))})")
    s.cluster = cp.get("site", "cluster", fallback=None) or None
    s.co2_g_per_kwh = _float(cp, "site", "co2_g_per_kwh", s.co2_g_per_kwh, str(p))
    s.price_per_kwh = _float(cp, "site", "price_per_kwh", s.price_per_kwh, str(p))
    s.currency = cp.get("site", "currency", fallback=s.currency) or s.currency
    s.job_gap_hours = _float(cp, "site", "job_gap_hours", s.job_gap_hours, str(p),
                             maximum=MAX_JOB_GAP_HOURS)
    _node_scope(cp, s, str(p))
    s.zone = (cp.get("site", "zone", fallback="") or "").strip() or None
    if cp.has_section("zones"):
        s.zone_rules = _zone_rules(p)
    if cp.get("paths", "spool", fallback=""):
        s.spool = cp.get("paths", "spool")
    if cp.get("paths", "db", fallback=""):
        s.db = _db_target(cp.get("paths", "db"))
    s.db_group = cp.get("paths", "db_group", fallback="").strip() or None
    if cp.get("paths", "quarantine", fallback=""):
        s.quarantine = cp.get("paths", "quarantine")
    s.source = str(p)
    return s


_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def expand_hostlist(text: str) -> list[str]:
    """Slurm's host list (n[001-004,010],gpu1) as names; ValueError when
    it is not one."""
    out, buf, depth = [], "", 0
    parts = []
    for ch in text.strip():
        if ch == "," and depth == 0:
            parts.append(buf)
            buf = ""
            continue
        depth += ch == "["
        depth -= ch == "]"
        if depth not in (0, 1):
            raise ValueError(f"node list {text!r}: nested or unbalanced brackets")
        buf += ch
    if depth:
        raise ValueError(f"node list {text!r}: unbalanced brackets")
    parts.append(buf)
    for part in parts:
        part = part.strip()
        if not part:
            raise ValueError(f"node list {text!r}: an empty name")
        m = re.match(r"^([^\[\]]*)\[([^\[\]]+)\]([^\[\]]*)$", part)
        if not m:
            if "[" in part or "]" in part:
                raise ValueError(f"node list {text!r}: cannot read {part!r}")
            out.append(part)
            continue
        pre, body, post = m.groups()
        for r in body.split(","):
            rm = _RANGE.match(r.strip())
            if not rm:
                raise ValueError(f"node list {text!r}: {r!r} is not N or N-M")
            lo, hi = rm.group(1), rm.group(2) or rm.group(1)
            if int(hi) < int(lo) or int(hi) - int(lo) > 100_000:
                raise ValueError(f"node list {text!r}: bad range {r!r}")
            for i in range(int(lo), int(hi) + 1):
                out.append(f"{pre}{str(i).zfill(len(lo))}{post}")
    return out


ZONE_FIELDS = ("nodes", "partition", "cluster")     # most specific first


def _zone_rules(path: str) -> tuple:
    """[zones] lines ``nodes.HOSTLIST = ZONE``, ``partition.NAME = ZONE``,
    ``cluster.NAME = ZONE`` as ((field, names, zone), ...), most specific
    first (nodes, then partition, then cluster; in file order within one).
    Read again with the names' case kept (configparser lowers keys)."""
    cp = configparser.ConfigParser(interpolation=None, delimiters=("=",))
    cp.optionxform = str
    with open(path, encoding="utf-8") as fh:
        cp.read_file(fh)
    rules: dict = {f: [] for f in ZONE_FIELDS}
    for key, zone in cp["zones"].items():
        field, dot, names = key.partition(".")
        zone = zone.strip()
        if not dot or field not in rules or not names.strip() or not zone:
            raise ConfigError(f"{path}: [zones] {key} = {zone}: expected "
                              "nodes.HOSTLIST = ZONE, partition.NAME = ZONE or "
                              "cluster.NAME = ZONE")
        try:
            got = tuple(expand_hostlist(names)) if field == "nodes" else (names.strip(),)
        except ValueError as e:
            raise ConfigError(f"{path}: [zones] {key}: {e}") from None
        rules[field].append((field, got, zone))
    return tuple(r for f in ZONE_FIELDS for r in rules[f])


def user_db_path() -> str:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "joulestep", "joulestep.db")


def _writable(db: str) -> bool:
    parent = os.path.dirname(db) or "."
    if os.path.exists(db):
        return os.access(db, os.W_OK) and os.access(parent, os.W_OK)
    return os.path.isdir(parent) and os.access(parent, os.W_OK)


def _db_target(text) -> str:
    """A database named in an option, the environment or the config: a file
    or a postgresql:// URL (kept as text: a path would fold its //)."""
    t = str(text).strip()
    return t if db.is_url(t) else os.fspath(text)


def resolve_db(explicit: str | os.PathLike | None, settings: Settings,
               write: bool) -> str:
    """Pick the database, as text: a SQLite file or a PostgreSQL URL.

    ``--db``, then $JOULESTEP_DB, then ``[paths] db`` from the config, then
    /var/lib/joulestep/joulestep.db: used when writable, or (for read-only
    commands) when it exists and is readable; otherwise the per-user
    ``$XDG_DATA_HOME/joulestep/joulestep.db``.
    """
    if explicit:
        return _db_target(explicit)
    env = os.environ.get("JOULESTEP_DB")
    if env:
        return _db_target(env)
    if settings.db is not None:
        return settings.db
    if _writable(SYSTEM_DB):
        return SYSTEM_DB
    if not write and os.path.exists(SYSTEM_DB) and os.access(SYSTEM_DB, os.R_OK):
        return SYSTEM_DB
    return user_db_path()
