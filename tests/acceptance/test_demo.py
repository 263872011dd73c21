"""The README's main command: a real fleet drains a multi-tenant app within its limits."""

from __future__ import annotations

import subprocess
import sys


def test_demo_runs_a_fleet_and_reports_no_limit_exceeded(database_url: str) -> None:
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
