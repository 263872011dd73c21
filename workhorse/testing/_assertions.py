"""`assert_enqueued()` and `refute_enqueued()`: what an app enqueued, read from the real
database (or the framework's connection the app enqueues on)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .. import _ops, database
from ..app import App
from ..errors import InvalidOptionsError
from ..queue import Queue
from ..task import Task
from ..types import Job, JobStatus


def framework_connection(app: App) -> Any:
    """The framework's connection (Django's, in an atomic block or a TestCase) the app's jobs
    are enqueued on now, so that the drain and the assertions see them too; None: the app's
    database, on a connection of their own."""
    return database.framework_connection(app.explicit_database_url)


def _task_name(app: App, task: Task[Any, Any] | str) -> str:
    if isinstance(task, Task):
        return task.name
    if isinstance(task, str) and task:
        return task
    raise InvalidOptionsError(f"task must be a Task or a task name, got {task!r}")


def _normalised(value: Any, what: str) -> Any:
    """As the stored payload has it: through JSON (a tuple becomes a list)."""
    return json.loads(_ops.encode_json(value, what))


def _waiting(app: App, name: str) -> list[Job]:
    """The task's ready, scheduled and waiting (workflow members) jobs, oldest first (on the
    framework's connection when the app's enqueues join its transaction: only it sees them
    before the commit)."""

    def listed(queue: Queue) -> list[Job]:
        return [job for status in (JobStatus.READY, JobStatus.SCHEDULED, JobStatus.WAITING)
                for job in queue.list_jobs(status=status.value, task=name, limit=10_000)]

    # The task's queue's database (docs/design.md "Several databases"); a name the app does
    # not register: every database. Only the default one joins a framework's transaction.
    task = app.tasks.get(name)
    names = [app.database_of(task.queue.name)] if task is not None else app.database_names
    jobs = []
    for where in names:
        joined = framework_connection(app) if where == database.DEFAULT_DATABASE else None
        if joined is not None:
            jobs.extend(listed(Queue(joined)))
            continue
        with app.connection(where) as conn:
            jobs.extend(listed(Queue(conn)))
    return sorted(jobs, key=lambda job: job.id)


def _matching(
    app: App, task: Task[Any, Any] | str, args: Sequence[Any] | None,
    kwargs: Mapping[str, Any] | None,
) -> tuple[str, list[Job], list[Job], str]:
    name = _task_name(app, task)
    if args is not None and (isinstance(args, str | bytes) or not isinstance(args, Sequence)):
        raise InvalidOptionsError(f"args must be a list or tuple, got {args!r}")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise InvalidOptionsError(f"kwargs must be a dict, got {kwargs!r}")
    want_args = None if args is None else _normalised(list(args), "args")
    want_kwargs = None if kwargs is None else _normalised(dict(kwargs), "kwargs")
    waiting = _waiting(app, name)
    found = [
        job for job in waiting
        if isinstance(job.payload, dict)
        and (want_args is None or job.payload.get("args", []) == want_args)
        and (want_kwargs is None or job.payload.get("kwargs", {}) == want_kwargs)
    ]
    wanted = ", ".join(
        part for part in (
            f"args={want_args!r}" if want_args is not None else "",
            f"kwargs={want_kwargs!r}" if want_kwargs is not None else "",
        ) if part
    )
    return name, waiting, found, wanted


def _described(jobs: list[Job]) -> str:
    if not jobs:
        return "none"
    shown = [f"  job {job.id} ({job.status.value}, queue {job.queue!r}): {job.payload!r}"
             for job in jobs[:10]]
    more = [f"  ... and {len(jobs) - 10} more"] if len(jobs) > 10 else []
    return "\n" + "\n".join(shown + more)


def assert_enqueued(
    app: App,
    task: Task[Any, Any] | str,
    args: Sequence[Any] | None = None,
    kwargs: Mapping[str, Any] | None = None,
    count: int | None = None,
) -> list[Job]:
    """Assert that `task` has ready or scheduled jobs in the app's database whose stored
    arguments match (`args` / `kwargs` None: any); exactly `count` of them when given, at least
    one otherwise. Returns the matching jobs, oldest first.

    >>> send.delay({"tenant": "t1"})                                  # doctest: +SKIP
    >>> assert_enqueued(app, send, args=({"tenant": "t1"},), count=1)  # doctest: +SKIP
    """
    if count is not None and (isinstance(count, bool) or not isinstance(count, int)
                              or count < 0):
        raise InvalidOptionsError(f"count must be an int >= 0 or None, got {count!r}")
    name, waiting, found, wanted = _matching(app, task, args, kwargs)
    if (count is None and not found) or (count is not None and len(found) != count):
        expected = f"{count}" if count is not None else "at least 1"
        raise AssertionError(
            f"expected {expected} ready or scheduled {name} job(s)"
            + (f" with {wanted}" if wanted else "")
            + f", found {len(found)}; the task's waiting jobs: {_described(waiting)}"
        )
    return found


def refute_enqueued(
    app: App,
    task: Task[Any, Any] | str,
    args: Sequence[Any] | None = None,
    kwargs: Mapping[str, Any] | None = None,
) -> None:
    """Assert that `task` has no ready or scheduled job whose stored arguments match
    (`args` / `kwargs` None: any)."""
    name, _, found, wanted = _matching(app, task, args, kwargs)
    if found:
        raise AssertionError(
            f"expected no ready or scheduled {name} job"
            + (f" with {wanted}" if wanted else "")
            + f", found {len(found)}: {_described(found)}"
        )
