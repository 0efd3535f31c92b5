"""bench/iolibs/build.sh (`make iolibs`): it builds only archives with their pinned
sha256, says in one line why a library is not built and never fails `make deps` for it,
and does not rebuild a library whose archives, patches and recipe are unchanged."""
from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD_SH = REPO / "bench" / "iolibs" / "build.sh"
SUMS = REPO / "bench" / "iolibs" / "SHA256SUMS"


def build(src, prefix, *libs):
    return subprocess.run(["sh", str(BUILD_SH), str(src), str(prefix), *libs],
                          capture_output=True, text=True, timeout=120)


def pinned() -> dict:
    return {ln.split()[1]: ln.split()[0] for ln in SUMS.read_text().splitlines()
            if ln and not ln.startswith("#")}


def test_every_archive_pinned_with_its_commit():
    rows = [ln.split() for ln in SUMS.read_text().splitlines() if ln and not ln.startswith("#")]
    assert len(rows) == 9
    for sha, name, url, commit in rows:
        assert len(sha) == 64 and int(sha, 16) >= 0, name
        assert name.endswith(".tar.gz") and url.startswith("https://github.com/"), name
        assert len(commit) == 40 and int(commit, 16) >= 0, name


def test_an_archive_with_other_bytes_is_refused(tmp_path):
    src, prefix = tmp_path / "src", tmp_path / "prefix"
    src.mkdir()
    bad = b"not the pinned genericio\n"
    (src / "genericio.tar.gz").write_bytes(bad)
    res = build(src, prefix, "genericio")
    assert res.returncode == 0, res.stderr
    got = hashlib.sha256(bad).hexdigest()
    assert res.stdout.strip().splitlines() == [
        f"iolibs: genericio not built ({src}/genericio.tar.gz: sha256 {got}, pinned "
        f"{pinned()['genericio.tar.gz']}); experiments use the imitation"], res.stdout
    assert not (prefix / "genericio").exists()


def test_a_missing_archive_is_said_in_one_line(tmp_path):
    res = build(tmp_path, tmp_path / "prefix", "veloc")
    assert res.returncode == 0
    assert res.stdout.strip().splitlines() == [
        f"iolibs: veloc not built ({tmp_path}/KVTree-1.4.0.tar.gz missing); "
        "experiments use the imitation"], res.stdout


def test_an_unchanged_library_is_not_rebuilt(tmp_path):
    """The stamp of `make iolibs`'s own GenericIO build (its key: the pinned sums, the
    patches, the recipe) keeps a copy of it as it is, from an empty source directory."""
    import iolibs  # tests/cluster/iolibs.py: skips where the sources are not at hand
    built = iolibs.need("genericio")
    if not (built / ".stamp").is_file():
        pytest.fail("GenericIO is not built: run make deps (make iolibs)")
    prefix = tmp_path / "prefix"
    shutil.copytree(built, prefix / "genericio")
    before = {p: p.stat().st_mtime_ns for p in (prefix / "genericio").rglob("*")}
    res = build(tmp_path / "nosrc", prefix, "genericio")
    assert res.returncode == 0
    assert res.stdout.strip() == f"iolibs: genericio up to date in {prefix.resolve()}/genericio"
    assert {p: p.stat().st_mtime_ns for p in (prefix / "genericio").rglob("*")} == before
    # another recipe (here: a changed stamp) is a rebuild, refused without the archive
    (prefix / "genericio" / ".stamp").write_text("0" * 32 + "\n")
    res = build(tmp_path / "nosrc", prefix, "genericio")
    assert "genericio not built" in res.stdout and "missing" in res.stdout, res.stdout
    assert os.path.isdir(prefix / "genericio")  # a failed check leaves the old install
