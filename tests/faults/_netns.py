"""Two "hosts" on one machine: network namespaces, each joined to the host by a veth pair, with
addresses on those private links only. PostgreSQL listens on the host ends; `cut()` takes one
link down (its TCP connections hang, as across a real partition) and `restore()` brings it back.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30,
                          check=check)


def why_not() -> str | None:
    """None when this process can make namespaces; else the reason, for a clean skip."""
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    probe = f"whprobe{os.getpid() % 100000}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    veth = _ip("link", "add", f"whp{os.getpid() % 100000}", "type", "veth", "peer", "name",
               f"whq{os.getpid() % 100000}", check=False)
    if veth.returncode != 0:
        return f"cannot create a veth pair: {veth.stderr.strip()}"
    _ip("link", "del", f"whp{os.getpid() % 100000}", check=False)
    return None


@dataclass
class Host:
    namespace: str
    host_end: str  # the veth end in the root namespace: cut() takes it down
    host_address: str  # PostgreSQL listens here
    address: str  # the namespace's own address

    def prefix(self) -> tuple[str, ...]:
        return ("ip", "netns", "exec", self.namespace)

    def cut(self) -> None:
        _ip("link", "set", self.host_end, "down")

    def restore(self) -> None:
        _ip("link", "set", self.host_end, "up")


class Hosts:
    def __init__(self, count: int = 2) -> None:
        tag = os.getpid() % 10000
        self.subnet = 100 + os.getpid() % 150  # 10.<subnet>.<n>.0/24: one test's own
        self.hosts = [
            Host(f"whf{tag}{chr(97 + n)}", f"whh{tag}{chr(97 + n)}",
                 f"10.{self.subnet}.{n + 1}.1", f"10.{self.subnet}.{n + 1}.2")
            for n in range(count)
        ]

    @property
    def network(self) -> str:
        return f"10.{self.subnet}.0.0/16"

    def create(self) -> Hosts:
        for h in self.hosts:
            inner = h.host_end.replace("whh", "whn", 1)
            _ip("netns", "add", h.namespace)
            _ip("link", "add", h.host_end, "type", "veth", "peer", "name", inner)
            _ip("link", "set", inner, "netns", h.namespace)
            _ip("addr", "add", f"{h.host_address}/24", "dev", h.host_end)
            _ip("link", "set", h.host_end, "up")
            _ip("-n", h.namespace, "addr", "add", f"{h.address}/24", "dev", inner)
            _ip("-n", h.namespace, "link", "set", inner, "up")
            _ip("-n", h.namespace, "link", "set", "lo", "up")
        return self

    def destroy(self) -> None:
        for h in self.hosts:
            _ip("link", "del", h.host_end, check=False)
            _ip("netns", "del", h.namespace, check=False)
