"""Celery's canvas on workhorse (docs/design.md "Workflows"): signatures, `chain`, `group`, `chord`,
and the `WorkflowHandle` that reads a canvas back.

A canvas is flattened here into members (one job each) and dependencies, and inserted whole in
one statement (`_ops.enqueue_workflow`). Release and failure propagation are the database's:
the transaction that records a member's end releases or cancels its dependents (see
sql/migrations/0002_0.3.0.sql, sql/workflows/ and docs/workflows.md).

>>> from workhorse import chain, group, chord
>>> wf = chain(add.s(2, 3), add.s(4))                       # doctest: +SKIP
>>> wf.delay().get(timeout=10)                              # doctest: +SKIP
9
"""

from __future__ import annotations

import abc
import copy
import dataclasses
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ._calls import Call, budget_name
from ._ops.workflows import WORKFLOW_MEMBERS_MAX, Dependency, WorkflowMember
from .errors import InvalidOptionsError
from .handle import JobHandle, WorkflowEnqueuer
from .handle import WorkflowHandle as WorkflowHandle  # its home before handle.py; still names it
from .types import EnqueueOptions, check_tags


@runtime_checkable
class SignedTask(Protocol):
    """What a signature needs of its task (a Task is one): its name and enqueuer, its call
    resolution and its enqueues, and the retention its jobs keep."""

    name: str
    retention_json: str

    @property
    def enqueuer(self) -> WorkflowEnqueuer: ...

    @property
    def call(self) -> Callable[..., Call]: ...

    @property
    def apply_async(self) -> Callable[..., JobHandle]: ...

    @property
    def enqueue_async(self) -> Callable[..., Awaitable[JobHandle]]: ...

# The options `.set()` takes (Celery's names too: countdown, eta).
SET_OPTIONS = ("queue", "concurrency_key", "priority", "delay", "countdown", "eta", "run_at",
               "max_attempts", "cost", "rate_cost", "weight", "budget", "tags")

# Incoming results of a node: the members whose results feed it, and how ('one': the single
# parent's result; 'list': the list of the parents' results in order). None: nothing incoming.
_Incoming = tuple[list[int], str] | None


class _Placeholder:
    """Stands for a parent's result while arguments are checked at enqueue."""

    def __repr__(self) -> str:
        return "<parent's result>"


_PARENT = _Placeholder()


class Canvas(abc.ABC):
    """What chain, group, chord and Signature share: `|`, enqueue and its async twins."""

    on_error: Signature | None = None

    def __or__(self, other: object) -> Chain:
        if not isinstance(other, Canvas):
            return NotImplemented
        return Chain(self, other)

    def _app(self) -> WorkflowEnqueuer:
        for sig in self.signatures():
            return sig.task.enqueuer
        raise InvalidOptionsError("an empty canvas has nothing to enqueue")

    @abc.abstractmethod
    def signatures(self) -> Iterable[Signature]:
        """Every signature of the canvas, in order.

        >>> [s.task.name for s in chain(add.s(1), add.s(2)).signatures()]  # doctest: +SKIP
        ['math.add', 'math.add']
        """

    def delay(self) -> WorkflowHandle:
        """Enqueue the canvas (on the `using()` connection or a pooled one).

        >>> chain(add.s(2, 3), add.s(4)).delay()                     # doctest: +SKIP
        WorkflowHandle(id=7)
        """
        return self.apply_async()

    def apply_async(self, connection: Any = None, *,
                    tags: Sequence[str] | None = None) -> WorkflowHandle:
        """Enqueue the canvas whole, in one transaction (`connection=`: the caller's). `tags`
        are added to every member's (and the on_error job's).

        >>> chain(add.s(1), add.s(2)).apply_async(connection=conn)  # doctest: +SKIP
        >>> chain(add.s(1), add.s(2)).apply_async(tags=["order-1234"])  # doctest: +SKIP
        """
        app = self._app()
        plan = Plan.of(self, tags=check_tags(tags))
        return app.enqueue_workflow(plan.members, plan.result, plan.kind, plan.on_error,
                                    connection)

    async def delay_async(self) -> WorkflowHandle:
        """The async twin of `delay`.

        >>> await chain(add.s(1), add.s(2)).delay_async()            # doctest: +SKIP
        """
        return await self.enqueue_async()

    async def enqueue_async(self, connection: Any = None, *,
                            tags: Sequence[str] | None = None) -> WorkflowHandle:
        """The async twin of `apply_async`, on an async connection.

        >>> await chain(add.s(1), add.s(2)).enqueue_async(connection=aconn)  # doctest: +SKIP
        """
        app = self._app()
        plan = Plan.of(self, tags=check_tags(tags))
        return await app.enqueue_workflow_async(plan.members, plan.result, plan.kind,
                                                plan.on_error, connection)


