"""The named-budget fleet, queue B: another namespace that names the budgets `budget_owner`
declares, by string only (a reference: it neither declares nor syncs them)."""

from __future__ import annotations

import workhorse

from .budget_owner import record

app = workhorse.App("nb-user")


@app.task(queue="nb-b", budget="cap3")
async def work_b(token: str, seconds: float) -> str:
    return await record("nb-b", token, seconds)
