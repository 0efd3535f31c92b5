"""The spool record: its schema, declared once, and the one checker.

:data:`SCHEMA` is the table of every field ingest reads from a
``joulestep-record`` (docs/record-format.md): its path, type, unit, range,
whether it may be null or absent, the record version that introduced it, and
the database column it fills.  :func:`parse_record` checks a decoded record
against that table and returns its rows (:class:`Parsed`), or raises
:class:`RecordError` naming the first bad field by its path, e.g.
``phases[3].energy_cpu_uj``.  The field table of docs/record-format.md is
generated from SCHEMA (:func:`field_table`, printed by ``python -m joulestep.store``;
tests/cli/test_record_schema.py checks that the two agree).

Adding a field (docs/design.md, "One record schema"): one :class:`Field` in
SCHEMA (with ``column``, and a migration adding that column); the checker,
the rows, the insert and the doc table follow from it.  A change that
breaks readers bumps RECORD_VERSION and adds the step from the version
before to :data:`UPGRADES`, the one place older records are brought to the
current shape.
"""
from __future__ import annotations

import hashlib
import json
import operator
import re
from typing import NamedTuple

RECORD_FORMAT = "joulestep-record"
RECORD_VERSION = 4
LOST_FORMAT = "joulestep-lost"
#: policies that never change the clock (not counted as policy adoption)
INACTIVE_POLICIES = frozenset(("monitor", "none", "off", "base", ""))
#: a step id, matched whole (fullmatch: `$` would let a final newline by) and
#: ASCII only (\d would take any Unicode digit)
STEP_ID = re.compile(r"\d+|batch|extern|interactive|[A-Za-z0-9_.+-]{1,64}", re.ASCII)
_LO64, _HI64 = -(1 << 63), 1 << 63
#: a phase kind: what the plugin accepts from a marker (spank/js_parse.c)
PHASE_KIND = re.compile(r"[a-z0-9_-]{1,32}", re.ASCII)
#: the longest step a record may hold: a year (no Slurm step runs longer; a
#: clock set wrong does)
MAX_STEP_NS = 366 * 86400 * 10 ** 9
#: the most power one node's record may show, in W (an 8-GPU node draws
#: about 10 kW): beyond it a figure is a broken counter or a forged record
MAX_NODE_W = 100_000


#: the default of a field worked out from others (a cross-field rule)
DERIVED = "derived"


class RecordError(ValueError):
    """A spool record that does not follow the record format."""


class Field(NamedTuple):
    """One field of the record.  ``path``: where it is (``step.start_ns``,
    ``phases[].seq``); ``type``: int, str, num, bool, step_id, strings
    (a list of strings), tags (an object of strings); ``minimum``: the
    smallest integer allowed; ``null``: may be null; ``required``: must be
    present (else ``default``); ``since``: the record version that
    introduced it; ``column``: the database column it fills (None: checked,
    not stored)."""
    path: str
    type: str
    unit: str | None = None
    minimum: int | None = None
    null: bool = True
    required: bool = False
    default: object = None
    since: int = 1
    column: str | None = None
    doc: str = ""

    @property
    def section(self) -> str:
        return self.path.rpartition(".")[0]

    @property
    def name(self) -> str:
        return self.path.rpartition(".")[2]


