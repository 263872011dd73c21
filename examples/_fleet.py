"""What every example shares: run a real `workhorse worker` fleet until some jobs have finished.

The worker is a subprocess, started the way you would start it: `python -m workhorse worker
MODULE:app ...`, from this directory, so that it imports the example's module by name. It gets the
same database as the example: WORKHORSE_DATABASE_URL if set, else the embedded server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import workhorse
from workhorse import Job, JobHandle, JobStatus

HERE = Path(__file__).resolve().parent
FINISHED = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.HELD, JobStatus.CANCELED}


def run_fleet(
    app: workhorse.App,
    app_reference: str,
    handles: Sequence[JobHandle],
    worker_args: Sequence[str] = (),
    timeout: float = 60.0,
) -> list[Job]:
    """Start `workhorse worker APP_REFERENCE`, wait until every job has finished, stop the worker
    with SIGTERM (it drains and exits 0), and return the jobs as stored."""
    command = [
        sys.executable, "-m", "workhorse", "worker", app_reference,
        "--dequeue-timeout", "1s", "--grace", "10s", *worker_args,
    ]
    env = {**os.environ, "WORKHORSE_DATABASE_URL": app.database_url}
    print("$ workhorse", " ".join(command[3:]))
    with tempfile.TemporaryFile("w+") as log:
        worker = subprocess.Popen(command, cwd=HERE, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            jobs = _wait(handles, worker, timeout)
        finally:
            code = _stop(worker)
            log.seek(0)
            output = log.read()
        print("\n".join("  | " + line.rstrip() for line in output.rstrip().splitlines()))
        if code != 0:
            raise SystemExit(f"the worker exited with status {code}")
    return jobs


def _wait(
    handles: Sequence[JobHandle], worker: subprocess.Popen[bytes], timeout: float
) -> list[Job]:
    deadline = time.monotonic() + timeout
    while True:
        jobs = [handle.job() for handle in handles]
        if all(job is not None and job.status in FINISHED for job in jobs):
            return [job for job in jobs if job is not None]
        if worker.poll() is not None:
            raise SystemExit(f"the worker exited early, with status {worker.returncode}")
        if time.monotonic() > deadline:
            raise SystemExit(f"the jobs did not finish within {timeout:g}s")
        time.sleep(0.2)


def _stop(worker: subprocess.Popen[bytes]) -> int:
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    return worker.returncode


def timeline(jobs: Sequence[Job], describe: str = "{key}") -> None:
    """Print the jobs in the order they started, with when each started and ended. Handlers return
    `{"started": ..., "finished": ...}` (wall-clock seconds) for this."""
    ran = sorted((job for job in jobs if job.result), key=lambda job: job.result["started"])
    if not ran:
        return
    zero = ran[0].result["started"]
    for job in ran:
        started, finished = job.result["started"] - zero, job.result["finished"] - zero
        detail = describe.format(key=job.concurrency_key, task=job.task, **job.result)
        print(f"  {started:5.2f}s - {finished:5.2f}s  job {job.id:>3}  {job.status}  {detail}")


def peak(intervals: Iterable[tuple[float, float]]) -> int:
    """The most intervals open at one instant: how many jobs really ran at once."""
    intervals = list(intervals)
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals],
                    key=lambda event: (event[0], event[1]))
    running = best = 0
    for _, delta in events:
        running += delta
        best = max(best, running)
    return best
