"""A throw-away PostgreSQL server (Debian's) for the live Airflow: its own data directory, 127.0.0.1 and a
free port, trust authentication, stopped and removed afterwards. PostgreSQL refuses to run as root: as
root, its commands run as the ``postgres`` system user that Debian's package creates."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile

from tfdist.operators.launchers.processes import free_ports


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise RuntimeError(f"PostgreSQL's {name} is not installed: run 'make setup' (Debian package postgresql)")
    return found[-1]


class Postgres:
    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="tfdist-pg-")
        (self.port,) = free_ports(1)
        self.url = f"postgresql+psycopg2://airflow@127.0.0.1:{self.port}/airflow"
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self._as:
            user = pwd.getpwnam("postgres")
            os.chown(self.directory, user.pw_uid, user.pw_gid)

    def _run(self, *argv: str) -> None:
        done = subprocess.run([*self._as, *argv], capture_output=True, text=True, timeout=120)
        if done.returncode:
            raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")

    def start(self) -> Postgres:
        data = os.path.join(self.directory, "data")
        self._run(_bin("initdb"), "-D", data, "-U", "airflow", "--auth=trust", "-E", "UTF8", "--no-sync")
        self._run(
            _bin("pg_ctl"),
            "-D",
            data,
            "-l",
            os.path.join(self.directory, "server.log"),
            "-w",
            "-o",
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.directory} -c fsync=off",
            "start",
        )
        self._run(_bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "airflow", "airflow")
        return self

    def stop(self) -> None:
        try:
            self._run(_bin("pg_ctl"), "-D", os.path.join(self.directory, "data"), "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)
