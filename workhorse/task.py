"""Task: a registered handler, and the Celery-style ways to enqueue it.

A Task and the JobHandles it returns talk to an `Enqueuer` (handle.py: what sends calls and
reads, waits for, cancels and retries jobs), not to App: App is one, and a test double or an
eager mode can be another.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Generic, ParamSpec, TypeVar

from ._calls import (
    Call,
    CostSpec,
    KeySpec,
    budget_name,
    check_call_options,
    resolve_cost,
    resolve_key,
)
from ._durations import parse_duration
from .canvas import Plan, Signature
from .context import Retry
from .errors import InvalidOptionsError
from .handle import JobHandle, WorkflowEnqueuer, dependencies, dependency_databases
from .retry import RetryBackoff
from .types import BudgetSpec, EnqueueOptions, QueueSpec, Unique, check_tags, retention_seconds

P = ParamSpec("P")
R = TypeVar("R")

def check_retry_on(value: Any) -> tuple[type[BaseException], ...]:
    if not isinstance(value, tuple) or not all(
        isinstance(item, type) and issubclass(item, BaseException) for item in value
    ):
        raise InvalidOptionsError(
            f"retry_on must be a tuple of exception classes, e.g. retry_on=(ConnectionError,), "
            f"got {value!r}"
        )
    return value


def timeout_seconds(value: Any) -> float | None:
    if value is None:
        return None
    try:
        seconds = parse_duration(value)
    except (TypeError, ValueError) as exc:
        raise InvalidOptionsError(f"timeout: {exc}") from None
    if seconds <= 0:
        raise InvalidOptionsError(f"timeout must be more than 0, got {value!r} (None: no limit)")
    if seconds > 366 * 86400:
        raise InvalidOptionsError(f"timeout must be at most 366 days, got {value!r}")
    return seconds


def _signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins and C callables have none: bind nothing
        return None


def _argument_checker(signature: inspect.Signature | None) -> Callable[..., None] | None:
    """A do-nothing function with `signature`'s parameters (no annotations; each default None):
    calling it checks a call's arguments at the interpreter's own speed, several times faster
    than `Signature.bind`, which then only explains a call that does not fit."""
    if signature is None:
        return None
    empty = inspect.Parameter.empty
    parameters = [
        p.replace(annotation=empty, default=None if p.default is not empty else empty)
        for p in signature.parameters.values()
    ]
    text = str(signature.replace(parameters=parameters, return_annotation=empty))
    namespace: dict[str, Any] = {}
    try:
        exec(f"def check{text}:\n    return None\n", namespace)
    except SyntaxError:  # not expected from a real signature; bind() still checks
        return None
    checker: Callable[..., None] = namespace["check"]
    return checker


def _shape(signature: inspect.Signature) -> str:
    bare = [p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()]
    return str(signature.replace(parameters=bare, return_annotation=inspect.Signature.empty))


class Task(Generic[P, R]):
    """A handler registered with `@app.task`. Calling it runs the function in-process.

    >>> app = App("docs")
    >>> @app.task(name="math.add")
    ... def add(a, b):
    ...     return a + b
    >>> add(2, 3), add.name, add.queue.name     # calling it runs the function, here
    (5, 'math.add', 'math.add')
    """

    def __init__(
        self,
        enqueuer: WorkflowEnqueuer,
        fn: Callable[P, R],
        *,
        name: str,
        queue: QueueSpec,
        concurrency_key: KeySpec,
        priority: int,
        max_attempts: int,
        retry_backoff: RetryBackoff | None,
        on_failure: str,
        lease: float | None,
        retention: dict[str, float | None] | None = None,
        retry_on: tuple[type[BaseException], ...] = (Exception,),
        timeout: float | str | None = None,
        unique: Unique | None = None,
        cost: CostSpec = 1,
        rate_cost: CostSpec = 1,
        weight: int = 1,
        budget: str | None = None,
        tags: tuple[str, ...] = (),
        expires: float | str | timedelta | datetime | None = None,
        deadline: float | str | timedelta | datetime | None = None,
    ) -> None:
        self.enqueuer = enqueuer
        # docs/design.md "Deadlines": every job's expiry and deadline unless the call gives its own.
        self.expires = expires
        self.deadline = deadline
        # docs/design.md "Tags": every job's tags; a call site adds its own.
        self.tags = tags
        # docs/design.md "Named budgets": the budget its jobs name unless the call site names
        # another.
        self.budget = budget
        # docs/design.md "Fair share and job cost": the job's units (a value or a callable of the
        # arguments, called at enqueue), its rate units and its key's weight.
        self.cost = cost
        self.rate_cost = rate_cost
        self.weight = weight
        self.fn = fn
        self.name = name
        self.queue = queue
        self.concurrency_key = concurrency_key
        self.priority = priority
        self.max_attempts = max_attempts
        self.retry_backoff = retry_backoff
        self.on_failure = on_failure
        self.lease = lease
        self.retention = retention_seconds(None) if retention is None else dict(retention)
        # What the worker hands the database when this task's job ends (the outcome's retention).
        self.retention_json = json.dumps(
            {status: seconds for status, seconds in self.retention.items() if seconds is not None})
        # Only these exception types retry (Retry always does); any other fails the job at once.
        self.retry_on: tuple[type[BaseException], ...] = check_retry_on(retry_on)
        # The limit per attempt, in seconds; None: no limit.
        self.timeout: float | None = timeout_seconds(timeout)
        self.signature = _signature(fn)
        self.argument_checker = _argument_checker(self.signature)
        # `send(message, *, urgent=False)`, for errors: annotations are noise there.
        self.call_shape = name + (_shape(self.signature) if self.signature is not None else "")
        # Every call's default unique rule (a call's unique= replaces it; unique=False drops it).
        self.unique: Unique | None = self.check_unique(unique)
        self.is_async = inspect.iscoroutinefunction(fn)
        self.__name__ = getattr(fn, "__name__", name)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.queue.name!r}>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def should_retry(self, exc: BaseException) -> bool:
        """Whether a failed attempt that raised `exc` may retry (attempts permitting): a Retry
        always may; otherwise only the task's `retry_on` types.

        >>> app = App("docs")
        >>> @app.task(name="net.fetch", retry_on=(ConnectionError,))
        ... def fetch(url): ...
        >>> fetch.should_retry(ConnectionResetError()), fetch.should_retry(ValueError())
        (True, False)
        >>> fetch.should_retry(Retry("10s"))
        True
        """
        return isinstance(exc, (Retry, *self.retry_on))

    def check_arguments(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """InvalidOptionsError when `fn(*args, **kwargs)` could not bind to the function.

        >>> app = App("docs")
        >>> @app.task(name="mail.send", queue="mail", concurrency_key=lambda to, **_: to)
        ... def send(to, subject=""): ...
        >>> send.check_arguments(["ann"], {"subject": "hi"})   # fits: nothing happens
        >>> send.check_arguments([], {})
        Traceback (most recent call last):
        ...
        workhorse.errors.InvalidOptionsError: mail.send(to, subject=''): the arguments ...
        """
        if self.signature is None:
            return
        if self.argument_checker is not None:
            try:
                self.argument_checker(*args, **kwargs)
                return
            except TypeError:
                pass  # bind() says why, in terms of the task's own signature
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidOptionsError(
                f"{self.call_shape}: the arguments do not match: {exc}"
            ) from None

    def check_unique(self, unique: object) -> Unique | None:
        """`unique` if it is None or a `Unique` whose `keys` this task's function takes; else
        InvalidOptionsError.

        >>> app = App("docs")
        >>> @app.task(name="users.refresh")
        ... def refresh(user_id, force=False): ...
        >>> refresh.check_unique(Unique(keys=("user_id",))).keys
        ('user_id',)
        >>> refresh.check_unique(Unique(keys=("uid",)))
        Traceback (most recent call last):
        ...
        workhorse.errors.InvalidOptionsError: users.refresh(user_id, force=False): Unique.keys ...
        """
        if unique is None:
            return None
        if not isinstance(unique, Unique):
            raise InvalidOptionsError(f"unique must be a workhorse.Unique, got {unique!r}")
        if unique.keys is not None and self.signature is not None:
            parameters = self.signature.parameters.values()
            takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
            named = {p.name for p in parameters if p.kind not in (
                inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)}
            unknown = [key for key in unique.keys if key not in named]
            if unknown and not takes_any:
                raise InvalidOptionsError(
                    f"{self.call_shape}: Unique.keys names {', '.join(map(repr, unknown))}, "
                    "which the function does not take")
        return unique

    def bound_arguments(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The call's arguments by parameter name, defaults applied, as a unique job compares
        them: `f(42)` and `f(user_id=42)` give the same. Extra keyword arguments (`**kw`) sit
        beside the named ones; extra positional ones (`*args`) under their parameter's name.

        >>> app = App("docs")
        >>> @app.task(name="users.refresh")
        ... def refresh(user_id, force=False): ...
        >>> refresh.bound_arguments((42,), {}) == refresh.bound_arguments((), {"user_id": 42})
        True
        >>> refresh.bound_arguments((42,), {})
        {'user_id': 42, 'force': False}
        """
        if self.signature is None:
            return {"args": list(args), "kwargs": dict(kwargs)}
        bound = self.signature.bind(*args, **kwargs)  # checked already: it binds
        bound.apply_defaults()
        values: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            kind = self.signature.parameters[name].kind
            if kind is inspect.Parameter.VAR_KEYWORD:
                for key, extra in value.items():
                    values.setdefault(key, extra)
            elif kind is inspect.Parameter.VAR_POSITIONAL:
                values[name] = list(value)
            else:
                values[name] = value
        return values

    def call(
        self,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        queue: str | QueueSpec | None = None,
        concurrency_key: KeySpec = None,
        priority: int | None = None,
        delay: float | str | timedelta | None = None,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
        idempotency_key: str | None = None,
        countdown: float | timedelta | None = None,
        eta: datetime | None = None,
        unique: Unique | bool | None = None,
        job_key: str | None = None,
        job_key_mode: str = "replace",
        cost: CostSpec | None = None,
        rate_cost: CostSpec | None = None,
        weight: int | None = None,
        budget: str | BudgetSpec | None = None,
        tags: Sequence[str] | None = None,
        expires: float | str | timedelta | datetime | None = None,
        deadline: float | str | timedelta | datetime | None = None,
    ) -> Call:
        """Resolve one enqueue: the call site wins over the decorator. `countdown` and `eta`
        are Celery's spellings of `delay` and `run_at`.

        >>> app = App("docs")
        >>> @app.task(name="mail.send", queue="mail", concurrency_key=lambda to, **_: to)
        ... def send(to, subject=""): ...
        >>> call = send.call(("ann",), {"subject": "hi"}, priority=5, countdown=30)
        >>> call.payload, call.options.concurrency_key, call.options.priority
        ({'args': ['ann'], 'kwargs': {'subject': 'hi'}}, 'ann', 5)
        """
        if isinstance(args, str | bytes) or not isinstance(args, Sequence):
            raise InvalidOptionsError(f"args must be a list or tuple, got {args!r}")
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise InvalidOptionsError(f"kwargs must be a dict, got {kwargs!r}")
        kwargs = dict(kwargs or {})
        if not all(isinstance(name, str) for name in kwargs):
            raise InvalidOptionsError(f"kwargs must have str keys, got {list(kwargs)!r}")
        if countdown is not None:
            if delay is not None:
                raise InvalidOptionsError("give delay or countdown (the same thing), not both")
            delay = countdown
        if eta is not None:
            if run_at is not None:
                raise InvalidOptionsError("give run_at or eta (the same thing), not both")
            run_at = eta
        if delay is not None and run_at is not None:
            raise InvalidOptionsError(
                "give a delay (delay/countdown) or a time (run_at/eta), not both")
        self.check_arguments(args, kwargs)
        if unique is False:
            unique_rule = None  # this call drops the task's unique rule
        elif unique is None or unique is True:
            if unique is True and self.unique is None:
                raise InvalidOptionsError(
                    "unique=True needs a task declared with unique=Unique(...); pass a Unique")
            unique_rule = self.unique
        else:
            unique_rule = self.check_unique(unique)
        key_spec = concurrency_key if concurrency_key is not None else self.concurrency_key
        key = resolve_key(key_spec, args, kwargs)
        if queue is None:
            queue_name = self.queue.name
        else:
            queue_name = queue.name if isinstance(queue, QueueSpec) else queue
        options = EnqueueOptions(
            queue=queue_name,
            concurrency_key=key,
            priority=self.priority if priority is None else priority,
            run_at=run_at,
            delay=delay,
            max_attempts=self.max_attempts if max_attempts is None else max_attempts,
            idempotency_key=idempotency_key,
            unique=unique_rule,
            job_key=job_key,
            job_key_mode=job_key_mode,
            cost=resolve_cost("cost", self.cost if cost is None else cost, args, kwargs),
            rate_cost=resolve_cost("rate_cost", self.rate_cost if rate_cost is None else rate_cost,
                                   args, kwargs),
            weight=self.weight if weight is None else weight,
            budget=self.budget if budget is None else budget_name(budget),
            # The call's tags add to the task's (the task's first, repeats dropped).
            tags=self.tags + check_tags(tags) if tags is not None else self.tags,
            expires=self.expires if expires is None else expires,
            deadline=self.deadline if deadline is None else deadline,
        )
        arguments = None if unique_rule is None else self.bound_arguments(args, kwargs)
        return Call(self.name, {"args": list(args), "kwargs": kwargs}, options, self.on_failure,
                    arguments)

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """Enqueue with the decorator's options: `send.delay({"tenant": "t1"})`.

        >>> h = send.delay({"tenant": "t1"})  # doctest: +SKIP
        >>> h.id  # doctest: +SKIP
        42
        """
        return self.enqueuer.enqueue_calls([self.call(args, kwargs)])[0]

    def apply_async(
        self,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        connection: Any = None,
        **options: Any,
    ) -> JobHandle:
        """Enqueue with call-site options (queue, concurrency_key, priority, delay, run_at,
        max_attempts, idempotency_key, unique, job_key, job_key_mode, cost, rate_cost,
        weight, budget, tags: added to the task's, expires, deadline); `connection=` enqueues
        inside the caller's transaction. With an idempotency key, a job of this task with that
        key that still exists is returned instead of a new one; with `unique`, an equal job in
        the rule's states; with a `job_key`, the key's pending job, updated (see
        docs/job-keys.md).
        The handle's `duplicate` says whether no row was inserted.

        >>> send.apply_async(({"tenant": "t1"},), queue="mail-bulk", priority=5,  # doctest: +SKIP
        ...                  countdown=30, idempotency_key="invoice-7")
        JobHandle(id=43)
        """
        depends_on = options.pop("depends_on", None)
        check_call_options(options, "apply_async")
        if depends_on is not None:
            return self._after(args, kwargs, options, depends_on, connection)
        return self.enqueuer.enqueue_calls([self.call(args, kwargs, **options)], connection)[0]

    def _after(self, args: Sequence[Any], kwargs: Mapping[str, Any] | None,
               options: dict[str, Any], depends_on: Any, connection: Any) -> JobHandle:
        """One job that runs after `depends_on` succeeded (a workflow of one member); an empty
        list is no dependency. Handles become ids here, with no I/O: a WorkflowHandle's result
        members are read by the enqueue itself, on its connection."""
        parents = dependencies(depends_on)
        call = self.call(args, kwargs, **options)
        home = self.enqueuer.database_of(call.options.queue)
        strangers = dependency_databases(depends_on) - {home}
        if strangers:
            raise InvalidOptionsError(
                f"depends_on names jobs of database {', '.join(sorted(strangers))}, and this "
                f"job's queue {call.options.queue!r} lives in {home!r}: a job depends only on "
                "jobs of its own database (docs/design.md \"Several databases\")")
        if not parents:
            return self.enqueuer.enqueue_calls([call], connection)[0]
        plan = Plan.of_call(call, parents, self.retention_json)
        handle = self.enqueuer.enqueue_workflow(
            plan.members, plan.result, plan.kind, None, connection)
        ids = handle.eager[0] if handle.eager is not None else handle.member_ids
        return JobHandle(ids[0], handle.enqueuer, database=getattr(handle.enqueuer, "database",
                                                                   "default"))

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """A signature of this task (docs/design.md "Workflows"): in a chain it gets the previous
        member's result as its first argument.

        >>> add.s(2)                                               # doctest: +SKIP
        math.add.s(2,)
        """
        return Signature(self, args, kwargs)

    def si(self, *args: Any, **kwargs: Any) -> Signature:
        """An immutable signature: it never receives a parent's result.

        >>> add.si(2, 3)                                           # doctest: +SKIP
        math.add.si(2, 3)
        """
        return Signature(self, args, kwargs, immutable=True)

    def map(self, arguments: Sequence[Sequence[Any]], **options: Any) -> list[JobHandle]:
        """Enqueue one job per argument tuple, in one round trip.

        >>> [h.id for h in send.map([({"tenant": "t1"},), ({"tenant": "t2"},)])]  # doctest: +SKIP
        [44, 45]
        """
        check_call_options(options, "map")
        return self.enqueuer.enqueue_calls([self.call(args, None, **options) for args in arguments])

    async def delay_async(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """The async twin of `delay`.

        >>> h = await send.delay_async({"tenant": "t1"})  # doctest: +SKIP
        """
        return (await self.enqueuer.enqueue_calls_async([self.call(args, kwargs)]))[0]

    async def enqueue_async(
        self,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        connection: Any = None,
        **options: Any,
    ) -> JobHandle:
        """The async twin of `apply_async`, with the same arguments.

        >>> h = await send.enqueue_async(({"tenant": "t1"},), connection=aconn)  # doctest: +SKIP
        """
        check_call_options(options, "enqueue_async")
        calls = [self.call(args, kwargs, **options)]
        return (await self.enqueuer.enqueue_calls_async(calls, connection))[0]