F = Field
#: every field ingest reads, in row order within each section
SCHEMA = (
    F("cluster", "str", null=False, required=True, doc="the cluster's name"),
    # job (jobs row: cluster, job_id, window, then these in order)
    F("job.job_id", "int", minimum=0, null=False, required=True, column="job_id"),
    F("job.submit_time_ns", "int", "ns", 0, column="submit_time_ns",
      doc="older plugins; the window's start when first_seen_ns is absent"),
    F("job.first_seen_ns", "int", "ns", 0, null=False, default=DERIVED,
      doc="job prolog on this node (else the step start); window start"),
    F("job.incarnation_ns", "int", "ns", 0, null=False, default=DERIVED,
      doc="which run of a requeued job: the job prolog's time on this node; "
          "default first_seen_ns; stored as steps.incarnation_ns, in the step's key"),
    F("job.start_time_ns", "int", "ns", column="start_time_ns"),
    F("job.name", "str", column="name"),
    F("job.user", "str", column="user_name"),
    F("job.uid", "int", minimum=0, column="uid"),
    F("job.gid", "int", minimum=0, column="gid"),
    F("job.account", "str", column="account"),
    F("job.partition", "str", column="partition"),
    F("job.tags", "tags", doc="object of strings: step_tags rows"),
    # step (steps row: these and the provenance fields, in order)
    F("step.step_id", "step_id", null=False, required=True, column="step_id",
      doc="a number, batch, extern, interactive or 1-64 of A-Za-z0-9_.+-"),
    F("step.het_component", "int", minimum=0, null=False, default=0,
      column="het_component"),
    F("step.node", "str", null=False, required=True),
    F("step.node_model", "str", column="node_model"),
    F("step.ntasks", "int", minimum=0, column="ntasks"),
    F("step.nnodes", "int", minimum=0, column="nnodes"),
    F("step.cpus", "str", column="cpus"),
    F("step.ncpus", "int", minimum=0, column="ncpus"),
    F("step.policy", "str", column="policy"),
    F("step.base_freq_khz", "int", "kHz", 1, column="base_freq_khz"),
    F("step.freq_min_ratio", "num", column="freq_min_ratio"),
    F("step.start_ns", "int", "ns", 0, null=False, required=True, column="start_ns"),
    F("step.end_ns", "int", "ns", 0, null=False, required=True, column="end_ns",
      doc=">= start_ns"),
    F("step.duration_ns", "int", "ns", 0, null=False, default=DERIVED,
      column="duration_ns",
      doc="default end_ns - start_ns"),
    F("step.energy_cpu_uj", "int", "uJ", 0, required=True, column="energy_cpu_uj",
      doc="null: not measured"),
    F("step.energy_dram_uj", "int", "uJ", 0, column="energy_dram_uj"),
    F("step.energy_total_uj", "int", "uJ", 0, column="energy_total_uj",
      doc="default cpu + dram"),
    F("step.dram_not_measured", "str", since=2, column="dram_not_measured",
      doc="why DRAM is not measured (no dram zone, as on AMD); "
          "energy_dram_uj is then null and the total the CPU's alone"),
    F("step.energy_node_uj", "int", "uJ", 0, since=2, column="energy_node_uj",
      doc="the node's own meter beside RAPL (node_energy=): pm_counters energy or "
          "the Grace Module sensors; null: none, a reset or a failed read"),
    F("step.node_meter_sources", "str", since=2, column="node_meter_sources",
      doc="the channels that make energy_node_uj (never two that overlap), or why "
          "it is null"),
    F("step.node_meter_integrated", "bool", since=2, column="node_meter_integrated",
      doc="energy_node_uj integrates power samples (hwmon)"),
    F("step.exit_code", "int", column="exit_code"),
    F("step.nominal_freq_khz", "int", "kHz", 1, column="nominal_freq_khz"),
    F("step.fixed_freq_khz", "int", "kHz", 1, column="fixed_freq_khz"),
    F("step.energy_gpu_uj", "int", "uJ", 0, since=3, column="energy_gpu_uj",
      doc="the step's GPUs; null: none, or one has no energy (gpus[].reason)"),
    F("step.total_includes", "str", since=3, column="total_includes",
      doc="what energy_total_uj holds: cpu+dram, cpu+dram+gpu; cpu, cpu+gpu where DRAM is not measured"),
    F("step.smt_aside_cpus", "str", since=3, column="smt_aside_cpus",
      doc="step CPUs whose clock the policy left alone: their core has an SMT thread "
          "that is not the step's (absent or null: none)"),
    F("step.cpu_time_ns", "int", "ns", 0, since=3, column="cpu_time_ns",
      doc="the step's CPU time (its reaped tasks'): the shared-node attribution's input"),
    F("step.cpu_time_source", "str", since=4, column="cpu_time_source",
      doc="where cpu_time_ns comes from: cgroup-percpu or cgroup (the step's cgroup), "
          "children (slurmstepd's reaped tasks, no cgroup accounting)"),
    F("step.cpuset_check", "str", since=4, column="cpuset_check",
      doc="with task/cgroup: agrees, or why the step's cpuset and the CPUs the plugin "
          "mapped from Slurm's cores disagree (no clock was changed); null: no cpuset"),
    F("step.fmax_khz", "int", "kHz", 1, since=4, column="fmax_khz",
      doc="the step CPUs' cpuinfo_max_freq: a policy's ratio R is R x this"),
    F("step.policy_app", "str", since=4,
      doc="auto: the step's app (its app tag), whose map it applied"),
    F("step.policy_app_listed", "bool", since=4,
      doc="auto: the file lists the app (else the file's default map)"),
    F("step.policy_states", "tags", since=4,
      doc="auto: per kind of policy_map, what the file said: exploring, settled, "
          "guarded, or default (the file's default map)"),
    F("step.policy_baseline", "bool", since=4, column="policy_baseline",
      doc="auto: a baseline job (job id mod baseline_every = 0): settled kinds at fmax"),
    F("provenance.backend", "str", column="backend"),
    F("provenance.wrap_uncertain", "bool", null=False, default=False,
      column="wrap_uncertain"),
    F("provenance.sample_period_ns", "int", "ns", 0, column="sample_period_ns"),
    F("provenance.errors", "strings", null=False, default=(), column="errors_json"),
    F("provenance.plugin_version", "str", column="plugin_version"),
    F("provenance.job_source", "str", doc="prolog or step"),
    F("provenance.freq_control", "str", column="freq_control"),
    F("provenance.min_phase_ns", "int", "ns", 0, column="min_phase_ns"),
    F("provenance.energy_resolution_uj", "int", "uJ", 1,
      column="energy_resolution_uj"),
    F("provenance.auto_file", "str", since=4, doc="auto: the admin's auto= file"),
    F("provenance.auto_file_digest", "str", since=4,
      doc="auto: fnv1a64:HEX of the file's bytes: which version the step read"),
    F("provenance.gpu_backend", "str", since=3, column="gpu_backend",
      doc="nvml or amdsmi; null: no GPU measured"),
    F("provenance.gpus_unmeasured", "str", since=3, column="gpus_unmeasured",
      doc="why the job's GPUs were not measured"),
    F("provenance.gpu_clock_control", "str", since=3, column="gpu_clock_control",
      doc="joulestep (+gpu-io), slurm-gpu-freq or none; null: no GPU"),
    # zones[] (step_zones rows; a null energy_uj: no row)
    F("zones[].name", "str", null=False, required=True, column="name"),
    F("zones[].id", "str", null=False, required=True, column="zone_id",
      doc="unique within the record"),
    F("zones[].kind", "str", column="kind"),
    F("zones[].energy_uj", "int", "uJ", 0, required=True, column="energy_uj",
      doc="null: uncertain, no row"),
    F("zones[].wraps", "int", minimum=0, null=False, default=0, column="wraps"),
    # gpus[] (step_gpus rows, null energies included: the reason is kept)
    F("gpus[].index", "int", minimum=0, since=3, column="gpu_index",
      doc="the vendor library's index"),
    F("gpus[].uuid", "str", null=False, required=True, since=3, column="uuid",
      doc="unique within the record"),
    F("gpus[].model", "str", since=3, column="model"),
    F("gpus[].energy_uj", "int", "uJ", 0, required=True, since=3,
      column="energy_uj", doc="null: see reason"),
    F("gpus[].reason", "str", since=3, column="reason",
      doc="split by MIG, shared with another job, uncertain"),
    F("gpus[].integrated", "bool", since=3, column="integrated",
      doc="power integral: the GPU has no energy counter"),
    F("gpus[].resets", "int", minimum=0, since=3, column="resets"),
    # packages[] (step_packages rows): the shared-node inputs, per package the
    # step has a CPU in (docs/accounting.md, "Shared nodes")
    F("packages[].package", "int", minimum=0, null=False, required=True, since=3,
      column="package", doc="physical_package_id; unique within the record"),
    F("packages[].cpus", "int", minimum=1, null=False, required=True, since=3,
      column="cpus", doc="the package's CPUs"),
    F("packages[].step_cpus", "int", minimum=0, null=False, required=True, since=3,
      column="step_cpus", doc="of which the step's"),
    F("packages[].busy_ns", "int", "ns", 0, null=False, required=True, since=3,
      column="busy_ns", doc="the package's busy CPU time over the step (/proc/stat)"),
    F("packages[].total_ns", "int", "ns", 0, null=False, required=True, since=3,
      column="total_ns", doc="the package's CPU time, busy and idle, over the step"),
    F("packages[].step_cpu_ns", "int", "ns", 0, since=4, column="step_cpu_ns",
      doc="the step's CPU time on the package (the cgroup's per-CPU accounting); "
          "absent: cpu_time_ns is split over the packages by step_cpus"),
    # phases[] (phases rows)
    F("phases[].seq", "int", minimum=0, null=False, required=True, column="seq",
      doc="unique within the record"),
    F("phases[].kind", "str", null=False, required=True, column="kind"),
    F("phases[].label", "str", column="label"),
    F("phases[].depth", "int", minimum=0, null=False, default=0, column="depth"),
    F("phases[].parent_seq", "int", column="parent_seq",
      doc="the seq of a phase of the record"),
    F("phases[].start_ns", "int", "ns", 0, null=False, required=True,
      column="start_ns"),
    F("phases[].end_ns", "int", "ns", 0, null=False, required=True,
      column="end_ns", doc=">= start_ns"),
    F("phases[].duration_ns", "int", "ns", 0, null=False, required=True,
      column="duration_ns"),
    F("phases[].freq_khz", "int", "kHz", 1, column="freq_khz"),
    F("phases[].freq_change_ns", "int", "ns", column="freq_change_ns"),
    F("phases[].energy_cpu_uj", "int", "uJ", 0, required=True,
      column="energy_cpu_uj"),
    F("phases[].energy_dram_uj", "int", "uJ", 0, column="energy_dram_uj"),
    F("phases[].bytes", "int", "B", 0, column="bytes"),
    F("phases[].nranks", "int", column="nranks"),
    F("phases[].energy_gpu_uj", "int", "uJ", 0, since=3, column="energy_gpu_uj",
      doc="as step.energy_gpu_uj"),
    F("phases[].gpu_clock_mhz", "int", "MHz", 1, since=3, column="gpu_clock_mhz",
      doc="+gpu-io: the GPUs' clock cap the phase set; null: left alone"),
    F("phases[].uncore_max_khz", "int", "kHz", 1, since=3, column="uncore_max_khz",
      doc="+uncore-io: the uncore max clock the phase set on the step's whole "
          "packages (absent or null: left alone)"),
    # phases[].gpus[] (phase_gpus rows, after the phase's seq)
    F("phases[].gpus[].uuid", "str", null=False, required=True, since=3,
      column="uuid", doc="a GPU of gpus[]"),
    F("phases[].gpus[].energy_uj", "int", "uJ", 0, required=True, since=3,
      column="energy_uj", doc="null: see reason"),
    F("phases[].gpus[].reason", "str", since=3, column="reason"),
    F("phases[].gpus[].integrated", "bool", since=3, column="integrated"),
    # phases[].ranks[] (phase_ranks rows, after the phase's seq)
    F("phases[].ranks[].rank", "int", minimum=0, null=False, required=True,
      column="rank", doc="unique within the phase"),
    F("phases[].ranks[].start_ns", "int", "ns", column="start_ns"),
    F("phases[].ranks[].end_ns", "int", "ns", column="end_ns"),
    F("phases[].ranks[].bytes", "int", "B", 0, column="bytes"),
)
#: a "joulestep-lost" document (store/spool.py): the lost_records row
LOST_SCHEMA = (
    F("cluster", "str", null=False, required=True, column="cluster"),
    F("job_id", "int", minimum=0, null=False, required=True, column="job_id"),
    F("step_id", "step_id", null=False, required=True, column="step_id"),
    F("het_component", "int", minimum=0, null=False, default=0,
      column="het_component"),
    F("node", "str", null=False, required=True, column="node"),
    F("lost_at_ns", "int", "ns", 0, null=False, required=True, column="lost_at_ns"),
    F("reason", "str", column="reason"),
    F("step_start_ns", "int", "ns", 0, column="step_start_ns",
      doc="a killed slurmstepd's step (its step-start marker): when it started"),
    F("first_reading_ns", "int", "ns", 0, column="first_reading_ns",
      doc="a killed slurmstepd's step: when its first energy reading was taken"),
    F("incarnation_ns", "int", "ns", 0, null=False, default=0, column="incarnation_ns",
      doc="which run of a requeued job (the record name's); 0: unknown"),
)
del F


