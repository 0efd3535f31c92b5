"""`make install` honours PREFIX and DESTDIR and installs working pkg-config files."""
import os
import subprocess

from pkgtest import repo_manpages


def test_install_into_destdir_and_build_against_it(repo, build_dir, tmp_path):
    dest = tmp_path / "root"
    subprocess.run(["make", "-s", "-C", str(repo), "install", f"DESTDIR={dest}", "PREFIX=/opt/js"],
                   check=True, capture_output=True, text=True, timeout=300)
    pre = dest / "opt/js"
    for f in ("bin/joulestep-run", "bin/joulestep-restore", "bin/joulestep-phase",
              "bin/joulestep-plugstack-check",
              "include/joulestep/energy.h", "include/joulestep/freq.h",
              "include/joulestep/client.h", "lib/libjoulestep-acct.a",
              "lib/libjoulestep-client.so.1", "lib/slurm/joulestep.so",
              "lib/pkgconfig/joulestep.pc", "lib/pkgconfig/joulestep-client.pc",
              "share/man/man8/joulestep-spank.8"):
        assert (pre / f).exists(), f
    # every manual page of docs/ but the CLI's, which its packages install (the
    # .deb's rules, the RPM spec, beside the Python package)
    for m in repo_manpages() - {"joulestep.1"}:
        assert (pre / f"share/man/man{m[-1]}/{m}").is_file(), m
    assert {"joulestep.1", "joulestep-phase.1", "joulestep-restore.8"} <= repo_manpages()
    assert "prefix=/opt/js" in (pre / "lib/pkgconfig/joulestep-client.pc").read_text()
    # a marker-using program builds with pkg-config against the staged tree
    env = dict(os.environ, PKG_CONFIG_PATH=str(pre / "lib/pkgconfig"),
               PKG_CONFIG_SYSROOT_DIR=str(dest))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "joulestep-client"], env=env,
                           check=True, capture_output=True, text=True).stdout.split()
    src = tmp_path / "app.c"
    src.write_text('#include <joulestep/client.h>\n'
                   'int main(void) { return js_phase_begin("write", 0) == JS_NOT_IN_STEP ? 0 : 1; }\n')
    exe = tmp_path / "app"
    subprocess.run(["cc", str(src), "-o", str(exe), *flags], check=True, timeout=120)
    run_env = {k: v for k, v in os.environ.items() if k != "JOULESTEP_SOCKET"}
    run_env["LD_LIBRARY_PATH"] = str(pre / "lib")
    assert subprocess.run([str(exe)], env=run_env, timeout=30).returncode == 0
