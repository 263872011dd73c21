"""A private PostgreSQL cluster for one fault test: its own data directory, port and socket
directory under /tmp, made with the machine's server binaries, restarted and torn down at will.

The shared test server cannot be restarted under other tests, so a test that restarts the server
gets its own. As root, the server runs as the `postgres` account (PostgreSQL refuses root).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from workhorse import Queue

DATABASE = "faults"


def server_bindir() -> Path | None:
    """The newest `/usr/lib/postgresql/N/bin` with initdb and pg_ctl, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                   key=lambda p: int(Path(p).parent.parent.name))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateCluster:
    """`start()`, `restart(mode)`, `stop()`, `destroy()`; `url()` is a DSN on its Unix socket."""

    def __init__(self, bindir: Path, *, listen: str = "", hba_network: str | None = None) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="wh-faults-pg-"))
        self.data = self.root / "data"
        self.sockets = self.root / "run"
        self.logfile = self.root / "server.log"
        self.port = _free_port()
        self.listen = listen
        self.hba_network = hba_network
        self._account = None
        if os.geteuid() == 0:
            self._account = pwd.getpwnam("postgres")
        self.sockets.mkdir()
        self.root.chmod(0o755)
        if self._account is not None:
            for path in (self.root, self.sockets):
                os.chown(path, self._account.pw_uid, self._account.pw_gid)

    # ---- commands --------------------------------------------------------------------------

    def _run(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        user: dict[str, Any] = {}
        if self._account is not None:
            user = {"user": self._account.pw_uid, "group": self._account.pw_gid,
                    "extra_groups": []}
        result = subprocess.run(
            [str(self.bindir / args[0]), *args[1:]], capture_output=True, text=True,
            timeout=timeout, cwd=self.root, stdin=subprocess.DEVNULL, **user,
        )
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} exited {result.returncode}: {result.stderr}\n"
                               f"{self.log_tail()}")
        return result

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.logfile.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def init(self) -> PrivateCluster:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
                  "--encoding=UTF8", "--no-sync", "--no-instructions")
        settings = {
            "port": str(self.port),
            "unix_socket_directories": f"'{self.sockets}'",
            "listen_addresses": f"'{self.listen}'",
            "max_connections": "200",
            "fsync": "off",  # no OS crash is simulated: the page cache keeps what was written
            "full_page_writes": "off",
            "shared_buffers": "32MB",
            "log_min_messages": "warning",
        }
        with (self.data / "postgresql.conf").open("a") as conf:
            for name, value in settings.items():
                conf.write(f"{name} = {value}\n")
        if self.hba_network:
            with (self.data / "pg_hba.conf").open("a") as hba:
                hba.write(f"host all all {self.hba_network} trust\n")
        return self

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.logfile), "-w", "-t", "60",
                  "start")

    def restart(self, mode: str) -> None:
        """`pg_ctl restart -m fast|immediate`: returns once the server accepts connections."""
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.logfile), "-m", mode, "-w",
                  "-t", "60", "restart")

    def stop(self, mode: str = "fast") -> None:
        with contextlib.suppress(RuntimeError):
            self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "30", "stop")

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    # ---- connections -----------------------------------------------------------------------

    def url(self, dbname: str = DATABASE, host: str | None = None) -> str:
        return make_conninfo(user="postgres", dbname=dbname, port=str(self.port),
                             host=host or str(self.sockets))

    def create_database(self) -> str:
        with psycopg.connect(self.url("postgres"), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{DATABASE}"')
        url = self.url()
        with psycopg.connect(url, autocommit=True) as conn:
            Queue(conn).install_schema()
        return url


def query(url: str, sql: str, *params: Any, timeout: float = 30.0) -> list[tuple[Any, ...]]:
    """Rows of one query on a new connection, retried while the server is restarting."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=3) as conn:
                return conn.execute(sql, params).fetchall()
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
