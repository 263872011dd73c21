"""Run supervisors as a child subreaper, kill -9 each mid-run, and report how its orphaned slots
exited (only a subreaper, or init, can see that): `python _subreaper.py URL JOURNAL ROUNDS`.
Prints one JSON list per round: [[pid, "exited 0" | "killed by SIGTERM" ...], ...]."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "acceptance"))
from apps.harness import children  # noqa: E402

PR_SET_CHILD_SUBREAPER = 36


def describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited {os.WEXITSTATUS(status)}"


def main() -> None:
    url, journal, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise SystemExit("cannot become a child subreaper")
    env = {**os.environ, "WORKHORSE_DATABASE_URL": url, "FAULTS_JOURNAL": journal}
    for _ in range(rounds):
        supervisor = subprocess.Popen(
            [sys.executable, "-m", "workhorse", "worker", "faults_app:app", "--slots", "3",
             "--queues", "work", "--dequeue-timeout", "1s"],
            cwd=HERE, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while len(children(supervisor.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        slots = children(supervisor.pid)
        time.sleep(1.2)  # every slot is in its loop, one runs the long job, two are idle
        supervisor.kill()
        supervisor.wait()
        statuses = []
        for _slot in slots:
            pid, status = os.waitpid(-1, 0)
            statuses.append([pid, describe(status)])
        print(json.dumps(statuses), flush=True)


if __name__ == "__main__":
    main()
