"""The contrib app's config, labelled `workhorse`: `INSTALLED_APPS += ["workhorse.contrib.django"]`.
"""

from __future__ import annotations

from django.apps import AppConfig


class WorkhorseConfig(AppConfig):
    """Installs workhorse into Django at setup: the database rule, the joined transactions, the
    worker's connection hooks, autodiscovery of `tasks.py` (see `workhorse.contrib.django`).

    >>> from django.apps import apps                                  # doctest: +SKIP
    >>> apps.get_app_config("workhorse").name
    'workhorse.contrib.django'
    """

    name = "workhorse.contrib.django"
    label = "workhorse"
    verbose_name = "workhorse"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import _wiring

        _wiring.install()
