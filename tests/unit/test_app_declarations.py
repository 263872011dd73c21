"""The app layer without a database: declarations, names, queues, keys, durations, backoff and
`load_app`."""

from __future__ import annotations

import math
import sys
import types
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import workhorse
from workhorse import (
    App,
    ConcurrencyPolicyDefinition,
    ExponentialBackoff,
    InvalidOptionsError,
    InvalidPolicyError,
    QueueSpec,
    Task,
    UnknownTaskError,
    WorkhorseError,
    load_app,
)
from workhorse._durations import parse_duration
from workhorse.errors import AppLoadError
from workhorse.retry import backoff_delay
from workhorse.task import resolve_key

ENV_LIMIT = "WORKHORSE_DEFAULT_CONCURRENCY_LIMIT"


def _policies(app: App) -> dict[str, tuple[int | None, int | None]]:
    return {d.queue: (d.max_active, d.max_active_per_key) for d in app.policy_definitions()}


# ---- the decorator -------------------------------------------------------------------------------


def test_decorator_without_arguments_registers_the_function() -> None:
    app = App("billing")

    @app.task
    def send(message: str) -> str:
        """Sends."""
        return message.upper()

    assert isinstance(send, Task)
    assert send.name == f"{__name__}.test_decorator_without_arguments_registers_the_function" \
        ".<locals>.send"
    assert app.tasks == {send.name: send}
    assert app.get_task(send.name) is send
    assert send("hi") == "HI"  # calling the task runs the function in-process
    assert send.__name__ == "send" and send.__doc__ == "Sends."
    assert (send.priority, send.max_attempts, send.on_failure, send.lease) == (0, 3, "fail", None)
    assert not send.is_async


def test_decorator_with_arguments() -> None:
    app = App("billing")

    @app.task(name="mail.send", queue="mail", priority=5, max_attempts=7, on_failure="hold",
              lease="2m")
    async def send(message: str) -> None: ...

    assert send.name == "mail.send"
    assert send.queue.name == "mail"
    assert (send.priority, send.max_attempts, send.on_failure, send.lease) == (5, 7, "hold", 120.0)
    assert send.is_async
    assert list(app.tasks) == ["mail.send"]


def test_decorator_with_empty_parentheses() -> None:
    app = App("billing")

    @app.task()
    def ping() -> None: ...

    assert isinstance(ping, Task)
    assert ping.name.endswith(".ping") and ping.queue.name == ping.name


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"on_failure": "explode"}, InvalidOptionsError),
        ({"priority": 40000}, InvalidOptionsError),
        ({"max_attempts": 0}, InvalidOptionsError),
        ({"lease": "soon"}, InvalidOptionsError),
        ({"lease": 0}, InvalidOptionsError),
        ({"concurrency_key": ""}, InvalidOptionsError),
        ({"concurrency_key": 5}, InvalidOptionsError),
        ({"name": ""}, InvalidOptionsError),
        ({"name": "n" * 256}, InvalidOptionsError),
        ({"max_active": 0}, InvalidPolicyError),
        ({"max_active": 2, "max_active_per_key": 3}, InvalidPolicyError),
        ({"queue": ""}, InvalidPolicyError),
    ],
)
def test_bad_declarations_raise_and_register_nothing(
    options: dict[str, Any], error: type[Exception]
) -> None:
    app = App("billing")
    with pytest.raises(error):
        app.task(**options)(lambda: None)
    assert app.tasks == {}
    assert app.queues == {}


def test_a_task_name_registered_twice_for_another_function_is_refused() -> None:
    app = App("billing")
    app.task(name="t")(lambda: 1)
    with pytest.raises(InvalidOptionsError, match="already registered"):
        app.task(name="t")(lambda: 2)


def test_bad_app_name() -> None:
    with pytest.raises(InvalidPolicyError):
        App("")


def test_get_task_unknown() -> None:
    with pytest.raises(UnknownTaskError, match="nope"):
        App("billing").get_task("nope")


# ---- task names, and the __main__ rule -----------------------------------------------------------


def _main_function() -> Callable[[], None]:
    def job() -> None: ...

    job.__module__ = "__main__"
    job.__qualname__ = "job"
    return job


