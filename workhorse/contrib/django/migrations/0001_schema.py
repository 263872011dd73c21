"""Installs (or brings forward) the workhorse schema on the App's database, in `manage.py
migrate`, so that the test database `manage.py test` creates has it too. The schema's own
versions are workhorse's (`install_schema()`, idempotent): this migration only calls it, so a
workhorse upgrade needs no new Django migration (the worker and `workhorse migrate` bring it
forward too)."""

from __future__ import annotations

from typing import Any

from django.db import migrations


def install(apps: Any, schema_editor: Any) -> None:
    from .. import _wiring

    _wiring.install_schema(schema_editor.connection)


class Migration(migrations.Migration):
    initial = True
    dependencies: list[tuple[str, str]] = []
    operations = [migrations.RunPython(install, migrations.RunPython.noop, elidable=False)]
