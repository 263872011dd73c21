"""One OS process of a multi-process test: `python _claimer.py MODE DATABASE_URL OPTIONS_JSON`.

Modes:
- `claim`: claim from one queue in a loop, hold each job 1-5 ms, complete it; between claim and
  complete, report the job to the overlap checker (see `CHECKER_SQL`). With `broken`, claim with
  the deliberately unlocked `broken_claim` function instead of the product's claim; with `meet`
  as well, the first claims of `meet` claimers race for certain (see `BROKEN_CLAIM_SQL`). With
  `reference`, claim through the reference claim (tests/fixtures/reference_claim.sql, 0.1's
  last) as its worker did (its jobs' successes ride on its next claim), beside the product's.
- `flip`: flip the queue's policy between values every few ms until the queue drains (or for
  `seconds`, ending on the first value), logging each change with the server clock taken while
  the sync holds the queue's admission lock.
- `enqueue`: enqueue keyed jobs in small batches for `seconds`. Claimers started with `producers`
  keep going until the queue is empty and the `producers_done` table has a row.
- `install`: install the schema (for the concurrent-install test).

Every mode connects, prints "ready", and waits for a start time on stdin, so that the processes
race for real; at the end it prints one JSON line with what it did.
"""

from __future__ import annotations

import json
import random
import sys
import time
from typing import Any

import psycopg

from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, Queue, _ops

RETENTION = _ops.DEFAULT_RETENTION_JSON
# How long a claimer or flipper goes on at most: generous, since a machine busy with other work
# can take minutes over what takes seconds on an idle one (the queue draining ends it sooner).
MAX_SECONDS = 300

# The checker. `overlap` has one row per scope: '' for the queue, and one per key. A claimer calls
# checker_enter right after its claim committed and checker_exit before it completes, so each job's
# checker interval lies inside its real active interval: the overlap counted here never exceeds
# the real one (no false alarms). Both functions lock the queue row first, then the key row, so
# they cannot deadlock, and the queue row serializes every enter and exit into one order.
CHECKER_SQL = """
CREATE TABLE overlap (scope text PRIMARY KEY, n integer NOT NULL DEFAULT 0,
                      peak integer NOT NULL DEFAULT 0);
CREATE TABLE violations (scope text NOT NULL, n integer NOT NULL, lim integer NOT NULL,
                         at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE policy_log (at timestamptz NOT NULL, max_active integer, per_key integer);
-- A row here tells the claimers that no more jobs are coming (see the `producers` option).
CREATE TABLE producers_done (at timestamptz NOT NULL DEFAULT clock_timestamp());
INSERT INTO overlap (scope) VALUES ('');

CREATE FUNCTION checker_enter(p_keys text[], p_max integer, p_per integer) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v integer;
    k text;
BEGIN
    UPDATE overlap SET n = n + cardinality(p_keys), peak = GREATEST(peak, n + cardinality(p_keys))
    WHERE scope = '' RETURNING n INTO v;
    IF p_max IS NOT NULL AND v > p_max THEN
        INSERT INTO violations (scope, n, lim) VALUES ('', v, p_max);
    END IF;
    FOREACH k IN ARRAY p_keys LOOP
        CONTINUE WHEN k = '';
        INSERT INTO overlap AS o (scope, n, peak) VALUES (k, 1, 1)
        ON CONFLICT (scope) DO UPDATE SET n = o.n + 1, peak = GREATEST(o.peak, o.n + 1)
        RETURNING o.n INTO v;
        IF p_per IS NOT NULL AND v > p_per THEN
            INSERT INTO violations (scope, n, lim) VALUES (k, v, p_per);
        END IF;
    END LOOP;
END
$$;

CREATE FUNCTION checker_exit(p_keys text[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE overlap SET n = n - cardinality(p_keys) WHERE scope = '';
    UPDATE overlap SET n = n - (SELECT count(*) FROM unnest(p_keys) AS k WHERE k = scope)
    WHERE scope = ANY(p_keys) AND scope <> '';
END
$$;
"""

