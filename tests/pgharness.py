"""A private PostgreSQL 15 cluster for tests and benchmarks.

initdb in a temporary directory, one postgres server on a private port
(harness._free_ports: random, outside the ephemeral range) listening only
on a unix socket in that directory, torn down (and the directory removed)
by stop().  Never the system cluster.  PostgreSQL refuses to run as root,
so as root the cluster belongs to the unprivileged user ``postgres`` (from
Debian's postgresql package; created with harness.ensure_user if missing);
otherwise to the calling user.

The cluster is made for tests, not for keeping data: fsync off, C locale
(byte-order text sorting, as SQLite's: joulestep's outputs are then the same
on both engines; docs/admin-guide.md says to create site databases so).

    with PgCluster() as pg:
        url = pg.create_db("t1")      # postgresql://... of a new database
"""
from __future__ import annotations

import itertools
import os
import pathlib
import pwd
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "cluster"))
import harness  # noqa: E402

PG_BIN = pathlib.Path(os.environ.get("JOULESTEP_PG_BIN", "/usr/lib/postgresql/15/bin"))
SUPERUSER = "js"


class PgError(RuntimeError):
    pass


def available() -> bool:
    return (PG_BIN / "initdb").exists() and (PG_BIN / "postgres").exists()


class PgCluster:
    def __init__(self, start_attempts: int = 4):
        self.attempts = start_attempts
        self.dir = None
        self.proc = None
        self.port = None
        self._n = itertools.count()

    # -------------------------------------------------------------- owner
    def _owner(self):
        if os.geteuid() != 0:
            return None
        return harness.ensure_user("postgres")

    def _as_owner(self, pw):
        if pw is None:
            return None

        def demote():
            os.setgid(pw.pw_gid)
            os.setgroups([])
            os.setuid(pw.pw_uid)
        return demote

    # -------------------------------------------------------------- life
    def start(self) -> "PgCluster":
        if not available():
            raise PgError(f"PostgreSQL not found in {PG_BIN} (make deps installs it)")
        pw = self._owner()
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="js-pg-", dir="/tmp"))
        if pw is not None:
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        os.chmod(self.dir, 0o700)
        data = self.dir / "data"
        env = dict(os.environ, LC_ALL="C", LANG="C")
        r = subprocess.run(
            [str(PG_BIN / "initdb"), "-D", str(data), "-U", SUPERUSER,
             "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"],
            preexec_fn=self._as_owner(pw), env=env, capture_output=True, text=True)
        if r.returncode:
            raise PgError(f"initdb failed: {r.stderr.strip()}")
        last = ""
        for _ in range(self.attempts):
            self.port = harness._free_ports(1)[0]
            log = open(self.dir / "server.log", "ab")
            self.proc = subprocess.Popen(
                [str(PG_BIN / "postgres"), "-D", str(data), "-p", str(self.port),
                 "-k", str(self.dir), "-c", "listen_addresses=", "-c", "fsync=off",
                 "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                 "-c", "max_connections=60", "-c", "shared_buffers=64MB"],
                preexec_fn=self._as_owner(pw), env=env, stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, close_fds=True)
            log.close()
            if self._wait_ready(60):
                return self
            last = (self.dir / "server.log").read_text(errors="replace")[-2000:]
            self._kill()
        raise PgError(f"postgres did not start: {last}")

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            r = subprocess.run([str(PG_BIN / "pg_isready"), "-h", str(self.dir),
                                "-p", str(self.port), "-U", SUPERUSER, "-d", "postgres"],
                               capture_output=True)
            if r.returncode == 0:
                return True
            time.sleep(0.1)
        return False

    def _kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()     # "smart" shutdown would wait for clients
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        self._kill()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -------------------------------------------------------------- use
    def url(self, dbname: str = "postgres", user: str = SUPERUSER) -> str:
        return f"postgresql://{user}@/{dbname}?host={self.dir}&port={self.port}"

    def sql(self, statement: str, dbname: str = "postgres") -> None:
        import psycopg
        with psycopg.connect(self.url(dbname), autocommit=True) as c:
            c.execute(statement)

    def create_db(self, prefix: str = "t") -> str:
        """A new empty database; returns its URL."""
        name = f"{prefix}{os.getpid()}_{next(self._n)}"
        self.sql(f'CREATE DATABASE "{name}" TEMPLATE template0')
        return self.url(name)

    def drop_db(self, url: str) -> None:
        name = url.split("/")[3].split("?")[0]
        self.sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _main():  # manual use: python tests/pgharness.py -> a shell's URL
    with PgCluster() as pg:
        print(pg.create_db("manual"), flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    _main()
