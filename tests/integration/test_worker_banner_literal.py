"""The worker's banner shows stored names literally (issue 24, item 2, for `workhorse worker`):
another namespace named with Rich markup, owning a queue the app serves, must not crash the
worker with a MarkupError. A real worker process on a real database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from workhorse import ConcurrencyPolicyDefinition, Queue

QUEUE = "shared[/]q"
NAMESPACE = "ns[/]evil\x1b[31m"


def _stop_once_registered(worker: subprocess.Popen[str], queue: Queue, app: str) -> None:
    """SIGTERM the worker once its supervisor has registered (it printed the banner and
    handles the signal by then): a fixed wait sent it while a loaded machine was still
    importing, and the default action killed it (-15)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and worker.poll() is None:
        if queue.conn.execute("SELECT 1 FROM workhorse.workers WHERE app = %s",
                              (app,)).fetchone():
            break
        time.sleep(0.2)
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)


def test_banner_prints_markup_names_literally(
    database_url: str, queue: Queue, tmp_path: Path
) -> None:
    queue.sync_concurrency_policies(
        NAMESPACE, [ConcurrencyPolicyDefinition(queue=QUEUE, max_active=1)], prune=False)
    (tmp_path / "bannerapp.py").write_text(textwrap.dedent(f"""
        import workhorse
        app = workhorse.App("mine[bold]")

        @app.task(name="mine.work", queue={QUEUE!r}, max_active=2)
        def work() -> None: ...
    """))
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    worker = subprocess.Popen(
        [sys.executable, "-m", "workhorse", "--database-url", database_url, "worker",
         "bannerapp:app", "--slots", "1"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        _stop_once_registered(worker, queue, "mine[bold]")
        out, err = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert "MarkupError" not in err, err
    assert "Traceback" not in err, err
    assert worker.returncode == 0, err
    assert "\x1b" not in out
    assert QUEUE in out
    assert "ns[/]evil\\x1b[31m" in out
    assert "mine[bold]" in out


def test_banner_names_the_budget_of_a_queue_it_alone_governs(
    database_url: str, queue: Queue, tmp_path: Path
) -> None:
    """A queue with no policy whose jobs name a budget is governed by it: the banner says so,
    where it used to say "ungoverned" (a queue with neither still says that)."""
    (tmp_path / "budgetapp.py").write_text(textwrap.dedent("""
        import workhorse
        app = workhorse.App("budgeted")
        openai = app.budget("openai", max_active=3)

        @app.task(name="b.embed", queue="embeddings", budget=openai)
        def embed() -> None: ...

        @app.task(name="b.free", queue="free")
        def free() -> None: ...
    """))
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["COLUMNS"] = "200"
    subprocess.run([sys.executable, "-m", "workhorse", "--database-url", database_url, "sync",
                    "budgetapp:app"], cwd=tmp_path, env=env, check=True, capture_output=True)
    # The budget's queues are the ones its enqueues recorded: one job makes `embeddings` one.
    subprocess.run([sys.executable, "-c", "from budgetapp import embed; embed.delay()"],
                   cwd=tmp_path, env={**env, "WORKHORSE_DATABASE_URL": database_url},
                   check=True, capture_output=True)
    worker = subprocess.Popen(
        [sys.executable, "-m", "workhorse", "--database-url", database_url, "worker",
         "budgetapp:app", "--slots", "1"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        _stop_once_registered(worker, queue, "budgeted")
        out, err = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode == 0, err
    [embeddings] = [line for line in out.splitlines() if line.strip().startswith("embeddings")]
    [free] = [line for line in out.splitlines() if line.strip().startswith("free")]
    assert "budget openai (max_active=3)" in embeddings, out
    assert "ungoverned" in free and "budget" not in free
