"""Guard the plans: no statement that the worker-side calls run may scan `jobs` sequentially.

The claim is PL/pgSQL that calls more functions, so EXPLAIN on the call would show nothing useful.
Instead `auto_explain` logs the plan of every nested statement as it really runs (the custom plans
the functions force, with real parameters), at NOTICE level so that the client receives them.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, JobStatus, Queue, _ops, _sql

ERROR = {"type": "E", "message": "m", "traceback": None}
Plans = Callable[[Callable[[], Any]], list[str]]


@pytest.fixture
def explained(database_url: str) -> Iterator[tuple[Queue, Plans]]:
    """A Queue, and `plans(action)`: the plan text of every statement `action` ran."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        notices: list[str] = []
        conn.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
        conn.execute("LOAD 'auto_explain'")
        conn.execute("SET auto_explain.log_nested_statements = on")
        conn.execute("SET auto_explain.log_level = 'notice'")

        def plans(action: Callable[[], Any]) -> list[str]:
            notices.clear()
            conn.execute("SET auto_explain.log_min_duration = 0")
            try:
                action()
            finally:
                conn.execute("SET auto_explain.log_min_duration = -1")
            return [text for text in notices if "Query Text" in text]

        yield Queue(conn), plans


def _fill(q: Queue) -> None:
    """20k ready jobs over three queues (one per admission path), plus active, expired,
    scheduled and finished ones, then ANALYZE."""
    q.sync_concurrency_policies("plans", [
        ConcurrencyPolicyDefinition("per-key", 50, 1),
        ConcurrencyPolicyDefinition("queue-only", 5),
    ])
    for queue, n, keys in (("per-key", 10_000, 1000), ("queue-only", 5_000, 0),
                           ("free", 5_000, 0)):
        for start in range(0, n, 2500):
            q.enqueue_many([
                ("t", {"n": i}, EnqueueOptions(queue=queue, priority=i % 3,
                                               concurrency_key=f"k{i % keys}" if keys else None))
                for i in range(start, min(start + 2500, n))
            ])
        q.enqueue_many([("t", {}, EnqueueOptions(queue=queue, delay=3600))] * 200)
        q.enqueue_many([("t", {}, EnqueueOptions(queue=queue, delay=0.05, concurrency_key=key))
                        for key in ("k1", "k2", None) * 100])  # due by the time we claim
    for queue in ("per-key", "queue-only", "free"):
        for job in q.claim(queue, 100, 30)[:50]:
            q.complete(job.id, job.fence)
        q.claim(queue, 3, 0.05)  # leases that expire
    q.conn.execute("ANALYZE workhorse.jobs")
    q.conn.execute("ANALYZE workhorse.key_heads")
    time.sleep(0.1)


def _unbounded_index_scans(text: str) -> list[str]:
    """The scans of jobs_pkey with no Index Cond: they read every job (a generic plan of
    `UPDATE jobs ... FROM cte` does that as a merge join, at every claim). A partial index read
    whole under a LIMIT is how the dashboard's windows work, so only the primary key counts."""
    lines = text.splitlines()
    found = []
    for n, line in enumerate(lines):
        if not re.search(r"Index (Only )?Scan using jobs_pkey on jobs\b", line):
            continue
        depth = len(line) - len(line.lstrip(" "))
        details = []
        for after in lines[n + 1:]:
            if "->" in after or len(after) - len(after.lstrip(" ")) <= depth:
                break
            details.append(after)
        parent = next((above for above in reversed(lines[:n])
                       if len(above) - len(above.lstrip(" ")) < depth), "")
        if "Limit" in parent:
            continue  # min(id) or max(id): one end of the index, then it stops
        if not any("Index Cond" in d for d in details):
            found.append(line.strip())
    return found


def _check(texts: list[str], *, expect: tuple[str, ...] = ()) -> None:
    assert texts, "auto_explain logged nothing: the guard would be vacuous"
    offenders = [text for text in texts if "Seq Scan on jobs" in text]
    assert not offenders, "sequential scan on jobs:\n\n" + "\n\n".join(offenders)
    unbounded = [text for text in texts if _unbounded_index_scans(text)]
    assert not unbounded, "a whole index of jobs read:\n\n" + "\n\n".join(unbounded)
    joined = "\n".join(texts)
    for index in expect:
        assert index in joined, f"{index} not used; plans:\n{joined}"


