"""The benchmarks' pure parsers: /proc/<pid>/stat's CPU times and py-spy's raw (collapsed)
stacks, which bench_scale's CPU and frame figures are made of."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def common() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_bench_common", BENCHMARKS / "_common.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_proc_stat_counts_fields_after_the_last_parenthesis(common: ModuleType) -> None:
    # A command name with a space and a ')' of its own, as a postgres backend's can be.
    text = ("4242 (postgres: x) y) S 2232 4242 4242 0 -1 4194368 1051 0 0 0 "
            "17 5 3 2 20 0 1 0 9999 229027840 3000 18446744073709551615\n")
    stat = common.parse_proc_stat(text)
    assert (stat.ppid, stat.ticks, stat.reaped) == (2232, 17 + 5, 3 + 2)


def test_top_frames_sums_own_samples_of_the_innermost_frame(common: ModuleType) -> None:
    raw = "\n".join([
        "<module> (a.py:1);run (b.py:9);select (selectors.py:451) 50",
        "<module> (a.py:1);claim (c.py:3);select (selectors.py:451) 10",
        "<module> (a.py:1);claim (c.py:3) 25",
        "<module> (a.py:1);claim (c.py:3);dump (d.py:7) 25",
        "garbage without a count",
        "",
    ])
    assert common.top_frames(raw, n=2) == [("select (selectors.py:451)", 60),
                                           ("claim (c.py:3)", 25)]
    assert common.top_frames(raw)[-1] == ("dump (d.py:7)", 25)
