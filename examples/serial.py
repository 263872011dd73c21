"""A serial task: `max_active=1` runs one job at a time across the whole fleet, in order.

    python examples/serial.py

`migrate` has no `queue=`, so it gets a queue named after itself ("serial.migrate"), with a limit
of 1. The fleet started below has room for 4 jobs at once (2 slots x concurrency 2), yet the
steps run one after another, in the order they were enqueued.
"""

from __future__ import annotations

import sys
import time

import workhorse

app = workhorse.App("example-serial")


@app.task(max_active=1)
def migrate(step: int) -> dict[str, object]:
    started = time.time()
    time.sleep(0.2)  # something that must never overlap with itself
    return {"step": step, "started": started, "finished": time.time()}


def main() -> int:
    from _fleet import peak, run_fleet, timeline

    print("synced:", app.sync())
    handles = [migrate.delay(step) for step in range(1, 6)]
    print(f"enqueued {len(handles)} jobs of {migrate.name!r} on queue {migrate.queue.name!r}")

    jobs = run_fleet(app, "serial:app", handles, ["--slots", "2", "--concurrency", "2"])

    print("jobs, in the order they started:")
    timeline(jobs, "step {step}")
    ran = sorted((job for job in jobs if job.result), key=lambda job: job.result["started"])
    order = [job.result["step"] for job in ran]
    most = peak((job.result["started"], job.result["finished"]) for job in ran)
    ok = all(job.status == "succeeded" for job in jobs) and most == 1 and order == [1, 2, 3, 4, 5]
    print(f"queue {migrate.queue.name}: at most {most} at once (limit 1); order {order}")
    print("ran serially, in order" if ok else "NOT SERIAL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
