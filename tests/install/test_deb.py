"""The Debian packages (`make deb`, debian/): what they contain, and the real thing:
installed with dpkg on this machine, the plugin loaded from its installed path by
the test cluster runs a job (with --energy-hooks=veloc: the packaged hook library,
found where the plugin looks by default) whose record the installed CLI ingests;
purged after.

The packages are built once per session (`make deb` also skips the build when the
sources are unchanged since the last one). The truths are the repository's files
(guides, man pages, migrations, units), where Debian's Slurm keeps its plugins
(slurm-wlm-basic-plugins' own file list) and the fake hardware's advance replies.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pathlib
import re
import subprocess
import time
from types import SimpleNamespace

import pytest

from pkgtest import (REPO, hooks_dir_for, repo_docs, repo_hooks, repo_manpages, repo_migrations,
                     requirement_names)
from harness import BASE

PACKAGES = ("joulestep-spank", "libjoulestep-client1", "libjoulestep-dev", "joulestep-cli",
            "python3-joulestep-marker")
ARCH_ALL = ("joulestep-cli", "python3-joulestep-marker")
SYS_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8"}


def sh(*argv, check=True, timeout=120, **kw) -> subprocess.CompletedProcess:
    res = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                         timeout=timeout, stdin=subprocess.DEVNULL, **kw)
    if check:
        assert res.returncode == 0, f"{argv}: {res.returncode}\n{res.stdout}\n{res.stderr}"
    return res


def multiarch() -> str:
    return sh("dpkg-architecture", "-qDEB_HOST_MULTIARCH").stdout.strip()


def debian_slurm_plugin_dir() -> str:
    """Where Debian's Slurm keeps its plugins: the directory of one of its own."""
    files = sh("dpkg", "-L", "slurm-wlm-basic-plugins").stdout.split()
    return str(pathlib.Path(next(f for f in files if f.endswith("/proctrack_linuxproc.so"))).parent)


@pytest.fixture(scope="module")
def debs(repo, version) -> dict:
    """package name -> .deb path, built by `make deb`."""
    res = sh("make", "-s", "-C", repo, "deb", timeout=1200)
    d = repo / "build" / "deb" / "current"
    arch = sh("dpkg", "--print-architecture").stdout.strip()
    out = {p: d / f"{p}_{version}_{'all' if p in ARCH_ALL else arch}.deb"
           for p in PACKAGES}
    for p, f in out.items():
        assert f.exists(), f"{f} missing after make deb:\n{res.stdout}"
    return out


def contents(deb: pathlib.Path) -> set:
    """Paths (/usr/...) of the files and symlinks in a .deb."""
    out = set()
    for line in sh("dpkg-deb", "-c", deb).stdout.splitlines():
        f = line.split()
        if not f[0].startswith("d"):
            out.add(f[5][1:])  # ./usr/... -> /usr/...
    return out


def field(deb, name) -> str:
    return sh("dpkg-deb", "-f", deb, name).stdout.strip()


