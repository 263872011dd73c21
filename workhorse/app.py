"""App: the task registry, the declared queues, schedules and their limits, and `sync()`.

How the app's calls reach the database (its pools, `using()`, enqueue, read, cancel, retry) is
its base class's, `AppEnqueuer` in `_enqueue.py`; `load_app` finds an App by `module:attribute`.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, overload

from ._calls import Call, check_call_options
from ._durations import parse_lease
from ._enqueue import AppEnqueuer, Plan
from ._holds import AppBudget
from ._placement import Placement
from ._sync import UndeclaredBudgetWarning as UndeclaredBudgetWarning
from ._sync import reachable, summed_reports, sync_plan
from .canvas import Signature
from .database import DEFAULT_DATABASE
from .errors import (
    AppLoadError,
    InvalidOptionsError,
    InvalidPolicyError,
    InvalidScheduleError,
    UnknownTaskError,
    first_line,
)
from .handle import JobHandle
from .retry import RetryBackoff
from .task import (
    CostSpec,
    KeySpec,
    Task,
    budget_name,
    check_retry_on,
    resolve_cost,
    resolve_key,
    timeout_seconds,
)
from .types import (
    BudgetDefinition,
    BudgetSpec,
    ConcurrencyPolicyDefinition,
    EnqueueOptions,
    KeyLimit,
    QueueSpec,
    ScheduleDefinition,
    SyncReport,
    Unique,
    check_database_name,
    check_key_limits,
    check_name,
    retention_seconds,
)

ENV_DEFAULT_LIMIT = "WORKHORSE_DEFAULT_CONCURRENCY_LIMIT"


def _default_limit() -> int | None:
    raw = os.environ.get(ENV_DEFAULT_LIMIT)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise InvalidPolicyError(
            f"{ENV_DEFAULT_LIMIT} must be a positive integer, got {raw!r}"
        ) from None
    if value < 1:
        raise InvalidPolicyError(f"{ENV_DEFAULT_LIMIT} must be a positive integer, got {raw!r}")
    return value


def _importable_main_name() -> str | None:
    """The name `__main__` can be imported under, so a worker can find its tasks."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":
        # `python -m pkg` runs `pkg.__main__`: that, not `pkg`, is where a worker finds its tasks.
        return str(spec.name)
    filename = getattr(main, "__file__", None)
    if not filename:
        return None
    path = Path(filename).resolve().with_suffix("")
    for entry in sys.path:
        root = Path(entry or os.getcwd()).resolve()
        try:
            parts = path.relative_to(root).parts
        except ValueError:
            continue
        if parts and all(part.isidentifier() for part in parts):
            return ".".join(parts)
    return None


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskOptions:
    """Every option of `@app.task(...)`, with its default: their one declaration (`App.task`
    takes these as keyword arguments, and registers with them). The queue's own limits
    (max_active ... rate_burst_per_key) declare the task's queue; see `App.task`.

    >>> TaskOptions.of({"queue": "mail", "max_attempts": 5}).max_attempts
    5
    """

    name: str | None = None
    queue: str | QueueSpec | None = None
    max_active: int | None = None
    max_active_per_key: int | None = None
    rate_limit: str | None = None
    rate_limit_per_key: str | None = None
    concurrency_key: KeySpec = None
    priority: int = 0
    max_attempts: int = 3
    retry_backoff: RetryBackoff | None = None
    on_failure: str = "fail"
    lease: float | str | None = None
    retention: dict[str, Any] | None = None
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    timeout: float | str | None = None
    unique: Unique | None = None
    fairness: str = "fifo"
    on_key_full: str = "queue"
    cost: CostSpec = 1
    rate_cost: CostSpec = 1
    weight: int = 1
    budget: str | BudgetSpec | None = None
    rate_burst: int | None = None
    rate_burst_per_key: int | None = None
    tags: Sequence[str] = ()
    expires: float | str | timedelta | datetime | None = None
    deadline: float | str | timedelta | datetime | None = None
    database: str | None = None

    @classmethod
    def of(cls, options: dict[str, Any]) -> TaskOptions:
        """The options `@app.task(**options)` gives; TypeError naming the valid ones for an
        unknown one (as a misspelt keyword argument is).

        >>> TaskOptions.of({"retries": 3})
        Traceback (most recent call last):
        ...
        TypeError: task() got an unexpected keyword argument 'retries'; valid options are ...
        """
        valid = [field.name for field in dataclasses.fields(cls)]
        unknown = [name for name in options if name not in valid]
        if unknown:
            raise TypeError(
                f"task() got an unexpected keyword argument {unknown[0]!r}; valid options are "
                f"{', '.join(valid)}")
        return cls(**options)


