"""`workhorse.contrib.django.TasksBackend`: Django's own tasks framework (`django.tasks`, Django
>= 6.0) enqueuing into workhorse, on real PostgreSQL (issue 31, item 6).

Django 6 needs Python >= 3.12; this suite's interpreter may be older. So the test looks for an
interpreter >= 3.12 on the machine (this one, `python3.1x` on PATH, pyenv's versions), makes a
virtualenv with it (Django 6 and workhorse's dependencies from the package index, workhorse itself
from this tree through PYTHONPATH), kept between runs under the user's cache directory, and runs a
Django 6 process there. A machine with no such interpreter skips, saying so (a missing
interpreter is a fact of the machine, not a broken setup: tests/ci_guard.py); one where the
virtualenv cannot be made skips too, except under CI, where that fails."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from ci_guard import skip_or_fail

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = [
    "django>=6,<7", "psycopg[binary]>=3.2,<4", "psycopg_pool>=3.2,<4", "anyio>=4.4,<5",
    "click>=8.1,<9", "rich>=13,<15", "opentelemetry-api>=1.25,<2", "platformdirs>=4,<5",
    "cronsim>=2.6,<3",
]


def _version(python: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=30)
    except OSError:
        return None
    if out.returncode != 0:  # a pyenv shim for a version that is not active, say
        return None
    major, minor = out.stdout.split()
    return int(major), int(minor)


def find_python312() -> str | None:
    """An interpreter >= 3.12 on this machine, or None."""
    candidates = [sys.executable]
    candidates += [found for name in ("python3.14", "python3.13", "python3.12")
                   if (found := shutil.which(name))]
    for home in ("/root/.pyenv", os.path.expanduser("~/.pyenv"),
                 os.environ.get("PYENV_ROOT", "")):
        if home:
            candidates += sorted(glob.glob(f"{home}/versions/3.1[2-9]*/bin/python3"),
                                 reverse=True)
    candidates += sorted(glob.glob("/usr/bin/python3.1[2-9]"), reverse=True)
    for python in candidates:
        version = _version(python)
        if version is not None and version >= (3, 12):
            return python
    return None


def django6_python(python: str) -> str:
    """A virtualenv of `python` with REQUIREMENTS, made once and kept."""
    key = hashlib.sha1(f"{python}\n{REQUIREMENTS}".encode()).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    venv = cache / "workhorse-tests" / f"django6-{key}"
    ready = venv / ".ready"
    bin_python = venv / "bin" / "python"
    if ready.exists():
        return str(bin_python)
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    made = subprocess.run([python, "-m", "venv", str(venv)], capture_output=True, text=True,
                          timeout=300)
    if made.returncode == 0:
        made = subprocess.run([str(bin_python), "-m", "pip", "install", "-q", *REQUIREMENTS],
                              capture_output=True, text=True, timeout=900)
    if made.returncode != 0:
        shutil.rmtree(venv, ignore_errors=True)
        skip_or_fail(f"cannot make a Django 6 virtualenv with {python}: "
                     f"{(made.stderr or made.stdout).strip().splitlines()[-1:]}")
    ready.write_text("ok\n")
    return str(bin_python)


TASKS_MODULE = '''
from django.tasks import task


@task(queue_name="emails", priority=10)
def send_welcome(user_id):
    return user_id * 2


@task(takes_context=True)
def attempt_and(context, x):
    return [context.attempt, x]


@task()
async def add(a, b):
    return a + b


@task()
def broken():
    raise ValueError("no such user")
'''

SCRIPT = '''
import json, sys
from datetime import timedelta
import django
from django.conf import settings
from psycopg.conninfo import conninfo_to_dict

db = conninfo_to_dict(sys.argv[1])
# As docs/frameworks.md shows it:
TASKS = {"default": {
    "BACKEND": "workhorse.contrib.django.TasksBackend",
    "QUEUES": ["default", "emails"],
    "OPTIONS": {"queues": {"emails": {"max_active": 5}}},
}}
settings.configure(
    DATABASES={"default": {"ENGINE": "django.db.backends.postgresql", "NAME": db["dbname"],
                           "USER": db.get("user", ""), "HOST": db.get("host", ""),
                           "PORT": db.get("port", "")}},
    INSTALLED_APPS=["workhorse.contrib.django"], USE_TZ=True, TASKS=TASKS)
django.setup()
from django.core.management import call_command
from django.db import transaction
from django.tasks import default_task_backend, task_backends
from django.tasks.base import TaskResultStatus
from django.utils import timezone

call_command("migrate", verbosity=0)
import djtasks
from workhorse.contrib.django import tasks_backend
from workhorse.testing import drain

app = tasks_backend.app
report = {"django": django.get_version(), "backend": type(task_backends["default"]).__name__}
welcome = djtasks.send_welcome.enqueue(21)
report["id_is_job_id"] = welcome.id.isdigit()
job = app.get_job(int(welcome.id))
report["queue"], report["priority"], report["status"] = job.queue, job.priority, welcome.status
later = djtasks.attempt_and.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(3)
report["run_after_status"] = app.get_job(int(later.id)).status.value
added = djtasks.add.enqueue(2, 3)
broken = djtasks.broken.enqueue()
try:
    with transaction.atomic():
        rolled = djtasks.send_welcome.enqueue(99)
        raise RuntimeError("rolled back")
except RuntimeError:
    pass
report["rolled_back_exists"] = app.get_job(int(rolled.id)) is not None
report["sync"] = app.sync().created
report["drain"] = str(drain(app))
report["welcome"] = [welcome.task.get_result(welcome.id).status,
                     default_task_backend.get_result(welcome.id).return_value]
report["add"] = default_task_backend.get_result(added.id).return_value
report["drain_scheduled"] = str(drain(app, with_scheduled=True))
failed = default_task_backend.get_result(broken.id)
report["broken"] = [failed.status, failed.errors[0].exception_class_path if failed.errors
                    else None, failed.attempts]
report["context"] = default_task_backend.get_result(later.id).return_value
app.close()
print(json.dumps(report, default=str))
'''


def test_django_tasks_enqueue_into_workhorse(database_url: str, tmp_path: Path) -> None:
    python = find_python312()
    if python is None:
        pytest.skip("no Python >= 3.12 on this machine (Django 6, whose django.tasks the "
                    "backend serves, needs one)")
    venv_python = django6_python(python)
    (tmp_path / "djtasks.py").write_text(TASKS_MODULE)
    env = {k: v for k, v in os.environ.items()
           if k not in ("WORKHORSE_DATABASE_URL", "DJANGO_SETTINGS_MODULE", "PYTHONHOME")}
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{tmp_path}"
    result = subprocess.run([venv_python, "-c", textwrap.dedent(SCRIPT), database_url],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["django"].startswith("6."), report
    assert report["backend"] == "TasksBackend", report
    assert report["id_is_job_id"] is True
    assert (report["queue"], report["priority"], report["status"]) == ("emails", 10, "READY")
    assert report["run_after_status"] == "scheduled"
    assert report["rolled_back_exists"] is False
    assert "emails" in report["sync"]
    # The failing task retries (workhorse's max_attempts=3, backoff waited out by the second).
    assert report["drain"] == "DrainReport(succeeded=2, failed=0, retried=1, held=0)", report
    assert report["drain_scheduled"] == "DrainReport(succeeded=1, failed=1, retried=1, held=0)"
    assert report["welcome"] == ["SUCCESSFUL", 42]
    assert report["add"] == 5
    assert report["broken"] == ["FAILED", "builtins.ValueError", 3]
    assert report["context"] == [1, 3]
