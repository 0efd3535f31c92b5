"""output.wrap: the lines textwrap.wrap gives (break_on_hyphens=False), which
render.py used before; joulestep job no longer imports textwrap at start-up."""
import textwrap

from hypothesis import given, settings, strategies as st

from joulestep import output

WORDS = st.text(alphabet="ab-.\u00e9\u3042 \t\n\r\x0b\x0c", max_size=120)


def _truth(text, width, ind1, ind2):
    return textwrap.wrap(text, width, initial_indent=ind1, subsequent_indent=ind2,
                         break_on_hyphens=False)


@settings(max_examples=500, deadline=None)
@given(WORDS, st.integers(1, 30), st.sampled_from(["", " ", "  - "]),
       st.sampled_from(["", "  ", "    "]))
def test_wrap_is_textwraps(text, width, ind1, ind2):
    if width <= len(ind1) or width <= len(ind2):
        width = max(len(ind1), len(ind2)) + 1
    assert output.wrap(text, width, ind1, ind2) == _truth(text, width, ind1, ind2)


def test_wrap_examples():
    text = ("kWh, CO2 and cost cover CPU packages and DRAM only (RAPL); the rest "
            "of the node is not measured. Per-phase kWh, CO2 and cost: --format "
            "json or csv.")
    assert output.wrap(text, 80, "", "  ") == _truth(text, 80, "", "  ")
    long = "x" * 100 + " tail"
    assert output.wrap(long, 80, "", "  ") == ["x" * 80, "  " + "x" * 20 + " tail"]
    assert output.wrap("", 80) == [] and output.wrap("   ", 80) == []


def _num_reference(x, digits=3):
    """output.num before its common case was put first (the truth here),
    with fixed notation below 0.01 where it had 1.23e-04."""
    import math
    if x is None:
        return "-"
    if isinstance(x, float) and math.isnan(x):
        return "-"
    ax = abs(x)
    if ax == 0:
        return "0"
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer()):
        if ax < 1e7:
            return str(int(x))
    for lim, div, suf in ((1e12, 1e12, "T"), (1e9, 1e9, "G"), (1e6, 1e6, "M"),
                          (1e4, 1e3, "k")):
        if ax >= lim:
            v = x / div
            return f"{v:.{max(digits - len(str(int(abs(v)))), 0)}f}{suf}"
    if ax >= 100:
        return f"{x:.0f}"
    if ax >= 0.01:
        return f"{x:.{max(digits - len(str(int(ax))), 0)}f}" if ax >= 1 else f"{x:.3f}"
    if ax < 0.9995e-6:
        sign = "-" if x < 0 else ""
        for lim, suf in ((1e-9, "n"), (1e-12, "p"), (1e-15, "f"), (1e-18, "a")):
            if ax >= lim * 0.9995:
                v = ax / lim
                return sign + (f"{v:.0f}" if v >= 99.95 else f"{v:.1f}" if v >= 9.995
                               else f"{v:.2f}" if v >= 0.9995 else f"{v:.3f}") + suf
        return sign + "<0.001a"
    dec = min(6, digits - 1 - math.floor(math.log10(ax)))
    return f"{x:.{dec}f}".rstrip("0").rstrip(".")


@settings(max_examples=1000, deadline=None)
@given(st.one_of(st.none(), st.integers(-10**15, 10**15),
                 st.floats(allow_infinity=False, min_value=-1e15, max_value=1e15),
                 st.sampled_from([0.01, 0.00999, 9.9995, 9.99949, 10.0, 99.995, 99.99,
                                  100.0, -0.5, -12.345, float("nan")])),
       st.integers(1, 5))
def test_num_is_unchanged(x, digits):
    assert output.num(x, digits) == _num_reference(x, digits)


def _table_reference(headers, rows, right=None, width=output.WIDTH):
    """output.table before it formatted rows with one format string, less
    the cut of the widest text column (`alice` read `ali~`): no cell is cut."""
    if right is None:
        right = set(range(1, len(headers)))
    cells = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    sep = 2
    total = sum(widths) + sep * (len(widths) - 1)
    if total > width:
        sep = 1
        total = sum(widths) + sep * (len(widths) - 1)
    out = []
    for r in [headers] + cells:
        parts = []
        for i, c in enumerate(r):
            w = widths[i]
            parts.append(c.rjust(w) if i in right else c.ljust(w))
        out.append((" " * sep).join(parts).rstrip())
    return "\n".join(out)


CELL = st.one_of(st.text(alphabet="ab ~-1.", max_size=40), st.integers(-999, 10**6))


@settings(max_examples=500, deadline=None)
@given(st.integers(1, 6).flatmap(lambda n: st.tuples(
    st.lists(st.text(alphabet="ABC_", min_size=1, max_size=8), min_size=n, max_size=n),
    st.lists(st.lists(CELL, min_size=n, max_size=n), max_size=6),
    st.one_of(st.none(), st.sets(st.integers(0, n - 1))),
    st.integers(20, 100))))
def test_table_is_unchanged(args):
    headers, rows, right, width = args
    assert output.table(headers, rows, right, width) == \
        _table_reference(headers, rows, right, width)
