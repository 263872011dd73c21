"""Every public name has a docstring with a short example, and the examples that need no
database run.

The public names are `workhorse.__all__`, and for each class among them its public methods and
properties (those defined by workhorse itself, including what it inherits from a workhorse base:
App's `send_task` is AppEnqueuer's). The convention: a docstring *has an example* when one of its
lines starts, after indentation, with `>>> ` (doctest's prompt). An example that needs a database,
an app or a connection says `# doctest: +SKIP`; every other example is run by doctest, with the
names of `workhorse.__all__` in scope.
"""

from __future__ import annotations

import doctest
import inspect
import re
from collections.abc import Iterator
from typing import Any

import pytest

import workhorse

EXAMPLE = re.compile(r"^\s*>>> ", re.MULTILINE)


def _public_members(cls: type) -> Iterator[tuple[str, Any]]:
    """`(name, function or property)` for each public method and property workhorse defines on
    `cls` or on a workhorse base of it (not what it inherits from Exception, StrEnum, ...)."""
    for name in sorted(dir(cls)):
        if name.startswith("_"):
            continue
        owner = next((klass for klass in cls.__mro__ if name in vars(klass)), None)
        if owner is None or not owner.__module__.startswith("workhorse"):
            continue
        attr = vars(owner)[name]
        if isinstance(attr, staticmethod | classmethod):
            attr = attr.__func__
        if inspect.isfunction(attr) or isinstance(attr, property):
            yield name, attr


def public_names() -> list[tuple[str, Any]]:
    """`(dotted name, object)` for every name in workhorse.__all__ and every public member of
    the classes among them."""
    found: list[tuple[str, Any]] = []
    for name in workhorse.__all__:
        obj = getattr(workhorse, name)
        found.append((name, obj))
        if inspect.isclass(obj):
            found.extend((f"{name}.{member}", attr) for member, attr in _public_members(obj))
    return found


def _own_doc(obj: Any) -> str:
    # A class's own docstring (a dataclass without one gets its signature as __doc__).
    doc = vars(obj).get("__doc__") if inspect.isclass(obj) else obj.__doc__
    return doc or ""


def test_the_public_names_are_found_by_introspection() -> None:
    names = dict(public_names())
    # A few that must be among them, so that the walk cannot silently find nothing.
    for expected in ("App", "App.task", "App.send_task", "Queue.enqueue", "AsyncQueue.claim",
                     "JobHandle.get", "Task.delay", "JobContext.cancel_requested", "Retry"):
        assert expected in names
    assert len([n for n in names if n.startswith("Queue.")]) >= 27
    assert "WorkhorseError.with_traceback" not in names  # Exception's, not ours


@pytest.mark.parametrize(("name", "obj"), public_names(), ids=[n for n, _ in public_names()])
def test_every_public_name_has_a_docstring_with_an_example(name: str, obj: Any) -> None:
    doc = _own_doc(obj)
    assert doc.strip(), f"{name} has no docstring"
    assert EXAMPLE.search(doc), (
        f"{name}'s docstring has no example (a line starting with '>>> '):\n{doc}")


def _globs() -> dict[str, Any]:
    globs = {name: getattr(workhorse, name) for name in workhorse.__all__}
    globs["__name__"] = "docstring_example"
    return globs


@pytest.mark.parametrize(("name", "obj"), public_names(), ids=[n for n, _ in public_names()])
def test_the_examples_that_need_no_database_run(name: str, obj: Any) -> None:
    doc = _own_doc(obj)
    test = doctest.DocTestParser().get_doctest(doc, _globs(), name, None, 0)
    runner = doctest.DocTestRunner(
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
