"""The operator's verbs over several databases (docs/design.md "Several databases"), on two real
databases of the test server named by WORKHORSE_DATABASES: the read verbs list every database
in one table led by a `database` column (their --json rows carry "database"; a verb whose JSON
is one object is keyed by database), `--database NAME` reads or changes one (a change goes to
`default` without it), `jobs show` finds the database that has the id, a database that cannot
be reached is said in one line on stderr while the others print (exit 1), and with one database
every verb prints what it printed before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result
from psycopg.conninfo import make_conninfo

from workhorse import App, EnqueueOptions, JobStatus, Queue
from workhorse.cli import _base as cli_base
from workhorse.cli import main
from workhorse.queue import error_document


@dataclass
class Two:
    """The two databases: `default` (queue "home") and `eu` (queues "away" and "errands", the
    budget "tokens")."""

    default: str
    eu: str

    @property
    def env(self) -> dict[str, str]:
        return {"WORKHORSE_DATABASES": f"default={self.default},eu={self.eu}"}

    @contextmanager
    def queue(self, name: str) -> Iterator[Queue]:
        """A Queue on database `name` ("default" or "eu")."""
        with psycopg.connect(getattr(self, name), autocommit=True) as conn:
            yield Queue(conn)


@pytest.fixture
def two(database_url: str, eu_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Two]:
    """An app over both databases, synced: job 1 of `default` (queue "home"), jobs 1 and 2 of
    `eu` (queue "away", budget "tokens"); job ids repeat across databases."""
    monkeypatch.setattr(cli_base.console, "width", 1000)  # a row a line, whatever the tty
    app = App("cli-databases", databases={"default": database_url, "eu": eu_url})
    app.budget("tokens", max_active=4)

    @app.task(queue="home", max_active=2)
    def home(x: int) -> int:
        return x

    @app.task(queue="away", max_active=3, database="eu", budget="tokens")
    def away(x: int) -> int:
        return x

    app.sync()
    home.delay(1)
    away.delay(2)
    away.delay(3)
    try:
        yield Two(database_url, eu_url)
    finally:
        app.close()


def cli(env: dict[str, str], *args: str) -> Result:
    return CliRunner(env=env).invoke(main, list(args))


def ok_json(env: dict[str, str], *args: str) -> Any:
    result = cli(env, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def rows_of(output: str) -> list[list[str]]:
    """The cells of a rich table's rows (its header included), a list a line."""
    return [[cell.strip() for cell in line.strip("│┃").split(line[0])]
            for line in output.splitlines() if line[:1] in ("│", "┃")]


def dead_letter(queue: Queue, name: str) -> int:
    """A job of queue `name` that failed its one attempt."""
    queue.enqueue(f"t.{name}", None, EnqueueOptions(queue=name, max_attempts=1))
    (claimed,) = queue.claim(name, 1, 30)
    try:
        raise RuntimeError(f"{name} broke")
    except RuntimeError as exc:
        queue.fail(claimed.id, claimed.fence, error_document(exc))
    return claimed.id


# ---- reads: one table, a database column ----------------------------------------------------


def test_queues_lists_both_databases_in_one_table_led_by_the_database(two: Two) -> None:
    result = cli(two.env, "queues")
    assert result.exit_code == 0, result.output
    assert result.stdout.count("queues") == 1  # one table, not one a database
    header, *rows = rows_of(result.stdout)
    assert header[:2] == ["database", "queue"]
    assert {(row[0], row[1]) for row in rows} == {("default", "home"), ("eu", "away")}
    by_queue = {row[1]: row for row in rows}
    assert by_queue["home"][header.index("ready")] == "1"
    assert by_queue["away"][header.index("ready")] == "2"
    assert "max 3" in by_queue["away"][header.index("limits")]


