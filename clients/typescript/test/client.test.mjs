import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Client, ConflictError, ConnectionFailedError, DueqError, InvalidInputError, TimeoutError, UnauthorizedError, UnavailableError, VERSION, errorFor } from "../dist/index.js";
import { fresh, startServer } from "./server.mjs";
import { readFileSync } from "node:fs";
import { createServer as createNetServer } from "node:net";

let server, client;
before(async () => {
  server = await startServer();
  client = new Client(server.url, { token: server.token });
});
after(() => server?.stop());

test("enqueue, get and cancel by key; outcomes are values", async () => {
  const q = client.queue(fresh());
  const key = "order:42/cancel ü";
  const e = await q.enqueue({ order: 42 }, { key, delay_ms: 60_000 });
  assert.equal(e.created, true);
  const again = await q.enqueue({ order: 43 }, { key, delay_ms: 60_000 });
  assert.deepEqual([again.id, again.created], [e.id, false]);
  const t = await q.get({ key });
  assert.equal(t.id, e.id);
  assert.deepEqual(t.payload, { order: 42 });
  assert.equal(t.state, "scheduled");
  assert.deepEqual(await q.get(e.id), t);
  assert.equal(await q.cancel({ key }), "cancelled");
  assert.equal(await q.cancel({ key }), "not_found");
  assert.equal(await q.get({ key }), null);
});

test("a unique window keeps a finished key taken", async () => {
  const q = client.queue(fresh());
  const key = "order-42";
  const e = await q.enqueue({ order: 42 }, { key, unique_for_ms: 60_000 });
  const [t] = await q.claim({ max: 1 });
  assert.equal(await q.ack(t), "acked");
  const again = await q.enqueue({ order: 42 }, { key });
  assert.deepEqual([again.id, again.created, again.state], [e.id, false, "succeeded"]);
  await assert.rejects(q.enqueue({}, { key, on_conflict: "replace" }), (err) => err instanceof ConflictError && err.code === "unique_window");
  await assert.rejects(q.enqueue({}, { unique_for_ms: 1000 }), (err) => err instanceof InvalidInputError && err.message.includes("unique_for_ms"));
  await q.updateSettings({ unique_for_ms: 3_600_000 });
  assert.equal((await q.settings()).unique_for_ms, 3_600_000);
});

test("reschedule, claim, in_progress, ack", async () => {
  const q = client.queue(fresh());
  const e = await q.enqueue("x", { delay_ms: 3_600_000 });
  const r = await q.reschedule(e.id, { delay_ms: 0 });
  assert.equal(r.outcome, "rescheduled");
  assert.ok(r.due_at_ms < e.due_at_ms);
  const [t] = await q.claim({ max: 10 });
  assert.equal(t.id, e.id);
  assert.equal(t.attempt, 1);
  assert.equal(await q.cancel(e.id), "in_progress");
  assert.equal((await q.reschedule(e.id, { delay_ms: 5 })).outcome, "in_progress");
  assert.equal(await q.ack(t), "acked");
  assert.equal((await q.reschedule(e.id, { delay_ms: 5 })).outcome, "not_found");
});

test("batches, stats, dead letters", async () => {
  const q = client.queue(fresh());
  assert.equal(await q.stats(), null);
  const out = await q.enqueueBatch([0, 1, 2, 3, 4].map((payload) => ({ payload })).concat([{ payload: 5, key: "dk" }]));
  assert.ok(out.every((x) => !(x instanceof DueqError) && x.created));
  const ts = await q.claim({ max: 10 });
  assert.deepEqual(ts.map((t) => t.payload), [0, 1, 2, 3, 4, 5]);
  assert.deepEqual(await q.ackBatch([ts[0], { id: ts[1].id, lease_token: "stale" }, ts[2]]), ["acked", "lease_lost", "acked"]);
  const n = await q.nackBatch([
    { task: ts[3], error: "boom", retry_in_ms: 60_000 },
    { task: ts[5], error: "bad", permanent: true },
  ]);
  assert.deepEqual(n.map((x) => x.outcome), ["rescheduled", "dead"]);
  assert.equal(typeof n[0].due_at_ms, "number");
  assert.deepEqual(await q.releaseBatch([ts[4]]), ["released"]);
  assert.equal(typeof (await q.extend(ts[1], 60_000)), "number");
  assert.equal(await q.extend(ts[0], 60_000), null);
  const s = await q.stats();
  assert.deepEqual([s.scheduled, s.active, s.dead, s.succeeded_total], [2, 1, 1, 2]);
  assert.ok((await client.queues()).some((x) => x.queue === q.name));
  const page = await q.deadList();
  assert.equal(page.total, 1);
  assert.equal(page.tasks[0].last_error, "bad");
  await q.enqueue("live", { key: "dk" });
  assert.equal(await q.deadRetry(ts[5].id), "conflict");
  assert.equal(await q.deadDelete(ts[5].id), "deleted");
  assert.equal(await q.deadDelete(ts[5].id), "not_found");
  assert.equal(await q.pause(), true);
  assert.equal(await q.resume(), false);
});