# The pgqueuer #761 race on purpose: count in one snapshot, claim in the next, no lock. Used only
# to prove that the checker can see a violation. So that it races every time, not by luck, the
# first claim of each of `p_meet` claimers waits, between its count and its update, until all of
# them have counted: each announces itself with a session-level advisory lock (class BARRIER),
# which no commit releases, and waits until `p_meet` backends of this database hold one. Every
# one of them counted before any claimed, so all `p_meet` claim at once, past any limit below that.
BARRIER = 0x6272  # the advisory lock class of the handshake (two-key form: no clash with workhorse)
BROKEN_CLAIM_SQL = f"""
CREATE FUNCTION broken_claim(p_queue text, p_max integer, p_per integer, p_meet integer)
RETURNS TABLE (id bigint, fence bigint, ckey text)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_active integer;
    v_saturated text[];
    v_deadline timestamptz := clock_timestamp() + interval '60 seconds';
BEGIN
    SELECT count(*) INTO v_active FROM workhorse.jobs j
    WHERE j.queue = p_queue AND j.status = 'active';
    IF v_active >= p_max THEN
        RETURN;
    END IF;
    IF p_meet > 1 AND NOT EXISTS (
        SELECT 1 FROM pg_locks l WHERE l.pid = pg_backend_pid() AND l.locktype = 'advisory'
          AND l.classid = {BARRIER} AND l.objsubid = 2) THEN
        PERFORM pg_advisory_lock_shared({BARRIER}, 0);
        WHILE (SELECT count(*) FROM pg_locks l
               WHERE l.locktype = 'advisory' AND l.classid = {BARRIER} AND l.objsubid = 2
                 AND l.granted AND l.database = (
                     SELECT oid FROM pg_database WHERE datname = current_database()))
              < p_meet AND clock_timestamp() < v_deadline LOOP
            PERFORM pg_sleep(0.002);
        END LOOP;
    END IF;
    SELECT array_agg(s.ckey) INTO v_saturated FROM (
        SELECT j.ckey FROM workhorse.jobs j WHERE j.queue = p_queue AND j.status = 'active'
        GROUP BY j.ckey HAVING count(*) >= p_per) AS s;
    RETURN QUERY
    WITH pick AS (
        SELECT j.id FROM workhorse.jobs j
        WHERE j.queue = p_queue AND j.status = 'ready'
          AND NOT (j.ckey = ANY(COALESCE(v_saturated, '{{}}')))
        ORDER BY j.queue, j.rank, j.id
        LIMIT 1
        FOR UPDATE SKIP LOCKED
    )
    UPDATE workhorse.jobs j
    SET status = 'active', attempts = j.attempts + 1, fence = nextval('workhorse.fence_seq'),
        lease_until = clock_timestamp() + interval '60 seconds', started_at = clock_timestamp()
    FROM pick WHERE j.id = pick.id
    RETURNING j.id, j.fence, j.ckey;
END
$$;
"""

UNFINISHED = (
    "SELECT EXISTS (SELECT 1 FROM workhorse.jobs WHERE queue = %s"
    " AND status IN ('ready', 'scheduled', 'active'))"
)
# With producers running, an empty queue is not the end: wait for producers_done as well.
UNFINISHED_OR_PRODUCING = (
    "SELECT EXISTS (SELECT 1 FROM workhorse.jobs WHERE queue = %s"
    " AND status IN ('ready', 'scheduled', 'active'))"
    " OR NOT EXISTS (SELECT 1 FROM producers_done)"
)


def _ready() -> None:
    """Tell the parent that this process is connected, then wait for its start signal: a shared
    wall-clock time on stdin, so that every process begins at once."""
    print("ready", flush=True)
    start_at = float(sys.stdin.readline())
    while time.time() < start_at:
        time.sleep(0.0005)


