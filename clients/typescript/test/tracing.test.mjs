// OpenTelemetry: an enqueue carries the caller's trace context; the worker runs each task in a
// consumer span, a child of the producer's span for a task due at once, else a new trace
// linked to it. Checked with the SDK's in-memory exporter (test-only dependencies). Without
// @opentelemetry/api the package works as before: test/package.test.mjs runs it so.
import assert from "node:assert/strict";
import { AsyncLocalStorage } from "node:async_hooks";
import { after, before, test } from "node:test";
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, context, propagation, trace } from "@opentelemetry/api";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { Client, Worker, fail } from "../dist/index.js";
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { binary, fresh, startServer, waitUntil } from "./server.mjs";

// What a Node SDK setup registers (NodeTracerProvider.register()): the W3C propagator, and a
// context manager on AsyncLocalStorage, here in its few lines.
class AlsContextManager {
  #als = new AsyncLocalStorage();
  active() {
    return this.#als.getStore() ?? ROOT_CONTEXT;
  }
  with(ctx, fn, thisArg, ...args) {
    return this.#als.run(ctx, () => fn.call(thisArg, ...args));
  }
  bind(ctx, target) {
    return typeof target === "function" ? (...args) => this.with(ctx, target, undefined, ...args) : target;
  }
  enable() {
    return this;
  }
  disable() {
    this.#als.disable();
    return this;
  }
}

const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
trace.setGlobalTracerProvider(provider);
propagation.setGlobalPropagator(new W3CTraceContextPropagator());
context.setGlobalContextManager(new AlsContextManager());
const tracer = provider.getTracer("dueq-tests");

let server, client;
before(async () => {
  server = await startServer();
  client = new Client(server.url, { token: server.token });
});
after(() => server?.stop());

const traceparent = (span) => {
  const c = span.spanContext();
  return `00-${c.traceId}-${c.spanId}-${c.traceFlags.toString(16).padStart(2, "0")}`;
};
const runsOf = (q) => exporter.getFinishedSpans().filter((s) => s.name === `process ${q.name}`);

/** Runs `fn` in a span "produce" (the active one while it runs); the span and `fn`'s answer. */
async function producing(fn) {
  return tracer.startActiveSpan("produce", async (span) => {
    try {
      return [span, await fn()];
    } finally {
      span.end();
    }
  });
}

/** Runs a worker on `q` until `n` runs ended; their spans, in start order. */
async function work(q, handler, n) {
  const w = new Worker(client, q, handler, { pollMs: 200, handleSignals: false });
  const run = w.run();
  try {
    await waitUntil(() => runsOf(q).length >= n, 10_000, `${n} spans`);
  } finally {
    w.stop();
    await run;
  }
  const ns = (s) => s.startTime[0] * 1e9 + s.startTime[1];
  return runsOf(q).sort((a, b) => ns(a) - ns(b));
}

test("an enqueue carries the active span's context; explicit headers win", async () => {
  const q = client.queue(fresh());
  const own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  // a 33rd header would be refused: the trace context is left out, the enqueue stands
  const full = Object.fromEntries(Array.from({ length: 32 }, (_, i) => [`h${i}`, "v"]));
  const [producer, [e, batch, mine, packed]] = await producing(async () => [
    await q.enqueue("x", { headers: { "x-a": "1" } }),
    await q.enqueueBatch([{ payload: "b" }, { payload: "c", headers: { k: "v" } }]),
    await q.enqueue("y", { headers: { TraceParent: own } }),
    await q.enqueue("full", { headers: full }),
  ]);
  const tp = traceparent(producer);
  assert.deepEqual((await q.get(e.id)).headers, { "x-a": "1", traceparent: tp });
  assert.deepEqual((await q.get(batch[0].id)).headers, { traceparent: tp });
  assert.deepEqual((await q.get(batch[1].id)).headers, { k: "v", traceparent: tp });
  // explicit headers win (in any case); nothing else is added
  assert.deepEqual((await q.get(mine.id)).headers, { traceparent: own });
  assert.deepEqual((await q.get(packed.id)).headers, full);
  // no active span: nothing added
  assert.deepEqual((await q.get((await q.enqueue("z")).id)).headers, {});
});

