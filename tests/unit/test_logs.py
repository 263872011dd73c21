"""The worker's log lines: `--log-level` hides what is below it, and a batch of succeeded jobs
written at once reads exactly like the per-record lines (the same JSON document, the same text)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from workhorse.worker import _logs

# Names JSON must escape: a quote, a backslash, a tab, a newline, non-ASCII, an astral character.
AWKWARD = 'we"ird\\name\twith\nä✓𝄞'


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger("workhorse")
    saved = (list(root.handlers), root.level, root.propagate, _logs._batch_format)
    yield
    handlers, level, propagate, batch_format = saved
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    root.propagate = propagate
    _logs._batch_format = batch_format


def _lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().err.splitlines()


def test_a_json_batch_line_is_the_document_a_record_makes(capsys: pytest.CaptureFixture[str]):
    _logs.configure("info", "json")
    _logs.finished("succeeded", AWKWARD, 7, "q-" + AWKWARD, 2, 0.0123456789)
    _logs.succeeded([(AWKWARD, 7, "q-" + AWKWARD, 2, 0.0123456789),
                     ("plain", 8, "default", 1, 3.0)])
    record, batch, plain = (json.loads(line) for line in _lines(capsys))
    record.pop("ts"), batch.pop("ts")
    assert batch == record
    assert batch["task"] == AWKWARD and batch["queue"] == "q-" + AWKWARD
    assert {k: batch[k] for k in _logs.JOB_FIELDS} == {
        "task": AWKWARD, "id": 7, "queue": "q-" + AWKWARD, "outcome": "succeeded",
        "attempt": 2, "duration_s": 0.012346}
    assert plain["duration_s"] == 3.0 and plain["id"] == 8


def test_a_text_batch_line_names_the_job(capsys: pytest.CaptureFixture[str]) -> None:
    _logs.configure("info", "text")
    _logs.finished("succeeded", "app.send", 7, "mail", 1, 0.25)
    _logs.succeeded([("app.send", 7, "mail", 1, 0.25)])
    record, batch = _lines(capsys)
    expected = "INFO workhorse.jobs: app.send id=7 queue=mail succeeded attempt=1 duration=0.250s"
    assert record.endswith(expected) and batch.endswith(expected), (record, batch)


@pytest.mark.parametrize("level", ["warning", "error"])
def test_above_info_no_job_lines(capsys: pytest.CaptureFixture[str], level: str) -> None:
    _logs.configure(level, "text")
    _logs.succeeded([("app.send", 7, "mail", 1, 0.25)])
    _logs.finished("retried", "app.send", 7, "mail", 1, 0.25, "boom")
    logging.getLogger("workhorse.worker").warning("a warning")
    lines = _lines(capsys)
    assert not any("id=7" in line for line in lines), lines
    assert any("a warning" in line for line in lines) == (level == "warning")


def test_debug_shows_the_workers_debug_lines(capsys: pytest.CaptureFixture[str]) -> None:
    _logs.configure("debug", "json")
    logging.getLogger("workhorse.worker").debug("slot %d: draining", 3)
    _logs.configure("info", "json")
    logging.getLogger("workhorse.worker").debug("hidden at info")
    [line] = _lines(capsys)
    assert json.loads(line)["message"] == "slot 3: draining"


def test_bad_levels_and_formats_are_refused() -> None:
    with pytest.raises(ValueError, match="log level"):
        _logs.configure("verbose", "text")
    with pytest.raises(ValueError, match="log format"):
        _logs.configure("info", "xml")
