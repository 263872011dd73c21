"""The broken variant of the named-budget fleet's workers, for the claim-count checker: a slot
that the claim tells to sleep until a budget's rate allows the next start (the next-start
marker row) polls every 2 ms instead. Serves the same apps: `owner_app`, `user_app`."""

from __future__ import annotations

from typing import Any

from workhorse._ops import admission

from .budget_owner import app as owner_app
from .budget_user import app as user_app

__all__ = ["owner_app", "user_app"]

_claimed = admission._claimed


def _polling(rows: list[Any]) -> Any:
    out = _claimed(rows)
    if out.next_start is not None:
        out.next_start = min(out.next_start, 0.002)
    return out


admission._claimed = _polling