@pytest.fixture
def fake_main(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    module = types.ModuleType("__main__")
    monkeypatch.setitem(sys.modules, "__main__", module)
    yield module


def test_task_in_main_run_with_dash_m_takes_the_module_name(
    fake_main: types.ModuleType,
) -> None:
    fake_main.__spec__ = types.SimpleNamespace(name="billing.jobs")  # type: ignore[assignment]
    assert App("a").task(_main_function()).name == "billing.jobs.job"


def test_task_in_a_package_main_keeps_the_importable_name(fake_main: types.ModuleType) -> None:
    # `python -m billing` runs billing/__main__.py; a worker can import `billing.__main__`, where
    # the task is named `billing.__main__.job`, so the enqueuer must use that name too.
    fake_main.__spec__ = types.SimpleNamespace(name="billing.__main__")  # type: ignore[assignment]
    assert App("a").task(_main_function()).name == "billing.__main__.job"


def test_task_in_a_main_script_takes_its_path_under_sys_path(
    fake_main: types.ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_main.__spec__ = None
    fake_main.__file__ = str(tmp_path / "pkg" / "script.py")
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    assert App("a").task(_main_function()).name == "pkg.script.job"


def test_task_in_a_fileless_main_gets_a_main_name(fake_main: types.ModuleType) -> None:
    fake_main.__spec__ = None  # e.g. `python -c` or a REPL: no file, no spec
    app = App("a")
    assert app.task(_main_function()).name == "__main__.job"
    assert app.task(name="ops.job")(_main_function()).name == "ops.job"


def test_a_lambda_in_a_fileless_main_needs_a_name(fake_main: types.ModuleType) -> None:
    fake_main.__spec__ = None
    app = App("a")
    job = _main_function()
    job.__qualname__ = "<lambda>"
    with pytest.raises(InvalidOptionsError, match=r"python -c, stdin or a REPL.*name="):
        app.task(job)
    assert app.tasks == {}


def test_task_in_a_main_file_outside_sys_path_needs_a_name(
    fake_main: types.ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_main.__spec__ = None
    fake_main.__file__ = str(tmp_path / "not-an-identifier" / "script.py")
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    with pytest.raises(InvalidOptionsError, match=r"cannot be imported.*name='mymodule.job'"):
        App("a").task(_main_function())


# ---- queues --------------------------------------------------------------------------------------


def test_default_queue_is_the_task_name_and_ungoverned() -> None:
    app = App("billing")

    @app.task(name="reports.build")
    def build() -> None: ...

    assert build.queue.name == "reports.build"
    assert app.declared_queues() == ["reports.build"]
    assert app.policy_definitions() == []


def test_max_active_without_a_queue_limits_the_task_own_queue() -> None:
    app = App("billing")

    @app.task(name="migrate_db", max_active=1)
    def migrate_db() -> None: ...

    assert _policies(app) == {"migrate_db": (1, None)}


def test_queue_by_name_with_limits() -> None:
    app = App("billing")

    @app.task(queue="mail", max_active=20, max_active_per_key=3,
              concurrency_key=lambda message: message["tenant"])
    def send(message: dict[str, str]) -> None: ...

    assert send.queue.name == "mail"
    assert app.policy_definitions() == [ConcurrencyPolicyDefinition("mail", 20, 3)]


def test_per_key_limit_without_a_queue_limit() -> None:
    app = App("billing")
    app.task(queue="mail", max_active_per_key=2)(lambda: None)
    assert _policies(app) == {"mail": (None, 2)}


def test_shared_queue_spec() -> None:
    app = App("billing")
    openai = app.queue("openai-api", max_active=5)
    assert openai == QueueSpec("openai-api", 5, None)

    @app.task(name="summarize", queue=openai)
    async def summarize(text: str) -> str:
        return text

    @app.task(name="embed", queue=openai)
    def embed(text: str) -> str:
        return text

    assert summarize.queue.name == embed.queue.name == "openai-api"
    assert _policies(app) == {"openai-api": (5, None)}
    assert app.declared_queues() == ["openai-api"]
    assert app.queue_name(openai) == app.queue_name("openai-api") == "openai-api"


def test_queue_spec_not_declared_through_the_app_is_declared_by_the_task() -> None:
    app = App("billing")
    app.task(name="t", queue=QueueSpec("ext", max_active_per_key=4))(lambda: None)
    assert _policies(app) == {"ext": (None, 4)}


def test_queue_spec_definition() -> None:
    assert QueueSpec("q").definition() is None
    assert not QueueSpec("q").governed
    assert QueueSpec("q", 3, 1).definition() == ConcurrencyPolicyDefinition("q", 3, 1)
    with pytest.raises(InvalidPolicyError):
        QueueSpec("q", 1, 2).definition()


def test_declaring_a_queue_validates_it() -> None:
    app = App("billing")
    with pytest.raises(InvalidPolicyError):
        app.queue("q", max_active=0)
    with pytest.raises(InvalidPolicyError):
        app.queue("", max_active=1)
    with pytest.raises(InvalidPolicyError):
        app.queue("q", max_active=True)
    assert app.queues == {}


def test_an_unlimited_mention_does_not_drop_or_conflict_with_limits() -> None:
    app = App("billing")
    app.task(name="a", queue="mail")(lambda: None)
    app.task(name="b", queue="mail", max_active=4)(lambda: None)
    app.task(name="c", queue="mail")(lambda: None)
    assert app.queue("mail") == QueueSpec("mail", 4, None)
    assert app.queue("mail", max_active=4) == QueueSpec("mail", 4, None)  # the same again: fine
    assert _policies(app) == {"mail": (4, None)}


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"max_active": 4}, {"max_active": 5}),
        ({"max_active": 4}, {"max_active": 4, "max_active_per_key": 2}),
        ({"max_active_per_key": 2}, {"max_active": 4}),
    ],
)
def test_conflicting_declarations_raise_when_declared(
    first: dict[str, Any], second: dict[str, Any]
) -> None:
    app = App("billing")
    app.task(name="a", queue="mail", **first)(lambda: None)
    with pytest.raises(InvalidPolicyError, match="mail"):
        app.task(name="b", queue="mail", **second)(lambda: None)
    assert list(app.tasks) == ["a"]
    with pytest.raises(InvalidPolicyError):
        app.queue("mail", **second)
    spec = QueueSpec("mail", **first)
    assert app.queues["mail"] == spec


