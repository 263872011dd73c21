"""The `workhorse` command: each verb is a thin call into the modules, rendered with rich.

One room per concern: `_base` (the group, its options, errors, connections), `_render` (tables),
`_worker` (worker, sync), `_read` (the read verbs), `_write` (the operator's write verbs),
`_dead` (dead letters, audit), `_keys` (per-key limits), `_db` (migrate, db), `_serve`
(dashboard, demo). Importing a room registers its verbs on `main`.
"""

from __future__ import annotations

# Each room is imported for the verbs it registers on `main`.
from . import _db, _dead, _history, _keys, _read, _serve, _worker, _write  # noqa: F401
from ._base import console, error_console, main

__all__ = ["console", "error_console", "main"]
