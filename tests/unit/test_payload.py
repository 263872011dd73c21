"""encode_json: what may be stored as a payload, result or error, and error_document."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from workhorse import PayloadError
from workhorse._ops import load_json
from workhorse.queue import PAYLOAD_LIMIT, encode_json, error_document


@pytest.mark.parametrize(
    "value",
    [
        None, True, 0, -1, 2**70, 1.5, "", "text", "ünïcödé ✓ 𝄞", [], {},
        {"args": [1], "kwargs": {}},
        {"nested": {"list": [1, "two", None, {"three": 3.0}]}},
        "\\u0000",  # a backslash and five characters, not a NUL
        "\\\\u0000",
        "tab\tnew\nline",
    ],
)
def test_round_trips(value: Any) -> None:
    assert json.loads(encode_json(value)) == value


def test_compact_and_not_ascii_escaped() -> None:
    assert encode_json({"a": [1, 2], "b": "é"}) == '{"a":[1,2],"b":"é"}'


def test_size_limit_counts_utf8_bytes() -> None:
    at_limit = "x" * (PAYLOAD_LIMIT - 2)
    assert len(encode_json(at_limit).encode()) == PAYLOAD_LIMIT
    with pytest.raises(PayloadError, match="1 MiB"):
        encode_json("x" * (PAYLOAD_LIMIT - 1))
    # 2 bytes per character: within the limit in characters, over it in bytes.
    with pytest.raises(PayloadError, match="1 MiB"):
        encode_json("é" * (PAYLOAD_LIMIT // 2))


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


class Thing:
    pass


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (math.nan, "JSON"),
        ({"x": math.inf}, "JSON"),
        ([-math.inf], "JSON"),
        (Thing(), "JSON"),
        ({1, 2}, "JSON"),
        (b"bytes", "JSON"),
        ({(1, 2): 3}, "JSON"),
        ("a\x00b", "NUL"),
        ({"k\x00": 1}, "NUL"),
        (["\\\x00"], "NUL"),  # a real NUL right after an escaped backslash
        ("\ud800", "surrogate"),
        ({"x": "\udfff"}, "surrogate"),
        (_nested(50_000), "deep"),
    ],
)
def test_rejects(value: Any, match: str) -> None:
    with pytest.raises(PayloadError, match=match):
        encode_json(value)


def test_circular_reference_is_rejected() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(PayloadError):
        encode_json(loop)


def test_names_what_was_bad() -> None:
    with pytest.raises(PayloadError, match=r"^result "):
        encode_json(math.nan, "result")


def test_error_document_shape() -> None:
    try:
        raise KeyError("missing")
    except KeyError as exc:
        document = error_document(exc)
    assert set(document) == {"type", "message", "traceback"}
    assert document["type"] == "KeyError"
    assert "missing" in document["message"]
    assert "raise KeyError" in document["traceback"]
    assert json.loads(encode_json(document, "error")) == document


@pytest.mark.parametrize("value", [{}, {"args": [1, "é"], "kwargs": {"x": None}}, [], None, 1.5,
                                   "text", {"": {}}])
def test_the_workers_json_loader_reads_what_the_encoder_wrote(value: object) -> None:
    text = encode_json(value)
    for data in (text, text.encode(), bytearray(text.encode()), memoryview(text.encode())):
        assert load_json(data) == value  # type: ignore[arg-type]
    assert load_json(b"{}") is not load_json(b"{}")  # a fresh dict each time: callers may add to it
