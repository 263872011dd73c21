"""Workflows (docs/design.md "Workflows"): a canvas inserted in one statement, and read back."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .. import _sql
from .._driver import Operation, encode_json
from ..errors import InvalidOptionsError, JobNotFoundError
from ..types import (
    EnqueueOptions,
    Job,
    check_id,
)
from .jobs import DEFAULT_RETENTION_JSON, job_from_row, or_null, tags_json, unless_one

WORKFLOW_MEMBERS_MAX = 10_000


@dataclass(frozen=True, slots=True)
class WorkflowResult:
    """A dependency on an existing workflow: on its result members (a chain's last, a group's
    every one). The operation that enqueues the dependent reads them, on its own connection and
    so inside the caller's transaction: the API edge turns a WorkflowHandle into this, with no
    I/O of its own."""

    workflow_id: int


# What a dependency on existing work is, once the API edge resolved handles: a job id or a
# workflow's result members.
Dependency = int | WorkflowResult


@dataclass(frozen=True, slots=True)
class WorkflowMember:
    """One member of a canvas, resolved: its job, how parents' results reach it ('none',
    'one', 'list'), and its dependencies: (member index or None, existing id, a WorkflowResult
    or None, position, passes the result). Its units (cost, rate_cost, weight) are its options';
    `retention` (JSON, status -> seconds kept; its task's) fixes its expiry when the database
    ends it itself (canceled for a failed dependency, failed with PayloadError at release)."""

    task: str
    payload: dict[str, Any]
    options: EnqueueOptions
    on_failure: str
    mode: str
    parents: tuple[tuple[int | None, Dependency | None, int, bool], ...]
    retention: str = DEFAULT_RETENTION_JSON


def enqueue_workflow(
    members: Sequence[WorkflowMember],
    result_members: Sequence[int],
    result_kind: str,
    on_error: tuple[str, Any, EnqueueOptions, str] | None = None,
) -> Operation[tuple[int, list[int]]]:
    """Insert a canvas in one statement: (workflow id, member ids in order). An unknown
    existing parent id raises InvalidOptionsError, with nothing written; a dependency on an
    existing workflow (WorkflowResult) depends on its result members, read first."""
    if not members:
        raise InvalidOptionsError("a workflow needs at least one member")
    if len(members) > WORKFLOW_MEMBERS_MAX:
        raise InvalidOptionsError(
            f"a workflow has at most {WORKFLOW_MEMBERS_MAX} members, got {len(members)}")
    resolved: list[WorkflowMember] = []
    for m in members:
        resolved.append((yield from _with_existing_ids(m)))
    members = resolved
    payloads = [encode_json(m.payload) for m in members]
    for m in members:
        if m.options.idempotency_key is not None or m.options.unique is not None \
                or m.options.job_key is not None:
            raise InvalidOptionsError(
                "a workflow member cannot have an idempotency_key, unique or job_key")
        if m.options.expires is not None or m.options.deadline is not None:
            raise InvalidOptionsError(
                "a workflow member (or a job with depends_on) cannot have expires or a deadline "
                "yet (docs/design.md \"Deadlines\")")
    edge_jobs: list[int] = []
    edge_parents: list[int | None] = []
    edge_ids: list[int | None] = []
    edge_positions: list[int] = []
    edge_passes: list[bool] = []
    for index, m in enumerate(members):
        for parent, existing, position, passes in m.parents:
            edge_jobs.append(index + 1)
            edge_parents.append(None if parent is None else parent + 1)
            assert not isinstance(existing, WorkflowResult)  # _with_existing_ids resolved it
            edge_ids.append(None if existing is None else check_id(existing))
            edge_positions.append(position)
            edge_passes.append(passes)
    if on_error is None:
        error_args: tuple[Any, ...] = (None,) * 7
        error_units: tuple[int, int, int] = (1, 1, 1)
        error_budget: str | None = None
        error_tags: str | None = None
    else:
        task, payload, options, on_failure = on_error
        error_args = (task, options.queue, options.concurrency_key, options.priority,
                      encode_json(payload), options.max_attempts, on_failure)
        error_units = (options.cost, options.rate_cost, options.weight)
        error_budget = options.budget
        error_tags = tags_json(options.tags)
    rows = yield _sql.statement("enqueue_workflow"), (
        [m.task for m in members], [m.options.queue for m in members],
        [m.options.concurrency_key for m in members], [m.options.priority for m in members],
        payloads, [m.options.run_at for m in members],
        [m.options.delay_seconds for m in members], [m.options.max_attempts for m in members],
        [m.on_failure for m in members], [None] * len(members), [m.mode for m in members],
        edge_jobs, edge_parents, edge_ids, edge_positions, edge_passes,
        [i + 1 for i in result_members], result_kind, *error_args,
        or_null([unless_one(m.options.cost) for m in members]),
        or_null([unless_one(m.options.rate_cost) for m in members]),
        or_null([unless_one(m.options.weight) for m in members]),
        [m.retention for m in members], *error_units,
        or_null([m.options.budget for m in members]), error_budget,
        or_null([tags_json(m.options.tags) for m in members]), error_tags)
    workflow_id, ids, missing = rows[0]
    if workflow_id is None:
        raise InvalidOptionsError(
            f"depends_on names jobs that do not exist (never enqueued, or pruned): "
            f"{', '.join(map(str, missing))}")
    return workflow_id, list(ids)


def workflow_jobs(workflow_id: int) -> Operation[list[Job]]:
    """The members of a workflow, in insertion (id) order."""
    rows = yield _sql.statement("workflow_jobs"), (check_id(workflow_id, "a workflow id"),)
    return [job_from_row(row) for row in rows]


def workflow_row(workflow_id: int) -> Operation[tuple[Any, ...] | None]:
    """(id, result member ids, result kind, on_error job id, created_at), or None."""
    rows = yield _sql.statement("workflow_get"), (check_id(workflow_id, "a workflow id"),)
    return tuple(rows[0]) if rows else None


def workflow_releases(workflow_id: int) -> Operation[list[tuple[int, int, int]]]:
    """(member id, times released, pending parents) of each member: what tests count."""
    rows = yield _sql.statement("workflow_releases"), (check_id(workflow_id, "a workflow id"),)
    return [(row[0], row[1], row[2]) for row in rows]


def dependency_ids(dependencies: Iterable[object]) -> Operation[list[int]]:
    """The job ids `dependencies` stand for, in order, each once: a job id itself, a
    WorkflowResult its workflow's result members (JobNotFoundError when there is no such
    workflow). Anything else is an InvalidOptionsError (the API edge turns handles into these).
    """
    ids: list[int] = []
    for entry in dependencies:
        if isinstance(entry, WorkflowResult):
            row = yield from workflow_row(entry.workflow_id)
            if row is None:
                raise JobNotFoundError(
                    f"there is no workflow {entry.workflow_id} (pruned by retention?)")
            found = [int(job_id) for job_id in row[1]]
        elif isinstance(entry, bool) or not isinstance(entry, int):
            raise InvalidOptionsError(
                f"depends_on takes job ids, JobHandles or WorkflowHandles, got {entry!r}")
        else:
            found = [entry]
        ids += [job_id for job_id in found if job_id not in ids]
    return ids


def _with_existing_ids(member: WorkflowMember) -> Operation[WorkflowMember]:
    """`member` with each dependency on an existing workflow replaced by its result members
    (positions renumbered in order, an existing job it already depends on not repeated)."""
    if all(existing is None for _, existing, _, _ in member.parents):
        return member
    parents: list[tuple[int | None, Dependency | None, int, bool]] = []
    known: set[int] = set()
    for parent, existing, _, passes in member.parents:
        if existing is None:
            parents.append((parent, None, len(parents), passes))
            continue
        for job_id in (yield from dependency_ids([existing])):
            if job_id not in known:
                known.add(job_id)
                parents.append((parent, job_id, len(parents), passes))
    return replace(member, parents=tuple(parents))