test("a task due at once runs in a child span of the producer", async () => {
  const q = client.queue(fresh());
  const [producer, e] = await producing(() => q.enqueue({ n: 1 }, { key: "order:1", group: "acme" }));
  let task, current;
  const [span] = await work(q, (t) => {
    task = t;
    current = trace.getActiveSpan()?.spanContext().spanId;
  }, 1);
  const pc = producer.spanContext();
  assert.equal(task.continues_trace, true);
  assert.equal(span.kind, SpanKind.CONSUMER);
  assert.equal(span.spanContext().traceId, pc.traceId);
  assert.equal(span.parentSpanContext?.spanId, pc.spanId);
  assert.deepEqual(span.links, []);
  // the handler runs with the span active: its own spans are children
  assert.equal(current, span.spanContext().spanId);
  assert.equal(span.instrumentationScope.name, "dueq");
  // the claim's time: as the server sends it, else the lease deadline less the worker's lease
  const claimedAtMs = task.claimed_at_ms ?? task.lease_expires_at_ms - 30_000;
  assert.deepEqual(span.attributes, {
    "messaging.system": "dueq",
    "messaging.destination.name": q.name,
    "messaging.operation.type": "process",
    "messaging.message.id": e.id,
    "dueq.task.key": "order:1",
    "dueq.task.group": "acme",
    "dueq.task.attempt": 1,
    "dueq.task.due_at_ms": e.due_at_ms,
    "dueq.task.lateness_ms": Math.max(0, claimedAtMs - e.due_at_ms),
    "dueq.task.outcome": "succeeded",
  });
  assert.equal(span.status.code, SpanStatusCode.UNSET);
});

test("a delayed task starts a new trace with a link to the producer", async () => {
  const q = client.queue(fresh());
  const [producer, e] = await producing(() => q.enqueue("later", { delay_ms: 1000 }));
  const seen = [];
  const [span] = await work(q, (t) => void seen.push(t), 1);
  const pc = producer.spanContext();
  assert.equal(seen[0].continues_trace, false);
  assert.equal(span.parentSpanContext, undefined);
  assert.notEqual(span.spanContext().traceId, pc.traceId);
  assert.deepEqual(span.links.map((l) => [l.context.traceId, l.context.spanId]), [[pc.traceId, pc.spanId]]);
  assert.equal(span.attributes["messaging.message.id"], e.id);
  assert.equal("dueq.task.key" in span.attributes || "dueq.task.group" in span.attributes, false);
  assert.ok(Number.isInteger(span.attributes["dueq.task.lateness_ms"]) && span.attributes["dueq.task.lateness_ms"] >= 0);
  assert.equal(span.attributes["dueq.task.outcome"], "succeeded");
});

test("a failed attempt is an error, retried; its retry is a new trace linked to the producer", async () => {
  const q = client.queue(fresh());
  await q.updateSettings({ backoff: { base_ms: 100, factor: 1, max_ms: 100 } });
  const [producer] = await producing(() => q.enqueue("flaky"));
  const [first, second] = await work(q, (t) => {
    if (t.attempt === 1) throw new RangeError("payment service down");
  }, 2);
  const pc = producer.spanContext();
  assert.equal(first.status.code, SpanStatusCode.ERROR);
  assert.equal(first.status.message, "RangeError: payment service down");
  assert.deepEqual(first.events.map((ev) => [ev.name, ev.attributes["exception.type"]]), [["exception", "RangeError"]]);
  assert.equal(first.attributes["dueq.task.outcome"], "retried");
  assert.equal(first.parentSpanContext?.spanId, pc.spanId);
  assert.equal(second.attributes["dueq.task.attempt"], 2);
  assert.equal(second.attributes["dueq.task.outcome"], "succeeded");
  assert.equal(second.parentSpanContext, undefined);
  assert.deepEqual(second.links.map((l) => l.context.spanId), [pc.spanId]);
});

test("the last attempt's failure and a permanent one are dead", async () => {
  const q = client.queue(fresh());
  await q.enqueue("last", { max_attempts: 1 });
  await q.enqueue("fail");
  const spans = await work(q, (t) => {
    if (t.payload === "fail") return fail("refunded");
    throw new Error("boom");
  }, 2);
  assert.deepEqual(spans.map((s) => s.attributes["dueq.task.outcome"]), ["dead", "dead"]);
  assert.ok(spans.every((s) => s.status.code === SpanStatusCode.ERROR));
  assert.deepEqual(spans.map((s) => s.events.length).sort(), [0, 1]); // only the exception is an event
});

test("a Rust producer's trace goes on in the TypeScript worker", async () => {
  const q = client.queue(fresh());
  const [traceId, spanId] = [randomBytes(16).toString("hex"), randomBytes(8).toString("hex")];
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("OTEL_")));
  const r = spawnSync(binary(), ["--redis", server.redisUrl(), "enqueue", q.name, "--payload", "{}"], {
    env: { ...env, TRACEPARENT: `00-${traceId}-${spanId}-01` },
  });
  assert.equal(r.status, 0, String(r.stderr));
  const [span] = await work(q, () => {}, 1);
  assert.equal(span.spanContext().traceId, traceId);
  assert.equal(span.parentSpanContext?.spanId, spanId);
});
