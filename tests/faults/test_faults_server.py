"""The server restarts under a running fleet (`pg_ctl restart -m fast` and `-m immediate`), and
every worker connection is terminated (`pg_terminate_backend`): the workers reconnect by
themselves, nothing is lost, nothing runs beyond the limits, no stale result is recorded."""

from __future__ import annotations

import time

import _journal
import pytest
from _cluster import query
from _scenario import Scenario, assert_sound, limits

pytestmark = pytest.mark.slow

JOBS = 400
RECOVERY_BOUND = 8.0  # s from the fault to the first new start; measured: see the fault table


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_a_server_restart_mid_run(cluster, tmp_path, mode):
    s = Scenario(cluster, tmp_path, f"pg_ctl restart -m {mode}")
    s.enqueue(JOBS)
    s.worker()
    try:
        s.wait_finished(JOBS // 4)
        fault_at = time.monotonic()
        cluster.restart(mode)
        back_at = time.monotonic()
        s.wait_all_succeeded()
    finally:
        codes = s.stop()
    first = _journal.first_start_after(_journal.read(s.journal).values(), back_at)
    assert first is not None, s.logs()
    row, seen, found = s.check(limits(), recovery_s=first - fault_at)
    assert_sound(row, seen, found, s.logs())
    assert codes == [0], s.logs()
    assert row.recovery_s is not None and row.recovery_s < RECOVERY_BOUND


def test_terminated_backends_mid_run(cluster, tmp_path):
    s = Scenario(cluster, tmp_path, "pg_terminate_backend (x3)")
    s.enqueue(JOBS)
    s.worker()
    terminated = 0
    try:
        s.wait_finished(JOBS // 5)
        fault_at = time.monotonic()
        for _ in range(3):  # every worker connection, three times, 0.3 s apart
            terminated += len(query(
                s.url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name LIKE 'workhorse%%' AND pid <> pg_backend_pid()"))
            time.sleep(0.3)
        back_at = time.monotonic()
        s.wait_all_succeeded()
    finally:
        codes = s.stop()
    assert terminated >= 6, "the fault hit nothing: the test proves nothing"
    first = _journal.first_start_after(_journal.read(s.journal).values(), back_at)
    assert first is not None, s.logs()
    row, seen, found = s.check(limits(), recovery_s=first - fault_at)
    assert_sound(row, seen, found, s.logs())
    assert codes == [0], s.logs()
    assert row.recovery_s is not None and row.recovery_s < RECOVERY_BOUND