def test_claim_plans_use_indexes_on_every_path(explained: Any) -> None:
    q, plans = explained
    _fill(q)
    for queue, expect in (
        ("per-key", ("jobs_ready_key_idx", "key_heads_order_idx", "jobs_active_idx")),
        ("queue-only", ("jobs_ready_idx", "jobs_active_idx")),
        ("free", ("jobs_ready_idx",)),
    ):
        texts = plans(lambda queue=queue: q.claim(queue, 10, 30))
        _check(texts, expect=expect)


def test_outcome_and_lease_plans_use_indexes(explained: Any) -> None:
    q, plans = explained
    _fill(q)
    jobs = q.claim("per-key", 3, 30)
    assert len(jobs) == 3
    _check(plans(lambda: q.heartbeat([(j.id, j.fence, 30.0) for j in jobs])))
    _check(plans(lambda: q.complete(jobs[0].id, jobs[0].fence, {"ok": 1})))
    _check(plans(lambda: q.fail(jobs[1].id, jobs[1].fence, ERROR,
                                retry_at=datetime.now(UTC) + timedelta(seconds=1))))
    _check(plans(lambda: q.fail(jobs[2].id, jobs[2].fence, ERROR)))
    _check(plans(lambda: q.enqueue("t", {}, EnqueueOptions(queue="per-key", concurrency_key="k1"))))

    # Batches, as a worker sends them.
    batch = q.claim("free", 200, 30)
    assert len(batch) == 200
    _check(plans(lambda: q.heartbeat([(j.id, j.fence, 30.0) for j in batch])))
    _check(plans(lambda: q.complete_many([(j.id, j.fence, None) for j in batch])))
    _check(plans(lambda: q.claim("free", 500, 30)))


def test_plans_made_on_an_empty_table_do_not_stick(explained: Any) -> None:
    """A session that claimed while `jobs` was empty (so that PL/pgSQL could cache generic plans
    made for zero rows) must still use the indexes once the table is full."""
    q, plans = explained
    q.sync_concurrency_policies("plans", [
        ConcurrencyPolicyDefinition("per-key", 50, 1),
        ConcurrencyPolicyDefinition("queue-only", 5),
    ])
    q.conn.execute("ANALYZE workhorse.jobs")
    for _ in range(8):  # past the five custom plans after which a generic one may be chosen
        for queue in ("per-key", "queue-only", "free"):
            q.claim(queue, 10, 30)
    _fill(q)
    for queue in ("per-key", "queue-only", "free"):
        _check(plans(lambda queue=queue: q.claim(queue, 10, 30)))


def test_rate_limited_claim_plans_use_indexes(explained: Any) -> None:
    """The claim with rate limits in force: the start buckets and the heads are read through
    their indexes, behind a key whose starts are used up."""
    q, plans = explained
    _fill(q)
    q.sync_concurrency_policies("plans", [
        ConcurrencyPolicyDefinition("rated", 40, None, rate_limit="1000/s",
                                    rate_limit_per_key="3/h"),
        ConcurrencyPolicyDefinition("queue-rated", None, None, rate_limit="5/h"),
    ], prune=False)
    for queue, keys in (("rated", ("hot", "hot", "hot", "hot", "cold", None)), ("queue-rated",
                                                                                (None,) * 10)):
        q.enqueue_many([("t", {}, EnqueueOptions(queue=queue, concurrency_key=k))
                        for k in keys * 200])
    q.conn.execute("ANALYZE workhorse.jobs")
    q.claim("rated", 10, 30)  # "hot" has used its 3 starts
    q.claim("queue-rated", 10, 30)  # the queue has used its 5
    for queue, expect in (
        ("rated", ("rate_starts_pkey", "key_heads_order_idx", "jobs_ready_key_idx")),
        ("queue-rated", ("rate_starts_pkey",)),
    ):
        _check(plans(lambda queue=queue: q.claim(queue, 10, 30)), expect=expect)


