// Task headers: given at enqueue (one, batch, a schedule's task template), returned by get,
// browse, the dead-letter list and claim; the server's limits answered with 400.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Client, InvalidInputError } from "../dist/index.js";
import { fresh, startServer } from "./server.mjs";

let server, client;
before(async () => {
  server = await startServer();
  client = new Client(server.url, { token: server.token });
});
after(() => server?.stop());

/** A rejection with `InvalidInputError` whose message names `headers`. */
const namesHeaders = (e) => e instanceof InvalidInputError && e.message.includes("headers");

test("headers round trip through get, browse, claim and the dead-letter list", async () => {
  const q = client.queue(fresh());
  const e = await q.enqueue({ order: 42 }, { key: "order:42", headers: { "X-Tenant": "acme", "a.b_c-d": "v 1" } });
  const plain = await q.enqueue("no headers");
  // names are stored lower-case
  const want = { "x-tenant": "acme", "a.b_c-d": "v 1" };
  assert.deepEqual((await q.get(e.id)).headers, want);
  assert.deepEqual((await q.get({ key: "order:42" })).headers, want);
  assert.deepEqual((await q.browse()).tasks.map((t) => t.headers), [want, {}]);
  assert.deepEqual((await q.get(plain.id)).headers, {});
  const claimed = new Map((await q.claim({ max: 10 })).map((t) => [t.id, t]));
  assert.deepEqual(claimed.get(e.id).headers, want);
  assert.deepEqual(claimed.get(plain.id).headers, {});
  // due at once, first attempt: the run continues the producer's trace
  assert.equal(claimed.get(e.id).continues_trace, true);
  await q.nack(claimed.get(e.id), { error: "gone", permanent: true });
  assert.deepEqual((await q.deadList()).tasks.map((t) => t.headers), [want]);
});

test("batch items carry their own headers", async () => {
  const q = client.queue(fresh());
  const out = await q.enqueueBatch([{ payload: 1, headers: { k: "one" } }, { payload: 2 }]);
  const claimed = new Map((await q.claim({ max: 10 })).map((t) => [t.id, t.headers]));
  assert.deepEqual(out.map((x) => claimed.get(x.id)), [{ k: "one" }, {}]);
});

test("a schedule's task template carries headers; its ticks start a trace of their own", async () => {
  const q = client.queue(fresh());
  await q.setSchedule("tick", { every_ms: 1000, payload: "tick", headers: { Source: "cron" } });
  const [c] = await q.claim({ wait_ms: 5000 });
  assert.ok(c.key.startsWith("schedule:tick:"), c.key);
  assert.deepEqual([c.headers, c.continues_trace], [{ source: "cron" }, false]);
  const trig = await q.triggerSchedule("tick");
  await q.deleteSchedule("tick");
  assert.deepEqual((await q.get(trig.id)).headers, { source: "cron" });
});

test("a delayed task starts a new trace", async () => {
  const q = client.queue(fresh());
  await q.enqueue("later", { delay_ms: 1000 });
  const [c] = await q.claim({ wait_ms: 5000 });
  assert.equal(c.continues_trace, false);
});

test("33 headers are refused with 400 naming headers; nothing is written", async () => {
  const q = client.queue(fresh());
  const headers = Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`h${i}`, "v"]));
  await assert.rejects(q.enqueue("x", { key: "too-many", headers }), namesHeaders);
  await assert.rejects(q.enqueueBatch([{ payload: "ok" }, { payload: "x", headers }]), namesHeaders);
  await assert.rejects(q.setSchedule("s", { every_ms: 60_000, headers }), namesHeaders);
  assert.equal(await q.get({ key: "too-many" }), null);
  assert.equal(await q.stats(), null);
  assert.equal(await q.schedule("s"), null);
  delete headers.h32;
  const e = await q.enqueue("x", { headers });
  assert.deepEqual((await q.get(e.id)).headers, headers);
});
