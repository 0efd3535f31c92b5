"""Steps inside other steps: what each step adds to job and report totals.

RAPL measures whole packages and DRAM of a node, so every step record of a
job on one node measures the whole node over the step's window.  The batch
step (and extern, and salloc's interactive step) spans the job's life on its
node; an srun step on that node runs inside it, and its energy is already
part of the batch step's.  Summing both counts it twice.

The rule (pure functions here; store.Ingester keeps the result in
steps.inside_step_pk and steps.counted_* for every (job, node) group):

- A step is *inside* the tightest step of the same job and node that has a
  lower rank (extern 0 < batch, interactive 1 < numbered 2) and whose window
  contains its window, with SLACK_NS of tolerance at each end (the steps'
  slurmstepd processes start and end in their own order).  Numbered steps
  never contain each other.
- A step with nothing inside it counts its own energy.
- A step with steps inside it: when the energies (CPU, DRAM, total) and
  durations of everything inside it fit in its own, it counts only the rest
  (its own minus theirs) and they count their own; so the node's total is
  the outer step's measurement, and the energy of an srun step stays with
  that step's policy and tags.  When they do not fit (nested steps that ran
  at the same time, or counters that disagree) it counts its own energy and
  everything inside it counts 0.
- A step without an energy measurement counts nothing (NULL) and leaves
  the steps inside it counted.

The same rule counts a phase inside another phase once (:func:`exclusive`
with the tree given by the records' parent_seq; analysis.counted_phases).

Steps that overlap in time without one containing the other (two srun
steps running at once on a node with no batch step there) cannot be
separated: :func:`overlaps` finds them so `joulestep job` can say so.
"""
from __future__ import annotations

from collections import namedtuple

SLACK_NS = 1_000_000_000
RANK = {"extern": 0, "batch": 1, "interactive": 1}
NUMBERED = 2


# Plain namedtuples (typing.NamedTuple turns each annotation into a
# ForwardRef and compiles it: a start-up cost every command pays).
#: key: anything hashable (step_pk in the store); cpu_uj, total_uj None: not
#: measured; dram_uj None: no DRAM zone or not measured
Step = namedtuple("Step", "key step_id het_component start_ns end_ns duration_ns "
                          "cpu_uj dram_uj total_uj")
#: inside: key of the enclosing step, or None
Counted = namedtuple("Counted", "inside cpu_uj dram_uj total_uj duration_ns")


def rank(step_id: str) -> int:
    return RANK.get(step_id, NUMBERED)


def _contains(outer: Step, inner: Step) -> bool:
    return (rank(outer.step_id) < rank(inner.step_id)
            and outer.start_ns - SLACK_NS <= inner.start_ns
            and inner.end_ns <= outer.end_ns + SLACK_NS)


def containers(steps: list[Step]) -> dict:
    """key -> key of the tightest enclosing step (or None).  Ties between
    equally long windows go to the inner rank, then to the natural key
    (step_id, het_component), so the answer never depends on ingest order."""
    out = {}
    outer = [o for o in steps if rank(o.step_id) < NUMBERED]   # a few at most
    for s in steps:
        cands = [o for o in outer if o is not s and _contains(o, s)]
        if cands:
            best = min(cands, key=lambda o: (o.end_ns - o.start_ns,
                                              -rank(o.step_id), o.step_id,
                                              o.het_component))
            out[s.key] = best.key
        else:
            out[s.key] = None
    return out


