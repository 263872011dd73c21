"""Any session may NOTIFY the results channel (issue 24, item 3): a malformed payload must not
end the results waiter's thread, and a `get()` that is waiting meanwhile still returns promptly
when its job ends. Real sessions on a real server."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import psycopg
import pytest

from workhorse import App, EnqueueOptions, Queue, _results

GARBAGE = ["²", "", "abc", "-1", "1e3", "99999999999999999999999", " , ,", "٣", "7,x,²"]


def _notify(url: str, payload: str) -> None:
    """From another session, as any user of the database could."""
    with psycopg.connect(url, autocommit=True) as other:
        other.execute("SELECT pg_notify('workhorse_results', %s)", (payload,))


def _wait_listening(waiter: _results.ResultWaiter, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while waiter.listening is not True:
        assert time.monotonic() < deadline, "the results thread never started listening"
        time.sleep(0.02)


@pytest.fixture
def app(database_url: str) -> Any:
    app = App("notify", database_url=database_url)

    @app.task(name="slow", queue="slow")
    def slow() -> None: ...

    yield app
    app.close()


def test_a_malformed_notify_does_not_stop_a_waiting_get(
    app: App, database_url: str, queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = queue.enqueue("slow", {"args": [], "kwargs": {}}, EnqueueOptions(queue="slow"))
    handle = app.handle(job_id)
    outcome: dict[str, Any] = {}

    def get() -> None:
        try:
            outcome["result"] = handle.get(timeout=15)
        except BaseException as exc:  # reported to the test below
            outcome["error"] = exc
        outcome["at"] = time.monotonic()

    caplog.set_level(logging.WARNING, logger="workhorse.results")
    waiting = threading.Thread(target=get)
    waiting.start()
    waiter = _results.waiter(database_url)
    _wait_listening(waiter)
    thread = waiter._thread
    assert thread is not None and thread.is_alive()

    for payload in GARBAGE:
        _notify(database_url, payload)
    time.sleep(1.0)  # long enough for the thread to read them all (and, before, to die)
    assert thread.is_alive(), "a malformed notification ended the results thread"

    [claimed] = queue.claim("slow", 1, 30)
    queue.complete(claimed.id, claimed.fence, {"done": True})
    completed_at = time.monotonic()
    waiting.join(20)
    assert "error" not in outcome, outcome.get("error")
    assert outcome["result"] == {"done": True}
    # Woken by the notification (or at worst the next poll), not by a timeout.
    assert outcome["at"] - completed_at < _results.POLL_INTERVAL + 1.0

    # Logged once, however many came.
    warned = [r for r in caplog.records if "malformed notification" in r.getMessage()]
    assert len(warned) == 1


def test_a_new_get_after_garbage_is_woken_by_listen(
    app: App, database_url: str, queue: Queue
) -> None:
    waiter = _results.waiter(database_url)
    first = queue.enqueue("slow", {"args": [], "kwargs": {}}, EnqueueOptions(queue="slow"))
    [claimed] = queue.claim("slow", 1, 30)
    threading.Timer(0.5, lambda: _notify(database_url, "²,¹")).start()
    # A waiter in flight while the garbage arrives, then its job ends.
    threading.Timer(1.0, lambda: queue.complete(claimed.id, claimed.fence, 1)).start()
    started = time.monotonic()
    assert waiter.wait(first, 10)
    assert time.monotonic() - started < 1.0 + _results.POLL_INTERVAL + 1.0
    assert waiter.listening is True


def test_ids_parses_defensively() -> None:
    assert _results._ids("1,2, 3") == ({1, 2, 3}, False)
    assert _results._ids("²") == (set(), True)
    assert _results._ids("4,²,99999999999999999999") == ({4}, True)
