"""Plots a reader can trust: each plot's unit comes from its data, every
group is labelled with its value, and every bar, error bar and line lies
inside its axes.  The truths are computed here from the tables given; the
figures are read back from the matplotlib Figure the plot saved."""
import re

import numpy as np
import pandas as pd
import pytest

import recgen
from joulestep import models as M
from joulestep import plot as P

SCI = re.compile(r"\d(?:\.\d+)?e[-+]?\d+", re.I)


@pytest.fixture
def saved(monkeypatch):
    """The Figure each plot_* call saved (P._save is the one place a figure
    is written)."""
    figs = []
    real = P._save

    def keep(fig, path):
        figs.append(fig)
        import matplotlib.pyplot as plt
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
        return str(path)
    monkeypatch.setattr(P, "_save", keep)
    assert real
    return figs


def _unit(label: str) -> str:
    return re.search(r"\(([^()]*)\)\s*$", label).group(1)


def _inside(ax, tops, bottoms=(0,)):
    lo, hi = ax.get_ylim()
    assert lo <= min(bottoms) + 1e-12 and max(tops) <= hi, (lo, hi, tops)


def _bars(ax, gid_prefix):
    return [p for p in ax.patches if (p.get_gid() or "").startswith(gid_prefix)]


def _series(ax):
    return [ln for ln in ax.lines if (ln.get_gid() or "").startswith("series-")]


def _texts(ax):
    return [t.get_text() for t in ax.texts]


def test_dumps_plot_units_labels_and_limits(saved, tmp_path):
    # energies of 7-15 J, as the demo's dump job: the axis is in J, not kJ
    d = pd.DataFrame({"compressor": ["raw", "sz3", "zfp", "zfp"],
                      "error_bound": [np.nan, 0.01, 0.01, 0.0001],
                      "compress_j": [np.nan, 7.0, 4.0, 9.5],
                      "write_j": [15.0, 2.0, 0.5, 5.2], "raw_write_j": [15.0] * 4})
    P.plot_dump_energy(d, tmp_path / "d.png")
    ax = saved[-1].axes[0]
    assert _unit(ax.get_ylabel()) == "J"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0.0001", "0.01"]
    stacks = [p.get_y() + p.get_height() for p in ax.patches]
    _inside(ax, stacks + [15.0])
    # the write bars are drawn, with their own height, on their compress bar
    writes = sorted(p.get_height() for p in _bars(ax, "bars-") if "write" in p.get_gid()
                    and p.get_height() > 0)
    assert writes == pytest.approx(sorted([2.0, 0.5, 5.2]))
    # each stack's total written on it
    assert {"9.00 J", "4.50 J", "14.7 J"} <= set(_texts(ax)), _texts(ax)
    # an error bound that was not recorded says so (it read "nan")
    P.plot_dump_energy(d.assign(error_bound=np.nan), tmp_path / "d2.png")
    ax = saved[-1].axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["not recorded"], labels
    _inside(ax, [p.get_y() + p.get_height() for p in ax.patches] + [15.0])
    # a large study: MJ
    big = d.assign(compress_j=d["compress_j"] * 1e6, write_j=d["write_j"] * 1e6,
                   raw_write_j=d["raw_write_j"] * 1e6)
    P.plot_dump_energy(big, tmp_path / "d3.png")
    ax = saved[-1].axes[0]
    assert _unit(ax.get_ylabel()) == "MJ"
    _inside(ax, [p.get_y() + p.get_height() for p in ax.patches] + [15.0])


def test_io_plot_units_labels_and_limits(saved, tmp_path):
    t = pd.DataFrame({"tag:approach": ["TP", "DC(1)", "DN(7:1)"],
                      "energy_j": [15.0, 9.0, 7.0], "energy_j_std": [3.0, 0.5, 0.2],
                      "node_mean_j": [7.5, 4.5, 3.5], "node_min_j": [7.0, 4.0, 3.0],
                      "node_max_j": [8.0, 5.0, 4.0]})
    P.plot_io_approaches(t, tmp_path / "io.png")
    ax, ax2 = saved[-1].axes
    assert _unit(ax.get_ylabel()) == "J" and _unit(ax2.get_ylabel()) == "J"
    assert [x.get_text() for x in ax.get_xticklabels()] == ["TP", "DC(1)", "DN(7:1)"]
    assert [p.get_height() for p in _bars(ax, "bars-energy")] == pytest.approx([15, 9, 7])
    _inside(ax, [15.0 + 3.0, 9.5, 7.2])          # the error bars too
    _inside(ax2, [8.0, 5.0, 4.0])
    assert {"15.0 J", "9.00 J", "7.00 J"} <= set(_texts(ax)), _texts(ax)
    P.plot_io_approaches(t.assign(energy_j=t["energy_j"] * 1e3,
                                  energy_j_std=t["energy_j_std"] * 1e3), tmp_path / "io2.png")
    assert _unit(saved[-1].axes[0].get_ylabel()) == "kJ"


