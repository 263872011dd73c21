"""An App's async pool serves the event loop it was opened in (workhorse/_enqueue.py).

Scripts and tests call `asyncio.run` more than once, and each run is a new event loop: the pool
opened in the first one belongs to it (its locks and tasks), and that loop is closed. The second
run gets a pool of its own. And a pool is open with its first connection made before it is used:
one still connecting when `asyncio.run` ended swallowed the cancel of its connect, and
`asyncio.run` waited for it forever (docs/budgets.md's async hold, one run in a dozen on a loaded
machine).

Each case runs in its own process with a timeout (the failure seen was a hang), its connections
slowed down as on a loaded machine. The checker (every `asyncio.run` returns, each with a pool of
its own) is shown to fail on the pool as it was: one pool, kept across the loops. The hang itself
was not reproduced on demand (a slow `configure` of each connection does not do it): the fix
for it, opening the pool with its first connection made, rests on the page's runs (a hang in 12
and in 63 runs beside two CPU hogs before, none after; see the session note).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from _integration import REPO

SCRIPT = '''
import asyncio
import sys

from psycopg_pool import AsyncConnectionPool

import workhorse
from workhorse import _enqueue


async def slowly(conn):
    await asyncio.sleep(0.3)  # a connection that takes a while, as on a loaded machine


class SlowPool(AsyncConnectionPool):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, configure=slowly, **kwargs)


_enqueue.AsyncConnectionPool = SlowPool
app = workhorse.App("loops", database_url=sys.argv[1])


@app.task(queue="loops")
async def noop():
    return None


async def once(n):
    handle = await noop.delay_async()
    async with app.budget("loops-budget").hold(timeout=5):
        job = await app.get_job_async(handle.id)
    assert job is not None and job.id == handle.id
    return await app._get_async_pool()  # kept alive below, so that no two share an id


if sys.argv[2] == "broken":
    # The pool as it was: kept whatever loop asks, opened without waiting for a connection.
    async def cached(self, name=_enqueue.DEFAULT):
        pools = self._pools_of(name)
        if pools.async_ is None:
            pools.async_ = SlowPool(self.database_url_of(name), min_size=1, max_size=8,
                                    open=False)
            await pools.async_.open()
        return pools.async_

    _enqueue.AppEnqueuer._get_async_pool = cached

app.budget("loops-budget", max_active=2)
app.sync()
pools = [asyncio.run(once(n)) for n in range(int(sys.argv[3]))]
print("ok" if len({id(p) for p in pools}) == len(pools) else f"one pool for {len(pools)} loops")
'''


def _ran(tmp_path: Path, database_url: str, variant: str, loops: int) -> str:
    """"ok" when every `asyncio.run` returned, else what went wrong (a hang ends at 30 s)."""
    script = tmp_path / "loops.py"
    script.write_text(SCRIPT)
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{path}" if path else str(REPO)}
    try:
        result = subprocess.run(
            [sys.executable, str(script), database_url, variant, str(loops)],
            capture_output=True, text=True, timeout=30, env=env, cwd=tmp_path)
    except subprocess.TimeoutExpired:
        return "hung"
    return result.stdout.strip() if result.returncode == 0 else result.stderr


def test_every_asyncio_run_ends_and_gets_a_pool_of_its_own(
    database_url: str, tmp_path: Path
) -> None:
    assert _ran(tmp_path, database_url, "fixed", 3) == "ok"


def test_the_check_fails_on_the_pool_as_it_was(database_url: str, tmp_path: Path) -> None:
    assert _ran(tmp_path, database_url, "broken", 3) != "ok"
