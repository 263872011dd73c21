"""A user's own test suite, run as a user runs it (`pytest` in a subprocess, the workhorse pytest
plugin loaded from its entry point): the documented example in examples/testing/, and the
plugin's `workhorse_database_url` (fresh per test, from a template, dropped afterwards)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "testing"


# A second user test file: each test records the database it was given.
PLUGIN_TESTS = '''
import psycopg
from workhorse import Queue

def _record(url, tmp):
    with open(tmp, "a") as out:
        out.write(url + "\\n")
    with psycopg.connect(url, autocommit=True) as conn:
        queue = Queue(conn)
        assert queue.schema_version() > 0
        assert queue.list_jobs() == []
        queue.enqueue("t", {"args": [], "kwargs": {}})   # never seen by the other test

def test_one(workhorse_database_url):
    _record(workhorse_database_url, "urls.txt")

def test_two(workhorse_database_url):
    _record(workhorse_database_url, "urls.txt")
'''


@pytest.mark.slow  # a whole pytest run in a subprocess: CI's first pass only
def test_the_documented_user_suite_passes_on_fresh_dropped_databases(
    server_url: str, tmp_path: Path
) -> None:
    # One pytest run (a subprocess start is the cost here): the example suite, and two tests of
    # the plugin's fixture that record the databases they were given.
    (tmp_path / "test_plugin_db.py").write_text(PLUGIN_TESTS)
    env = {**os.environ, "WORKHORSE_TEST_DATABASE_URL": server_url}
    env.pop("WORKHORSE_DATABASE_URL", None)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), str(EXAMPLE), str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "8 passed" in result.stdout, output
    urls = (tmp_path / "urls.txt").read_text().splitlines()
    assert len(urls) == 2 and urls[0] != urls[1]
    names = [psycopg.conninfo.conninfo_to_dict(url)["dbname"] for url in urls]
    with psycopg.connect(server_url, autocommit=True) as admin:
        left = admin.execute(
            "SELECT datname FROM pg_database WHERE datname = ANY(%s)", (names,)).fetchall()
    assert left == []  # both dropped after their test
