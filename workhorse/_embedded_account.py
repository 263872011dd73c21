"""Who the embedded server runs as, and which directories it may trust.

PostgreSQL refuses to run as root: as root, the server runs as the unprivileged system user
SERVER_USER, created on first use. And since the server trusts its local socket, every directory
of its home must be one that nobody but root, the invoking user or the server's user can write
or swap (the rules below). `workhorse.embedded` asks these questions; nothing here starts a
server.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import shutil
import stat
import subprocess
import time
from pathlib import Path

from .errors import EmbeddedServerError

#: The unprivileged system user the server runs as when workhorse runs as root.
SERVER_USER = "workhorse-pg"


def server_uid() -> int:
    if os.geteuid() != 0:
        return os.geteuid()
    try:
        return pwd.getpwnam(SERVER_USER).pw_uid
    except KeyError:
        return -1


def server_account() -> pwd.struct_passwd | None:
    """The account the server must run as: None means ourselves; as root, the system user
    `workhorse-pg`, created on first use (PostgreSQL refuses to run as root)."""
    if os.geteuid() != 0:
        return None
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(SERVER_USER)
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    command = [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SERVER_USER]
    deadline = time.monotonic() + 30
    while True:
        try:
            result = subprocess.run(command, capture_output=True, text=True, check=False)
        except OSError as exc:
            raise EmbeddedServerError(
                f"could not create the system user {SERVER_USER!r} that runs PostgreSQL as root "
                f"(PostgreSQL refuses to run as root): {exc}"
            ) from exc
        # Another process (with another home) may have created it meanwhile (exit 9), or be
        # holding the passwd lock right now (exit 10): both settle by looking again.
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(SERVER_USER)
        if result.returncode != 10 or time.monotonic() > deadline:
            raise EmbeddedServerError(
                f"could not create the system user {SERVER_USER!r} that runs PostgreSQL as root: "
                f"useradd exited {result.returncode}: {one_line(result.stderr)}"
            )
        time.sleep(0.1)


# --------------------------------------------------------------------------------------------
# Trust: which directories the server may live in
#
# The server trusts its local socket (trust auth, as the superuser), so whoever can write the
# socket's directory, or swap the home or one of its directories for their own, owns the
# server and runs programs as its user. Every directory of the home must therefore be a real
# directory (not a symlink), owned by root, the invoking user or the server's user, and
# writable by nobody else: not by others, and by its group only when that group is its
# owner's own private group. Ownership is changed only through lchown, never through a link.


def trusted_owners() -> set[int]:
    owners = {0, os.geteuid()}
    server = server_uid()
    if server >= 0:
        owners.add(server)
    return owners


def _user_name(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _group_name(gid: int) -> str:
    try:
        return f"{grp.getgrgid(gid).gr_name} (gid {gid})"
    except KeyError:
        return f"gid {gid}"


def private_group(uid: int, gid: int) -> bool:
    """Whether `gid` is the user's own group: its primary group, named after it, with no other
    member and no other user's primary group."""
    try:
        user = pwd.getpwuid(uid)
        group = grp.getgrgid(gid)
    except KeyError:
        return False
    if user.pw_gid != gid or group.gr_name != user.pw_name:
        return False
    if set(group.gr_mem) - {user.pw_name}:
        return False
    return not any(other.pw_gid == gid and other.pw_uid != uid for other in pwd.getpwall())


def refuse(path: Path, why: str) -> EmbeddedServerError:
    return EmbeddedServerError(
        f"refusing to use {path} for the embedded PostgreSQL server: {why} "
        "(set WORKHORSE_HOME to a directory of your own that only you can write)"
    )


def check_dir(path: Path) -> os.stat_result | None:
    """The directory's lstat, once it passes the trust rules above; None if it does not exist."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        raise refuse(path, "it is a symbolic link")
    if not stat.S_ISDIR(info.st_mode):
        raise refuse(path, "it is not a directory")
    if info.st_uid not in trusted_owners():
        raise refuse(path, f"it is owned by {_user_name(info.st_uid)}")
    if info.st_mode & stat.S_IWOTH:
        raise refuse(path, f"it is writable by every user (mode {stat.S_IMODE(info.st_mode):o})")
    if info.st_mode & stat.S_IWGRP and not private_group(info.st_uid, info.st_gid):
        raise refuse(
            path,
            f"it is writable by the group {_group_name(info.st_gid)} "
            f"(mode {stat.S_IMODE(info.st_mode):o}), which is not its owner's private group",
        )
    return info


def check_ancestors(path: Path) -> None:
    """No one but a trusted user may rename the home away and put another in its place: every
    existing directory above it (as written, and once links are resolved) is owned by a trusted
    user and writable by others only when it is sticky (like /tmp), and a symbolic link on the
    way is a trusted user's (its owner can point it elsewhere at any time)."""
    trusted = trusted_owners()
    written = list(path.parents)
    resolved = list(Path(os.path.realpath(path.parent)).joinpath("x").parents)
    for ancestor in dict.fromkeys(written + resolved):
        try:
            info = os.lstat(ancestor)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(info.st_mode):
            if info.st_uid not in trusted:
                raise refuse(path, f"{ancestor} above it is a symbolic link owned by "
                              f"{_user_name(info.st_uid)}")
            continue
        if info.st_uid not in trusted:
            raise refuse(path, f"{ancestor} above it is owned by {_user_name(info.st_uid)}")
        if info.st_mode & stat.S_ISVTX:
            continue
        if info.st_mode & stat.S_IWOTH or (
            info.st_mode & stat.S_IWGRP and not private_group(info.st_uid, info.st_gid)
        ):
            raise refuse(path, f"{ancestor} above it is writable by other users")


def check_home(home: Path, *directories: Path) -> None:
    """Refuse a home, or a directory of it, that someone else could write or swap."""
    check_ancestors(home)
    if check_dir(home) is None:
        return
    for directory in directories:
        check_dir(directory)


def check_reachable(path: Path, account: pwd.struct_passwd) -> None:
    """Fail clearly when an ancestor of the home is not searchable by the server user: we must
    never change permissions outside the home."""
    groups = {account.pw_gid}
    for ancestor in path.parents:
        info = ancestor.stat()
        if info.st_uid == account.pw_uid:
            bit = stat.S_IXUSR
        elif info.st_gid in groups:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not info.st_mode & bit:
            raise EmbeddedServerError(
                f"the server user {SERVER_USER!r} cannot reach {path}: {ancestor} is not "
                "searchable by it; choose a WORKHORSE_HOME under a world-searchable directory "
                "such as /var/lib"
            )


def make_owned_dir(path: Path, account: pwd.struct_passwd | None, mode: int) -> None:
    check_dir(path)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, mode)
    info = check_dir(path)
    assert info is not None
    if account is not None:
        if info.st_uid != account.pw_uid or info.st_gid != account.pw_gid:
            # lchown: a link put in its place since the check is changed, not its target.
            os.chown(path, account.pw_uid, account.pw_gid, follow_symlinks=False)
    elif info.st_uid != os.geteuid():
        raise refuse(path, f"it is owned by {_user_name(info.st_uid)}, not by you")


def one_line(text: str) -> str:
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())