class App(Placement, AppEnqueuer):
    """A workhorse application: tasks, their queues and limits, and where the database is.

    >>> app = App("billing")
    >>> @app.task(queue="mail", max_active=20, max_active_per_key=3,
    ...           concurrency_key=lambda message: message["tenant"])
    ... def send(message): ...
    >>> [d.queue for d in app.policy_definitions()]
    ['mail']
    """

    def __init__(
        self,
        name: str,
        database_url: str | None = None,
        *,
        databases: dict[str, str] | None = None,
        retention: dict[str, Any] | None = None,
    ) -> None:
        check_name("app name", name, InvalidPolicyError)
        super().__init__(database_url, databases)
        self.name = name
        # docs/design.md "Several databases": where each queue and budget lives, as declared
        # (a queue or budget not here lives in the default database, or its queues').
        self.placement: dict[str, str] = {}
        self.budget_placement: dict[str, str] = {}
        # How long this app's finished jobs are kept: fixed on each job when it ends.
        self.retention = retention_seconds(retention)
        self.tasks: dict[str, Task[Any, Any]] = {}
        self.queues: dict[str, QueueSpec] = {}
        self.schedules: dict[str, ScheduleDefinition] = {}
        # docs/design.md "Named budgets": the budgets this app declares (owns, syncs, prunes).
        self.budgets: dict[str, BudgetSpec] = {}
        # docs/design.md "Per-key limits": per queue, the keys' limits and the default.
        self.declared_key_limits: dict[str, tuple[dict[str, KeyLimit], KeyLimit | None]] = {}

    def __repr__(self) -> str:
        return f"<App {self.name} tasks={len(self.tasks)} queues={len(self.queues)}>"

    # ---- declarations ----------------------------------------------------------------------

    def queue(
        self,
        name: str,
        max_active: int | None = None,
        max_active_per_key: int | None = None,
        rate_limit: str | None = None,
        rate_limit_per_key: str | None = None,
        fairness: str = "fifo",
        on_key_full: str = "queue",
        *,
        rate_burst: int | None = None,
        rate_burst_per_key: int | None = None,
        database: str | None = None,
    ) -> QueueSpec:
        """Declare a queue that several tasks share, with one combined set of limits.
        `fairness="key"` shares `max_active` among the concurrency keys (see
        docs/fair-share.md); `on_key_full=` says what an enqueue does when its job's key is
        full (docs/job-keys.md). `rate_burst=B` beside `rate_limit="N/P"` allows at most B
        starts in any window of P*B/N (and `rate_burst_per_key` per key; docs/budgets.md).
        `database=` places the queue in one of the app's databases (docs/design.md "Several
        databases"; the default one otherwise).

        >>> App("docs").queue("openai-api", max_active=5, rate_limit="500/m").rate_limit
        '500/m'
        """
        with self._all_or_nothing():
            return self._declare_queue(
                QueueSpec(name, max_active, max_active_per_key, rate_limit, rate_limit_per_key,
                          fairness, on_key_full, rate_burst, rate_burst_per_key, database))

    def budget(
        self,
        name: str,
        max_active: int | None = None,
        rate_limit: str | None = None,
        rate_burst: int | None = None,
        adaptive: bool = False,
        database: str | None = None,
    ) -> AppBudget:
        """Declare a named budget: one limit shared by every queue whose jobs name it
        (`@app.task(budget=...)`, or `budget=` at the call site). `max_active` counts cost
        units, `rate_limit` ("N/P") rate_cost units, `rate_burst` B (1..N) at most B units in
        any window of P*B/N. `adaptive=True` (with max_active): each Backoff of the budget
        halves its effective max_active, which then grows back by one unit per quiet period
        (docs/design.md "Back-pressure"). This app's namespace owns it: `app.sync()` syncs and
        prunes it. Declaring one name twice with different limits is an InvalidPolicyError. With no
        limits it declares nothing: it names a budget (this app's, or one another app
        declares), to pass as `budget=` or to take a hold of (`.hold(...)`, docs/design.md
        "Holds"). `database=` says which of the app's databases it lives in (docs/design.md
        "Several databases"): every queue whose jobs name it must live there too; without it,
        the database of the queues that name it.

        >>> openai = App("docs").budget("openai", max_active=50, rate_limit="3000/m",
        ...                             rate_burst=100)
        >>> openai.name, openai.rate_limit, openai.rate_burst
        ('openai', '3000/m', 100)
        """
        with self._all_or_nothing():
            return self._budget(name, max_active, rate_limit, rate_burst, adaptive, database)

    def _budget(self, name: str, max_active: int | None, rate_limit: str | None,
                rate_burst: int | None, adaptive: bool, database: str | None) -> AppBudget:
        if database is not None:
            self._place_budget(name, database)
        if max_active is None and rate_limit is None and rate_burst is None and not adaptive:
            check_name("budget", name)
            declared = self.budgets.get(name)
            return declared if isinstance(declared, AppBudget) else AppBudget(name, app=self)
        spec = self._declare_budget(
            AppBudget(name, max_active, rate_limit, rate_burst, adaptive, app=self))
        if isinstance(spec, AppBudget):
            return spec
        # Declared first by a task's budget=BudgetSpec(...): the same limits, bound to the app.
        return AppBudget(spec.name, spec.max_active, spec.rate_limit, spec.rate_burst,
                         spec.adaptive, app=self)

    def key_limits(
        self,
        queue: str | QueueSpec,
        limits: Mapping[Any, KeyLimit],
        default: KeyLimit | None = None,
    ) -> None:
        """Declare per-key limits on `queue` (docs/design.md "Per-key limits"): `{key:
        KeyLimit(max_active=, weight=, rate_limit=)}`, and `default` for the keys not listed
        (None: the queue's `max_active_per_key` and `rate_limit_per_key`). The queue needs limits
        of its own in this app (`app.queue(...)`). `app.sync()` stores them, as desired state:
        keys no longer declared lose their limits. Declaring a queue's limits twice replaces them.

        >>> app = App("docs")
        >>> api = app.queue("api", max_active=50, max_active_per_key=1)
        >>> app.key_limits(api, {"acme": KeyLimit(max_active=10)})
        >>> app.key_limit_definitions()["api"][0]["acme"].max_active
        10
        """
        name = queue.name if isinstance(queue, QueueSpec) else queue
        check_name("queue", name, InvalidPolicyError)
        self.declared_key_limits[name] = (check_key_limits(name, limits, default), default)

    def key_limit_definitions(self) -> dict[str, tuple[dict[str, KeyLimit], KeyLimit | None]]:
        """The per-key limits this app declares, by queue; InvalidPolicyError for a queue that
        has no limits of its own in this app (per-key limits refine a policy).

        >>> App("docs").key_limit_definitions()
        {}
        """
        for name in self.declared_key_limits:
            spec = self.queues.get(name)
            if spec is None or spec.definition() is None:
                raise InvalidPolicyError(
                    f"app {self.name!r} declares key limits on queue {name!r} but no limits of "
                    "the queue's own: per-key limits refine a policy, so declare one with "
                    f"app.queue({name!r}, max_active=..., max_active_per_key=...)")
        return dict(self.declared_key_limits)

    def _declare_budget(self, spec: BudgetSpec) -> BudgetSpec:
        existing = self.budgets.get(spec.name)
        if existing is None:
            self.budgets[spec.name] = spec
            return spec
        if existing.definition() != spec.definition():
            def described(budget: BudgetSpec) -> str:
                return ", ".join(f"{n}={v}" for n, v in zip(
                    ("max_active", "rate_limit", "rate_burst", "adaptive"),
                    (*budget.definition().limits, budget.adaptive), strict=True))

            raise InvalidPolicyError(
                f"budget {spec.name!r} is declared twice with different limits: "
                f"{described(existing)} vs {described(spec)}")
        return existing

    def budget_definitions(self) -> list[BudgetDefinition]:
        """The budgets this app declares, to sync under its namespace.

        >>> app = App("docs")
        >>> _ = app.budget("db", max_active=8)
        >>> [d.limits for d in app.budget_definitions()]
        [(8, None, None)]
        """
        return [spec.definition() for spec in self.budgets.values()]

    def named_budgets(self) -> list[str]:
        """The budget names this app's tasks name without declaring them (references).

        >>> app = App("docs")
        >>> @app.task(name="sync.partner", budget="partner-api")
        ... def push(record): ...
        >>> app.named_budgets()
        ['partner-api']
        """
        names = {task.budget for task in self.tasks.values() if task.budget is not None}
        return sorted(names - set(self.budgets))

    def _declare_queue(self, spec: QueueSpec) -> QueueSpec:
        check_name("queue", spec.name, InvalidPolicyError)
        spec.definition()  # validates the limits now, at declaration
        self._place(spec.name, spec.database)
        existing = self.queues.get(spec.name)
        if existing is None or not existing.governed:
            self.queues[spec.name] = spec if (existing is None or spec.governed) else existing
            return self.queues[spec.name]
        if spec.governed and (existing.limits, existing.rules, existing.bursts) != (
                spec.limits, spec.rules, spec.bursts):
            names = ("max_active", "max_active_per_key", "rate_limit", "rate_limit_per_key",
                     "fairness", "on_key_full", "rate_burst", "rate_burst_per_key")

            def described(queue: QueueSpec) -> str:
                values = (*queue.limits, *queue.rules, *queue.bursts)
                return ", ".join(f"{n}={v}" for n, v in zip(names, values, strict=True))

            raise InvalidPolicyError(
                f"queue {spec.name!r} is declared twice with different limits: "
                f"{described(existing)} vs {described(spec)}"
            )
        return existing

    @staticmethod
    def queue_name(queue: str | QueueSpec) -> str:
        """The name of a queue given as a name or as an `app.queue(...)` spec.

        >>> App.queue_name(QueueSpec("openai-api", max_active=5)), App.queue_name("mail")
        ('openai-api', 'mail')
        """
        return queue.name if isinstance(queue, QueueSpec) else queue

    @overload
    def task(self, fn: Callable[..., Any], /) -> Task[Any, Any]: ...

    @overload
    def task(self, fn: None = None, /, **options: Any
             ) -> Callable[[Callable[..., Any]], Task[Any, Any]]: ...

    def task(
        self, fn: Callable[..., Any] | None = None, /, **options: Any,
    ) -> Task[Any, Any] | Callable[[Callable[..., Any]], Task[Any, Any]]:
        """Register a handler, with or without arguments.

        `queue` is a name or an `app.queue(...)`; with none, the task gets a queue named after
        itself (limited by WORKHORSE_DEFAULT_CONCURRENCY_LIMIT when that is set).
        `retry_on=(ConnectionError,)`: only these exception types retry (default: every
        Exception). `timeout="30s"`: the limit per attempt (default: none).
        `on_key_full="cancel_in_progress"|"cancel_newest"` supersedes a full key's jobs or
        refuses the new one (needs `max_active_per_key`; docs/job-keys.md).
        `fairness="key"` shares the queue's `max_active` among concurrency keys; `cost=` and
        `rate_cost=` (an int, or a callable of the task's arguments called at enqueue) are the
        units a job occupies and the starts it counts, `weight=` its key's weight
        (docs/fair-share.md). `budget=` (an `app.budget(...)` spec, declared with this app, or
        a name, a reference) is the named budget its jobs name; `rate_burst=` and
        `rate_burst_per_key=` bound bursts within the rate limits (docs/budgets.md).

        >>> app = App("docs")
        >>> @app.task(name="mail.fetch", queue="mail", retry_on=(ConnectionError,), timeout="30s")
        ... def fetch(url): ...
        >>> fetch.name, fetch.queue.name, fetch.retry_on, fetch.timeout
        ('mail.fetch', 'mail', (<class 'ConnectionError'>,), 30.0)
        """

        settings = TaskOptions.of(options)  # the options are checked before the function comes

        def register(function: Callable[..., Any]) -> Task[Any, Any]:
            return self._register(function, settings)

        return register(fn) if fn is not None else register

    def _register(self, fn: Callable[..., Any], options: TaskOptions) -> Task[Any, Any]:
        with self._all_or_nothing():
            return self._register_checked(fn, options)

    def _register_checked(self, fn: Callable[..., Any], options: TaskOptions) -> Task[Any, Any]:
        o = options
        task_name = o.name if o.name is not None else self._default_task_name(fn)
        check_name("task name", task_name)
        if task_name in self.tasks and self.tasks[task_name].fn is not fn:
            raise InvalidOptionsError(f"task {task_name!r} is already registered")
        if o.on_failure not in ("fail", "hold"):
            raise InvalidOptionsError(
                f"on_failure must be 'fail' or 'hold', got {o.on_failure!r}")
        key = o.concurrency_key
        if key is not None and not callable(key) and (not isinstance(key, str) or not key):
            raise InvalidOptionsError(
                f"concurrency_key must be a non-empty str or a callable, got {key!r}")
        # Validates priority, max_attempts, weight, fixed costs and tags once, at declaration.
        declared = EnqueueOptions(priority=o.priority, max_attempts=o.max_attempts,
                                  weight=o.weight, cost=1 if callable(o.cost) else o.cost,
                                  rate_cost=1 if callable(o.rate_cost) else o.rate_cost,
                                  tags=o.tags,  # type: ignore[arg-type]
                                  expires=o.expires, deadline=o.deadline)
        retry_on = check_retry_on(o.retry_on)
        timeout_limit = timeout_seconds(o.timeout)
        budget_text = budget_name(o.budget)
        if budget_text is not None:
            check_name("budget", budget_text)
        lease_seconds = None
        if o.lease is not None:
            try:
                lease_seconds = parse_lease(o.lease)
            except ValueError as exc:
                raise InvalidOptionsError(f"task {task_name!r}: {exc}") from None

        limits = (o.max_active, o.max_active_per_key, o.rate_limit, o.rate_limit_per_key)
        rules = (o.fairness, o.on_key_full)
        bursts = (o.rate_burst, o.rate_burst_per_key)
        if isinstance(o.queue, QueueSpec):
            if (any(value is not None for value in (*limits, *bursts))
                    or rules != ("fifo", "queue")):
                spec = self._declare_queue(QueueSpec(o.queue.name, *limits, *rules, *bursts,
                                                     o.queue.database))
            else:
                spec = self._declare_queue(o.queue)
        elif o.queue is not None:
            spec = self._declare_queue(QueueSpec(o.queue, *limits, *rules, *bursts))
        else:
            default_limit = _default_limit() if o.max_active is None else None
            spec = self._declare_queue(QueueSpec(
                task_name, o.max_active if o.max_active is not None else default_limit,
                *limits[1:], *rules, *bursts,
            ))
        self._place(spec.name, o.database)
        if isinstance(o.budget, BudgetSpec):
            self._declare_budget(o.budget)  # declared with this app (a conflict raises here)

        task: Task[Any, Any] = Task(
            self, fn, name=task_name, queue=spec, concurrency_key=key,
            priority=o.priority, max_attempts=o.max_attempts, retry_backoff=o.retry_backoff,
            on_failure=o.on_failure, lease=lease_seconds,
            retention=retention_seconds(o.retention, self.retention), retry_on=retry_on,
            timeout=timeout_limit, unique=o.unique, cost=o.cost, rate_cost=o.rate_cost,
            weight=o.weight, budget=budget_text, tags=declared.tags, expires=o.expires,
            deadline=o.deadline,
        )
        self.tasks[task_name] = task
        if budget_text is not None:
            self._check_budgets()
        return task

    @staticmethod
    def _default_task_name(fn: Callable[..., Any]) -> str:
        module = str(getattr(fn, "__module__", None) or "")
        qualname = str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", ""))
        if module == "__main__":
            importable = _importable_main_name()
            if importable is not None:
                module = importable
            elif getattr(sys.modules.get("__main__"), "__file__", None):
                filename = sys.modules["__main__"].__file__
                raise InvalidOptionsError(
                    f"task {qualname!r} is defined in the script {filename}, which cannot be "
                    "imported as a module (its name is not a Python identifier, or it is not "
                    "under sys.path), so a worker could not find it: rename the file, or give "
                    f"the task a name: @app.task(name='mymodule.{qualname}')"
                )
            elif not all(part.isidentifier() for part in qualname.split(".")):
                raise InvalidOptionsError(
                    f"task {qualname!r} is defined in __main__ (python -c, stdin or a REPL) and "
                    "no name can be made from it (a lambda, or a function nested in another): "
                    "give it one: @app.task(name='mymodule.send')"
                )
            # python -c, stdin or a REPL: no module a worker could import exists, so the name
            # is `__main__.<qualname>`, served by this process (eager(), drain()) or by a
            # worker whose app declares the same name.
        return f"{module}.{qualname}" if module else qualname

    # ---- schedules -------------------------------------------------------------------------

    def periodic(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        cron: str | None = None,
        every: str | float | None = None,
        tz: str = "UTC",
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        catch_up: str = "latest",
        **task_options: Any,
    ) -> Any:
        """Register a task and a schedule for it, named after the task. Takes every `@app.task`
        option (name=, queue=, limits, ...) plus the schedule's: `cron=` (5 fields, in `tz`) or
        `every=` (a duration, fired at the instants k*every since the Unix epoch), `args`,
        `kwargs` and `catch_up` ("latest", "all" or "skip").

        >>> app = App("docs")
        >>> @app.periodic(every="30s", args=("eu",), name="refresh-eu", queue="refresh")
        ... def refresh(region): ...
        >>> app.schedules["refresh-eu"].queue, app.schedules["refresh-eu"].every
        ('refresh', '30s')
        """

        def register(function: Callable[..., Any]) -> Task[Any, Any]:
            # The schedule's own fields first, so a bad one registers nothing.
            ScheduleDefinition(name="-", task="-", cron=cron, every=every, tz=tz,
                               args=list(args), kwargs=dict(kwargs or {}), catch_up=catch_up)
            _check_arguments(function, args, kwargs)
            task_name = task_options.get("name") or self._default_task_name(function)
            if task_name in self.schedules:
                raise InvalidScheduleError(f"schedule {task_name!r} is already declared")
            if isinstance(args, str | bytes) or not isinstance(args, Sequence):
                raise InvalidScheduleError(f"args must be a list or tuple, got {args!r}")
            try:  # the schedule's key and costs too, before the task is registered
                resolve_key(task_options.get("concurrency_key"), tuple(args), dict(kwargs or {}))
                EnqueueOptions(weight=task_options.get("weight", 1), **{
                    what: resolve_cost(what, task_options.get(what, 1), tuple(args),
                                       dict(kwargs or {})) for what in ("cost", "rate_cost")})
            except InvalidOptionsError as exc:
                raise InvalidScheduleError(f"schedule {task_name!r}: {exc}") from None
            task = self.task(**task_options)(function)
            self.schedule(task, cron=cron, every=every, tz=tz, args=args, kwargs=kwargs,
                          catch_up=catch_up, name=task.name)
            return task

        return register(fn) if fn is not None else register

    def schedule(
        self,
        task: Task[Any, Any] | str,
        *,
        cron: str | None = None,
        every: str | float | None = None,
        tz: str = "UTC",
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        name: str | None = None,
        queue: str | QueueSpec | None = None,
        catch_up: str = "latest",
    ) -> ScheduleDefinition:
        """Schedule an existing task of this app (several schedules per task, each with its own
        name and arguments). `name` defaults to the task's name. Jobs get the task's queue,
        priority, max_attempts, on_failure and concurrency key (computed from these arguments),
        unless `queue` says otherwise. Bad input raises InvalidScheduleError, a task this app does
        not declare UnknownTaskError, both before anything is stored.

        >>> app = App("docs")
        >>> @app.task
        ... def send(digest): ...
        >>> app.schedule(send, cron="0 9 * * mon-fri", tz="Europe/Oslo",
        ...              kwargs={"digest": "weekly"}, name="weekday-digest").cron
        '0 9 * * mon-fri'
        """
        task_name = task.name if isinstance(task, Task) else task
        if (not isinstance(task_name, str) or task_name not in self.tasks
                or (isinstance(task, Task) and self.tasks[task_name] is not task)):
            raise UnknownTaskError(
                f"app {self.name!r} does not declare the task {task_name!r}; declare it with "
                "@app.task (or use @app.periodic) before scheduling it"
            )
        registered = self.tasks[task_name]
        schedule_name = name if name is not None else task_name
        if schedule_name in self.schedules:
            raise InvalidScheduleError(
                f"schedule {schedule_name!r} is already declared; give this one its own name="
            )
        _check_arguments(registered.fn, args, kwargs)
        if isinstance(args, str | bytes) or not isinstance(args, Sequence):
            raise InvalidScheduleError(f"args must be a list or tuple, got {args!r}")
        try:
            key = resolve_key(registered.concurrency_key, tuple(args), dict(kwargs or {}))
            # The task's cost callables are called here, once, with the schedule's arguments
            # (which never change): the stored schedule carries the values, so every
            # supervisor fires the same costs whatever its code (docs/design.md "Fair share and
            # job cost").
            cost = resolve_cost("cost", registered.cost, tuple(args), dict(kwargs or {}))
            rate_cost = resolve_cost("rate_cost", registered.rate_cost, tuple(args),
                                     dict(kwargs or {}))
        except InvalidOptionsError as exc:
            raise InvalidScheduleError(f"schedule {schedule_name!r}: {exc}") from None
        queue_name = self.queue_name(queue) if queue is not None else registered.queue.name
        definition = ScheduleDefinition(
            name=schedule_name, task=task_name, cron=cron, every=every, tz=tz, args=list(args),
            kwargs=dict(kwargs or {}), queue=queue_name, catch_up=catch_up,
            priority=registered.priority, max_attempts=registered.max_attempts,
            concurrency_key=key, on_failure=registered.on_failure, cost=cost,
            rate_cost=rate_cost, weight=registered.weight, tags=registered.tags,
        )
        # Its queue is one of the app's, so that a worker serves it by default.
        self._declare_queue(queue if isinstance(queue, QueueSpec) else QueueSpec(queue_name))
        self.schedules[schedule_name] = definition
        return definition

    def schedule_definitions(self) -> list[ScheduleDefinition]:
        """The schedules this app declares; UnknownTaskError for one whose task it lacks.

        >>> app = App("docs")
        >>> @app.periodic(every="1h", name="tasks.refresh")
        ... def refresh(): ...
        >>> [(d.name, d.every) for d in app.schedule_definitions()]
        [('tasks.refresh', '1h')]
        """
        for definition in self.schedules.values():
            if definition.task not in self.tasks:
                raise UnknownTaskError(
                    f"schedule {definition.name!r} is for the task {definition.task!r}, which "
                    f"app {self.name!r} does not declare"
                )
        return list(self.schedules.values())

    def policy_definitions(self) -> list[ConcurrencyPolicyDefinition]:
        """The limits this app declares, one per governed queue.

        >>> app = App("docs")
        >>> _ = app.queue("openai-api", max_active=5)
        >>> app.policy_definitions()
        [ConcurrencyPolicyDefinition(queue='openai-api', max_active=5, ...)]
        """
        return [
            d for d in (spec.definition() for spec in self.queues.values()) if d is not None
        ]

    def declared_queues(self) -> list[str]:
        """Every queue the app declares, including the default queues named after tasks.

        >>> app = App("docs")
        >>> @app.task(name="mail.send", queue="mail")
        ... def send(message): ...
        >>> app.declared_queues()
        ['mail']
        """
        return list(self.queues)

    def get_task(self, name: str) -> Task[Any, Any]:
        """The registered task of this name; UnknownTaskError when there is none.

        >>> app = App("docs")
        >>> @app.task(name="mail.send", queue="mail")
        ... def send(message): ...
        >>> app.get_task("mail.send") is send
        True
        """
        try:
            return self.tasks[name]
        except KeyError:
            raise UnknownTaskError(f"app {self.name!r} has no task named {name!r}") from None

    # ---- by name -----------------------------------------------------------------------------

    def _send_call(
        self, name: str, args: Sequence[Any] | None, kwargs: dict[str, Any] | None,
        options: dict[str, Any],
    ) -> Call:
        check_call_options(options, "send_task")
        return self.get_task(name).call(tuple(args or ()), kwargs, **options)

    def signature(
        self, name: str, args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None, **options: Any,
    ) -> Any:
        """A signature of a registered task by name, like `send_task` (UnknownTaskError when
        no such task is registered).

        >>> app.signature("billing.send", args=[{"tenant": "t1"}])     # doctest: +SKIP
        billing.send.s({'tenant': 't1'},)
        """

        return Signature(self.get_task(name), tuple(args or ()), kwargs, options)

    def send_task(
        self,
        name: str,
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        *,
        connection: Any = None,
        **options: Any,
    ) -> JobHandle:
        """Enqueue a registered task by name, with apply_async's options.

        >>> app.send_task("billing.send", args=[{"tenant": "t1"}], queue="mail")  # doctest: +SKIP
        """
        return self.enqueue_calls([self._send_call(name, args, kwargs, options)], connection)[0]

    async def send_task_async(
        self,
        name: str,
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        *,
        connection: Any = None,
        **options: Any,
    ) -> JobHandle:
        """`send_task` for async code.

        >>> await app.send_task_async("billing.send", args=[{"tenant": "t1"}])  # doctest: +SKIP
        """
        calls = [self._send_call(name, args, kwargs, options)]
        return (await self.enqueue_calls_async(calls, connection))[0]

    # ---- policies ------------------------------------------------------------------------

    def sync(self, prune: bool = True) -> SyncReport:
        """Push every declared policy and schedule under this app's namespace, in one
        transaction a database; `SyncReport.schedules` reports the schedules (None when there
        are none). With several databases (docs/design.md "Several databases") each gets what
        lives there, and prunes what no longer does; the report is their sum.

        >>> app.sync()                                                # doctest: +SKIP
        SyncReport(created=['mail'], updated=[], pruned=[], unchanged=[], schedules=None)
        """
        plans = self._sync_plans(prune)
        if len(plans) > 1:  # every database answers before any commits (a move's prune)
            reachable([self.database_url_of(name) for name, _ in plans])
        reports = [self._run(plan, transaction=True, database=name) for name, plan in plans]
        return summed_reports(reports)

    async def sync_async(self, prune: bool = True) -> SyncReport:
        """`sync` for async code.

        >>> await app.sync_async()                                    # doctest: +SKIP
        SyncReport(created=['mail'], updated=[], pruned=[], unchanged=[], schedules=None)
        """
        plans = self._sync_plans(prune)
        reports = [await self._run_async(plan, transaction=True, database=name)
                   for name, plan in plans]
        return summed_reports(reports)

    def sync_database(self, name: str, prune: bool = True) -> SyncReport:
        """`sync` of one of the app's databases: what lives there (the worker's `--sync`).

        >>> app.sync_database("eu")                                   # doctest: +SKIP
        SyncReport(created=['eu-mail'], updated=[], pruned=[], unchanged=[], schedules=None)
        """
        plans = dict(self._sync_plans(prune, only=check_database_name(name)))
        return self._run(plans[name], transaction=True, database=name)

    def _sync_plans(self, prune: bool, only: str | None = None
                    ) -> list[tuple[str, Plan[SyncReport]]]:
        # The declarations are read (and checked) now, before any connection is taken.
        self.check_placement()
        policies = self.policy_definitions()
        schedules = self.schedule_definitions()
        budgets = self.budget_definitions()
        named = self.named_budgets()
        key_limits = self.key_limit_definitions()
        plans = []
        for name in self.database_names if only is None else [only]:
            self.database_url_of(name)  # InvalidOptionsError for a name the app lacks

            def here(queue: str, name: str = name) -> bool:
                return self.database_of(queue) == name

            def budget_here(budget: str, name: str = name) -> bool:
                return (self.database_of_budget(budget) or DEFAULT_DATABASE) == name

            plans.append((name, sync_plan(
                self.name, [d for d in policies if here(d.queue)],
                [d for d in schedules if here(d.queue or self.tasks[d.task].queue.name)],
                prune,
                [b for b in budgets if budget_here(b.name)],
                [b for b in named if budget_here(b)],
                {q: limits for q, limits in key_limits.items() if here(q)})))
        return plans