def _add(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a + b


def attribute(steps: list[Step]) -> dict:
    """key -> Counted for the steps of one job on one node."""
    return exclusive(steps, containers(steps))


def _tree(parent: dict) -> tuple[dict, dict]:
    """(parent, depth) with malformed links cut: a parent that is not a key,
    and every link of a loop (a -> b -> a, or a -> a), become None (those
    items count as outermost).  depth = number of ancestors."""
    links = {k: (p if p in parent else None) for k, p in parent.items()}
    fixed = dict(links)
    for k in links:
        seen, p = {k}, links[k]
        while p is not None and p not in seen:
            seen.add(p)
            p = links[p]
        if p == k:                       # k is on a loop: cut its link
            fixed[k] = None
    depth: dict = {}
    for k in fixed:
        chain, p = [], k
        while p is not None and p not in depth:
            chain.append(p)
            p = fixed[p]
        d = -1 if p is None else depth[p]
        for c in reversed(chain):
            d += 1
            depth[c] = d
    return fixed, depth


def exclusive(items: list, parent: dict) -> dict:
    """key -> Counted, given an explicit tree: parent[key] is the key of the
    item that encloses it (None: outermost).  Items need key, cpu_uj,
    dram_uj, total_uj and duration_ns (Step, or anything alike: phases use
    the same rule).  The rule of the module docstring: an item with items
    inside it counts its own figures minus theirs when theirs fit in its
    own, else its own while they count 0; so the counted figures of a tree
    add up to the outermost item's measurement."""
    parent, depth = _tree({s.key: parent.get(s.key) for s in items})
    children: dict = {s.key: [] for s in items}
    for k, p in parent.items():
        if p is not None:
            children[p].append(k)
    counted: dict = {}
    sub: dict = {}            # key -> [cpu, dram, total, dur] over its subtree

    def zero(k):
        c = counted[k]
        counted[k] = Counted(c.inside, None if c.cpu_uj is None else 0,
                             None if c.dram_uj is None else 0,
                             None if c.total_uj is None else 0, 0)
        for ch in children[k]:
            zero(ch)

    # bottom-up: the deepest first, so a container comes after its contents
    for s in sorted(items, key=lambda s: -depth[s.key]):
        k = s.key
        own = [s.cpu_uj, s.dram_uj, s.total_uj, s.duration_ns]
        if not children[k]:
            counted[k] = Counted(parent[k], *own)
            sub[k] = own
            continue
        inner = [None, None, None, 0]
        for ch in children[k]:
            inner = [_add(a, b) for a, b in zip(inner, sub[ch])]
        rest = [None if o is None else o - (i or 0) for o, i in zip(own, inner)]
        if s.total_uj is None:
            # not measured: count what the nested items measured
            counted[k] = Counted(parent[k], None, None, None, max(rest[3], 0))
            sub[k] = [inner[0], inner[1], inner[2], s.duration_ns]
        elif all(r is None or r >= 0 for r in rest):
            counted[k] = Counted(parent[k], *rest)
            sub[k] = own
        else:
            counted[k] = Counted(parent[k], *own)
            for ch in children[k]:
                zero(ch)
            sub[k] = own
    return counted


#: key: anything hashable (a row index, a seq)
Phase = namedtuple("Phase", "key seq parent_seq kind duration_ns cpu_uj dram_uj")


def _enclosing(seq, by_seq: dict, keep) -> tuple:
    """(nearest, outermost) enclosing phase of a kept kind of phase `seq`,
    walking parent_seq; a loop or an unknown parent ends the walk."""
    near = outer = None
    seen, p = {seq}, by_seq[seq].parent_seq
    while p is not None and p in by_seq and p not in seen:
        seen.add(p)
        if keep(by_seq[p].kind):
            near = p if near is None else near
            outer = p
        p = by_seq[p].parent_seq
    return near, outer


def count_phases(phases: list[Phase], kinds=None) -> dict:
    """key -> (Counted, outer seq) for the phases of one record (one step on
    one node) whose kind is in `kinds` (default all).  A phase's container
    is its nearest enclosing phase of those kinds (parent_seq chain), so a
    phase of another kind stays inside the figure of the phase holding it;
    then :func:`exclusive`.  outer seq: the outermost enclosing phase of
    those kinds (its own seq when outermost).  Counted.inside is the key of
    the container."""
    keep = (lambda k: True) if kinds is None else (lambda k, ks=set(kinds): k in ks)
    by_seq = {p.seq: p for p in phases}
    items, parent, outer = [], {}, {}
    for p in phases:
        if not keep(p.kind):
            continue
        tot = None if p.cpu_uj is None else p.cpu_uj + (p.dram_uj or 0)
        items.append(Step(p.key, p.kind, 0, 0, 0, p.duration_ns, p.cpu_uj,
                          p.dram_uj, tot))
        near, top = _enclosing(p.seq, by_seq, keep)
        parent[p.key] = None if near is None else by_seq[near].key
        outer[p.key] = p.seq if top is None else top
    return {k: (c, outer[k]) for k, c in exclusive(items, parent).items()}


def overlaps(steps: list[Step]) -> list[tuple]:
    """Pairs (a, b) of step keys of one job on one node whose windows
    overlap by more than SLACK_NS while neither contains the other: their
    energies both include the overlap."""
    out = []
    active: list = []         # steps that may still overlap later ones
    for b in sorted(steps, key=lambda s: (s.start_ns, s.end_ns, s.step_id,
                                          s.het_component)):
        active = [a for a in active if a.end_ns - b.start_ns > SLACK_NS]
        for a in active:
            if _contains(a, b) or _contains(b, a):
                continue
            if min(a.end_ns, b.end_ns) - b.start_ns > SLACK_NS:
                out.append((a.key, b.key))
        active.append(b)
    return out