def _history_rows_read(texts: list[str]) -> int:
    """The rows that the plans (EXPLAIN ANALYZE output) read through the primary key of `jobs`:
    those each such scan returned plus those its filter threw away, over every loop."""
    total = 0
    for text in texts:
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if not re.search(r"Scan( Backward)? using jobs_pkey on jobs", line) or (
                    "(never executed)" in line):
                continue
            # PostgreSQL 18 prints average rows with two decimals ("rows=1.00").
            actual = re.search(r"actual time=\S+ rows=([\d.]+) loops=(\d+)", line)
            assert actual, line
            removed = 0
            for detail in lines[i + 1:]:
                if "->" in detail:
                    break
                found = re.search(r"Rows Removed by Filter: (\d+)", detail)
                removed += int(found.group(1)) if found else 0
            total += round((float(actual.group(1)) + removed) * int(actual.group(2)))
    return total


def test_the_dashboards_job_list_reads_no_more_than_its_window_of_history(explained: Any) -> None:
    """The dashboard's job list on a history much longer than its search window, under the
    filters an operator picks (a key alone, with its queue, with each status, with a task; a
    task alone; filters that match nothing): no sequential scan, no walk of the primary key
    beyond the window, and the older live and failed jobs read through their partial indexes."""
    pytest.importorskip("jinja2")
    from workhorse.dashboard import _data as data

    q, plans = explained
    _fill(q)
    # Below the window: the ready backlog of _fill, and failures of one task; then a history
    # of other tasks that the planner, not knowing the two apart, expects the failures among.
    q.conn.execute(
        "INSERT INTO workhorse.jobs (task, queue, ckey, payload, status, finished_at)"
        " SELECT 'flaky', 'per-key', 'k' || (g % 1000), '{}', 'failed', now()"
        " FROM generate_series(1, 2000) g")
    q.conn.execute(
        "INSERT INTO workhorse.jobs (task, queue, ckey, payload, status, finished_at)"
        " SELECT 't' || (g % 20), 'per-key', 'k' || (g % 1000), '{}', 'succeeded', now()"
        " FROM generate_series(1, 60000) g")
    q.conn.execute("ANALYZE workhorse.jobs")
    window = 5_000
    filters: list[dict[str, Any]] = [
        {"key": "k7"}, {"queue": "per-key", "key": "k7"}, {"key": "no-such-key"},
        {"key": "k7", "task": "t7"}, {"task": "t7"}, {"task": "no.such.task"},
        {"queue": "free", "status": "failed"}, {"queue": "no-such-queue"},
        {"status": "failed", "task": "t7"}, {"status": "ready", "task": "t7"},
        # Substrings (issue #32): the queue's resolved to known names first, for the indexes.
        {"queue": "PER-"}, {"queue": " per ", "key": "k7"}, {"task": "T7", "status": "failed"},
        {"queue": "ee", "status": "ready"},
        *({"status": status.value, "key": "k7"} for status in JobStatus),
        *({"queue": "per-key", "status": status.value, "key": "k7"} for status in JobStatus),
    ]
    q.conn.execute("SET auto_explain.log_analyze = on")
    # What is guarded is that an index serves every part, not the planner's pick on this small
    # table: where most of a queue's rows match, PostgreSQL 15 may rightly prefer to scan 10,000
    # of them in order. With sequential scans discouraged, a part no index can serve still shows
    # one, and fails.
    q.conn.execute("SET enable_seqscan = off")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_ops, "BROWSE_WINDOW", window)
        for chosen in filters:
            texts = plans(lambda chosen=chosen: data.jobs(q.conn, data.JobFilter(**chosen)))
            _check(texts)
            read = _history_rows_read(texts)
            # The window, the page's fetch by id, and the two ends of the key.
            assert read <= window + data.JOBS_PAGE + 2, (
                f"{chosen}: {read} rows read through the primary key:\n\n" + "\n\n".join(texts))
        # Behind the window, a key's ready backlog and failures come from their own indexes.
        texts = plans(lambda: data.jobs(q.conn, data.JobFilter(queue="per-key", key="k7")))
        _check(texts, expect=("jobs_ready_key_idx", "jobs_held_failed_idx"))
        texts = plans(lambda: data.jobs(q.conn, data.JobFilter(queue="PER", key="k7")))
        _check(texts, expect=("jobs_ready_key_idx", "jobs_held_failed_idx"))


def _reading_every_active_job(texts: list[str]) -> list[str]:
    """The plans of statements that update jobs named by (id, fence) and read them through
    jobs_active_idx: a scan of every active job of every queue, where a lookup by id would do."""
    return [text for text in texts
            if re.search(r"j\.fence = (b\.fence|p_fence)", text)
            and "using jobs_active_idx" in text]


