"""SQL functions version safely: one file per function, every helper versioned with its caller,
and a new version installed beside an old one leaves the old one's statements untouched."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from workhorse import EnqueueOptions, Queue, _sql

CALL = re.compile(r"workhorse\.(\w+)\(")
DEFINES = re.compile(r"CREATE FUNCTION workhorse\.(\w+)\(")
VERSIONED = re.compile(r"_v\d+$")


def _calls(text: str) -> set[str]:
    return set(CALL.findall(text)) - set(DEFINES.findall(text))


def _closure(files: dict[str, str], root: str) -> set[str]:
    """`root` and every function it calls, directly or not."""
    seen: set[str] = set()
    todo = [root]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += sorted(_calls(files[name]))
    return seen


def test_one_function_per_file_named_after_it() -> None:
    for name, text in _sql.function_files().items():
        assert DEFINES.findall(text) == [name], _sql.function_paths()[name]


def test_every_function_and_every_helper_it_calls_is_versioned() -> None:
    files = _sql.function_files()
    for name, text in files.items():
        assert VERSIONED.search(name), f"{name}: a function's name ends in its version (_vN)"
        for called in _calls(text):
            assert called in files, f"{name} calls {called}, which has no function file"
            assert VERSIONED.search(called), f"{name} calls the unversioned {called}"


def test_the_checks_above_can_fail() -> None:
    """An unversioned helper call is caught by the same rules."""
    text = ("CREATE FUNCTION workhorse.claim_v" + "9() ... "
            "PERFORM workhorse._prepare_queue(q); ...")
    assert _calls(text) == {"_prepare_queue"}
    assert not VERSIONED.search("_prepare_queue")


def _definitions(conn: psycopg.Connection[Any], names: set[str]) -> dict[str, str]:
    rows = conn.execute(
        "SELECT p.proname, pg_get_functiondef(p.oid) FROM pg_proc p"
        " WHERE p.pronamespace = 'workhorse'::regnamespace AND p.proname = ANY(%s)",
        (sorted(names),),
    ).fetchall()
    return dict(rows)


NEXT = "v" + "99"  # a hypothetical next version, beside every real one
CLAIM = _sql.function_name("claim")
LOCKS = {_sql.function_name("_admission_lock_id"), _sql.function_name("_enqueue_gate_id")}


def _as_next(files: dict[str, str], names: set[str]) -> list[str]:
    """The functions `names` rewritten as the next version: each name, and each call among them,
    ends in _v99. Helpers outside `names` (the shared lock ids) keep being called as they are."""
    rewritten = []
    for name in sorted(names):
        text = files[name]
        for other in names:
            base = VERSIONED.sub("", other)
            text = re.sub(rf"workhorse\.{other}\(", f"workhorse.{base}_{NEXT}(", text)
        rewritten.append(text)
    return rewritten


# A next claim whose limits helper says every queue is paused: if today's claim shared that
# helper, it would admit nothing either.
_BROKEN_HELPER = """
CREATE OR REPLACE FUNCTION workhorse._limits_{version}(
    p_queue text, p_now timestamptz,
    OUT governed boolean, OUT paused boolean,
    OUT max_active integer, OUT max_active_per_key integer,
    OUT rate_limit integer, OUT rate_period double precision,
    OUT rate_limit_per_key integer, OUT rate_period_per_key double precision,
    OUT feature_level integer)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN governed := true; paused := true; feature_level := 1; END $$
"""


def _claimed(queue: Queue, function: str, queue_name: str) -> int:
    """Enqueue one job in `queue_name` and claim with `function`: how many came back."""
    queue.enqueue("t", {}, EnqueueOptions(queue=queue_name))
    rows = queue.conn.execute(
        f"SELECT id FROM workhorse.{function}(%s, 1, 30, NULL, NULL, NULL, NULL, NULL)"
        " WHERE id IS NOT NULL", (queue_name,)
    ).fetchall()
    return len(rows)


@pytest.mark.parametrize("shared_helper", [False, True], ids=["versioned", "broken-unversioned"])
def test_installing_a_new_claim_leaves_todays_claim_untouched(
    queue: Queue, conn: psycopg.Connection[Any], shared_helper: bool
) -> None:
    """A hypothetical next claim, made from today's with its own copies of every helper, installed
    beside it: today's claim's statements and behaviour stay as they were."""
    files = _sql.function_files()
    family = {n for n in _closure(files, CLAIM) if n.startswith(("claim", "_"))}
    family -= LOCKS  # every version takes these locks
    before = _definitions(conn, _closure(files, CLAIM))

    # (Installed in name order, so a SQL function may be created before a helper it calls, as
    # pg_dump restores them: bodies are checked when they run.)
    conn.execute("SET check_function_bodies = off")
    for text in _as_next(files, family):
        conn.execute(text)
    conn.execute("RESET check_function_bodies")
    # The new claim changes its own helper. The broken variant is what an unversioned helper
    # means: the change lands on the one helper both versions call.
    today = _sql.function_name("_limits").rsplit("_", 1)[1]
    conn.execute(_BROKEN_HELPER.format(version=today if shared_helper else NEXT))

    unchanged = _definitions(conn, _closure(files, CLAIM)) == before
    by_today = _claimed(queue, CLAIM, "q1")
    by_next = _claimed(queue, f"claim_{NEXT}", "q2")
    if shared_helper:
        # The check catches a shared, changed helper: v1's statements and behaviour changed.
        assert (unchanged, by_today, by_next) == (False, 0, 1)
    else:
        assert unchanged, "installing a new claim changed a function today's claim calls"
        assert (by_today, by_next) == (1, 0)  # the new one runs its own helper only
