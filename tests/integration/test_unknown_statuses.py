"""Readers accept a status they do not know (docs/design.md, `Job`): a newer release may store one
(a status such as `parked`) while this release's processes still read the same rows. The
API, health and the CLI show it as it is instead of failing."""

from __future__ import annotations

import json
from typing import Any

import psycopg
from click.testing import CliRunner

from workhorse import EnqueueOptions, JobStatus, Queue
from workhorse.cli import main


def _a_status_from_a_newer_release(conn: psycopg.Connection[Any], queue: Queue) -> int:
    job_id = queue.enqueue("t", {}, EnqueueOptions(queue="q"))
    # What a newer release's migration would do: allow its new status.
    conn.execute("ALTER TABLE workhorse.jobs DROP CONSTRAINT jobs_status_check")
    conn.execute("UPDATE workhorse.jobs SET status = 'parked' WHERE id = %s", (job_id,))
    return job_id


def test_a_job_in_an_unknown_status_reads_as_that_status(conn, queue):
    job_id = _a_status_from_a_newer_release(conn, queue)
    job = queue.get_job(job_id)
    assert job is not None and job.status == "parked" and str(job.status) == "parked"
    assert isinstance(job.status, JobStatus)
    assert [j.id for j in queue.list_jobs(queue="q")] == [job_id]
    queue.health()  # counts the statuses it knows, and does not fail on the others


def test_the_cli_shows_an_unknown_status_as_it_is(conn, queue, database_url):
    job_id = _a_status_from_a_newer_release(conn, queue)
    runner = CliRunner()
    listed = runner.invoke(main, ["--database-url", database_url, "jobs", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    assert [(j["id"], j["status"]) for j in json.loads(listed.stdout)] == [(job_id, "parked")]
    shown = runner.invoke(main, ["--database-url", database_url, "jobs", "show", str(job_id)])
    assert shown.exit_code == 0, shown.output
    assert "parked" in shown.stdout
    table = runner.invoke(main, ["--database-url", database_url, "jobs", "list"])
    assert table.exit_code == 0, table.output
    assert "parked" in table.stdout


def test_an_unknown_status_is_still_refused_as_a_filter(queue):
    import pytest

    from workhorse import InvalidOptionsError

    with pytest.raises(InvalidOptionsError, match="unknown job status"):
        queue.list_jobs(status="parked")


def test_reading_a_known_status_gives_the_member_itself():
    assert JobStatus.of_row("held") is JobStatus.HELD
    unknown = JobStatus.of_row("parked")
    assert unknown not in list(JobStatus) and unknown.value == "parked"