def test_scaling_plot_units_labels_and_limits(saved, tmp_path):
    rows = []
    for strat, e0, tp in (("veloc", 300.0, 2e-3), ("gio", 400.0, 5e-4)):
        for n in (1, 2, 4):
            rows.append({"tag:strategy": strat, "part": "total", "gib_per_rank": 1.0,
                         "nranks": n, "runs": 3, "energy_j": e0 * n, "energy_j_std": 50.0,
                         "throughput_gibs": tp * n, "throughput_gibs_std": tp / 10})
    P.plot_scaling(pd.DataFrame(rows), tmp_path / "s.png")
    ax1, ax2 = saved[-1].axes
    # 300-1600 J: kJ; 0.5-8 MiB/s: MiB/s (it said GiB/s with 0.0005-0.008)
    assert _unit(ax1.get_ylabel()) == "kJ" and _unit(ax2.get_ylabel()) == "MiB/s"
    assert sorted(t.get_text() for t in ax1.get_legend().get_texts()) == ["gio", "veloc"]
    ys = np.concatenate([ln.get_ydata() for ln in _series(ax1)])
    assert ys.max() == pytest.approx(1.6) and ys.min() == pytest.approx(0.3)
    _inside(ax1, [1.6 + 0.05])                    # 50 J error bars
    ys = np.concatenate([ln.get_ydata() for ln in _series(ax2)])
    assert ys.max() == pytest.approx(8e-3 * 1024)
    _inside(ax2, [(8e-3 + 2e-4) * 1024])          # the top error bar


def test_power_plot_labels_and_limits(saved, tmp_path):
    a, b, c = M.TABLE_2_4["Broadwell"]
    df = M.synthetic_sweep(a, b, c, 2.0, 0.525, seed=5)
    fit = M.fit_dvfs(df, power_ref_w=40.0)
    samples = M.sweep_samples(df, power_ref_w=40.0)
    rec = M.recommend_frequency(fit, 0.1)
    P.plot_power_fit(samples, fit, tmp_path / "p.png", recommendation=rec)
    ax = saved[-1].axes[0]
    assert ax.get_xlabel() == "frequency (GHz)"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert not any(SCI.search(x) for x in labels), labels
    assert f"recommended {rec.freq_khz / 1e6:.2f} GHz" in " ".join(labels)
    lo, hi = ax.get_ylim()
    assert lo <= samples["power"].min() and samples["power"].max() <= hi
    lo, hi = ax.get_xlim()
    assert lo <= samples["freq_ghz"].min() and samples["freq_ghz"].max() <= hi


def test_plot_dumps_command_keeps_the_error_bound(run, saved, tmp_path):
    """`plot dumps --error-bound tag:eb` (the demo's tags): the groups are
    the error bounds, not one group called nan."""
    sp = tmp_path / "sp"
    jid = 300
    for comp, eb in (("raw", None), ("sz3", "1e-2"), ("zfp", "1e-2"), ("zfp", "1e-4")):
        jid += 1
        ph = ([recgen.phase(0, "write", 1, 2, 12, 3)] if comp == "raw" else
              [recgen.phase(0, "compress", 1, 2, 6, 1),
               recgen.phase(1, "write", 3, 1, 2, 0.5)])
        tags = {"dump": comp, "field": "f1", **({"eb": eb} if eb else {})}
        recgen.write(sp, recgen.record(jid, "0", "node01", tags=tags, phases=ph,
                                       policy="monitor", dur_s=5))
    run("ingest", sp)
    run("plot", "dumps", tmp_path / "d.png", "--by", "tag:dump", "--error-bound", "tag:eb")
    ax = saved[-1].axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1e-4", "1e-2"] or \
        [t.get_text() for t in ax.get_xticklabels()] == ["0.0001", "0.01"]
    assert _unit(ax.get_ylabel()) == "J"          # 9.5 J stacks: not 0.0095 kJ


def test_plot_into_a_missing_folder_is_one_line(run, tmp_path):
    sp = tmp_path / "sp"
    for r in recgen.checkpoint_study():
        recgen.write(sp, r)
    run("ingest", sp)
    out = tmp_path / "no" / "such" / "dir" / "x.png"
    res = run("plot", "scaling", out, "--where", "study=ckpt", ok=False)
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1 and str(out) in res.output
    assert not (tmp_path / "no").exists()
