"""Tests of joulestep.plot: real PNG/SVG files with the expected content."""
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest

from joulestep import analysis as A
from joulestep import models as M
from joulestep import plot as P

PNG_SIG = b"\x89PNG\r\n\x1a\n"
SVG_NS = "{http://www.w3.org/2000/svg}"


def _svg(path):
    root = ET.parse(path).getroot()
    assert root.tag == SVG_NS + "svg"
    return root


def _gids(root):
    return {el.get("id") for el in root.iter() if el.get("id")}


def _png_ok(path):
    with open(path, "rb") as fh:
        data = fh.read()
    assert data[:8] == PNG_SIG
    assert data[12:16] == b"IHDR"
    w, h = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert w > 100 and h > 100
    assert data.rstrip()[-8:-4] == b"IEND"


@pytest.fixture(scope="module")
def sweep():
    a, b, c = M.TABLE_2_4["Broadwell"]
    df = M.synthetic_sweep(a, b, c, 2.0, 0.525, seed=5)
    fit = M.fit_dvfs(df, power_ref_w=40.0)
    return M.sweep_samples(df, power_ref_w=40.0), fit, M.recommend_frequency(fit, 0.1)


@pytest.mark.parametrize("ext", ["png", "svg"])
def test_power_fit_plot(tmp_path, sweep, ext):
    samples, fit, rec = sweep
    out = P.plot_power_fit(samples, fit, tmp_path / f"fit.{ext}", recommendation=rec)
    assert out == str(tmp_path / f"fit.{ext}")
    if ext == "png":
        _png_ok(out)
        return
    root = _svg(out)
    ids = _gids(root)
    assert {"fit-curve", "samples", "recommended"} <= ids
    # the fitted curve is a polyline rising with frequency (SVG y grows downwards)
    g = next(el for el in root.iter() if el.get("id") == "fit-curve")
    d = next(el for el in g.iter(SVG_NS + "path")).get("d")
    pts = np.array([tok.split() for tok in d.replace("M", "L").split("L") if tok.strip()], float)
    assert len(pts) >= 20
    assert np.all(np.diff(pts[:, 0]) >= 0) and np.all(np.diff(pts[:, 1]) <= 0)
    assert pts[0, 1] - pts[-1, 1] > 50     # P(fmax) - P(0.8 GHz) ~ 0.25 spans the axes


@pytest.mark.parametrize("ext", ["png", "svg"])
def test_scaling_plot(tmp_path, ext):
    rows = []
    for strat, e0, tp in (("veloc", 100.0, 2.0), ("gio", 400.0, 0.5)):
        for n in (1, 2, 4):
            rows.append({"tag:strategy": strat, "part": "total", "gib_per_rank": 1.0, "nranks": n,
                         "runs": 3, "energy_j": e0 * n, "energy_j_std": 5.0,
                         "throughput_gibs": tp * n, "throughput_gibs_std": 0.1})
    out = P.plot_scaling(pd.DataFrame(rows), tmp_path / f"s.{ext}")
    if ext == "png":
        _png_ok(out)
    else:
        ids = _gids(_svg(out))
        assert {"series-veloc", "series-gio"} <= ids


def test_io_approach_and_dump_plots(tmp_path):
    t = pd.DataFrame({"tag:approach": ["TP", "DC(1)", "DN(7:1)"], "energy_j": [3.3e6, 1.8e6, 1.3e6],
                      "energy_j_std": [1e5, 5e4, 6e4], "node_mean_j": [1e5, 5.4e4, 4.1e4],
                      "node_min_j": [9.4e4, 3.8e4, 2.8e4], "node_max_j": [1.08e5, 5.6e4, 4.4e4]})
    out = P.plot_io_approaches(t, tmp_path / "io.svg")
    assert {"bars-energy-0", "bars-energy-2", "bars-node-1"} <= _gids(_svg(out))
    _png_ok(P.plot_io_approaches(t, tmp_path / "io.png"))
    d = pd.DataFrame({"compressor": ["sz", "sz", "zfp", "raw"],
                      "error_bound": ["1e-1", "1e-2", "1e-2", "-"],
                      "compress_j": [100.0, 200.0, 150.0, 0.0], "write_j": [50.0, 80.0, 90.0, 900.0],
                      "raw_write_j": [900.0] * 4})
    out = P.plot_dump_energy(d, tmp_path / "dump.svg")
    ids = _gids(_svg(out))
    assert {"bars-sz-compress-0", "bars-sz-write-1", "bars-zfp-compress-1", "raw-write"} <= ids
    _png_ok(P.plot_dump_energy(d, tmp_path / "dump.png"))


def test_plot_from_analysis_tables(tmp_path):
    """The analysis outputs plug straight into the plots."""
    GIB = 1 << 30
    rows = []
    for job, strat, n in ((1, "veloc", 2), (2, "veloc", 4), (3, "gio", 2), (4, "gio", 4)):
        rows.append({"job_id": job, "tag:strategy": strat, "kind": "checkpoint", "label": "c",
                     "duration_ns": int(2e9 * n), "energy_cpu_uj": int(1e8 * n),
                     "energy_dram_uj": 0, "bytes": n * GIB, "nranks": n})
    w = A.compare_checkpointing(pd.DataFrame(rows))
    _png_ok(P.plot_scaling(w, tmp_path / "w.png"))


def test_bad_extension(tmp_path, sweep):
    samples, fit, _ = sweep
    with pytest.raises(ValueError, match="allowed .png or .svg"):
        P.plot_power_fit(samples, fit, tmp_path / "fit.jpg")
    with pytest.raises(ValueError, match="empty"):
        P.plot_io_approaches(pd.DataFrame({"tag:approach": [], "energy_j": []}), tmp_path / "x.png")
