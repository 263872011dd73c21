"""Bad worker flags end at parse time in one line (exit 2); an app module that fails at import
ends in one line (exit 1), and `-v/--verbose` shows its whole traceback. Real processes: the
output is what a user sees."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BAD_DSN = "postgresql://x@127.0.0.1:1/x"  # never reached: the errors come first


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workhorse", "--database-url", BAD_DSN, *args], cwd=cwd,
        capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "80"},
    )


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--lease", "99999999999h", "at most 366 days"),  # every slot crash-looped
        ("--lease", "30000000000", "at most 366 days"),  # the lease thread died
        ("--lease", "10ms", "between 1s and 24h"),  # overlap 10 against a limit of 5
        ("--lease", "999ms", "between 1s and 24h"),
        ("--lease", "25h", "between 1s and 24h"),
        ("--lease", "3 s", "not a duration"),
        ("--grace", "400d", "at most 366 days"),
        ("--dequeue-timeout", "99999999999h", "at most 366 days"),
        ("--queues", ",,", "names no queue"),  # silently served every queue
        ("--queues", " , ", "names no queue"),
    ],
)
def test_bad_worker_flags_exit_2_in_one_line(
    tmp_path: Path, flag: str, value: str, says: str
) -> None:
    # The app module would start a worker if the flags passed: they must fail before.
    (tmp_path / "boundsapp.py").write_text(
        "import workhorse\napp = workhorse.App('bounds')\n@app.task\ndef t(): pass\n")
    result = run("worker", "boundsapp:app", flag, value, cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = _lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert flag in lines[0] and says in lines[0], lines[0]
    assert "Traceback" not in result.stderr


BROKEN = """\
import workhorse

app = workhorse.App("broken")


def read_settings():
    raise RuntimeError("SMTP_HOST is not set")


SETTINGS = read_settings()
"""


def test_an_app_that_fails_at_import_exits_1_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "brokenapp.py").write_text(BROKEN)
    result = run("worker", "brokenapp:app", cwd=tmp_path)
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = _lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "RuntimeError: SMTP_HOST is not set" in lines[0] and "brokenapp.py" in lines[0]


@pytest.mark.parametrize("verbose", ["-v", "--verbose"])
def test_verbose_shows_the_import_failure_traceback(tmp_path: Path, verbose: str) -> None:
    (tmp_path / "brokenapp.py").write_text(BROKEN)
    result = subprocess.run(
        [sys.executable, "-m", "workhorse", verbose, "worker", "brokenapp:app"], cwd=tmp_path,
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "WORKHORSE_DATABASE_URL": BAD_DSN},
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback (most recent call last)" in result.stderr
    assert "read_settings" in result.stderr and "SETTINGS = read_settings()" in result.stderr
    assert _lines(result.stderr)[-1].startswith("error: ")


def test_a_syntax_error_in_the_app_is_one_line_with_its_place(tmp_path: Path) -> None:
    (tmp_path / "typoapp.py").write_text("import workhorse\napp = workhorse.App('t'\n")
    result = run("worker", "typoapp:app", cwd=tmp_path)
    assert result.returncode == 1 and len(_lines(result.stderr)) == 1, result.stderr
    assert "SyntaxError" in result.stderr and "typoapp.py, line" in result.stderr
