"""compare_dumps' achieved figures (bench/dump): compression ratio from the phases'
bytes and the maximum error from the write labels; numbers hand-checked."""
import math

import pandas as pd
import pytest

from joulestep import analysis as A


def row(job, comp, eb, policy, kind, nbytes, label=None, cpu_j=10):
    return {"job_id": job, "tag:dump": comp, "tag:eb": eb, "policy": policy, "kind": kind,
            "energy_cpu_uj": int(cpu_j * 1e6), "energy_dram_uj": 0, "duration_ns": 10**9,
            "bytes": nbytes, "label": label}


def frame():
    return pd.DataFrame([
        # two sz runs, two repetitions each: ratio per run 800/100 = 8 and 800/200 = 4
        row(1, "sz", "1e-3", "monitor", "compress", 400, "sz:1e-3"),
        row(1, "sz", "1e-3", "monitor", "verify", None),
        row(1, "sz", "1e-3", "monitor", "write", 50, "cr:8:maxerr:9.0e-04"),
        row(1, "sz", "1e-3", "monitor", "compress", 400, "sz:1e-3"),
        row(1, "sz", "1e-3", "monitor", "write", 50, "cr:8:maxerr:9.5e-04"),
        row(2, "sz", "1e-3", "monitor", "compress", 800, "sz:1e-3"),
        row(2, "sz", "1e-3", "monitor", "write", 200, "cr:4:maxerr:8.0e-04"),
        # zfp without a max error in its label (verification skipped) and no bytes
        row(3, "zfp", "1e-2", "monitor", "compress", None, "zfp:1e-2"),
        row(3, "zfp", "1e-2", "monitor", "write", None, "cr:5:maxerr:-"),
        row(4, "raw", None, "monitor", "write", 800, "cr:1:maxerr:0"),
        row(5, "raw", None, "io-dvfs", "write", None, None),
    ])


def test_ratio_and_max_error():
    t = A.compare_dumps(frame(), compressor="tag:dump", error_bound="tag:eb"
                        ).set_index(["compressor", "error_bound", "policy"])
    sz = t.loc[("sz", "1e-3", "monitor")]
    assert sz.runs == 2
    assert sz.ratio == pytest.approx((8 + 4) / 2)
    assert sz.max_err == pytest.approx(9.5e-4)          # the worst run, not the mean
    # verify phases are not part of the dump's energy: 2 x compress + 2 x write
    assert sz.total_j == pytest.approx((40 + 20) / 2)
    zfp = t.loc[("zfp", "1e-2", "monitor")]
    assert math.isnan(zfp.ratio) and math.isnan(zfp.max_err)
    raw = t.loc[("raw", "-", "monitor")]
    assert raw.ratio == 1 and raw.max_err == 0
    rawp = t.loc[("raw", "-", "io-dvfs")]
    assert math.isnan(rawp.ratio) and math.isnan(rawp.max_err)


def test_without_bytes_or_labels():
    t = A.compare_dumps(frame().drop(columns=["bytes", "label"]), compressor="tag:dump",
                        error_bound="tag:eb")
    assert t["ratio"].isna().all() and t["max_err"].isna().all()
    assert len(t) == 4