def section(sec: str, schema=SCHEMA) -> tuple:
    return tuple(f for f in schema if f.section == sec)


def columns(sec: str, schema=SCHEMA) -> tuple:
    """The database columns a section fills, in row order."""
    return tuple(f.column for f in section(sec, schema) if f.column)


# ------------------------------------------------------------- value checks

def _shown(v) -> str:
    try:
        return json.dumps(v)[:40]
    except (TypeError, ValueError):
        return repr(v)[:40]


def _text_ok(v: str) -> bool:
    """False for text the databases cannot store: a lone surrogate, which
    JSON can carry ("\\ud800") and json.loads returns as is."""
    if v.isascii():
        return True
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _int_check(f: Field):
    lo = _LO64 if f.minimum is None else f.minimum
    null, ornull = f.null, " or null" if f.null else ""

    def check(v, path):
        if type(v) is int and lo <= v < _HI64:
            return v
        if v is None and null:
            return None
        if type(v) is not int:
            raise RecordError(f"{path}: expected an integer{ornull}, got {_shown(v)}")
        if v < lo and f.minimum is not None:
            raise RecordError(f"{path}: must be >= {f.minimum}, got {v}")
        raise RecordError(f"{path}: {v} does not fit in 64 bits")
    return check


def _str_check(f: Field):
    null, ornull = f.null, " or null" if f.null else ""

    def check(v, path):
        if type(v) is str and (v or null) and (v.isascii() or _text_ok(v)):
            return v
        if v is None and null:
            return None
        if not isinstance(v, str) or not v:
            raise RecordError(f"{path}: expected a non-empty string{ornull}, "
                              f"got {_shown(v)}")
        raise RecordError(f"{path}: not valid Unicode (a lone surrogate), got "
                          f"{_shown(v)}")
    return check


