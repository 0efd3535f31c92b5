"""`make install` puts the --energy-hooks libraries where the plugin looks for them by default
(<directory of joulestep.so>/../joulestep, docs/admin-guide.md "Phase hooks"), root-owned
and not group/world-writable, and they find the installed client library by themselves."""
import os
import stat
import subprocess


def test_hooks_installed_beside_the_plugin_and_client(repo, build_dir, tmp_path):
    dest = tmp_path / "root"
    subprocess.run(["make", "-s", "-C", str(repo), "install", f"DESTDIR={dest}", "PREFIX=/opt/js"],
                   check=True, capture_output=True, text=True, timeout=300)
    pre = dest / "opt/js"
    plugin = pre / "lib/slurm/joulestep.so"
    default_dir = plugin.parent.parent / "joulestep"
    for name in ("libjoulestep-mpiio.so", "libjoulestep-veloc.so"):
        lib = default_dir / name
        st = lib.stat()
        assert stat.S_ISREG(st.st_mode) and not st.st_mode & 0o022, oct(st.st_mode)
        if os.geteuid() == 0:
            assert st.st_uid == 0
        ldd = subprocess.run(["ldd", str(lib)], capture_output=True, text=True, check=True).stdout
        client = [l.split("=>")[1].split("(")[0].strip() for l in ldd.splitlines()
                  if "libjoulestep-client.so.1 =>" in l]
        assert client and os.path.realpath(client[0]) == os.path.realpath(
            pre / "lib/libjoulestep-client.so.1"), ldd
        # no dependency on the libraries they wrap: a program without MPI/VELOC loads nothing more
        assert "libmpi" not in ldd and "veloc" not in ldd, ldd
