"""kill -9 of a supervisor: its orphaned slots, idle or busy, finish and exit 0. (An idle one
used to exit -15: PR_SET_PDEATHSIG fires each time the kernel hands an orphan from one dying
supervisor thread to the next, and the second SIGTERM found the drained slot's handler gone.
The race lost about one kill in three, so the test kills several supervisors.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import faults_app
import psycopg
import pytest

from workhorse import Queue

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
ROUNDS = 5


def test_orphaned_slots_exit_0_after_kill_9_of_their_supervisor(database_url, tmp_path):
    with psycopg.connect(database_url, autocommit=True) as conn:
        Queue(conn).sync_concurrency_policies(faults_app.app.name,
                                              faults_app.app.policy_definitions())
        with faults_app.app.using(conn):  # one long job per round keeps one slot busy
            faults_app.app.enqueue_many(faults_app.work.call((f"long{n}", "k", 1.0))
                                        for n in range(ROUNDS))
    result = subprocess.run(
        [sys.executable, str(HERE / "_subreaper.py"), database_url,
         str(tmp_path / "journal.log"), str(ROUNDS)],
        capture_output=True, text=True, timeout=180,
    )
    assert result.returncode == 0, result.stderr
    rounds = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rounds) == ROUNDS
    exits = [how for statuses in rounds for _, how in statuses]
    assert exits == ["exited 0"] * (3 * ROUNDS), rounds
    with psycopg.connect(database_url) as conn:
        # The busy orphans finished their jobs and recorded them before leaving.
        statuses = dict(conn.execute("SELECT status::text, count(*) FROM workhorse.jobs "
                                     "GROUP BY 1").fetchall())
    assert statuses.get("active", 0) == 0, statuses