def _num_check(f: Field):
    def check(v, path):
        if v is None and f.null:
            return None
        if type(v) not in (int, float):
            raise RecordError(f"{path}: expected a number, got {_shown(v)}")
        try:
            return float(v)
        except OverflowError:
            raise RecordError(f"{path}: {str(v)[:20]}... is out of range") from None
    return check


def _bool_check(f: Field):
    def check(v, path):
        if v is None and f.null:
            return None
        if type(v) is not bool:
            raise RecordError(f"{path}: expected true or false, got {_shown(v)}")
        return int(v)
    return check


def _step_id_check(f: Field):
    def check(v, path):
        if type(v) is int:
            v = str(v)
        if type(v) is str and STEP_ID.fullmatch(v):
            return v
        raise RecordError(f"{path}: expected a step number, batch, extern or "
                          f"interactive, got {_shown(v)}")
    return check


def _strings_check(f: Field):
    def check(v, path):
        if not v:
            return "[]"
        if type(v) is list and all(type(e) is str for e in v):
            return json.dumps(v)
        raise RecordError(f"{path}: expected a list of strings")
    return check


def _tags_check(f: Field):
    def check(v, path):
        if not v:
            return []
        if type(v) is not dict:
            raise RecordError(f"{path}: expected an object of strings")
        out = []
        for k, x in v.items():
            if not _text_ok(k) or (type(x) is str and not _text_ok(x)):
                raise RecordError(f"{path}: {_shown(k)}: not valid Unicode "
                                  "(a lone surrogate)")
            if type(x) not in (str, int, float) or k == "":
                raise RecordError(f"{path}.{k}: expected a string value")
            out.append((k, x if type(x) is str else str(x)))
        return out
    return check


_CHECKS = {"int": _int_check, "str": _str_check, "num": _num_check,
           "bool": _bool_check, "step_id": _step_id_check,
           "strings": _strings_check, "tags": _tags_check}
_MISSING = object()


def _spec(sec: str, schema=SCHEMA) -> tuple:
    """(key, smallest int or None, check, required, default) per field of a
    section, in order.  The smallest int: the field is an integer of that
    range, which _values accepts at once (the check's own first test); the
    check function then only sees the other values, and names the fault."""
    return tuple((f.name, (_LO64 if f.minimum is None else f.minimum)
                  if f.type == "int" else None, _CHECKS[f.type](f), f.required,
                  f.default) for f in section(sec, schema))


def _values(obj: dict, spec: tuple, where: str) -> list:
    """The checked values of one object's fields (``where``: its path and
    a dot, e.g. ``phases[3].``)."""
    out = []
    add, get = out.append, obj.get
    for key, lo, check, required, default in spec:
        v = get(key, _MISSING)
        if type(v) is int and lo is not None and lo <= v < _HI64:
            add(v)          # an integer in range (check's first test, inline)
            continue
        if v is _MISSING:
            if required:
                raise RecordError(f"{where}{key}: missing")
            if default is DERIVED:
                add(None)
                continue
            v = default
        add(check(v, where + key))
    return out


def _object(v, path: str, *, null: bool = False) -> dict:
    if type(v) is dict:
        return v
    if v is _MISSING:
        raise RecordError(f"{path}: missing")
    if null and not v:
        return {}
    raise RecordError(f"{path}: expected an object")


def _list(v, path: str) -> list:
    if not v:
        return []
    if type(v) is not list:
        raise RecordError(f"{path}: expected a list")
    return v


_TOP, _JOB, _STEP, _PROV = _spec(""), _spec("job"), _spec("step"), _spec("provenance")
_ZONE, _PHASE, _RANK = _spec("zones[]"), _spec("phases[]"), _spec("phases[].ranks[]")
_GPU, _PGPU = _spec("gpus[]"), _spec("phases[].gpus[]")
_PKG = _spec("packages[]")
_LOST = _spec("", LOST_SCHEMA)


def _stored(sec: str) -> list:
    """Indexes of a section's stored fields in its value list."""
    return [i for i, f in enumerate(section(sec)) if f.column]


def _getter(idx: list):
    """A function: value list -> tuple of the values at idx."""
    if len(idx) == 1:
        i = idx[0]
        return lambda vals: (vals[i],)
    return operator.itemgetter(*idx)


_JOB_KEEP = _getter(_stored("job"))
_STEP_KEEP = _getter(_stored("step") + [len(_STEP) + i for i in _stored("provenance")])
_ZONE_KEEP, _RANK_KEEP = _getter(_stored("zones[]")), _getter(_stored("phases[].ranks[]"))


def _at(sec: str, name: str) -> int:
    return [f.name for f in section(sec)].index(name)


# positions in the value lists (cross-field rules)
(_J_SUBMIT, _J_FIRST, _J_INC) = (_at("job", n) for n in (
    "submit_time_ns", "first_seen_ns", "incarnation_ns"))