def test_outcomes_look_jobs_up_by_id_however_few_active_jobs_the_statistics_show(
    explained: Any,
) -> None:
    """After an ANALYZE of a backlog the statistics say almost no job is active. A statement
    that updates jobs by (id, fence) and also says `status = 'active'` then implied
    jobs_active_idx's predicate, and the planner read that whole index (2,000 active jobs here)
    for a batch of 8. The functions the worker calls look the batch up by id; the checker
    catches a copy of each that says `status = 'active'` instead."""
    q, plans = explained
    for _ in range(3):
        q.enqueue_many([("t", {}, EnqueueOptions(queue="free"))] * 1000)
    q.conn.execute("VACUUM ANALYZE workhorse.jobs")
    jobs = q.claim("free", 2000, 30)
    assert len(jobs) == 2000

    def rows(sql: str, params: tuple[Any, ...]) -> Any:
        return q.conn.execute(sql, params).fetchall()

    ok = {
        "complete": lambda: q.complete_many([(j.id, j.fence, None) for j in jobs[:8]]),
        "complete and claim": lambda: _ops.execute(q.conn, _ops.complete_and_claim(
            "free", 1, 30, [(j.id, j.fence, "null", _ops.DEFAULT_RETENTION_JSON)
                            for j in jobs[8:16]])),
        "heartbeat": lambda: q.heartbeat([(j.id, j.fence, 30.0) for j in jobs[16:24]]),
        "fail": lambda: q.fail(jobs[24].id, jobs[24].fence, ERROR),
        "release": lambda: _ops.execute(q.conn, _ops.release(
            [(j.id, j.fence) for j in jobs[25:33]])),
        "snooze": lambda: _ops.execute(q.conn, _ops.snooze(
            jobs[33].id, jobs[33].fence, 60.0, _ops.DEFAULT_RETENTION_JSON)),
    }
    for name, action in ok.items():
        texts = plans(action)
        assert any(re.search(r"j\.fence = (b\.fence|p_fence)", t) for t in texts), name
        bad = _reading_every_active_job(texts)
        assert not bad, name + ":\n" + "\n\n".join(bad)

    # The checker catches copies that say `status = 'active'`, on the same database.
    for base in ("_record_successes", "heartbeat", "fail"):
        q.conn.execute(_broken_copy(base))
    later = jobs[40:48]
    ids, fences = [j.id for j in later], [j.fence for j in later]
    old = {
        "record successes": lambda: rows(
            "SELECT * FROM workhorse._record_successes_broken(%s, %s, %s, NULL, %s)",
            (ids, fences, ["null"] * 8, [_ops.DEFAULT_RETENTION_JSON])),
        "heartbeat": lambda: rows(
            "SELECT * FROM workhorse.heartbeat_broken(%s, %s, %s)", (ids, fences, [30.0] * 8)),
        "fail": lambda: rows(
            "SELECT workhorse.fail_broken(%s, %s, %s, NULL, %s)",
            (ids[0], fences[0], '{"type": "E"}', _ops.DEFAULT_RETENTION_JSON)),
    }
    for name, action in old.items():
        assert _reading_every_active_job(plans(action)), f"{name}: the checker saw nothing"


def _broken_copy(base: str) -> str:
    """The function `base` as `<base>_broken`, looking jobs up with `status = 'active'`."""
    name = _sql.function_name(base)
    text = _sql.function_files()[name].replace(f"workhorse.{name}(", f"workhorse.{base}_broken(")
    assert "j.status IN ('active', '')" in text, name
    return text.replace("j.status IN ('active', '')", "j.status = 'active'")


def _heads_walked(texts: list[str]) -> list[str]:
    """Plans that walk every head of the queue and join each to a list of keys: an index scan
    on key_heads_pkey that names the queue alone, with no test of the key on the scan itself
    (not in its Index Cond, as PG 18 plans it, nor in its Filter, as PG 15 does when the
    statistics say the queue has one head), so each head is matched against the list later."""
    found = []
    for text in texts:
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if re.search(r"Index (Only )?Scan using key_heads_pkey on key_heads", line):
                own = []
                for nxt in lines[i + 1:i + 4]:
                    if "->" in nxt:
                        break
                    own.append(nxt)
                if not any("ckey" in part for part in own
                           if "Index Cond" in part or "Filter" in part):
                    found.append(text)
                    break
    return found


