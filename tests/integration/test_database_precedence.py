"""One rule for which database wins (docs/design.md, "Which database wins"), in the CLI, the App and
under Django, for every combination of the command line's `--database-url`, the App's own
`database_url` in code, (under the contrib app) the Django setting `WORKHORSE_DATABASE_URL` and
Django's database, and the environment's `WORKHORSE_DATABASE_URL`.

Each case really syncs a policy and looks for it: it must land in exactly the database the rule
names, on real PostgreSQL (one fresh database per source)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from ci_guard import require
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from workhorse import App, database

SOURCES = ("flag", "code", "setting", "django", "env")

APP_MODULE = '''
import os
import workhorse

app = workhorse.App("precedence", database_url=os.environ.get("PRECEDENCE_CODE_URL") or None)


@app.task(name="precedence.t", queue="precedence-q", max_active=1)
def t():
    return None
'''


def _with_dbname(url: str, dbname: str) -> str:
    params = conninfo_to_dict(url)
    params["dbname"] = dbname
    return make_conninfo(**params)


@pytest.fixture
def urls(server_url: str, template_name: str) -> Iterator[dict[str, str]]:
    """One fresh database (with the schema) for each source of the rule."""
    names = {source: f"whprec_{source}_{uuid.uuid4().hex[:10]}" for source in SOURCES}
    with psycopg.connect(server_url, autocommit=True) as admin:
        for name in names.values():
            admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_name}"')
    try:
        yield {source: _with_dbname(server_url, name) for source, name in names.items()}
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            for name in names.values():
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _landed(urls: dict[str, str]) -> list[str]:
    """The sources whose database holds the synced policy (and clears it for the next case)."""
    found = []
    for source, url in urls.items():
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute("DELETE FROM workhorse.policies WHERE queue = 'precedence-q' "
                               "RETURNING 1").fetchone()
            if row is not None:
                found.append(source)
    return found


def _expected(given: tuple[str, ...], order: tuple[str, ...]) -> str:
    return next(source for source in order if source in given)


CLI_CASES = [combo for n in (1, 2, 3) for combo in itertools.combinations(
    ("flag", "code", "env"), n)]


@pytest.mark.slow  # seven CLI processes
def test_the_cli_applies_the_rule(urls: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "precedence_app.py").write_text(APP_MODULE)
    for given in CLI_CASES:
        env = {k: v for k, v in os.environ.items()
               if k not in ("WORKHORSE_DATABASE_URL", "PRECEDENCE_CODE_URL")}
        if "env" in given:
            env["WORKHORSE_DATABASE_URL"] = urls["env"]
        if "code" in given:
            env["PRECEDENCE_CODE_URL"] = urls["code"]
        flag = ["--database-url", urls["flag"]] if "flag" in given else []
        result = subprocess.run(
            [sys.executable, "-m", "workhorse", *flag, "sync", "precedence_app:app", "--json"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, (given, result.stderr)
        assert _landed(urls) == [_expected(given, ("flag", "code", "env"))], given


def test_the_app_applies_the_rule(urls: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for given in CLI_CASES:
        if "env" in given:
            monkeypatch.setenv("WORKHORSE_DATABASE_URL", urls["env"])
        else:
            monkeypatch.delenv("WORKHORSE_DATABASE_URL", raising=False)
        app = App("precedence", database_url=urls["code"] if "code" in given else None)
        if "flag" in given:
            app.database_url = urls["flag"]  # what the CLI does with --database-url

        @app.task(name="precedence.t", queue="precedence-q", max_active=1)
        def t() -> None:
            return None

        try:
            app.sync()
        finally:
            app.close()
        assert _landed(urls) == [_expected(given, ("flag", "code", "env"))], given


def test_an_app_reads_the_environment_at_first_use_not_at_import(
        urls: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORKHORSE_DATABASE_URL", raising=False)
    app = App("precedence")
    monkeypatch.setenv("WORKHORSE_DATABASE_URL", urls["env"])
    assert app.database_url == urls["env"]
    assert app.explicit_database_url is None
    assert database.resolve_url(urls["flag"]) == urls["flag"]


DJANGO_SCRIPT = '''
import itertools, json, os, sys
urls = json.loads(sys.argv[1])
import django
from django.conf import settings
from psycopg.conninfo import conninfo_to_dict
db = conninfo_to_dict(urls["django"])
settings.configure(
    DATABASES={"default": {"ENGINE": "django.db.backends.postgresql", "NAME": db["dbname"],
                           "USER": db.get("user", ""), "HOST": db.get("host", ""),
                           "PORT": db.get("port", "")}},
    INSTALLED_APPS=["workhorse.contrib.django"], USE_TZ=True)
django.setup()
from django.test.utils import override_settings
from workhorse.cli import main

sys.path.insert(0, os.getcwd())
for n in range(0, 5):
    for given in itertools.combinations(("flag", "code", "setting", "env"), n):
        os.environ.pop("WORKHORSE_DATABASE_URL", None)
        if "env" in given:
            os.environ["WORKHORSE_DATABASE_URL"] = urls["env"]
        os.environ["PRECEDENCE_CODE_URL"] = urls["code"] if "code" in given else ""
        setting = urls["setting"] if "setting" in given else None
        with override_settings(WORKHORSE_DATABASE_URL=setting):
            sys.modules.pop("precedence_app", None)
            flag = ["--database-url", urls["flag"]] if "flag" in given else []
            main.main(args=[*flag, "sync", "precedence_app:app", "--json"],
                      standalone_mode=False)
        print(json.dumps(list(given)), flush=True)
        sys.stdin.readline()  # the test looks where the policy landed before the next case
'''


@pytest.mark.slow  # a Django process, sixteen syncs
def test_under_django_the_rule_has_the_setting_and_django_between_code_and_env(
        urls: dict[str, str], tmp_path: Path) -> None:
    require("django", "pip install -e '.[examples]'")
    (tmp_path / "precedence_app.py").write_text(APP_MODULE)
    env = {k: v for k, v in os.environ.items()
           if k not in ("WORKHORSE_DATABASE_URL", "DJANGO_SETTINGS_MODULE")}
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(DJANGO_SCRIPT), json.dumps(urls)], cwd=tmp_path,
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    assert child.stdin is not None and child.stdout is not None
    seen = 0
    try:
        for line in child.stdout:
            if not line.startswith("["):
                continue
            given = tuple(json.loads(line))
            expected = _expected((*given, "django"), ("flag", "code", "setting", "django",
                                                      "env"))
            assert _landed(urls) == [expected], given
            seen += 1
            child.stdin.write("\n")
            child.stdin.flush()
    finally:
        child.stdin.close()
        code = child.wait(60)
        errors = child.stderr.read() if child.stderr else ""
    assert code == 0, errors
    assert seen == 16, errors
