"""Multi-tenant mail: a queue-wide limit plus a per-tenant limit, held across a worker fleet.

    python examples/mail.py

The mail provider accepts at most 4 connections from us, and no tenant may hold more than 2 of
them. The fleet started below has room for 8 jobs at once (2 slots x concurrency 4), and one
tenant queued most of the mail first. Yet the other tenants do not wait for its backlog, and
neither limit is ever exceeded.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict

import workhorse

app = workhorse.App("example-mail")


@app.task(queue="mail", max_active=4, max_active_per_key=2,
          concurrency_key=lambda message: message["tenant"])
def send(message: dict[str, str]) -> dict[str, object]:
    started = time.time()
    time.sleep(0.3)  # talk to the mail provider
    return {"to": message["to"], "started": started, "finished": time.time()}


def main() -> int:
    from _fleet import peak, run_fleet, timeline

    print("synced:", app.sync())
    messages = (
        [{"tenant": "acme", "to": f"user{n}@acme.example"} for n in range(8)]
        + [{"tenant": "globex", "to": f"user{n}@globex.example"} for n in range(3)]
        + [{"tenant": "initech", "to": "peter@initech.example"}]
    )
    handles = [send.delay(message) for message in messages]
    print(f"enqueued {len(handles)} jobs of {send.name!r} on queue {send.queue.name!r}")

    jobs = run_fleet(app, "mail:app", handles, ["--slots", "2", "--concurrency", "4"])

    print("jobs, in the order they started:")
    timeline(jobs, "tenant={key:<8} {to}")
    by_tenant: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for job in jobs:
        if job.result:
            by_tenant[job.concurrency_key or ""].append((job.result["started"],
                                                         job.result["finished"]))
    everyone = [interval for intervals in by_tenant.values() for interval in intervals]
    ok = all(job.status == "succeeded" for job in jobs) and peak(everyone) <= 4
    print(f"queue mail: at most {peak(everyone)} at once (limit 4)")
    for tenant, intervals in sorted(by_tenant.items()):
        print(f"  tenant {tenant}: at most {peak(intervals)} at once (limit 2)")
        ok = ok and peak(intervals) <= 2
    print("limits held" if ok else "LIMIT EXCEEDED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
