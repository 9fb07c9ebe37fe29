import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { hostname } from "node:os";
import { after, before, test } from "node:test";
import { Client, DueqError, TaskAbortedError, VERSION, Worker, fail, retry } from "../dist/index.js";
import { fresh, metric, scrape, startServer, waitUntil } from "./server.mjs";

let server, client;
before(async () => {
  server = await startServer();
  client = new Client(server.url, { token: server.token });
});
after(() => server?.stop());

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test("runs, acks, nacks and keeps the concurrency limit", async () => {
  const q = client.queue(fresh());
  await q.enqueueBatch(Array.from({ length: 40 }, (_, n) => ({ payload: { n } })));
  await q.enqueue("throw");
  await q.enqueue("retry");
  await q.enqueue("fail");
  let running = 0, peak = 0;
  const w = new Worker(client, q, async (t) => {
    running++;
    peak = Math.max(peak, running);
    try {
      await sleep(10); // some work, so that handlers overlap
      if (t.payload === "throw") throw new TypeError("no such order");
      if (t.payload === "retry") return retry(3_600_000, "later");
      if (t.payload === "fail") return fail("refunded");
    } finally {
      running--;
    }
  }, { concurrency: 4, claimMax: 10, pollMs: 200, handleSignals: false });
  const run = w.run();
  await waitUntil(() => w.stats.acked === 40 && w.stats.dead === 1 && w.stats.retried === 2, 10_000, "all answered");
  w.stop();
  const stats = await run;
  assert.ok(peak >= 2 && peak <= 4, `peak ${peak}`);
  assert.equal(stats.lease_lost, 0);
  const s = await q.stats();
  assert.deepEqual([s.succeeded_total, s.dead, s.active], [40, 1, 0]);
  const dead = (await q.deadList()).tasks[0];
  assert.equal(dead.last_error, "refunded");
  // the DLQ shows the attempts made against the attempts allowed (the queue's default, 5)
  assert.deepEqual([dead.attempt, dead.max_attempts], [1, 5]);
});

test("a thrown error is the task's last_error; long handlers keep their lease", async () => {
  const q = client.queue(fresh());
  const bad = await q.enqueue("bad");
  const slow = await q.enqueue("slow");
  const w = new Worker(client, q, async (t) => {
    if (t.payload === "bad") throw new RangeError("order 42");
    await sleep(3000); // the handler's own work: three times its 1 s lease
  }, { leaseMs: 1000, pollMs: 200, handleSignals: false });
  const run = w.run();
  await waitUntil(() => w.stats.acked === 1 && w.stats.retried >= 1, 15_000, "both answered");
  w.stop();
  const stats = await run;
  assert.equal(stats.lease_lost, 0);
  assert.equal(await q.get(slow.id), null);
  assert.equal((await q.get(bad.id)).last_error, "RangeError: order 42");
});

const SCRIPT = `
import { Client, Worker } from ${JSON.stringify(new URL("../dist/index.js", import.meta.url).href)};
const [url, token, queue] = process.argv.slice(1);
const w = new Worker(new Client(url, { token }), queue, async (t, { signal }) => {
  console.log("started " + t.id);
  await new Promise((r) => {
    const timer = setTimeout(r, 60_000);
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      console.log("aborted " + signal.reason.kind);
      r();
    });
  });
}, { concurrency: 1, claimMax: 1, pollMs: 200, graceMs: 200 });
const s = await w.run();
console.log("stopped " + s.released);
process.exit(0);
`;