test("queues are paged by name", async () => {
  const prefix = fresh() + "-";
  for (const n of ["c", "a", "b"]) await client.queue(prefix + n).enqueue(n, { delay_ms: 3_600_000 });
  const page = await client.queuesPage(2, prefix);
  assert.deepEqual(page.queues.map((x) => x.queue), [prefix + "a", prefix + "b"]);
  assert.equal(page.next, prefix + "b");
  assert.ok(page.total >= 3);
  const rest = await client.queuesPage(1, page.next);
  assert.deepEqual(rest.queues.map((x) => x.queue), [prefix + "c"]);
  const all = (await client.queues()).map((x) => x.queue);
  for (const n of ["a", "b", "c"]) assert.ok(all.includes(prefix + n));
  await assert.rejects(client.queuesPage(0), (e) => e.status === 400 && e.code === "invalid_input");
});

test("errors carry the API code", async () => {
  const q = client.queue(fresh());
  await assert.rejects(q.enqueue(1, { delay_ms: 1, due_at_ms: 1 }), (e) => e instanceof DueqError && e.status === 400 && e.code === "invalid_input");
  await assert.rejects(client.queue("bad name").enqueue(1), (e) => e.code === "invalid_input");
  await assert.rejects(q.enqueue("x".repeat(2 << 20)), (e) => e.status === 413 && e.code === "payload_too_large");
  await q.enqueue("after a 413 the next request works");
  await assert.rejects(new Client(server.url, { token: "wrong" }).queue(q.name).stats(), (e) => e.status === 401 && e.code === "unauthorized");
  await assert.rejects(new Client("http://127.0.0.1:9", { timeoutMs: 2000 }).queue("q").enqueue(1), (e) => e.status === 0 && e.code === "connection_failed");
});

test("errors are subclasses by code", async () => {
  await assert.rejects(client.queue("bad name").enqueue(1), (e) => e instanceof InvalidInputError && e instanceof DueqError);
  await assert.rejects(new Client(server.url, { token: "wrong" }).queue(fresh()).stats(), (e) => e instanceof UnauthorizedError);
  await assert.rejects(new Client("http://127.0.0.1:9", { timeoutMs: 2000 }).queue("q").enqueue(1), (e) => e instanceof ConnectionFailedError);
  for (const [code, cls] of [["not_empty", ConflictError], ["in_progress", ConflictError], ["redis_unavailable", UnavailableError], ["timeout", TimeoutError]]) {
    assert.equal(errorFor(400, code, "m").constructor, cls, code);
  }
  assert.equal(errorFor(400, "a_code_from_later", "m").constructor, DueqError);
});

test("a request sent but not answered in time is a timeout, not connection_failed", async () => {
  // a server that reads requests and never answers
  const sockets = [];
  const mute = createNetServer((s) => {
    sockets.push(s);
    s.on("data", () => {});
  });
  await new Promise((r) => mute.listen(0, "127.0.0.1", r));
  try {
    const q = new Client(`http://127.0.0.1:${mute.address().port}`, { timeoutMs: 500 }).queue("q");
    await assert.rejects(q.enqueue(1, { key: "order:1" }), (e) => e.status === 0 && e.code === "timeout" && e instanceof TimeoutError);
  } finally {
    for (const s of sockets) s.destroy();
    mute.close();
  }
});

test("a long-poll claim returns when a task is enqueued", async () => {
  const q = client.queue(fresh());
  const claim = q.claim({ max: 1, wait_ms: 10_000 });
  await q.enqueue("wake", { delay_ms: 200 });
  assert.deepEqual((await claim).map((t) => t.payload), ["wake"]);
});

