"""workhorse: a Python task framework on PostgreSQL with fleet-wide concurrency budgets."""

from .app import App, load_app
from .errors import (
    AppLoadError,
    DatabaseError,
    EmbeddedServerError,
    InvalidOptionsError,
    InvalidPolicyError,
    JobNotFoundError,
    PayloadError,
    PolicyConflictError,
    SchemaVersionError,
    StaleLeaseError,
    TaskCanceledError,
    TaskFailedError,
    UnknownTaskError,
    WorkhorseError,
)
from .handle import JobHandle
from .queue import AsyncQueue, Queue
from .retry import Backoff
from .task import Task
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
    "JobNotFoundError",
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
    "TaskCanceledError",
    "TaskFailedError",
    "UnknownTaskError",
    "WorkerInfo",
    "WorkhorseError",
    "load_app",
]
