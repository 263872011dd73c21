"""The back-pressure and hold methods of `Queue` and `AsyncQueue` (docs/design.md "Back-pressure",
"Holds"): the backoffs handlers raised that are in force, an operator's early end of them, and
the budget holds taken outside tasks."""

from __future__ import annotations

from typing import Any

from . import _ops
from .types import BackoffState, Hold


class BackoffMethods:
    """`Queue`'s back-pressure methods (its `_run` runs each operation on its connection)."""

    _run: Any

    def backoffs(self) -> list[BackoffState]:
        """The backoffs in force (budgets, queues and keys a handler backed off), soonest end
        first.

        >>> [(b.scope, b.name, b.until, b.by_job) for b in q.backoffs()]  # doctest: +SKIP
        [('budget', 'openai', datetime.datetime(2026, 12, 4, ...), 4812)]
        """
        return list(self._run(_ops.list_backoffs()))

    def clear_backoff(self, queue: str, *, key: str | None = None) -> list[BackoffState]:
        """End `queue`'s backoff and its keys' now (only `key`'s, when given); its claimers are
        woken. Returns what was cleared.

        >>> [b.scope for b in q.clear_backoff("partner-api")]         # doctest: +SKIP
        ['queue']
        """
        return list(self._run(_ops.clear_backoff("queue", queue, key), transaction=True))

    def clear_budget_backoff(self, name: str) -> list[BackoffState]:
        """End budget `name`'s backoff now; the claimers of its queues are woken. Returns what
        was cleared.

        >>> [b.name for b in q.clear_budget_backoff("openai")]        # doctest: +SKIP
        ['openai']
        """
        return list(self._run(_ops.clear_backoff("budget", name), transaction=True))


    def list_holds(self, budget: str | None = None) -> list[Hold]:
        """The budget holds whose lease runs (every budget's, or `budget`'s), oldest first,
        with their holder.

        >>> [(h.budget, h.units, h.holder, h.pid) for h in q.list_holds()]  # doctest: +SKIP
        [('openai', 1, 'workhorse-hold:web', 4182)]
        """
        return list(self._run(_ops.list_holds(budget)))


class AsyncBackoffMethods:
    """`AsyncQueue`'s back-pressure methods."""

    _run: Any

    async def backoffs(self) -> list[BackoffState]:
        """`Queue.backoffs`, awaitable.

        >>> [b.scope for b in await aq.backoffs()]                  # doctest: +SKIP
        ['budget']
        """
        return list(await self._run(_ops.list_backoffs()))

    async def clear_backoff(self, queue: str, *, key: str | None = None) -> list[BackoffState]:
        """`Queue.clear_backoff`, awaitable.

        >>> await aq.clear_backoff("partner-api", key="acme")       # doctest: +SKIP
        [BackoffState(scope='key', ...)]
        """
        return list(await self._run(_ops.clear_backoff("queue", queue, key), transaction=True))

    async def clear_budget_backoff(self, name: str) -> list[BackoffState]:
        """`Queue.clear_budget_backoff`, awaitable.

        >>> await aq.clear_budget_backoff("openai")                 # doctest: +SKIP
        [BackoffState(scope='budget', ...)]
        """
        return list(await self._run(_ops.clear_backoff("budget", name), transaction=True))

    async def list_holds(self, budget: str | None = None) -> list[Hold]:
        """`Queue.list_holds`, awaitable.

        >>> [h.units for h in await aq.list_holds("openai")]        # doctest: +SKIP
        [1]
        """
        return list(await self._run(_ops.list_holds(budget)))
