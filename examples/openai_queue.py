"""One budget shared by two tasks: both call the same API, which allows 3 requests at once.

    python examples/openai_queue.py

`summarize` is async and `classify` is sync; both name the queue "openai-api", so they share its
limit of 3 across the whole fleet. The fleet started below has room for 8 jobs at once
(2 slots x concurrency 4): the async handlers run on each slot's event loop, the sync ones in its
threads, and together they never exceed 3.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time

import workhorse

app = workhorse.App("example-openai")

openai = app.queue("openai-api", max_active=3)


@app.task(queue=openai)
async def summarize(text: str) -> dict[str, object]:
    started = time.time()
    await asyncio.sleep(0.3)  # await the API
    first_sentence = re.split(r"(?<=[.?!]) ", text)[0]
    return {"output": first_sentence, "started": started, "finished": time.time()}


@app.task(queue=openai)
def classify(text: str) -> dict[str, object]:
    started = time.time()
    time.sleep(0.3)  # a blocking client call
    label = "question" if text.endswith("?") else "statement"
    return {"output": label, "started": started, "finished": time.time()}


TEXTS = [
    "Queues are lists. Workers take from them.",
    "Is a limit per worker a limit at all?",
    "PostgreSQL counts the active jobs. Each claim checks.",
    "Can two tasks share one budget?",
    "Leases expire. Fences reject stale results.",
]


def main() -> int:
    from _fleet import peak, run_fleet, timeline

    print("synced:", app.sync())
    handles = [summarize.delay(text) for text in TEXTS] + [classify.delay(text) for text in TEXTS]
    print(f"enqueued {len(handles)} jobs of {summarize.name!r} and {classify.name!r} "
          f"on queue {openai.name!r}")

    jobs = run_fleet(app, "openai_queue:app", handles, ["--slots", "2", "--concurrency", "4"])

    print("jobs, in the order they started:")
    timeline(jobs, "{task:<24} -> {output}")
    most = peak((job.result["started"], job.result["finished"]) for job in jobs if job.result)
    ok = all(job.status == "succeeded" for job in jobs) and most <= 3
    print(f"queue openai-api: at most {most} at once across both tasks (limit 3)")
    print("limit held" if ok else "LIMIT EXCEEDED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