class Signature(Canvas):
    """A task with its arguments and options, not yet enqueued: `task.s(...)`, `task.si(...)`.

    >>> s = add.s(2).set(queue="math", priority=5)              # doctest: +SKIP
    """

    def __init__(self, task: SignedTask, args: Sequence[Any] = (),
                 kwargs: dict[str, Any] | None = None, options: dict[str, Any] | None = None,
                 immutable: bool = False) -> None:
        if not isinstance(task, SignedTask):
            raise InvalidOptionsError(f"a signature is of a task, got {task!r}")
        if isinstance(args, str | bytes) or not isinstance(args, Sequence):
            raise InvalidOptionsError(f"args must be a list or tuple, got {args!r}")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise InvalidOptionsError(f"kwargs must be a dict, got {kwargs!r}")
        self.task = task
        self.args = tuple(args)
        self.kwargs = dict(kwargs or {})
        self.options = dict(options or {})
        self.immutable = immutable
        _check_set(self.options)

    def __repr__(self) -> str:
        return f"{self.task.name}.{'si' if self.immutable else 's'}{self.args!r}"

    def signatures(self) -> Iterable[Signature]:
        """Itself: a signature is a canvas of one.

        >>> list(add.s(1).signatures())                            # doctest: +SKIP
        [math.add.s(1,)]
        """
        yield self

    def set(self, **options: Any) -> Signature:
        """A copy with these options (queue, concurrency_key, priority, delay, countdown, eta,
        run_at, max_attempts, cost, rate_cost, weight, budget, tags). `cost` and `rate_cost` may be
        callables of the member's arguments, called at enqueue as apply_async calls them (a
        parent's result is not known then: a member that receives one passes a placeholder in
        its place, so give such a member a value); unset, the task's own defaults apply.

        >>> add.s(2).set(queue="math", countdown=10, cost=4, weight=2)  # doctest: +SKIP
        """
        _check_set(options)
        other = copy.copy(self)
        other.options = {**self.options, **options}
        return other

    def call(self, incoming: bool) -> Call:
        """The resolved Call of this member; `incoming`: a parent's result will come first.

        >>> add.s(2).call(incoming=True).payload                      # doctest: +SKIP
        """
        args = ((_PARENT,) if incoming else ()) + self.args
        # Every option, the units too, resolved as apply_async resolves them (the call site's,
        # else the task's default value or callable).
        call = self.task.call(args, self.kwargs, **self.options)
        if incoming:
            payload = dict(call.payload)
            payload["args"] = list(payload["args"])[1:]
            call = Call(call.task, payload, call.options, call.on_failure, call.arguments)
        return call

    def delay(self, *args: Any, **kwargs: Any) -> Any:
        """A single signature enqueues one job: a JobHandle (extra arguments are appended).

        >>> add.s(2).delay(3).get(timeout=10)                       # doctest: +SKIP
        5
        """
        return self.task.apply_async(self.args + args, {**self.kwargs, **kwargs},
                                     **self.options)

    def apply_async(self, args: Sequence[Any] = (),  # type: ignore[override]
                    kwargs: dict[str, Any] | None = None, connection: Any = None,
                    **options: Any) -> Any:
        """One job, with these extra arguments and options: a JobHandle.

        >>> add.s(2).apply_async((3,), priority=5)                   # doctest: +SKIP
        """
        return self.task.apply_async(self.args + tuple(args), {**self.kwargs, **(kwargs or {})},
                                     connection=connection, **{**self.options, **options})

    async def delay_async(self, *args: Any, **kwargs: Any) -> Any:
        """The async twin of `delay`: a JobHandle.

        >>> await add.s(2, 3).delay_async()                          # doctest: +SKIP
        """
        return await self.task.enqueue_async(self.args + args, {**self.kwargs, **kwargs},
                                             **self.options)

    async def enqueue_async(self, connection: Any = None, *,
                            tags: Sequence[str] | None = None) -> Any:
        """The async twin of `apply_async`: a JobHandle.

        >>> await add.s(2, 3).enqueue_async(connection=aconn)        # doctest: +SKIP
        """
        options = dict(self.options)
        if tags is not None:
            options["tags"] = tuple(options.get("tags") or ()) + check_tags(tags)
        return await self.task.enqueue_async(self.args, self.kwargs, connection=connection,
                                             **options)


