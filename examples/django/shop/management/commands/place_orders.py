"""`python manage.py place_orders`: three orders, one rolled back; prints what it did as JSON."""

import json

from django.core.management.base import BaseCommand
from django.db import transaction

from shop.models import Order
from shop.tasks import app, place_order, place_order_on_commit, send_receipt


class Command(BaseCommand):
    help = "Place example orders, each with its receipt job"

    def handle(self, *args, **options):
        app.sync()  # the receipts queue's limit (max_active=2), fleet-wide
        first = place_order(10)
        second = place_order_on_commit(20)
        try:
            with transaction.atomic():
                doomed = Order.objects.create(total=30)
                send_receipt.delay(doomed.id)  # rolls back with the order
                raise RuntimeError("payment declined")
        except RuntimeError:
            pass
        app.close()
        self.stdout.write(json.dumps({
            "orders": [first.id, second.id],
            "rolled_back_orders": Order.objects.filter(total=30).count(),
        }))
