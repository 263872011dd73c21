"""workhorse: a Python task framework on PostgreSQL with fleet-wide concurrency budgets."""

from .errors import (
    InvalidOptionsError,
    InvalidPolicyError,
    PayloadError,
    PolicyConflictError,
    SchemaVersionError,
    StaleLeaseError,
    UnknownTaskError,
    WorkhorseError,
)
from .queue import AsyncQueue, Queue
from .types import (
    ConcurrencyPolicy,
    ConcurrencyPolicyDefinition,
    EnqueueOptions,
    Job,
    JobStatus,
    PolicyHealth,
    QueueHealth,
    SyncReport,
)

__all__ = [
    "AsyncQueue",
    "ConcurrencyPolicy",
    "ConcurrencyPolicyDefinition",
    "EnqueueOptions",
    "InvalidOptionsError",
    "InvalidPolicyError",
    "Job",
    "JobStatus",
    "PayloadError",
    "PolicyConflictError",
    "PolicyHealth",
    "Queue",
    "QueueHealth",
    "SchemaVersionError",
    "StaleLeaseError",
    "SyncReport",
    "UnknownTaskError",
    "WorkhorseError",
]
