"""A real PgBouncer (Debian's `pgbouncer`, 1.18) in transaction mode in front of a test server.

Used by the tests' `pgbouncer` fixtures and by `benchmarks/bench_worker.py --pgbouncer`. It runs
on its own 127.0.0.1 port, with a `*` fallback database (so every fresh test database is reachable
by name) and md5 auth against a userlist it writes. The server behind it is the test server: the
embedded one through its Unix socket, or a TCP one such as the machine's PostgreSQL 15.

PgBouncer refuses to run as root: as root it runs as the owner of the server's socket directory
(the embedded server's account), or as `nobody` for a TCP server.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import time
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict, make_conninfo

USER = "postgres"
PASSWORD = "pgbouncer-test-secret"


def binary() -> str | None:
    return shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.path.exists(p)), None)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PgBouncer:
    """One pgbouncer process; `url(dbname)` is a DSN through it."""

    def __init__(self, server_url: str, workdir: Path, *, pool_mode: str = "transaction",
                 pool_size: int = 10) -> None:
        found = binary()
        if found is None:
            raise RuntimeError("pgbouncer is not installed (apt-get install -y pgbouncer)")
        self.binary = found
        self.workdir = workdir
        self.pool_mode = pool_mode
        self.pool_size = pool_size
        server = conninfo_to_dict(server_url)
        self.server_host = str(server.get("host") or "127.0.0.1")
        self.server_port = int(server.get("port") or 5432)
        self.server_user = str(server.get("user") or USER)
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def _run_as(self) -> str | None:
        if os.geteuid() != 0:
            return None
        if self.server_host.startswith("/"):
            return pwd.getpwuid(os.stat(self.server_host).st_uid).pw_name
        return "nobody"

    @property
    def log(self) -> Path:
        return self.workdir / "pgbouncer.log"

    def start(self) -> PgBouncer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        (self.workdir / "userlist.txt").write_text(f'"{USER}" "{PASSWORD}"\n')
        (self.workdir / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={self.server_host} port={self.server_port} user={self.server_user}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = md5\n"
            f"auth_file = {self.workdir / 'userlist.txt'}\n"
            f"pool_mode = {self.pool_mode}\n"
            f"default_pool_size = {self.pool_size}\n"
            "max_client_conn = 1000\n"
            f"logfile = {self.log}\n"
            f"admin_users = {USER}\n"
        )
        command = [self.binary]
        user = self._run_as()
        if user is not None:
            account = pwd.getpwnam(user)
            os.chown(self.workdir, account.pw_uid, account.pw_gid)
            for path in self.workdir.iterdir():
                os.chown(path, account.pw_uid, account.pw_gid)
            command += ["-u", user]
        command.append(str(self.workdir / "pgbouncer.ini"))
        self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"pgbouncer exited at start: {err}{self.log_text()}")
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.port), timeout=0.5):
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"pgbouncer did not listen on port {self.port}: {self.log_text()}")

    def url(self, dbname: str) -> str:
        return make_conninfo(host="127.0.0.1", port=self.port, user=USER, password=PASSWORD,
                             dbname=dbname)

    def url_for(self, database_url: str) -> str:
        """The DSN through this pgbouncer for the database that `database_url` names."""
        return self.url(str(conninfo_to_dict(database_url).get("dbname") or "postgres"))

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()
        self.proc = None
