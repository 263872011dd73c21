"""The second PostgreSQL server of bench_databases.py: a private cluster in a temporary
directory, made with this machine's server binaries (the newest /usr/lib/postgresql/N/bin),
given the first server's settings that bear on a drain's cost, listening on 127.0.0.1 (the first
server's path too: TCP over loopback), and removed at the end.

Copied, not imported, from tests/faults/_cluster.py's PrivateCluster (the benchmarks do not
import the tests): as root the server runs as the `postgres` account, since PostgreSQL refuses
root.
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
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
from psycopg.conninfo import conninfo_to_dict

# The first server's settings given to the second: durability and the WAL (what a commit costs),
# memory and connections, autovacuum, checkpoints, JIT. Everything else is initdb's default.
COPIED = (
    "fsync", "synchronous_commit", "full_page_writes", "wal_level", "wal_sync_method",
    "wal_buffers", "wal_compression", "commit_delay", "commit_siblings", "shared_buffers",
    "work_mem", "max_connections", "autovacuum", "max_wal_size", "min_wal_size",
    "checkpoint_timeout", "checkpoint_completion_target", "jit", "huge_pages",
    "track_io_timing", "track_wal_io_timing", "dynamic_shared_memory_type",
)


def settings_of(url: str, names: tuple[str, ...] = COPIED) -> dict[str, str]:
    """`SHOW name` of each setting the server has, as it would be written in postgresql.conf."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT name, current_setting(name) FROM pg_settings WHERE name = ANY(%s)",
            (list(names),),
        ).fetchall()
    found = {str(name): str(value) for name, value in rows}
    return {name: found[name] for name in names if name in found}


def server_bindir() -> Path:
    """The newest `/usr/lib/postgresql/N/bin` with initdb and pg_ctl."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                   key=lambda p: int(Path(p).parent.parent.name))
    if not found:
        raise SystemExit("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")
    return Path(found[-1]).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def as_uri(conninfo: str) -> str:
    """A postgresql:// URI for a libpq conninfo (key=value or URI): WORKHORSE_DATABASES wants
    `name=url` entries, and a URI is the unambiguous spelling. Host, port, user, password and
    dbname only; other parameters become query parameters."""
    params = {k: str(v) for k, v in conninfo_to_dict(conninfo).items() if v is not None}
    user = quote(params.pop("user", ""), safe="")
    password = params.pop("password", None)
    host = params.pop("host", "")
    port = params.pop("port", "")
    dbname = quote(params.pop("dbname", ""), safe="")
    auth = f"{user}{':' + quote(password, safe='') if password else ''}@" if user else ""
    if host.startswith("/"):  # a socket directory goes in the query
        params["host"] = host
        host = ""
    query = "&".join(f"{k}={quote(v, safe='/')}" for k, v in params.items())
    return (f"postgresql://{auth}{host}{':' + port if port else ''}/{dbname}"
            f"{'?' + query if query else ''}")


class SecondServer:
    """`with SecondServer(settings) as server:` initdb, start; `server.url(dbname)`; stopped
    and its directory removed on the way out."""

    def __init__(self, settings: dict[str, str]) -> None:
        self.bindir = server_bindir()
        self.settings = settings
        self.root = Path(tempfile.mkdtemp(prefix="wh-bench-databases-pg-"))
        self.data = self.root / "data"
        self.sockets = self.root / "run"
        self.logfile = self.root / "server.log"
        self.port = free_port()
        self._account = pwd.getpwnam("postgres") if os.geteuid() == 0 else None
        self.sockets.mkdir()
        self.root.chmod(0o755)
        if self._account is not None:
            for path in (self.root, self.sockets):
                os.chown(path, self._account.pw_uid, self._account.pw_gid)

    def __enter__(self) -> SecondServer:
        try:
            self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
                      "--encoding=UTF8", "--no-sync", "--no-instructions")
            conf = {
                **self.settings,
                "port": str(self.port),
                "listen_addresses": "127.0.0.1",
                "unix_socket_directories": str(self.sockets),
                "log_min_messages": "warning",
            }
            with (self.data / "postgresql.conf").open("a") as out:
                out.write("\n# bench_databases.py: the first server's settings\n")
                for name, value in conf.items():
                    escaped = value.replace("'", "''")
                    out.write(f"{name} = '{escaped}'\n")
            self._run("pg_ctl", "-D", str(self.data), "-l", str(self.logfile), "-w", "-t", "60",
                      "start")
        except BaseException:
            self.destroy()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def _run(self, *args: str, timeout: float = 120.0) -> None:
        user: dict[str, Any] = {}
        if self._account is not None:
            user = {"user": self._account.pw_uid, "group": self._account.pw_gid,
                    "extra_groups": []}
        result = subprocess.run(
            [str(self.bindir / args[0]), *args[1:]], capture_output=True, text=True,
            timeout=timeout, cwd=self.root, stdin=subprocess.DEVNULL, check=False, **user,
        )
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} exited {result.returncode}: {result.stderr}\n"
                               f"{self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.logfile.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def url(self, dbname: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{quote(dbname, safe='')}"

    def destroy(self) -> None:
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "30", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
