"""The dead-letter methods of `Queue` and `AsyncQueue` (docs/design.md "Dead letters"): list,
redrive, purge and the audit log, each one operation of `_ops.dead` run on the queue's
connection. Kept apart so that queue.py stays one concern's size."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from . import _ops
from .types import AuditEntry, Job, PurgeReport, RateLimit, RedriveReport


class DeadLetterMethods:
    """`Queue`'s dead-letter methods (its `_run` runs each operation on its connection)."""

    _run: Any

    def list_dead(
        self,
        *,
        queue: str | None = None,
        task: str | None = None,
        tag: str | None = None,
        error_type: str | None = None,
        since: datetime | float | str | timedelta | None = None,
        limit: int = 50,
    ) -> list[Job]:
        """The dead letters (jobs that ended failed or held), newest first, filtered by queue,
        task, tag, error type (`error["type"]`) and `since` (an aware datetime, or a duration:
        finished that long ago or less).

        >>> [j.id for j in q.list_dead(queue="mail", error_type="SMTPError")]  # doctest: +SKIP
        [91, 90]
        """
        return self._run(_ops.list_dead(queue=queue, task=task, tag=tag, error_type=error_type,
                                        since=since, limit=limit))

    def redrive(
        self,
        ids: Iterable[int] | None = None,
        *,
        queue: str | None = None,
        task: str | None = None,
        tag: str | None = None,
        error_type: str | None = None,
        since: datetime | float | str | timedelta | None = None,
        dry_run: bool = False,
        rate: str | RateLimit | None = None,
        reason: str | None = None,
    ) -> RedriveReport:
        """New attempts of the dead letters the filters select (and `ids`, when given), each
        queue's released in its admission order no faster than `rate` ("N/P"; default: the
        queue's own rate limit, else all at once); the queue's limits still decide every start.
        Written to the audit log with `reason`. `dry_run=True` writes nothing and reports
        exactly the jobs, and their release times, the real run would have now.

        >>> q.redrive(queue="mail", rate="10/s", reason="SMTP is back").count  # doctest: +SKIP
        500
        """
        return self._run(_ops.redrive(ids=ids, queue=queue, task=task, tag=tag,
                                      error_type=error_type, since=since, dry_run=dry_run,
                                      rate=rate, reason=reason))

    def purge(
        self,
        ids: Iterable[int] | None = None,
        *,
        queue: str | None = None,
        task: str | None = None,
        tag: str | None = None,
        error_type: str | None = None,
        since: datetime | float | str | timedelta | None = None,
        dry_run: bool = False,
        reason: str | None = None,
    ) -> PurgeReport:
        """Delete the dead letters the filters select (a workflow's members stay: a workflow
        goes whole with `prune_jobs`), written to the audit log with `reason`, which a real
        purge needs. `dry_run=True` writes nothing and reports exactly the jobs it would delete.

        >>> q.purge(queue="mail", error_type="BadAddress", reason="bounced").count  # doctest: +SKIP
        12
        """
        return self._run(_ops.purge(ids=ids, queue=queue, task=task, tag=tag,
                                    error_type=error_type, since=since, dry_run=dry_run,
                                    reason=reason))

    def audit_log(self, *, limit: int = 50, action: str | None = None) -> list[AuditEntry]:
        """The redrives and purges done, newest first (`action`: "redrive" or "purge").

        >>> [(e.action, e.count, e.reason) for e in q.audit_log()]  # doctest: +SKIP
        [('redrive', 500, 'SMTP is back')]
        """
        return self._run(_ops.audit_log(limit, action))



class AsyncDeadLetterMethods:
    """`AsyncQueue`'s dead-letter methods, awaitable."""

    _run: Any

    async def list_dead(
        self,
        *,
        queue: str | None = None,
        task: str | None = None,
        tag: str | None = None,
        error_type: str | None = None,
        since: datetime | float | str | timedelta | None = None,
        limit: int = 50,
    ) -> list[Job]:
        """`Queue.list_dead`, awaitable.

        >>> await aq.list_dead()  # doctest: +SKIP
        """
        return await self._run(_ops.list_dead(queue=queue, task=task, tag=tag,
                                              error_type=error_type, since=since, limit=limit))

    async def redrive(
        self,
        ids: Iterable[int] | None = None,
        *,
        queue: str | None = None,
        task: str | None = None,
        tag: str | None = None,
        error_type: str | None = None,
        since: datetime | float | str | timedelta | None = None,
        dry_run: bool = False,
        rate: str | RateLimit | None = None,
        reason: str | None = None,
    ) -> RedriveReport:
        """`Queue.redrive`, awaitable.

        >>> await aq.redrive()  # doctest: +SKIP
        """
        return await self._run(_ops.redrive(ids=ids, queue=queue, task=task, tag=tag,
                                      error_type=error_type, since=since, dry_run=dry_run,
                                      rate=rate, reason=reason))

    async def purge(
        self,
        ids: Iterable[int] | None = None,
        *,
        queue: str | None = None,
        task: str | None = None,
        tag: str | None = None,
        error_type: str | None = None,
        since: datetime | float | str | timedelta | None = None,
        dry_run: bool = False,
        reason: str | None = None,
    ) -> PurgeReport:
        """`Queue.purge`, awaitable.

        >>> await aq.purge()  # doctest: +SKIP
        """
        return await self._run(_ops.purge(ids=ids, queue=queue, task=task, tag=tag,
                                    error_type=error_type, since=since, dry_run=dry_run,
                                    reason=reason))

    async def audit_log(self, *, limit: int = 50, action: str | None = None) -> list[AuditEntry]:
        """`Queue.audit_log`, awaitable.

        >>> await aq.audit_log()  # doctest: +SKIP
        """
        return await self._run(_ops.audit_log(limit, action))