def test_every_list_verb_has_the_database_column(two: Two) -> None:
    with two.queue("default") as home_q, two.queue("eu") as eu_q:
        dead_letter(home_q, "chores")
        dead_letter(eu_q, "errands")
        dead_letter(eu_q, "junk")
        assert eu_q.purge(queue="junk", reason="tidy").count == 1  # an audit row in eu only
    expected = {
        ("jobs", "list"): {("default", "home"), ("eu", "away"), ("default", "chores"),
                           ("eu", "errands")},
        ("policies",): {("default", "home"), ("eu", "away")},
        ("budgets",): {("eu", "tokens")},
        ("dead", "list"): {("default", "chores"), ("eu", "errands")},
        ("audit",): {("eu", "purge")},
    }
    for verb, wanted in expected.items():
        result = cli(two.env, *verb)
        assert result.exit_code == 0, (verb, result.output)
        header, *rows = rows_of(result.stdout)
        assert header[0] == "database", (verb, header)
        column = {"jobs": "queue", "policies": "queue", "budgets": "budget", "dead": "queue",
                  "audit": "action"}[verb[0]]
        assert {(row[0], row[header.index(column)]) for row in rows} == wanted, verb


def test_health_has_the_database_column_in_each_table(two: Two) -> None:
    result = cli(two.env, "health")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.count("policies") == 1 and out.count("jobs by status") == 1
    tables = [rows for rows in _tables(out)]
    assert all(rows[0][0] == "database" for rows in tables), tables
    policies, depth = tables[0], tables[1]
    assert {(row[0], row[2]) for row in policies[1:]} == {("default", "home"), ("eu", "away")}
    assert [(row[0], row[depth[0].index("ready")]) for row in depth[1:]] == [
        ("default", "1"), ("eu", "2")]


def _tables(output: str) -> list[list[list[str]]]:
    """Each rich table of `output`, as `rows_of` gives it."""
    found: list[list[str]] = []
    tables: list[list[list[str]]] = []
    for line in output.splitlines():
        if line[:1] in ("│", "┃"):
            found.append([cell.strip() for cell in line.strip("│┃").split(line[0])])
        elif found and line[:1] == "└":
            tables.append(found)
            found = []
    return tables


# ---- --json shapes --------------------------------------------------------------------------


def test_list_json_rows_each_name_their_database(two: Two) -> None:
    rows = ok_json(two.env, "queues")
    assert {(row["database"], row["queue"], row["depth"]["ready"]) for row in rows} == {
        ("default", "home", 1), ("eu", "away", 2)}
    assert next(iter(rows[0])) == "database"
    jobs = ok_json(two.env, "jobs", "list")
    assert sorted((j["database"], j["id"], j["queue"]) for j in jobs) == [
        ("default", 1, "home"), ("eu", 1, "away"), ("eu", 2, "away")]
    assert {(p["database"], p["queue"]) for p in ok_json(two.env, "policies")} == {
        ("default", "home"), ("eu", "away")}
    assert [(b["database"], b["name"]) for b in ok_json(two.env, "budgets")] == [
        ("eu", "tokens")]
    assert ok_json(two.env, "workers") == [] and ok_json(two.env, "schedules") == []
    # --limit counts every database's rows: the newest of all.
    newest = ok_json(two.env, "jobs", "list", "--limit", "2")
    assert len(newest) == 2


def test_one_object_json_is_keyed_by_database(two: Two) -> None:
    found = ok_json(two.env, "health")
    assert list(found) == ["default", "eu"]
    assert [p["queue"] for p in found["default"]["policies"]] == ["home"]
    assert [p["queue"] for p in found["eu"]["policies"]] == ["away"]
    assert found["eu"]["depth"]["ready"] == 2
    shown = ok_json(two.env, "budgets", "show", "tokens")
    assert shown["default"] == {"budget": None, "holds": []}
    assert shown["eu"]["budget"]["name"] == "tokens"
    assert cli(two.env, "keys", "set", "away", "acme", "--max-active", "1",
               "--database", "eu").exit_code == 0
    limits = ok_json(two.env, "keys", "list", "away")
    assert limits["default"] is None and list(limits["eu"]["limits"]) == ["acme"]
    snapshot = cli(two.env, "top", "--iterations", "1", "--json")
    assert snapshot.exit_code == 0, snapshot.output
    keyed = json.loads(snapshot.stdout)
    assert list(keyed) == ["default", "eu"]
    assert set(keyed["eu"]) == {"health", "claims_per_s", "completions_per_s",
                                "failures_per_s", "backoffs"}


def test_database_filters_a_read_verb_to_one_as_before(two: Two) -> None:
    result = cli(two.env, "queues", "--database", "eu")
    assert result.exit_code == 0, result.output
    header, *rows = rows_of(result.stdout)
    assert header[0] == "queue" and [row[0] for row in rows] == ["away"]
    rows_json = ok_json(two.env, "jobs", "list", "--database", "eu")
    assert [j["id"] for j in rows_json] == [2, 1] and "database" not in rows_json[0]
    assert set(ok_json(two.env, "health", "--database", "default")) >= {"policies", "depth"}


