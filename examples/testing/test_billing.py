"""A user's test suite for billing.py: eager() for unit tests (no database), and drain() with
assert_enqueued() on the database of the workhorse pytest plugin for integration tests.

    pytest examples/testing        # WORKHORSE_TEST_DATABASE_URL, or the embedded server

tests/acceptance/test_user_suite.py runs this file in CI.
"""

from __future__ import annotations

from collections.abc import Iterator

import billing
import pytest

import workhorse
from workhorse.testing import DrainReport, assert_enqueued, drain, eager, refute_enqueued

# ---- unit tests: eager, no database ---------------------------------------------------------


def test_close_month_returns_the_total_and_sends_every_invoice() -> None:
    billing.sent.clear()
    with eager(billing.app):
        assert billing.close_month.delay("acme", [10, 20]).get() == 30
    assert [invoice["number"] for invoice in billing.sent] == [1, 2]


def test_send_invoice_reports_where_it_went() -> None:
    with eager(billing.app):
        handle = billing.send_invoice.delay(
            {"tenant": "acme", "number": 1, "amount": 5, "email": "a@acme.example"})
        assert handle.get() == {"sent_to": "a@acme.example", "attempt": 1}


def test_a_busy_provider_snoozes_without_using_an_attempt() -> None:
    billing.busy_for.add(1)
    with eager(billing.app):  # eager() runs a snoozed job again at once
        handle = billing.send_invoice.delay(
            {"tenant": "acme", "number": 1, "amount": 5, "email": "a@acme.example"})
        assert handle.get()["attempt"] == 1


def test_a_bad_call_is_refused_at_enqueue() -> None:
    with eager(billing.app), pytest.raises(workhorse.InvalidOptionsError):
        billing.close_month.delay("acme")  # amounts is missing


# ---- integration tests: a real database per test ---------------------------------------------


@pytest.fixture
def app(workhorse_database_url: str) -> Iterator[workhorse.App]:
    """billing.app on this test's fresh database, with its limits synced."""
    billing.app.close()
    billing.app.database_url = workhorse_database_url
    billing.app.sync()
    billing.sent.clear()
    yield billing.app
    billing.app.close()


def test_close_month_enqueues_then_drains(app: workhorse.App) -> None:
    billing.close_month.delay("acme", [10, 20, 30])
    assert_enqueued(app, billing.close_month, args=("acme", [10, 20, 30]), count=1)
    refute_enqueued(app, billing.send_invoice)  # nothing is sent before close_month runs

    report = drain(app)  # close_month, then the three mails it enqueued
    assert report == DrainReport(succeeded=4, failed=0, retried=0, held=0)
    assert sorted(invoice["number"] for invoice in billing.sent) == [1, 2, 3]
    refute_enqueued(app, billing.send_invoice)


def test_the_mail_queue_is_governed(app: workhorse.App) -> None:
    assert app.sync().unchanged == ["billing-mail"]  # the fixture synced it
    billing.close_month.delay("acme", [1])
    billing.close_month.delay("globex", [2])
    assert drain(app, queues=["billing.close_month"]) == DrainReport(succeeded=2)
    assert_enqueued(app, billing.send_invoice, count=2)  # waiting in the governed queue
    assert drain(app, queues=["billing-mail"]) == DrainReport(succeeded=2)
