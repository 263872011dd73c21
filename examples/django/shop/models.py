from django.db import models


class Order(models.Model):
    total = models.IntegerField()
    receipt_sent = models.BooleanField(default=False)

    class Meta:
        app_label = "shop"
