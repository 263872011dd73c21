"""The worker's log lines on stderr: `--log-level` and `--log-format text|json`.

Configured once in the supervisor, before it forks, so every slot writes through the same
handler. At `info` every finished job gets one line (`workhorse.jobs`): its task, `id=<id>`,
queue, outcome, attempt and duration; in JSON the same as the keys `task`, `id`, `queue`,
`outcome`, `attempt`, `duration_s`, beside `ts`, `level`, `logger` and `message`.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("text", "json")

jobs = logging.getLogger("workhorse.jobs")

# The fields of a finished job's line, in order.
JOB_FIELDS = ("task", "id", "queue", "outcome", "attempt", "duration_s")


class _Text(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return _timestamp(record.created)


class _Json(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "ts": _timestamp(record.created), "level": record.levelname.lower(),
            "logger": record.name, "message": record.getMessage(),
        }
        job = getattr(record, "job", None)
        if job is not None:
            document.update(job)
        if record.exc_info:
            document["traceback"] = self.formatException(record.exc_info)
        return json.dumps(document, default=str)


def _timestamp(created: float) -> str:
    seconds = time.gmtime(created)
    return time.strftime("%Y-%m-%dT%H:%M:%S", seconds) + f".{int(created % 1 * 1000):03d}Z"


# A busy slot finishes jobs in batches: their lines are formatted here and written in one call per
# batch, not one logging record each (a record's machinery is a sizeable share of what a short job
# costs the slot). Set by configure(); None until then (a test process: lines go through logging).
_batch_format: str | None = None


def configure(level: str = "info", fmt: str = "text") -> None:
    """Send workhorse's loggers to stderr at `level`, as text lines or JSON objects."""
    global _batch_format
    if level not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, got {level!r}")
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Json() if fmt == "json" else _Text())
    root = logging.getLogger("workhorse")
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    root.propagate = False
    _batch_format = fmt


def succeeded(lines: list[tuple[str, int, str, int, float]]) -> None:
    """One `succeeded` line per job of a batch: (task, id, queue, attempt, duration)."""
    if not lines or not jobs.isEnabledFor(logging.INFO):
        return
    if _batch_format is None:
        for task, job_id, queue, attempt, duration in lines:
            finished("succeeded", task, job_id, queue, attempt, duration)
        return
    stamp = _timestamp(time.time())
    if _batch_format == "json":
        # The same object _Json makes, written out directly: json.dumps of a whole document a
        # job would encode the same names and keys again for every job. JSON escapes a string
        # character by character, so a message's escaped text is its parts' escaped texts joined;
        # each name is escaped once a batch.
        escaped: dict[str, str] = {}
        for task, _, queue, _, _ in lines:
            for name in (task, queue):
                if name not in escaped:
                    escaped[name] = json.dumps(name)[1:-1]
        head = f'{{"ts": "{stamp}", "level": "info", "logger": "{jobs.name}", "message": "'
        text = "".join(
            f'{head}{escaped[task]} id={job_id} queue={escaped[queue]} succeeded '
            f'attempt={attempt} duration={duration:.3f}s", "task": "{escaped[task]}", '
            f'"id": {job_id}, "queue": "{escaped[queue]}", "outcome": "succeeded", '
            f'"attempt": {attempt}, "duration_s": {round(duration, 6)!r}}}\n'
            for task, job_id, queue, attempt, duration in lines)
    else:
        text = "".join(
            f"{stamp} INFO {jobs.name}: {task} id={job_id} queue={queue} succeeded "
            f"attempt={attempt} duration={duration:.3f}s\n"
            for task, job_id, queue, attempt, duration in lines)
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed: the lines are lost, the jobs are not
        pass


def finished(outcome: str, task: str, job_id: int, queue: str, attempt: int, duration: float,
             detail: str = "", level: int = logging.INFO) -> None:
    """One finished job's line (cheap to skip when the level hides it)."""
    if not jobs.isEnabledFor(level):
        return
    fields = {"task": task, "id": job_id, "queue": queue, "outcome": outcome,
              "attempt": attempt, "duration_s": round(duration, 6)}
    jobs.log(level, "%s id=%d queue=%s %s attempt=%d duration=%.3fs%s", task, job_id, queue,
             outcome, attempt, duration, f": {detail}" if detail else "",
             extra={"job": fields})
