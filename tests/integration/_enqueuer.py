"""One enqueuing process for the idempotency test: waits for the start signal, enqueues one job
with the given idempotency key, and prints {"id": ...}."""

from __future__ import annotations

import json
import sys
import time

import psycopg

from workhorse import EnqueueOptions, Queue


def main() -> None:
    _mode, url, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    with psycopg.connect(url, autocommit=True) as conn:
        print("ready", flush=True)
        start_at = float(sys.stdin.readline())
        while time.time() < start_at:
            time.sleep(0.0005)
        job_id = Queue(conn).enqueue("report", {"args": [], "kwargs": {}}, EnqueueOptions(
            queue="reports", idempotency_key=options["key"]))
    print(json.dumps({"id": job_id}), flush=True)


if __name__ == "__main__":
    main()