def _tagged(options: EnqueueOptions, tags: tuple[str, ...]) -> EnqueueOptions:
    """A member's options with the workflow's tags after its own (checked again: at most 16)."""
    return dataclasses.replace(options, tags=options.tags + tags) if tags else options


def _check_set(options: dict[str, Any]) -> None:
    unknown = [name for name in options if name not in SET_OPTIONS]
    if unknown:
        raise InvalidOptionsError(
            f"set() got unknown option(s) {', '.join(map(repr, unknown))}; valid options are "
            f"{', '.join(SET_OPTIONS)}")
    if options.get("budget") is not None:
        # Checked as the enqueue will check it (a spec or a name of 1-255 characters).
        EnqueueOptions(budget=budget_name(options["budget"]))
    if options.get("tags") is not None:
        check_tags(options["tags"])
    for name in ("cost", "rate_cost", "weight"):
        value = options.get(name)
        high = 1_000 if name == "weight" else 1_000_000
        if value is None or (name != "weight" and callable(value)):
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
            raise InvalidOptionsError(
                f"{name} must be an int in [1, {high}]"
                f"{'' if name == 'weight' else ' or a callable'}, got {value!r}")


def _canvas(item: object, where: str) -> Canvas:
    if not isinstance(item, Canvas):
        raise InvalidOptionsError(f"{where} takes signatures (task.s(...)), got {item!r}")
    return item


def _error_sig(on_error: object) -> Signature | None:
    if on_error is not None and not isinstance(on_error, Signature):
        raise InvalidOptionsError(f"on_error must be a signature, got {on_error!r}")
    return on_error


class Chain(Canvas):
    """Members one after the other, each given the previous one's result (unless immutable)."""

    def __init__(self, *steps: Any, on_error: Signature | None = None) -> None:
        if len(steps) == 1 and not isinstance(steps[0], Canvas) and isinstance(steps[0], Iterable):
            steps = tuple(steps[0])
        flat: list[Canvas] = []
        for step in steps:
            step = _canvas(step, "chain")
            if isinstance(step, Chain) and step.on_error is None:
                inner: list[Canvas] = step.steps
                flat.extend(inner)
            else:
                flat.append(step)
        if not flat:
            raise InvalidOptionsError("a chain needs at least one member")
        self.steps: list[Canvas] = flat
        self.on_error = _error_sig(on_error)

    def __repr__(self) -> str:
        return " | ".join(map(repr, self.steps))

    def signatures(self) -> Iterable[Signature]:
        """The steps' signatures, in order.

        >>> len(list(chain(add.s(1), add.s(2)).signatures()))       # doctest: +SKIP
        2
        """
        for step in self.steps:
            yield from step.signatures()


class Group(Canvas):
    """Members run in parallel; the result is the list of their results in member order."""

    def __init__(self, *members: Any, on_error: Signature | None = None) -> None:
        if len(members) == 1 and not isinstance(members[0], Canvas) \
                and isinstance(members[0], Iterable):
            members = tuple(members[0])
        self.members = [_canvas(m, "group") for m in members]
        if not self.members:
            raise InvalidOptionsError("a group needs at least one member")
        self.on_error = _error_sig(on_error)

    def __repr__(self) -> str:
        return f"group({', '.join(map(repr, self.members))})"

    def signatures(self) -> Iterable[Signature]:
        """The members' signatures, in order.

        >>> len(list(group(add.s(1), add.s(2)).signatures()))       # doctest: +SKIP
        2
        """
        for member in self.members:
            yield from member.signatures()


class Chord(Chain):
    """A group and a callback that gets the list of the group's results once all succeeded."""

    def __init__(self, header: Any, body: Any, on_error: Signature | None = None) -> None:
        if not isinstance(header, Group):
            header = Group(header)
        super().__init__(header, _canvas(body, "chord"), on_error=on_error)


def chain(*steps: Any, on_error: Signature | None = None) -> Chain:
    """`chain(a.s(), b.s(), c.s())`, also `a.s() | b.s() | c.s()`.

        >>> chain(add.s(2, 3), add.s(4)).delay().get(timeout=10)    # doctest: +SKIP
        """
    return Chain(*steps, on_error=on_error)