def test_conflict_between_a_queue_spec_and_task_limits() -> None:
    app = App("billing")
    shared = app.queue("shared", max_active=5)
    with pytest.raises(InvalidPolicyError):
        app.task(name="t", queue=shared, max_active=6)(lambda: None)
    app.task(name="u", queue=shared, max_active=5)(lambda: None)
    assert _policies(app) == {"shared": (5, None)}


def test_conflict_with_a_default_queue() -> None:
    app = App("billing")
    app.task(name="nightly", max_active=1)(lambda: None)
    with pytest.raises(InvalidPolicyError):
        app.task(name="other", queue="nightly", max_active=2)(lambda: None)


# ---- WORKHORSE_DEFAULT_CONCURRENCY_LIMIT ---------------------------------------------------------


def test_default_limit_applies_to_queues_named_after_their_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ENV_LIMIT, "4")
    app = App("billing")
    app.task(name="plain")(lambda: None)
    app.task(name="own", max_active=2)(lambda: None)  # an explicit limit wins
    app.task(name="keyed", max_active_per_key=3)(lambda: None)
    app.task(name="named", queue="mail")(lambda: None)  # a named queue is not a default queue
    app.task(name="shared", queue=app.queue("shared"))(lambda: None)
    assert _policies(app) == {"plain": (4, None), "own": (2, None), "keyed": (4, 3)}


def test_default_limit_is_read_when_the_task_is_declared(monkeypatch: pytest.MonkeyPatch) -> None:
    app = App("billing")
    app.task(name="before")(lambda: None)
    monkeypatch.setenv(ENV_LIMIT, " 2 ")
    app.task(name="after")(lambda: None)
    assert _policies(app) == {"after": (2, None)}


def test_empty_default_limit_means_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_LIMIT, "")
    app = App("billing")
    app.task(name="plain")(lambda: None)
    assert app.policy_definitions() == []


@pytest.mark.parametrize("value", ["zero", "0", "-3", "1.5", "2000000"])
def test_invalid_default_limit_raises_invalid_policy(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(ENV_LIMIT, value)
    app = App("billing")
    with pytest.raises(InvalidPolicyError):
        app.task(name="plain")(lambda: None)
    assert app.tasks == {}


# ---- concurrency keys ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("tenant-1", "tenant-1"),
        (None, None),
        (lambda m: m["tenant"], "t1"),
        (lambda m: 42, "42"),
        (lambda m: 0, "0"),
        (lambda m: None, None),
        (lambda m: "é" * 255, "é" * 255),
    ],
)
def test_resolve_key(spec: Any, expected: str | None) -> None:
    assert resolve_key(spec, ({"tenant": "t1"},), {}) == expected


@pytest.mark.parametrize(
    "result", ["", 1.5, True, False, b"t1", ["t1"], {"t": 1}, object(), "k" * 256]
)
def test_resolve_key_rejects(result: Any) -> None:
    with pytest.raises(InvalidOptionsError):
        _task_with_key(lambda *a, **k: result).call(("x",))


def _task_with_key(key: Any) -> Task[Any, Any]:
    app = App("keys")
    return app.task(name="t", concurrency_key=key)(lambda *a, **k: None)


