"""Testing your own app: `eager()` for unit tests, `drain()` and `assert_enqueued()` against a
real database for integration tests, and (in `workhorse.pytest_plugin`) the fixture
`workhorse_database_url`.

    from workhorse.testing import assert_enqueued, drain, eager

    with eager(app):                      # like Celery's task_always_eager: no database at all
        assert add.delay(2, 3).get() == 5

    add.delay(2, 3)                       # against the test's database
    assert_enqueued(app, add, args=(2, 3))
    report = drain(app)                   # every ready job, through the real claim path
    assert report == DrainReport(succeeded=1, failed=0, retried=0, held=0)

See docs/testing.md for a whole test suite.
"""

from __future__ import annotations

from ._assertions import assert_enqueued, refute_enqueued
from ._drain import DrainReport, drain, drain_async
from ._eager import eager

# Also importable from here, as before the split (workhorse's own tests use them), though not
# part of the API a test suite writes.
from ._drain import DRAIN_MIN_LEASE as DRAIN_MIN_LEASE  # isort: skip
from ._eager import EAGER_LEASE as EAGER_LEASE  # isort: skip
from ._eager import EAGER_SNOOZE_LIMIT as EAGER_SNOOZE_LIMIT  # isort: skip
from ._eager import EagerRunner as EagerRunner  # isort: skip
from ._loops import on_a_loop as on_a_loop  # isort: skip
from ._loops import without_loop as without_loop  # isort: skip

__all__ = [
    "DrainReport",
    "assert_enqueued",
    "drain",
    "drain_async",
    "eager",
    "refute_enqueued",
]