def test_packages_hold_what_a_site_installs(debs, tmp_path):
    ma = multiarch()
    plugdir = debian_slurm_plugin_dir()
    files = {p: contents(f) for p, f in debs.items()}
    everything = set().union(*files.values())
    # every file in exactly one package
    assert sum(map(len, files.values())) == len(everything)
    spank, client, dev, cli, marker = (files[p] for p in PACKAGES)
    # the phase markers alone, for compute nodes: the CLI's own two modules
    pym = "/usr/lib/python3/dist-packages/joulestep"
    assert {f for f in marker if f.startswith("/usr/lib/")} == {
        f"{pym}/__init__.py", f"{pym}/phase.py"}, marker
    assert f"{pym}/__init__.py" not in cli and f"{pym}/phase.py" not in cli
    assert "/usr/lib/sysusers.d/joulestep.conf" in cli     # the exporter's user
    assert f"{plugdir}/joulestep.so" in spank and plugdir == f"/usr/lib/{ma}/slurm-wlm"
    assert {"/usr/bin/joulestep-run", "/usr/bin/joulestep-restore", "/usr/bin/joulestep-phase",
            "/usr/bin/joulestep-plugstack-check"} <= spank
    # the --energy-hooks libraries where the packaged plugin looks for them by default,
    # root's regular files, not group/world-writable (the plugin preloads nothing else)
    hooks = hooks_dir_for(f"{plugdir}/joulestep.so")
    assert hooks == f"/usr/lib/{ma}/joulestep"
    assert {f for f in everything if f.startswith(hooks + "/")} == {f"{hooks}/{n}" for n in repo_hooks()}
    assert {f"{hooks}/{n}" for n in repo_hooks()} <= spank
    for line in sh("dpkg-deb", "-c", debs["joulestep-spank"]).stdout.splitlines():
        if f".{hooks}/lib" in line:
            mode, own = line.split()[:2]
            assert mode[0] == "-" and mode[5] != "w" and mode[8] != "w" and own == "root/root", line
    assert client & {f for f in everything if "libjoulestep-client.so" in f} == {
        f"/usr/lib/{ma}/libjoulestep-client.so.1"}
    assert {f"/usr/lib/{ma}/libjoulestep-client.so", f"/usr/lib/{ma}/libjoulestep-acct.a",
            f"/usr/lib/{ma}/pkgconfig/joulestep-client.pc", f"/usr/lib/{ma}/pkgconfig/joulestep.pc",
            "/usr/include/joulestep/client.h", "/usr/include/joulestep/energy.h",
            "/usr/include/joulestep/freq.h"} <= dev
    assert {"/usr/bin/joulestep", "/usr/bin/joulestep-mail"} <= cli
    # every guide and man page of the repository is shipped
    docs = {pathlib.PurePath(f).name for f in everything if re.match(r"/usr/share/doc/[^/]+/[^/]+\.md$", f)}
    assert repo_docs() <= docs
    for m in repo_manpages():
        assert f"/usr/share/man/man{m[-1]}/{m}.gz" in everything, m
    # the CLI ships every migration, byte for byte (the repository's sql/ is a symlink
    # into the package; the .deb holds real files)
    pkg = "/usr/lib/python3/dist-packages/joulestep"
    shipped = {f[len(pkg) + 5:] for f in cli if f.startswith(pkg + "/sql/")}
    assert shipped == set(repo_migrations())
    # pure Python (issue 21): no compiled module in the CLI
    assert not [f for f in cli if f.endswith(".so")], cli
    sh("dpkg-deb", "-x", debs["joulestep-cli"], tmp_path / "cli")
    for rel, data in repo_migrations().items():
        assert (tmp_path / "cli" / pkg.lstrip("/") / "sql" / rel).read_bytes() == data, rel
    # the systemd units: all of etc/systemd, naming the packaged joulestep
    for u in (REPO / "etc" / "systemd").iterdir():
        unit = tmp_path / "cli" / "lib/systemd/system" / u.name
        text = unit.read_text()
        assert "/usr/local" not in text, u.name
        for exe in re.findall(r"^Exec\w*=[-@:+!]*(\S+)", text, re.M):
            # joulestep's own from the package; a shell from the system
            assert exe in cli or exe in ("/bin/sh", "/usr/bin/sh"), (u.name, exe)
    # the plugstack example (a doc, not active configuration) names the packaged plugin
    ex = [f for f in spank if f.startswith("/usr/share/doc/joulestep-spank/examples/")]
    assert len(ex) == 1 and not any(f.startswith("/etc/") for f in everything)
    sh("dpkg-deb", "-x", debs["joulestep-spank"], tmp_path / "spank")
    lines = re.findall(r"^#?\s*optional\s+(\S+)", (tmp_path / "spank" / ex[0].lstrip("/")).read_text(), re.M)
    assert lines and set(lines) == {f"{plugdir}/joulestep.so"}


