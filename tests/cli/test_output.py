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
