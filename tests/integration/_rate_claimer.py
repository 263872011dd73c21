"""A claimer process for the rate-limit contention tests (see test_rate_limit_contention.py).

Modes (argv: MODE URL OPTIONS-JSON):
- `claim`: claim through the product's claim as a worker does: complete every job at once, and
  when the claim says when the next start is allowed, sleep until then instead of polling.
- `fixed`: the deliberately broken `fixed_window_claim` (a fixed-window counter), which the
  checker must catch.
Each records the database-clock start time of every job it started and prints, at the end, one
JSON line: {"starts": [[id, key, epoch seconds], ...], "claims": n}.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import psycopg

from workhorse import Queue, _ops

FIXED_WINDOW_SQL = """
CREATE TABLE fixed_starts (w timestamptz PRIMARY KEY, n integer NOT NULL);
CREATE FUNCTION fixed_window_claim(p_queue text, p_limit integer, p_n integer,
                                   p_period double precision)
RETURNS TABLE (id bigint, fence bigint, ckey text, started_at timestamptz)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_window timestamptz;
    v_room integer;
BEGIN
    PERFORM pg_advisory_xact_lock(4242);
    v_window := to_timestamp(floor(EXTRACT(epoch FROM clock_timestamp())::float8 / p_period)
                             * p_period);
    v_room := LEAST(p_limit, p_n - COALESCE((SELECT f.n FROM fixed_starts f
                                             WHERE f.w = v_window), 0));
    IF v_room <= 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH pick AS (
        SELECT j.id FROM workhorse.jobs j
        WHERE j.queue = p_queue AND j.status = 'ready'
        ORDER BY j.queue, j.rank, j.id LIMIT v_room
    ), started AS (
        UPDATE workhorse.jobs j
        SET status = 'active', attempts = j.attempts + 1, fence = nextval('workhorse.fence_seq'),
            lease_until = clock_timestamp() + interval '60 seconds', started_at = clock_timestamp()
        FROM pick WHERE j.id = pick.id
        RETURNING j.id, j.fence, j.ckey, j.started_at
    ), counted AS (
        INSERT INTO fixed_starts AS f (w, n) SELECT v_window, count(*) FROM started
        ON CONFLICT (w) DO UPDATE SET n = f.n + excluded.n
    )
    SELECT * FROM started;
END
$$;
"""

REMAINING = "SELECT count(*) FROM workhorse.jobs WHERE queue = %s AND status = 'ready'"


def _ready() -> None:
    print("ready", flush=True)
    start_at = float(sys.stdin.readline())
    while time.time() < start_at:
        time.sleep(0.0005)


def run(mode: str, url: str, o: dict[str, Any]) -> dict[str, Any]:
    queue_name, batch = o["queue"], o.get("batch", 4)
    starts: list[tuple[int, str, float]] = []
    claims = 0
    with psycopg.connect(url, autocommit=True) as conn:
        q = Queue(conn)
        _ready()
        deadline = time.monotonic() + o.get("seconds", 5)
        while time.monotonic() < deadline:
            next_start = None
            if mode == "claim":
                jobs, next_start = _ops.execute(conn, _ops.claim_batch(queue_name, batch, 60))
                got = [(j.id, j.fence, j.concurrency_key or "", j.started_at) for j in jobs]
            else:
                got = conn.execute(
                    "SELECT id, fence, ckey, started_at FROM fixed_window_claim(%s, %s, %s, %s)",
                    (queue_name, batch, o["n"], o["period"]),
                ).fetchall()
            if got:
                claims += 1
                starts += [(job_id, key, at.timestamp()) for job_id, _, key, at in got]
                q.complete_many([(job_id, fence, None) for job_id, fence, _, _ in got])
                continue
            if next_start is not None:
                time.sleep(next_start)
                continue
            row = conn.execute(REMAINING, (queue_name,)).fetchone()
            if row is not None and row[0] == 0:
                break
            time.sleep(0.002)
    return {"starts": starts, "claims": claims}


def main() -> None:
    mode, url, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    print(json.dumps(run(mode, url, options)), flush=True)


if __name__ == "__main__":
    main()
