"""The shop's own tests, run by `python manage.py test shop` (docs/frameworks.md shows them):
eager() in a TestCase with the ORM, drain() in a TestCase and in a TransactionTestCase."""

from django.test import TestCase, TransactionTestCase

from workhorse.testing import DrainReport, assert_enqueued, drain, eager

from .models import Order
from .tasks import app, place_order, send_receipt


class ReceiptTests(TestCase):
    def test_eager_runs_the_receipt_at_once(self):
        with eager(app):  # sync tasks run right here, no event loop: the ORM works
            order = place_order(10)
        order.refresh_from_db()
        self.assertTrue(order.receipt_sent)

    def test_the_job_is_enqueued_with_the_order(self):
        order = place_order(20)  # inside the test's transaction, on Django's connection
        assert_enqueued(app, send_receipt, args=[order.id], count=1)
        self.assertEqual(drain(app), DrainReport(succeeded=1))
        order.refresh_from_db()
        self.assertTrue(order.receipt_sent)


class CommittedReceiptTests(TransactionTestCase):
    def test_a_worker_would_send_the_committed_receipt(self):
        order = place_order(30)  # committed: the App's pool reads the test database
        self.assertEqual(drain(app), DrainReport(succeeded=1))
        self.assertTrue(Order.objects.get(id=order.id).receipt_sent)
