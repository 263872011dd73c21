"""workhorse: a Python task framework on PostgreSQL with fleet-wide concurrency budgets."""

from .app import App, QueueSpec, load_app
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
from .retry import Backoff
from .task import JobHandle, Task
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
    "App",
    "AsyncQueue",
    "Backoff",
    "ConcurrencyPolicy",
    "ConcurrencyPolicyDefinition",
    "EnqueueOptions",
    "InvalidOptionsError",
    "InvalidPolicyError",
    "Job",
    "JobHandle",
    "JobStatus",
    "PayloadError",
    "PolicyConflictError",
    "PolicyHealth",
    "Queue",
    "QueueHealth",
    "QueueSpec",
    "SchemaVersionError",
    "StaleLeaseError",
    "SyncReport",
    "Task",
    "UnknownTaskError",
    "WorkhorseError",
    "load_app",
]