_J_TAGS = _at("job", "tags")
(_S_NODE, _S_START, _S_END, _S_DUR, _S_CPU, _S_DRAM, _S_TOTAL, _S_POLICY,
 _S_NODRAM, _S_GPU, _S_NODE_UJ, _S_INCL) = (
    _at("step", n) for n in ("node", "start_ns", "end_ns", "duration_ns",
                             "energy_cpu_uj", "energy_dram_uj", "energy_total_uj",
                             "policy", "dram_not_measured", "energy_gpu_uj",
                             "energy_node_uj", "total_includes"))
_V_UNCERTAIN = _at("provenance", "wrap_uncertain")
_Z_ID, _Z_UJ = _at("zones[]", "id"), _at("zones[]", "energy_uj")
_G_UUID, _G_UJ, _G_WHY = (_at("gpus[]", n) for n in ("uuid", "energy_uj", "reason"))
_PG_UJ, _PG_WHY = (_at("phases[].gpus[]", n) for n in ("energy_uj", "reason"))
(_P_SEQ, _P_PARENT, _P_START, _P_END, _P_KIND, _P_CPU, _P_DRAM, _P_GPU) = (
    _at("phases[]", n) for n in ("seq", "parent_seq", "start_ns", "end_ns", "kind",
                                 "energy_cpu_uj", "energy_dram_uj", "energy_gpu_uj"))

#: columns of the rows a Parsed holds (jobs: after job_pk; steps: after
#: step_pk, job_pk, node_pk; the children: after step_pk)
JOB_COLUMNS = ("cluster", "job_id", "first_seen_ns", "last_seen_ns") + \
    columns("job")[1:]
STEP_COLUMNS = columns("step") + columns("provenance") + (
    "policy_active", "counted_cpu_uj", "counted_dram_uj", "counted_total_uj",
    "counted_duration_ns", "incarnation_ns")
ZONE_COLUMNS = columns("zones[]")
PHASE_COLUMNS = columns("phases[]")
RANK_COLUMNS = ("seq",) + columns("phases[].ranks[]")
GPU_COLUMNS = columns("gpus[]")
PACKAGE_COLUMNS = columns("packages[]")
PHASE_GPU_COLUMNS = ("seq",) + columns("phases[].gpus[]")
#: where the ingest finds a step row's figures
STEP_AT = {c: i for i, c in enumerate(STEP_COLUMNS)}
_OWN = len(STEP_COLUMNS) - 6        # the record's own columns end here


# ------------------------------------------------------------------ records

class Parsed:
    """One checked record, as rows without their surrogate keys.  (A plain
    class, not a dataclass: generating a dataclass costs start-up time that
    `joulestep job` pays.)"""
    __slots__ = ("cluster", "job", "tags", "node", "step", "zones", "phases",
                 "ranks", "digest", "gpus", "phase_gpus", "packages", "exclusive")

    def __init__(self, cluster: str, job: tuple, tags: list, node: str, step: tuple,
                 zones: list, phases: list, ranks: list, digest: str = "",
                 gpus: list = (), phase_gpus: list = (), packages: list = (),
                 exclusive: int | None = None):
        self.cluster = cluster
        self.job = job          # JOB_COLUMNS
        self.tags = tags        # [(key, value)]
        self.node = node
        self.step = step        # STEP_COLUMNS
        self.zones = zones      # [ZONE_COLUMNS]
        self.phases = phases    # [PHASE_COLUMNS]
        self.ranks = ranks      # [RANK_COLUMNS]
        self.digest = digest    # what tells two copies of one step apart
        self.gpus = list(gpus)  # [GPU_COLUMNS]
        self.phase_gpus = list(phase_gpus)  # [PHASE_GPU_COLUMNS]
        self.packages = list(packages)  # [PACKAGE_COLUMNS]
        # step.exclusive of a version 1-3 record (0, 1, None): not stored,
        # only in the digest, which stays that of the copy ingested before
        self.exclusive = exclusive

    def __eq__(self, other) -> bool:
        return type(other) is Parsed and all(
            getattr(self, k) == getattr(other, k) for k in self.__slots__)

    def __repr__(self) -> str:
        return "Parsed(" + ", ".join(f"{k}={getattr(self, k)!r}"
                                     for k in self.__slots__) + ")"

    @property
    def window_ns(self) -> tuple[int, int]:
        """[start, end] of the record's job window (job identity)."""
        return self.job[2], self.job[3]

    @property
    def job_key(self) -> tuple[str, int]:
        return self.job[0], self.job[1]


def _upgrade_v1_shapes(rec: dict) -> dict:
    """Records of plugins before job.first_seen_ns (and any without it):
    the window starts at job.submit_time_ns (docs/record-format.md, job
    identity)."""
    job = rec.get("job")
    if type(job) is dict and job.get("first_seen_ns") is None:
        if job.get("submit_time_ns") is None:
            raise RecordError("job.first_seen_ns: missing (and job.submit_time_ns "
                              "is null)")
        rec = dict(rec, job=dict(job, first_seen_ns=job["submit_time_ns"]))
    return rec


#: what a version 1 record of a node without a dram zone meant by its 0
V1_NO_DRAM = "no dram zone (a version 1 record wrote 0 J)"


def _upgrade_v1_to_v2(rec: dict) -> dict:
    """Version 1 wrote energy_dram_uj 0 where no zone measured DRAM (AMD):
    version 2 says "not measured" (null, step.dram_not_measured).  Told
    from a measured 0 by the zones: packages and not one dram zone."""
    step, zones = rec.get("step"), rec.get("zones")
    if type(step) is not dict or type(zones) is not list or \
            step.get("energy_dram_uj") != 0 or step.get("dram_not_measured"):
        return rec
    kinds = {z.get("kind") for z in zones if type(z) is dict}
    if "package" not in kinds or "dram" in kinds:
        return rec
    rec = dict(rec, step=dict(step, energy_dram_uj=None, dram_not_measured=V1_NO_DRAM))
    if type(rec.get("phases")) is list:
        rec["phases"] = [dict(p, energy_dram_uj=None)
                         if type(p) is dict and p.get("energy_dram_uj") == 0 else p
                         for p in rec["phases"]]
    return rec