def test_key_callable_gets_the_call_arguments() -> None:
    seen: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def key(*args: Any, **kwargs: Any) -> str:
        seen.append((args, kwargs))
        return f"{args[0]}:{kwargs['region']}"

    task = _task_with_key(key)
    call = task.call(("acme",), {"region": "eu"})
    assert call.options.concurrency_key == "acme:eu"
    assert seen == [(("acme",), {"region": "eu"})]
    assert call.payload == {"args": ["acme"], "kwargs": {"region": "eu"}}


def test_call_site_key_wins() -> None:
    def never(*args: Any, **kwargs: Any) -> str:
        raise AssertionError("the decorator's key must not be called")

    task = _task_with_key(never)
    assert task.call((1,), concurrency_key="mine").options.concurrency_key == "mine"
    assert task.call((1,), concurrency_key=7).options.concurrency_key == "7"  # type: ignore[arg-type]
    assert task.call((1,), concurrency_key=lambda n: f"n{n}").options.concurrency_key == "n1"
    with pytest.raises(InvalidOptionsError):
        task.call((1,), concurrency_key=lambda n: "")


def test_static_key_from_the_decorator() -> None:
    assert _task_with_key("fixed").call(()).options.concurrency_key == "fixed"
    assert _task_with_key(None).call(()).options.concurrency_key is None


def test_call_options_from_decorator_and_call_site() -> None:
    app = App("billing")
    shared = app.queue("bulk")

    @app.task(name="send", queue="mail", priority=3, max_attempts=5, on_failure="hold")
    def send(x: int, y: int = 0) -> None: ...

    call = send.call((1,))
    assert (call.task, call.options.queue, call.options.priority) == ("send", "mail", 3)
    assert (call.options.max_attempts, call.on_failure) == (5, "hold")
    call = send.call((1,), {"y": 2}, queue=shared, priority=-1, max_attempts=1, delay=30)
    assert (call.options.queue, call.options.priority, call.options.max_attempts) == (
        "bulk", -1, 1,
    )
    assert call.options.delay_seconds == 30.0
    assert call.payload == {"args": [1], "kwargs": {"y": 2}}
    assert send.call((1,), queue="adhoc").options.queue == "adhoc"
    with pytest.raises(InvalidOptionsError):
        send.call("abc")  # args must be a sequence of arguments, not a string
    with pytest.raises(InvalidOptionsError):
        send.call((1,), "abc")  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionsError):
        send.call((1,), {1: 2})  # type: ignore[dict-item]
    with pytest.raises(InvalidOptionsError):
        send.call((1,), priority=1 << 20)


# ---- durations -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30.0), ("500ms", 0.5), ("2m", 120.0), ("1h", 3600.0), ("1d", 86400.0), ("15", 15.0),
        ("1.5", 1.5), (".5s", 0.5), (" 10s ", 10.0), ("0", 0.0), (15, 15.0), (0.25, 0.25),
        (timedelta(minutes=1), 60.0),
    ],
)
def test_parse_duration(text: Any, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text", ["5x", "", "s", "-1", "-1s", "1w", "abc", "1e3", "3 s", "367d", True, math.nan,
             math.inf, -2,
             timedelta(seconds=-1)],
)
def test_parse_duration_rejects(text: Any) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


# ---- backoff -------------------------------------------------------------------------------------


