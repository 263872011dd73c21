"""Job costs where an operator reads them (issue #26 items 5, docs/design.md "Fair share and job
cost"): `workhorse top` shows units where a queue's costs differ from 1, and every reader of a
job's row (get_job, list_jobs, `workhorse jobs list --json`, the dashboard's job search and its
queue page's running jobs) carries the job's real `cost`, `rate_cost` and `weight`.

Shown to fail without the change: before it, `top` printed "5" (the units, unlabelled) where it
now prints "5 units / 8 (2 jobs)", and list_jobs, the browse and the dashboard statements of
0.2.0 returned no cost columns, so every job read back through them had cost, rate_cost and
weight 1 (`_ops.job_from_row`'s defaults); `test_every_reader_sees_the_costs` asserts 5 / 3 / 3
through each of them.
"""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, Job, Queue, _ops
from workhorse import cli as cli_module
from workhorse.cli import _render, main


def _top(database_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(cli_module.console, "_width", 200)  # one table row per line
    result = CliRunner().invoke(main, ["--database-url", database_url, "top", "--iterations", "1"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def _row(table: str, queue: str) -> str:
    [line] = [line for line in table.splitlines() if re.search(rf"\b{queue}\b", line)]
    return line


def test_top_shows_units_where_costs_differ_from_one(
        database_url: str, queue: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    queue.sync_concurrency_policies("fleet", [ConcurrencyPolicyDefinition("gpu", 8),
                                              ConcurrencyPolicyDefinition("mail", 8)])
    queue.enqueue_many([("gpu.train", {}, EnqueueOptions(queue="gpu", cost=c)) for c in (3, 2)])
    queue.enqueue_many([("mail.send", {}, EnqueueOptions(queue="mail")) for _ in range(2)])
    assert len(queue.claim("gpu", 10, 60)) == 2
    assert len(queue.claim("mail", 10, 60)) == 2

    [gpu] = [p for p in queue.health().policies if p.queue == "gpu"]
    assert (gpu.active, gpu.active_units, gpu.active_jobs, gpu.available) == (5, 5, 2, 3)
    table = _top(database_url, monkeypatch)
    gpu_row = _row(table, "gpu")
    assert "5 units / 8 (2 jobs)" in gpu_row and "3 units" in gpu_row, table
    mail_row = _row(table, "mail")
    assert "units" not in mail_row, table  # every cost is 1: plain counts, as before
    assert re.search(r"\b2\b.*\b6\b", mail_row), table


def test_the_units_rule_fails_on_a_broken_variant(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker above catches a `top` that ignores costs: with `_in_units` forced false (the
    code before this change), the gpu row reads "5", not "5 units / 8 (2 jobs)"."""
    from workhorse.types import PolicyHealth

    p = PolicyHealth("ns", "gpu", 8, None, 5, 3, 0, 0, False, active_units=5, active_jobs=2)
    assert _render._active_text(p, True) == "5 units / 8 (2 jobs)"
    monkeypatch.setattr(_render, "_in_units", lambda p: False)
    assert _render._active_text(p, True) == "5"


def _costs(job: Job) -> tuple[int, int, int]:
    return job.cost, job.rate_cost, job.weight


def test_every_reader_sees_the_costs(database_url: str, queue: Queue) -> None:
    options = EnqueueOptions(queue="costly", concurrency_key="t", cost=5, rate_cost=3, weight=3)
    job_id = queue.enqueue("costly.run", {}, options)
    plain_id = queue.enqueue("costly.run", {}, EnqueueOptions(queue="costly"))
    expected = {job_id: (5, 3, 3), plain_id: (1, 1, 1)}

    def check(jobs: list[Job], where: str) -> None:
        found = {job.id: _costs(job) for job in jobs if job.id in expected}
        assert found == expected, where

    stored = queue.get_job(job_id)
    assert stored is not None and _costs(stored) == (5, 3, 3)
    check(queue.list_jobs(queue="costly"), "Queue.list_jobs")
    check(_ops.execute(queue.conn, _ops.browse_jobs(queue="costly")).jobs, "browse_jobs window")
    # A window of one id: the older part (per status, its own statement) reads them too.
    check(_ops.execute(queue.conn, _ops.browse_jobs(queue="costly", window=1)).jobs,
          "browse_jobs older")

    result = CliRunner().invoke(main, ["--database-url", database_url, "jobs", "list",
                                       "--queue", "costly", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rows = {row["id"]: (row["cost"], row["rate_cost"], row["weight"])
            for row in json.loads(result.stdout)}
    assert rows == expected

    from workhorse.dashboard import _queries

    search = _queries.Search(queue="costly")
    check(_ops.execute(queue.conn, _queries.find_jobs(search)).jobs, "dashboard window")
    check(_ops.execute(queue.conn, _queries.find_jobs(search, window=1)).jobs, "dashboard older")

    [running] = queue.claim("costly", 1, 60)
    assert running.id == job_id
    active = queue.list_jobs(queue="costly", status="active")
    assert [_costs(j) for j in active] == [(5, 3, 3)]
