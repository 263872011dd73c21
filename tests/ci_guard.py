"""Skips that must not hide a broken setup under CI.

`.ci/run` exports CI=1 and installs everything the suite needs (Chromium, PgBouncer, the test,
browser and examples extras). There a missing piece is a broken setup, so what would be a skip on
a developer's machine fails instead. A skip for something the machine really lacks (an
interpreter, docker) does not go through here, and keeps its reason.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import NoReturn

import pytest


def under_ci() -> bool:
    return os.environ.get("CI", "") not in ("", "0", "false")


def skip_or_fail(reason: str) -> NoReturn:
    """Skip (a developer's machine may lack it), or fail under CI (which installs it)."""
    if under_ci():
        pytest.fail(f"{reason} (CI=1: .ci/run installs this, so a skip would hide a broken setup)",
                    pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require(module: str, install: str) -> ModuleType:
    """`pytest.importorskip`, except that under CI a missing module fails."""
    try:
        return importlib.import_module(module)
    except ImportError:
        skip_or_fail(f"{module} is not installed ({install})")
