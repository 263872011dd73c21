"""For the plain CLI (`workhorse worker shop.worker:app`, run from examples/django): Django is
set up before the tasks module is imported. `python manage.py workhorse worker` needs none of
this: it sets Django up and takes the app from WORKHORSE_APP."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
django.setup()

from shop.tasks import app  # noqa: E402

__all__ = ["app"]
