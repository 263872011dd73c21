"""The framework examples against real PostgreSQL (the test database) and a real worker:
examples/django (the job commits with the model; a rolled-back order leaves no job;
transaction.on_commit) and examples/fastapi (httpx's ASGI transport, the lifespan's pools, an
enqueue in the request transaction, delay_async and get_async)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from apps.harness import scalar, wait_for
from ci_guard import require

pytestmark = pytest.mark.slow
require("django", "pip install -e '.[examples]'")
require("fastapi", "pip install -e '.[examples]'")
httpx = require("httpx", "pip install -e '.[examples]'")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class ExampleWorker:
    """`workhorse worker APP` run from an example's directory."""

    def __init__(self, cwd: Path, app: str, env: dict[str, str], log: Path,
                 command: list[str] | None = None) -> None:
        self._out = log.open("wb")
        self.log = log
        self.proc = subprocess.Popen(
            [*(command or [sys.executable, "-m", "workhorse", "worker", app]), "--slots", "1",
             "--concurrency", "4"],
            cwd=cwd, env=env, stdout=self._out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL)

    def output(self) -> str:
        self._out.flush()
        return self.log.read_text(errors="replace")

    def stop(self) -> int:
        self.proc.terminate()
        try:
            return self.proc.wait(30)
        finally:
            self._out.close()


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **extra}
    env.pop("WORKHORSE_DEFAULT_CONCURRENCY_LIMIT", None)
    return env


def test_django_example(database_url: str, conn: Any, tmp_path: Path) -> None:
    project = EXAMPLES / "django"
    env = _env(SHOP_DATABASE_URL=database_url)
    env.pop("WORKHORSE_DATABASE_URL", None)  # the app takes Django's DATABASES entry

    def manage(*args: str) -> str:
        result = subprocess.run([sys.executable, "manage.py", *args], cwd=project, env=env,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    manage("migrate", "--verbosity", "0")
    # The shop's own tests (eager in a TestCase, drain in a TestCase and a TransactionTestCase),
    # as its README runs them; Django creates and drops the test database.
    tested = subprocess.run([sys.executable, "manage.py", "test", "shop", "--noinput"],
                            cwd=project, env=env, capture_output=True, text=True, timeout=180)
    assert tested.returncode == 0 and "Ran 3 tests" in tested.stderr, tested.stderr
    report = json.loads(manage("place_orders").strip().splitlines()[-1])
    assert report["rolled_back_orders"] == 0
    # Two jobs, one per committed order; the rolled-back order took its job with it.
    jobs = conn.execute("SELECT payload->'args'->>0 FROM workhorse.jobs ORDER BY id").fetchall()
    assert [int(j[0]) for j in jobs] == report["orders"]
    policy = conn.execute("SELECT max_active FROM workhorse.policies WHERE queue = 'receipts'")
    assert policy.fetchone() == (2,)

    worker = ExampleWorker(project, "", env, tmp_path / "django-worker.log",
                           command=[sys.executable, "manage.py", "workhorse", "worker"])
    try:
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM shop_order WHERE receipt_sent") == 2,
                 60, "both receipts", interval=0.2)
    finally:
        code = worker.stop()
    assert code == 0, worker.output()
    assert scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE status = 'succeeded'") == 2


def _load_service() -> Any:
    spec = importlib.util.spec_from_file_location("fastapi_example_service",
                                                  EXAMPLES / "fastapi" / "service.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fastapi_example(database_url: str, conn: Any, tmp_path: Path,
                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKHORSE_DATABASE_URL", database_url)
    service = _load_service()

    async def no_worker_yet() -> Any:
        transport = httpx.ASGITransport(app=service.api)
        async with service.api.router.lifespan_context(service.api), httpx.AsyncClient(
                transport=transport, base_url="http://example") as client:
            waited = await client.post("/sum", params={"a": 1, "b": 1, "wait": 0.3})
            status = await client.get(f"/jobs/{waited.json()['detail'].split()[1]}")
            return waited, status.json()

    # With no worker, the job is only ready: "not started yet", not "still running".
    waited, status = asyncio.run(no_worker_yet())
    assert waited.status_code == 503 and "not started yet" in waited.json()["detail"], waited
    assert status == {"status": "ready"}
    worker = ExampleWorker(EXAMPLES / "fastapi", "service:tasks",
                           _env(WORKHORSE_DATABASE_URL=database_url),
                           tmp_path / "fastapi-worker.log")

    async def scenario() -> dict[str, Any]:
        transport = httpx.ASGITransport(app=service.api)
        async with service.api.router.lifespan_context(service.api), httpx.AsyncClient(
                transport=transport, base_url="http://example") as client:
            sums = await asyncio.gather(*(
                client.post("/sum", params={"a": n, "b": 1}) for n in range(6)))
            ordered = await client.post("/orders", params={"total": 7})
            declined = await client.post("/orders", params={"total": 8, "fail": "true"})
            return {"sums": [r.json() for r in sums], "ordered": ordered,
                    "declined": declined}

    try:
        outcome = asyncio.run(scenario())
        order = outcome["ordered"].json()
        wait_for(lambda: scalar(conn, "SELECT status FROM workhorse.jobs WHERE id = %s",
                                order["job_id"]) == "succeeded", 30, "the order's job",
                 interval=0.1)
    finally:
        code = worker.stop()
    assert code == 0, worker.output()
    assert [s["sum"] for s in outcome["sums"]] == [n + 1 for n in range(6)], outcome

    assert outcome["declined"].status_code == 402
    # The declined order and its job rolled back together; the placed one committed with its job.
    assert conn.execute("SELECT id, total FROM api_orders").fetchall() == [(order["order_id"], 7)]
    assert scalar(conn, "SELECT count(*) FROM workhorse.jobs WHERE queue = 'api-orders'") == 1
    assert scalar(conn, "SELECT max_active FROM workhorse.policies WHERE queue = 'api-math'") == 4
