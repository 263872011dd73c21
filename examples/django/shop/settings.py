"""Settings of the example shop. PostgreSQL only (workhorse needs it): SHOP_DATABASE_URL, a
libpq DSN, names the database (default: the local `shop` database)."""

import os

from psycopg.conninfo import conninfo_to_dict

_db = conninfo_to_dict(os.environ.get("SHOP_DATABASE_URL", "dbname=shop"))

SECRET_KEY = "example-only"
DEBUG = False
USE_TZ = True
# The contrib app: `migrate` installs the workhorse schema, `manage.py workhorse` is the CLI, and
# an enqueue inside transaction.atomic() joins Django's transaction.
INSTALLED_APPS = ["workhorse.contrib.django", "shop"]
WORKHORSE_APP = "shop.tasks:app"  # what `manage.py workhorse worker` runs
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",  # psycopg 3 when it is installed
        "NAME": _db.get("dbname", "shop"),
        "USER": _db.get("user", ""),
        "PASSWORD": _db.get("password", ""),
        "HOST": _db.get("host", ""),
        "PORT": _db.get("port", ""),
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# Optional: where workhorse keeps its jobs, if not in the same database as the models.
# (Enqueueing inside the models' transaction needs the same database.)
# WORKHORSE_DATABASE_URL = "postgresql://..."