def test_a_claim_moves_key_heads_by_key_not_by_walking_the_queues_heads(explained: Any) -> None:
    """0.1 once moved the heads it touched through a join that its planner, estimating one
    moved head, ran as a walk over every head of the queue (300 here) matched against the moved
    heads, a cost that grew with the queue's keys. The product's claim looks them up by key; the
    checker catches a copy that moves them through a hash join, on the same queue."""
    q, plans = explained
    q.sync_concurrency_policies("plans", [ConcurrencyPolicyDefinition("heads", 64, 4)])
    q.enqueue_many([("t", {}, EnqueueOptions(queue="heads", concurrency_key=f"k{i % 300}"))
                    for i in range(3000)])
    q.conn.execute("ANALYZE workhorse.jobs")
    q.conn.execute("ANALYZE workhorse.key_heads")

    texts = plans(lambda: _ops.execute(q.conn, _ops.complete_and_claim("heads", 32, 30, [])))
    assert any(re.search(r"(Insert|Update) on key_heads", text) for text in texts), \
        "no head moved: vacuous"
    assert not _heads_walked(texts), "\n\n".join(_heads_walked(texts))

    claim = _sql.function_name("claim")
    text = _sql.function_files()[claim]
    upsert = """INSERT INTO workhorse.key_heads AS kh
                    (queue, ckey, head_rank, head_id, budget, budget_for)
                SELECT p_queue, m.ckey, m.rank, m.id,
                       (SELECT j.budget FROM workhorse.jobs j WHERE j.id = m.id), m.id
                FROM unnest(v_move_keys, v_move_ranks, v_move_ids) AS m(ckey, rank, id)
                WHERE m.id IS NOT NULL
                ON CONFLICT (queue, ckey) DO UPDATE
                    SET head_rank = excluded.head_rank, head_id = excluded.head_id,
                        budget = excluded.budget, budget_for = excluded.budget_for"""
    joined = """UPDATE workhorse.key_heads kh SET head_rank = m.rank, head_id = m.id
                FROM unnest(v_move_keys, v_move_ranks, v_move_ids) AS m(ckey, rank, id)
                WHERE kh.queue = p_queue AND kh.ckey = m.ckey AND m.id IS NOT NULL"""
    assert text.count(upsert) == 1
    q.conn.execute(
        text.replace(f"workhorse.{claim}(", "workhorse.claim_broken(", 1)
        .replace("SET enable_bitmapscan = off",
                 "SET enable_bitmapscan = off\nSET enable_nestloop = off", 1)
        .replace(upsert, joined))
    old = plans(lambda: q.conn.execute(
        "SELECT count(*) FROM workhorse.claim_broken"
        "('heads', 32, 30, NULL, NULL, NULL, NULL, NULL)"))
    assert _heads_walked(old), "the checker saw nothing in a claim that walks the heads"


def test_keyed_enqueue_plans_use_indexes(explained: Any) -> None:
    """Unique and job_key enqueues (the keyed enqueue function's generic plans), single and in
    batches, with holders to find, update and take over: every statement walks an index, never
    the table."""
    from workhorse import Unique

    q, plans = explained
    _fill(q)
    unique = EnqueueOptions(queue="free", unique=Unique())
    keyed = [EnqueueOptions(queue="per-key", concurrency_key="k1", job_key=f"j{i}")
             for i in range(1000)]
    q.enqueue_many([("t", {"n": i}, unique) for i in range(1000)])
    q.enqueue_many([("t", {}, options) for options in keyed])
    q.conn.execute("ANALYZE workhorse.jobs")
    _check(plans(lambda: q.enqueue("t", {"n": 1}, unique)),
           expect=("jobs_unique_key_idx", "jobs_pkey"))
    _check(plans(lambda: q.enqueue_many([("t", {"n": i}, unique) for i in range(500, 1500)])))
    _check(plans(lambda: q.enqueue("t", {}, keyed[0])), expect=("jobs_job_key_idx",))
    _check(plans(lambda: q.enqueue_many([("t", {}, options) for options in keyed])))
    taken = q.claim("per-key", 1, 30)
    assert taken
    _check(plans(lambda: q.enqueue_many([("t", {}, options) for options in keyed[:10]])))
    _check(plans(lambda: q.enqueue_many([("t", {"i": 1}, EnqueueOptions(
        queue="free", idempotency_key=f"i{i}")) for i in range(100)])))


