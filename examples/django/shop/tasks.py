"""The shop's workhorse app and its task (found by the contrib app's autodiscovery of
`tasks.py`). The App names no database: it uses Django's, read at first use (under
`manage.py test`, the test database)."""

from django.db import transaction

import workhorse
from workhorse.contrib import django as wh_django

from .models import Order

app = workhorse.App("shop")


@app.task(queue="receipts", max_active=2)
def send_receipt(order_id: int) -> int:
    order = Order.objects.get(id=order_id)  # the row the web process committed
    order.receipt_sent = True
    order.save(update_fields=["receipt_sent"])
    return order.id


def place_order(total: int) -> Order:
    """The order and its receipt job commit together, or neither does: inside atomic() the
    enqueue is on Django's own connection, in the block's transaction."""
    with transaction.atomic():
        order = Order.objects.create(total=total)
        send_receipt.delay(order.id)
    return order


def place_order_on_commit(total: int) -> Order:
    """The alternative: enqueue after Django commits (on the app's own pool)."""
    with transaction.atomic():
        order = Order.objects.create(total=total)
        wh_django.on_commit(send_receipt, order.id)
    return order
