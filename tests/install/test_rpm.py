"""The RPM spec (packaging/rpm/joulestep.spec), with Debian's rpm: `make rpm-check`
parses it (rpmspec -P) and builds the source RPM (rpmbuild -bs). A binary build
needs a RHEL-family host, so its %files lists are checked here against what
`make install` really installs with RHEL's paths, and the version against the
other places that carry it.
"""
from __future__ import annotations

import fnmatch
import pathlib
import re
import subprocess

import pytest

from pkgtest import REPO, hooks_dir_for, repo_docs, repo_hooks, repo_manpages

SPEC = REPO / "packaging" / "rpm" / "joulestep.spec"
RHEL = {"_prefix": "/usr", "_libdir": "/usr/lib64", "_bindir": "/usr/bin",
        "_includedir": "/usr/include", "_mandir": "/usr/share/man",
        "_docdir": "/usr/share/doc", "_unitdir": "/usr/lib/systemd/system",
        "python3_sitelib": "/usr/lib/python3.9/site-packages",
        "_sysusersdir": "/usr/lib/sysusers.d"}
PLUGIN_DIR = "/usr/lib64/slurm"


def sh(*argv, timeout=300, **kw) -> subprocess.CompletedProcess:
    res = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                         timeout=timeout, stdin=subprocess.DEVNULL, **kw)
    assert res.returncode == 0, f"{argv}: {res.returncode}\n{res.stdout}\n{res.stderr}"
    return res


def parsed(*args) -> str:
    defs = [a for k, v in RHEL.items() for a in ("--define", f"{k} {v}")]
    return sh("rpmspec", "-P", *defs, *args, SPEC).stdout


def files_sections(text: str) -> dict:
    """package suffix ('' = main) -> (paths, %doc entries) of its %files section."""
    out, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"%files(?:\s+(?!-)(\S+))?", line)
        if m:
            cur = out.setdefault(m.group(1) or "", ([], []))
            continue
        if re.match(r"%(changelog|package|description|post|preun|postun|pre)\b", line):
            cur = None
        if cur is None or not line.strip() or line.startswith("#"):
            continue
        if line.startswith("%doc"):
            cur[1].extend(line.split()[1:])
        elif not line.startswith("%"):
            cur[0].append(line.strip())
    return out


def owner(path: str, sections: dict) -> list:
    """The %files entries that cover an installed path (a glob, or a directory/)."""
    return [(pkg, e) for pkg, (paths, _) in sections.items() for e in paths
            if fnmatch.fnmatchcase(path, e) or (e.endswith("/") and path.startswith(e))]


def test_rpm_check_builds_the_source_rpm(repo, version):
    sh("make", "-s", "-C", repo, "rpm-check", timeout=600)
    srpm = repo / "build" / "rpm" / "SRPMS" / f"joulestep-{version}-1.src.rpm"
    assert srpm.exists()
    assert sh("rpm", "-qp", "--qf", "%{NAME} %{VERSION}", srpm).stdout == f"joulestep {version}"
    assert set(sh("rpm", "-qpl", srpm).stdout.split()) == {"joulestep.spec", f"joulestep-{version}.tar.gz"}
    # the tarball holds what %prep..%install and %doc use
    tar = repo / "build" / "rpm" / "SOURCES" / f"joulestep-{version}.tar.gz"
    names = set(sh("tar", "-tzf", tar).stdout.split())
    for f in ("Makefile", "packaging/fixpaths.sh", "cli/pyproject.toml", "cli/src/joulestep/sql"):
        assert f"joulestep-{version}/{f}" in names, f


