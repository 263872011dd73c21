"""The CLI with an app's queues on several databases (docs/design.md "Several databases"): the
read verbs list every database WORKHORSE_DATABASES names in one table with a `database` column,
`--database NAME` reads or changes one, and a database that cannot be reached is said on stderr
(exit 1) while the others print. Two real databases of the test server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner, Result
from psycopg.conninfo import make_conninfo

from workhorse import App, JobStatus
from workhorse.cli import _base as cli_base
from workhorse.cli import main


@pytest.fixture
def eu_url(server_url: str, _databases: Any) -> Iterator[str]:
    name = _databases.take()
    try:
        yield make_conninfo(server_url, dbname=name)
    finally:
        _databases.give_back(name)


@pytest.fixture
def app(database_url: str, eu_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[App]:
    monkeypatch.setattr(cli_base.console, "width", 1000)  # one line a row, whatever the tty
    monkeypatch.setenv("WORKHORSE_DATABASES", f"default={database_url},eu={eu_url}")
    made = App("cli-dbs", databases={"default": database_url, "eu": eu_url})

    @made.task(queue="home", max_active=2)
    def home(x: int) -> int:
        return x

    @made.task(queue="away", max_active=3, database="eu")
    def away(x: int) -> int:
        return x

    made.sync()
    home.delay(1)
    away.delay(2)
    away.delay(3)
    yield made
    made.close()


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def test_queues_lists_both_databases_in_one_table(app: App) -> None:
    result = cli("queues")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any("database" in line and "queue" in line for line in lines), result.output
    assert any("default" in line and "home" in line and "max 2" in line for line in lines)
    assert any("eu" in line and "away" in line and "max 3" in line for line in lines)
    # The checker reads rows: a table without the second database fails it.
    assert not any("eu" in line and "home" in line for line in lines)


def test_queues_json_names_each_rows_database(app: App) -> None:
    rows = json.loads(cli("queues", "--json").output)
    assert {(row["database"], row["queue"], row["depth"]["ready"]) for row in rows} == {
        ("default", "home", 1), ("eu", "away", 2)}


def test_database_filters_a_read_verb_to_one(app: App) -> None:
    result = cli("queues", "--database", "eu")
    assert result.exit_code == 0, result.output
    assert "away" in result.output and "home" not in result.output
    assert "database" not in result.output.splitlines()[2]  # one database: today's table


def test_jobs_list_and_show_across_databases(app: App) -> None:
    rows = json.loads(cli("jobs", "list", "--json").output)
    assert sorted((row["database"], row["queue"]) for row in rows) == [
        ("default", "home"), ("eu", "away"), ("eu", "away")]
    # Ids repeat across databases: job 1 is in both, job 2 in eu alone.
    both = cli("jobs", "show", "1")
    assert both.exit_code == 1 and "--database" in both.output
    shown = cli("jobs", "show", "2")
    assert shown.exit_code == 0 and "database eu" in shown.output and "away" in shown.output
    assert "home" in cli("jobs", "show", "1", "--database", "default").output


def test_a_change_acts_on_the_named_database_only(app: App) -> None:
    assert cli("jobs", "cancel", "1", "--database", "eu").exit_code == 0
    assert app.job(1, database="eu").status() is JobStatus.CANCELED
    assert app.job(1).status() is JobStatus.READY


def test_health_reads_every_database(app: App) -> None:
    found = json.loads(cli("health", "--json").output)
    assert set(found) == {"default", "eu"}
    assert [p["queue"] for p in found["eu"]["policies"]] == ["away"]


def test_an_unreachable_database_is_said_and_the_others_print(
        app: App, database_url: str, eu_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    gone = make_conninfo(eu_url, dbname="wh_no_such_database")
    monkeypatch.setenv("WORKHORSE_DATABASES", f"default={database_url},eu={gone}")
    result = CliRunner().invoke(main, ["queues"])
    assert result.exit_code == 1
    assert "home" in result.stdout
    assert "database eu" in result.stderr and "wh_no_such_database" in result.stderr


def test_an_unknown_database_name_is_a_clear_error(app: App) -> None:
    result = cli("queues", "--database", "mars")
    assert result.exit_code == 2
    assert "no database 'mars'" in result.output and "default, eu" in result.output