def _check_arguments(fn: Callable[..., Any], args: Sequence[Any],
                     kwargs: dict[str, Any] | None) -> None:
    """The schedule's arguments must bind to the handler, as an enqueue's must."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or C callable: nothing to check against
        return
    try:
        signature.bind(*tuple(args), **dict(kwargs or {}))
    except TypeError as exc:
        raise InvalidScheduleError(
            f"the schedule's arguments do not fit {getattr(fn, '__qualname__', fn)!r}: {exc}"
        ) from None


def load_app(reference: str) -> App:
    """The App named by `module:attribute` (the current directory goes on sys.path first).

    `module` alone finds the module's single App.

    >>> app = load_app("billing.tasks:app")  # doctest: +SKIP
    >>> app.name  # doctest: +SKIP
    'billing'
    """
    module_name, _, attribute = reference.partition(":")
    if not module_name:
        raise AppLoadError(f"app must look like module:attribute, got {reference!r}")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(f"{exc.name}.")):
            raise AppLoadError(f"cannot import module {module_name!r}: {exc}") from None
        raise AppLoadError(
            f"importing {module_name!r} failed: {type(exc).__name__}: {first_line(exc)}"
        ) from exc
    except Exception as exc:
        # The app's own module is broken: one line that says where; the cause (and its
        # traceback, for `workhorse -v`) stays chained.
        raise AppLoadError(
            f"importing {module_name!r} failed: {type(exc).__name__}: {first_line(exc)}"
            f"{_where(exc)}{_django_hint(exc)}"
        ) from exc
    if attribute:
        try:
            found = getattr(module, attribute)
        except AttributeError:
            raise AppLoadError(
                f"module {module_name!r} has no attribute {attribute!r}"
            ) from None
        if not isinstance(found, App):
            raise AppLoadError(
                f"{reference!r} is a {type(found).__name__}, not a workhorse.App"
            )
        return found
    apps = [value for value in vars(module).values() if isinstance(value, App)]
    if len(apps) != 1:
        raise AppLoadError(
            f"module {module_name!r} has {len(apps)} workhorse.App objects; name one as "
            f"{module_name}:attribute"
        )
    return apps[0]


def _django_hint(exc: BaseException) -> str:
    """What to do when the app's module needs Django and Django is not set up."""
    if type(exc).__name__ not in ("AppRegistryNotReady", "ImproperlyConfigured"):
        return ""
    return ("; Django is not set up: run `python manage.py workhorse worker` (with "
            "'workhorse.contrib.django' in INSTALLED_APPS and WORKHORSE_APP in settings), or "
            "call django.setup() in the module the worker loads")


def _where(exc: BaseException) -> str:
    """` (file.py, line N)`: the innermost frame of the failure, or of a SyntaxError."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f" ({exc.filename}, line {exc.lineno})"
    frames = traceback.extract_tb(exc.__traceback__)
    app_frames = [f for f in frames if "importlib" not in f.filename]
    if not app_frames:
        return ""
    frame = app_frames[-1]
    return f" ({frame.filename}, line {frame.lineno})"