# ---- one database: as before ----------------------------------------------------------------

# The read verbs whose output does not depend on the moment (budgets' JSON has next_start_at,
# compared without it below).
READS = [("queues",), ("jobs", "list"), ("jobs", "show", "1"), ("policies",), ("schedules",),
         ("workers",), ("budgets",), ("budgets", "show", "tokens"), ("health",),
         ("dead", "list"), ("audit",), ("keys", "list", "away"), ("top", "--iterations", "1")]


def _without_moments(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_moments(v) for k, v in value.items() if k != "next_start_at"}
    if isinstance(value, list):
        return [_without_moments(v) for v in value]
    return value


def test_one_database_prints_what_database_url_prints(two: Two) -> None:
    """`--database eu` among two, and WORKHORSE_DATABASES naming one database, print exactly
    what `--database-url` (the one-database CLI) prints, text and --json."""
    for verb in READS:
        for as_json in ((), ("--json",)):
            plain = cli({}, "--database-url", two.eu, *verb, *as_json)
            chosen = cli(two.env, *verb, *as_json, "--database", "eu")
            alone = cli({"WORKHORSE_DATABASES": f"default={two.eu}"}, *verb, *as_json)
            assert plain.exit_code == chosen.exit_code == alone.exit_code == 0, (
                verb, plain.output, chosen.output, alone.output)
            if as_json and verb[0] != "top":
                assert _without_moments(json.loads(chosen.stdout)) == _without_moments(
                    json.loads(plain.stdout)) == _without_moments(json.loads(alone.stdout))
            elif not as_json:
                assert chosen.stdout == plain.stdout == alone.stdout, verb
                assert all(row[0] != "database" for row in rows_of(chosen.stdout)), verb


# ---- jobs show --------------------------------------------------------------------------------


def test_jobs_show_finds_the_database_that_has_the_id(two: Two) -> None:
    shown = cli(two.env, "jobs", "show", "2")
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.splitlines()[0] == "database eu"
    assert "away" in shown.stdout and "home" not in shown.stdout
    as_json = ok_json(two.env, "jobs", "show", "2")
    assert (as_json["database"], as_json["id"], as_json["queue"]) == ("eu", 2, "away")
    assert cli(two.env, "dead", "show", "2").stdout.splitlines()[0] == "database eu"


def test_jobs_show_of_an_id_in_both_asks_for_database(two: Two) -> None:
    both = cli(two.env, "jobs", "show", "1")
    assert both.exit_code == 1 and both.stdout == ""
    assert both.stderr.strip() == ("error: job 1 is in databases default, eu: say which with "
                                   "--database")
    home = cli(two.env, "jobs", "show", "1", "--database", "default")
    assert home.exit_code == 0 and "home" in home.stdout and "database" not in home.stdout[:40]
    assert ok_json(two.env, "jobs", "show", "1", "--database", "eu")["queue"] == "away"
    missing = cli(two.env, "jobs", "show", "99")
    assert missing.exit_code == 1
    assert missing.stderr.strip() == "error: no job with id 99 in any database"


# ---- changes: the named database only -------------------------------------------------------


def test_a_change_goes_to_the_named_database_only(two: Two) -> None:
    with two.queue("default") as home_q, two.queue("eu") as eu_q:
        # No --database: `default` (WORKHORSE_DATABASES' own), never another database.
        assert cli(two.env, "jobs", "cancel", "1").exit_code == 0
        assert home_q.get_job(1).status is JobStatus.CANCELED  # type: ignore[union-attr]
        assert eu_q.get_job(1).status is JobStatus.READY  # type: ignore[union-attr]
        assert cli(two.env, "jobs", "cancel", "2", "--database", "eu").exit_code == 0
        assert eu_q.get_job(2).status is JobStatus.CANCELED  # type: ignore[union-attr]
        assert eu_q.get_job(1).status is JobStatus.READY  # type: ignore[union-attr]

        paused = cli(two.env, "queues", "pause", "away", "--database", "eu")
        assert paused.exit_code == 0, paused.output
        assert {q.queue: q.paused for q in eu_q.list_queues()}["away"] is True
        assert "away" not in {q.queue for q in home_q.list_queues()}
        # Without --database the pause looks in `default`, which has no queue "away": the
        # refusal says where it looked.
        refused = cli(two.env, "queues", "pause", "away")
        assert refused.exit_code == 1
        assert "no queue 'away' in database default" in refused.stderr
        assert cli(two.env, "queues", "--database", "eu", "resume", "away").exit_code == 0
        assert {q.queue: q.paused for q in eu_q.list_queues()}["away"] is False

        assert cli(two.env, "policies", "override", "away", "--max-active", "9",
                   "--database", "eu").exit_code == 0
        assert [q.override is not None for q in eu_q.list_queues() if q.queue == "away"] == [
            True]


