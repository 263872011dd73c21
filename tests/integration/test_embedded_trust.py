"""The embedded server refuses a home that another user could write or swap (issue 24, item 1).

Real processes throughout: the other user (`cloudsdk`, else `nobody`) prepares the trap with
`runuser`, and the server is started through the real `workhorse` CLI.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from workhorse import _embedded_account, embedded
from workhorse.errors import EmbeddedServerError


def _other_user() -> pwd.struct_passwd | None:
    for name in ("cloudsdk",):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    return None


OTHER = _other_user()

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0 or OTHER is None,
                       reason="needs root and a second Unix user (cloudsdk) to act as two users"),
    # They start embedded servers of their own, whatever server the pass tests: CI's first pass.
    pytest.mark.slow,
]


def _as_other(*command: str) -> None:
    """Run a command as the other user, for real (runuser drops every root privilege)."""
    assert OTHER is not None
    subprocess.run(["runuser", "-u", OTHER.pw_name, "--", *command], check=True, timeout=30)


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workhorse", *args],
        env={**os.environ, "WORKHORSE_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _postgres_pids(text: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if text in cmdline and (entry / "comm").read_text().strip() == "postgres":
                pids.append(int(entry.name))
    return pids


def _assert_refused(result: subprocess.CompletedProcess[str], home: Path, what: str) -> None:
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert lines[0].startswith("error: refusing to use"), lines[0]
    assert what in lines[0], lines[0]
    assert not _postgres_pids(str(home)), "a server was started"
    assert not (home / "data").exists()


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A root-owned, world-searchable directory under /tmp to build homes in."""
    base = Path(tempfile.mkdtemp(prefix="wh-trust-", dir="/tmp"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        for pid in _postgres_pids(str(base)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def other_tmp() -> Iterator[Path]:
    """A path in /tmp where the other user will create a directory of its own."""
    path = Path(tempfile.mktemp(prefix="wh-other-", dir="/tmp"))
    try:
        yield path
    finally:
        for pid in _postgres_pids(str(path)):  # a server the code under test should not have run
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if path.is_symlink():
            path.unlink()
        shutil.rmtree(path, ignore_errors=True)


def test_world_writable_home_of_another_user_is_refused(other_tmp: Path) -> None:
    # The attack: another local user pre-creates the home world-writable, so that the socket
    # (trust auth, superuser) would appear in a directory they control.
    _as_other("mkdir", "-m", "0777", str(other_tmp))
    _as_other("chmod", "0777", str(other_tmp))

    result = _cli(other_tmp, "db", "start")

    _assert_refused(result, other_tmp, f"owned by {OTHER.pw_name}" if OTHER else "")
    assert not (other_tmp / "run").exists()
    assert os.lstat(other_tmp).st_uid == OTHER.pw_uid if OTHER else True


def test_world_writable_home_is_refused_even_when_root_owns_it(scratch: Path) -> None:
    home = scratch / "home"
    home.mkdir()
    home.chmod(0o777)
    _assert_refused(_cli(home, "db", "start"), home, "writable by every user")


def test_group_writable_home_is_refused_unless_the_group_is_private(scratch: Path) -> None:
    assert OTHER is not None
    home = scratch / "home"
    home.mkdir()
    os.chown(home, 0, OTHER.pw_gid)  # root's directory, writable by another user's group
    home.chmod(0o775)
    _assert_refused(_cli(home, "db", "start"), home, "writable by the group")


def test_run_dir_planted_by_another_user_is_refused(scratch: Path, other_tmp: Path) -> None:
    assert OTHER is not None
    home = scratch / "home"
    home.mkdir(mode=0o755)
    _as_other("mkdir", "-m", "0777", str(other_tmp))
    _as_other("chmod", "0777", str(other_tmp))
    # The other user cannot write the home, so root put the directory there (say an earlier
    # version, or a script); it is still the other user's, and open to all.
    os.rename(other_tmp, home / "run")

    result = _cli(home, "db", "start")

    _assert_refused(result, home, "run")
    assert os.lstat(home / "run").st_uid == OTHER.pw_uid


def test_symlinked_run_dir_is_refused_and_its_target_keeps_its_owner(
    scratch: Path, other_tmp: Path
) -> None:
    # As root, the chown of run/ must never follow a link: the target (here a directory of the
    # other user) would be handed to the server user.
    assert OTHER is not None
    home = scratch / "home"
    home.mkdir(mode=0o755)
    target = other_tmp
    _as_other("mkdir", "-m", "0700", str(target))
    (home / "run").symlink_to(target)

    result = _cli(home, "db", "start")

    _assert_refused(result, home, "symbolic link")
    info = os.lstat(target)
    assert (info.st_uid, info.st_gid) == (OTHER.pw_uid, OTHER.pw_gid)


def test_symlinked_home_is_refused(scratch: Path) -> None:
    real = scratch / "real"
    real.mkdir(mode=0o755)
    link = scratch / "link"
    link.symlink_to(real)
    _assert_refused(_cli(link, "db", "start"), link, "symbolic link")
    assert not (real / "run").exists()


def test_chown_helper_never_follows_a_link(scratch: Path, other_tmp: Path) -> None:
    # The same through the module: a link swapped in for run/ keeps its target untouched.
    assert OTHER is not None
    target = other_tmp
    _as_other("mkdir", "-m", "0700", str(target))
    link = scratch / "run"
    link.symlink_to(target)
    account = pwd.getpwnam("root")
    with pytest.raises(EmbeddedServerError, match="symbolic link"):
        _embedded_account.make_owned_dir(link, account, 0o700)
    assert os.lstat(target).st_uid == OTHER.pw_uid


# --------------------------------------------------------------------------------------------
# As the other user itself


def _python_for_other() -> tuple[str, dict[str, str]]:
    """A Python the other user can run with workhorse importable (our venv's interpreter may
    live under /root; the system one of the same version, pointed at our packages, is not)."""
    assert OTHER is not None
    site_packages = Path(psycopg.__file__).parents[1]
    repo = Path(embedded.__file__).parents[1]
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for executable, extra in (
        (sys.executable, {}),
        (f"/usr/bin/{version}", {"PYTHONPATH": f"{repo}:{site_packages}"}),
    ):
        with contextlib.suppress(OSError):
            probe = subprocess.run(
                [executable, "-c", "import workhorse.cli"],
                env={**os.environ, **extra},
                cwd="/",
                user=OTHER.pw_uid,
                group=OTHER.pw_gid,
                extra_groups=[],
                capture_output=True,
                timeout=60,
            )
            if probe.returncode == 0:
                return executable, extra
    pytest.skip("no Python with workhorse importable is reachable by the other user")


def _cli_as_other(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert OTHER is not None
    executable, extra = _python_for_other()
    return subprocess.run(
        [executable, "-m", "workhorse", *args],
        env={**os.environ, **extra, "WORKHORSE_HOME": str(home), "HOME": "/tmp"},
        cwd="/",
        user=OTHER.pw_uid,
        group=OTHER.pw_gid,
        extra_groups=[],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_another_users_home_is_one_line_not_a_traceback(scratch: Path) -> None:
    # root's private home: the other user gets a clear line, not a PermissionError traceback.
    home = scratch / "roots"
    home.mkdir(mode=0o700)
    result = _cli_as_other(home / "inner", "db", "start")
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    assert str(home) in lines[0]


def test_a_home_planted_by_a_third_user_is_refused_for_an_ordinary_user(
    other_tmp: Path,
) -> None:
    # The ordinary user (not root) meets a world-writable home that `nobody` pre-created.
    nobody = pwd.getpwnam("nobody")
    subprocess.run(
        ["runuser", "-u", "nobody", "--", "mkdir", "-m", "0777", str(other_tmp)], check=True
    )
    subprocess.run(["runuser", "-u", "nobody", "--", "chmod", "0777", str(other_tmp)], check=True)
    result = _cli_as_other(other_tmp, "db", "start")
    _assert_refused(result, other_tmp, "owned by nobody")
    assert os.lstat(other_tmp).st_uid == nobody.pw_uid


def test_own_home_with_private_group_write_is_accepted(other_tmp: Path) -> None:
    # Group-writable is fine when the group is the owner's own (a umask 002 with user private
    # groups); and the socket admits only the server's user.
    assert OTHER is not None
    if not _embedded_account.private_group(OTHER.pw_uid, OTHER.pw_gid):
        pytest.skip(f"{OTHER.pw_name}'s group is not a private group here")
    _as_other("mkdir", "-m", "0775", str(other_tmp))
    _as_other("chmod", "0775", str(other_tmp))
    try:
        result = _cli_as_other(other_tmp, "db", "start")
        assert result.returncode == 0, result.stderr
        socket = other_tmp / "run" / ".s.PGSQL.5432"
        assert socket.exists()
        assert (os.stat(socket).st_mode & 0o777) == 0o700
    finally:
        _cli_as_other(other_tmp, "db", "stop")


def test_a_symlink_above_the_home_owned_by_another_user_is_refused(
    scratch: Path, other_tmp: Path
) -> None:
    # The other user's link in /tmp points at root's directory today, and anywhere tomorrow.
    assert OTHER is not None
    target = scratch / "target"
    target.mkdir(mode=0o755)
    _as_other("ln", "-s", str(target), str(other_tmp))
    home = other_tmp / "home"
    result = _cli(home, "db", "start")
    _assert_refused(result, target / "home", "symbolic link owned by")
    assert not (target / "home").exists()


def test_a_writable_directory_above_the_home_is_refused(scratch: Path) -> None:
    # Not sticky and open to all: anyone could rename the home away and plant their own.
    open_dir = scratch / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    home = open_dir / "home"
    _assert_refused(_cli(home, "db", "start"), home, "writable by other users")
    assert not home.exists()
