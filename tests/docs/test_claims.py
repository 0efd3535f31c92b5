"""What the docs claim, the code backs: every plugstack key the plugin takes
is in each list of keys, once; the manual's example is one the plugin
accepts; the units' Documentation= name files their package ships; `make
install` builds only what it installs (no unit tests, no MPI benchmarks:
neither cmocka nor mpicc needed); no interface the code does not have.

The truth is the plugin's own parser (build/bin/joulestep-plugstack-check:
its refusal of an unknown key lists the keys it takes) and the packaging's
own lists (debian/*.docs, the RPM spec)."""
from __future__ import annotations

import re
import subprocess

import pytest


def check(build_dir, *args):
    return subprocess.run([str(build_dir / "bin" / "joulestep-plugstack-check"), *args],
                          capture_output=True, text=True, timeout=60)


def plugin_keys(build_dir) -> set:
    res = check(build_dir, "no_such_key=1")
    assert res.returncode != 0
    m = re.search(r"allowed: ([a-z_ ]+)\)", res.stdout + res.stderr)
    assert m, res.stdout + res.stderr
    return set(m.group(1).split())


def test_admin_guide_keys_table_lists_every_key_once(repo, build_dir):
    text = (repo / "docs" / "admin-guide.md").read_text()
    table = text.split("## Keys", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \|", table, re.M)
    assert sorted(rows) == sorted(plugin_keys(build_dir)), sorted(
        set(rows) ^ plugin_keys(build_dir))


def test_plugstack_example_lists_every_key_once(repo, build_dir):
    text = (repo / "etc" / "plugstack.conf.d" / "joulestep.conf.example").read_text()
    listed = re.findall(r"^#   (\w+)=", text, re.M)
    assert sorted(listed) == sorted(plugin_keys(build_dir)), [
        k for k in listed if listed.count(k) > 1] or sorted(
        set(listed) ^ plugin_keys(build_dir))
    line = re.search(r"^optional \S+ (.*)$", text, re.M).group(1).split()
    res = check(build_dir, *line)
    assert res.returncode == 0, res.stdout + res.stderr


def test_spank_manual_lists_every_key(repo, build_dir):
    text = (repo / "docs" / "joulestep-spank.8").read_text()
    sect = text.split(".SH PLUGSTACK KEYS", 1)[1].split("\n.SH ", 1)[0]
    listed = {k for ln in sect.splitlines() if ln.startswith(".BR ")
              for k in re.findall(r"(?<![\w-])(\w+)=", ln)}
    assert plugin_keys(build_dir) <= listed, plugin_keys(build_dir) - listed


def test_plugstack_check_manual_example_is_accepted(repo, build_dir):
    text = (repo / "docs" / "joulestep-plugstack-check.8").read_text()
    ex = text.split(".SH EXAMPLE", 1)[1].split(".SH", 1)[0]
    lines = [ln for ln in ex.splitlines() if ln.startswith("joulestep-plugstack-check")]
    assert lines
    for ln in lines:
        res = check(build_dir, *ln.split()[1:])
        assert res.returncode == 0 and "ok" in res.stdout, (ln, res.stdout, res.stderr)


def _docs_of(repo, deb_pkg: str) -> set:
    return {l.strip().rsplit("/", 1)[-1] for l in
            (repo / "debian" / f"{deb_pkg}.docs").read_text().splitlines() if l.strip()}


def _rpm_docs(repo, section: str) -> set:
    spec = (repo / "packaging" / "rpm" / "joulestep.spec").read_text()
    body = spec.split(f"%files {section}", 1)[1].split("\n%files", 1)[0]
    return {d.rsplit("/", 1)[-1] for l in body.splitlines() if l.startswith("%doc")
            for d in l.split()[1:]}


@pytest.mark.parametrize("unit", ["joulestep-ingest.service", "joulestep-exporter.service"])
def test_unit_documentation_is_shipped_with_it(repo, unit):
    """The units are in joulestep-cli: what their Documentation= names must
    be in that package (Debian: joulestep-cli.docs; RPM: cli's %doc; man
    pages: joulestep(1) is the CLI's)."""
    text = (repo / "etc" / "systemd" / unit).read_text()
    docs = re.findall(r"^Documentation=(.*)$", text, re.M)
    assert docs
    for uri in " ".join(docs).split():
        if uri.startswith("file://"):
            assert uri.startswith("file:///usr/local/share/doc/joulestep/"), uri
            name = uri.rsplit("/", 1)[-1]
            assert name in _docs_of(repo, "joulestep-cli"), (unit, name)
            assert name in _rpm_docs(repo, "cli"), (unit, name)
        else:
            m = re.fullmatch(r"man:([\w.-]+)\((\d)\)", uri)
            assert m and m.group(1) == "joulestep", uri   # the CLI package's page


def test_make_install_builds_only_what_it_installs(repo, tmp_path):
    """A dry run of `make install` into an empty build directory: the
    commands it would run compile no unit test (cmocka), no benchmark and
    nothing with mpicc."""
    res = subprocess.run(["make", "-n", "-C", str(repo), f"B={tmp_path / 'b'}", "install",
                          f"DESTDIR={tmp_path / 'root'}"], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "joulestep.so" in out and "libjoulestep-client.so" in out
    for bad in ("cmocka", "mpicc", "tests/unit/", "bench/", "tests/hooks/", "fuzz"):
        assert bad not in out, (bad, [l for l in out.splitlines() if bad in l][:3])


def test_no_fortran_interface_is_claimed(repo):
    """The client library is C (spank/client/joulestep/client.h): callable
    from Fortran only through the user's own ISO_C_BINDING interface, which
    joulestep does not ship."""
    hits = []
    for p in list((repo / "docs").glob("*")) + [repo / "README.md"]:
        for i, line in enumerate(p.read_text().splitlines(), 1):
            if re.search(r"markers? from [^.]*\bFortran\b|\bFortran (interface|module)\b", line):
                hits.append(f"{p.name}:{i}: {line.strip()}")
    assert hits == []
