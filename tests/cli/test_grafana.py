"""etc/grafana/joulestep.json: its structure, the metric names and labels its
PromQL uses (the exporter's), and its SQL run on a real store against the
top jobs computed here from the records."""
import json
import re

import pytest

from joulestep import exporter as ex, store
from test_exporter import J, RECORDS, counted, parse, view_of

REQUIRED = ("Energy by account", "Policy adoption", "Estimated saving", "Top jobs")


@pytest.fixture(scope="module")
def dash(repo):
    return json.loads((repo / "etc" / "grafana" / "joulestep.json").read_text())


def targets(dash, kind):
    for p in dash["panels"]:
        for t in p["targets"]:
            if (kind == "sql") == ("rawSql" in t):
                yield p, t


def test_structure(dash):
    assert dash["uid"] and dash["title"] and dash["schemaVersion"] >= 36
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    titles = [p["title"] for p in dash["panels"]]
    for want in REQUIRED:
        assert any(t.startswith(want) for t in titles), want
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["prometheus"]["query"] == "prometheus"
    for p in dash["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        assert p["description"], p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:    # every datasource is a dashboard variable
            for ds in (p["datasource"], t["datasource"]):
                assert ds["uid"].strip("${}") in variables, p["title"]
    top = next(p for p in dash["panels"] if p["title"] == "Top jobs")
    assert top["type"] == "table" and all("rawSql" in t for t in top["targets"])


def test_promql_uses_the_exporters_metrics_and_labels(db, dash):
    conn = store.connect(db)
    store.ingest_records(conn, RECORDS)
    conn.close()
    v = view_of(db)
    v.refresh()
    names = set(parse(ex.text(v).decode())) | {ex.LOST + "_total"}
    labels = set(ex.LABELS) | {"currency"}
    n = 0
    for p, t in targets(dash, "promql"):
        used = set(re.findall(r"\bjoulestep_\w+", t["expr"]))
        assert used and used <= names, (p["title"], used - names)
        for group in re.findall(r"\b(?:by|ignoring)\s*\(([^)]*)\)", t["expr"]):
            assert {x.strip() for x in group.split(",")} <= labels, p["title"]
        for m in re.findall(r"\{\{(\w+)\}\}", t.get("legendFormat", "")):
            assert m in labels, p["title"]
        n += 1
    assert n >= 5


def sql_for(t, since_ns, until_ns, cluster):
    """The panel's SQL as Grafana sends it (its variables interpolated)."""
    q = t["rawSql"].replace("${__from}", str(since_ns // 10**6))
    q = q.replace("${__to}", str(until_ns // 10**6))
    q = q.replace("${cluster:sqlstring}", "'" + cluster.replace("'", "''") + "'")
    assert "$" not in q, q
    return q


@pytest.mark.parametrize("cluster", [".*", "demo"])
def test_top_jobs_sql_on_a_real_store(db, dash, cluster):
    conn = store.connect(db)
    store.ingest_records(conn, RECORDS)
    # the truth: per job, the counted energy of its steps started in range
    t0 = min(r["step"]["start_ns"] for r in RECORDS)
    since, until = t0 + 30 * 10**9, t0 + 10**13      # leaves job 1 out
    jobs = {}
    for r, e, _ in counted(RECORDS):
        if since <= r["step"]["start_ns"] < until and cluster in (".*", r["cluster"]):
            k = (r["cluster"], r["job"]["job_id"])
            jobs[k] = jobs.get(k, 0) + e / J
    want = sorted(jobs.items(), key=lambda kv: -kv[1])
    (_, t), = targets(dash, "sql")
    cur = conn.execute(sql_for(t, since, until, cluster))
    cols = [d[0] for d in cur.description]
    rows = [dict(zip(cols, r)) for r in cur.fetchall()]
    conn.close()
    assert {"job_id", "user", "account", "energy_j", "started"} <= set(cols)
    assert [((r["cluster"], r["job_id"]), r["energy_j"]) for r in rows] == \
        [(k, pytest.approx(e)) for k, e in want]
    assert len(want) >= 3 and (("demo", 1) not in jobs)
