"""What a framework integration runs around the worker's processes and jobs, registered once at
its setup (`workhorse.contrib.django` registers Django's connection closing, as Celery does):

  - `before_fork` hooks run in the supervisor before each slot is forked, so that no slot
    inherits a live socket of the framework's (a slot forked with the parent's open connection
    would speak on it, interleaved with the parent);
  - `between_jobs` hooks run in a slot's handler thread before and after each sync job, where
    the framework's thread-local connections live (Django: close the unusable or expired ones).

A hook's error is logged, never raised: a job must not fail for the framework's housekeeping.

    from workhorse.worker import hooks
    hooks.add_before_fork(django.db.connections.close_all)
    hooks.add_between_jobs(django.db.close_old_connections)
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from ._threads import HandlerThreads

log = logging.getLogger("workhorse.worker")

_before_fork: list[Callable[[], None]] = []
_between_jobs: list[Callable[[], None]] = []


def add_before_fork(hook: Callable[[], None]) -> None:
    """Run `hook()` in the supervisor before each slot is forked (once per hook).

    >>> add_before_fork(print); remove(print)
    """
    if hook not in _before_fork:
        _before_fork.append(hook)


def add_between_jobs(hook: Callable[[], None]) -> None:
    """Run `hook()` in the handler's thread before and after each sync job (once per hook).

    >>> add_between_jobs(print); remove(print)
    """
    if hook not in _between_jobs:
        _between_jobs.append(hook)


def remove(hook: Callable[[], None]) -> None:
    """Unregister `hook` wherever it is registered.

    >>> remove(print)
    """
    for hooks in (_before_fork, _between_jobs):
        while hook in hooks:
            hooks.remove(hook)


def _run(hooks: list[Callable[[], None]], when: str) -> None:
    for hook in list(hooks):
        try:
            hook()
        except Exception as exc:
            log.warning("%s hook %r failed: %s", when, hook, exc)


def run_before_fork() -> None:
    """Run the `before_fork` hooks (the supervisor calls this before each fork).

    >>> run_before_fork()
    """
    _run(_before_fork, "before-fork")


def _between(fn: Callable[[], Any]) -> Any:
    _run(_between_jobs, "between-jobs")
    try:
        return fn()
    finally:
        _run(_between_jobs, "between-jobs")


class _HookedThreads(HandlerThreads):
    """Handler threads that run the `between_jobs` hooks around each job, in its thread."""

    async def run(self, fn: Callable[[], Any]) -> Any:
        return await super().run(functools.partial(_between, fn))


def handler_threads(size: int | None, name: str) -> HandlerThreads:
    """The threads a slot runs sync handlers in: plain ones, or, when `between_jobs` hooks are
    registered, ones that run them around each job.

    >>> type(handler_threads(2, "doc")).__name__
    'HandlerThreads'
    """
    if _between_jobs:
        return _HookedThreads(size, name)
    return HandlerThreads(size, name)
