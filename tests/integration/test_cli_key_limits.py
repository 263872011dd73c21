"""`workhorse keys set|clear|list QUEUE ...` (docs/design.md "Per-key limits") against a real
database, driven as an operator would: a key's limits set from the command line are the ones the
next claim holds each key to; `set` upserts the keys named (or the default) and leaves the others;
`clear` deletes keys' rows, `clear --all` the whole set; `list` shows the default and the keys, in
text and --json; every bad value is a usage error (exit 2) or one error line (exit 1), and writes
nothing."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import psycopg
import pytest
from test_cli import assert_one_line_error, cli, ok_json, run_process

from workhorse import ConcurrencyPolicyDefinition, EnqueueOptions, KeyLimit, Queue
from workhorse.cli import _base as cli_base

Q = "api"


@pytest.fixture(autouse=True)
def _wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's tables one row a line, whatever width the test runner gave the console."""
    monkeypatch.setattr(cli_base.console, "width", 1000)


@pytest.fixture
def api(queue: Queue) -> Queue:
    """Queue `api` owned by namespace `billing`: at most 100 active, 1 per key."""
    queue.sync_concurrency_policies("billing", [
        ConcurrencyPolicyDefinition(Q, max_active=100, max_active_per_key=1)])
    return queue


def _stored(queue: Queue) -> tuple[KeyLimit | None, dict[str, KeyLimit]] | None:
    found = queue.key_limits(Q)
    return None if found is None else (found.default, found.limits)


def _active_after_claims(queue: Queue, conn: psycopg.Connection[Any],
                         keys: dict[str, int]) -> Counter[str]:
    """Enqueue `keys` (key -> ready jobs), claim until a claim takes nothing, and count the
    active jobs per key."""
    queue.enqueue_many([("t", {}, EnqueueOptions(queue=Q, concurrency_key=key))
                        for key, n in keys.items() for _ in range(n)])
    while queue.claim(Q, 10, 60):
        pass
    rows = conn.execute("SELECT ckey, count(*) FROM workhorse.jobs WHERE queue = %s "
                        "AND status = 'active' GROUP BY ckey", (Q,)).fetchall()
    return Counter(dict(rows))


def test_keys_set_from_the_cli_are_what_the_claim_holds_each_key_to(
        database_url: str, api: Queue, conn: psycopg.Connection[Any]) -> None:
    result = cli(database_url, "keys", "set", Q, "acme", "globex", "--max-active", "3")
    assert result.exit_code == 0, result.output
    assert "created 2 key(s) of queue api (max_active 3): 'acme', 'globex'" in result.stdout
    # Whose they are, and what that namespace's next sync does to them.
    assert "namespace billing owns queue api: its next sync" in result.stdout
    result = cli(database_url, "keys", "set", Q, "--default", "--max-active", "2")
    assert result.exit_code == 0, result.output
    assert "queue api: default updated (max_active 2)" in result.stdout
    assert _stored(api) == (KeyLimit(max_active=2), {"acme": KeyLimit(max_active=3),
                                                      "globex": KeyLimit(max_active=3)})

    active = _active_after_claims(api, conn, {"acme": 5, "globex": 5, "initech": 5})
    assert active == Counter({"acme": 3, "globex": 3, "initech": 2})


def test_set_upserts_only_the_keys_named_each_to_exactly_the_limits_given(
        database_url: str, api: Queue) -> None:
    api.set_key_limits(None, Q, {"acme": KeyLimit(max_active=10, weight=3),
                                 "globex": KeyLimit(max_active=4)},
                       default=KeyLimit(max_active=2))
    report = ok_json(database_url, "keys", "set", Q, "acme", "initech",
                     "--rate-limit", "30/m", "--weight", "2")
    assert (report["created"], report["updated"], report["unchanged"], report["pruned"]) == (
        ["initech"], ["acme"], [], [])
    # acme's row is replaced whole (its max_active 10 is gone: the default's applies to it);
    # globex and the default are untouched.
    assert _stored(api) == (KeyLimit(max_active=2), {
        "acme": KeyLimit(weight=2, rate_limit="30/m"), "globex": KeyLimit(max_active=4),
        "initech": KeyLimit(weight=2, rate_limit="30/m")})
    again = ok_json(database_url, "keys", "set", Q, "acme", "--rate-limit", "30/m",
                    "--weight", "2")
    assert (again["created"], again["updated"], again["unchanged"]) == ([], [], ["acme"])


