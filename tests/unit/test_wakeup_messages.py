"""The messages a supervisor sends its slots (workhorse/worker/wakeups.py): queue names, and each
queue's share of its max_active (the claimer's fair-share laps)."""

from __future__ import annotations

from workhorse.worker.wakeups import (
    HINT,
    SHARES,
    decode,
    decode_shares,
    encode,
    encode_shares,
)


def test_names_round_trip() -> None:
    assert decode(encode(HINT, ["mail", "a:b", "ü"])) == (HINT, {"mail", "a:b", "ü"})


def test_shares_round_trip_exactly_with_colons_in_names() -> None:
    shares = {"mail": 8.0, "api:eu": 2 / 3, "x": 0.125}
    kind, entries = decode(encode_shares(shares))
    assert kind == SHARES
    assert decode_shares(entries) == shares


def test_a_malformed_share_is_left_out() -> None:
    assert decode_shares({"8.0:mail", "eight:api", ":", "9"}) == {"mail": 8.0}