def _upgrade_v2_to_v3(rec: dict) -> dict:
    """Version 3 added GPU energy (gpus[], energy_gpu_uj) and
    step.total_includes; a version 2 total is CPU + DRAM."""
    step = rec.get("step")
    if type(step) is dict and step.get("total_includes") is None:
        rec = dict(rec, step=dict(step, total_includes="cpu+dram"))
    return rec


#: step.exclusive of versions 1 to 3 (the step had every online CPU of the
#: node): checked as before, then dropped (:func:`_upgrade_v3_to_v4`)
_LEGACY_EXCLUSIVE = _bool_check(Field("step.exclusive", "bool"))


def _upgrade_v3_to_v4(rec: dict) -> dict:
    """Version 4 dropped step.exclusive: the store decides whether a step
    shared its packages from the time overlap of other jobs' steps
    (attribution.sharing), never from this flag."""
    step = rec.get("step")
    if type(step) is dict and "exclusive" in step:
        step = dict(step)
        del step["exclusive"]
        rec = dict(rec, step=step)
    return rec


#: version -> the function that brings a record of that version to the
#: next one (the one place older records are upgraded); the entry of
#: RECORD_VERSION normalizes the current version's older shapes
UPGRADES = {1: _upgrade_v1_to_v2, 2: _upgrade_v2_to_v3, 3: _upgrade_v3_to_v4,
            4: _upgrade_v1_shapes}


def upgrade(rec: dict) -> dict:
    """A record of any version this joulestep reads, in the current shape
    (a new dict where anything changed; the input stays as it was)."""
    ver = rec.get("version")
    if type(ver) is not int or ver not in UPGRADES:
        raise RecordError(f"version: this joulestep reads versions "
                          f"{min(UPGRADES)} to {RECORD_VERSION}, got {_shown(ver)[:20]}")
    for v in range(ver, RECORD_VERSION + 1):
        rec = UPGRADES[v](rec)
    return rec


def _rstrip(row: tuple) -> tuple:
    """A row without its trailing nulls: a field added later (appended,
    null in older records) leaves an older record's digest as it was."""
    n = len(row)
    while n and row[n - 1] is None:
        n -= 1
    return row[:n]


def _named(cols: tuple, row: tuple) -> tuple:
    """(column, value) of a row's known values: a field added anywhere
    (null in older records) leaves an older record's digest as it was."""
    return tuple((c, v) for c, v in zip(cols, row) if v is not None)


def digest(p: Parsed) -> str:
    """The record's content (every checked row, the derived counted_*
    aside): equal for two copies of one record, whatever their version or
    spelling (absent vs null, 7 vs "7")."""
    step = _named(STEP_COLUMNS[:_OWN], p.step)
    if p.exclusive is not None:  # where version 3 had it: after ncpus
        k = sum(1 for c, _ in step if STEP_AT[c] <= STEP_AT["ncpus"])
        step = step[:k] + (("exclusive", p.exclusive),) + step[k:]
    body = (_named(JOB_COLUMNS, p.job), p.tags, step, p.zones,
            [_rstrip(r) for r in p.phases], p.ranks)
    if p.gpus or p.phase_gpus:  # version 2 GPUs; older digests unchanged
        body += (p.gpus, p.phase_gpus)
    if p.packages:  # the shared-node inputs; older digests unchanged
        body += (p.packages,)
    body = repr(body)
    return hashlib.blake2b(body.encode("utf-8", "backslashreplace"),
                           digest_size=12).hexdigest()


def parse_record(rec) -> Parsed:
    """Check a decoded record against SCHEMA and the rules across fields
    (:class:`_Step`); its rows, or RecordError naming the first bad field
    by its path."""
    if type(rec) is not dict:
        raise RecordError("record: expected a JSON object")
    if rec.get("format") != RECORD_FORMAT:
        raise RecordError(f"format: expected {RECORD_FORMAT!r}, got "
                          f"{_shown(rec.get('format'))}")
    step0 = rec.get("step")
    legacy = (_LEGACY_EXCLUSIVE(step0.get("exclusive"), "step.exclusive")
              if type(step0) is dict and type(rec.get("version")) is int
              and rec["version"] <= 3 else None)
    rec = upgrade(rec)
    (cluster,) = _values(rec, _TOP, "")
    jv = _values(_object(rec.get("job", _MISSING), "job"), _JOB, "job.")
    sv = _values(_object(rec.get("step", _MISSING), "step"), _STEP, "step.")
    pv = _values(_object(rec.get("provenance"), "provenance", null=True), _PROV,
                 "provenance.")
    ctx = _Step(sv, pv)
    start, end = sv[_S_START], sv[_S_END]
    if sv[_S_DUR] is None:
        sv[_S_DUR] = end - start
    cpu = sv[_S_CPU]
    if sv[_S_TOTAL] is None and cpu is not None:
        sv[_S_TOTAL] = cpu + (sv[_S_DRAM] or 0)     # < 2^63: checked by _Step
    job = (cluster, jv[0], min(jv[_J_FIRST], start), end) + _JOB_KEEP(jv)[1:]
    policy = sv[_S_POLICY]
    step = _STEP_KEEP(sv + pv) + (
        int(policy is not None and policy not in INACTIVE_POLICIES),
        cpu, sv[_S_DRAM], sv[_S_TOTAL], sv[_S_DUR],
        # the incarnation (docs/design.md, "A requeued job's incarnations"):
        # not in the digest, which stays that of older ingests
        jv[_J_FIRST] if jv[_J_INC] is None else jv[_J_INC])
    phases, ranks, pgpus = _phases(_list(rec.get("phases"), "phases"), ctx)
    p = Parsed(cluster, job, jv[_J_TAGS], sv[_S_NODE], step,
               _zones(_list(rec.get("zones"), "zones"), ctx), phases, ranks,
               gpus=_gpus(_list(rec.get("gpus"), "gpus"), ctx), phase_gpus=pgpus,
               packages=_packages(_list(rec.get("packages"), "packages")),
               exclusive=legacy)
    p.digest = digest(p)
    return p