def test_fair_and_costed_claim_plans_use_indexes(explained: Any) -> None:
    """The claim in units (fairness="key", and a FIFO queue with costs): every statement of the
    choice reads an index, behind a backlog of 1,000 keys and active jobs of many keys."""
    q, plans = explained
    q.sync_concurrency_policies("plans", [
        ConcurrencyPolicyDefinition("fair", 60, fairness="key"),
        ConcurrencyPolicyDefinition("fair-per-key", 60, 4, fairness="key"),
        ConcurrencyPolicyDefinition("costed", 20),
    ])
    for queue, keys in (("fair", 1000), ("fair-per-key", 1000), ("costed", 0)):
        for start in range(0, 6000, 2000):
            q.enqueue_many([
                ("t", {}, EnqueueOptions(queue=queue, priority=i % 2, cost=1 + i % 3,
                                         weight=1 + i % 2,
                                         concurrency_key=f"k{i % keys}" if keys else None))
                for i in range(start, start + 2000)])
        for job in q.claim(queue, 20, 30)[:5]:
            q.complete(job.id, job.fence)
        q.claim(queue, 2, 0.05)  # leases that expire
    q.conn.execute("ANALYZE workhorse.jobs")
    q.conn.execute("ANALYZE workhorse.key_heads")
    time.sleep(0.1)
    for queue, expect in (
        ("fair", ("jobs_ready_key_idx", "key_heads_order_idx", "jobs_active_idx")),
        ("fair-per-key", ("jobs_ready_key_idx", "key_heads_order_idx", "jobs_active_idx")),
        ("costed", ("jobs_ready_idx", "jobs_active_idx")),
    ):
        texts = plans(lambda queue=queue: q.claim(queue, 10, 30))
        _check(texts, expect=expect)


def test_claims_that_pass_over_another_apps_jobs_use_indexes(explained: Any) -> None:
    """With another app's jobs in the queue the claim takes its filtered paths (issue #24 item
    6); PostgreSQL 18 once planned the head's task test, written as EXISTS, as a hash over every
    row of jobs. Expired leases of both apps are there too."""
    q, plans = explained
    _fill(q)
    for queue, keys in (("per-key", 5), ("queue-only", 0), ("free", 0)):
        q.enqueue_many([("other.app", {}, EnqueueOptions(
            queue=queue, priority=3, concurrency_key=f"k{i % keys}" if keys else None))
            for i in range(300)])
        mine = _ops.execute(q.conn, _ops.claim_batch(queue, 2, 0.05, ["other.app"]))[0]
        assert mine, "no lease of the other app to expire: vacuous"
    q.conn.execute("ANALYZE workhorse.jobs")
    time.sleep(0.1)
    for queue in ("per-key", "queue-only", "free"):
        texts = plans(lambda queue=queue: _ops.execute(
            q.conn, _ops.claim_batch(queue, 10, 30, ["t"])))
        _check(texts)
        assert any("jobs_ready_task_idx" in text for text in texts) or queue == "per-key", \
            "\n".join(texts)


def test_the_unbounded_index_scan_check_can_fail() -> None:
    """The plan of the activation a claim prototype had (issue #40, docs/architecture.md
    "Background reads"): a merge join reading all of jobs_pkey."""
    plan = """Query Text: WITH ready AS (...) UPDATE workhorse.jobs j ... FROM ready r
Update on jobs j_1  (cost=496.81..6502.60 rows=6000 width=98)
  ->  Merge Join  (cost=496.81..6502.60 rows=6000 width=98)
        Merge Cond: (j_1.id = r.id)
        ->  Index Scan using jobs_pkey on jobs j_1  (cost=0.29..5676.08 rows=60000 width=18)
        ->  Sort  (cost=496.52..511.52 rows=6000 width=40)
              ->  CTE Scan on ready r  (cost=0.00..120.00 rows=6000 width=40)"""
    assert _unbounded_index_scans(plan) == [
        "->  Index Scan using jobs_pkey on jobs j_1  (cost=0.29..5676.08 rows=60000 width=18)"]
    bounded = plan.replace("rows=60000 width=18)", "rows=60000 width=18)\n"
                           "              Index Cond: (id = ANY ($1))")
    assert _unbounded_index_scans(bounded) == []
    one_end = """Query Text: SELECT min(id), max(id) FROM workhorse.jobs
Result  (cost=0.68..0.69 rows=1 width=16)
  InitPlan 1
    ->  Limit  (cost=0.29..0.34 rows=1 width=8)
          ->  Index Only Scan using jobs_pkey on jobs  (cost=0.29..4136.78 rows=83500 width=8)
                Heap Fetches: 1"""
    assert _unbounded_index_scans(one_end) == []


