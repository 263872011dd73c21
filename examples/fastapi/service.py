"""FastAPI and workhorse: enqueue from async endpoints, await results, one pool per process.

    pip install -e '.[examples]'
    cd examples/fastapi
    uvicorn service:api &                     # the web app first: its lifespan syncs the limits
    workhorse worker service:tasks            # the worker (WORKHORSE_DATABASE_URL, or embedded)

    curl -X POST 'localhost:8000/orders?total=7'     # order row + job, one transaction
    curl -X POST 'localhost:8000/sum?a=2&b=3'        # enqueue, then await the result: {"sum": 5}
    curl localhost:8000/jobs/1                       # {"status": "succeeded"}

The lifespan opens the request pool (psycopg_pool.AsyncConnectionPool) on workhorse's
database and closes it and the App's own pool at shutdown. `/orders` writes its own row and
enqueues in the same request transaction (`enqueue_async(..., connection=conn)`): both commit
when the `conn.transaction()` block ends, before the response, or neither does. `/sum` enqueues
with `delay_async` on the App's pool and awaits `get_async`, which holds no connection while
it waits.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, HTTPException, Request
from psycopg_pool import AsyncConnectionPool

import workhorse
from workhorse import JobStatus

tasks = workhorse.App("api")


# Explicit names: the same in the web process and in the worker, however each imports this.
@tasks.task(name="api.add", queue="api-math", max_active=4)
async def add(a: int, b: int) -> int:
    return a + b


@tasks.task(name="api.confirm", queue="api-orders")
async def confirm(order_id: int) -> int:
    return order_id


@asynccontextmanager
async def lifespan(api: FastAPI) -> AsyncIterator[None]:
    await tasks.sync_async()  # the limits above, fleet-wide (max_active=4)
    pool = AsyncConnectionPool(tasks.database_url, min_size=1, max_size=4, open=False,
                               kwargs={"application_name": "api-requests"})
    await pool.open()
    async with pool.connection() as conn:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS api_orders (id bigserial PRIMARY KEY, total int)")
    api.state.pool = pool
    try:
        yield
    finally:
        await pool.close()
        await tasks.close_async()


api = FastAPI(lifespan=lifespan)


@api.post("/orders")
async def create_order(request: Request, total: int, fail: bool = False) -> dict[str, int]:
    pool: AsyncConnectionPool = request.app.state.pool
    async with pool.connection() as conn, conn.transaction():
        row = await (await conn.execute(
            "INSERT INTO api_orders (total) VALUES (%s) RETURNING id", (total,))).fetchone()
        assert row is not None
        handle = await confirm.enqueue_async(args=(row[0],), connection=conn)
        if fail:  # e.g. a payment check after the writes: the order and its job roll back
            raise HTTPException(status_code=402, detail="payment declined")
    return {"order_id": row[0], "job_id": handle.id}


@api.post("/sum")
async def sum_later(a: int, b: int, wait: float = 10.0) -> dict[str, int]:
    handle = await add.delay_async(a, b)
    try:
        return {"sum": await handle.get_async(timeout=wait), "job_id": handle.id}
    except TimeoutError:
        status = await handle.status_async()
        if status in (JobStatus.READY, JobStatus.SCHEDULED):
            # Nobody claimed it: no worker runs (or all are busy), not a slow job.
            raise HTTPException(status_code=503, detail=(
                f"job {handle.id} has not started yet: is a worker running? "
                "(workhorse worker service:tasks)")) from None
        raise HTTPException(status_code=504, detail=f"job {handle.id} is still running") from None


@api.get("/jobs/{job_id}")
async def job_status(job_id: int) -> dict[str, str | None]:
    status = await tasks.handle(job_id).status_async()
    return {"status": status.value if status is not None else None}
