"""The running job: `current_job()`, `JobContext`, and the `Retry` / `Snooze` / `Backoff` signals.

    from workhorse import current_job, Retry, Snooze

    @app.task(timeout="30s", retry_on=(ConnectionError,), max_attempts=5)
    def fetch(url):
        job = current_job()          # JobContext of the attempt now running
        if job.cancel_requested:     # an operator asked this job to stop
            return None
        raise Snooze("30s")          # come back in 30 s without using an attempt

The context lives in a `contextvars.ContextVar`, so that every job in flight on one event loop
(and the worker thread a sync handler runs in) sees its own. Whoever runs a handler (the worker's
executor, `workhorse.testing`) sets it with `running(ctx)` around the call; a sync handler run in
a thread sees it when the thread runs in a copy of the caller's context: anyio's
`to_thread.run_sync` copies it itself, and `in_context(fn)` wraps a callable for the other ways
(`loop.run_in_executor`, `threading.Thread`).
"""

from __future__ import annotations

import contextvars
import functools
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from ._durations import parse_duration
from .errors import InvalidOptionsError, NoCurrentJobError, WorkhorseError
from .retry import ExponentialBackoff
from .types import ClaimedJob, check_name, check_progress

P = ParamSpec("P")
R = TypeVar("R")

# Durations at most 366 days, as everywhere else a user writes one (docs/design.md, CLI durations).
MAX_DELAY = 366 * 86400.0


def _never() -> bool:
    return False


def _no_renewal() -> None:
    return None


def _no_report(done: int | float, total: int | float | None, message: str | None) -> None:
    return None


def _no_backoff(signal: Backoff) -> None:
    return None


def _no_steps() -> Any:
    # A context built by hand (a unit test of a handler): no runner keeps its steps.
    raise WorkhorseError(
        "current_job().step needs a runner that keeps the job's steps: a worker, "
        "workhorse.testing.drain() or eager()")


@dataclass(frozen=True, slots=True)
class JobContext:
    """The attempt now running, as `current_job()` returns it.

    `attempt` is 1-based (the job's attempts after this claim); `scheduled_for` is the schedule's
    occurrence or the job's first `run_at` (a retry does not move it). `cancel_requested` and
    `heartbeat()` reach the live job through the two callables its runner gives:

    >>> ctx = JobContext(id=7, task="mail.send", queue="mail", concurrency_key="t1", attempt=1,
    ...                  max_attempts=3, scheduled_for=None)
    >>> ctx.cancel_requested, ctx.last_attempt
    (False, False)
    """

    id: int
    task: str
    queue: str
    concurrency_key: str | None
    attempt: int
    max_attempts: int
    scheduled_for: datetime | None
    # Machinery, set by whoever runs the handler: read the live cancel flag; renew the lease now
    # (may raise StaleLeaseError when the lease is already lost). Both must be thread-safe.
    cancel_check: Callable[[], bool] = field(default=_never, repr=False, compare=False)
    renew: Callable[[], None] = field(default=_no_renewal, repr=False, compare=False)
    # Keep the latest progress (checked) in the runner's memory; it writes it later, not here.
    report: Callable[[int | float, int | float | None, str | None], None] = field(
        default=_no_report, repr=False, compare=False)
    # Record a backoff of this job's scope (current_job().backoff()); the runner writes it.
    back_off: Callable[[Backoff], None] = field(default=_no_backoff, repr=False, compare=False)
    # The durable steps of this run (docs/design.md "Durable execution"): the same object for
    # every call in one run, made by the runner at the first.
    steps: Callable[[], Any] = field(default=_no_steps, repr=False, compare=False)

    @classmethod
    def for_claimed(
        cls,
        job: ClaimedJob,
        *,
        cancel_check: Callable[[], bool] = _never,
        renew: Callable[[], None] = _no_renewal,
        report: Callable[[int | float, int | float | None, str | None], None] = _no_report,
        back_off: Callable[[Backoff], None] = _no_backoff,
        steps: Callable[[], Any] = _no_steps,
    ) -> JobContext:
        """The context of a claimed job's attempt. `scheduled_for` is the schedule's occurrence
        (the claim says), else the job's `run_at` on a first attempt; None for a retried job that
        no schedule fired (its run_at moved, and its first one is not kept).

        >>> ctx = JobContext.for_claimed(claimed_job, cancel_check=lambda: False)  # doctest: +SKIP
        >>> ctx.attempt  # doctest: +SKIP
        1
        """
        return cls(
            id=job.id, task=job.task, queue=job.queue, concurrency_key=job.concurrency_key,
            attempt=job.attempts, max_attempts=job.max_attempts,
            scheduled_for=job.scheduled_for if job.scheduled_for is not None
            else job.run_at if job.attempts == 1 else None,
            cancel_check=cancel_check, renew=renew, report=report, back_off=back_off,
            steps=steps,
        )

    @property
    def step(self) -> Any:
        """This run's durable steps (docs/design.md "Durable execution"): `step.run`,
        `step.sleep`, `step.wait_for`, `step.child`, `step.children`; awaited in an async
        handler (a `workhorse.durable.Steps`, or `AsyncSteps`).

        >>> charge = current_job().step.run("charge", charge_card, order_id)  # doctest: +SKIP
        """
        return self.steps()

    @property
    def cancel_requested(self) -> bool:
        """Whether an operator asked this job to stop (a sync handler should poll this).

        >>> while not current_job().cancel_requested:   # in a sync handler  # doctest: +SKIP
        ...     do_some_work()
        """
        return bool(self.cancel_check())

    @property
    def last_attempt(self) -> bool:
        """Whether a failure now would be final (no attempts left).

        >>> JobContext(id=1, task="t", queue="q", concurrency_key=None, attempt=3, max_attempts=3,
        ...            scheduled_for=None).last_attempt
        True
        """
        return self.attempt >= self.max_attempts

    def progress(
        self, done: int | float, total: int | float | None = None, message: str | None = None
    ) -> None:
        """Report how far the attempt has come. No round trip: the value is kept in the worker's
        memory, and the worker writes the latest one within about a second (at most once a
        second per job, under the job's fence, and once more when the attempt ends), so a
        handler may call this in its innermost loop. `done` and `total` are numbers >= 0 (int or
        float, finite, not bool); `message` at most 1000 characters. Bad input raises
        InvalidOptionsError, and nothing is kept.

        >>> for i, page in enumerate(pages, 1):      # in a handler  # doctest: +SKIP
        ...     render(page)
        ...     current_job().progress(i, total=len(pages), message="pages")
        """
        self.report(*check_progress(done, total, message))

    def heartbeat(self) -> None:
        """Renew the job's lease now, for a handler that wants to renew earlier than the worker
        does by itself. Raises StaleLeaseError when the lease is already lost: stop then, because
        another claim may own the job.

        >>> for chunk in chunks:                      # in a long sync handler  # doctest: +SKIP
        ...     process(chunk)
        ...     current_job().heartbeat()
        """
        self.renew()

    def backoff(
        self, retry_after: str | float | timedelta, scope: str | None = None,
        budget: str | None = None,
    ) -> None:
        """Back off this job's budget, key or queue as `raise Backoff(...)` does, but go on
        running: for code that must not raise (a finally block, a library callback). No claim
        starts a job of the scope for `retry_after`, fleet-wide, once the worker has written it
        (at its next flush, within milliseconds). Checked as Backoff checks (InvalidOptionsError).

        >>> if response.status_code == 429:            # in a handler  # doctest: +SKIP
        ...     current_job().backoff(float(response.headers["Retry-After"]))
        """
        self.back_off(Backoff(retry_after, scope=scope, budget=budget))


