"""The budgets browser test's app: a declared budget `openai` (max_active 2) shared by a queue
with a policy (`summaries`) and one without (`embeddings`), and a budget `partner` that this app
names and nobody declares. Every handler holds its place for the whole test."""

from __future__ import annotations

import asyncio

import workhorse

app = workhorse.App("budgetapp")
openai = app.budget("openai", max_active=2)


@app.task(queue="summaries", max_active=10, budget=openai)
async def summarize(n: int) -> None:
    await asyncio.sleep(120)


@app.task(queue="embeddings", budget=openai)
async def embed(n: int) -> None:
    await asyncio.sleep(120)


@app.task(queue="partner-sync", budget="partner")
async def push(n: int) -> None:
    await asyncio.sleep(120)