# ---- a database that cannot be reached --------------------------------------------------------


def test_an_unreachable_database_is_said_and_the_others_print(two: Two) -> None:
    gone = make_conninfo(two.eu, dbname="wh_no_such_database")
    env = {"WORKHORSE_DATABASES": f"default={two.default},eu={gone}"}
    for verb in (("queues",), ("jobs", "list"), ("health",), ("policies",), ("budgets",),
                 ("workers",), ("dead", "list"), ("schedules",)):
        result = cli(env, *verb)
        assert result.exit_code == 1, (verb, result.output)
        assert rows_of(result.stdout)[0][0] == "database", verb
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: database eu: "), (verb, lines)
        assert "wh_no_such_database" in lines[0]
    result = cli(env, "queues", "--json")
    assert result.exit_code == 1
    assert [(row["database"], row["queue"]) for row in json.loads(result.stdout)] == [
        ("default", "home")]
    health = cli(env, "health", "--json")
    assert health.exit_code == 1 and list(json.loads(health.stdout)) == ["default"]
    # jobs show finds the job where it can, and still says what it could not read.
    shown = cli(env, "jobs", "show", "1")
    assert shown.exit_code == 1 and "home" in shown.stdout
    assert "database eu" in shown.stderr
    # --database default reads the one that answers, as always.
    assert cli(env, "queues", "--database", "default").exit_code == 0


def test_an_unreachable_database_as_a_process_sees_it(two: Two) -> None:
    """The real command: stdout has the database that answered, stderr one line for the other,
    exit 1."""
    gone = make_conninfo(two.eu, dbname="wh_no_such_database")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKHORSE_")}
    env["WORKHORSE_DATABASES"] = f"default={two.default},eu={gone}"
    env["COLUMNS"] = "400"
    done = subprocess.run([sys.executable, "-m", "workhorse", "queues"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert any(row[:2] == ["default", "home"] for row in rows_of(done.stdout)), done.stdout
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: database eu: "), done.stderr
    assert "Traceback" not in done.stderr


# ---- health --fail-on over every database ----------------------------------------------------


def test_health_fail_on_looks_at_every_database(two: Two) -> None:
    assert cli(two.env, "health", "--fail-on", "paused").exit_code == 0
    with two.queue("eu") as eu_q:
        eu_q.pause("away")
    assert cli(two.env, "health", "--fail-on", "paused").exit_code == 1
    assert cli(two.env, "health", "--fail-on", "paused", "--json").exit_code == 1
    assert cli(two.env, "health", "--fail-on", "paused", "--database", "default").exit_code == 0


# ---- bad --database ---------------------------------------------------------------------------


@pytest.mark.parametrize("verb", [("queues",), ("jobs", "show", "1"), ("jobs", "cancel", "1"),
                                  ("health", "--json"), ("keys", "set", "q", "k", "--max-active",
                                                         "1")])
def test_a_bad_database_name_is_one_clear_line(two: Two, verb: tuple[str, ...]) -> None:
    result = cli(two.env, *verb, "--database", "mars")
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == ["Error: Invalid value for '--database': no database 'mars' (the "
                     "databases: default, eu; WORKHORSE_DATABASES names them)"]
    assert result.stdout == ""


def test_database_beside_database_url_names_only_default(two: Two) -> None:
    result = cli(two.env, "--database-url", two.eu, "queues", "--database", "eu")
    assert result.exit_code == 2 and "no database 'eu' (the databases: default;" in result.stderr
    alone = cli(two.env, "--database-url", two.eu, "queues", "--database", "default")
    assert alone.exit_code == 0 and "away" in alone.stdout and "home" not in alone.stdout