# A JobContext, or a callable that makes one when a handler asks: a runner of many jobs then pays
# for a context only in the handlers that call current_job().
_current: contextvars.ContextVar[JobContext | Callable[[], JobContext] | None] = (
    contextvars.ContextVar("workhorse_current_job", default=None)
)


def current_job() -> JobContext:
    """The JobContext of the job whose handler is running; NoCurrentJobError outside one.

    >>> current_job()
    Traceback (most recent call last):
    ...
    workhorse.errors.NoCurrentJobError: current_job() was called outside a running job ...
    """
    ctx = _current.get()
    if ctx is None:
        raise NoCurrentJobError(
            "current_job() was called outside a running job (it works only inside a task's "
            "handler, run by a worker, drain() or eager(); calling the task directly runs the "
            "function with no job)"
        )
    return ctx if isinstance(ctx, JobContext) else ctx()


def enter(ctx: JobContext | Callable[[], JobContext]) -> contextvars.Token[Any]:
    """`running()` without a context manager, for a runner's hot path: `current_job()` gives
    `ctx` (or `ctx()`) until `leave(token)`."""
    return _current.set(ctx)


def leave(token: contextvars.Token[Any]) -> None:
    _current.reset(token)


@contextmanager
def running(ctx: JobContext | Callable[[], JobContext]) -> Iterator[None]:
    """Within this block (in this context), `current_job()` returns `ctx`, or what `ctx()`
    returns when it is a callable (built only when a handler asks). For runners of handlers:
    the worker's executor and workhorse.testing."""
    token = _current.set(ctx)
    try:
        yield
    finally:
        _current.reset(token)


def in_context(fn: Callable[P, R]) -> Callable[P, R]:
    """`fn` bound to a copy of the current context, for a thread that would start with an empty
    one (`loop.run_in_executor`, `threading.Thread`): `current_job()` works inside it."""
    context = contextvars.copy_context()

    @functools.wraps(fn)
    def bound(*args: P.args, **kwargs: P.kwargs) -> R:
        return context.run(fn, *args, **kwargs)

    return bound


