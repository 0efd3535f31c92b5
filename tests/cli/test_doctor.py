"""joulestep doctor: the plugstack line it suggests, and --node (issue 25).

The plugin's own parser judges the lines: build/bin/joulestep-plugstack-check
runs js_conf_parse (spank/js_parse.c), the code slurmstepd runs."""
import json
import pathlib
import subprocess
import sys

import pytest

from joulestep import doctor

FAKEHW = pathlib.Path(__file__).resolve().parents[1] / "fakehw" / "fakehw.py"


@pytest.fixture(scope="module")
def checker(build_dir):
    exe = build_dir / "bin" / "joulestep-plugstack-check"
    if not exe.exists():
        pytest.fail(f"{exe} missing: run make")
    return exe


def plugin_accepts(checker, words):
    return subprocess.run([str(checker), "--", *words], capture_output=True,
                          text=True, timeout=30)


def suggested(run, *args):
    return json.loads(run("doctor", *args, "--format", "json").stdout)["plugstack"]


def test_suggested_line_is_accepted_by_the_plugins_parser(run, checker, tmp_path):
    hw = tmp_path / "hw"
    subprocess.run([sys.executable, str(FAKEHW), "create", str(hw)], check=True)
    for sysfs in ("/sys", str(hw)):
        line = suggested(run, "--sysfs", sysfs)
        words = line.split()
        assert words[0] == "optional" and words[1].endswith("joulestep.so"), line
        res = plugin_accepts(checker, words[2:])
        assert res.returncode == 0, (line, res.stderr)
    # the checker does refuse what the plugin refuses
    assert plugin_accepts(checker, ["backend=powercap,papi,sysfs"]).returncode == 1


def test_plugin_path_is_where_the_packages_install(repo, tmp_path):
    # the Debian package's path, from debian/joulestep-spank.install
    pattern = next(l for l in (repo / "debian" / "joulestep-spank.install")
                   .read_text().split() if l.endswith("/joulestep.so"))
    deb = pathlib.Path(pattern.replace("*", "x86_64-linux-gnu"))
    (tmp_path / deb).parent.mkdir(parents=True)
    (tmp_path / deb).write_bytes(b"")
    assert doctor.plugin_path(tmp_path) == "/" + str(deb)
    # none installed: the name Slurm looks up in its PluginDir
    assert doctor.plugin_path(tmp_path / "empty") is None
    line = doctor.plugstack_line(pathlib.Path("/sys"), [], None)
    assert line.split()[1] == "joulestep.so"


def write_plugstack(tmp_path, *lines):
    d = tmp_path / "etc" / "plugstack.conf.d"
    d.mkdir(parents=True)
    (d / "joulestep.conf").write_text("# comment\n" + "".join(l + "\n" for l in lines))
    main = tmp_path / "etc" / "plugstack.conf"
    main.write_text(f"optional /usr/lib/other.so a=b\ninclude {d}/*.conf\n")
    so = tmp_path / "joulestep.so"
    so.write_bytes(b"")
    return main, so


def test_node_check_reads_the_nodes_plugstack(run, checker, tmp_path, monkeypatch):
    monkeypatch.setenv("JOULESTEP_PLUGSTACK_CHECK", str(checker))
    main, so = write_plugstack(
        tmp_path, f"optional {tmp_path}/joulestep.so backend=powercap,papi,sysfs")
    r = run("doctor", "--node", "--plugstack", main, "--format", "json", ok=False)
    d = json.loads(r.stdout)["node"]
    assert len(d["lines"]) == 1 and d["lines"][0]["accepted"] is False
    assert "papi is not used inside slurmstepd" in d["lines"][0]["message"]
    assert d["lines"][0]["file"].endswith("joulestep.conf") and d["lines"][0]["line"] == 2
    assert any("plugin disabled" in p for p in d["problems"])
    text = run("doctor", "--node", "--plugstack", main, ok=False).stdout
    assert "REFUSED" in text and "papi" in text
    # a good line: accepted, exit 0
    main.unlink()
    (tmp_path / "etc" / "plugstack.conf.d" / "joulestep.conf").unlink()
    (tmp_path / "etc" / "plugstack.conf.d").rmdir()
    so.unlink()
    main, so = write_plugstack(
        tmp_path, f"optional {so} spool=/var/spool/joulestep backend=powercap,sysfs")
    # on a node with RAPL (a fake tree: never this host's hardware)
    hw = tmp_path / "hw"
    subprocess.run([sys.executable, str(FAKEHW), "create", str(hw)], check=True)
    d = json.loads(run("doctor", "--node", "--plugstack", main, "--sysfs", hw,
                       "--format", "json").stdout)["node"]
    assert d["lines"][0]["accepted"] is True and d["problems"] == []


def test_node_check_without_the_plugin(run, checker, tmp_path, monkeypatch):
    monkeypatch.setenv("JOULESTEP_PLUGSTACK_CHECK", str(checker))
    conf = tmp_path / "plugstack.conf"
    conf.write_text("optional /usr/lib/other.so\n")
    d = json.loads(run("doctor", "--node", "--plugstack", conf, "--format", "json",
                       ok=False).stdout)["node"]
    assert d["lines"] == [] and any("not in" in p for p in d["problems"])
    # a plugin path that does not exist
    conf.write_text(f"required {tmp_path}/nowhere/joulestep.so\n")
    d = json.loads(run("doctor", "--node", "--plugstack", conf, "--format", "json",
                       ok=False).stdout)["node"]
    assert any("does not exist" in p for p in d["problems"])


def admin_guide_keys(repo) -> set:
    """The keys of docs/admin-guide.md's "Keys" table."""
    text = (repo / "docs" / "admin-guide.md").read_text()
    table = text[text.index("\n## Keys\n"):].split("\n## ", 2)[1]
    import re
    return set(re.findall(r"^\| `(\w+)` \|", table, re.M))


def test_plugstack_example_is_accepted_and_current(repo, checker):
    """etc/plugstack.conf.d/joulestep.conf.example: its lines are accepted by the
    plugin's parser, use no deprecated key (rate=, submit_cache_hours=), and set
    every key of the admin guide's table but cluster (slurmd's), tuned, auto
    (files the admin makes), hooks_dir and gpu_lib (the second line, a default beside the plugin, the
    GPU backend's own soname)."""
    text = (repo / "etc" / "plugstack.conf.d" / "joulestep.conf.example").read_text()
    lines = [l.lstrip("# ").split() for l in text.splitlines()
             if l.lstrip("# ").startswith("optional ")]
    assert len(lines) == 2
    keys = admin_guide_keys(repo)
    assert {"max_markers_per_s", "max_markers_per_step", "min_phase_ms"} <= keys
    for words in lines:
        res = plugin_accepts(checker, words[2:])
        assert res.returncode == 0, (words, res.stderr)
        assert words[1] == "/usr/local/lib/slurm/joulestep.so"   # make install's
        used = {w.split("=", 1)[0] for w in words[2:]}
        assert not used & {"rate", "submit_cache_hours"}, used
        assert used <= keys, used - keys
    assert {w.split("=", 1)[0] for w in lines[0][2:]} == keys - {"cluster", "tuned", "auto",
                                                                  "hooks_dir", "gpu_lib"}
