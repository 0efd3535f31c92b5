"""The shared-node rule (joulestep.attribution): shares computed by hand,
conservation in integer µJ, partial overlaps, the exclusive label, the fit."""
import itertools
import random

from joulestep import attribution as at

S = 1_000_000_000


def pkg(cpus, step_cpus, busy_s, total_s, e_j, d_j=None):
    return at.Pkg(cpus, step_cpus, int(busy_s * S), int(total_s * S), int(e_j * 1e6),
                  None if d_j is None else int(d_j * 1e6))


def test_same_interval_shares_by_hand_and_conserved():
    """Package of 4 CPUs, 10 s, P0 = 14 W; jobs on 2, 1 and 1 CPUs with 20, 10
    and 2 CPU-seconds; the package was busy 34 s (2 s of the system's)."""
    e = 14 * 10 + 14 * 34  # J: static + 14 W per busy CPU
    units = [at.Unit(k, k, 0, 10 * S, int(c * S), {0: pkg(4, n, 34, 40, e, 60)})
             for k, n, c in (("a", 2, 20), ("b", 1, 10), ("c", 1, 2))]
    got = at.attribute(units, {0: 14.0})
    static, dyn = 140e6, (e - 140) * 1e6
    for u, n, c in zip(units, (2, 1, 1), (20, 10, 2)):
        want = int(static * n / 4 + dyn * c / 34)
        assert got[u.key].sharing == "shared"
        assert abs(got[u.key].cpu_uj - want) <= 1
    total = sum(s.cpu_uj for s in got.values())
    assert total <= e * 10**6
    # the rest is the system's CPU time, to the µJ (each share rounded down)
    assert e * 10**6 - total - int(dyn * 2 / 34) in range(0, 4)
    assert sum(s.dram_uj for s in got.values()) <= 60 * 10**6


def test_cpu_time_over_busy_is_capped():
    """Counters that disagree (the jobs' CPU time above the package's busy
    time): the shares never exceed the package's energy."""
    units = [at.Unit(k, k, 0, 5 * S, 9 * S, {0: pkg(2, 1, 6, 10, 100)}) for k in "ab"]
    got = at.attribute(units, {0: 5.0})
    assert sum(s.cpu_uj for s in got.values()) <= 100 * 10**6


def test_partial_overlaps_conserve_within_every_interval():
    """Random units on one package, overlapping in any way, with inputs that
    may not even agree: within every unit's interval the shares of those
    overlapping it, pro rata, stay within its measured energy (integers)."""
    rnd = random.Random(7)
    for _ in range(100):
        units = []
        for i in range(rnd.randint(2, 5)):
            a = rnd.randint(0, 20) * S
            b = a + rnd.randint(1, 20) * S
            t = (b - a) / S
            units.append(at.Unit(i, i, a, b, rnd.randint(0, int(2 * t)) * S, {0: pkg(
                4, rnd.randint(1, 4), rnd.uniform(0, 4 * t), 4 * t, rnd.uniform(1, 200) * t)}))
        got = at.attribute(units, {0: rnd.choice([None, 0.0, 10.0, 1e6])})
        for s in units:
            inside = 0
            for t in units:
                if got[t.key].cpu_uj is None:  # alone: its measurement, nobody else's
                    assert not any(at.overlap_ns(t, v) for v in units if v is not t)
                elif t is s:
                    inside += got[t.key].cpu_uj
                elif at.overlap_ns(t, s):
                    inside += got[t.key].cpu_uj * at.overlap_ns(t, s) // (t.end_ns - t.start_ns)
            assert inside <= s.packages[0].energy_uj


def test_exclusive_and_shared_labels():
    whole = {0: pkg(2, 2, 1, 2, 10)}
    half = {0: pkg(2, 1, 1, 2, 10)}
    other_pkg = {1: pkg(2, 1, 1, 2, 10)}
    a = at.Unit("a", "j1", 0, S, S, half)
    b = at.Unit("b", "j2", S // 2, 2 * S, S, half)
    c = at.Unit("c", "j3", 0, S, S, other_pkg)
    d = at.Unit("d", "j1", 0, S, S, half)    # the same job as a
    e = at.Unit("e", "j4", 5 * S, 6 * S, S, whole)
    assert at.sharing([a, b, c, d, e]) == {"a": "shared", "b": "shared", "c": "exclusive",
                                           "d": "shared", "e": "exclusive"}
    # every CPU of the package does not make it exclusive if another job overlaps
    f = at.Unit("f", "j5", 5 * S, 6 * S, S, half)
    assert at.sharing([e, f]) == {"e": "shared", "f": "shared"}
    assert at.sharing([a, d]) == {"a": "exclusive", "d": "exclusive"}
    got = at.attribute([a, c, e], {})
    assert got["e"] == at.Share(None, None, "exclusive", {0: None})  # alone: its measurement
    assert got["c"].cpu_uj == 10 * 10**6 and got["c"].sharing == "exclusive"


def test_missing_cpu_time_is_no_estimate():
    half = {0: pkg(2, 1, 1, 2, 10)}
    got = at.attribute([at.Unit("a", 1, 0, S, None, half), at.Unit("b", 2, 0, S, S, half)], {})
    assert got["a"].cpu_uj is None and got["b"].cpu_uj is not None


def test_fit_static_w():
    # E/T = 12 + 14 x busy CPUs, exact
    pts = [(t * S, int(b * t * S), int((12 + 14 * b) * t * 1e6))
           for t, b in itertools.product((2, 5), (0.1, 1.0, 1.9))]
    assert abs(at.fit_static_w(pts) - 12) < 1e-6
    # no spread in the busy CPUs: cannot tell idle from busy power
    assert at.fit_static_w([(S, S, 26 * 10**6), (2 * S, 2 * S, 52 * 10**6)]) is None
    assert at.fit_static_w(pts[:1]) is None
    # more energy when less busy: not this model
    assert at.fit_static_w([(S, 0, 50 * 10**6), (S, S, 10 * 10**6)]) is None


def test_components_split_at_gaps_and_join_chains():
    half = {0: pkg(2, 1, 1, 2, 10)}
    us = [at.Unit(k, k, a * S, b * S, S, half) for k, a, b in
          (("a", 0, 5), ("b", 4, 9), ("c", 8, 12), ("d", 12, 13), ("e", 20, 21))]
    assert [[u.key for u in g] for g in at.components(us)] == [["a", "b", "c"], ["d"], ["e"]]
