"""What the worker loads: `workhorse worker shop.worker:app` (run from examples/django).
Django is set up before the tasks module is imported, in the supervisor, before any fork."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
django.setup()

from shop.tasks import app  # noqa: E402

__all__ = ["app"]