def test_files_lists_match_make_install(repo, build_dir, tmp_path):
    text = parsed("--define", "slurm_version 23.11")
    sec = files_sections(text)
    assert set(sec) == {"", "libs", "devel", "cli", "marker"}
    # the Python markers: the CLI's two modules, in joulestep-marker only
    marker = sec.pop("marker")[0]
    assert sorted(pathlib.PurePath(e).name for e in marker) == [
        "__init__.*", "__init__.py", "phase.*", "phase.py"], marker
    assert re.search(r"^Requires:\s+joulestep-marker = ", text, re.M)
    # everything `make install` installs with RHEL's paths is in exactly one package
    dest = tmp_path / "root"
    sh("make", "-s", "-C", repo, "install", f"DESTDIR={dest}", "PREFIX=/usr", "LIBDIR=/usr/lib64",
       f"SLURM_PLUGIN_DIR={PLUGIN_DIR}", "UNIT_BIN=", "BENCH_BIN=", "MPI_BENCH=", "HOOK_TESTS=")
    installed = {"/" + str(p.relative_to(dest)) for p in dest.rglob("*") if not p.is_dir()}
    assert f"{PLUGIN_DIR}/joulestep.so" in installed
    for f in installed:
        assert len(owner(f, sec)) == 1, (f, owner(f, sec))
    assert owner(f"{PLUGIN_DIR}/joulestep.so", sec)[0][0] == ""
    assert owner("/usr/lib64/libjoulestep-client.so.1", sec)[0][0] == "libs"
    # the --energy-hooks libraries, in the plugin's package, where it looks by default
    hooks = {f"{hooks_dir_for(PLUGIN_DIR + '/joulestep.so')}/{n}" for n in repo_hooks()}
    assert hooks <= installed and {owner(f, sec)[0][0] for f in hooks} == {""}
    # ... and every entry names something: make install's files, or the CLI's own
    units = {f"{RHEL['_unitdir']}/{u.name}" for u in (REPO / "etc" / "systemd").iterdir()}
    cli_own = units | {"/usr/bin/joulestep", "/usr/bin/joulestep-mail",
                       "/usr/lib/sysusers.d/joulestep.conf",
                       "/usr/share/man/man1/joulestep.1"}
    for pkg, (paths, _) in sec.items():
        for e in paths:
            hits = [f for f in installed | cli_own if owner(f, {pkg: ([e], [])})]
            assert hits, (pkg, e)
    assert all(owner(f, {"cli": sec["cli"]}) for f in cli_own), cli_own
    # guides and man pages: all of them, from files that exist
    docs = [d for _, (_, ds) in sec.items() for d in ds]
    assert repo_docs() <= {pathlib.PurePath(d).name for d in docs}
    for d in docs:
        assert (REPO / d).exists() or d == "plugstack-joulestep.conf", d
    for m in repo_manpages():
        assert owner(f"/usr/share/man/man{m[-1]}/{m}.gz", sec), m


def test_slurm_release_and_without_cli():
    text = parsed("--define", "slurm_version 23.11")
    reqs = re.findall(r"^Requires:\s+slurm\s+(\S+)\s+(\S+)$", text, re.M)
    assert sorted(reqs) == [("<", "23.11.99"), (">=", "23.11")]
    # the plugstack example names the RHEL plugin path; the plugin dir is Slurm's
    assert f"fixpaths.sh {PLUGIN_DIR} " in text
    # the MPI-IO hook is compiled against Open MPI's mpi.h (openmpi-devel's directory),
    # whatever mpicc is on the build host's PATH
    assert re.search(r"^BuildRequires:\s+openmpi-devel$", text, re.M)
    assert re.search(r"^\S*make .*MPI_CFLAGS=-I/usr/include/openmpi-\S+ .*\ball$", text, re.M), text
    # --without cli: no Python at all (sites whose distribution lacks the CLI's
    # libraries use `pip install ./cli` instead)
    bare = parsed("--without", "cli", "--define", "slurm_version 23.11")
    assert set(files_sections(bare)) == {"", "libs", "devel"}
    deps = [l for l in bare.splitlines() if l.startswith(("BuildRequires", "Requires"))]
    assert deps and not [l for l in deps if "python" in l]
    assert "%pyproject" not in bare
    # the CLI is pure Python: its subpackage is noarch (issue 21)
    assert re.search(r"%package cli\n(?:.*\n)*?BuildArch:\s+noarch\n(?:.*\n)*?%description cli",
                     text), text


def test_one_version_everywhere(version):
    assert re.search(rf"^Version:\s+{re.escape(version)}$", SPEC.read_text(), re.M)
    assert re.search(rf"- {re.escape(version)}-1$", SPEC.read_text(), re.M)  # %changelog
    chlog = sh("dpkg-parsechangelog", "-l", REPO / "debian" / "changelog", "-S", "Version").stdout.strip()
    assert chlog == version
    for pc in (REPO / "etc" / "pkgconfig").glob("*.pc.in"):
        assert re.search(rf"^Version: {re.escape(version)}$", pc.read_text(), re.M), pc.name
    init = (REPO / "cli" / "src" / "joulestep" / "__init__.py").read_text()
    assert f'__version__ = "{version}"' in init
    # the plugin writes it into every record (provenance.plugin_version)
    hdr = (REPO / "spank" / "js_step.h").read_text()
    assert re.search(rf'^#define JS_PLUGIN_VERSION "{re.escape(version)}"$', hdr, re.M)
    for man in repo_manpages():
        head = (REPO / "docs" / man).read_text().splitlines()[0]
        assert f'"joulestep {version}"' in head, man
    # a release with a number of its own, and its entry in CHANGELOG.md
    assert version != "0.1.0"       # every build before 0.2.0 said 0.1.0
    changes = (REPO / "CHANGELOG.md").read_text()
    assert re.findall(r"^## (\S+)", changes, re.M)[0] == version
