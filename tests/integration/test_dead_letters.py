"""Dead letters (issue #43, docs/design.md "Dead letters") on a real PostgreSQL: the jobs that
ended failed or held, listed by queue, task, tag, error type and age; redriven (new attempts of
the same jobs, paced per queue in admission order, with lineage on the job and a row in the
audit log) and purged (with their tags' lookup rows; a workflow's members left to their
workflow), each with a dry run that names exactly what the real run then touches; the CLI's
`dead` verbs and `audit`. Bad input raises InvalidOptionsError and writes nothing.

The rate a fleet keeps under a redrive is tests/acceptance/test_dead_letters_fleet.py's.
Shown to fail on a broken variant: `test_the_dry_run_checker_fails_when_the_world_moves`."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from _integration import count
from click.testing import CliRunner

from workhorse import (
    ConcurrencyPolicyDefinition,
    EnqueueOptions,
    InvalidOptionsError,
    JobStatus,
    Queue,
    _ops,
)
from workhorse.cli import main

PAYLOAD: dict[str, Any] = {"args": [], "kwargs": {}}


def make_dead(conn: psycopg.Connection[Any], ids: list[int], *, status: str = "failed",
              error_type: str = "Outage", ago: float = 0.0) -> None:
    conn.execute(
        "UPDATE workhorse.jobs SET status = %s, attempts = max_attempts,"
        " finished_at = now() - make_interval(secs => %s),"
        " error = jsonb_build_object('type', %s::text, 'message', 'm', 'traceback', NULL)"
        " WHERE id = ANY(%s)", (status, ago, error_type, ids))


def first_json(output: str) -> Any:
    return json.JSONDecoder().raw_decode(output.strip())[0]


@pytest.fixture
def dead(conn: Any, queue: Queue) -> dict[str, list[int]]:
    """Dead jobs of two queues and two tasks, failed and held, old and new, tagged or not,
    beside live ones that no dead verb may touch."""
    mail = queue.enqueue_many([("mail.send", PAYLOAD, EnqueueOptions(
        queue="mail", priority=i % 2, tags=["outage-7"] if i < 4 else [])) for i in range(6)])
    sms = queue.enqueue_many([("sms.send", PAYLOAD, EnqueueOptions(queue="sms"))] * 3)
    live = queue.enqueue_many([("mail.send", PAYLOAD, EnqueueOptions(queue="mail",
                                                                     tags=["outage-7"]))] * 2)
    make_dead(conn, mail[:4])
    make_dead(conn, mail[4:], status="held", error_type="BadAddress", ago=7200)
    make_dead(conn, sms, error_type="Outage", ago=60)
    return {"mail": mail, "sms": sms, "live": live}


def test_dead_letters_are_listed_by_every_filter(queue: Queue, dead: dict[str, list[int]]
                                                 ) -> None:
    mail, sms = dead["mail"], dead["sms"]
    ids = {j.id for j in queue.list_dead(limit=100)}
    assert ids == set(mail) | set(sms)  # live jobs are not dead letters
    assert [j.id for j in queue.list_dead(queue="sms")] == sorted(sms, reverse=True)
    assert {j.id for j in queue.list_dead(task="mail.send")} == set(mail)
    assert {j.id for j in queue.list_dead(tag="outage-7")} == set(mail[:4])
    assert {j.id for j in queue.list_dead(error_type="BadAddress")} == set(mail[4:])
    assert {j.id for j in queue.list_dead(since="1h")} == set(mail[:4]) | set(sms)
    assert {j.id for j in queue.list_dead(since=datetime.now(UTC) - timedelta(seconds=30))
            } == set(mail[:4])
    assert {j.status for j in queue.list_dead(queue="mail")} == {JobStatus.FAILED,
                                                                 JobStatus.HELD}
    assert queue.list_dead(queue="nope") == []


def test_a_redrive_is_paced_per_queue_in_admission_order_with_lineage(
        conn: Any, queue: Queue, dead: dict[str, list[int]]) -> None:
    mail, sms = dead["mail"], dead["sms"]
    queue.sync_concurrency_policies("dead", [
        ConcurrencyPolicyDefinition(queue="sms", max_active=5, rate_limit="2/s")])
    before = count(conn)
    dry = queue.redrive(since="3h", dry_run=True)
    assert dry.audit_id is None and count(conn) == before
    assert count(conn, "status IN ('failed', 'held')") == len(mail) + len(sms)
    real = queue.redrive(since="3h", reason="the API is back")
    assert (real.jobs, real.queues) == (dry.jobs, dry.queues)
    # Admission order within a queue: priority first (1 before 0), then id.
    by_queue = {q: [i for i, qq in zip(real.jobs, real.queues, strict=True) if qq == q]
                for q in ("mail", "sms")}
    assert by_queue["mail"] == [*mail[1::2], *mail[0::2]]
    assert by_queue["sms"] == sorted(sms)
    # sms has its own rate (2/s): 0.5 s apart; mail has none: all at once.
    releases = dict(zip(real.jobs, real.releases, strict=True))
    gaps = [(releases[b] - releases[a]).total_seconds()
            for a, b in zip(by_queue["sms"], by_queue["sms"][1:], strict=False)]
    assert gaps == pytest.approx([0.5, 0.5])
    assert len({releases[i] for i in mail}) == 1
    jobs = {j.id: j for j in queue.list_jobs(limit=100)}
    assert jobs[by_queue["sms"][0]].status is JobStatus.READY
    assert {jobs[i].status for i in by_queue["sms"][1:]} == {JobStatus.SCHEDULED}
    assert all(jobs[i].attempts == 0 and jobs[i].redrive_count == 1
               and jobs[i].redriven_at is not None for i in real.jobs)
    assert all(jobs[i].status is JobStatus.READY for i in dead["live"])
    attempts = _ops.execute(conn, _ops.job_attempts(mail[4]))
    assert attempts is not None
    assert attempts[-1].outcome == "redriven" and attempts[-1].redrive == {
        "from": "held", "by": _ops.dead.os_user(), "reason": "the API is back",
        "audit_id": real.audit_id, "application_name": attempts[-1].redrive["application_name"]}
    [entry] = queue.audit_log()
    assert (entry.id, entry.action, entry.count, entry.reason) == (
        real.audit_id, "redrive", len(real.jobs), "the API is back")
    assert sorted(entry.job_ids) == sorted(real.jobs) and "since" in entry.filters
    assert entry.os_user == _ops.dead.os_user() and entry.db_user
    # A second redrive finds nothing dead (no audit row for nothing).
    again = queue.redrive(since="3h")
    assert again.count == 0 and again.audit_id is None and len(queue.audit_log()) == 1
    # An explicit rate wins over the queue's.
    make_dead(conn, mail)
    paced = queue.redrive(queue="mail", rate="10/s", reason="slowly")
    assert (paced.last_release - paced.first_release).total_seconds() == pytest.approx(  # type: ignore[operator]
        (len(mail) - 1) / 10)
    assert queue.get_job(mail[0]).redrive_count == 2  # type: ignore[union-attr]


def test_a_purge_deletes_dead_letters_and_their_tags_but_not_a_workflows_members(
        conn: Any, queue: Queue, dead: dict[str, list[int]]) -> None:
    mail = dead["mail"]
    member = _ops.execute(conn, _ops.enqueue_many(
        [("mail.send", PAYLOAD, EnqueueOptions(queue="mail", depends_on=[dead["live"][0]]))]))[0]
    make_dead(conn, [member])
    dry = queue.purge(queue="mail", dry_run=True)
    assert sorted(dry.jobs) == sorted(mail) and member not in dry.jobs
    assert count(conn, "queue = 'mail'") == len(mail) + 3
    real = queue.purge(queue="mail", reason="bounced for good")
    assert real.jobs == sorted(dry.jobs) and real.audit_id is not None
    assert count(conn, "id = ANY(%s)", mail) == 0 and count(conn, "id = %s", member) == 1
    tags = conn.execute("SELECT job_id FROM workhorse.job_tags").fetchall()
    assert {row[0] for row in tags} == set(dead["live"])
    [entry] = queue.audit_log(action="purge")
    assert (entry.count, entry.reason, entry.filters) == (
        len(mail), "bounced for good", {"queue": "mail"})


@pytest.mark.parametrize("call", [
    lambda q: q.purge(queue="mail"),  # a real purge needs a reason
    lambda q: q.purge(queue="mail", reason=""),
    lambda q: q.redrive(queue="mail", reason="x" * 1001),
    lambda q: q.redrive(queue="mail", rate="fast"),
    lambda q: q.redrive(queue="mail", rate="0/s"),
    lambda q: q.redrive(queue="mail", dry_run="yes"),
    lambda q: q.redrive(since="-5s"),
    lambda q: q.redrive(since=datetime(2026, 1, 1)),  # naive
    lambda q: q.redrive(since=True),
    lambda q: q.redrive(tag="x" * 101),
    lambda q: q.redrive(queue=""),
    lambda q: q.redrive([1, "two"]),
    lambda q: q.purge(error_type="x" * 256, reason="r"),
    lambda q: q.list_dead(limit=0),
    lambda q: q.list_dead(task=7),
    lambda q: q.audit_log(action="delete"),
    lambda q: q.audit_log(limit=0),
])
def test_bad_input_raises_and_writes_nothing(conn: Any, queue: Queue,
                                             dead: dict[str, list[int]], call: Any) -> None:
    before = (count(conn), count(conn, "status IN ('failed', 'held')"))
    with pytest.raises(InvalidOptionsError):
        call(queue)
    assert (count(conn), count(conn, "status IN ('failed', 'held')")) == before
    assert queue.audit_log() == []


def test_the_cli_dead_verbs_and_the_audit_log(database_url: str, conn: Any, queue: Queue,
                                              dead: dict[str, list[int]]) -> None:
    runner = CliRunner()
    base = ["--database-url", database_url]

    def run(*args: str) -> Any:
        return runner.invoke(main, [*base, *args])

    listed = run("dead", "list", "--queue", "sms", "--json")
    assert listed.exit_code == 0, listed.output
    assert [j["id"] for j in first_json(listed.output)] == sorted(dead["sms"], reverse=True)
    table = run("dead", "list", "--error-type", "BadAddress")
    assert table.exit_code == 0 and "BadAddress" in table.output
    shown = run("dead", "show", str(dead["sms"][0]))
    assert shown.exit_code == 0 and "Outage" in shown.output
    dry = run("dead", "redrive", "--tag", "outage-7", "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    report = first_json(dry.output)
    assert report["dry_run"] and report["count"] == 4 and report["audit_id"] is None
    real = run("dead", "redrive", "--tag", "outage-7", "--rate", "100/s", "--reason", "back")
    assert real.exit_code == 0 and "redrove 4 job(s)" in real.output, real.output
    no_reason = run("dead", "purge", "--queue", "sms")
    assert no_reason.exit_code == 2
    would = run("dead", "purge", "--queue", "sms", "--dry-run", "--reason", "r")
    assert would.exit_code == 0 and "would purge 3 job(s)" in would.output
    purged = run("dead", "purge", "--queue", "sms", "--reason", "gone", "--json")
    assert purged.exit_code == 0 and first_json(purged.output)["jobs"] == sorted(dead["sms"])
    audit = run("audit", "--json")
    assert audit.exit_code == 0
    assert [e["action"] for e in first_json(audit.output)] == ["purge", "redrive"]
    plain = run("audit")
    assert plain.exit_code == 0 and "gone" in plain.output and "back" in plain.output
    bad = run("dead", "redrive", "--rate", "fast")
    assert bad.exit_code != 0 and "rate" in bad.output


def test_the_dry_run_checker_fails_when_the_world_moves(conn: Any, queue: Queue,
                                                       dead: dict[str, list[int]]) -> None:
    """The checker "the real run touches exactly what the dry run named" is not vacuous: a job
    that dies between the two makes them differ, and the checker says so."""
    dry = queue.redrive(queue="mail", dry_run=True)
    make_dead(conn, dead["live"][:1])
    real = queue.redrive(queue="mail", reason="r")
    assert real.jobs != dry.jobs and set(real.jobs) - set(dry.jobs) == {dead["live"][0]}