def group(*members: Any, on_error: Signature | None = None) -> Group:
    """`group(a.s(1), a.s(2))`, or `group(a.s(i) for i in range(10))`.

        >>> group(add.s(i, i) for i in range(3)).delay().get(timeout=10)  # doctest: +SKIP
        """
    return Group(*members, on_error=on_error)


def chord(header: Any, body: Any, on_error: Signature | None = None) -> Chord:
    """`chord(group(...), callback.s())`: the callback gets the group's results as a list.

        >>> chord(group(add.s(i, i) for i in range(3)), total.s()).delay()  # doctest: +SKIP
        """
    return Chord(header, body, on_error=on_error)


@dataclass
class Plan:
    """A canvas flattened: members in dependency order (parents first), the members whose
    results make the canvas's, and how ('one', 'list')."""

    members: list[WorkflowMember] = field(default_factory=list)
    result: list[int] = field(default_factory=list)
    kind: str = "one"
    on_error: tuple[str, Any, Any, str] | None = None

    @classmethod
    def of_call(cls, call: Call, depends_on: Sequence[Dependency], retention: str) -> Plan:
        """The plan of one call that runs after `depends_on` (job ids, WorkflowResults).

        >>> Plan.of_call(add.call((1, 2)), [7], add.retention_json).kind  # doctest: +SKIP
        'one'
        """
        member = WorkflowMember(call.task, call.payload, call.options, call.on_failure, "none",
                                tuple((None, d, i, False) for i, d in enumerate(depends_on)),
                                retention)
        return cls(members=[member], result=[0], kind="one")

    @classmethod
    def of(cls, canvas: Canvas, depends_on: Sequence[int] = (),
           tags: tuple[str, ...] = ()) -> Plan:
        """The plan of a canvas; `tags` added to every member's (the workflow's tags).

        >>> len(Plan.of(chain(add.s(1), add.s(2))).members)          # doctest: +SKIP
        2
        """
        plan = cls()
        out = plan.build(canvas, None, list(depends_on))
        assert out is not None
        plan.result, plan.kind = out
        if tags:
            plan.members = [dataclasses.replace(m, options=_tagged(m.options, tags))
                            for m in plan.members]
        if len(plan.members) > WORKFLOW_MEMBERS_MAX:
            raise InvalidOptionsError(
                f"a workflow has at most {WORKFLOW_MEMBERS_MAX} members, "
                f"got {len(plan.members)}")
        if canvas.on_error is not None:
            sig = canvas.on_error
            call = sig.call(incoming=True)  # the failed member's id comes first
            plan.on_error = (call.task, call.payload, _tagged(call.options, tags),
                             call.on_failure)
        return plan

    def build(self, node: Canvas, incoming: _Incoming, external: list[int]) -> _Incoming:
        """Add `node`'s members, fed by `incoming`; the members its result comes from.

        >>> Plan().build(add.s(1), None, [])                         # doctest: +SKIP
        ([0], 'one')
        """
        if len(self.members) > WORKFLOW_MEMBERS_MAX:
            raise InvalidOptionsError(
                f"a workflow has at most {WORKFLOW_MEMBERS_MAX} members")
        if isinstance(node, Signature):
            passes = incoming is not None and not node.immutable
            call = node.call(incoming=passes)
            parents: list[tuple[int | None, int | None, int, bool]] = []
            if incoming is not None:
                for position, parent in enumerate(incoming[0]):
                    parents.append((parent, None, position, passes))
            for existing in external:
                parents.append((None, existing, len(parents), False))
            mode = incoming[1] if passes and incoming is not None else "none"
            self.members.append(WorkflowMember(
                call.task, call.payload, call.options, call.on_failure, mode, tuple(parents),
                node.task.retention_json))
            return ([len(self.members) - 1], "one")
        if isinstance(node, Chain):
            current = incoming
            for index, step in enumerate(node.steps):
                current = self.build(step, current, external if index == 0 else [])
            return current
        if isinstance(node, Group):
            tails: list[int] = []
            for member in node.members:
                out = self.build(member, incoming, external)
                assert out is not None
                tails.extend(out[0])
            return (tails, "list")
        raise InvalidOptionsError(f"not a canvas: {node!r}")