# ------------------------------------------------------- rules across fields

class _Step:
    """The step's rules across fields (docs/record-format.md, "Rules across
    fields"), checked at construction, and what its parts are checked
    against: its window, its energies and the most energy a node can have
    used in it (MAX_NODE_W over the step, or over 1 s if shorter)."""
    __slots__ = ("start", "end", "slack", "cpu", "dram", "gpu", "max_uj", "uncertain")

    def __init__(self, sv: list, pv: list):
        start, end, dur = sv[_S_START], sv[_S_END], sv[_S_DUR]
        if end < start:
            raise RecordError(f"step.end_ns: {end} is before start_ns {start}")
        for path, ns in (("step.end_ns", end - start), ("step.duration_ns", dur)):
            if ns is not None and ns > MAX_STEP_NS:
                raise RecordError(f"{path}: the step lasts {ns / 86400e9:.0f} days; "
                                  f"at most {MAX_STEP_NS // 86400_000_000_000} are "
                                  "allowed (a clock set wrong?)")
        self.start, self.end = start, end
        # phase times are the monotonic clock moved to wall time at the
        # step's start, its end the wall clock: NTP may slew the latter by
        # up to 500 ppm over the step
        self.slack = 10 ** 9 + (end - start) // 1000
        self.max_uj = MAX_NODE_W * max(end - start, 10 ** 9) // 1000
        self.cpu, self.dram, self.gpu = sv[_S_CPU], sv[_S_DRAM], sv[_S_GPU]
        self.uncertain = bool(pv[_V_UNCERTAIN])
        for name, i in (("energy_cpu_uj", _S_CPU), ("energy_dram_uj", _S_DRAM),
                        ("energy_gpu_uj", _S_GPU), ("energy_node_uj", _S_NODE_UJ),
                        ("energy_total_uj", _S_TOTAL)):
            self.plausible(sv[i], f"step.{name}")
        self._dram_reason(sv)
        self._total(sv)

    def plausible(self, uj, path: str) -> None:
        if uj is not None and uj > self.max_uj:
            secs = max(self.end - self.start, 1) / 1e9
            raise RecordError(f"{path}: {uj} uJ in {secs:g} s is {uj / 1e6 / secs:.3g} W; "
                              f"a node draws at most {MAX_NODE_W} W")

    def _dram_reason(self, sv: list) -> None:
        if sv[_S_NODRAM] is not None and sv[_S_DRAM] is not None:
            raise RecordError("step.energy_dram_uj: must be null when "
                              "step.dram_not_measured says why")
        if sv[_S_DRAM] is None and sv[_S_NODRAM] is None and \
                self.cpu is not None and not self.uncertain:
            raise RecordError("step.energy_dram_uj: null without its reason: "
                              "step.dram_not_measured (not measured) or "
                              "provenance.wrap_uncertain (uncertain) says why")

    def _total(self, sv: list) -> None:
        total = sv[_S_TOTAL]
        if total is None:
            if self.cpu is not None and self.cpu + (self.dram or 0) >= _HI64:
                raise RecordError(f"step.energy_total_uj (cpu + dram): "
                                  f"{self.cpu + self.dram} does not fit in 64 bits")
            return
        parts = {"cpu": self.cpu, "dram": self.dram, "gpu": self.gpu}
        held = (sv[_S_INCL] or "cpu+dram").split("+")
        sum_uj = sum(parts.get(k) or 0 for k in held)
        if sum_uj > total:
            raise RecordError(f"step.energy_total_uj: {total} uJ is less than its "
                              f"parts ({'+'.join(held)}: {sum_uj} uJ)")

    def phase(self, v: list, w: str) -> None:
        """A phase lies in the step's window and holds no more energy than
        the step; its kind is one the plugin accepts; a null DRAM says why
        (the step's DRAM is null, or the phase has no energy at all)."""
        if not PHASE_KIND.fullmatch(v[_P_KIND]):
            raise RecordError(f"{w}.kind: {_shown(v[_P_KIND])} is not a phase kind "
                              "(allowed [a-z0-9_-]{1,32})")
        for name, i in (("start_ns", _P_START), ("end_ns", _P_END)):
            t = v[i]
            if t < self.start - self.slack or t > self.end + self.slack:
                raise RecordError(f"{w}.{name}: {t} is outside the step's window "
                                  f"[{self.start}, {self.end}]")
        for name, i, step_uj in (("energy_cpu_uj", _P_CPU, self.cpu),
                                 ("energy_dram_uj", _P_DRAM, self.dram),
                                 ("energy_gpu_uj", _P_GPU, self.gpu)):
            if v[i] is not None and step_uj is not None and v[i] > step_uj:
                raise RecordError(f"{w}.{name}: {v[i]} uJ is more than the step's "
                                  f"{step_uj} uJ")
            self.plausible(v[i], f"{w}.{name}")
        if v[_P_DRAM] is None and v[_P_CPU] is not None and self.dram is not None:
            raise RecordError(f"{w}.energy_dram_uj: null without its reason (the "
                              "step's DRAM is measured and the phase's CPU is)")

    def gpu_reason(self, uj, why, w: str) -> None:
        if uj is None and why is None:
            raise RecordError(f"{w}.reason: null, but energy_uj is null too: "
                              "a GPU without energy says why")
        self.plausible(uj, f"{w}.energy_uj")


