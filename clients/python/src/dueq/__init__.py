"""dueq: the client and workers for a dueq server's HTTP API (``dueq serve``).

>>> from dueq import Client
>>> orders = Client("http://127.0.0.1:7878", token=None).queue("orders")  # doctest: +SKIP
>>> orders.enqueue({"order": 42}, key="order:42:cancel", delay_ms=30 * 60_000)  # doctest: +SKIP

See the README for workers (:class:`Worker`, :class:`AsyncWorker`) and webhooks.
"""

from ._version import __version__
from .aio import AsyncWorker
from .client import MAX_BATCH, Client, Queue
from .errors import (
    ConflictError,
    ConnectionFailedError,
    DueqError,
    InvalidInputError,
    NotFoundError,
    TimeoutError_,
    UnauthorizedError,
    UnavailableError,
)
from .models import (
    AckOutcome,
    CancelOutcome,
    ClaimedTask,
    DeadOutcome,
    DeadPage,
    DeadTask,
    Enqueued,
    NackOutcome,
    NackResult,
    QueueStats,
    QueuesPage,
    ReleaseOutcome,
    RescheduleOutcome,
    Rescheduled,
    Task,
    TaskSpec,
    WorkerInfo,
)
from .outcome import Fail, Retry
from .webhook import (
    WEBHOOK_ID_HEADER,
    WEBHOOK_SIGNATURE_HEADER,
    WEBHOOK_TIMESTAMP_HEADER,
    sign_webhook,
    verify_webhook,
)
from .worker import Worker, WorkerStats

__all__ = [
    "ConflictError",
    "ConnectionFailedError",
    "InvalidInputError",
    "NotFoundError",
    "TimeoutError_",
    "UnauthorizedError",
    "UnavailableError",
    "AckOutcome",
    "AsyncWorker",
    "CancelOutcome",
    "ClaimedTask",
    "Client",
    "DeadOutcome",
    "DeadPage",
    "DeadTask",
    "DueqError",
    "Enqueued",
    "Fail",
    "MAX_BATCH",
    "NackOutcome",
    "NackResult",
    "Queue",
    "QueueStats",
    "QueuesPage",
    "ReleaseOutcome",
    "RescheduleOutcome",
    "Rescheduled",
    "Retry",
    "Task",
    "TaskSpec",
    "Worker",
    "WorkerInfo",
    "WEBHOOK_ID_HEADER",
    "WEBHOOK_SIGNATURE_HEADER",
    "WEBHOOK_TIMESTAMP_HEADER",
    "WorkerStats",
    "__version__",
    "sign_webhook",
    "verify_webhook",
]