def _delay_seconds(what: str, delay: Any, *, required: bool) -> float | None:
    if delay is None:
        if required:
            raise InvalidOptionsError(f"{what} needs a delay, e.g. {what}('30s')")
        return None
    try:
        seconds = parse_duration(delay)
    except (TypeError, ValueError) as exc:
        raise InvalidOptionsError(f"{what}: bad delay {delay!r}: {exc}") from None
    if seconds > MAX_DELAY:
        raise InvalidOptionsError(f"{what}: delay {delay!r} is more than 366 days")
    return seconds


class Retry(Exception):
    """Raised by a handler: this attempt fails and the job retries after `delay` (it uses an
    attempt; with none left the job ends failed, or held). `delay=None` uses the task's backoff.
    Retry always retries, whatever the task's `retry_on`.

    >>> Retry(delay="10s").delay, Retry().delay
    (10.0, None)
    """

    def __init__(self, delay: str | float | timedelta | None = None, reason: str = "") -> None:
        self.delay = _delay_seconds("Retry", delay, required=False)
        self.reason = reason
        super().__init__(reason or (f"retry in {self.delay:g}s" if self.delay is not None
                                    else "retry"))


BACKOFF_SCOPES = ("budget", "key", "queue")
# A backoff is for a downstream's "slow down", not an outage: longer, pause the queue instead.
MAX_BACKOFF = 86400.0
# The retry policy's keywords: `Backoff(base=...)` is 0.2.0's spelling of ExponentialBackoff.
_RETRY_POLICY_FIELDS = frozenset({"base", "factor", "cap", "jitter"})


class Backoff(WorkhorseError):
    """Raised by a handler whose downstream said "slow down" (a 429 with Retry-After, a database
    failing over): no claim starts a job of the scope for `retry_after` (seconds, a timedelta or
    a duration such as "30s"; at most a day), on any worker, and this job goes back to `ready`
    with its attempt given back. Running jobs are not touched; other budgets, keys and queues
    go on. `scope`: "budget" (the job's budget, or `budget=`, every queue that counts it),
    "key" (the job's concurrency key in its queue), "queue" (its queue), or None (the default):
    the job's budget when it has one, else its queue. A scope the job does not have (no budget,
    no key) fails the job with InvalidOptionsError: no retry could change it.

    >>> signal = Backoff(retry_after=30, scope="budget")
    >>> signal.retry_after, signal.scope, signal.budget
    (30.0, 'budget', None)

    (0.2.0 called the retry delay policy `Backoff`: `Backoff(base=..., factor=..., cap=...,
    jitter=...)` still returns an `ExponentialBackoff`, with a DeprecationWarning.)
    """

    retry_after: float
    scope: str | None
    budget: str | None

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if (not args and not kwargs) or (kwargs and set(kwargs) <= _RETRY_POLICY_FIELDS):
            warnings.warn(
                "Backoff(base=..., factor=..., cap=..., jitter=...) is the retry delay policy, "
                "now named ExponentialBackoff; Backoff(retry_after, scope=...) is back-pressure "
                "raised by a handler", DeprecationWarning, stacklevel=2)
            return ExponentialBackoff(**kwargs)
        return super().__new__(cls, *args, **kwargs)

    def __init__(
        self, retry_after: str | float | timedelta, scope: str | None = None,
        budget: str | None = None, reason: str = "",
    ) -> None:
        seconds = _delay_seconds("Backoff", retry_after, required=True)
        assert seconds is not None
        if not 0 < seconds <= MAX_BACKOFF:
            raise InvalidOptionsError(
                f"Backoff: retry_after must be more than 0 and at most a day (86400 s), got "
                f"{retry_after!r}")
        if scope is not None and scope not in BACKOFF_SCOPES:
            raise InvalidOptionsError(
                f'Backoff: scope must be "budget", "key" or "queue", got {scope!r}')
        if budget is not None:
            check_name("budget", budget)
            if scope not in (None, "budget"):
                raise InvalidOptionsError(
                    f'Backoff: budget= goes with scope="budget", got scope={scope!r}')
        if not isinstance(reason, str):
            raise InvalidOptionsError(f"Backoff: reason must be a str, got {type(reason).__name__}")
        self.retry_after = seconds
        self.scope = scope
        self.budget = budget
        self.reason = reason
        what = (f"budget {budget!r}" if budget else f"its {scope}" if scope
                else "its budget, else its queue")
        super().__init__(reason or f"backed off {what} for {seconds:g}s")

    def __reduce__(self) -> tuple[Any, ...]:
        # Copied or pickled whole (the default would call Backoff(message)).
        return (Backoff, (self.retry_after, self.scope, self.budget, self.reason))


class Snooze(Exception):
    """Raised by a handler: the job comes back after `delay` without using an attempt (for a
    downstream that said 429); its capacity is freed at once.

    >>> Snooze("30s").delay
    30.0
    """

    def __init__(self, delay: str | float | timedelta, reason: str = "") -> None:
        seconds = _delay_seconds("Snooze", delay, required=True)
        assert seconds is not None
        self.delay: float = seconds
        self.reason = reason
        super().__init__(reason or f"snoozed for {seconds:g}s")
