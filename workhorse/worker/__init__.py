"""The worker: a supervisor process that forks slots, each an event loop running jobs.

    from workhorse.worker import run_worker
    exit_code = run_worker(app, slots=4, concurrency=8, queues=["mail"])

`workhorse worker APP ...` calls `run_worker`. One job's path through a slot:
`claimer.py` (when, from which queue, how much) -> `executor.py` (runs it: arguments, sync or
async, the outcome) -> `recorder.py` (batches outcomes into complete/fail). Around them:
`slot.py` (wires the three into one process), `supervisor.py` (processes, signals, the workers
row), `leases.py` (heartbeats) and `wakeups.py` (the one LISTEN connection and the poll fallback).
"""

from .supervisor import run_worker

__all__ = ["run_worker"]