def test_package_relations(debs):
    # the plugin asks for the Slurm release it was built against (SPANK is not
    # ABI-stable): the installed libslurm-dev is inside the range, the next major not
    slurm = sh("dpkg-query", "-W", "-f=${Version}", "libslurm-dev").stdout
    dep = field(debs["joulestep-spank"], "Depends")
    rng = re.findall(r"slurm-wlm-basic-plugins \(([<>=]+) ([^)]+)\)", dep)
    assert len(rng) == 2, dep
    major = ".".join(slurm.split(".")[:2])
    nxt = f"{int(major.split('.')[0]) + 1}.02"
    for op, ver in rng:
        rel = {">=": "ge", "<<": "lt"}[op]
        assert sh("dpkg", "--compare-versions", slurm, rel, ver, check=False).returncode == 0, (slurm, op, ver)
    assert any(sh("dpkg", "--compare-versions", nxt, {">=": "ge", "<<": "lt"}[op], ver,
                  check=False).returncode != 0 for op, ver in rng)
    assert "libjoulestep-client1" in dep and "libpowercap0" in dep and "libjansson4" in dep
    # the CLI takes its Python libraries from Debian: one python3-* per requirement
    deps = {re.match(r"\S+", d.strip()).group(0) for d in field(debs["joulestep-cli"], "Depends").split(",")}
    assert {f"python3-{n}" for n in requirement_names()} <= deps
    assert "python3-joulestep-marker" in deps
    # the markers need nothing of the CLI's
    mdeps = field(debs["python3-joulestep-marker"], "Depends")
    assert not re.search(r"python3-(pandas|numpy|scipy|matplotlib|click)", mdeps), mdeps
    # "all": pure Python, not tied to one Python minor version (issue 21)
    assert field(debs["joulestep-cli"], "Architecture") == "all"
    assert not re.search(r"python3 \(<< 3\.\d+\)", field(debs["joulestep-cli"], "Depends"))


