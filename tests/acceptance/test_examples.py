"""Each example runs with one command against the test database, and shows its results.

The examples start a real `workhorse worker` fleet as a subprocess; each takes a few seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# Each starts a fleet: CI's first pass only (marker `slow`), like the framework examples.
pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

CASES = {
    "mail.py": ["queue mail: at most", "tenant acme: at most", "limits held"],
    "openai_queue.py": ["openai_queue.summarize", "openai_queue.classify", "limit held"],
    "serial.py": ["order [1, 2, 3, 4, 5]", "ran serially, in order"],
}


def test_every_example_is_tested() -> None:
    scripts = {p.name for p in EXAMPLES.glob("*.py") if not p.name.startswith("_")}
    assert scripts == set(CASES)


@pytest.mark.parametrize("script", sorted(CASES))
def test_example_runs(script: str, workhorse_database_url: str, tmp_path: Path) -> None:
    # The database comes from the pytest plugin workhorse ships, as a user's suite gets it.
    env = {**os.environ, "WORKHORSE_DATABASE_URL": workhorse_database_url}
    env.pop("WORKHORSE_DEFAULT_CONCURRENCY_LIMIT", None)
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / script)],
        cwd=tmp_path,  # the examples must not depend on the caller's directory
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert output.count(" succeeded ") >= 5, output  # the per-job lines
    for expected in CASES[script]:
        assert expected in result.stdout, output
    assert "stopped:" in result.stdout, output  # the worker drained on SIGTERM and said so