def _await_overlap(conn: psycopg.Connection[Any], meet: int) -> None:
    """Hold the job until the checker's peak reached `meet` (every claimer of the barrier holds a
    job at once), so that no job of the first round ends before the last one starts. The peak
    only grows, so a claimer that looks late still sees it; a deadline keeps a broken run from
    hanging (the test then fails on what the checkers saw)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        row = conn.execute("SELECT peak FROM overlap WHERE scope = ''").fetchone()
        if row is not None and row[0] >= meet:
            return
        time.sleep(0.002)


def _claim(url: str, o: dict[str, Any]) -> dict[str, Any]:
    rng = random.Random()
    queue = o["queue"]
    hold_min, hold_max = o.get("hold_ms", (1, 5))
    batch_min, batch_max = o.get("batch", (1, 3))
    idle = o.get("idle_sleep", 0.002)
    broken = o.get("broken", False)
    check_max, check_per = o.get("check_max"), o.get("check_per")
    finished_query = UNFINISHED_OR_PRODUCING if o.get("producers") else UNFINISHED
    completed: list[int] = []
    riding: list[tuple[int, int]] = []  # reference: recorded by the next claim
    claims = empty = stale = 0
    with psycopg.connect(url, autocommit=True) as conn:
        q = Queue(conn)
        _ready()
        deadline = time.monotonic() + o.get("max_seconds", MAX_SECONDS)
        last_check = 0.0
        while time.monotonic() < deadline:
            if broken:
                rows = conn.execute(
                    "SELECT id, fence, ckey FROM broken_claim(%s, %s, %s, %s)",
                    (queue, o["broken_max"], o["broken_per"], o.get("meet", 1)),
                ).fetchall()
                jobs = [(job_id, fence, ckey) for job_id, fence, ckey in rows]
            elif o.get("reference"):
                rows = conn.execute(
                    "SELECT id, fence, ckey, status FROM workhorse_reference.claim("
                    "%s, %s, %s, %s, %s, %s, NULL, %s)",
                    (queue, rng.randint(batch_min, batch_max), o.get("lease", 60),
                     [job_id for job_id, _ in riding], [fence for _, fence in riding],
                     ["null"] * len(riding), [RETENTION]),
                ).fetchall()
                refused = {(job_id, fence) for job_id, fence, _, status in rows
                           if status is not None and status != "succeeded"}
                stale += len(refused)
                completed.extend(job_id for job_id, fence in riding
                                 if (job_id, fence) not in refused)
                riding = []
                jobs = [(job_id, fence, ckey) for job_id, fence, ckey, status in rows
                        if job_id is not None and status is None]
            else:
                claimed = q.claim(queue, rng.randint(batch_min, batch_max), o.get("lease", 60))
                jobs = [(j.id, j.fence, j.concurrency_key or "") for j in claimed]
            if not jobs and o.get("reference") and riding:
                continue
            if not jobs:
                empty += 1
                now = time.monotonic()
                if now - last_check > 0.05:
                    last_check = now
                    row = conn.execute(finished_query, (queue,)).fetchone()
                    if row is not None and not row[0]:
                        break
                if idle:
                    time.sleep(idle)
                continue
            claims += 1
            keys = [key for _, _, key in jobs]
            conn.execute("SELECT checker_enter(%s, %s, %s)", (keys, check_max, check_per))
            if o.get("meet"):
                _await_overlap(conn, o["meet"])
            time.sleep(rng.uniform(hold_min, hold_max) / 1000)
            conn.execute("SELECT checker_exit(%s)", (keys,))
            if o.get("reference"):
                riding = [(job_id, fence) for job_id, fence, _ in jobs]
                continue
            accepted = q.complete_many([(job_id, fence, None) for job_id, fence, _ in jobs])
            stale += len(jobs) - len(accepted)
            completed.extend(accepted)
    return {"completed": completed, "claims": claims, "empty": empty, "stale": stale}


def _flip(url: str, o: dict[str, Any]) -> dict[str, Any]:
    rng = random.Random()
    queue = o["queue"]
    values = [tuple(v) for v in o["values"]]
    flips = 0
    with psycopg.connect(url) as conn:  # not autocommit: sync and its log row commit together
        q = Queue(conn)
        _ready()
        deadline = time.monotonic() + o.get("max_seconds", MAX_SECONDS)
        # With `seconds`, flip for that long and stop on values[0]; otherwise until the queue
        # drains.
        until = time.monotonic() + o["seconds"] if "seconds" in o else None
        while time.monotonic() < deadline:
            if until is not None and time.monotonic() > until and flips % len(values) == 0:
                break
            max_active, per_key = values[(flips + 1) % len(values)]
            q.sync_concurrency_policies(
                o["namespace"], [ConcurrencyPolicyDefinition(queue, max_active, per_key)],
                prune=False,
            )
            # Still inside the sync's transaction, holding the queue's admission lock: every
            # claim's started_at is either before this or after the commit.
            conn.execute(
                "INSERT INTO policy_log (at, max_active, per_key)"
                " VALUES (clock_timestamp(), %s, %s)", (max_active, per_key),
            )
            conn.commit()
            flips += 1
            time.sleep(rng.uniform(*o.get("pause_ms", (2, 5))) / 1000)
            if until is None and flips % 10 == 0:
                row = conn.execute(UNFINISHED, (queue,)).fetchone()
                conn.commit()
                if row is not None and not row[0]:
                    break
    return {"flips": flips}


def _enqueue(url: str, o: dict[str, Any]) -> dict[str, Any]:
    rng = random.Random()
    ids: list[int] = []
    with psycopg.connect(url, autocommit=True) as conn:
        q = Queue(conn)
        _ready()
        deadline = time.monotonic() + o["seconds"]
        while time.monotonic() < deadline:
            ids += q.enqueue_many(
                [("t", {}, EnqueueOptions(queue=o["queue"],
                                          concurrency_key=f"k{rng.randrange(o['keys'])}"))
                 for _ in range(rng.randint(1, 3))]
            )
            time.sleep(rng.uniform(0, 0.003))
    return {"ids": ids}


def _install(url: str, o: dict[str, Any]) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        _ready()
        Queue(conn).install_schema()
    return {"ok": True}


def main() -> None:
    mode, url, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    run = {"claim": _claim, "flip": _flip, "enqueue": _enqueue, "install": _install}[mode]
    print(json.dumps(run(url, options)), flush=True)


if __name__ == "__main__":
    main()
