// Retries of idempotent calls. A small proxy in front of the live server injects the
// failures (an answer withheld after the server applied the request, a reset connection, a
// 503); everything it forwards is served by the real server.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, test } from "node:test";
import { Client, ConnectionFailedError, TimeoutError, UnavailableError } from "../dist/index.js";
import { retryDelayMs } from "../dist/client.js";
import { fresh, startServer } from "./server.mjs";

let server, direct;
before(async () => {
  server = await startServer();
  direct = new Client(server.url, { token: server.token, retries: 0 });
});
after(() => server?.stop());

const UNAVAILABLE = { status: 503, body: { error: { code: "redis_unavailable", message: "injected" } } };

/**
 * A proxy to the live server. `plan(n)` says what to do with its n-th request (from 0):
 * `forward` (default), `withhold` (forward it, so the server applies it, then never answer),
 * `reset` (close the connection unanswered, nothing forwarded) or `{ status, body }` (answer
 * that, nothing forwarded). `seen` lists every request with the status the server gave.
 */
async function proxy(plan) {
  const seen = [];
  const held = [];
  const srv = createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", async () => {
      const entry = { method: req.method, path: req.url, status: null };
      const step = plan(seen.length) ?? "forward";
      seen.push(entry);
      if (step === "reset") return req.socket.destroy();
      if (typeof step === "object") {
        res.writeHead(step.status, { "content-type": "application/json" });
        return res.end(JSON.stringify(step.body));
      }
      const headers = {};
      for (const h of ["authorization", "content-type", "accept"]) if (req.headers[h]) headers[h] = req.headers[h];
      const body = chunks.length ? Buffer.concat(chunks) : undefined;
      const r = await fetch(server.url + req.url, { method: req.method, headers, body });
      const text = await r.text();
      entry.status = r.status;
      if (step === "withhold") return held.push(res);
      res.writeHead(r.status, { "content-type": r.headers.get("content-type") ?? "application/json" });
      res.end(text);
    });
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${srv.address().port}`,
    seen,
    close() {
      for (const res of held) res.destroy();
      srv.closeAllConnections();
      srv.close();
    },
  };
}

const via = (p, options = {}) => new Client(p.url, { token: server.token, timeoutMs: 1000, retryBaseMs: 10, ...options });

test("a keyed enqueue whose answer was lost is sent again and creates one task", async () => {
  const p = await proxy((n) => (n === 0 ? "withhold" : "forward"));
  try {
    const q = via(p).queue(fresh());
    const e = await q.enqueue({ order: 42 }, { key: "order:42", delay_ms: 60_000 });
    // the first try was applied (201), its answer lost; the second found the live key
    assert.deepEqual(p.seen.map((s) => [s.method, s.status]), [["POST", 201], ["POST", 200]]);
    assert.equal(e.created, false);
    const real = direct.queue(q.name);
    const page = await real.browse();
    assert.deepEqual(page.tasks.map((t) => [t.id, t.key]), [[e.id, "order:42"]]);
    assert.equal((await real.stats()).scheduled, 1);
  } finally {
    p.close();
  }
});

test("a keyless enqueue is never sent again: the caller gets the timeout", async () => {
  const p = await proxy(() => "withhold");
  try {
    const q = via(p).queue(fresh());
    await assert.rejects(q.enqueue("once"), (e) => e instanceof TimeoutError);
    // a replace is not deduplicated either: a late repeat could undo a newer replace
    await assert.rejects(q.enqueue("r", { key: "k", on_conflict: "replace" }), (e) => e instanceof TimeoutError);
    assert.deepEqual(p.seen.map((s) => s.status), [201, 201]);
    // the lost answers' tasks exist, once each
    assert.equal((await direct.queue(q.name).stats()).scheduled, 2);
  } finally {
    p.close();
  }
});

test("reads are retried after a 503 and a reset connection; retries: 0 disables", async () => {
  const q0 = fresh();
  await direct.queue(q0).enqueue("x", { delay_ms: 60_000 });
  const p = await proxy((n) => [UNAVAILABLE, "reset", "forward", UNAVAILABLE][n] ?? "forward");
  try {
    const s = await via(p).queue(q0).stats();
    assert.equal(s.scheduled, 1);
    assert.equal(p.seen.length, 3);
    await assert.rejects(via(p, { retries: 0 }).queue(q0).stats(), (e) => e instanceof UnavailableError && e.status === 503);
    assert.equal(p.seen.length, 4);
  } finally {
    p.close();
  }
});

test("retries stop after `retries` more tries; the last failure is thrown", async () => {
  const p = await proxy(() => UNAVAILABLE);
  try {
    await assert.rejects(via(p, { retries: 3 }).queue(fresh()).get("000000000001"), (e) => e instanceof UnavailableError && e.code === "redis_unavailable");
    assert.equal(p.seen.length, 4);
  } finally {
    p.close();
  }
});

test("claim, ack, nack, trigger, backfill and cancel are never retried", async () => {
  const q = direct.queue(fresh());
  await q.enqueueBatch([{ payload: 1 }, { payload: 2 }]);
  await q.setSchedule("s", { every_ms: 60_000 });
  const [t] = await q.claim();
  const p = await proxy(() => "reset");
  try {
    const pq = via(p).queue(q.name);
    await assert.rejects(pq.claim(), (e) => e instanceof ConnectionFailedError);
    await assert.rejects(pq.ack(t), (e) => e instanceof ConnectionFailedError);
    await assert.rejects(pq.nack(t), (e) => e instanceof ConnectionFailedError);
    await assert.rejects(pq.triggerSchedule("s"), (e) => e instanceof ConnectionFailedError);
    await assert.rejects(
      pq.backfillSchedule("s", { from_ms: 0, to_ms: 120_000 }),
      (e) => e instanceof ConnectionFailedError,
    );
    await assert.rejects(pq.cancel({ id: t.id }), (e) => e instanceof ConnectionFailedError);
    assert.equal(p.seen.length, 6);
    // extend is: a repeat sets the same deadline again
    await assert.rejects(pq.extend(t, 60_000), (e) => e instanceof ConnectionFailedError);
    assert.equal(p.seen.length, 9);
  } finally {
    p.close();
  }
  assert.equal(await q.ack(t), "acked");
});

test("the delay doubles up to the cap, with jitter between half and all of it", () => {
  assert.equal(retryDelayMs(0, 100, 2000, () => 0), 50);
  assert.equal(retryDelayMs(0, 100, 2000, () => 1), 100);
  assert.equal(retryDelayMs(3, 100, 2000, () => 1), 800);
  assert.equal(retryDelayMs(5, 100, 2000, () => 1), 2000);
  assert.equal(retryDelayMs(5, 100, 2000, () => 0), 1000);
  assert.equal(retryDelayMs(1000, 100, 2000, () => 0.5), 1500);
  for (let i = 0; i < 100; i++) {
    const d = retryDelayMs(2, 100, 2000);
    assert.ok(d >= 200 && d <= 400, String(d));
  }
});

test("retry options are checked", () => {
  for (const [options, field] of [[{ retries: -1 }, "retries"], [{ retries: 1.5 }, "retries"], [{ retries: 11 }, "retries"], [{ retryBaseMs: -5 }, "retryBaseMs"], [{ retryMaxMs: Number.NaN }, "retryMaxMs"]]) {
    assert.throws(() => new Client(server.url, options), (e) => e instanceof RangeError && e.message.startsWith(field + " "));
  }
  assert.equal(new Client(server.url).retries, 2);
});
