"""The history methods of `Queue` and `AsyncQueue` (docs/design.md "History"): finished jobs of a
time range, live or moved to history, read a page at a time, and the move itself."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import date, datetime, timedelta
from typing import Any

from . import _ops
from .types import Job

# What a bound of the range may be: an aware datetime, a date, ISO 8601 text, a duration ago.
Moment = datetime | date | str | float | timedelta


class HistoryMethods:
    """`Queue`'s history methods (its `_run` runs each operation on its connection)."""

    _run: Any

    def export_history(
        self, since: Moment, until: Moment | None = None, *, queue: str | None = None
    ) -> Iterator[Job]:
        """Every job that finished in [since, until) (until: now), in finish order, whether
        still in the live table or moved to history; read a page of 1,000 at a time, each its
        own statement, so a long export holds no snapshot. Bad bounds raise
        InvalidOptionsError here, before anything is read.

        >>> for job in q.export_history("2026-12-01", "2026-12-02"):  # doctest: +SKIP
        ...     archive(job)
        """
        return self._export_pages(_ops.history_range(since, until, queue))

    def _export_pages(self, bounds: dict[str, Any]) -> Iterator[Job]:
        after: tuple[datetime, int] | None = None
        while True:
            page = self._run(_ops.history_page(bounds, after))
            yield from page
            if len(page) < _ops.EXPORT_PAGE:
                return
            last = page[-1]
            assert last.finished_at is not None
            after = (last.finished_at, last.id)

    def move_to_history(
        self, limit: int = _ops.MOVE_BATCH, *, after: float = _ops.HISTORY_AFTER
    ) -> int:
        """Move up to `limit` jobs that ended succeeded or expired at least `after` seconds ago
        to history (supervisors do this every few seconds); -1 while another mover or pruner
        runs.

        >>> q.move_to_history(after=0)                                # doctest: +SKIP
        120
        """
        return int(self._run(_ops.move_to_history(limit, after)))


class AsyncHistoryMethods:
    """`AsyncQueue`'s history methods."""

    _run: Any

    def export_history(
        self, since: Moment, until: Moment | None = None, *, queue: str | None = None
    ) -> AsyncIterator[Job]:
        """`Queue.export_history`, awaitable a page at a time (bad bounds raise here).

        >>> async for job in aq.export_history("1d"):              # doctest: +SKIP
        ...     archive(job)
        """
        return self._export_pages(_ops.history_range(since, until, queue))

    async def _export_pages(self, bounds: dict[str, Any]) -> AsyncIterator[Job]:
        after: tuple[datetime, int] | None = None
        while True:
            page = await self._run(_ops.history_page(bounds, after))
            for job in page:
                yield job
            if len(page) < _ops.EXPORT_PAGE:
                return
            last = page[-1]
            assert last.finished_at is not None
            after = (last.finished_at, last.id)

    async def move_to_history(
        self, limit: int = _ops.MOVE_BATCH, *, after: float = _ops.HISTORY_AFTER
    ) -> int:
        """`Queue.move_to_history`, awaitable.

        >>> await aq.move_to_history(after=0)                       # doctest: +SKIP
        120
        """
        return int(await self._run(_ops.move_to_history(limit, after)))
