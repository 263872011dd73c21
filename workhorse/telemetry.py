"""OpenTelemetry instruments, through `opentelemetry-api` only.

With no SDK configured these are the API's no-op proxies, so they cost next to nothing. The one
attribute is the queue (the budget's name on the budget gauges; the reason gauge adds the code):
raw concurrency keys are never an attribute, because they are unbounded and may name customers.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import context, metrics, propagate, trace
from opentelemetry.metrics import CallbackOptions, Observation

from .types import PolicyHealth, QueueHealth, RateLimit

QUEUE_ATTRIBUTE = "workhorse.queue"
# The one attribute of the budget gauges (docs/design.md "Named budgets").
BUDGET_ATTRIBUTE = "workhorse.budget"
_TRACE_META_KEY = "trace"

_tracer = trace.get_tracer("workhorse")
_meter = metrics.get_meter("workhorse")

jobs_claimed = _meter.create_counter("workhorse.jobs.claimed", unit="{job}")
jobs_succeeded = _meter.create_counter("workhorse.jobs.succeeded", unit="{job}")
jobs_failed = _meter.create_counter("workhorse.jobs.failed", unit="{job}")
jobs_retried = _meter.create_counter("workhorse.jobs.retried", unit="{job}")
jobs_held = _meter.create_counter("workhorse.jobs.held", unit="{job}")
job_duration = _meter.create_histogram("workhorse.job.duration", unit="s")
job_queue_wait = _meter.create_histogram("workhorse.job.queue_wait", unit="s")

# The latest health snapshot, published by whoever polls health (the worker supervisor, `top`).
_snapshot_lock = threading.Lock()
_snapshot: QueueHealth | None = None
# Set the first time a metrics SDK collects the gauges: only an SDK's reader calls their callbacks.
# Until then a supervisor does not read health for them (a fleet-wide read of every policy and
# budget every few seconds per supervisor, issue #40).
_gauges_collected = threading.Event()


def gauges_collected() -> bool:
    """Whether a metrics SDK has collected the health gauges (so they are worth refreshing)."""
    return _gauges_collected.is_set()


def publish_health(health: QueueHealth) -> None:
    """Make `health` the values the concurrency gauges report at the next collection."""
    global _snapshot
    with _snapshot_lock:
        _snapshot = health


def _gauge_values(value_of: str | Callable[[PolicyHealth], float | None]
                  ) -> Iterable[Observation]:
    _gauges_collected.set()
    with _snapshot_lock:
        snapshot = _snapshot
    if snapshot is None:
        return []
    observations = []
    for policy in snapshot.policies:
        value = value_of(policy) if callable(value_of) else getattr(policy, value_of)
        if value is not None:
            observations.append(Observation(value, {QUEUE_ATTRIBUTE: policy.queue}))
    return observations


def _starts_per_second(policy: PolicyHealth) -> float | None:
    """The queue-wide rate limit in force, as starts per second (N / period)."""
    if policy.rate_limit is None:
        return None
    limit = RateLimit.parse(policy.rate_limit)
    return limit.n / limit.period


def _observe_limit(options: CallbackOptions) -> Iterable[Observation]:
    return _gauge_values("max_active")


def _observe_active(options: CallbackOptions) -> Iterable[Observation]:
    return _gauge_values("active")


def _observe_blocked(options: CallbackOptions) -> Iterable[Observation]:
    return _gauge_values("blocked_ready")


def _observe_rate_limit(options: CallbackOptions) -> Iterable[Observation]:
    return _gauge_values(_starts_per_second)


def _observe_rate_limited_keys(options: CallbackOptions) -> Iterable[Observation]:
    return _gauge_values(
        lambda policy: policy.rate_limited_keys if policy.rate_limit_per_key else None)


_meter.create_observable_gauge("workhorse.queue.concurrency.limit", callbacks=[_observe_limit])
_meter.create_observable_gauge(
    "workhorse.queue.rate.limit", unit="{start}/s", callbacks=[_observe_rate_limit])
_meter.create_observable_gauge(
    "workhorse.queue.rate.limited_keys", unit="{key}", callbacks=[_observe_rate_limited_keys])
_meter.create_observable_gauge("workhorse.queue.concurrency.active", callbacks=[_observe_active])
_meter.create_observable_gauge(
    "workhorse.queue.concurrency.blocked_ready", callbacks=[_observe_blocked]
)


def _budget_values(field: str) -> Iterable[Observation]:
    """One observation per budget in the snapshot with a value for `field`, whose one attribute
    is the budget's name."""
    _gauges_collected.set()
    with _snapshot_lock:
        snapshot = _snapshot
    if snapshot is None:
        return []
    return [Observation(value, {BUDGET_ATTRIBUTE: budget.name})
            for budget in snapshot.budgets
            if (value := getattr(budget, field)) is not None]


def _observe_budget_limit(options: CallbackOptions) -> Iterable[Observation]:
    return _budget_values("max_active")


def _observe_budget_active(options: CallbackOptions) -> Iterable[Observation]:
    return _budget_values("active_units")


# The reason codes' gauge (docs/design.md "Reason codes"): one observation per queue and code
# present, valued by its count; a code that went away is simply not observed.
REASON_ATTRIBUTE = "workhorse.reason"


def _observe_reasons(options: CallbackOptions) -> Iterable[Observation]:
    _gauges_collected.set()
    with _snapshot_lock:
        snapshot = _snapshot
    if snapshot is None:
        return []
    return [Observation(reason.count, {QUEUE_ATTRIBUTE: reason.queue,
                                       REASON_ATTRIBUTE: reason.code})
            for reason in snapshot.reasons if reason.queue is not None]


_meter.create_observable_gauge("workhorse.queue.reason", callbacks=[_observe_reasons])
_meter.create_observable_gauge("workhorse.budget.concurrency.limit",
                               callbacks=[_observe_budget_limit])
_meter.create_observable_gauge("workhorse.budget.concurrency.active",
                               callbacks=[_observe_budget_active])


@functools.lru_cache(maxsize=4096)
def attributes(queue: str) -> dict[str, str]:
    """The one attribute every instrument carries (shared dicts: callers must not change them)."""
    return {QUEUE_ATTRIBUTE: queue}


@contextmanager
def enqueue_span(task: str, queue: str) -> Iterator[dict[str, Any]]:
    """A `workhorse.enqueue` span; yields the job meta that carries its context to the run."""
    with _tracer.start_as_current_span(
        "workhorse.enqueue",
        kind=trace.SpanKind.PRODUCER,
        attributes={QUEUE_ATTRIBUTE: queue, "workhorse.task": task},
    ):
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        yield {_TRACE_META_KEY: carrier} if carrier else {}


@contextmanager
def run_span(task: str, queue: str, job_id: int, attempt: int, meta: dict[str, Any]) -> Iterator[
    trace.Span
]:
    """A `workhorse.run` span, a child of the enqueue span whose context travelled in the job."""
    carrier = meta.get(_TRACE_META_KEY) if isinstance(meta, dict) else None
    parent = propagate.extract(carrier) if isinstance(carrier, dict) else context.Context()
    with _tracer.start_as_current_span(
        "workhorse.run",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        attributes={
            QUEUE_ATTRIBUTE: queue,
            "workhorse.task": task,
            "workhorse.job.id": job_id,
            "workhorse.job.attempt": attempt,
        },
    ) as span:
        yield span
