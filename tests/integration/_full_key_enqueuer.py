"""One enqueuing process for the on_key_full tests: waits for the start signal, then enqueues
`times` jobs of queue "index", key "doc", each in its own transaction, and prints {"ids": [...]}.
"""

from __future__ import annotations

import json
import sys
import time

import psycopg

from workhorse import EnqueueOptions, Queue


def main() -> None:
    _, url, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    with psycopg.connect(url, autocommit=True) as conn:
        queue = Queue(conn)
        print("ready", flush=True)
        start_at = float(sys.stdin.readline())
        while time.time() < start_at:
            time.sleep(0.0005)
        ids = [queue.enqueue("index.doc", {"args": [n], "kwargs": {}},
                             EnqueueOptions(queue="index", concurrency_key="doc"))
               for n in range(options.get("times", 1))]
    print(json.dumps({"ids": ids}), flush=True)


if __name__ == "__main__":
    main()
