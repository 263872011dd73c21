"""Fault-suite fixtures: a private PostgreSQL cluster per test (it gets restarted), and the
acceptance tests' worker harness (`apps.harness`) on the path."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "acceptance"))  # apps.harness: Worker, wait_for, children

from _cluster import PrivateCluster, server_bindir  # noqa: E402


@pytest.fixture
def cluster() -> Iterator[PrivateCluster]:
    bindir = server_bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")
    private = PrivateCluster(bindir).init()
    try:
        private.start()
        private.create_database()
        yield private
    finally:
        private.destroy()
