"""A small app with a governed queue, as a user's project would have it: the code under test in
examples/testing/test_billing.py (see docs/testing.md)."""

from __future__ import annotations

from typing import Any

import workhorse
from workhorse import Snooze, current_job

app = workhorse.App("example-billing")

# At most 2 mails at once fleet-wide, and 1 per tenant: the mail provider's own limits.
mail = app.queue("billing-mail", max_active=2, max_active_per_key=1)


class ProviderBusy(Exception):
    """The mail provider said 429."""


sent: list[dict[str, Any]] = []  # stands in for the mail provider in this example
busy_for: set[int] = set()  # invoice numbers the provider turns away once (429)


@app.task(queue=mail, concurrency_key=lambda invoice: invoice["tenant"],
          retry_on=(ConnectionError,), timeout="30s", max_attempts=5)
def send_invoice(invoice: dict[str, Any]) -> dict[str, Any]:
    if invoice["number"] in busy_for:
        busy_for.discard(invoice["number"])
        raise Snooze("10s")  # the provider said 429: come back later, without using an attempt
    sent.append(invoice)
    return {"sent_to": invoice["email"], "attempt": current_job().attempt}


@app.task
def close_month(tenant: str, amounts: list[int]) -> int:
    """Bill every amount of the month: one mail job per invoice."""
    for number, amount in enumerate(amounts, start=1):
        send_invoice.delay({"tenant": tenant, "number": number, "amount": amount,
                            "email": f"billing@{tenant}.example"})
    return sum(amounts)
