// OpenTelemetry trace context, when the application has `@opentelemetry/api`. It is optional:
// loaded on first use, and without it (not installed, or failing to load) this module does
// nothing, so the package keeps no run-time dependency.
//
// An enqueue carries the caller's active trace context in the task's headers (the global
// propagator's `traceparent` and `tracestate`) unless the headers hold a `traceparent`:
// explicit headers win. A worker runs each handler call in a consumer span `process {queue}`,
// a child of the producer's span when the claim says `continues_trace` (the first attempt of
// a task that was due at once), else the root of a new trace with a link to the producer's
// span, so a task delayed by a week does not make a week-long trace.
//
// No type of `@opentelemetry/api` appears in what this module exports: the package's
// declarations compile without it.

import type { ClaimedTask } from "./types.js";
import { VERSION } from "./version.js";

type Api = typeof import("@opentelemetry/api");
type Span = import("@opentelemetry/api").Span;
type Tracer = import("@opentelemetry/api").Tracer;

// a variable, not a literal: bundlers leave the optional import alone
const MODULE = "@opentelemetry/api";
let loading: Promise<Api | null> | undefined;
let tracer: Tracer | undefined;

function otel(): Promise<Api | null> {
  loading ??= import(MODULE).then(
    // ES modules see a CommonJS build's exports as named ones, or only as `default`
    (m) => ((m?.trace ? m : m?.default?.trace ? m.default : null) as Api | null),
    () => null,
  );
  return loading;
}

const TRACE_HEADERS = ["traceparent", "tracestate"] as const;
// the server's limits on headers: what is added must never make it refuse an enqueue
const MAX_HEADERS = 32;
const MAX_VALUE_BYTES = 1024;
const MAX_TOTAL_BYTES = 4096;
const printable = (v: string) => v.length <= MAX_VALUE_BYTES && /^[\x20-\x7e]*$/.test(v);

/**
 * `task` with the caller's trace context added to its `headers`, unless they hold a
 * `traceparent` in any case; `task` itself (never changed) when there is nothing to add, or
 * when adding it would take the headers past the server's limits.
 */
export async function withTraceContext<T extends { headers?: Record<string, string> }>(task: T): Promise<T> {
  const api = await otel();
  const given: unknown = task.headers ?? {};
  if (!api || typeof given !== "object" || given === null) return task; // the server's 400 names a bad one
  const names = new Set(Object.keys(given).map((k) => k.toLowerCase()));
  if (names.has("traceparent")) return task;
  const carrier: Record<string, string> = {};
  api.propagation.inject(api.context.active(), carrier);
  const added: Record<string, string> = {};
  for (const k of TRACE_HEADERS) {
    const v = carrier[k];
    if (typeof v === "string" && !names.has(k) && printable(v)) added[k] = v;
  }
  if (added.traceparent === undefined) return task;
  const headers = { ...(given as Record<string, string>), ...added };
  const size = Object.entries(headers).reduce((n, [k, v]) => n + k.length + String(v).length, 0);
  if (Object.keys(headers).length > MAX_HEADERS || size > MAX_TOTAL_BYTES) return task;
  return { ...task, headers };
}

/** What a worker answers for one run (its `Verdict`). */
export interface Answer {
  kind: "ack" | "nack" | "release";
  error?: string;
  permanent?: boolean;
}

/** The consumer span of one handler call; without OpenTelemetry every method does nothing. */
export interface Run {
  /** Calls `fn` with the span current, so the handler's own spans are its children. */
  active<R>(fn: () => R): R;
  /** The handler failed with `e`: recorded on the span. */
  raised(e: unknown): void;
  /**
   * Ends the span with what the worker answers: `dueq.task.outcome` `succeeded`, `dead` (a
   * permanent failure, or a failure of the last attempt) or `retried`, and status ERROR for a
   * failed attempt. A task handed back unfinished (`release`) gets no outcome.
   */
  end(answer: Answer): void;
}

class SpanRun implements Run {
  readonly #api: Api;
  readonly #span: Span;
  readonly #last: boolean;

  constructor(api: Api, span: Span, last: boolean) {
    this.#api = api;
    this.#span = span;
    this.#last = last;
  }

  active<R>(fn: () => R): R {
    const api = this.#api;
    return api.context.with(api.trace.setSpan(api.context.active(), this.#span), fn);
  }

  raised(e: unknown): void {
    this.#span.recordException(e instanceof Error ? e : String(e));
  }

  end(answer: Answer): void {
    const span = this.#span;
    if (answer.kind === "ack") {
      span.setAttribute("dueq.task.outcome", "succeeded");
    } else if (answer.kind === "nack") {
      span.setAttribute("dueq.task.outcome", answer.permanent || this.#last ? "dead" : "retried");
      span.setStatus({ code: this.#api.SpanStatusCode.ERROR, message: answer.error });
    }
    span.end();
  }
}

const OFF: Run = { active: (fn) => fn(), raised: () => {}, end: () => {} };

/**
 * Starts the consumer span of `task`'s run on `queue` (made current by `Run.active`).
 * `leaseMs` is the lease the claim asked for: from a server that does not send the claim's
 * time, that is the lease deadline minus `leaseMs`.
 */
export async function startRun(queue: string, task: ClaimedTask, leaseMs: number): Promise<Run> {
  const api = await otel();
  if (!api) return OFF;
  try {
    return start(api, queue, task, leaseMs);
  } catch {
    return OFF; // tracing never stops a worker
  }
}

function start(api: Api, queue: string, task: ClaimedTask, leaseMs: number): Run {
  // a proxy until the application registers its tracer provider, then that provider's
  tracer ??= api.trace.getTracer("dueq", VERSION);
  const claimedAtMs = task.claimed_at_ms ?? task.lease_expires_at_ms - leaseMs;
  const producerCtx = api.propagation.extract(api.ROOT_CONTEXT, task.headers ?? {});
  const producer = api.trace.getSpanContext(producerCtx);
  const attributes: Record<string, string | number> = {
    "messaging.system": "dueq",
    "messaging.destination.name": queue,
    "messaging.operation.type": "process",
    "messaging.message.id": task.id,
    "dueq.task.attempt": task.attempt,
    "dueq.task.due_at_ms": task.due_at_ms,
    "dueq.task.lateness_ms": Math.max(0, claimedAtMs - task.due_at_ms),
  };
  if (task.key != null) attributes["dueq.task.key"] = task.key;
  if (task.group != null) attributes["dueq.task.group"] = task.group;
  const continues = task.continues_trace === true;
  // a child of the producer's span, or a new trace (the root context: no parent) linked to it
  const links = !continues && producer && api.isSpanContextValid(producer) ? [{ context: producer }] : [];
  const span = tracer.startSpan(
    `process ${queue}`,
    { kind: api.SpanKind.CONSUMER, attributes, links, root: !continues },
    continues ? producerCtx : api.ROOT_CONTEXT,
  );
  const last = task.max_attempts !== undefined && task.attempt >= task.max_attempts;
  return new SpanRun(api, span, last);
}