def test_set_default_creates_the_set_and_leaves_the_keys(database_url: str, api: Queue) -> None:
    report = ok_json(database_url, "keys", "set", Q, "--default", "--max-active", "5",
                     "--rate-limit", "10/s")
    assert report["created"] == [""] and report["updated"] == []
    assert _stored(api) == (KeyLimit(max_active=5, rate_limit="10/s"), {})
    api.set_key_limits(None, Q, {"acme": KeyLimit(max_active=9)}, prune=False)
    unchanged = ok_json(database_url, "keys", "set", Q, "--default", "--max-active", "5",
                        "--rate-limit", "10/s")
    assert (unchanged["created"], unchanged["updated"]) == ([], [])
    text = cli(database_url, "keys", "set", Q, "--default", "--max-active", "6")
    assert text.exit_code == 0, text.output
    assert "queue api: default updated (max_active 6)" in text.stdout
    assert _stored(api) == (KeyLimit(max_active=6), {"acme": KeyLimit(max_active=9)})


def test_a_weight_on_a_queue_that_is_not_fair_is_set_and_said_to_share_nothing(
        database_url: str, api: Queue) -> None:
    result = cli(database_url, "keys", "set", Q, "acme", "--weight", "5")
    assert result.exit_code == 0, result.output
    assert 'a weight applies only on a queue with fairness="key"' in result.stdout
    assert _stored(api) == (None, {"acme": KeyLimit(weight=5)})
    # With --json the notes go to stderr and stdout stays one JSON document.
    result = cli(database_url, "keys", "set", Q, "globex", "--weight", "5", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["created"] == ["globex"]
    assert "fairness" in result.stderr and "namespace billing owns" in result.stderr


def test_clear_deletes_the_keys_named_and_says_which_had_none(
        database_url: str, api: Queue, conn: psycopg.Connection[Any]) -> None:
    api.set_key_limits(None, Q, {"acme": KeyLimit(max_active=3), "globex": KeyLimit(max_active=3),
                                 "initech": KeyLimit(max_active=3)})
    result = cli(database_url, "keys", "clear", Q, "acme", "nobody")
    assert result.exit_code == 0, result.output
    assert "cleared 1 key(s) of queue api: 'acme'" in result.stdout
    assert "no limits of their own in queue api: 'nobody'" in result.stdout
    assert _stored(api) == (None, {"globex": KeyLimit(max_active=3),
                                   "initech": KeyLimit(max_active=3)})
    report = ok_json(database_url, "keys", "clear", Q, "globex")
    assert report["pruned"] == ["globex"]
    # acme is back to the policy's 1 per key; initech keeps its 3.
    active = _active_after_claims(api, conn, {"acme": 4, "initech": 4})
    assert active == Counter({"acme": 1, "initech": 3})


def test_clear_all_deletes_the_set_and_the_policy_applies_again(
        database_url: str, api: Queue) -> None:
    api.set_key_limits(None, Q, {"acme": KeyLimit(max_active=3), "globex": KeyLimit(weight=2)},
                       default=KeyLimit(max_active=2))
    result = cli(database_url, "keys", "clear", Q, "--all")
    assert result.exit_code == 0, result.output
    assert "queue api: cleared its key limits (the set, its default included, and 2 key(s))" in (
        result.stdout)
    assert api.key_limits(Q) is None
    again = cli(database_url, "keys", "clear", Q, "--all")
    assert again.exit_code == 0 and "queue api: had no key limits" in again.stdout
    assert ok_json(database_url, "keys", "clear", Q, "--all")["pruned"] == []


def test_list_shows_the_default_and_a_table_of_keys_in_text_and_json(
        database_url: str, api: Queue) -> None:
    api.set_key_limits("billing", Q, {"acme": KeyLimit(max_active=10, weight=3),
                                      "globex": KeyLimit(rate_limit="5/10s")},
                       default=KeyLimit(max_active=1))
    text = cli(database_url, "keys", "list", Q)
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    assert lines[0].startswith("queue api (namespace billing): default max_active 1; updated ")
    rows = [line.split() for line in lines if line.startswith("│")]
    assert rows == [["│", "acme", "│", "10", "│", "3", "│", "-", "│"],
                    ["│", "globex", "│", "-", "│", "-", "│", "5/10s", "│"]]
    found = ok_json(database_url, "keys", "list", Q)
    assert found["namespace"] == "billing"
    assert found["default"] == {"max_active": 1, "weight": None, "rate_limit": None}
    assert found["limits"] == {
        "acme": {"max_active": 10, "weight": 3, "rate_limit": None},
        "globex": {"max_active": None, "weight": None, "rate_limit": "5/10s"}}
    # One key: its row, or that the default applies to it.
    one = ok_json(database_url, "keys", "list", Q, "--key", "globex")
    assert list(one["limits"]) == ["globex"]
    other = cli(database_url, "keys", "list", Q, "--key", "initech")
    assert other.exit_code == 0
    assert "key 'initech' has no limits of its own (the default applies)" in other.stdout


def test_a_list_of_many_keys_is_plain_columns_with_control_characters_shown(
        database_url: str, api: Queue) -> None:
    red = "\x1b[31mred"
    api.set_key_limits(None, Q, {f"k{i:04}": KeyLimit(max_active=2) for i in range(1000)}
                       | {red: KeyLimit(weight=3, rate_limit="7/h")})
    text = cli(database_url, "keys", "list", Q)
    assert text.exit_code == 0, text.output
    assert "\x1b" not in text.stdout
    lines = text.stdout.splitlines()
    assert len(lines) == 2 + 1001
    assert lines[1].split() == ["key", "max_active", "weight", "rate_limit"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[2:]}
    assert rows["\\x1b[31mred"] == ["-", "3", "7/h"]
    assert rows["k0999"] == ["2", "-", "-"]


def test_list_of_a_queue_without_key_limits(database_url: str, api: Queue) -> None:
    text = cli(database_url, "keys", "list", Q)
    assert text.exit_code == 0, text.output
    assert "queue api has no key limits" in text.stdout
    assert ok_json(database_url, "keys", "list", Q) is None
    api.set_key_limits(None, Q, {}, default=KeyLimit(max_active=2))
    text = cli(database_url, "keys", "list", Q)
    assert "default max_active 2" in text.stdout and "no key has limits of its own" in text.stdout


@pytest.mark.parametrize("args", [
    ["keys", "set", Q, "acme"],                                   # no limit given
    ["keys", "set", Q, "--max-active", "2"],                      # neither keys nor --default
    ["keys", "set", Q, "acme", "--default", "--max-active", "2"],  # both
    ["keys", "set", Q, "acme", "--max-active", "0"],
    ["keys", "set", Q, "acme", "--max-active", "1000001"],
    ["keys", "set", Q, "acme", "--max-active", "many"],
    ["keys", "set", Q, "acme", "--weight", "0"],
    ["keys", "set", Q, "acme", "--weight", "1001"],
    ["keys", "set", Q, "acme", "--rate-limit", "5"],
    ["keys", "set", Q, "acme", "--rate-limit", "0/m"],
    ["keys", "set", Q, "acme", "--rate-limit", "5/fortnight"],
    ["keys", "clear", Q],                                         # neither keys nor --all
    ["keys", "clear", Q, "acme", "--all"],
    ["keys", "list"],
], ids=lambda args: " ".join(args[2:]) or "no queue")
def test_bad_usage_exits_2_and_writes_nothing(database_url: str, api: Queue,
                                              args: list[str]) -> None:
    api.set_key_limits(None, Q, {"acme": KeyLimit(max_active=7)})
    result = cli(database_url, *args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert _stored(api) == (None, {"acme": KeyLimit(max_active=7)})


def test_errors_are_one_line_exit_1_and_write_nothing(database_url: str, api: Queue) -> None:
    api.set_key_limits(None, Q, {"acme": KeyLimit(max_active=7)})
    # A queue without a policy: key limits refine one.
    result = run_process("--database-url", database_url, "keys", "set", "nopolicy", "acme",
                         "--max-active", "2")
    assert_one_line_error(result, "queue nopolicy has no policy")
    # A key too long: nothing is written, the valid key beside it neither.
    result = run_process("--database-url", database_url, "keys", "set", Q, "globex", "k" * 256,
                         "--max-active", "2")
    assert_one_line_error(result, "at most 255 characters")
    result = run_process("--database-url", database_url, "keys", "clear", Q, "k" * 256)
    assert_one_line_error(result, "at most 255 characters")
    assert _stored(api) == (None, {"acme": KeyLimit(max_active=7)})
    with psycopg.connect(database_url, autocommit=True) as other:
        assert other.execute("SELECT count(*) FROM workhorse.key_limit_sets "
                             "WHERE queue = 'nopolicy'").fetchone() == (0,)


def test_health_shows_the_keys_at_their_own_limit_and_the_key_limits(
        database_url: str, api: Queue, conn: psycopg.Connection[Any]) -> None:
    assert cli(database_url, "keys", "set", Q, "acme", "--max-active", "3").exit_code == 0
    assert cli(database_url, "keys", "set", Q, "--default", "--max-active", "2").exit_code == 0
    _active_after_claims(api, conn, {"acme": 4, "globex": 3, "initech": 1})
    data = ok_json(database_url, "health")
    [row] = [p for p in data["policies"] if p["queue"] == Q]
    # acme at its own 3, globex at the default's 2; initech (1 of 2) is not.
    assert (row["saturated_keys"], row["blocked_ready"]) == (2, 2)
    assert row["key_limits"] == 1
    assert row["key_limit_default"] == {"max_active": 2, "weight": None, "rate_limit": None}
    text = cli(database_url, "health")
    assert text.exit_code == 0, text.output
    line = next(line for line in text.stdout.splitlines() if f" {Q} " in line)
    assert "key limits: 1 key(s), default max 2" in line
