"""Everything through a real PgBouncer 1.18 in transaction mode, with no setting (docs/design.md
"Connection poolers"): every statement path, `Queue(conn)` on a caller's connection, the CLI,
results, and wake-ups that find out by themselves that LISTEN cannot work there. And no
session-level advisory lock anywhere, statically and by watching pg_locks.

Several client connections take turns, each running every path more than five times (psycopg
prepares a statement on its fifth execution), so that their transactions land on each other's
server connections; a prepared statement would then fail with "does not exist" or
DuplicatePreparedStatement."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from workhorse import (
    App,
    AsyncQueue,
    ConcurrencyPolicyDefinition,
    EnqueueOptions,
    JobStatus,
    Queue,
    _listen,
    _ops,
    _results,
)
from workhorse.cli import main
from workhorse.worker import _registry, wakeups

# Debian's PgBouncer in front of the test server: a heavy suite, so CI runs it in its first pass
# only (marker `slow`); what it checks is PgBouncer's transaction mode, not the server's version.
pytestmark = pytest.mark.slow

SQL_DIR = Path(__file__).resolve().parents[2] / "workhorse" / "sql"
PACKAGE = SQL_DIR.parent
ROUNDS = 7  # > psycopg's prepare_threshold (5)
# A session-level advisory lock or unlock (the _xact_ variants are transaction-scoped).
SESSION_LOCK = re.compile(
    r"\bpg_(?:try_)?advisory_lock(?:_shared)?\s*\(|\bpg_advisory_unlock(?:_shared|_all)?\s*\(",
    re.IGNORECASE,
)


def session_lock_uses(text: str) -> list[str]:
    return [m.group(0) for m in SESSION_LOCK.finditer(text)]


# The pytest plugin's template lock (workhorse.pytest_plugin, on main): it guards CREATE
# DATABASE, which cannot run in a transaction, on the test server's own admin connection, never
# through a pooler. The only session-level lock allowed.
ALLOWED = {"sql/statements/testing_template_lock.sql", "sql/statements/testing_template_unlock.sql"}


def test_no_statement_takes_a_session_level_advisory_lock() -> None:
    found = {
        name: uses
        for path in sorted([*SQL_DIR.rglob("*.sql"), *PACKAGE.rglob("*.py")])
        if (name := str(path.relative_to(PACKAGE))) not in ALLOWED
        and (uses := session_lock_uses(path.read_text("utf-8")))
    }
    assert found == {}


def test_the_session_lock_check_can_fail() -> None:
    assert session_lock_uses("SELECT pg_try_advisory_lock(%s)") == ["pg_try_advisory_lock("]
    assert session_lock_uses("SELECT pg_advisory_unlock(1)") == ["pg_advisory_unlock("]
    assert session_lock_uses("PERFORM pg_advisory_lock_shared(k)") == ["pg_advisory_lock_shared("]
    assert session_lock_uses(
        "SELECT pg_try_advisory_xact_lock(1); PERFORM pg_advisory_xact_lock_shared(2)") == []


def _clients(url: str, n: int = 3, **kwargs: Any) -> list[psycopg.Connection[Any]]:
    # psycopg's defaults (prepare_threshold=5): a caller's own connection, as users open it.
    return [psycopg.connect(url, **kwargs) for _ in range(n)]


def test_queue_on_callers_connections_through_pgbouncer(pgbouncer_url: str) -> None:
    clients = _clients(pgbouncer_url)
    try:
        policy = ConcurrencyPolicyDefinition("bq", max_active=50, max_active_per_key=10)
        for round_ in range(ROUNDS):
            for index, client in enumerate(clients):
                q = Queue(client)
                with client.transaction():  # the caller's transaction: the enqueue commits in it
                    q.sync_concurrency_policies("bouncer", [policy])
                    q.enqueue("t", {"n": round_}, EnqueueOptions(queue="bq",
                                                                  concurrency_key=f"k{index}"))
                    q.enqueue_many([("t", {}, EnqueueOptions(queue="free"))] * 2)
                client.commit()
                assert q.health().depth["ready"] >= 1
                assert q.list_concurrency_policies("bouncer")[0].max_active == 50
                assert q.list_jobs(queue="bq", limit=5)
                client.commit()
        worker = psycopg.connect(pgbouncer_url, autocommit=True)
        try:
            done = 0
            for _ in range(ROUNDS * 3):
                for queue_name in ("bq", "free"):
                    for client in (worker, *clients):
                        q = Queue(client)
                        jobs = q.claim(queue_name, 1, 30)
                        if not client.autocommit:
                            client.commit()  # a governed claim holds the queue's lock till then
                        if not jobs:
                            continue
                        job = jobs[0]
                        assert q.heartbeat([(job.id, job.fence, 30)]) == {job.id}
                        if job.id % 2:
                            q.complete(job.id, job.fence, {"ok": job.id})
                        else:
                            q.fail(job.id, job.fence, _ops.error_document(ValueError("x")), None)
                        assert q.get_job(job.id) is not None
                        if not client.autocommit:
                            client.commit()
                        done += 1
            assert done == ROUNDS * len(clients) * 3
        finally:
            worker.close()
    finally:
        for client in clients:
            client.close()


def test_async_queue_through_pgbouncer(pgbouncer_url: str) -> None:
    async def main() -> int:
        clients = [await psycopg.AsyncConnection.connect(pgbouncer_url, autocommit=True)
                   for _ in range(3)]
        try:
            for _ in range(ROUNDS):
                for client in clients:
                    aq = AsyncQueue(client)
                    await aq.enqueue("t", {}, EnqueueOptions(queue="aq"))
                    await aq.health()
            ended = 0
            for _ in range(ROUNDS):
                for client in clients:
                    aq = AsyncQueue(client)
                    [job] = await aq.claim("aq", 1, 30)
                    await aq.heartbeat([(job.id, job.fence, 30)])
                    await aq.complete(job.id, job.fence, None)
                    ended += 1
            return ended
        finally:
            for client in clients:
                await client.close()

    assert asyncio.run(main()) == ROUNDS * 3


def test_app_results_and_schema_through_pgbouncer(pgbouncer_url: str, queue: Queue) -> None:
    app = App("bouncer", database_url=pgbouncer_url)

    @app.task(name="add", queue="math", max_active=3)
    def add(a: int, b: int) -> int:
        return a + b

    try:
        with psycopg.connect(pgbouncer_url, autocommit=True) as installer:
            Queue(installer).install_schema()
        for _ in range(ROUNDS):
            app.sync()
        handles = [add.delay(i, i) for i in range(3)]
        for handle in handles:
            [job] = queue.claim("math", 1, 30)
            # Completed while get() waits, so that the waiter really waits (LISTEN or poll).
            threading.Timer(0.3, queue.complete,
                            (job.id, job.fence, job.payload["args"][0] * 2)).start()
            started = time.monotonic()
            assert handle.get(timeout=10) == job.payload["args"][0] * 2
            # Polled, not a hang: a result is seen within the poll interval (and the probe).
            assert time.monotonic() - started < _listen.PROBE_TIMEOUT + 10
        assert _results.waiter(pgbouncer_url).listening is False
    finally:
        app.close()


def test_the_listen_probe_tells_pgbouncer_from_the_server(database_url: str,
                                                          pgbouncer_url: str) -> None:
    def notifier(url: str) -> Any:
        def notify(token: str) -> None:
            with psycopg.connect(url, autocommit=True) as other:
                _listen.notify_probe(other, token)
        return notify

    # The bounds are generous (a busy machine is slow): what they catch is a hang.
    with psycopg.connect(database_url, autocommit=True) as direct:
        started = time.monotonic()
        assert _listen.listen_works(direct, notifier(database_url))
        assert time.monotonic() - started < _listen.PROBE_TIMEOUT + 10
    with psycopg.connect(pgbouncer_url, autocommit=True) as pooled:
        started = time.monotonic()
        assert not _listen.listen_works(pooled, notifier(pgbouncer_url))
        assert time.monotonic() - started < _listen.PROBE_TIMEOUT + 10


def _slot_end(channels: wakeups.ChannelSet) -> socket.socket:
    end = channels.open(0)
    end.settimeout(0.1)
    return end


def _hinted_within(end: socket.socket, queue: str, seconds: float) -> float | None:
    """Seconds until a hint naming `queue` arrives on the slot's end, or None."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        try:
            kind, names = wakeups.decode(end.recv(65536))
        except TimeoutError:
            continue
        if kind == wakeups.HINT and queue in names:
            return time.monotonic() - started
    return None


