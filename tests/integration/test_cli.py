"""The `workhorse` command against a real database in known states: every verb, `--json`, and the
exit codes (0 success, 1 an error in one line, 2 a usage error)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import psycopg
import pytest
from click.testing import CliRunner, Result
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from workhorse import (
    ConcurrencyPolicyDefinition,
    EnqueueOptions,
    JobStatus,
    Queue,
    _sql,
)
from workhorse.cli import main
from workhorse.queue import error_document

BAD_DSN = "postgresql://x@127.0.0.1:1/x"


def _command(path: list[str]) -> click.Command:
    command: click.Command = main
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    return command


def cli(database_url: str | None, *args: str) -> Result:
    prefix = ["--database-url", database_url] if database_url else []
    return CliRunner().invoke(main, [*prefix, *args], catch_exceptions=False)


def ok_json(database_url: str | None, *args: str) -> Any:
    result = cli(database_url, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def with_dbname(url: str, dbname: str) -> str:
    params: dict[str, Any] = {**conninfo_to_dict(url), "dbname": dbname}
    return make_conninfo("", **params)


def run_process(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m workhorse ARGS` as its own process, as a user would run it."""
    return subprocess.run(
        [sys.executable, "-m", "workhorse", *args], cwd=cwd, capture_output=True, text=True,
        timeout=60, env={**os.environ, "COLUMNS": "80"},
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.stderr + result.stdout
    for needle in needles:
        assert needle in lines[0]


# ---- jobs in known states ------------------------------------------------------------------------


def _ended(queue: Queue, name: str, *, succeed: bool = False) -> int:
    """Claim the ready job of queue `name` and end its one attempt."""
    (claimed,) = queue.claim(name, 1, 30)
    if succeed:
        queue.complete(claimed.id, claimed.fence, {"ok": True})
    else:
        try:
            raise RuntimeError("boom")
        except RuntimeError as exc:
            queue.fail(claimed.id, claimed.fence, error_document(exc))
    return claimed.id


@pytest.fixture
def states(queue: Queue) -> dict[str, int]:
    """One job in each status, in queues named after it (keyed "k1" where it says so)."""
    one = EnqueueOptions
    ids: dict[str, int] = {}
    ids["ready"] = queue.enqueue("t.ready", {"args": [1], "kwargs": {}},
                                 one(queue="ready", concurrency_key="k1", priority=3))
    ids["scheduled"] = queue.enqueue("t.later", {"args": [], "kwargs": {}},
                                     one(queue="scheduled", delay=3600))
    queue.enqueue("t.active", None, one(queue="active", concurrency_key="k1"))
    (ids["active"],) = [c.id for c in queue.claim("active", 1, 300)]
    queue.enqueue("t.done", None, one(queue="succeeded"))
    ids["succeeded"] = _ended(queue, "succeeded", succeed=True)
    queue.enqueue("t.fail", None, one(queue="failed", max_attempts=1))
    ids["failed"] = _ended(queue, "failed")
    queue.enqueue_many([("t.hold", None, one(queue="held", max_attempts=1))],
                       on_failure=["hold"])
    ids["held"] = _ended(queue, "held")
    queue.enqueue_many([("t.hold", None, one(queue="held2", max_attempts=1))],
                       on_failure=["hold"])
    ids["held2"] = _ended(queue, "held2")
    ids["canceled"] = queue.enqueue("t.cancel", None, one(queue="canceled"))
    cancel = _sql.function_name("cancel_jobs")
    queue.conn.execute(f"SELECT workhorse.{cancel}(%s::bigint[], '{{}}')", ([ids["canceled"]],))
    for name, job_id in ids.items():
        job = queue.get_job(job_id)
        assert job is not None and job.status.value == name.rstrip("2"), (name, job)
    return ids


# ---- read verbs ----------------------------------------------------------------------------------


def test_health_json_is_queue_health_field_by_field(
    database_url: str, queue: Queue, states: dict[str, int]
) -> None:
    queue.sync_concurrency_policies("billing", [
        ConcurrencyPolicyDefinition("ready", max_active=4, max_active_per_key=1),
        ConcurrencyPolicyDefinition("active", max_active=1),
    ])
    queue.enqueue("t.more", None, EnqueueOptions(queue="active"))
    data = ok_json(database_url, "health")
    assert data == json.loads(json.dumps(dataclasses.asdict(queue.health())))
    assert set(data) == {"policies", "depth", "stalled", "unknown_task_ready", "budgets",
                         "reasons", "suspended", "suspended_next_wake_at"}
    # No supervisor runs: every queue with ready work says no_worker; "active" is at its limit.
    codes = {(r["queue"], r["code"]): r["count"] for r in data["reasons"]}
    assert codes[("active", "at_limit")] == 1
    assert codes[("active", "no_worker")] == 1
    assert set(data["reasons"][0]) == {"code", "count", "detail", "queue"}
    assert data["depth"] == {
        "scheduled": 1, "ready": 2, "active": 1, "succeeded": 1, "failed": 1, "held": 2,
        "canceled": 1, "waiting": 0, "expired": 0, "suspended": 0,
    }
    by_queue = {p["queue"]: p for p in data["policies"]}
    assert set(by_queue["active"]) == {
        "namespace", "queue", "max_active", "max_active_per_key", "active", "available",
        "blocked_ready", "saturated_keys", "capped", "rate_limit", "rate_limit_per_key",
        "rate_limited_keys", "paused", "override", "fairness", "active_units", "on_key_full",
        "rate_burst", "rate_burst_per_key",
        "active_jobs", "next_start_at", "next_key_start_at", "budgets",
        "backed_off_until", "backed_off_by", "backed_off_keys", "backed_off_ready",
        "key_limits", "key_limit_default",
    }
    assert by_queue["active"] == {
        "namespace": "billing", "queue": "active", "max_active": 1, "max_active_per_key": None,
        "active": 1, "available": 0, "blocked_ready": 1, "saturated_keys": 0, "capped": False,
        "rate_limit": None, "rate_limit_per_key": None, "rate_limited_keys": 0, "paused": False,
        "override": None, "fairness": "fifo", "active_units": 1, "on_key_full": "queue",
        "rate_burst": None, "rate_burst_per_key": None,
        "active_jobs": 1, "next_start_at": None, "next_key_start_at": None, "budgets": [],
        "backed_off_until": None, "backed_off_by": None, "backed_off_keys": [],
        "backed_off_ready": 0, "key_limits": 0, "key_limit_default": None,
    }
    assert (by_queue["ready"]["active"], by_queue["ready"]["blocked_ready"]) == (0, 0)

    table = cli(database_url, "health")
    assert table.exit_code == 0
    assert "billing" in table.stdout and "jobs by status" in table.stdout


def test_database_url_from_the_environment(
    database_url: str, queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue.enqueue("t", None, EnqueueOptions(queue="q"))
    monkeypatch.setenv("WORKHORSE_DATABASE_URL", database_url)
    result = CliRunner().invoke(main, ["health", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["depth"]["ready"] == 1
    # The flag wins over the environment.
    monkeypatch.setenv("WORKHORSE_DATABASE_URL", BAD_DSN)
    assert cli(database_url, "health", "--json").exit_code == 0
    assert CliRunner().invoke(main, ["health", "--json"]).exit_code == 1


def test_policies(database_url: str, queue: Queue) -> None:
    assert ok_json(database_url, "policies") == []
    queue.sync_concurrency_policies("billing", [ConcurrencyPolicyDefinition("mail", 20, 3)])
    queue.sync_concurrency_policies("search", [ConcurrencyPolicyDefinition("index", None, 2)])
    rows = ok_json(database_url, "policies")
    assert [(r["namespace"], r["queue"], r["max_active"], r["max_active_per_key"])
            for r in sorted(rows, key=lambda r: r["queue"])] == [
        ("search", "index", None, 2), ("billing", "mail", 20, 3),
    ]
    assert set(rows[0]) == {"namespace", "queue", "max_active", "max_active_per_key",
                            "created_at", "updated_at", "rate_limit", "rate_limit_per_key",
                            "fairness", "on_key_full", "rate_burst", "rate_burst_per_key"}
    only = ok_json(database_url, "policies", "--namespace", "search")
    assert [r["queue"] for r in only] == ["index"]
    table = cli(database_url, "policies")
    assert table.exit_code == 0 and "mail" in table.stdout and "index" in table.stdout


def test_jobs_list_and_filters(database_url: str, states: dict[str, int]) -> None:
    everything = ok_json(database_url, "jobs", "list")
    assert [j["id"] for j in everything] == sorted(states.values(), reverse=True)
    assert {"id", "task", "queue", "concurrency_key", "priority", "payload", "status",
            "attempts", "max_attempts", "result", "error", "run_at", "enqueued_at",
            "started_at", "finished_at"} <= set(everything[0])

    def ids(*filters: str) -> list[int]:
        return [j["id"] for j in ok_json(database_url, "jobs", "list", *filters)]

    assert ids("--status", "held") == [states["held2"], states["held"]]
    assert ids("--queue", "failed") == [states["failed"]]
    assert ids("--key", "k1") == [states["active"], states["ready"]]
    assert ids("--key", "k1", "--status", "ready") == [states["ready"]]
    assert ids("--queue", "ready", "--status", "failed") == []
    assert ids("--limit", "2") == sorted(states.values(), reverse=True)[:2]
    ready = ok_json(database_url, "jobs", "list", "--queue", "ready")[0]
    assert (ready["status"], ready["priority"], ready["concurrency_key"]) == ("ready", 3, "k1")
    assert ready["payload"] == {"args": [1], "kwargs": {}}

    table = cli(database_url, "jobs", "list", "--status", "failed")
    assert table.exit_code == 0 and "t.fail" in table.stdout and "t.ready" not in table.stdout
    assert cli(database_url, "jobs", "list", "--status", "bogus").exit_code == 2


def test_jobs_show(database_url: str, states: dict[str, int]) -> None:
    failed = ok_json(database_url, "jobs", "show", str(states["failed"]))
    assert (failed["id"], failed["status"], failed["attempts"], failed["max_attempts"]) == (
        states["failed"], "failed", 1, 1,
    )
    assert failed["error"]["type"] == "RuntimeError" and failed["error"]["message"] == "boom"
    assert "Traceback" in failed["error"]["traceback"]
    done = ok_json(database_url, "jobs", "show", str(states["succeeded"]))
    assert (done["status"], done["result"]) == ("succeeded", {"ok": True})

    table = cli(database_url, "jobs", "show", str(states["failed"]))
    assert table.exit_code == 0
    assert "RuntimeError: boom" in table.stdout and "t.fail" in table.stdout


def test_jobs_retry_one_and_all_held(
    database_url: str, queue: Queue, states: dict[str, int]
) -> None:
    def status(name: str) -> JobStatus:
        job = queue.get_job(states[name])
        assert job is not None
        return job.status

    assert ok_json(database_url, "jobs", "retry", str(states["held"])) == {
        "released": [states["held"]],
    }
    assert status("held") is JobStatus.READY and status("held2") is JobStatus.HELD
    # Not held, failed or canceled: an error, whatever the format.
    result = cli(database_url, "jobs", "retry", str(states["ready"]), "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout) == {"released": []}

    result = cli(database_url, "jobs", "retry", str(states["failed"]))
    assert result.exit_code == 0 and "released 1 job(s)" in result.stdout
    assert status("failed") is JobStatus.READY

    assert ok_json(database_url, "jobs", "retry", "--held", "--queue", "elsewhere") == {
        "released": [],
    }
    assert ok_json(database_url, "jobs", "retry", "--held") == {"released": [states["held2"]]}
    assert status("held2") is JobStatus.READY
    assert ok_json(database_url, "jobs", "retry", "--held") == {"released": []}

    # A JOB_ID or --held, not both, not neither: a usage error.
    assert cli(database_url, "jobs", "retry").exit_code == 2
    assert cli(database_url, "jobs", "retry", "1", "--held").exit_code == 2


def test_jobs_cancel(database_url: str, queue: Queue, states: dict[str, int]) -> None:
    assert ok_json(database_url, "jobs", "cancel", str(states["ready"]),
                   str(states["scheduled"])) == {
        "canceled": sorted([states["ready"], states["scheduled"]]),
    }
    job = queue.get_job(states["scheduled"])
    assert job is not None and job.status is JobStatus.CANCELED
    finished = cli(database_url, "jobs", "cancel", str(states["succeeded"]))
    assert finished.exit_code == 1
    assert "no job was canceled" in finished.stderr
    job = queue.get_job(states["succeeded"])
    assert job is not None and job.status is JobStatus.SUCCEEDED
    assert cli(database_url, "jobs", "cancel").exit_code == 2


def test_workers(database_url: str, conn: Any) -> None:
    assert ok_json(database_url, "workers") == []
    conn.execute(
        "INSERT INTO workhorse.workers (app, host, pid, slots, queues, stats) "
        "VALUES ('billing', 'host-1', 4242, 3, ARRAY['mail','default'], '{\"succeeded\": 5}'), "
        "       ('old', 'host-2', 7, 1, ARRAY['x'], '{}')"
    )
    conn.execute("UPDATE workhorse.workers SET last_seen = now() - interval '1 hour', "
                 "started_at = now() - interval '2 hours' WHERE app = 'old'")
    rows = ok_json(database_url, "workers")
    assert [(r["app"], r["host"], r["pid"], r["slots"], r["queues"], r["alive"]) for r in rows] == [
        ("old", "host-2", 7, 1, ["x"], False),
        ("billing", "host-1", 4242, 3, ["mail", "default"], True),
    ]
    assert rows[1]["stats"] == {"succeeded": 5}
    table = cli(database_url, "workers")
    assert table.exit_code == 0 and "4242" in table.stdout
    assert "yes" in table.stdout and "no" in table.stdout


def test_top_json_iterations(database_url: str, queue: Queue) -> None:
    queue.sync_concurrency_policies("billing", [ConcurrencyPolicyDefinition("mail", 2)])
    queue.enqueue("t", None, EnqueueOptions(queue="mail"))
    result = cli(database_url, "top", "--json", "--iterations", "2", "--interval", "10ms")
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert len(lines) == 2
    first, second = lines
    assert first["health"]["depth"]["ready"] == 1
    assert [p["queue"] for p in first["health"]["policies"]] == ["mail"]
    assert first["claims_per_s"] is None and first["completions_per_s"] is None
    assert isinstance(second["claims_per_s"], float) and second["failures_per_s"] == 0.0
    table = cli(database_url, "top", "--iterations", "1")
    assert table.exit_code == 0 and "mail" in table.stdout


# ---- sync APP ------------------------------------------------------------------------------------


@pytest.fixture
def app_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A tiny app module in the current directory; yields its name."""
    name = f"cliapp_{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent("""
        import workhorse

        app = workhorse.App("cliapp")
        not_an_app = 42

        @app.task(name="send", queue="mail", max_active=20, max_active_per_key=3)
        def send(message):
            return message

        @app.task(name="migrate_db", max_active=1)
        def migrate_db():
            pass

        @app.task(name="free", queue="thumbnails")
        def free():
            pass
    """))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield name
    sys.modules.pop(name, None)


def test_sync_app(database_url: str, queue: Queue, app_module: str) -> None:
    queue.sync_concurrency_policies("cliapp", [ConcurrencyPolicyDefinition("old", 1)])
    kept = ok_json(database_url, "sync", f"{app_module}:app", "--no-prune")
    assert kept == {"created": ["mail", "migrate_db"], "updated": [], "pruned": [],
                    "unchanged": [], "schedules": None,
                    "budgets": None, "key_limits": None}
    assert {p.queue for p in queue.list_concurrency_policies("cliapp")} == {
        "mail", "migrate_db", "old",
    }
    pruned = ok_json(database_url, "sync", f"{app_module}:app")
    assert pruned == {"created": [], "updated": [], "pruned": ["old"],
                      "unchanged": ["mail", "migrate_db"], "schedules": None,
                    "budgets": None, "key_limits": None}
    stored = {(p.queue, p.max_active, p.max_active_per_key)
              for p in queue.list_concurrency_policies()}
    assert stored == {("mail", 20, 3), ("migrate_db", 1, None)}

    table = cli(database_url, "sync", app_module)  # a module with one App: no attribute needed
    assert table.exit_code == 0, table.output
    assert "unchanged" in table.stdout and "migrate_db" in table.stdout


def test_sync_conflict_is_one_line(database_url: str, queue: Queue, app_module: str) -> None:
    queue.sync_concurrency_policies("other", [ConcurrencyPolicyDefinition("mail", 1)])
    result = cli(database_url, "sync", f"{app_module}:app")
    assert result.exit_code == 1
    assert len(result.stderr.strip().splitlines()) == 1 and "mail" in result.stderr
    assert {p.namespace for p in queue.list_concurrency_policies()} == {"other"}


def test_app_errors_exit_1_in_one_line(app_module: str) -> None:
    cwd = Path.cwd()
    assert_one_line_error(run_process("--database-url", BAD_DSN, "sync", "no_such_module_xyz:app",
                                      cwd=cwd), "no_such_module_xyz")
    assert_one_line_error(run_process("--database-url", BAD_DSN, "sync", f"{app_module}:missing",
                                      cwd=cwd), "missing")
    assert_one_line_error(run_process("--database-url", BAD_DSN, "worker",
                                      f"{app_module}:not_an_app", cwd=cwd), "not a workhorse.App")


def test_bad_dsn_exits_1_in_one_line() -> None:
    assert_one_line_error(run_process("--database-url", BAD_DSN, "health", "--json"),
                          "cannot connect")


def test_unknown_job_exits_1_in_one_line(database_url: str) -> None:
    assert_one_line_error(run_process("--database-url", database_url, "jobs", "show", "987654"),
                          "987654")
    for verb in ("retry", "cancel"):
        result = cli(database_url, "jobs", verb, "987654")
        assert result.exit_code == 1 and len(result.stderr.strip().splitlines()) == 1


def test_usage_errors_exit_2() -> None:
    result = run_process("worker", "x:app", "--lease", "5x")
    assert result.returncode == 2 and "--lease" in result.stderr
    assert "Traceback" not in result.stderr
    for args in (
        ["frobnicate"],
        ["worker", "x:app", "--lease", "0"],
        ["worker", "x:app", "--slots", "0"],
        ["worker", "x:app", "--grace", "soon"],
        ["worker"],
        ["top", "--interval", "1w"],
        ["jobs", "show", "abc"],
        ["db", "restart"],
        ["health", "--bogus"],
    ):
        usage = cli(BAD_DSN, *args)
        assert usage.exit_code == 2, (args, usage.output)


def _verbs(group: click.Group, path: tuple[str, ...] = ()) -> list[list[str]]:
    """Every command path of the click group, itself included: read from the CLI, so a new verb
    (or a subcommand such as `jobs prune`) is checked without anyone listing it here."""
    found = [list(path)]
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            found += _verbs(command, (*path, name))
        else:
            found.append([*path, name])
    return found


VERBS = _verbs(main)


def test_the_verb_list_is_read_from_the_cli() -> None:
    # Not vacuous: the walk finds the verbs a hand-made list once missed.
    for verb in (["queues"], ["schedules"], ["dashboard"], ["demo"], ["jobs", "prune"],
                 ["policies", "override"], ["db", "start"], ["worker"]):
        assert verb in VERBS, verb


@pytest.mark.parametrize("verb", VERBS, ids=lambda v: " ".join(v) or "main")
def test_help(verb: list[str]) -> None:
    result = CliRunner().invoke(main, [*verb, "--help"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.stdout


@pytest.mark.parametrize(
    "group", [v for v in VERBS if isinstance(_command(v), click.Group)],
    ids=lambda v: " ".join(v) or "main")
def test_help_lists_every_verb(group: list[str]) -> None:
    text = CliRunner().invoke(main, [*group, "--help"]).stdout
    command = _command(group)
    assert isinstance(command, click.Group)
    for name, sub in command.commands.items():
        if not sub.hidden:
            assert name in text, f"`workhorse {' '.join(group)} --help` does not list {name}"


# ---- migrate and the embedded server -------------------------------------------------------------


def test_migrate_installs_then_is_idempotent(server_url: str) -> None:
    name = f"wh_mig_{uuid.uuid4().hex[:12]}"
    url = with_dbname(server_url, name)
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        for _ in range(2):
            result = cli(url, "migrate")
            assert result.exit_code == 0, result.output
            assert "schema at version" in result.stdout
        with psycopg.connect(url) as check:
            versions = [r[0] for r in check.execute(
                "SELECT version FROM workhorse.schema_version ORDER BY version").fetchall()]
            # Every migration file, in order (numbers are reserved per feature: gaps may exist).
            assert versions == [v for v, _, _ in _sql.migrations()] and len(versions) >= 1
            assert check.execute("SELECT to_regclass('workhorse.jobs')::text").fetchone() == (
                "workhorse.jobs",
            )
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def wh_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    # Short, under /tmp: the server's socket path must fit in 107 bytes.
    home = Path(tempfile.mkdtemp(prefix="whcli-", dir="/tmp"))
    monkeypatch.setenv("WORKHORSE_HOME", str(home))
    try:
        yield home
    finally:
        from workhorse import embedded
        from workhorse.errors import EmbeddedServerError

        with contextlib.suppress(EmbeddedServerError):
            embedded.stop(home)
        with contextlib.suppress(OSError):
            fallback = (home / "socket_dir").read_text().strip()
            if fallback.startswith("/tmp/workhorse-"):
                shutil.rmtree(fallback, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


def test_db_url_status_stop(wh_home: Path) -> None:
    before = ok_json(None, "db", "status")
    assert before["running"] is False and before["pid"] is None
    assert before["home"] == str(wh_home)

    url = cli(None, "db", "url")
    assert url.exit_code == 0, url.output
    lines = url.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("postgresql://")
    with psycopg.connect(lines[0], connect_timeout=5) as check:
        assert check.execute("SELECT 1").fetchone() == (1,)

    running = ok_json(None, "db", "status")
    assert running["running"] is True and isinstance(running["pid"], int)
    assert running["dsn"] == lines[0] and running["version"].startswith("18")
    again = cli(None, "db", "url")
    assert again.stdout.splitlines() == lines  # reuses the running server

    stopped = cli(None, "db", "stop")
    assert stopped.exit_code == 0 and "stopped" in stopped.stdout
    assert ok_json(None, "db", "status")["running"] is False
    assert "not running" in cli(None, "db", "stop").stdout


def test_db_start_round_trip(wh_home: Path) -> None:
    """`db start` starts the server and says where; `db status` and `db url` agree; `db stop`
    stops it; `db start` again brings the same data back."""
    started = cli(None, "db", "start")
    assert started.exit_code == 0, started.output
    status = ok_json(None, "db", "status")
    assert status["running"] is True and status["home"] == str(wh_home)
    assert status["dsn"] in started.stdout.replace("\n", "")
    assert cli(None, "db", "url").stdout.strip() == status["dsn"]
    with psycopg.connect(status["dsn"], autocommit=True, connect_timeout=10) as check:
        check.execute("CREATE TABLE kept (n integer)")
        check.execute("INSERT INTO kept VALUES (7)")
    again = cli(None, "db", "start")  # reuses the running server
    assert again.exit_code == 0 and ok_json(None, "db", "status")["pid"] == status["pid"]

    assert "stopped" in cli(None, "db", "stop").stdout
    assert ok_json(None, "db", "status")["running"] is False
    restarted = cli(None, "db", "start")
    assert restarted.exit_code == 0, restarted.output
    dsn = ok_json(None, "db", "status")["dsn"]
    with psycopg.connect(dsn, connect_timeout=10) as check:
        assert check.execute("SELECT n FROM kept").fetchall() == [(7,)]
