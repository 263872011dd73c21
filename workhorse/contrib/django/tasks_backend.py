"""A backend for Django's own tasks framework (`django.tasks`, Django >= 6.0, Python >= 3.12):
`@task`-decorated Django code enqueues into workhorse and gets its budgets.

    TASKS = {"default": {
        "BACKEND": "workhorse.contrib.django.TasksBackend",
        "QUEUES": ["default", "emails"],                        # Django's own check of queue names
        "OPTIONS": {"app": "shop.tasks:app",                      # default: WORKHORSE_APP
                    "queues": {"emails": {"max_active": 5}}},    # budgets by queue
    }}

Each Django task is registered in the App by its module path (`shop.mail.send_welcome`), on a
queue named as its `queue_name`, with the limits `OPTIONS["queues"]` gives that queue; so a worker
of that App (`manage.py workhorse worker`) runs it. A result's id is the job's id as a string;
Django priorities (-100..100, higher first) are workhorse priorities as they are (workhorse's
range is wider, and higher runs first too); `run_after` is the job's `run_at`. Inside
`transaction.atomic()` the enqueue joins Django's transaction like any other. With no App named,
the backend's own `App("django")` is used: `manage.py workhorse worker
workhorse.contrib.django.tasks_backend:app`.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from django.conf import settings
from django.tasks import DEFAULT_TASK_QUEUE_NAME
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import Task as DjangoTask
from django.tasks.base import TaskContext, TaskError, TaskResult, TaskResultStatus
from django.tasks.exceptions import TaskResultDoesNotExist

from ...app import App
from ...errors import InvalidOptionsError
from ...types import JobStatus

# The App of a project that names none.
app = App("django")

_STATUSES = {
    JobStatus.SCHEDULED: TaskResultStatus.READY,
    JobStatus.READY: TaskResultStatus.READY,
    JobStatus.ACTIVE: TaskResultStatus.RUNNING,
    JobStatus.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
}
_LIMITS = ("max_active", "max_active_per_key", "rate_limit", "rate_limit_per_key")


class _Runner:
    """What the workhorse task calls: the Django task's function, with its context if it takes
    one (registered by name, so the worker finds it as the web process enqueued it)."""

    def __init__(self, backend: TasksBackend, task: DjangoTask) -> None:
        self.backend = backend
        self.task = task
        self.__name__ = task.func.__name__
        self.__qualname__ = task.func.__qualname__
        self.__module__ = task.func.__module__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from ...context import current_job

        if not self.task.takes_context:
            return self.task.call(*args, **kwargs)
        job = current_job()
        result = self.backend.result_for(self.task, job.id, TaskResultStatus.RUNNING, args,
                                         kwargs, attempts=job.attempt)
        return self.task.call(TaskContext(task_result=result), *args, **kwargs)


class TasksBackend(BaseTaskBackend):
    """`django.tasks` on workhorse: enqueue, priorities, `run_after`, results, async tasks.

    >>> TASKS = {"default": {"BACKEND": "workhorse.contrib.django.TasksBackend"}}  # doctest: +SKIP
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        options = dict(self.options)
        self.app_reference: str | None = options.get("app") or getattr(
            settings, "WORKHORSE_APP", None)
        self.limits: dict[str, dict[str, Any]] = dict(options.get("queues") or {})
        for name, limits in self.limits.items():
            unknown = set(limits) - set(_LIMITS)
            if unknown:
                raise InvalidOptionsError(
                    f"TASKS[{alias!r}]['OPTIONS']['queues'][{name!r}] has {sorted(unknown)}; "
                    f"a queue's budget takes {', '.join(_LIMITS)}")
        if "QUEUES" not in params:  # the budgets' queues are valid names too
            self.queues = {DEFAULT_TASK_QUEUE_NAME, *self.limits}
        self._pending: list[DjangoTask] = []

    # ---- the App ---------------------------------------------------------------------------

    def app(self, importing: bool = True) -> App | None:
        """The App jobs go to (None while its module is still being imported)."""
        if not self.app_reference:
            return app
        module_name, _, attribute = self.app_reference.partition(":")
        module = sys.modules.get(module_name)
        if module is None and importing:
            module = importlib.import_module(module_name)
        found = getattr(module, attribute or "app", None) if module is not None else None
        if found is None:
            return None
        if not isinstance(found, App):
            raise InvalidOptionsError(f"{self.app_reference!r} is not a workhorse.App")
        return found

    def register(self, task: DjangoTask, target: App | None = None) -> Any:
        """The workhorse task for a Django task, registered on first sight."""
        target = target or self.app()
        if target is None:
            self._pending.append(task)
            return None
        for pending in self._pending[:]:
            self._pending.remove(pending)
            self.register(pending, target)
        name = task.module_path
        existing = target.tasks.get(name)
        if existing is not None:
            return existing
        limits = self.limits.get(task.queue_name, {})
        queue = target.queue(task.queue_name, **limits)
        return target.task(name=name, queue=queue, priority=task.priority)(
            _Runner(self, task))

    def prepare(self) -> None:
        """Register what was decorated while the App's module was being imported (the contrib
        app calls this after autodiscovery, so that a worker knows every Django task)."""
        target = self.app()
        if target is not None and self._pending:
            self.register(self._pending[0], target)

    # ---- django.tasks ----------------------------------------------------------------------

    def validate_task(self, task: DjangoTask) -> None:
        super().validate_task(task)
        self.register(task, self.app(importing=False))

    def enqueue(self, task: DjangoTask, args: Any, kwargs: Any) -> TaskResult:
        self.validate_task(task)
        registered = self.register(task)
        options: dict[str, Any] = {"queue": task.queue_name, "priority": task.priority}
        if task.run_after is not None:
            options["run_at"] = task.run_after
        handle = registered.apply_async(tuple(args), dict(kwargs), **options)
        return self.result_for(task, handle.id, TaskResultStatus.READY, args, kwargs)

    def get_result(self, result_id: str) -> TaskResult:
        target = self.app()
        try:
            job = target.get_job(int(result_id)) if target is not None else None
        except ValueError:
            job = None
        if job is None or target is None:
            raise TaskResultDoesNotExist(result_id)
        registered = target.tasks.get(job.task)
        runner = getattr(registered, "fn", None)
        if not isinstance(runner, _Runner):
            raise TaskResultDoesNotExist(result_id)
        status = _STATUSES.get(job.status, TaskResultStatus.FAILED)
        payload = job.payload if isinstance(job.payload, dict) else {}
        result = self.result_for(runner.task, job.id, status, payload.get("args", []),
                                 payload.get("kwargs", {}), attempts=job.attempts)
        object.__setattr__(result, "enqueued_at", job.enqueued_at)
        object.__setattr__(result, "started_at", job.started_at)
        object.__setattr__(result, "last_attempted_at", job.started_at)
        object.__setattr__(result, "finished_at", job.finished_at)
        if status == TaskResultStatus.SUCCESSFUL:
            object.__setattr__(result, "_return_value", job.result)
        if job.error and status == TaskResultStatus.FAILED:
            kind = str(job.error.get("type") or "Exception")
            path = kind if "." in kind else f"builtins.{kind}"
            result.errors.append(TaskError(exception_class_path=path,
                                           traceback=str(job.error.get("traceback") or "")))
        return result

    def result_for(self, task: DjangoTask, job_id: int, status: TaskResultStatus, args: Any,
                   kwargs: Any, attempts: int = 0) -> TaskResult:
        return TaskResult(
            task=task, id=str(job_id), status=status, enqueued_at=None, started_at=None,
            finished_at=None, last_attempted_at=None, args=list(args), kwargs=dict(kwargs),
            backend=self.alias, errors=[], worker_ids=["workhorse"] * attempts,
        )
