"""A call of a task, resolved: what `Task.call` hands the enqueuer (a `Call`: the task's name,
its payload, its finished options), and the resolution of what a call site may give as a
callable (a concurrency key, a cost) or as a spec (a budget).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import InvalidOptionsError
from .types import BudgetSpec, EnqueueOptions

KeySpec = str | Callable[..., Any] | None
# A job's cost or rate cost: an int, or a callable of the task's arguments called at enqueue.
CostSpec = int | Callable[..., Any]


def resolve_key(spec: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
    """A concurrency key from a string, or a callable called as `key(*args, **kwargs)`.

    A str is used as is, an int becomes a string, None means keyless; anything else, or an empty
    string, is an InvalidOptionsError.

    >>> resolve_key(lambda message: message["tenant"], ({"tenant": "t1"},), {})
    't1'
    """
    if callable(spec):
        try:
            value = spec(*args, **kwargs)
        except InvalidOptionsError:
            raise
        except Exception as exc:
            # The key function is user code run at enqueue: its failure is a bad enqueue, raised
            # before anything is written, with the original kept as the cause.
            name = getattr(spec, "__qualname__", repr(spec))
            raise InvalidOptionsError(
                f"the concurrency_key callable {name} raised {type(exc).__name__}: {exc}"
            ) from exc
    else:
        value = spec
    if value is None:
        return None
    if isinstance(value, bool):
        raise InvalidOptionsError(f"concurrency key must be a str or int, got {value!r}")
    if isinstance(value, int):
        value = str(value)
    if not isinstance(value, str):
        raise InvalidOptionsError(
            f"concurrency key must be a str or int, got {type(value).__name__}: {value!r}"
        )
    if value == "":
        raise InvalidOptionsError("concurrency key must not be empty (use None for keyless)")
    return value


def resolve_cost(what: str, spec: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """A job's `cost` or `rate_cost`: the value, or a callable called as `cost(*args, **kwargs)`
    at enqueue. A callable that raises is an InvalidOptionsError (nothing is written); what it
    returns is checked by EnqueueOptions (an int in [1, 1,000,000]).

    >>> resolve_cost("cost", lambda job: job["gpus"], ({"gpus": 2},), {})
    2
    """
    if not callable(spec):
        return spec
    try:
        return spec(*args, **kwargs)
    except InvalidOptionsError:
        raise
    except Exception as exc:
        name = getattr(spec, "__qualname__", repr(spec))
        raise InvalidOptionsError(
            f"the {what} callable {name} raised {type(exc).__name__}: {exc}") from exc


# What apply_async, map, enqueue_async and send_task accept besides args and kwargs; `countdown`
# and `eta` are Celery's spellings of `delay` and `run_at`.
CALL_OPTIONS = ("queue", "concurrency_key", "priority", "delay", "countdown", "run_at", "eta",
                "max_attempts", "idempotency_key", "unique", "job_key", "job_key_mode", "cost",
                "rate_cost", "weight", "budget", "tags", "expires", "deadline")


def budget_name(budget: object) -> str | None:
    """The name a `budget=` gives: a BudgetSpec's, or a string as it is (checked when the
    options are built: 1-255 characters); None for none.

    >>> budget_name(BudgetSpec("openai", max_active=5)), budget_name("partner-api")
    ('openai', 'partner-api')
    """
    if budget is None or isinstance(budget, str):
        return budget
    if isinstance(budget, BudgetSpec):
        return budget.name
    raise InvalidOptionsError(
        f"budget must be a budget name or an app.budget(...) spec, got {budget!r}")


def check_call_options(options: Mapping[str, Any], where: str) -> None:
    """InvalidOptionsError naming the valid options when `options` has an unknown one."""
    unknown = [name for name in options if name not in CALL_OPTIONS]
    if unknown:
        raise InvalidOptionsError(
            f"{where}() got unknown option(s) {', '.join(map(repr, unknown))}; valid options are "
            f"{', '.join(CALL_OPTIONS)}" + (", connection" if where != "map" else "")
        )



@dataclass(frozen=True, slots=True)
class Call:
    """One enqueue request, resolved and validated; the unit `App.enqueue_many` sends."""

    task: str
    payload: dict[str, Any]
    options: EnqueueOptions
    on_failure: str = "fail"
    # The arguments bound through the task's signature, by parameter name: what a unique job's
    # `by=("args",)` compares (set only when the call is unique).
    arguments: dict[str, Any] | None = None
