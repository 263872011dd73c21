"""Enqueue: one statement for a batch of jobs, their unique digests, and jobs with dependencies
(a workflow of one member each)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from .. import _sql
from .._driver import Operation, encode_json
from ..errors import (
    InvalidOptionsError,
)
from ..types import (
    UNIQUE_STATES_DEFAULT,
    EnqueueOptions,
    Unique,
    check_name,
    shown,
)
from .jobs import or_null, tags_json, unless_one
from .workflows import WorkflowMember, enqueue_workflow


def enqueue_many(
    jobs: Sequence[tuple[str, Any, EnqueueOptions | None]],
    on_failure: Sequence[str] | None = None,
    meta: Sequence[dict[str, Any] | None] | None = None,
    arguments: Sequence[dict[str, Any] | None] | None = None,
) -> Operation[list[int]]:
    """The ids of `jobs`, in order (an existing job's id where a key made it a duplicate)."""
    outcomes = yield from enqueue_outcomes(jobs, on_failure, meta, arguments)
    return [job_id for job_id, _ in outcomes]


def enqueue_outcomes(
    jobs: Sequence[tuple[str, Any, EnqueueOptions | None]],
    on_failure: Sequence[str] | None = None,
    meta: Sequence[dict[str, Any] | None] | None = None,
    arguments: Sequence[dict[str, Any] | None] | None = None,
) -> Operation[list[tuple[int, bool]]]:
    """`(id, duplicate)` for each of `jobs`, in order: duplicate is True when the enqueue
    inserted no row for it (an idempotency hit, a unique duplicate, a job_key update).

    `arguments` (one per job, or None) are a task call's arguments bound through its signature,
    which a `Unique(by=("args",))` compares; without them it compares the payload."""
    for what, per_job in (("on_failure", on_failure), ("meta", meta),
                          ("arguments", arguments)):
        if per_job is not None and (isinstance(per_job, str | dict) or len(per_job) != len(jobs)):
            raise InvalidOptionsError(f"{what} must be a sequence with one entry per job")
    tasks: list[str] = []
    payloads: list[str] = []
    every: list[EnqueueOptions] = []
    names: set[str] = set()  # task names already checked
    unique_keys: list[str | None] = []
    for index, item in enumerate(jobs):
        try:
            task, payload, options = item
        except (TypeError, ValueError):
            raise InvalidOptionsError(
                f"job {index} must be a (task, payload, options) tuple, got {item!r}"
            ) from None
        if not isinstance(task, str) or task not in names:
            check_name("task", task)
            names.add(task)
        if options is None:
            options = _DEFAULT_OPTIONS
        elif not isinstance(options, EnqueueOptions):
            raise InvalidOptionsError(f"options must be EnqueueOptions, got {options!r}")
        tasks.append(task)
        payloads.append(encode_json(payload))
        every.append(options)
        unique_keys.append(None if options.unique is None else unique_digest(
            options, payload, None if arguments is None else arguments[index]))
    if on_failure is None:
        failure_modes = ["fail"] * len(jobs)
    else:
        failure_modes = list(on_failure)
        for failure_mode in failure_modes:
            if failure_mode not in ("fail", "hold"):
                raise InvalidOptionsError(
                    f"on_failure must be 'fail' or 'hold', got {failure_mode!r}")
    metas = ([encode_json(m, "meta") if m else None for m in meta] if meta is not None
             else [None] * len(jobs))
    if not tasks:
        return []
    if any(options.depends_on for options in every):
        # Jobs with dependencies are workflows of one member each: one statement a job, in
        # input order (the others as usual, one a job too, to keep ids in input order).
        outcomes: list[tuple[int, bool]] = []
        for index, options in enumerate(every):
            payload = jobs[index][1]
            if not options.depends_on:
                outcomes += yield from enqueue_outcomes(
                    [(tasks[index], payload, options)], [failure_modes[index]],
                    None if meta is None else [meta[index]],
                    None if arguments is None else [arguments[index]])
                continue
            # Job ids and WorkflowResults (the API edge resolved handles): enqueue_workflow
            # reads a workflow's result members on this connection.
            member = WorkflowMember(tasks[index], payload, options, failure_modes[index], "none",
                                    tuple((None, dependency, i, False)
                                          for i, dependency in enumerate(options.depends_on)))
            _, ids = yield from enqueue_workflow([member], [0], "one")
            outcomes.append((ids[0], False))
        return outcomes
    first = every[0]
    if all(options is first for options in every):
        # One options object for the batch: each option goes once, not once a job.
        n = len(tasks)
        unique = first.unique
        rows = yield _sql.statement("enqueue_shared_options"), (
            tasks, first.queue, n, first.concurrency_key, n, first.priority, n, payloads,
            first.run_at, n, first.delay_seconds, n, first.max_attempts, n, failure_modes,
            or_null(metas), first.idempotency_key, n, or_null(unique_keys),
            None if unique is None else unique.period_seconds, n,
            None if unique is None else _states_text(unique), n,
            first.job_key, n, None if first.job_key is None else first.job_key_mode, n,
            unless_one(first.cost), n, unless_one(first.rate_cost), n,
            unless_one(first.weight), n, first.budget, n, tags_json(first.tags), n,
            *(value for bound in first.bounds for value in (bound, n)))
    else:
        uniques = [o.unique for o in every]
        rows = yield _sql.statement("enqueue"), (
            tasks, [o.queue for o in every], or_null([o.concurrency_key for o in every]),
            [o.priority for o in every], payloads, or_null([o.run_at for o in every]),
            or_null([o.delay_seconds for o in every]), [o.max_attempts for o in every],
            failure_modes, or_null(metas), or_null([o.idempotency_key for o in every]),
            or_null(unique_keys),
            or_null([None if u is None else u.period_seconds for u in uniques]),
            or_null([None if u is None else _states_text(u) for u in uniques]),
            or_null([o.job_key for o in every]),
            or_null([None if o.job_key is None else o.job_key_mode for o in every]),
            or_null([unless_one(o.cost) for o in every]),
            or_null([unless_one(o.rate_cost) for o in every]),
            or_null([unless_one(o.weight) for o in every]),
            or_null([o.budget for o in every]),
            or_null([tags_json(o.tags) for o in every]),
            *(or_null(list(column)) for column in zip(*(o.bounds for o in every), strict=True)))
    return [(row[0], bool(row[1])) for row in rows]


def _states_text(unique: Unique) -> str | None:
    """The states as the enqueue function reads them: comma-separated; None for the default."""
    return None if unique.states == UNIQUE_STATES_DEFAULT else ",".join(unique.states)


# Canonical JSON for a digest: keys sorted, so that {"a": 1, "b": 2} equals {"b": 2, "a": 1}.
_CANONICAL = json.JSONEncoder(allow_nan=False, separators=(",", ":"), ensure_ascii=False,
                              sort_keys=True)


def unique_digest(options: EnqueueOptions, payload: Any,
                  arguments: dict[str, Any] | None) -> str:
    """The identity of a unique job: a sha256 of its `by` values as canonical JSON. "args" are
    `arguments` (a task call's, bound through its signature) when given, else the payload; with
    `keys`, only the named arguments (or fields of a payload object).

    >>> from workhorse import Unique
    >>> one = EnqueueOptions(unique=Unique(by=("args", "queue")))
    >>> unique_digest(one, {"b": 2, "a": 1}, None) == unique_digest(one, {"a": 1, "b": 2}, None)
    True
    """
    unique = options.unique
    assert unique is not None
    document: dict[str, Any] = {}
    if "args" in unique.by:
        values: Any = payload if arguments is None else arguments
        if unique.keys is not None:
            if not isinstance(values, dict):
                raise InvalidOptionsError(
                    "Unique(keys=...) names fields: without a task's signature, the payload "
                    f"must be a JSON object, got {shown(values)}")
            missing = [key for key in unique.keys if key not in values]
            if missing and arguments is None:
                raise InvalidOptionsError(
                    f"Unique(keys=...): the payload has no field {', '.join(map(repr, missing))}")
            values = {key: values.get(key) for key in unique.keys}
        document["args"] = values
    if "queue" in unique.by:
        document["queue"] = options.queue
    if "concurrency_key" in unique.by:
        document["concurrency_key"] = options.concurrency_key
    try:
        text = _CANONICAL.encode(document)
    except (TypeError, ValueError) as exc:
        raise InvalidOptionsError(f"unique: the compared arguments are not JSON: {exc}") from None
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


_DEFAULT_OPTIONS = EnqueueOptions()
