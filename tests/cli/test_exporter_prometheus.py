"""A real Prometheus (Debian's) scrapes a running `joulestep exporter`:
PromQL totals equal the totals computed here from the records ingested,
before and after more records arrive while both run."""
import json
import os
import urllib.request

import pytest

import promrun
from joulestep import store
from test_exporter import PRICE, RECORDS, job, truth

def value(res) -> dict:
    """{label value tuple: float} of an instant vector (sum by ...)."""
    return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in res}


def sums(energy: dict, idx: int, name: str) -> dict:
    out: dict = {}
    for k, e in energy.items():
        key = ((name, k[idx]),)
        out[key] = out.get(key, 0.0) + e
    return out


def test_prometheus_scrapes_the_exporter(tmp_path, db):
    conn = store.connect(db)
    store.ingest_records(conn, RECORDS)
    conf = os.environ["JOULESTEP_CONFIG"]
    with promrun.exporter_proc(db, conf, "--refresh", "0.3") as (port, _), \
            promrun.Prometheus(tmp_path / "prom", [f"127.0.0.1:{port}"]) as prom:
        # the exporter answers OpenMetrics to a client that asks for it
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/metrics",
            headers={"Accept": "application/openmetrics-text; version=1.0.0"})
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.headers["Content-Type"].startswith("application/openmetrics-text")
            assert r.read().endswith(b"# EOF\n")
        energy, secs, steps, _ = truth(RECORDS)
        prom.wait_for('up{job="joulestep"} == 1')
        by_account = prom.wait_for(
            "sum by (account) (joulestep_energy_joules_total)")
        assert value(by_account) == pytest.approx(sums(energy, 2, "account"))
        by_user = value(prom.query("sum by (user) (joulestep_step_seconds_total)"))
        assert by_user == pytest.approx(sums(secs, 1, "user"))
        cost = value(prom.query("sum(joulestep_cost_total)"))
        assert cost == pytest.approx({(): sum(energy.values()) / 3.6e6 * PRICE})
        adoption = value(prom.query("sum by (policy) (joulestep_steps_total)"))
        assert adoption == pytest.approx(sums(steps, 4, "policy"))

        # every PromQL query of the Grafana dashboard runs, and finds series
        dash = json.loads((promrun.REPO / "etc/grafana/joulestep.json").read_text())
        for p in dash["panels"]:
            for t in p["targets"]:
                if "expr" in t:
                    q = t["expr"].replace("$cluster", ".*")
                    q = q.replace("$__rate_interval", "1m")
                    prom.wait_for(q, timeout=60)  # increase(): from the second scrape on

        # more records while both run: the next scrapes carry them
        more = job(7, 300, user="dave", account="geo") + job(1, 0, step="3",
                                                             node="n9", cpu=11)
        store.ingest_records(conn, more)
        energy2, *_ = truth(RECORDS + more)
        want = sums(energy2, 2, "account")
        got = prom.wait_for("sum by (account) (joulestep_energy_joules_total)",
                            ok=lambda res: value(res).keys() == want.keys()
                            and value(res) == pytest.approx(want))
        assert value(got) == pytest.approx(want)
    conn.close()