# PostgreSQL's default jit_above_cost: a plan estimated above it is JIT-compiled at every run.
JIT_ABOVE_COST = 100_000.0


def test_health_is_planned_below_the_jit_threshold_on_tables_never_analyzed(
    explained: Any,
) -> None:
    """Health is read by the dashboard, `workhorse health` and every supervisor whose gauges a
    metrics SDK collects. On small tables never analyzed, the planner assumes a thousand rows
    each; budget_health's plan was then estimated at 414,000, above jit_above_cost, and every
    read spent 60-100 ms compiling (docs/architecture.md "Background reads")."""
    q, plans = explained
    q.sync_concurrency_policies("plans", [ConcurrencyPolicyDefinition("queue-only", 5)])
    q.enqueue_many([("t", {}, EnqueueOptions(queue="queue-only"))] * 20)
    texts = plans(q.health)
    assert len(texts) >= 4, texts  # policies, depth, waiting members, budgets at least
    costs = []
    for text in texts:
        match = re.search(r"\(cost=[0-9.]+\.\.([0-9.]+) rows", text)
        assert match, text
        costs.append((float(match.group(1)), text.splitlines()[1][:100]))
    over = [(cost, query) for cost, query in costs if cost >= JIT_ABOVE_COST]
    assert not over, over


def test_durable_execution_plans_use_indexes(explained: Any) -> None:
    """A step's record, a suspension, a signal, a wait, children and their parent's wake-up, and
    the claim's timer probe look jobs up by index (docs/design.md "Durable execution")."""
    q, plans = explained
    _fill(q)
    conn = q.conn

    def run(operation: Any) -> Any:
        return _ops.execute(conn, operation)

    # Children of other parents, as a database that has used step.child for a while holds:
    # a parent's children are then found by their parent, not by reading every child.
    conn.execute("UPDATE workhorse.jobs SET parent_id = 10000000 + id % 500, parent_step = 'x'"
                 " WHERE id IN (SELECT id FROM workhorse.jobs WHERE queue = 'per-key'"
                 " ORDER BY id LIMIT 3000)")
    conn.execute("ANALYZE workhorse.jobs")
    parent, sleeper, waiter = q.claim("free", 3, 30)
    _check(plans(lambda: run(_ops.record_step(parent.id, parent.fence, "a", "run", 1))))
    _check(plans(lambda: run(_ops.job_steps(parent.id))))
    # Children: enqueued, adopted, the parent suspended on them; one child ends.
    kids = q.enqueue_many([("t", {}, EnqueueOptions(queue="kids"))] * 2)
    _check(plans(lambda: run(_ops.adopt_children(parent.id, parent.fence, "kids", kids))))
    _check(plans(lambda: run(_ops.suspend(parent.id, parent.fence, "kids", "children",
                                          "children", None, None, "{}"))),
           expect=("jobs_parent_idx",))
    _check(plans(lambda: run(_ops.job_children(parent.id))), expect=("jobs_parent_idx",))
    # A sleep due at once, and a wait for a signal.
    due = datetime.now(UTC) + timedelta(seconds=0.05)
    _check(plans(lambda: run(_ops.suspend(sleeper.id, sleeper.fence, "nap", "sleep", "sleep",
                                          due, None, "{}"))))
    _check(plans(lambda: run(_ops.wait_signal(waiter.id, waiter.fence, "w", "go"))))
    _check(plans(lambda: run(_ops.suspend(waiter.id, waiter.fence, "w", "wait", "signal", None,
                                          "go", "{}"))))
    _check(plans(lambda: run(_ops.signal(waiter.id, "go", {"n": 1}, "k1"))))
    conn.execute("ANALYZE workhorse.jobs")
    time.sleep(0.1)
    # The claim wakes the due sleeper; a child's success wakes its parent (the last child:
    # the children's own claim and completion).
    texts = plans(lambda: q.claim("free", 500, 30))
    _check(texts, expect=("jobs_suspended_idx",))
    first, second = q.claim("kids", 10, 30)
    q.complete(first.id, first.fence)
    _check(plans(lambda: q.complete(second.id, second.fence)),
           expect=("jobs_child_idx", "jobs_parent_idx"))
    assert q.get_job(parent.id).status == JobStatus.READY  # type: ignore[union-attr]
    # A parent's cancel finds its children by index.
    _check(plans(lambda: q.cancel_jobs([parent.id])), expect=("jobs_parent_idx",))