def _drain(end: socket.socket) -> None:
    while _hinted_within(end, "\x00none", 0.2) is None:
        try:
            end.recv(65536)
        except TimeoutError:
            return


@pytest.mark.parametrize("listen_direct", [False, True], ids=["polling", "listen-url"])
def test_wakeups_through_pgbouncer(database_url: str, pgbouncer_url: str, queue: Queue,
                                   listen_direct: bool) -> None:
    """Without a setting the listener finds that LISTEN cannot work and polls; with
    WORKHORSE_LISTEN_URL set to the server it LISTENs there. Either way the enqueue's hint
    arrives (how soon is not judged: a busy machine stretches any bound)."""
    channels = wakeups.ChannelSet()
    end = _slot_end(channels)
    listener = wakeups.Listener(
        pgbouncer_url, ["wq"], channels, wakeups.ConnectionFds(), governed=set(),
        listen_url=database_url if listen_direct else None)
    listener.start()
    try:
        assert listener.connected.wait(15)
        assert listener.listening is listen_direct
        assert _hinted_within(end, "wq", 15) is not None  # the hint every connect sends
        _drain(end)
        queue.enqueue("t", {}, EnqueueOptions(queue="wq"))
        assert _hinted_within(end, "wq", 15) is not None
    finally:
        listener.stop()
        channels.close_all()
        end.close()


