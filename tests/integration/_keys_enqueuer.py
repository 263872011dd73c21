"""One enqueuing process for the job-key tests: waits for the start signal, then enqueues
through an App, and prints {"ids": [...], "duplicates": [...]}.

    unique   `refresh(42)` (a task declared `unique=Unique()`), `times` times
    job_key  `sync(n)` with job_key="sync:42" and a delay, for n in `values`
"""

from __future__ import annotations

import json
import sys
import time

from workhorse import App, Unique


def main() -> None:
    mode, url, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    app = App("keys", database_url=url)

    @app.task(name="keys.refresh", queue="keys", unique=Unique())
    def refresh(user_id: int) -> None: ...

    @app.task(name="keys.sync", queue="keys")
    def sync(n: int) -> None: ...

    with app.connection():  # connected (and the schema checked) before the start signal
        pass
    print("ready", flush=True)
    start_at = float(sys.stdin.readline())
    while time.time() < start_at:
        time.sleep(0.0005)
    if mode == "unique":
        handles = [refresh.delay(42) for _ in range(options.get("times", 1))]
    else:
        handles = [sync.apply_async((n,), job_key="sync:42", delay=30) for n in options["values"]]
    app.close()
    print(json.dumps({"ids": [h.id for h in handles],
                      "duplicates": [h.duplicate for h in handles]}), flush=True)


if __name__ == "__main__":
    main()
