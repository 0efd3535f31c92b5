"""The .deb's Slurm pin follows the Slurm headers it is built against
(debian/rules SLURM_INCLUDE, SLURM_PKG; docs/admin-guide.md, "Building against
your own Slurm"): the major.minor release in that slurm_version.h, worked out
here from its SLURM_VERSION_NUMBER, without building the packages."""
import os
import pathlib
import re
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def rules_vars(**env) -> dict:
    res = subprocess.run(["make", "-f", "debian/rules", "-pn", "nothing-at-all"], cwd=REPO,
                         env={**os.environ, **env}, capture_output=True, text=True)
    return dict(re.findall(r"^(SLURM_VER|SLURM_PKG) :?= (.*)$", res.stdout, re.M))


def header_release(include: pathlib.Path) -> str:
    text = (include / "slurm" / "slurm_version.h").read_text()
    v = int(re.search(r"^#define SLURM_VERSION_NUMBER 0x([0-9a-fA-F]+)", text, re.M).group(1), 16)
    return f"{v >> 16}.{(v >> 8) & 0xff:02d}"


@pytest.mark.parametrize("include", ["/usr/include", "build/slurm-latest/include"])
def test_pin_is_the_release_of_the_headers(include):
    inc = REPO / include if not include.startswith("/") else pathlib.Path(include)
    if not (inc / "slurm" / "slurm_version.h").exists():
        pytest.skip(f"no Slurm headers in {inc} (make deps; make slurm-latest)")
    got = rules_vars(SLURM_INCLUDE=str(inc), SLURM_PKG="slurm-smd")
    assert got == {"SLURM_VER": header_release(inc), "SLURM_PKG": "slurm-smd"}, got


def test_default_is_debians_plugins_package():
    got = rules_vars()
    assert got["SLURM_PKG"] == "slurm-wlm-basic-plugins"
    assert got["SLURM_VER"] == header_release(pathlib.Path("/usr/include"))