def _zones(zl: list, ctx: _Step) -> list:
    rows, seen = [], set()
    for i, z in enumerate(zl):
        w = f"zones[{i}]"
        # zones are told apart by id: every package has a zone named "dram"
        v = _values(_object(z, w), _ZONE, w + ".")
        if v[_Z_ID] in seen:
            raise RecordError(f"{w}.id: zone {v[_Z_ID]!r} appears twice")
        seen.add(v[_Z_ID])
        ctx.plausible(v[_Z_UJ], f"{w}.energy_uj")
        # null: the zone's counter went back or vanished (zones[].uncertain):
        # no step_zones row, rather than a wrong number
        if v[_Z_UJ] is not None:
            rows.append(_ZONE_KEEP(v))
    return rows


def _gpus(gl: list, ctx: _Step) -> list:
    rows, seen = [], set()
    for i, g in enumerate(gl):
        w = f"gpus[{i}]"
        v = _values(_object(g, w), _GPU, w + ".")
        if v[_G_UUID] in seen:
            raise RecordError(f"{w}.uuid: GPU {v[_G_UUID]!r} appears twice")
        seen.add(v[_G_UUID])
        ctx.gpu_reason(v[_G_UJ], v[_G_WHY], w)
        rows.append(tuple(v))  # a null energy keeps its row: the reason
    return rows


def _packages(pl: list) -> list:
    rows, seen = [], set()
    for i, p in enumerate(pl):
        w = f"packages[{i}]"
        v = _values(_object(p, w), _PKG, w + ".")
        if v[0] in seen:
            raise RecordError(f"{w}.package: package {v[0]} appears twice")
        seen.add(v[0])
        if v[2] > v[1]:
            raise RecordError(f"{w}.step_cpus: {v[2]} is more than the package's "
                              f"cpus {v[1]}")
        if v[3] > v[4]:
            raise RecordError(f"{w}.busy_ns: {v[3]} is more than total_ns {v[4]}")
        rows.append(tuple(v))
    return rows


def _phase_gpus(seq: int, gl: list, where: str, ctx: _Step) -> list:
    out, seen = [], set()
    for j, g in enumerate(gl):
        w = f"{where}.gpus[{j}]"
        v = _values(_object(g, w), _PGPU, w + ".")
        if v[0] in seen:
            raise RecordError(f"{w}.uuid: GPU {v[0]!r} appears twice")
        seen.add(v[0])
        ctx.gpu_reason(v[_PG_UJ], v[_PG_WHY], w)
        out.append((seq,) + tuple(v))
    return out


def _phases(pl: list, ctx: _Step) -> tuple[list, list, list]:
    rows, ranks, gpus, seqs = [], [], [], set()
    for i, ph in enumerate(pl):
        w = f"phases[{i}]"
        v = _values(_object(ph, w), _PHASE, w + ".")
        if v[_P_END] < v[_P_START]:
            raise RecordError(f"{w}.end_ns: {v[_P_END]} is before start_ns "
                              f"{v[_P_START]}")
        ctx.phase(v, w)
        seq = v[_P_SEQ]
        if seq in seqs:
            raise RecordError(f"{w}.seq: {seq} appears twice")
        seqs.add(seq)
        rows.append(tuple(v))
        rl = ph.get("ranks")
        if rl:
            ranks += _ranks(seq, _list(rl, f"{w}.ranks"), w)
        gl = ph.get("gpus")
        if gl:
            gpus += _phase_gpus(seq, _list(gl, f"{w}.gpus"), w, ctx)
    for i, r in enumerate(rows):
        if r[_P_PARENT] is not None and r[_P_PARENT] not in seqs:
            raise RecordError(f"phases[{i}].parent_seq: {r[_P_PARENT]} is not the "
                              "seq of a phase in this record")
    return rows, ranks, gpus


def _ranks(seq: int, rl: list, where: str) -> list:
    out, seen = [], set()
    for j, r in enumerate(rl):
        w = f"{where}.ranks[{j}]"
        v = _values(_object(r, w), _RANK, w + ".")
        if v[0] in seen:
            raise RecordError(f"{w}.rank: {v[0]} appears twice")
        seen.add(v[0])
        out.append((seq,) + _RANK_KEEP(v))
    return out


def parse_lost(rec: dict) -> tuple:
    """Check a "joulestep-lost" document (LOST_SCHEMA); its lost_records
    row.  RecordError names the bad field."""
    if rec.get("version") != 1:
        raise RecordError(f"version: this joulestep reads {LOST_FORMAT} version 1")
    return tuple(_values(rec, _LOST, ""))


# ------------------------------------------------------------- the doc table

def field_table() -> str:
    """The field table of docs/record-format.md (markdown), from SCHEMA."""
    out = ["| field | type | unit | range | null | since | stored as |",
           "|---|---|---|---|---|---|---|"]
    for f in SCHEMA:
        rng = "" if f.minimum is None else f">= {f.minimum}"
        null = "yes" if f.null else "no"
        if not f.required:
            null += ", may be absent" + (
                f" (default {json.dumps(f.default) if f.default != () else '[]'})"
                if f.default is not None else "")
        where = ("jobs" if f.section == "job" else
                 "steps" if f.section in ("step", "provenance") else
                 {"zones[]": "step_zones", "phases[]": "phases",
                  "phases[].ranks[]": "phase_ranks", "gpus[]": "step_gpus",
                  "phases[].gpus[]": "phase_gpus",
                  "packages[]": "step_packages"}.get(f.section, ""))
        stored = f"{where}.{f.column}" if f.column else "-"
        if f.path == "job.tags":
            stored = "step_tags"
        note = f" ({f.doc})" if f.doc else ""
        out.append(f"| `{f.path}` | {f.type} | {f.unit or ''} | {rng} | {null} | "
                   f"{f.since} | {stored}{note} |")
    return "\n".join(out) + "\n"
