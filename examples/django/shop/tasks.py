"""The shop's workhorse app and its task. Importing this needs Django set up (the task uses
the ORM): the web process has done it; the worker imports `shop.worker`, which does it first."""

from django.db import transaction

import workhorse
from workhorse.contrib import django as wh_django

from .models import Order

app = workhorse.App("shop", database_url=wh_django.database_url())


@app.task(queue="receipts", max_active=2)
def send_receipt(order_id: int) -> int:
    Order.objects.filter(id=order_id).update(receipt_sent=True)
    return order_id


def place_order(total: int) -> Order:
    """The order and its receipt job commit together, or neither does."""
    with transaction.atomic():
        order = Order.objects.create(total=total)
        with app.using(wh_django.connection()):
            send_receipt.delay(order.id)
    return order


def place_order_on_commit(total: int) -> Order:
    """The alternative: enqueue after Django commits (on the app's own pool)."""
    with transaction.atomic():
        order = Order.objects.create(total=total)
        wh_django.on_commit(send_receipt, order.id)
    return order
