// The test clock of a server started with `dueq serve --test-clock`: an order-cancel timer
// tested in well under a second of wall time, and moves checked.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Client, InvalidInputError } from "../dist/index.js";
import { fresh, startServer } from "./server.mjs";

let server, client;
before(async () => {
  server = await startServer("--test-clock");
  client = new Client(server.url, { token: server.token });
});
after(() => server?.stop());

test("an order is cancelled 30 minutes later unless paid, in well under a second", async () => {
  const started = Date.now();
  const orders = client.queue(fresh());
  for (const order of [42, 43]) {
    await orders.enqueue({ order }, { key: `order:${order}:cancel`, delay_ms: 30 * 60_000 });
  }
  // order 43 is paid: its timer is cancelled
  assert.equal(await orders.cancel({ key: "order:43:cancel" }), "cancelled");
  await client.testClock.advance(30 * 60_000 - 1000);
  assert.deepEqual(await orders.claim({ max: 10 }), []);
  await client.testClock.advance(1000);
  const claimed = await orders.claim({ max: 10, wait_ms: 1000 });
  assert.deepEqual(claimed.map((t) => t.payload), [{ order: 42 }]);
  assert.ok(claimed[0].due_at_ms <= (await client.testClock.now()).now_ms);
  assert.ok(Date.now() - started < 1000, `took ${Date.now() - started} ms`);
});

test("moves are checked and go forward only", async () => {
  const before = await client.testClock.now();
  const names = (field) => (e) => e instanceof InvalidInputError && e.message.includes(field);
  await assert.rejects(client.testClock.advance(0), names("advance_ms"));
  await assert.rejects(client.testClock.set(before.now_ms - 60_000), names("set_ms"));
  assert.equal((await client.testClock.now()).offset_ms, before.offset_ms);
  const later = await client.testClock.set(new Date(before.now_ms + 3_600_000));
  assert.ok(later.offset_ms >= before.offset_ms + 3_599_000);
  assert.equal((await client.ready()).test_clock?.offset_ms, later.offset_ms);
});