def test_backoff_grows_and_is_capped() -> None:
    backoff = ExponentialBackoff(base=1, factor=2, cap=10, jitter=False)
    assert [backoff.delay(n) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert backoff.delay(0) == 1.0
    assert backoff.delay(10_000) == 10.0  # no overflow


def test_backoff_jitter_stays_in_the_upper_half() -> None:
    backoff = ExponentialBackoff(base=2, factor=3, cap=100)
    for attempt in (1, 2, 3, 4, 5):
        raw = min(100.0, 2 * 3 ** (attempt - 1))
        for _ in range(50):
            assert raw / 2 <= backoff.delay(attempt) <= raw


@pytest.mark.parametrize("kwargs", [{"base": -1}, {"factor": 0.5}, {"cap": -1}])
def test_backoff_validation(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        ExponentialBackoff(**kwargs)


def test_backoff_delay_policies() -> None:
    assert 0.5 <= backoff_delay(None, 1) <= 1.0  # the default: ExponentialBackoff()
    assert backoff_delay(7, 3) == 7.0
    assert backoff_delay(0.5, 9) == 0.5
    assert backoff_delay(lambda attempt: attempt * 10, 3) == 30.0
    assert backoff_delay(lambda attempt: -5, 1) == 0.0
    assert backoff_delay(ExponentialBackoff(base=3, jitter=False), 2) == 6.0


def test_backoff_with_retry_policy_keywords_is_the_old_spelling() -> None:
    """0.2.0's `Backoff(base=...)` still makes the retry policy, with a DeprecationWarning;
    `Backoff(retry_after, ...)` is back-pressure."""
    from workhorse import Backoff
    with pytest.warns(DeprecationWarning, match="ExponentialBackoff"):
        old = Backoff(base=2, factor=3, cap=60, jitter=False)
    assert old == ExponentialBackoff(base=2, factor=3, cap=60, jitter=False)
    with pytest.warns(DeprecationWarning):
        assert Backoff() == ExponentialBackoff()
    signal = Backoff(30, scope="key")
    assert isinstance(signal, Exception) and (signal.retry_after, signal.scope) == (30.0, "key")
    import pickle
    copied = pickle.loads(pickle.dumps(Backoff("2s", budget="api", reason="429")))
    assert (copied.retry_after, copied.scope, copied.budget, str(copied)) == (2.0, None, "api",
                                                                               "429")


def test_task_keeps_its_backoff() -> None:
    app = App("b")
    backoff = ExponentialBackoff(base=0.1)
    assert app.task(name="t", retry_backoff=backoff)(lambda: None).retry_backoff is backoff


# ---- load_app ------------------------------------------------------------------------------------


@pytest.fixture
def app_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, str]]:
    """An empty current directory and a module name nobody has imported yet."""
    name = f"whapp_{uuid.uuid4().hex[:10]}"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield tmp_path, name
    for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
        del sys.modules[module]


def test_load_app_finds_the_app_in_the_current_directory(app_dir: tuple[Path, str]) -> None:
    path, name = app_dir
    (path / f"{name}.py").write_text(
        "import workhorse\napp = workhorse.App('loaded')\nother = 5\n"
        "@app.task(name='t')\ndef t():\n    pass\n"
    )
    app = load_app(f"{name}:app")
    assert isinstance(app, App) and app.name == "loaded" and list(app.tasks) == ["t"]
    assert load_app(name) is app  # the module's single App
    assert str(path) in sys.path


def test_load_app_errors(app_dir: tuple[Path, str]) -> None:
    path, name = app_dir
    (path / f"{name}.py").write_text(
        "import workhorse\napp = workhorse.App('one')\nother = 5\n"
        "second = workhorse.App('two')\n"
    )
    cases = {
        f"{name}_missing:app": "cannot import",
        f"{name}.sub:app": "cannot import",
        f"{name}:nope": "no attribute 'nope'",
        f"{name}:other": "not a workhorse.App",
        name: "2 workhorse.App",
        ":app": "module:attribute",
    }
    for reference, message in cases.items():
        with pytest.raises(AppLoadError, match=message) as info:
            load_app(reference)
        assert isinstance(info.value, WorkhorseError)
        assert "\n" not in str(info.value)


def test_load_app_says_an_app_module_own_import_error_in_one_line(
    app_dir: tuple[Path, str],
) -> None:
    # A dependency missing inside the app's own module is the app's bug: one line that names
    # it (the CLI prints it, exit 1), with the original chained for `workhorse -v`.
    path, name = app_dir
    missing = name[:3]  # a prefix of the module's own name, but another module
    (path / f"{name}.py").write_text(f"import {missing}\n")
    with pytest.raises(AppLoadError) as info:
        load_app(f"{name}:app")
    assert isinstance(info.value.__cause__, ModuleNotFoundError)
    assert f"No module named {missing!r}" in str(info.value) and "\n" not in str(info.value)


def test_public_names() -> None:
    for name in ("App", "QueueSpec", "Backoff", "JobHandle", "Task", "load_app", "SyncReport"):
        assert hasattr(workhorse, name)


def test_python_dash_c_gets_a_task_name_and_a_lambda_is_told_how_to_fix_it() -> None:
    import subprocess

    program = (
        "import workhorse\n"
        "from workhorse.testing import eager\n"
        "app = workhorse.App('repl', database_url='postgresql://nobody@127.0.0.1:1/none')\n"
        "@app.task\n"
        "def add(a, b):\n"
        "    return a + b\n"
        "with eager(app):\n"
        "    print(add.name, add.delay(2, 3).get())\n"
        "try:\n"
        "    app.task(lambda: None)\n"
        "except workhorse.InvalidOptionsError as exc:\n"
        "    print(exc)\n"
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.splitlines()
    assert first == "__main__.add 5"
    assert "python -c, stdin or a REPL" in second and "@app.task(name=" in second
