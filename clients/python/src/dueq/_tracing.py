"""OpenTelemetry trace context, when the ``opentelemetry`` package is installed.

It is optional: without it (not installed, or an import that fails) this module does
nothing, and ``dueq`` keeps depending on the standard library alone.

* An enqueue carries the caller's active trace context in the task's headers: the global
  propagator's ``traceparent`` and ``tracestate``, unless the headers already hold a
  ``traceparent`` (explicit headers win).
* A worker runs each handler call in a consumer span ``process {queue}``. It is a child of
  the producer's span when the claim says ``continues_trace`` (the first attempt of a task
  that was due at once); otherwise it starts a new trace with a link to the producer's span,
  so a task delayed by a week does not make a week-long trace.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Mapping

from ._version import __version__
from .outcome import Verdict

if TYPE_CHECKING:
    from .models import ClaimedTask

try:
    # `unused-ignore`: where the package is installed mypy reads its types and the ignore is
    # not needed; where it is not, the names are Any
    from opentelemetry import context as otel_context  # type: ignore[import-not-found,unused-ignore]
    from opentelemetry import propagate, trace  # type: ignore[import-not-found,unused-ignore]
    from opentelemetry.trace import (  # type: ignore[import-not-found,unused-ignore]
        Link,
        SpanKind,
        Status,
        StatusCode,
    )
except ImportError:
    ENABLED = False
else:
    ENABLED = True

__all__ = ["ENABLED", "Run", "inject", "start"]

TRACE_HEADERS = ("traceparent", "tracestate")

# the server's limits on headers: what is injected must never make it refuse an enqueue
MAX_HEADERS = 32
MAX_VALUE_BYTES = 1024
MAX_TOTAL_BYTES = 4096


def _printable(v: str) -> bool:
    return len(v) <= MAX_VALUE_BYTES and all(" " <= c <= "~" for c in v)


def inject(body: Dict[str, Any]) -> None:
    """Adds the caller's trace context to the ``headers`` of an enqueue body (one task),
    unless they hold a ``traceparent`` in any case. The caller's headers are copied, never
    changed. Nothing is added that would take the headers past the server's limits."""
    if not ENABLED:
        return
    given = body.get("headers")
    if given is None:
        given = {}
    elif not isinstance(given, Mapping):
        return  # the server's 400 names the field
    names = {str(k).lower() for k in given}
    if "traceparent" in names:
        return
    carrier: Dict[str, str] = {}
    propagate.inject(carrier)
    added = {
        k: carrier[k]
        for k in TRACE_HEADERS
        if k in carrier and k not in names and _printable(carrier[k])
    }
    if "traceparent" not in added:
        return
    merged = {**given, **added}
    size = sum(len(str(k)) + len(str(v)) for k, v in merged.items())
    if len(merged) > MAX_HEADERS or size > MAX_TOTAL_BYTES:
        return
    body["headers"] = merged


class Run:
    """The consumer span of one handler call: current while the handler runs (so its own
    spans are children), ended on leaving the ``with`` block. Without OpenTelemetry every
    method does nothing."""

    __slots__ = ("_span", "_token", "_last")

    def __init__(self, span: Any = None, last: bool = False) -> None:
        self._span = span
        self._token: Any = None
        self._last = last

    def __enter__(self) -> "Run":
        if self._span is not None:
            self._token = otel_context.attach(trace.set_span_in_context(self._span))
        return self

    def __exit__(self, *exc: object) -> None:
        if self._span is not None:
            otel_context.detach(self._token)
            self._span.end()

    def raised(self, exc: BaseException) -> None:
        """The handler raised: the exception is recorded on the span."""
        if self._span is not None:
            self._span.record_exception(exc)

    def answered(self, v: Verdict) -> None:
        """What the worker will answer: ``dueq.task.outcome`` (``succeeded``; ``dead`` for a
        permanent failure or a failure of the last attempt; else ``retried``), and status
        ERROR for a failed attempt."""
        if self._span is None:
            return
        kind, error, _, permanent = v
        if kind == "ack":
            outcome = "succeeded"
        else:
            outcome = "dead" if permanent or self._last else "retried"
            self._span.set_status(Status(StatusCode.ERROR, error))
        self._span.set_attribute("dueq.task.outcome", outcome)


_OFF = Run()
_tracer: Any = None


def start(task: "ClaimedTask", lease_ms: int) -> Run:
    """Starts the consumer span of ``task``'s run (made current by entering the
    :class:`Run`). ``lease_ms`` is the lease the claim asked for: from a server that does not
    send the claim's time, that is the lease deadline minus ``lease_ms``."""
    if not ENABLED:
        return _OFF
    try:
        return _start(task, lease_ms)
    except Exception:  # tracing never stops a worker
        return _OFF


def _start(task: "ClaimedTask", lease_ms: int) -> Run:
    global _tracer
    if _tracer is None:
        # a proxy until the application sets its tracer provider, then that provider's
        _tracer = trace.get_tracer("dueq", __version__)
    claimed_at_ms = task.claimed_at_ms
    if claimed_at_ms is None:
        claimed_at_ms = task.lease_expires_at_ms - lease_ms
    producer_ctx = propagate.extract(task.headers, context=otel_context.Context())
    producer = trace.get_current_span(producer_ctx).get_span_context()
    attributes: Dict[str, Any] = {
        "messaging.system": "dueq",
        "messaging.destination.name": task.queue,
        "messaging.operation.type": "process",
        "messaging.message.id": task.id,
        "dueq.task.attempt": task.attempt,
        "dueq.task.due_at_ms": task.due_at_ms,
        "dueq.task.lateness_ms": max(0, claimed_at_ms - task.due_at_ms),
    }
    if task.key is not None:
        attributes["dueq.task.key"] = task.key
    if task.group is not None:
        attributes["dueq.task.group"] = task.group
    links: List[Any] = []
    if task.continues_trace:
        parent = producer_ctx
    else:
        # a new trace (an empty context: no parent), linked to the producer's span
        parent = otel_context.Context()
        if producer.is_valid:
            links.append(Link(producer))
    span = _tracer.start_span(
        f"process {task.queue}",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes=attributes,
        links=links,
    )
    last = task.max_attempts is not None and task.attempt >= task.max_attempts
    return Run(span, last)
