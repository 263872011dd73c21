"""The durable-execution methods of `Queue` and `AsyncQueue` (docs/design.md "Durable
execution"): signals sent to a job, and a job's steps."""

from __future__ import annotations

from typing import Any

from . import _ops
from .types import Step


class DurableMethods:
    """`Queue`'s signal and steps (its `_run` runs each operation on its connection)."""

    _run: Any

    def signal(self, job_id: int, name: str, payload: Any = None, key: str | None = None
               ) -> bool:
        """Send signal `name` (with a JSON `payload`) to a job, in this connection's
        transaction: a wait for it (`step.wait_for(..., signal=name)`) takes it; the job, if it
        is suspended waiting for it, becomes ready when this commits. A signal sent before the
        job waits is kept for the wait. With `key`, a second signal of the same job, name and
        key is ignored: returns False (True when stored). InvalidOptionsError for a job that
        does not exist or has finished, and for bad input; nothing is written then.

        >>> q.signal(42, "approval", {"by": "ana"}, key="ticket-7")   # doctest: +SKIP
        True
        """
        return bool(self._run(_ops.signal(job_id, name, payload, key)))

    def job_steps(self, job_id: int) -> list[Step]:
        """The job's steps, in the order it first reached them (pending ones too).

        >>> [(s.name, s.kind) for s in q.job_steps(42)]                 # doctest: +SKIP
        [('charge', 'run'), ('cool-off', 'sleep')]
        """
        steps, _ = self._run(_ops.job_steps(job_id))
        return list(steps)


class AsyncDurableMethods:
    """`AsyncQueue`'s signal and steps."""

    _run: Any

    async def signal(self, job_id: int, name: str, payload: Any = None,
                     key: str | None = None) -> bool:
        """`Queue.signal`, awaitable.

        >>> await aq.signal(42, "approval", {"by": "ana"})            # doctest: +SKIP
        True
        """
        return bool(await self._run(_ops.signal(job_id, name, payload, key)))

    async def job_steps(self, job_id: int) -> list[Step]:
        """`Queue.job_steps`, awaitable.

        >>> [s.name for s in await aq.job_steps(42)]                  # doctest: +SKIP
        ['charge']
        """
        steps, _ = await self._run(_ops.job_steps(job_id))
        return list(steps)
