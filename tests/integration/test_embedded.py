"""The embedded PostgreSQL server, with real processes: start, reuse, races, kills, root."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from workhorse import _embedded_account, embedded
from workhorse.errors import EmbeddedServerError

IS_ROOT = os.geteuid() == 0

# They start embedded servers of their own, whatever server the pass tests: CI's first pass.
pytestmark = pytest.mark.slow

# A child that waits for a shared start time (so several of them race for real), starts the
# server through WORKHORSE_HOME, reports what it got, then optionally lingers to be killed.
CHILD = textwrap.dedent(
    """
    import json, sys, time
    from workhorse import embedded
    start_at = float(sys.argv[1])
    while time.time() < start_at:
        time.sleep(0.001)
    dsn = embedded.ensure_running()
    print(json.dumps({"dsn": dsn, "pid": embedded.status().pid}), flush=True)
    time.sleep(float(sys.argv[2]))
    """
)


def _child(home: Path, *, start_at: float = 0.0, linger: float = 0.0) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(start_at), str(linger)],
        env={**os.environ, "WORKHORSE_HOME": str(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _processes_mentioning(text: str) -> list[int]:
    """Pids whose command line mentions `text` (a test's unique home path)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            if text in cmdline.decode(errors="replace"):
                pids.append(int(entry.name))
    return pids


def _wait_dead(pid: int, timeout: float = 10.0) -> None:
    """Wait until `pid` has exited; a zombie counts, since init may be slow to reap it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except FileNotFoundError:
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} did not exit")


def _query(dsn: str, sql: str) -> object:
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        row = conn.execute(sql).fetchone()
        assert row is not None
        return row[0]


def _process_user(pid: int) -> str:
    return subprocess.run(
        ["ps", "-o", "user:32=", "-p", str(pid)], capture_output=True, text=True, check=True
    ).stdout.strip()


def _modes(paths: list[Path]) -> dict[Path, tuple[int, int, int]]:
    result = {}
    for path in paths:
        info = path.stat()
        result[path] = (stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid)
    return result


def _cleanup(home: Path) -> None:
    with contextlib.suppress(EmbeddedServerError):
        embedded.stop(home)
    for pid in _processes_mentioning(str(home)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        fallback = (home / "socket_dir").read_text().strip()
        if fallback.startswith("/tmp/workhorse-"):
            shutil.rmtree(fallback, ignore_errors=True)
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def wh_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    # Under /tmp, short: the socket path must fit in 107 bytes.
    home = Path(tempfile.mkdtemp(prefix="wh-", dir="/tmp"))
    monkeypatch.setenv("WORKHORSE_HOME", str(home))
    try:
        yield home
    finally:
        _cleanup(home)


def test_home_honours_environment(wh_home: Path) -> None:
    assert embedded.home() == wh_home


def test_cold_start_then_warm_reuse(wh_home: Path) -> None:
    assert not embedded.is_running(wh_home)

    started = time.perf_counter()
    dsn = embedded.ensure_running(wh_home)
    cold = time.perf_counter() - started

    started = time.perf_counter()
    again = embedded.ensure_running(wh_home)
    warm = time.perf_counter() - started

    assert again == dsn
    assert dsn == embedded.dsn(wh_home)
    assert embedded.is_running(wh_home)
    assert f"host={wh_home}/run" in dsn
    print(f"\nembedded postgres: cold start {cold * 1000:.0f} ms, warm {warm * 1000:.2f} ms")


def test_query_through_dsn(wh_home: Path) -> None:
    dsn = embedded.ensure_running(wh_home)
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "select current_user, current_database(), current_setting('max_connections'),"
            " current_setting('shared_buffers'), current_setting('listen_addresses'),"
            " current_setting('server_encoding')"
        ).fetchone()
    assert row == ("postgres", "postgres", "200", "128MB", "", "UTF8")


def test_status_reports_the_server(wh_home: Path) -> None:
    dsn = embedded.ensure_running(wh_home)
    current = embedded.status(wh_home)
    assert current.running
    assert current.home == wh_home
    assert current.dsn == dsn
    assert current.data_dir == wh_home / "data"
    assert current.version.startswith("18.")
    assert current.pid == int((wh_home / "data" / "postmaster.pid").read_text().split()[0])
    assert _query(dsn, "select pg_backend_pid() <> 0")


def test_stop_then_status(wh_home: Path) -> None:
    assert embedded.stop(wh_home) is False
    embedded.ensure_running(wh_home)
    pid = embedded.status(wh_home).pid
    assert pid is not None

    assert embedded.stop(wh_home) is True
    _wait_dead(pid)
    current = embedded.status(wh_home)
    assert not current.running
    assert current.pid is None
    assert not embedded.is_running(wh_home)
    assert embedded.stop(wh_home) is False

    # And it comes back, with its data.
    dsn = embedded.ensure_running(wh_home)
    assert _query(dsn, "select 42") == 42


def test_data_survives_restart(wh_home: Path) -> None:
    dsn = embedded.ensure_running(wh_home)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create table kept (v int)")
        conn.execute("insert into kept values (7)")
    embedded.stop(wh_home)
    assert _query(embedded.ensure_running(wh_home), "select v from kept") == 7


def test_concurrent_processes_get_one_server(wh_home: Path) -> None:
    start_at = time.time() + 1.0
    children = [_child(wh_home, start_at=start_at) for _ in range(4)]
    reports = []
    for child in children:
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
        reports.append(json.loads(out))

    assert len({report["dsn"] for report in reports}) == 1
    assert len({report["pid"] for report in reports}) == 1
    assert reports[0]["pid"] == embedded.status(wh_home).pid
    assert not list(wh_home.glob("data.tmp-*"))
    postmasters = [
        pid
        for pid in _processes_mentioning(f"-D {wh_home}/data")
        if Path(f"/proc/{pid}/comm").read_text().strip() == "postgres"
    ]
    assert postmasters == [reports[0]["pid"]]


def test_killed_starter_leaves_server_usable(wh_home: Path) -> None:
    child = _child(wh_home, linger=60)
    assert child.stdout is not None
    report = json.loads(child.stdout.readline())
    child.kill()
    child.wait()

    assert embedded.is_running(wh_home)
    assert embedded.ensure_running(wh_home) == report["dsn"]
    assert embedded.status(wh_home).pid == report["pid"]
    assert _query(report["dsn"], "select 1") == 1


@pytest.mark.parametrize("delay", [0.05, 0.4, 0.8])
def test_starter_killed_mid_cold_start(wh_home: Path, delay: float) -> None:
    # Killed while copying binaries, in initdb, or in pg_ctl start, depending on timing: whatever
    # it left behind (a held lock, a scratch directory, an orphaned initdb or postmaster), the
    # next start must work.
    child = _child(wh_home, linger=60)
    time.sleep(delay)
    child.kill()
    child.wait()
    dsn = embedded.ensure_running(wh_home)
    assert _query(dsn, "select 1") == 1
    assert embedded.ensure_running(wh_home) == dsn


def test_postmaster_killed_then_recovers(wh_home: Path) -> None:
    dsn = embedded.ensure_running(wh_home)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create table survivor (v int)")
        conn.execute("insert into survivor values (1)")
    pid = embedded.status(wh_home).pid
    assert pid is not None

    # A session is open while the postmaster dies, so its backend outlives it for a moment.
    with psycopg.connect(dsn) as idle:
        os.kill(pid, signal.SIGKILL)
        _wait_dead(pid)
        assert (wh_home / "data" / "postmaster.pid").exists()  # stale
        assert not embedded.is_running(wh_home)

        recovered = embedded.ensure_running(wh_home)
        with contextlib.suppress(psycopg.Error):
            idle.close()

    assert embedded.status(wh_home).pid not in (None, pid)
    assert _query(recovered, "select v from survivor") == 1


@pytest.mark.skipif(not IS_ROOT, reason="needs root")
def test_as_root_runs_unprivileged_and_touches_nothing_outside(wh_home: Path) -> None:
    package = Path(embedded._wheel_paths()[0])
    outside = [wh_home.parent, *package.parents, package, package / "pginstall" / "bin"]
    outside += [Path(p) for p in (package / "pginstall" / "bin").iterdir()][:5]
    before = _modes(outside)

    dsn = embedded.ensure_running(wh_home)
    pid = embedded.status(wh_home).pid
    assert pid is not None
    assert _process_user(pid) == embedded.SERVER_USER
    children = subprocess.run(
        ["ps", "-o", "user:32=", "--ppid", str(pid)], capture_output=True, text=True, check=True
    ).stdout.split()
    assert children
    assert set(children) == {embedded.SERVER_USER}
    assert _query(dsn, "select current_user") == "postgres"

    # It runs a copy in the home, made once.
    executable = Path(os.readlink(f"/proc/{pid}/exe"))
    assert executable.is_relative_to(wh_home / "runtime")
    marker = next((wh_home / "runtime").glob("*/VERSION"))
    copied_at = marker.stat().st_mtime_ns
    embedded.stop(wh_home)
    embedded.ensure_running(wh_home)
    assert marker.stat().st_mtime_ns == copied_at

    assert _modes(outside) == before


@pytest.mark.skipif(not IS_ROOT, reason="needs root")
def test_as_root_unreachable_home_is_a_clear_error(wh_home: Path) -> None:
    # mkdtemp made wh_home 0700, so the server user cannot get through it to a home inside it;
    # rather than chmod a directory outside its home, workhorse says so.
    before = _modes([wh_home])
    with pytest.raises(EmbeddedServerError, match="not searchable"):
        embedded.ensure_running(wh_home / "inner")
    assert _modes([wh_home]) == before


def _python_for(uid: int) -> tuple[str, dict[str, str]] | None:
    """A Python that `uid` can run with workhorse and its dependencies importable: ours, or else
    the system one of the same version pointed at our site-packages (a venv whose interpreter
    lives under /root is not reachable, and it is not ours to open up)."""
    site_packages = Path(psycopg.__file__).parents[1]
    repo = Path(embedded.__file__).parents[1]
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [
        (sys.executable, {}),
        (f"/usr/bin/{version}", {"PYTHONPATH": f"{repo}:{site_packages}"}),
    ]
    for executable, extra in candidates:
        try:
            probe = subprocess.run(
                [executable, "-c", "import workhorse.embedded"],
                env={**os.environ, **extra},
                cwd="/",
                user=uid,
                group=uid,
                extra_groups=[],
                capture_output=True,
                timeout=60,
            )
        except OSError:
            continue
        if probe.returncode == 0:
            return executable, extra
    return None


@pytest.mark.skipif(not IS_ROOT, reason="needs root to become another user")
def test_ordinary_user_runs_wheel_binaries_in_place() -> None:
    nobody = 65534
    python = _python_for(nobody)
    if python is None:
        pytest.skip("no Python with workhorse importable is reachable by user nobody")
    executable, extra_env = python
    home = Path(tempfile.mkdtemp(prefix="wh-", dir="/tmp"))
    os.chown(home, nobody, nobody)
    env = {**os.environ, **extra_env, "WORKHORSE_HOME": str(home), "HOME": str(home)}

    def as_nobody(script: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [executable, "-c", script],
            env=env,
            cwd=home,
            user=nobody,
            group=nobody,
            extra_groups=[],
            capture_output=True,
            text=True,
            timeout=60,
        )

    try:
        result = as_nobody(
            "import json; from workhorse import embedded;"
            "d = embedded.ensure_running(); s = embedded.status();"
            "print(json.dumps({'dsn': d, 'pid': s.pid}))"
        )
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        assert _process_user(report["pid"]) == "nobody"
        assert not (home / "runtime").exists()
        executable_path = Path(os.readlink(f"/proc/{report['pid']}/exe"))
        assert executable_path == embedded._wheel_paths()[0] / "pginstall" / "bin" / "postgres"
        assert _query(report["dsn"], "select 1") == 1

        stopped = as_nobody("from workhorse import embedded; print(embedded.stop())")
        assert stopped.stdout.strip() == "True", stopped.stderr
        _wait_dead(report["pid"])
    finally:
        as_nobody("from workhorse import embedded; embedded.stop()")
        _cleanup(home)


def test_long_home_falls_back_to_a_private_tmp_socket_dir(wh_home: Path) -> None:
    # mkdtemp made it 0700; the server user must be able to pass through it to the long home.
    wh_home.chmod(0o755)
    long_home = wh_home / ("x" * 60) / ("y" * 60)
    try:
        dsn = embedded.ensure_running(long_home)
        socket_dir = Path((long_home / "socket_dir").read_text().strip())
        assert socket_dir.parent == Path("/tmp")
        assert f"host={socket_dir}&" in dsn
        info = socket_dir.stat()
        assert stat.S_IMODE(info.st_mode) == 0o700
        expected_owner = _embedded_account.server_uid()
        assert info.st_uid == expected_owner
        assert _query(dsn, "select 1") == 1
        assert embedded.dsn(long_home) == dsn

        # If a /tmp cleaner removes it, the next start picks a new one.
        embedded.stop(long_home)
        shutil.rmtree(socket_dir)
        again = embedded.ensure_running(long_home)
        assert again != dsn
        assert _query(again, "select 1") == 1
    finally:
        _cleanup(long_home)
