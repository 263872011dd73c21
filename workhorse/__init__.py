"""workhorse: a Python task framework on PostgreSQL with fleet-wide concurrency budgets."""

from .app import App, load_app
from .errors import (
    AppLoadError,
    DatabaseError,
    EmbeddedServerError,
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
    QueueSpec,
    SyncReport,
    WorkerInfo,
)

__all__ = [
    "App",
    "AppLoadError",
    "AsyncQueue",
    "Backoff",
    "ConcurrencyPolicy",
    "ConcurrencyPolicyDefinition",
    "DatabaseError",
    "EmbeddedServerError",
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
    "WorkerInfo",
    "WorkhorseError",
    "load_app",
]