# ------------------------------------------------------------------ installed
@contextlib.contextmanager
def machine_lock():
    """One package test at a time on this machine (dpkg installs are machine-wide)."""
    BASE.mkdir(parents=True, exist_ok=True)
    fd = os.open(BASE / "deb-test.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def dpkg(*args, timeout=300):
    """dpkg, waiting while another dpkg or apt holds its lock."""
    deadline = time.monotonic() + timeout
    while True:
        res = sh("dpkg", *args, check=False, timeout=timeout, env=SYS_ENV)
        if res.returncode == 0 or "lock" not in res.stderr or time.monotonic() > deadline:
            return res
        time.sleep(2)


def installed(pkg) -> bool:
    res = sh("dpkg-query", "-W", "-f=${Status}", pkg, check=False)
    return res.returncode == 0 and "installed" in res.stdout.split()


def purge():
    res = dpkg("--purge", *PACKAGES)
    assert res.returncode == 0, res.stderr
    assert not any(installed(p) for p in PACKAGES)


@pytest.mark.cluster
def test_installed_packages_run_a_job_and_the_cli(debs, cluster, repo, build_dir, tmp_path):
    from test_plugin import PluginEnv, adv_truth, close

    plugin = pathlib.Path(debian_slurm_plugin_dir()) / "joulestep.so"
    with machine_lock():
        purge()  # a run killed before its own purge
        res = dpkg("-i", *debs.values())
        try:
            assert res.returncode == 0, res.stdout + res.stderr
            assert all(installed(p) for p in PACKAGES)
            env = PluginEnv(cluster, repo, build_dir)
            try:
                env.so = plugin
                env.configure()
                assert cluster.plugin_so == plugin  # world-readable: used in place, not copied
                # as a site may name it: plain joulestep.so, found in Slurm's PluginDir
                text = cluster.plugstack.read_text()
                assert f"optional {plugin} " in text
                cluster.plugstack.write_text(text.replace(f"optional {plugin} ", "optional joulestep.so "))
                cluster.restart_slurmd()
                _run_job_and_ingest(env, plugin, tmp_path, adv_truth, close)
            finally:
                env.close()
            _installed_clients(tmp_path, env)
        finally:
            purge()
    for f in (plugin, pathlib.Path("/usr/bin/joulestep"), pathlib.Path("/usr/bin/joulestep-phase"),
              pathlib.Path("/usr/lib/python3/dist-packages/joulestep")):
        assert not f.exists() and not f.is_symlink(), f


def _run_job_and_ingest(env, plugin, tmp_path, adv_truth, close):
    from test_plugin import USER
    from test_plugin_hooks import K, ND, NI, veloc_cfg, veloc_truth

    # a VELOC program (the test double of tests/hooks) under --energy-hooks=veloc: no
    # hooks_dir= in plugstack.conf, so the plugin preloads the packaged library from
    # its default directory, and the program's checkpoints become phases
    veloc = veloc_cfg(SimpleNamespace(user_file=lambda n: env.c.user_dir(USER) / n), "veloc-deb", "sync")
    script = f"""#!/bin/sh
#SBATCH -n1
#SBATCH --energy-hooks=veloc
set -e
echo "PRELOAD $LD_PRELOAD"
{env.adv("step", 1)}
/usr/bin/joulestep-phase begin io w1
{env.adv("io", 2)}
/usr/bin/joulestep-phase end --bytes 1048576
{env.build}/tests/hooks/prog_veloc {veloc}/veloc.cfg {ND} {NI} {K}
"""
    job, out = env.run_job(script)
    truth = adv_truth(out)
    rec = env.wait_records(job, ["batch"])["batch"]
    assert rec["provenance"]["errors"] == []
    assert re.findall(r"^PRELOAD (.*)$", out, re.M) == [
        f"{hooks_dir_for(str(plugin))}/libjoulestep-veloc.so"], out
    assert rec["provenance"]["hooks"] == ["veloc"]
    ckpt = [(p["kind"], p["label"], p["bytes"]) for p in sorted(rec["phases"], key=lambda p: p["seq"])
            if p["kind"] in ("checkpoint", "flush")]
    assert ckpt == veloc_truth("sync"), out
    assert close(rec["step"]["energy_cpu_uj"], truth["*"][0])
    io = [p for p in rec["phases"] if p["kind"] == "io"]
    assert len(io) == 1 and io[0]["label"] == "w1"
    assert close(io[0]["energy_cpu_uj"], truth["io"][0])

    # the installed CLI, with Debian's Python and libraries only
    conf = tmp_path / "joulestep.conf"
    conf.write_text(f"[paths]\nspool = {env.spool}\n")
    cenv = dict(SYS_ENV, JOULESTEP_CONFIG=str(conf), HOME=str(tmp_path))
    mod = sh("/usr/bin/python3", "-c", "import joulestep; print(joulestep.__file__)", env=cenv).stdout
    assert mod.strip() == "/usr/lib/python3/dist-packages/joulestep/__init__.py"
    assert "ingest" in sh("/usr/bin/joulestep", "--help", env=cenv).stdout
    db = tmp_path / "js.db"
    sh("/usr/bin/joulestep", "--db", db, "ingest", env=cenv)
    js = json.loads(sh("/usr/bin/joulestep", "--db", db, "--format", "json", "job", job,
                       "--cluster", "jstest", env=cenv).stdout)
    step = next(s for s in js["steps"] if s["step_id"] == "batch")
    assert close(step["energy_cpu_j"] * 1e6, truth["*"][0])
    ph = next(p for p in step["phases"] if p["kind"] == "io")
    assert close(ph["energy_cpu_j"] * 1e6, truth["io"][0])


def _installed_clients(tmp_path, env):
    """joulestep-run and a marker program built with pkg-config from libjoulestep-dev."""
    run = json.loads(sh("/usr/bin/joulestep-run", "--sysfs", env.hw, "--backend", "sysfs", "--json",
                        "--", "true", env=SYS_ENV).stdout)
    # the fake hardware is in manual mode: nothing advanced it during `true`
    assert run["backend"] == "sysfs" and run["zones"] and run["energy_cpu_uj"] == 0
    flags = sh("pkg-config", "--cflags", "--libs", "joulestep-client", env=SYS_ENV).stdout.split()
    src = tmp_path / "app.c"
    src.write_text('#include <joulestep/client.h>\n'
                   'int main(void) { return js_phase_begin("write", 0) == JS_NOT_IN_STEP ? 0 : 1; }\n')
    sh("cc", src, "-o", tmp_path / "app", *flags, env=SYS_ENV)
    sh(tmp_path / "app", env=SYS_ENV)  # linked to /usr/lib/<multiarch>/libjoulestep-client.so.1