def _idle_advisory_locks(direct: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    """Advisory locks held by a backend outside any transaction: session-level ones."""
    return direct.execute(
        "SELECT l.pid, l.objid FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
        "WHERE l.locktype = 'advisory' AND a.state = 'idle' AND a.datname = current_database()"
    ).fetchall()


def test_no_advisory_lock_outlives_a_statement_through_pgbouncer(
    pgbouncer_url: str, conn: psycopg.Connection[Any]
) -> None:
    """The supervisor's housekeeping, pruning, registry and health, the schema install and a
    sync through PgBouncer, checked after every single statement: no server session is left
    idle holding an advisory lock (as a session-level lock through a pooler would be)."""
    seen: list[tuple[str, list[tuple[Any, ...]]]] = []

    class Checking(psycopg.Cursor[Any]):
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            result = super().execute(query, params, **kwargs)
            idle = self.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            if idle and (held := _idle_advisory_locks(conn)):
                seen.append((str(query)[:80], held))
            return result

    pooled = psycopg.connect(pgbouncer_url, autocommit=True, cursor_factory=Checking)
    try:
        Queue(pooled).install_schema()
        Queue(pooled).sync_concurrency_policies(
            "bouncer", [ConcurrencyPolicyDefinition("hq", max_active=2)])
        registry = _registry.Registry(app="bouncer", host="h", pid=1, slots=1, queues=["hq"],
                                      stats=lambda: {})
        registry.connected(pooled)
        for _ in range(ROUNDS):
            registry._next_housekeeping = 0.0
            registry.tick(pooled)
        registry.unregister(pooled)
    finally:
        pooled.close()
    assert seen == []
    assert _idle_advisory_locks(conn) == []


CLI_APP = """
import workhorse
app = workhorse.App("bouncercli")

@app.task(name="ping", queue="pings", max_active=2)
def ping():
    return "pong"
"""


def test_cli_through_pgbouncer(pgbouncer_url: str, queue: Queue, tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bouncer_cli_app.py").write_text(textwrap.dedent(CLI_APP))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("bouncer_cli_app", None)
    queue.enqueue_many([("ping", {"args": [], "kwargs": {}}, EnqueueOptions(queue="pings"))] * 3)

    def cli(*args: str) -> str:
        result = CliRunner().invoke(main, ["--database-url", pgbouncer_url, *args],
                                    catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.stdout

    for _ in range(ROUNDS):
        cli("migrate")
        cli("sync", "bouncer_cli_app:app")
        assert json.loads(cli("health", "--json"))["depth"]["ready"] == 3
        assert len(json.loads(cli("jobs", "list", "--json"))) == 3
        assert json.loads(cli("policies", "--json"))[0]["queue"] == "pings"
        assert json.loads(cli("workers", "--json")) == []
        cli("queues", "--json")
    [job] = queue.claim("pings", 1, 30)
    assert job.task == "ping"
    assert queue.get_job(job.id).status == JobStatus.ACTIVE  # type: ignore[union-attr]
