"""The connection budget of docs/deployment.md, measured: a real supervisor with 3 slots runs
jobs long enough to renew leases while pg_stat_activity is sampled; every workhorse connection
names itself (application_name `workhorse-...`). The figures asserted here are the table's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from apps import lifecycle, probe
from apps.harness import Worker, scalar, wait_for
from test_deployment import healthcheck_command

pytestmark = pytest.mark.slow

DOC = Path(__file__).resolve().parents[2] / "docs" / "deployment.md"
SLOTS = 3
# The table in docs/deployment.md: connections held while the worker runs.
PER_SUPERVISOR = 1
PER_SLOT = 3


def _healthcheck(database_url: str) -> int:
    """The Dockerfile's HEALTHCHECK command from docs/deployment.md, run on this host."""
    bin_dir = os.path.dirname(sys.executable)  # `workhorse` and `python` of this venv
    env = {**os.environ, "WORKHORSE_DATABASE_URL": database_url,
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(["sh", "-c", healthcheck_command()], env=env, timeout=60,
                          capture_output=True).returncode


def test_connections_per_supervisor_and_per_slot(database_url, conn, tmp_path):
    probe.setup(conn)
    with lifecycle.app.using(conn):
        lifecycle.app.enqueue_many(lifecycle.slow.call((f"t{n}", 2.5)) for n in range(SLOTS * 2))
    worker = Worker(database_url, "apps.lifecycle:app", tmp_path / "w.log", "--slots",
                    str(SLOTS), "--concurrency", "2", "--lease", "1s", "--queues", "slow")
    peak: Counter[str] = Counter()
    try:
        worker.wait_for_slots(SLOTS)
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            rows = conn.execute(
                "SELECT application_name, count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND application_name LIKE 'workhorse-%%' "
                "GROUP BY 1").fetchall()
            for name, count in rows:
                peak[name] = max(peak[name], count)
            time.sleep(0.1)
        wait_for(lambda: _healthcheck(database_url) == 0, 15, "a healthy check", worker)
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM workhorse.jobs "
                                      "WHERE status = 'succeeded'") == SLOTS * 2,
                 30, "the jobs", worker)
    finally:
        assert worker.stop() == 0, worker.output()
    assert _healthcheck(database_url) == 1  # its row is gone: no live worker on this host
    # The listener's probe (a NOTIFY from another session, to see whether LISTEN works) is one
    # short-lived connection at start, which the doc counts apart; the sampling may catch it.
    assert peak["workhorse-supervisor-probe"] <= 1, dict(peak)
    supervisor = sum(n for name, n in peak.items()
                     if name.startswith("workhorse-supervisor") and not name.endswith("-probe"))
    slot_roles = {name: n for name, n in peak.items() if re.match(r"workhorse-slot\d+-", name)}
    leases = peak["workhorse-leases"]
    per_slot = (sum(slot_roles.values()) + leases) / SLOTS
    print(f"measured: supervisor {supervisor}, per slot {per_slot} ({dict(peak)})")
    assert supervisor == PER_SUPERVISOR, dict(peak)
    # The outcomes connection opens only when an outcome cannot ride on a claim (a failure, a
    # drain, a rate-limited queue): plan for 3, often 2 are open.
    assert 2 <= per_slot <= PER_SLOT, dict(peak)
    text = DOC.read_text()
    assert f"| per supervisor | {PER_SUPERVISOR} |" in text
    assert f"| per slot | {PER_SLOT} |" in text