test("the version is the workspace version", () => {
  const cargo = readFileSync(new URL("../../../Cargo.toml", import.meta.url), "utf8");
  const v = /\[workspace\.package\][^[]*?\nversion = "([^"]+)"/.exec(cargo)[1];
  const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
  assert.equal(pkg.version, v);
  assert.equal(VERSION, v);
});

test("beat, list and remove a worker", async () => {
  const id = "ts-test:1:" + fresh().slice(3, 11);
  const queue = fresh();
  assert.equal(
    await client.beatWorker(id, { queues: [queue], concurrency: 4, in_hand: 1, host: "box", pid: 1, version: "9.9.9", language: "typescript", ttl_ms: 60_000 }),
    true,
  );
  const [w] = (await client.workers()).filter((x) => x.id === id);
  assert.deepEqual([w.kind, w.host, w.pid, w.version, w.language], ["worker", "box", 1, "9.9.9", "typescript"]);
  assert.deepEqual([w.queues, w.concurrency, w.in_hand], [[queue], 4, 1]);
  assert.ok(w.started_at_ms <= w.last_seen_ms && w.last_seen_ms < w.expires_at_ms);
  assert.deepEqual((await client.workers(queue)).map((x) => x.id), [id]);
  assert.deepEqual(await client.workers(fresh()), []);
  // the server itself is listed too, as a Rust process
  assert.ok((await client.workers()).some((x) => x.kind === "server" && x.language === "rust"));
  assert.equal(await client.beatWorker(id, { queues: [queue], concurrency: 4, in_hand: 3 }), true);
  assert.equal((await client.workers(queue))[0].in_hand, 3);
  assert.equal(await client.removeWorker(id), true);
  assert.deepEqual(await client.workers(queue), []);
  assert.equal(await client.removeWorker(id), false);
});

test("a bad beat names the field", async () => {
  const bad = (field) => (e) => e instanceof DueqError && e.status === 400 && e.code === "invalid_input" && e.message.includes(field);
  await assert.rejects(client.beatWorker("ts-test:1:bad", { queues: ["q"], concurrency: 1, in_hand: 0, ttl_ms: 5 }), bad("ttl_ms"));
  await assert.rejects(client.beatWorker("ts-test:1:bad", { queues: ["bad name"], concurrency: 1, in_hand: 0 }), bad("queues"));
  await assert.rejects(client.beatWorker("has space", { queues: ["q"], concurrency: 1, in_hand: 0 }), bad("id"));
  await assert.rejects(client.workers("bad name"), (e) => e.code === "invalid_input");
  assert.ok((await client.workers()).every((w) => w.id !== "ts-test:1:bad"));
});

test("a claim names its worker: an active task shows worker_id and claimed_at_ms", async () => {
  const q = client.queue(fresh());
  const [a, b, c] = [await q.enqueue("a"), await q.enqueue("b"), await q.enqueue("c")];
  const [ta] = await q.claim({ worker_id: "ts-test:1:cafe0001" });
  const [tb] = await q.claim();
  assert.deepEqual([ta.id, tb.id], [a.id, b.id]);
  const [ga, gb, gc] = [await q.get(ta.id), await q.get(tb.id), await q.get(c.id)];
  assert.deepEqual([ga.state, ga.worker_id], ["active", "ts-test:1:cafe0001"]);
  assert.ok(typeof ga.claimed_at_ms === "number" && ga.due_at_ms <= ga.claimed_at_ms);
  // unnamed claim: claimed, holder unknown; a scheduled task has neither
  assert.deepEqual([gb.state, gb.worker_id, typeof gb.claimed_at_ms], ["active", null, "number"]);
  assert.deepEqual([gc.state, gc.worker_id, gc.claimed_at_ms], ["scheduled", null, null]);
  for (const worker_id of ["has space", "x".repeat(201)]) {
    await assert.rejects(q.claim({ worker_id }), (e) => e instanceof DueqError && e.code === "invalid_input" && e.message.includes("worker_id"));
  }
  assert.equal((await q.get(c.id)).state, "scheduled"); // the refused claims took nothing
  assert.deepEqual(await q.ackBatch([ta, tb]), ["acked", "acked"]);
});
