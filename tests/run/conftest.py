"""tests/run: joulestep-run and joulestep-restore write their clock journal as
root, so its state directory must pass the journal's walk (docs/design.md,
"Directories root writes into": every component root-owned, not group- or
world-writable). pytest's tmp_path is under /tmp (world-writable): here it is
under /run/js-pytest instead (root-owned 0755), and removed after the test."""
import os
import pathlib
import shutil
import tempfile

import pytest

BASE = pathlib.Path("/run/js-pytest")


@pytest.fixture
def tmp_path(request, tmp_path_factory):
    if os.geteuid() != 0:  # a user's own files: pytest's usual directory
        yield tmp_path_factory.mktemp("run")
        return
    BASE.mkdir(mode=0o755, exist_ok=True)
    st = os.lstat(BASE)
    if not BASE.is_dir() or BASE.is_symlink() or st.st_uid != 0:
        raise RuntimeError(f"{BASE} must be a root-owned directory")
    os.chmod(BASE, 0o755)
    d = pathlib.Path(tempfile.mkdtemp(prefix=request.node.name[:40] + "-", dir=BASE))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
