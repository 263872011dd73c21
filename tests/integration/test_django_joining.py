"""Inside `transaction.atomic()`, an enqueue joins Django's transaction (docs/design.md, "Django and
FastAPI"), in a Django process of its own against real PostgreSQL: a job rolls back with the
block; an explicit `app.using(conn)` wins; an App whose own database_url names another database
never joins and warns once; one whose URL names Django's database joins; a handle reads the
uncommitted job on Django's connection; `wh_django.atomic` still works."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from ci_guard import require
from psycopg.conninfo import conninfo_to_dict, make_conninfo

SCRIPT = '''
import json, sys, warnings
import django
from django.conf import settings
from psycopg.conninfo import conninfo_to_dict

django_url, other_url = sys.argv[1], sys.argv[2]
db = conninfo_to_dict(django_url)
settings.configure(
    DATABASES={"default": {"ENGINE": "django.db.backends.postgresql", "NAME": db["dbname"],
                           "USER": db.get("user", ""), "HOST": db.get("host", ""),
                           "PORT": db.get("port", "")}},
    INSTALLED_APPS=["workhorse.contrib.django"], USE_TZ=True)
django.setup()
import psycopg
from django.db import transaction
import workhorse
from workhorse.contrib import django as wh_django

def make(name, url=None):
    app = workhorse.App(name, database_url=url)
    @app.task(name=f"{name}.t", queue=f"{name}-q")
    def t(n):
        return n
    return app, t

def count(url, name):
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(*) FROM workhorse.jobs WHERE task = %s",
                            (f"{name}.t",)).fetchone()[0]

report = {}
joined, t = make("joined")
try:
    with transaction.atomic():
        h = t.delay(1)
        report["handle_sees_uncommitted"] = h.status().value
        raise RuntimeError
except RuntimeError:
    pass
with transaction.atomic():
    t.delay(2)
report["joined"] = count(django_url, "joined")

same, t2 = make("same", wh_django.database_url())
try:
    with transaction.atomic():
        t2.delay(1)
        raise RuntimeError
except RuntimeError:
    pass
report["same_url_rolled_back"] = count(django_url, "same")

other, t3 = make("other", other_url)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        with transaction.atomic():
            t3.delay(1)
            t3.delay(2)
            raise RuntimeError
    except RuntimeError:
        pass
report["other_committed"] = count(other_url, "other")
report["other_warnings"] = [str(w.message)[:40] for w in caught
                            if issubclass(w.category, RuntimeWarning)]

explicit, t4 = make("explicit")
with psycopg.connect(django_url, autocommit=True) as own:
    try:
        with transaction.atomic(), explicit.using(own):
            t4.delay(1)
            raise RuntimeError
    except RuntimeError:
        pass
report["explicit_using_committed"] = count(django_url, "explicit")

legacy, t5 = make("legacy")
try:
    with wh_django.atomic(legacy):
        t5.delay(1)
        raise RuntimeError
except RuntimeError:
    pass
t5.delay(2)  # outside any block: the App's own pool, at once
report["legacy"] = count(django_url, "legacy")
for app in (joined, same, other, explicit, legacy):
    app.close()
print(json.dumps(report))
'''


def _with_dbname(url: str, dbname: str) -> str:
    params = conninfo_to_dict(url)
    params["dbname"] = dbname
    return make_conninfo(**params)


@pytest.fixture
def other_url(server_url: str, template_name: str) -> Iterator[str]:
    name = f"whjoin_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_name}"')
    try:
        yield _with_dbname(server_url, name)
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_enqueues_join_djangos_transaction_by_the_rules(database_url: str,
                                                         other_url: str) -> None:
    require("django", "pip install -e '.[examples]'")
    env = {k: v for k, v in os.environ.items()
           if k not in ("WORKHORSE_DATABASE_URL", "DJANGO_SETTINGS_MODULE")}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT), database_url, other_url],
        env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {
        "handle_sees_uncommitted": "ready",
        "joined": 1,  # the rolled-back block took its job along; the committed one kept it
        "same_url_rolled_back": 0,
        "other_committed": 2,  # another database: committed at once, despite the rollback
        "other_warnings": ["workhorse: an enqueue inside transaction"],  # once
        "explicit_using_committed": 1,
        "legacy": 1,
    }, report


PSYCOPG2 = '''
import django
from django.conf import settings
settings.configure(
    DATABASES={"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "x"}},
    INSTALLED_APPS=["workhorse.contrib.django"])
# As on a Django whose PostgreSQL backend picked psycopg 2 (Django < 4.2 has no psycopg 3 at all).
from django.db.backends.postgresql import psycopg_any
psycopg_any.is_psycopg3 = False
from workhorse.errors import WorkhorseError
try:
    django.setup()
except WorkhorseError as exc:
    print(type(exc).__name__, exc)
'''


def test_psycopg2_gets_a_clear_error_at_setup() -> None:
    require("django", "pip install -e '.[examples]'")
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(PSYCOPG2)], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("InvalidOptionsError"), result.stdout
    assert "psycopg 2" in result.stdout and "psycopg 3" in result.stdout
