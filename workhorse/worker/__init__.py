"""The worker: a supervisor process that forks slots, each an event loop running jobs.

    from workhorse.worker import run_worker
    exit_code = run_worker(app, slots=4, concurrency=8, queues=["mail"])

`workhorse worker APP ...` calls `run_worker`. See `supervisor.py` (processes, signals, the
workers row), `slot.py` (claim loop, handlers, outcomes), `leases.py` (heartbeats) and
`wakeups.py` (the one LISTEN connection and the poll fallback).
"""

from .supervisor import run_worker

__all__ = ["run_worker"]