test("SIGTERM stops gracefully, aborts the handler's signal and hands the lease back", async () => {
  const q = client.queue(fresh());
  const e = await q.enqueue("held");
  const p = spawn(process.execPath, ["--input-type=module", "-e", SCRIPT, server.url, server.token, q.name], { stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  p.stdout.on("data", (d) => (out += d));
  const exited = new Promise((r) => p.once("exit", r));
  try {
    await waitUntil(() => out.includes("started"), 15_000, "handler start");
    assert.equal(out.trim(), `started ${e.id}`);
    await waitUntil(async () => (await client.workers(q.name)).some((w) => w.pid === p.pid), 10_000, "the worker process listed");
    p.kill("SIGTERM");
    assert.equal(await exited, 0);
  } finally {
    if (p.exitCode === null) p.kill("SIGKILL");
  }
  assert.match(out, /\naborted shutdown\nstopped 1\s*$/);
  // it left the live workers list on its way out
  assert.deepEqual(await client.workers(q.name), []);
  const t = await q.get(e.id);
  assert.deepEqual([t.state, t.attempt], ["scheduled", 0]);
});

// --- the live workers list (heartbeat) -----------------------------------------------------

const listed = async (c, id) => (await c.workers()).find((w) => w.id === id) ?? null;
const inHandIs = (c, id, n) => async () => (await listed(c, id))?.in_hand === n;

test("a worker is listed while it runs, with its load, and leaves at stop", async () => {
  const q = client.queue(fresh());
  let open;
  const gate = new Promise((r) => (open = r));
  const started = [];
  const w = new Worker(client, q, async (t) => {
    started.push(t.id);
    await gate;
  }, { concurrency: 3, pollMs: 200, heartbeatMs: 100, handleSignals: false });
  assert.match(w.id, new RegExp(`^[!-~]+:${process.pid}:[0-9a-f]{8}$`));
  assert.equal(await listed(client, w.id), null); // registered by run(), not before
  const run = w.run();
  try {
    const first = await waitUntil(() => listed(client, w.id), 10_000, "the worker listed");
    assert.deepEqual([first.kind, first.language, first.queues, first.concurrency], ["worker", "typescript", [q.name], 3]);
    assert.deepEqual([first.host, first.pid, first.version], [hostname(), process.pid, VERSION]);
    assert.equal(first.expires_at_ms - first.last_seen_ms, 300); // listed for 3 beats after the last
    assert.deepEqual((await client.workers(q.name)).map((x) => x.id), [w.id]);
    await q.enqueueBatch([{ payload: 1 }, { payload: 2 }]);
    await waitUntil(() => started.length === 2, 10_000, "2 handlers running");
    await waitUntil(inHandIs(client, w.id, 2), 10_000, "in_hand 2 at a beat");
    open();
    await waitUntil(() => w.stats.acked === 2, 10_000, "2 acked");
    await waitUntil(inHandIs(client, w.id, 0), 10_000, "in_hand 0 at a beat");
  } finally {
    open();
    w.stop();
    await run;
  }
  // gone as soon as run() resolved, not 3 beats later
  assert.equal(await listed(client, w.id), null);
});

test("a failed beat is reported and retried at the next beat", async () => {
  const flaky = new Client(server.url, { token: server.token });
  let beats = 0;
  const beat = flaky.beatWorker.bind(flaky);
  flaky.beatWorker = async (...args) => {
    if (++beats <= 2) throw new DueqError(503, "redis_unavailable", "injected");
    return beat(...args);
  };
  const errors = [];
  const q = flaky.queue(fresh());
  const w = new Worker(flaky, q, async () => {}, { pollMs: 200, heartbeatMs: 100, handleSignals: false, onError: (e) => errors.push(e) });
  const run = w.run();
  try {
    // the worker works meanwhile, and the third beat lists it
    await q.enqueue("x");
    await waitUntil(() => w.stats.acked === 1, 10_000, "ack");
    await waitUntil(() => listed(client, w.id), 10_000, "listed after 2 failed beats");
  } finally {
    w.stop();
    await run;
  }
  const failed = errors.filter((e) => String(e?.message).includes("heartbeat of worker"));
  assert.equal(failed.length, 2, errors.map(String).join("; "));
  assert.ok(failed[0].message.includes(w.id) && failed[0].cause instanceof DueqError);
  assert.equal(await listed(client, w.id), null);
});

// --- what the server shows and counts of a TypeScript worker's work ------------------------
// Each claim names the worker (worker_id = worker.id), so an active task shows who holds it;
// the server counts claims, lateness (claim - due) and run time (ack or nack - claim) in Redis,
// so its /metrics counts the tasks a TypeScript worker ran like a Rust worker's.

test("/metrics counts a TypeScript worker's claims, lateness and run time", async () => {
  const n = 12;
  const q = client.queue(fresh());
  await q.enqueueBatch(Array.from({ length: n }, (_, i) => ({ payload: i })));
  // 21 ms: a timer may fire a millisecond early
  const w = new Worker(client, q, () => sleep(21), { concurrency: 4, claimMax: 5, pollMs: 200, handleSignals: false });
  const run = w.run();
  try {
    await waitUntil(() => w.stats.acked === n, 10_000, `${n} acked`);
  } finally {
    w.stop();
  }
  const stats = await run;
  // the worker alone took each task once
  assert.deepEqual([stats.claimed, stats.acked, stats.lease_lost, stats.released], [n, n, 0, 0]);
  const text = await scrape(server);
  const queue = q.name;
  assert.equal(metric(text, "dueq_tasks_claimed_total", { queue }), n);
  assert.equal(metric(text, "dueq_task_lateness_seconds_count", { queue }), n);
  assert.equal(metric(text, "dueq_task_lateness_seconds_bucket", { queue, le: "+Inf" }), n);
  assert.equal(metric(text, "dueq_task_duration_seconds_count", { queue }), n);
  assert.equal(metric(text, "dueq_task_duration_seconds_bucket", { queue, le: "+Inf" }), n);
  // each ran its handler's 20 ms and more between its claim and its ack
  assert.ok(metric(text, "dueq_task_duration_seconds_sum", { queue }) >= n * 0.02);
  assert.equal(metric(text, "dueq_tasks_finished_total", { queue, outcome: "succeeded" }), n);
});

test("a running task names the TypeScript worker holding it", async () => {
  const q = client.queue(fresh());
  const e = await q.enqueue("held");
  let open, started = false;
  const gate = new Promise((r) => (open = r));
  const w = new Worker(client, q, async () => {
    started = true;
    await gate;
  }, { pollMs: 200, handleSignals: false });
  const run = w.run();
  try {
    await waitUntil(() => started, 10_000, "the handler started");
    const t = await q.get(e.id);
    assert.equal(t.state, "active");
    assert.equal(t.worker_id, w.id);
    assert.ok(typeof t.claimed_at_ms === "number" && t.due_at_ms <= t.claimed_at_ms, JSON.stringify(t));
    open();
    await waitUntil(() => w.stats.acked === 1, 10_000, "acked");
  } finally {
    open();
    w.stop();
  }
  const stats = await run;
  assert.deepEqual([stats.acked, stats.lease_lost], [1, 0]);
  assert.equal(await q.get(e.id), null);
});

test("heartbeatMs is checked", () => {
  for (const heartbeatMs of [99, 60_001, Number.NaN]) {
    assert.throws(() => new Worker(client, "q", async () => {}, { heartbeatMs }), RangeError);
  }
  const ids = new Set([1, 2, 3].map(() => new Worker(client, "q", async () => {}).id));
  assert.equal(ids.size, 3);
});

// --- the handler's AbortSignal ----------------------------------------------------------------

/** Resolves with the signal's reason once it aborts. */
const aborted = (signal) => new Promise((r) => signal.addEventListener("abort", () => r(signal.reason), { once: true }));

test("stop(): a handler still running after graceMs is aborted (shutdown) and its task handed back", async () => {
  const q = client.queue(fresh());
  const held = await q.enqueue("held");
  const quick = await q.enqueue("quick");
  const signals = {};
  let open;
  const gate = new Promise((r) => (open = r));
  const w = new Worker(client, q, async (t, { signal }) => {
    signals[t.payload] = signal;
    if (t.payload === "quick") return gate; // finishes within the grace period
    throw await aborted(signal); // as an aborted fetch would
  }, { concurrency: 2, pollMs: 200, graceMs: 300, handleSignals: false });
  const run = w.run();
  await waitUntil(() => signals.held && signals.quick, 10_000, "both handlers running");
  assert.equal(signals.held.aborted, false);
  w.stop();
  open();
  const stats = await run;
  const reason = signals.held.reason;
  assert.ok(reason instanceof TaskAbortedError && reason instanceof Error);
  assert.deepEqual([reason.name, reason.kind, reason.taskId], ["AbortError", "shutdown", held.id]);
  assert.equal(signals.quick.aborted, false);
  assert.deepEqual([stats.acked, stats.released, stats.retried, stats.lease_lost], [1, 1, 0, 0]);
  assert.equal(await q.get(quick.id), null);
  const t = await q.get(held.id);
  assert.deepEqual([t.state, t.attempt, t.last_error], ["scheduled", 0, null]);
});

test("an extend answered lease_lost aborts the handler's signal (lease_lost)", async () => {
  const q = client.queue(fresh());
  const e = await q.enqueue("x");
  let first, reason;
  const w = new Worker(client, q, async (t, { signal }) => {
    if (first) return; // the task again, after the lease was taken away
    first = t;
    reason = await aborted(signal);
    throw reason;
  }, { leaseMs: 1000, pollMs: 200, handleSignals: false });
  const run = w.run();
  try {
    await waitUntil(() => first, 10_000, "the handler running");
    // someone else ends the lease: the worker's next extend is refused
    assert.deepEqual(await q.releaseBatch([first]), ["released"]);
    await waitUntil(() => reason, 10_000, "the signal aborted");
    assert.ok(reason instanceof TaskAbortedError);
    assert.equal(reason.kind, "lease_lost");
    assert.match(reason.message, /answered lease_lost/);
    await waitUntil(() => w.stats.acked === 1, 10_000, "the task run again and acked");
  } finally {
    w.stop();
  }
  const stats = await run;
  // the aborted run's throw was not a failed attempt: no nack reached the task
  assert.deepEqual([stats.retried, stats.dead], [0, 0]);
  assert.equal(await q.get(e.id), null);
});

test("a lease that runs out before an extend lands aborts the handler's signal (lease_lost)", async () => {
  // every extend fails to reach the server
  const noExtend = (url, init) => (String(url).endsWith("/extend") ? Promise.reject(new TypeError("injected: network down")) : fetch(url, init));
  const c = new Client(server.url, { token: server.token, fetch: noExtend, retryBaseMs: 10 });
  const q = c.queue(fresh());
  await q.enqueue("x");
  const errors = [];
  let runs = 0, reason, abortedAfterMs;
  const w = new Worker(c, q, async (t, { signal }) => {
    if (++runs > 1) return;
    const started = Date.now();
    reason = await aborted(signal);
    abortedAfterMs = Date.now() - started;
    throw reason;
  }, { leaseMs: 1000, pollMs: 200, handleSignals: false, onError: (e) => errors.push(e) });
  const run = w.run();
  try {
    await waitUntil(() => reason, 10_000, "the signal aborted");
    assert.equal(reason.kind, "lease_lost");
    assert.match(reason.message, /ran out/);
    // not before the lease's 1000 ms were over
    assert.ok(abortedAfterMs >= 900, String(abortedAfterMs));
    assert.ok(errors.some((e) => e?.code === "connection_failed"), errors.map(String).join("; "));
    await waitUntil(() => w.stats.acked === 1, 15_000, "the task run again and acked");
  } finally {
    w.stop();
  }
  const stats = await run;
  assert.deepEqual([stats.retried, stats.dead], [0, 0]);
});

test("handlers written for one argument still work", async () => {
  const q = client.queue(fresh());
  await q.enqueue("x");
  let args;
  const w = new Worker(client, q, function (task) {
    args = arguments.length;
    assert.equal(task.payload, "x");
  }, { pollMs: 200, handleSignals: false });
  const run = w.run();
  await waitUntil(() => w.stats.acked === 1, 10_000, "acked");
  w.stop();
  await run;
  assert.equal(args, 2);
});