# ---- the unknown-task probe without statistics --------------------------------------------------

UNKNOWN_READY = _sql.function_name("_unknown_ready")
LATERAL_GAP_PROBE = """                CROSS JOIN LATERAL (
                    SELECT 1 FROM workhorse.jobs j
                    WHERE j.queue = p_queue AND j.status = 'ready'
                      AND j.task > v_tasks[g.i] AND j.task < v_tasks[g.i + 1]
                    LIMIT 1) AS probe
                WHERE g.i < cardinality(v_tasks))"""
SEMI_JOIN_GAP_PROBE = """                WHERE g.i < cardinality(v_tasks) AND EXISTS (
                    SELECT 1 FROM workhorse.jobs j
                    WHERE j.queue = p_queue AND j.status = 'ready'
                      AND j.task > v_tasks[g.i] AND j.task < v_tasks[g.i + 1]))"""


def _probe_rows_read(conn: psycopg.Connection[Any]) -> list[int]:
    """The rows each scan of `jobs` returned in the probe for another app's ready jobs of a
    queue whose 20,000 ready jobs are all of a declared task, on a table never analyzed, under
    the claim's settings (generic plans, no sequential or bitmap scans)."""
    notices: list[str] = []
    conn.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
    conn.execute("LOAD 'auto_explain'")
    for setting in ("auto_explain.log_nested_statements = on", "auto_explain.log_analyze = on",
                    "auto_explain.log_level = 'notice'", "enable_seqscan = off",
                    "enable_bitmapscan = off", "plan_cache_mode = force_generic_plan",
                    "auto_explain.log_min_duration = 0"):
        conn.execute(f"SET {setting}")
    row = conn.execute(f"SELECT workhorse.{UNKNOWN_READY}('busy', ARRAY['a', 't', 'x', 'z'],"
                       " false, now())").fetchone()
    conn.execute("SET auto_explain.log_min_duration = -1")
    assert row == (False,)
    probe = next(text for text in notices if "generate_subscripts" in text and "Query Text" in text)
    return [int(n) for n in re.findall(r"on jobs \w+ .*?actual time=[\d.]+\.\.[\d.]+ rows=(\d+)",
                                       probe)]


def _never_analyzed_backlog(conn: psycopg.Connection[Any]) -> None:
    q = Queue(conn)
    for start in range(0, 20_000, 5000):
        q.enqueue_many([("t", {"n": i}, EnqueueOptions(queue="busy"))
                        for i in range(start, start + 5000)])
    row = conn.execute("SELECT last_analyze, last_autoanalyze FROM pg_stat_user_tables"
                       " WHERE relid = 'workhorse.jobs'::regclass").fetchone()
    assert row == (None, None)


def test_the_unknown_task_probe_reads_no_declared_tasks_backlog_without_statistics(
    conn: psycopg.Connection[Any],
) -> None:
    """Each gap between the declared tasks is one index probe that stops at once, whatever the
    statistics say: a table never analyzed (a bulk enqueue, no autovacuum yet) once made the
    planner read the queue's whole ready range for the gaps, 193 ms at every claim."""
    _never_analyzed_backlog(conn)
    rows = _probe_rows_read(conn)
    assert rows and max(rows) == 0, rows


def test_the_probe_check_fails_on_a_semi_join_probe(conn: psycopg.Connection[Any]) -> None:
    """The check above, on a probe written as `AND EXISTS (...)` (as it was): the scan of the
    queue's ready range is seen."""
    from _integration import install_broken

    install_broken(conn, UNKNOWN_READY, LATERAL_GAP_PROBE, SEMI_JOIN_GAP_PROBE)
    _never_analyzed_backlog(conn)
    assert max(_probe_rows_read(conn)) == 20_000
