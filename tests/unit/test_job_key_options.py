"""`Unique`, `job_key` and the rules of EnqueueOptions and Task.call for them (docs/design.md "Job
keys"): validated when built, typed `InvalidOptionsError`, before anything is sent."""

from __future__ import annotations

from datetime import timedelta

import pytest

from workhorse import App, EnqueueOptions, InvalidOptionsError, Unique
from workhorse._ops import unique_digest


def test_unique_defaults_and_normal_forms() -> None:
    rule = Unique()
    assert (rule.by, rule.keys, rule.period, rule.states) == (
        ("args",), None, None, ("waiting", "scheduled", "ready", "active"))
    assert Unique(by=["args", "queue"], keys=["user_id"]).by == ("args", "queue")
    assert Unique(period="1h") == Unique(period=3600) == Unique(period=timedelta(hours=1))
    assert Unique(period="1h").period == 3600.0


@pytest.mark.parametrize("kwargs", [
    {"by": ()}, {"by": "args"}, {"by": ("args", "args")}, {"by": ("payload",)},
    {"by": ("queue",), "keys": ("x",)}, {"keys": ()}, {"keys": ("",)}, {"keys": (1,)},
    {"period": 0}, {"period": "0s"}, {"period": -5}, {"period": True}, {"period": "soon"},
    {"period": float("nan")}, {"states": ()}, {"states": ("ready", "sleeping")},
])
def test_bad_unique_rules_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidOptionsError):
        Unique(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("kwargs", [
    {"job_key": ""}, {"job_key": "k" * 256}, {"job_key": 7}, {"job_key": "a\x00b"},
    {"job_key": "k", "job_key_mode": "merge"}, {"job_key_mode": None},
    {"idempotency_key": "i", "job_key": "k"}, {"idempotency_key": "i", "unique": Unique()},
    {"unique": Unique(), "job_key": "k"}, {"unique": "args"},
    {"delay": "5"}, {"delay": "5 parsecs"},
])
def test_bad_key_options_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidOptionsError):
        EnqueueOptions(**kwargs)  # type: ignore[arg-type]


def test_valid_key_options() -> None:
    assert EnqueueOptions(job_key="k" * 255, job_key_mode="preserve_run_at").job_key_mode == (
        "preserve_run_at")
    assert EnqueueOptions(delay="5s").delay_seconds == 5.0
    assert EnqueueOptions(unique=Unique()).unique == Unique()


def _app() -> tuple[App, object]:
    app = App("unit")

    @app.task(name="users.refresh", unique=Unique())
    def refresh(user_id: int, force: bool = False, *rest: int, **extra: object) -> None: ...

    return app, refresh


def test_arguments_are_compared_after_binding() -> None:
    _, refresh = _app()
    calls = [refresh.call((42,)), refresh.call((), {"user_id": 42}),  # type: ignore[attr-defined]
             refresh.call((42, False))]  # type: ignore[attr-defined]
    digests = {unique_digest(c.options, c.payload, c.arguments) for c in calls}
    assert len(digests) == 1
    other = refresh.call((42, True))  # type: ignore[attr-defined]
    assert unique_digest(other.options, other.payload, other.arguments) not in digests
    assert refresh.bound_arguments((1, False, 2, 3), {"tag": "x"}) == {  # type: ignore[attr-defined]
        "user_id": 1, "force": False, "rest": [2, 3], "tag": "x"}


def test_keys_by_queue_and_concurrency_key_change_the_digest() -> None:
    def digest(options: EnqueueOptions, payload: object) -> str:
        return unique_digest(options, payload, None)

    by_args = EnqueueOptions(queue="a", unique=Unique())
    assert digest(by_args, {"x": 1}) == digest(EnqueueOptions(queue="b", unique=Unique()),
                                               {"x": 1})
    by_queue = Unique(by=("args", "queue"))
    assert digest(EnqueueOptions(queue="a", unique=by_queue), {"x": 1}) != digest(
        EnqueueOptions(queue="b", unique=by_queue), {"x": 1})
    by_key = Unique(by=("concurrency_key",))
    assert digest(EnqueueOptions(concurrency_key="t1", unique=by_key), {"x": 1}) == digest(
        EnqueueOptions(concurrency_key="t1", unique=by_key), {"x": 2})
    only_x = EnqueueOptions(unique=Unique(keys=("x",)))
    assert digest(only_x, {"x": 1, "y": 1}) == digest(only_x, {"x": 1, "y": 2})
    with pytest.raises(InvalidOptionsError):
        digest(only_x, {"y": 1})  # the payload has no such field
    with pytest.raises(InvalidOptionsError):
        digest(only_x, [1])


def test_the_task_rule_applies_and_a_call_can_replace_or_drop_it() -> None:
    app, refresh = _app()
    assert refresh.call((1,)).options.unique == Unique()  # type: ignore[attr-defined]
    assert refresh.call((1,), unique=False).options.unique is None  # type: ignore[attr-defined]
    hourly = Unique(period="1h")
    assert refresh.call((1,), unique=hourly).options.unique is hourly  # type: ignore[attr-defined]
    with pytest.raises(InvalidOptionsError):
        refresh.call((1,), job_key="k")  # type: ignore[attr-defined]
    with pytest.raises(InvalidOptionsError):
        app.task(name="x.y", unique=Unique(keys=("nope",)))(lambda user_id: None)
    with pytest.raises(InvalidOptionsError):
        app.task(name="x.z", unique="args")(lambda user_id: None)  # type: ignore[arg-type]
    # A function with **kwargs may name any key.
    assert app.task(name="x.w", unique=Unique(keys=("any",)))(lambda **kw: None).unique


def test_under_eager_an_idempotency_hit_is_a_duplicate_and_keys_are_kept() -> None:
    from workhorse.testing import eager

    app = App("unit-eager")
    ran: list[int] = []

    @app.task(name="users.sync")
    def sync(n: int) -> None:
        ran.append(n)

    with eager(app):
        a = sync.apply_async((1,), idempotency_key="i")
        b = sync.apply_async((2,), idempotency_key="i")
        k = sync.apply_async((3,), job_key="k")
        again = sync.apply_async((4,), job_key="k")  # the first has finished: a new job
    assert (a.duplicate, b.duplicate, b.id) == (False, True, a.id)
    assert not again.duplicate and again.id != k.id
    assert ran == [1, 3, 4]
    job = k.job()
    assert job is not None and job.job_key == "k"
