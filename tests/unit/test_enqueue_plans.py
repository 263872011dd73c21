"""App's calls are plans (workhorse/_enqueue.py): one generator per call, driven on either flavour
of connection. Here the operations are stand-ins, so that no database is needed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from workhorse import App, InvalidOptionsError, _enqueue

NOWHERE = "postgresql://nobody@127.0.0.1:1/none?connect_timeout=1"


@pytest.fixture
def fake_operations(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """`_ops.execute` / `execute_async` answer each operation (here a string) from this dict; a
    BaseException answer is raised."""
    answers: dict[str, Any] = {}

    def execute(conn: Any, operation: Any) -> Any:
        answer = answers[operation]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def execute_async(conn: Any, operation: Any) -> Any:
        return execute(conn, operation)

    monkeypatch.setattr(_enqueue._ops, "execute", execute)
    monkeypatch.setattr(_enqueue._ops, "execute_async", execute_async)
    return answers


def _sum_plan() -> Any:
    first = yield "first"
    second = yield "second"
    return first + second


def test_one_plan_is_driven_on_either_flavour(fake_operations: dict[str, Any]) -> None:
    fake_operations.update(first=2, second=3)
    assert _enqueue._drive(object(), _sum_plan()) == 5  # type: ignore[arg-type]
    assert asyncio.run(_enqueue._drive_async(object(), _sum_plan())) == 5  # type: ignore[arg-type]


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_an_operation_error_is_thrown_into_the_plan(
    fake_operations: dict[str, Any], flavour: str
) -> None:
    """What the plan holds open (the enqueue span) sees the error; the caller gets it too."""
    fake_operations.update(first=1, second=ValueError("refused"))
    seen: list[BaseException] = []

    def plan() -> Any:
        yield "first"
        try:
            yield "second"
        except ValueError as exc:
            seen.append(exc)
            raise
        return None

    with pytest.raises(ValueError, match="refused"):
        if flavour == "sync":
            _enqueue._drive(object(), plan())  # type: ignore[arg-type]
        else:
            asyncio.run(_enqueue._drive_async(object(), plan()))  # type: ignore[arg-type]
    assert [str(exc) for exc in seen] == ["refused"]


def test_a_plan_may_handle_an_operation_error(fake_operations: dict[str, Any]) -> None:
    fake_operations.update(first=KeyError("gone"))

    def plan() -> Any:
        try:
            yield "first"
        except KeyError:
            return "handled"
        return "not reached"

    assert _enqueue._drive(object(), plan()) == "handled"  # type: ignore[arg-type]


def test_enqueueing_nothing_reaches_no_database() -> None:
    app = App("plans", database_url=NOWHERE)
    assert app.enqueue_calls([]) == [] and app.enqueue_many([]) == []
    assert asyncio.run(app.enqueue_calls_async([])) == []


def test_a_connection_of_the_other_flavour_is_refused() -> None:
    app = App("plans", database_url=NOWHERE)

    @app.task(name="t")
    def t() -> None: ...

    class NotAConnection:
        pass

    with pytest.raises(InvalidOptionsError, match="use delay_async"):
        t.apply_async(connection=NotAConnection())
    with pytest.raises(InvalidOptionsError, match="use delay/apply_async"):
        asyncio.run(t.enqueue_async(connection=NotAConnection()))
