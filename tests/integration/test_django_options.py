"""`contrib.django.database_url()` keeps `DATABASES[...]['OPTIONS']` (issue 24, item 10): with
`sslmode=verify-full` workhorse must refuse a server it cannot verify, as Django does, instead of
silently falling back to libpq's `prefer`. Django runs in a child process (its settings are
global), against the real test server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

pytest.importorskip("django")

CHILD = textwrap.dedent(
    """
    import json, sys
    import django
    from django.conf import settings
    settings.configure(DATABASES={"default": json.loads(sys.argv[1])}, USE_TZ=True)
    django.setup()
    from workhorse.contrib import django as wh_django
    from workhorse.errors import WorkhorseError
    try:
        url = wh_django.database_url()
    except WorkhorseError as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
        raise SystemExit(0)
    from django.db import connection
    try:
        connection.ensure_connection()
        django_connects = True
    except Exception:
        django_connects = False
    print(json.dumps({"url": url, "django_connects": django_connects}))
    """
)


def _database_entry(database_url: str, options: dict[str, Any]) -> dict[str, Any]:
    params = conninfo_to_dict(database_url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": params["dbname"],
        "USER": params.get("user", ""),
        "PASSWORD": params.get("password", ""),
        "HOST": params.get("host", ""),
        "PORT": params.get("port", ""),
        "OPTIONS": options,
    }


def _child(database_url: str, options: dict[str, Any]) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(_database_entry(database_url, options))],
        capture_output=True, text=True, timeout=60,
        env={k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_sslmode_verify_full_is_kept_and_enforced(database_url: str, tmp_path: Any) -> None:
    options = {"sslmode": "verify-full", "sslrootcert": str(tmp_path / "no-such-root.crt")}
    report = _child(database_url, options)
    params = conninfo_to_dict(report["url"])
    assert params["sslmode"] == "verify-full"
    assert params["sslrootcert"] == options["sslrootcert"]
    # Over TCP the server cannot be verified (no such root certificate): Django refuses, and so
    # must workhorse. Over a Unix socket (the embedded server) libpq ignores sslmode: both connect.
    # Either way workhorse's connection does what Django's does.
    over_socket = str(conninfo_to_dict(database_url).get("host", "")).startswith("/")
    assert report["django_connects"] is over_socket
    if over_socket:
        psycopg.connect(report["url"], connect_timeout=5).close()
    else:
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(report["url"], connect_timeout=5).close()


def test_libpq_options_reach_the_session(database_url: str) -> None:
    options = {
        "options": "-c search_path=wh_from_options",
        "application_name": "wh-django-options",
        "connect_timeout": 7,
        # Django's own, not libpq's: left out of the conninfo.
        "isolation_level": 2,
        "server_side_binding": True,
    }
    report = _child(database_url, options)
    assert report["django_connects"] is True
    params = conninfo_to_dict(report["url"])
    assert params["connect_timeout"] == "7"
    assert "isolation_level" not in params and "server_side_binding" not in params
    with psycopg.connect(report["url"]) as conn:
        row = conn.execute(
            "SELECT current_setting('search_path'), current_setting('application_name')"
        ).fetchone()
    assert row == ("wh_from_options", "wh-django-options")


def test_user_host_and_port_win_over_options_as_in_django(database_url: str) -> None:
    entry = conninfo_to_dict(database_url)
    report = _child(database_url, {"host": "/nonexistent", "dbname": entry["dbname"]})
    assert conninfo_to_dict(report["url"]).get("host") == entry.get("host")
    assert report["django_connects"] is True


def test_an_option_that_is_not_libpq_is_a_typed_error(database_url: str) -> None:
    report = _child(database_url, {"sslmod": "require"})
    assert report["error"] == "InvalidOptionsError"
    assert "sslmod" in report["message"]
