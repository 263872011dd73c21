"""Stored values are data (issue 24, item 2): the CLI prints every name, key and error literally
and whole, never as Rich markup, with control characters made visible, also into a pipe.

Real processes (`python -m workhorse`, its stdout a pipe) on a real database.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, Queue

BROKEN = "broken[/]markup"
STYLED = "[bold red]x[/bold red]"
ESCAPED_KEY = "key\x1b[31mred\x1b[0m"
LONG = "q-" + "é" * 200 + "-" + "z" * 40 + "-end"  # 245 characters, wider than any terminal
ERROR_TYPE = "Boom[/]Error"
ERROR_MESSAGE = "bad [link=http://x]\x1b]0;pwned\x07 [/link]"
TRACEBACK = 'Traceback (most recent call last):\n  File "[red]x[/red]", line 1\n\x1b[2Jgone\n'


def run(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    return subprocess.run(
        [sys.executable, "-m", "workhorse", "--database-url", database_url, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def ok(database_url: str, *args: str) -> str:
    result = run(database_url, *args)
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    # No raw control character reaches the terminal; the output is plain text (no styling
    # codes off a terminal).
    for char in ("\x1b", "\x07"):
        assert char not in result.stdout, repr(result.stdout)
    return result.stdout


@pytest.fixture
def awkward(queue: Queue) -> dict[str, Any]:
    queue.sync_concurrency_policies(
        "ns[/]x", [ConcurrencyPolicyDefinition(queue=BROKEN, max_active=3)], prune=False
    )
    ready = queue.enqueue(STYLED, {"args": [STYLED], "kwargs": {}},
                          EnqueueOptions(queue=BROKEN, concurrency_key=ESCAPED_KEY))
    queue.enqueue("t.long", None, EnqueueOptions(queue=LONG))
    queue.enqueue("t.fails", None, EnqueueOptions(queue="fails", max_attempts=1))
    (claimed,) = queue.claim("fails", 1, 30)
    queue.fail(claimed.id, claimed.fence,
               {"type": ERROR_TYPE, "message": ERROR_MESSAGE, "traceback": TRACEBACK})
    return {"ready": ready, "failed": claimed.id}


def test_queues_lists_markup_and_long_names_literally(
    database_url: str, awkward: dict[str, Any]
) -> None:
    out = ok(database_url, "queues")
    assert BROKEN in out
    assert LONG in out  # whole, on one line, into a pipe


def test_jobs_list_shows_task_queue_and_key_literally(
    database_url: str, awkward: dict[str, Any]
) -> None:
    out = ok(database_url, "jobs", "list")
    assert STYLED in out
    assert BROKEN in out
    assert "key\\x1b[31mred\\x1b[0m" in out
    assert LONG in out
    filtered = ok(database_url, "jobs", "list", "--queue", BROKEN)
    assert STYLED in filtered


def test_jobs_show_prints_payload_and_error_literally(
    database_url: str, awkward: dict[str, Any]
) -> None:
    out = ok(database_url, "jobs", "show", str(awkward["ready"]))
    assert STYLED in out
    assert BROKEN in out
    assert "key\\x1b[31mred\\x1b[0m" in out

    failed = ok(database_url, "jobs", "show", str(awkward["failed"]))
    assert f"{ERROR_TYPE}: bad [link=http://x]\\x1b]0;pwned\\x07 [/link]" in failed
    assert '  File "[red]x[/red]", line 1\n\\x1b[2Jgone' in failed


def test_policies_health_and_controls_show_names_literally(
    database_url: str, awkward: dict[str, Any]
) -> None:
    assert "ns[/]x" in ok(database_url, "policies")
    assert BROKEN in ok(database_url, "health")
    assert f"{BROKEN}: paused" in ok(database_url, "queues", "pause", BROKEN)
    assert f"{BROKEN}: not paused" in ok(database_url, "queues", "resume", BROKEN)
    assert BROKEN in ok(database_url, "policies", "override", BROKEN, "--max-active", "1")
    assert BROKEN in ok(database_url, "policies", "clear-override", BROKEN)


def test_an_error_quoting_the_server_is_one_visible_line(database_url: str) -> None:
    # The server's own message repeats the (hostile) database name, ESC included.
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = {**conninfo_to_dict(database_url), "dbname": "no\x1b[2Jsuch[/]db"}
    result = run(make_conninfo("", **params), "queues")
    assert result.returncode == 1
    assert "\x1b" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "no\\x1b[2Jsuch[/]db" in lines[0]
