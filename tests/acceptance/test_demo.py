"""The README's main command: a real fleet drains a multi-tenant app within its limits."""

from __future__ import annotations

import subprocess
import sys

from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, Queue


def test_demo_runs_a_fleet_and_reports_no_limit_exceeded(database_url: str, conn) -> None:
    # The user's own data, which the demo must leave alone.
    queue = Queue(conn)
    mine = queue.enqueue("mine.task", {}, EnqueueOptions(queue="mine"))
    queue.sync_concurrency_policies("mine", [ConcurrencyPolicyDefinition("mine", max_active=1)])
    done = subprocess.run(
        [sys.executable, "-m", "workhorse", "--database-url", database_url, "demo",
         "--jobs", "80", "--slots", "2", "--concurrency", "4"],
        capture_output=True, text=True, timeout=90,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "no limit exceeded" in done.stdout
    assert "80/80 done" in done.stdout
    # The final table names both demo queues with the peak that actually happened.
    assert "demo-mail" in done.stdout and "demo-reports" in done.stdout
    assert "NO" not in done.stdout.split("highest concurrency")[-1]
    # It cleaned up after itself: its jobs and policies are gone, the user's are not.
    assert conn.execute("SELECT id FROM workhorse.jobs").fetchall() == [(mine,)]
    assert [p.namespace for p in queue.list_concurrency_policies()] == ["mine"]
    assert conn.execute("SELECT count(*) FROM workhorse.key_heads").fetchone() == (0,)
