"""workhorse: a Python task framework on PostgreSQL with fleet-wide concurrency budgets."""

from .app import App, load_app
from .context import JobContext, Retry, Snooze, current_job
from .errors import (
    AppLoadError,
    DatabaseError,
    EmbeddedServerError,
    InvalidOptionsError,
    InvalidPolicyError,
    JobNotFoundError,
    JobTimeoutError,
    NoCurrentJobError,
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
    "JobContext",
    "JobHandle",
    "JobNotFoundError",
    "JobStatus",
    "JobTimeoutError",
    "NoCurrentJobError",
    "PayloadError",
    "PolicyConflictError",
    "PolicyHealth",
    "Queue",
    "QueueHealth",
    "QueueSpec",
    "Retry",
    "SchemaVersionError",
    "Snooze",
    "StaleLeaseError",
    "SyncReport",
    "Task",
    "TaskCanceledError",
    "TaskFailedError",
    "UnknownTaskError",
    "WorkerInfo",
    "WorkhorseError",
    "current_job",
    "load_app",
]
