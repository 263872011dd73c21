"""A Django project as its team lives in it (issue 31), built in the test with `django-admin
startproject` and `startapp`, on real PostgreSQL (the test server: the embedded one by default):

  - `manage.py migrate` installs the workhorse schema (the contrib app's migration);
  - `manage.py test` runs a TestCase that uses `eager` with ORM writes and `drain` inside the
    test's transaction, and a TransactionTestCase that uses `drain`; the test database is
    dropped cleanly (no workhorse session is left on it);
  - `manage.py workhorse worker` (APP from WORKHORSE_APP) runs a job that reads a row the web
    process committed; a job enqueued in a rolled-back `atomic()` never exists;
  - the worker's Django connection is replaced when the server ends it (as a restart does);
  - `manage.py workhorse` passes its global options through, and every verb uses Django's
    database unless `--database-url` is given.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from apps.harness import scalar, wait_for
from ci_guard import require
from psycopg.conninfo import conninfo_to_dict, make_conninfo

pytestmark = pytest.mark.slow
require("django", "pip install -e '.[examples]'")

MODELS = '''
from django.db import models


class Order(models.Model):
    total = models.IntegerField()
    receipt_sent = models.BooleanField(default=False)
'''

TASKS = '''
from django.db import connection, transaction

import workhorse

from .models import Order

app = workhorse.App("proj")


@app.task(queue="receipts", max_active=2)
def send_receipt(order_id):
    order = Order.objects.get(id=order_id)  # the row the web process committed
    order.receipt_sent = True
    order.save()
    return order.total


@app.task(queue="receipts", max_attempts=1)
def backend_pid():
    with connection.cursor() as cursor:  # the worker thread's own Django connection
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def place_order(total, fail=False):
    with transaction.atomic():
        order = Order.objects.create(total=total)
        send_receipt.delay(order.id)  # joins the block: commits or rolls back with the order
        if fail:
            raise RuntimeError("payment declined")
    return order
'''

TESTS = '''
from django.db import connection
from django.test import TestCase, TransactionTestCase

from workhorse.testing import DrainReport, assert_enqueued, drain, eager, refute_enqueued

from .models import Order
from .tasks import app, place_order, send_receipt


class EagerTests(TestCase):
    def test_eager_runs_the_task_with_the_orm_in_the_test_transaction(self):
        with eager(app):
            order = place_order(5)
        order.refresh_from_db()
        self.assertTrue(order.receipt_sent)

    def test_drain_sees_jobs_enqueued_in_the_test_transaction(self):
        order = place_order(6)
        assert_enqueued(app, send_receipt, args=[order.id], count=1)
        with self.assertRaises(RuntimeError):
            place_order(60, fail=True)
        self.assertEqual(drain(app), DrainReport(succeeded=1))
        order.refresh_from_db()
        self.assertTrue(order.receipt_sent)
        self.assertEqual(send_receipt.delay(order.id).status().value, "ready")


class DrainTests(TransactionTestCase):
    def test_drain_runs_committed_jobs(self):
        order = place_order(7)
        with self.assertRaises(RuntimeError):
            place_order(8, fail=True)
        assert_enqueued(app, send_receipt, args=[order.id], count=1)
        self.assertEqual(drain(app), DrainReport(succeeded=1))
        refute_enqueued(app, send_receipt)
        self.assertTrue(Order.objects.get(id=order.id).receipt_sent)
        self.assertFalse(Order.objects.filter(total=8).exists())
        self.assertTrue(connection.settings_dict["NAME"].startswith("test_"))
        self.assertIn(connection.settings_dict["NAME"], app.database_url)

    def test_get_waits_on_a_connection_that_must_not_outlive_the_test_database(self):
        order = Order.objects.create(total=9)
        handle = send_receipt.delay(order.id)  # no worker: it stays ready
        with self.assertRaises(TimeoutError):
            handle.get(timeout=0.3)
        self.assertEqual(drain(app), DrainReport(succeeded=1))
'''

SETTINGS = '''

# ---- added by the test ----
import os as _os

from psycopg.conninfo import conninfo_to_dict as _conninfo

_db = _conninfo(_os.environ["PROJ_DATABASE_URL"])
DATABASES = {"default": {
    "ENGINE": "django.db.backends.postgresql",
    "NAME": _db["dbname"], "USER": _db.get("user", ""), "PASSWORD": _db.get("password", ""),
    "HOST": _db.get("host", ""), "PORT": _db.get("port", ""),
    "CONN_MAX_AGE": None, "CONN_HEALTH_CHECKS": True,  # persistent: the hooks must replace it
    "OPTIONS": {"application_name": "proj-django"},
}}
INSTALLED_APPS += ["workhorse.contrib.django", "shop"]
WORKHORSE_APP = "shop.tasks:app"
USE_TZ = True
'''


def _with_dbname(url: str, dbname: str) -> str:
    params = conninfo_to_dict(url)
    params["dbname"] = dbname
    return make_conninfo(**params)


def _exists(server_url: str, name: str) -> bool:
    with psycopg.connect(server_url, autocommit=True) as admin:
        return admin.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                             (name,)).fetchone() is not None


class Project:
    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root = root
        self.env = env

    def run(self, *args: str, check: bool = True, timeout: float = 180) -> str:
        result = subprocess.run([sys.executable, "manage.py", *args], cwd=self.root,
                                env=self.env, capture_output=True, text=True, timeout=timeout)
        if check:
            assert result.returncode == 0, f"{args}:\n{result.stdout}\n{result.stderr}"
        return result.stdout + result.stderr

    def shell(self, code: str) -> str:
        return self.run("shell", "-c", textwrap.dedent(code)).strip().splitlines()[-1]


@pytest.fixture
def project(server_url: str, tmp_path: Path) -> Iterator[tuple[Project, str]]:
    name = f"whdj_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = _with_dbname(server_url, name)
    root = tmp_path / "proj"
    root.mkdir()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PROJ_DATABASE_URL": url}
    for variable in ("WORKHORSE_DATABASE_URL", "DJANGO_SETTINGS_MODULE",
                     "WORKHORSE_DEFAULT_CONCURRENCY_LIMIT"):
        env.pop(variable, None)
    admin_cmd = [sys.executable, "-m", "django"]
    subprocess.run([*admin_cmd, "startproject", "proj", str(root)], check=True, env=env)
    project = Project(root, env)
    project.run("startapp", "shop")
    (root / "shop" / "models.py").write_text(MODELS)
    (root / "shop" / "tasks.py").write_text(TASKS)
    (root / "shop" / "tests.py").write_text(TESTS)
    with (root / "proj" / "settings.py").open("a") as settings:
        settings.write(SETTINGS)
    project.run("makemigrations", "shop", "--verbosity", "0")
    try:
        yield project, url
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            for db in (name, f"test_{name}"):
                admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def test_migrate_then_manage_py_test(project: tuple[Project, str], server_url: str) -> None:
    proj, url = project
    proj.run("migrate", "--verbosity", "0")
    with psycopg.connect(url, autocommit=True) as conn:
        assert scalar(conn, "SELECT count(*) FROM workhorse.jobs") == 0  # the schema is there
        assert scalar(conn, "SELECT count(*) FROM django_migrations WHERE app = 'workhorse'") == 1
    name = conninfo_to_dict(url)["dbname"]
    out = proj.run("test", "shop", "--verbosity", "2", "--noinput")
    assert "Ran 4 tests" in out and "OK" in out, out
    assert "Destroying test database" in out, out
    # Dropped cleanly: no workhorse session kept it open.
    assert not _exists(server_url, f"test_{name}"), out


def test_worker_reads_the_committed_row_and_survives_a_lost_connection(
    project: tuple[Project, str], tmp_path: Path
) -> None:
    proj, url = project
    proj.run("migrate", "--verbosity", "0")
    placed = proj.shell('''
        import json
        from shop.models import Order
        from shop.tasks import app, place_order
        order = place_order(10)
        try:
            place_order(11, fail=True)
        except RuntimeError:
            pass
        app.sync()
        print(json.dumps([order.id, Order.objects.filter(total=11).count()]))
    ''')
    order_id, declined = __import__("json").loads(placed)
    assert declined == 0
    conn = psycopg.connect(url, autocommit=True)
    # One job: the rolled-back order's job never existed.
    assert conn.execute("SELECT (payload->'args'->>0)::bigint FROM workhorse.jobs").fetchall() \
        == [(order_id,)]
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "workhorse", "worker", "--slots", "1"],
        cwd=proj.root, env=proj.env, stdout=log, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL)

    def output() -> str:
        log.flush()
        return (tmp_path / "worker.log").read_text(errors="replace")

    try:
        wait_for(lambda: scalar(conn, "SELECT receipt_sent FROM shop_order WHERE id = %s",
                                order_id), 90, "the receipt", interval=0.2)
        wait_for(lambda: scalar(conn, "SELECT status FROM workhorse.jobs") == "succeeded", 30,
                 "its outcome", interval=0.1)
        assert scalar(conn, "SELECT result FROM workhorse.jobs") == 10, output()

        def pid_job() -> int:
            job_id = proj.shell('''
                from shop.tasks import backend_pid
                print(backend_pid.delay().id)
            ''')
            wait_for(lambda: scalar(conn, "SELECT status FROM workhorse.jobs WHERE id = %s",
                                    int(job_id)) in ("succeeded", "failed"), 60, "the pid job",
                     interval=0.1)
            row = conn.execute("SELECT status, result, attempts FROM workhorse.jobs "
                               "WHERE id = %s", (int(job_id),)).fetchone()
            assert row is not None and row[0] == "succeeded", (row, output())
            return int(row[1])

        first = pid_job()
        assert scalar(conn, "SELECT application_name FROM pg_stat_activity WHERE pid = %s",
                      first) == "proj-django"
        # The server ends the worker's Django session, as a restart does: the next job runs on
        # a new one (close_old_connections between jobs), at its first attempt.
        conn.execute("SELECT pg_terminate_backend(%s)", (first,))
        second = pid_job()
        assert second != first, output()
        names = {row[0] for row in conn.execute(
            "SELECT application_name FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()")}
        # Every connection workhorse opened names itself.
        assert {n for n in names if n != "proj-django"} <= {
            n for n in names if n.startswith("workhorse-")}, names
    finally:
        worker.terminate()
        code = worker.wait(30)
        log.close()
        conn.close()
    assert code == 0, output()


def test_manage_py_workhorse_passes_its_arguments_through(
    project: tuple[Project, str], database_url: str
) -> None:
    proj, url = project
    proj.run("migrate", "--verbosity", "0")
    # Django's database, with no flag; --database-url wins (and comes before the verb).
    assert '"receipts"' in proj.run("workhorse", "sync", "--json")
    assert '"receipts"' in proj.run("workhorse", "--database-url", database_url, "sync",
                                    "--json")
    for target, expected in ((url, 1), (database_url, 1)):
        with psycopg.connect(target, autocommit=True) as conn:
            assert scalar(conn, "SELECT count(*) FROM workhorse.policies "
                                "WHERE queue = 'receipts'") == expected
    env_only = proj.env | {"WORKHORSE_DATABASE_URL": database_url}
    result = subprocess.run([sys.executable, "manage.py", "workhorse", "policies", "--json"],
                            cwd=proj.root, env=env_only, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert "proj" in result.stdout  # Django's database: the environment comes after it
    # Django's own --settings is applied by manage.py, not passed on.
    assert '"receipts"' in proj.run("workhorse", "--settings", "proj.settings", "sync", "--json")
    usage = proj.run("workhorse", "--help")
    assert "worker" in usage and "--database-url" in usage
    missing = proj.run("workhorse", "jobs", "show", "999999", check=False)
    assert "999999" in missing
    # The plain CLI on a module that needs Django, with Django not set up: one line that says
    # what to do, not a bare AppRegistryNotReady.
    plain = subprocess.run(
        [sys.executable, "-m", "workhorse", "--database-url", url, "sync", "shop.tasks:app"],
        cwd=proj.root, env=proj.env | {"DJANGO_SETTINGS_MODULE": "proj.settings"},
        capture_output=True, text=True, timeout=60)
    assert plain.returncode == 1 and "manage.py workhorse worker" in plain.stderr, plain.stderr


