// Every operation of the API through the client, against a live server. The client records
// each request it sends; the last test checks that every operation of the served OpenAPI
// document was called at least once, and that each has its client method.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Client, ConflictError, DueqError, InvalidInputError, NotFoundError, Queue, TestClock } from "../dist/index.js";
import { fresh, startServer } from "./server.mjs";

let server, client;
const sent = [];
before(async () => {
  server = await startServer();
  const recording = (url, init) => {
    sent.push({ method: init?.method ?? "GET", path: new URL(url).pathname });
    return fetch(url, init);
  };
  client = new Client(server.url, { token: server.token, fetch: recording });
});
after(() => server?.stop());

/** A rejection with `InvalidInputError` whose message names `field`. */
const names = (field) => (e) => {
  assert.ok(e instanceof InvalidInputError, String(e));
  assert.equal(e.code, "invalid_input");
  assert.ok(e.message.includes(field), `${e.message} does not name ${field}`);
  return true;
};

test("browse pages live tasks in due order; tasks() reads every page", async () => {
  const q = client.queue(fresh());
  const ids = [];
  for (let i = 0; i < 5; i++) ids.push((await q.enqueue(i, { delay_ms: 3_600_000 + i * 1000 })).id);
  const first = await q.browse({ limit: 2 });
  assert.deepEqual(first.tasks.map((t) => t.payload), [0, 1]);
  assert.equal(first.tasks[0].state, "scheduled");
  assert.equal(first.tasks[0].lease_expires_at_ms, null);
  assert.equal(typeof first.next, "string");
  const second = await q.browse({ limit: 2, after: first.next });
  assert.deepEqual(second.tasks.map((t) => t.payload), [2, 3]);
  const all = [];
  for await (const t of q.tasks({ limit: 2 })) all.push(t.id);
  assert.deepEqual(all, ids);
  await q.reschedule(ids[4], { delay_ms: 0 });
  const [claimed] = await q.claim({ lease_ms: 60_000 });
  assert.equal(claimed.id, ids[4]);
  const active = await q.browse({ state: "active" });
  assert.deepEqual(active.tasks.map((t) => [t.id, t.state]), [[ids[4], "active"]]);
  assert.equal(active.tasks[0].lease_expires_at_ms, claimed.lease_expires_at_ms);
  assert.equal(active.next, null);
  await assert.rejects(q.browse({ state: "dead" }), names("state"));
  await assert.rejects(q.browse({ limit: 0 }), names("limit"));
});

test("get, cancel and reschedule by key", async () => {
  const q = client.queue(fresh());
  const e = await q.enqueue("k", { key: "invoice/7", delay_ms: 3_600_000 });
  const r = await q.reschedule({ key: "invoice/7" }, { delay_ms: 60_000 });
  assert.equal(r.outcome, "rescheduled");
  assert.ok(r.due_at_ms < e.due_at_ms);
  assert.equal((await q.get({ key: "invoice/7" })).due_at_ms, r.due_at_ms);
  assert.equal(await q.cancel({ key: "invoice/7" }), "cancelled");
  assert.equal((await q.reschedule({ key: "invoice/7" }, { delay_ms: 1 })).outcome, "not_found");
});

test("ack and nack one task; a stale lease is a value", async () => {
  const q = client.queue(fresh());
  await q.enqueueBatch([{ payload: "a" }, { payload: "b" }, { payload: "c" }]);
  const [a, b, c] = await q.claim({ max: 3 });
  assert.equal(await q.ack(a), "acked");
  assert.equal(await q.ack(a), "lease_lost");
  const n = await q.nack(b, { error: "later", retry_in_ms: 60_000 });
  assert.equal(n.outcome, "rescheduled");
  assert.equal(typeof n.due_at_ms, "number");
  assert.deepEqual(await q.nack(b), { outcome: "lease_lost" });
  assert.deepEqual(await q.nack(c, { error: "bad", permanent: true }), { outcome: "dead" });
  assert.equal((await q.get(b.id)).last_error, "later");
  await assert.rejects(q.nack(c, { retry_in_ms: -1 }), names("retry_in_ms"));
});

test("delete a queue: not_found, not_empty, then with force", async () => {
  const q = client.queue(fresh());
  assert.equal(await q.delete(), "not_found");
  await q.enqueue("x", { delay_ms: 3_600_000 });
  await q.setSchedule("nightly", { cron: "0 3 * * *", payload: 1 });
  assert.equal(await q.delete(), "not_empty");
  assert.equal((await q.stats()).scheduled, 1);
  assert.equal(await q.delete({ force: true }), "deleted");
  assert.equal(await q.stats(), null);
  assert.deepEqual(await q.schedules(), []);
  // an empty queue needs no force
  const e = client.queue(fresh());
  await e.enqueue("y");
  const [t] = await e.claim();
  await e.ack(t);
  assert.equal(await e.delete(), "deleted");
});

test("purge drops one state", async () => {
  const q = client.queue(fresh());
  await assert.rejects(q.purge("scheduled"), (e) => e instanceof NotFoundError); // a queue that never had a task
  await q.enqueueBatch([1, 2, 3].map((payload) => ({ payload, delay_ms: 3_600_000 })));
  await q.enqueue("dies");
  const [t] = await q.claim({ max: 1 });
  await q.nack(t, { permanent: true });
  assert.deepEqual(await q.purge("scheduled"), { dropped: 3, left: 0 });
  assert.deepEqual(await q.purge("dead"), { dropped: 1, left: 0 });
  const s = await q.stats();
  assert.deepEqual([s.scheduled, s.dead], [0, 0]);
  await assert.rejects(q.purge("active"), names("state"));
});

/** Dead tasks with these errors (and keys `k{i}`), newest last. */
async function deadTasks(q, errors) {
  await q.enqueueBatch(errors.map((_, i) => ({ payload: i, key: `k${i}` })));
  const ts = await q.claim({ max: errors.length });
  const r = await q.nackBatch(ts.map((task, i) => ({ task, error: errors[i], permanent: true })));
  assert.ok(r.every((x) => x.outcome === "dead"));
  return ts;
}

test("bulk dead-letter retry and delete by filter", async () => {
  const q = client.queue(fresh());
  await deadTasks(q, ["timeout: upstream", "timeout: db", "bad payload"]);
  const dry = await q.deadRetryMatching({ error_contains: "timeout", dry_run: true });
  assert.deepEqual([dry.matched, dry.done], [2, 0]);
  assert.equal((await q.stats()).dead, 3);
  const retried = await q.deadRetryMatching({ error_contains: "timeout", spread_ms: 1000 });
  assert.deepEqual([retried.matched, retried.done, retried.conflicts], [2, 2, 0]);
  assert.ok(retried.cursor == null);
  const s = await q.stats();
  assert.deepEqual([s.dead, s.scheduled], [1, 2]);
  const deleted = await q.deadDeleteMatching({ key_prefix: "k2" });
  assert.deepEqual([deleted.matched, deleted.done], [1, 1]);
  assert.equal((await q.deadList()).total, 0);
  await assert.rejects(q.deadRetryMatching({ key_prefix: "" }), names("key_prefix"));
  await assert.rejects(q.deadDeleteMatching({ error_contains: "" }), names("error_contains"));
});

test("schedules: set, get, list, pause, resume, trigger, backfill, delete", async () => {
  const q = client.queue(fresh());
  assert.equal(await q.schedule("tick"), null);
  const created = await q.setSchedule("tick", { every_ms: 60_000, payload: { n: 1 }, max_attempts: 2 });
  assert.deepEqual([created.outcome, created.name, created.every_ms, created.paused], ["created", "tick", 60_000, false]);
  assert.equal(created.upcoming_ms.length, 5);
  assert.equal((await q.setSchedule("tick", { every_ms: 60_000, payload: { n: 1 }, max_attempts: 2 })).outcome, "unchanged");
  assert.equal((await q.setSchedule("tick", { every_ms: 60_000, payload: { n: 2 }, max_attempts: 2 })).outcome, "replaced");
  const got = await q.schedule("tick");
  assert.deepEqual(got.payload, { n: 2 });
  assert.equal(got.next_fire_at_ms, created.next_fire_at_ms);
  await q.setSchedule("daily", { cron: "30 6 * * *", tz: "Europe/Berlin" });
  const page = await q.schedulesPage(1);
  assert.deepEqual([page.schedules.map((s) => s.name), page.total, page.next], [["daily"], 2, "daily"]);
  assert.deepEqual((await q.schedules()).map((s) => s.name), ["daily", "tick"]);

  const paused = await q.pauseSchedule("tick");
  assert.deepEqual([paused.paused, paused.next_fire_at_ms, paused.upcoming_ms], [true, null, []]);
  assert.equal((await q.resumeSchedule("tick")).paused, false);

  const t = await q.triggerSchedule("tick");
  assert.match(t.key, /^schedule:tick:manual:\d+$/);
  const task = await q.get(t.id);
  assert.deepEqual([task.key, task.payload, task.max_attempts], [t.key, { n: 2 }, 2]);

  await q.setSchedule("fast", { every_ms: 1000 });
  const to_ms = Date.now() - 2000;
  const b = await q.backfillSchedule("fast", { from_ms: to_ms - 5000, to_ms });
  assert.equal(b.ticks, 5);
  assert.deepEqual([b.created, b.existing], [5, 0]);
  assert.deepEqual(await q.backfillSchedule("fast", { from_ms: to_ms - 5000, to_ms }), { ticks: 5, created: 0, existing: 5 });

  assert.equal(await q.deleteSchedule("tick"), true);
  assert.equal(await q.deleteSchedule("tick"), false);
  assert.equal(await q.schedule("tick"), null);
  await assert.rejects(q.pauseSchedule("tick"), (e) => e instanceof NotFoundError);
  await assert.rejects(q.triggerSchedule("tick"), (e) => e instanceof NotFoundError);
  await assert.rejects(q.setSchedule("bad", { every_ms: 5 }), names("every_ms"));
  await assert.rejects(q.setSchedule("bad name", { every_ms: 5000 }), names("name"));
  await assert.rejects(q.backfillSchedule("fast", { from_ms: Date.now() + 60_000, to_ms: Date.now() + 120_000 }), names("to_ms"));
});

test("settings: read, change some fields, put one back to its default", async () => {
  const q = client.queue(fresh());
  const s0 = await q.settings();
  assert.equal(s0.max_attempts, null);
  assert.equal(s0.rate_limit, null);
  const s1 = await q.updateSettings({ max_attempts: 3, rate_limit: { max: 5, per_ms: 1000 }, on_expire: "dead" });
  assert.deepEqual([s1.max_attempts, s1.rate_limit, s1.on_expire, s1.lease_ms], [3, { max: 5, per_ms: 1000 }, "dead", null]);
  assert.deepEqual(await q.settings(), s1);
  // a task enqueued without its own max_attempts takes the queue's
  const e = await q.enqueue("x", { delay_ms: 60_000 });
  assert.equal((await q.get(e.id)).max_attempts, 3);
  const s2 = await q.updateSettings({ rate_limit: null });
  assert.deepEqual([s2.max_attempts, s2.rate_limit], [3, null]);
  await assert.rejects(q.updateSettings({ max_attempts: 0 }), names("max_attempts"));
  await assert.rejects(q.updateSettings({ max_attemps: 3 }), names("max_attemps"));
  assert.deepEqual(await q.settings(), s2);
});

test("webhook: set, read without the secret, replace, delete", async () => {
  const q = client.queue(fresh());
  assert.equal(await q.webhook(), null);
  const set = await q.setWebhook({ url: "http://127.0.0.1:9/hook", timeout_ms: 5000 });
  assert.match(set.secret, /^whsec_/);
  assert.equal(set.secret_generated, true);
  const got = await q.webhook();
  assert.deepEqual([got.url, got.timeout_ms, got.concurrency, got.secret ?? null], ["http://127.0.0.1:9/hook", 5000, 10, null]);
  const again = await q.setWebhook({ url: "http://127.0.0.1:9/other", concurrency: 2 });
  assert.deepEqual([again.secret, again.secret_generated, again.concurrency], [set.secret, false, 2]);
  assert.equal(await q.deleteWebhook(), true);
  assert.equal(await q.deleteWebhook(), false);
  assert.equal(await q.webhook(), null);
  await assert.rejects(q.setWebhook({ url: "ftp://example.com/" }), names("url"));
  await assert.rejects(q.setWebhook({ url: "http://127.0.0.1:9/", secret: "nope" }), names("secret"));
});

test("health, readiness, metrics and the OpenAPI document", async () => {
  assert.deepEqual(await client.health(), { status: "ok" });
  const r = await client.ready();
  assert.deepEqual([r.ready, r.redis, r.scripts, r.eviction_safe], [true, true, true, true]);
  const q = client.queue(fresh());
  await q.enqueue(1);
  assert.match(await client.metrics(), new RegExp(`dueq_tasks_enqueued_total\\{[^}]*queue="${q.name}"`));
  const doc = await client.openapi();
  assert.match(String(doc.openapi), /^3\./);
});

test("path segments the URL would not keep are refused before sending", async () => {
  const before = sent.length;
  assert.throws(() => client.queue(".."), names("queue"));
  assert.throws(() => client.queue(""), names("queue"));
  const q = client.queue(fresh());
  await assert.rejects(q.get(".."), names("id"));
  await assert.rejects(q.cancel({ key: "." }), names("key"));
  await assert.rejects(q.get({}), names("ref"));
  await assert.rejects(q.deleteSchedule(".."), names("name"));
  await assert.rejects(q.schedule(""), names("name"));
  await assert.rejects(q.deadRetry("."), names("id"));
  await assert.rejects(client.removeWorker(".."), names("id"));
  assert.equal(sent.length, before);
  // a key of dots and more is fine
  await q.enqueue(1, { key: "..." });
  assert.equal(await q.cancel({ key: "..." }), "cancelled");
});

test("the rest by id: pull batches, extend, dead letters, pause, queues, workers", async () => {
  const q = client.queue(fresh());
  const e = await q.enqueue("gone", { delay_ms: 60_000 });
  assert.equal(await q.cancel(e.id), "cancelled");
  await q.enqueueBatch([{ payload: 1 }, { payload: 2 }, { payload: 3 }]);
  const [a, b, c] = await q.claim({ max: 3, lease_ms: 5000 });
  assert.ok((await q.extend(a, 60_000)) > a.lease_expires_at_ms);
  assert.deepEqual(await q.ackBatch([a]), ["acked"]);
  assert.deepEqual(await q.releaseBatch([b]), ["released"]);
  const [dead] = await deadTasks(client.queue(q.name + "-d"), ["x"]);
  const d = client.queue(q.name + "-d");
  assert.equal(await d.deadRetry(dead.id), "retried");
  const [again] = await d.claim();
  await d.nack(again, { permanent: true });
  assert.equal((await d.deadList()).tasks[0].id, dead.id);
  assert.equal(await d.deadDelete(dead.id), "deleted");
  assert.equal(await q.pause(), true);
  assert.equal((await q.stats()).paused, true);
  assert.equal(await q.resume(), false);
  assert.ok((await client.queuesPage(1000)).queues.some((s) => s.queue === q.name));
  const id = "ts-ops:1:" + fresh().slice(3, 11);
  assert.equal(await client.beatWorker(id, { queues: [q.name], concurrency: 1, in_hand: 0 }), true);
  assert.deepEqual((await client.workers(q.name)).map((w) => w.id), [id]);
  assert.equal(await client.removeWorker(id), true);
  assert.equal(await q.ack(c), "acked");
});

test("a server without the test clock says so (test_clock.test.mjs has one with it)", async () => {
  await assert.rejects(client.testClock.now(), (e) => e instanceof NotFoundError && e.message.includes("--test-clock"));
  await assert.rejects(client.testClock.advance(1000), NotFoundError);
  assert.equal((await client.ready()).test_clock, undefined);
});

test("every operation of the served document has a client method, and was called above", async () => {
  const doc = await (await fetch(server.url + "/openapi.json")).json();
  const served = new Map();
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(item)) {
      if (op && typeof op === "object" && op.operationId) served.set(op.operationId, `${method.toUpperCase()} ${path}`);
    }
  }
  const missing = [...served.keys()].filter((id) => !(id in OPERATIONS));
  assert.deepEqual(missing, [], "operations of the served document without a client method");
  const stale = Object.keys(OPERATIONS).filter((id) => !served.has(id));
  assert.deepEqual(stale, [], "client methods of operations the server no longer has");
  for (const [id, [route, method]] of Object.entries(OPERATIONS)) {
    assert.equal(served.get(id), route, `${id} moved`);
    const [cls, name] = method.split(".");
    const proto = { Client: Client.prototype, Queue: Queue.prototype, TestClock: TestClock.prototype }[cls];
    assert.equal(typeof proto[name], "function", `${method} (${id})`);
  }
  const uncalled = [];
  for (const [id, route] of served) {
    const [m, path] = route.split(" ");
    const re = new RegExp("^" + path.replace(/\{[^}]+\}/g, "[^/]+") + "$");
    if (!sent.some((s) => s.method === m && re.test(s.path))) uncalled.push(id);
  }
  // the pull protocol's batch calls and the workers calls have their tests in client.test.mjs;
  // this file calls them too, so that the check stands on its own
  assert.deepEqual(uncalled, [], "operations no test in this file called");
});

/** operationId → [its route, the client method that calls it]. */
const OPERATIONS = {
  healthz: ["GET /healthz", "Client.health"],
  metrics: ["GET /metrics", "Client.metrics"],
  openapi_json: ["GET /openapi.json", "Client.openapi"],
  readyz: ["GET /readyz", "Client.ready"],
  list_queues: ["GET /v1/queues", "Client.queuesPage"],
  list_workers: ["GET /v1/workers", "Client.workers"],
  beat_worker: ["PUT /v1/workers/{id}", "Client.beatWorker"],
  remove_worker: ["DELETE /v1/workers/{id}", "Client.removeWorker"],
  get_test_clock: ["GET /v1/test/clock", "TestClock.now"],
  move_test_clock: ["POST /v1/test/clock", "TestClock.advance"],
  get_queue: ["GET /v1/queues/{queue}", "Queue.stats"],
  delete_queue: ["DELETE /v1/queues/{queue}", "Queue.delete"],
  pause_queue: ["POST /v1/queues/{queue}/pause", "Queue.pause"],
  resume_queue: ["POST /v1/queues/{queue}/resume", "Queue.resume"],
  purge_queue: ["POST /v1/queues/{queue}/purge", "Queue.purge"],
  get_settings: ["GET /v1/queues/{queue}/settings", "Queue.settings"],
  update_settings: ["PATCH /v1/queues/{queue}/settings", "Queue.updateSettings"],
  enqueue: ["POST /v1/queues/{queue}/tasks", "Queue.enqueue"],
  enqueue_batch: ["POST /v1/queues/{queue}/tasks/batch", "Queue.enqueueBatch"],
  browse_tasks: ["GET /v1/queues/{queue}/tasks", "Queue.browse"],
  get_task: ["GET /v1/queues/{queue}/tasks/{id}", "Queue.get"],
  cancel_task: ["DELETE /v1/queues/{queue}/tasks/{id}", "Queue.cancel"],
  reschedule_task: ["PATCH /v1/queues/{queue}/tasks/{id}", "Queue.reschedule"],
  get_task_by_key: ["GET /v1/queues/{queue}/keys/{key}", "Queue.get"],
  cancel_task_by_key: ["DELETE /v1/queues/{queue}/keys/{key}", "Queue.cancel"],
  reschedule_task_by_key: ["PATCH /v1/queues/{queue}/keys/{key}", "Queue.reschedule"],
  claim: ["POST /v1/queues/{queue}/claim", "Queue.claim"],
  ack: ["POST /v1/queues/{queue}/tasks/{id}/ack", "Queue.ack"],
  nack: ["POST /v1/queues/{queue}/tasks/{id}/nack", "Queue.nack"],
  extend: ["POST /v1/queues/{queue}/tasks/{id}/extend", "Queue.extend"],
  ack_batch: ["POST /v1/queues/{queue}/acks", "Queue.ackBatch"],
  nack_batch: ["POST /v1/queues/{queue}/nacks", "Queue.nackBatch"],
  release_batch: ["POST /v1/queues/{queue}/releases", "Queue.releaseBatch"],
  list_dead: ["GET /v1/queues/{queue}/dead", "Queue.deadList"],
  retry_dead: ["POST /v1/queues/{queue}/dead/{id}/retry", "Queue.deadRetry"],
  delete_dead: ["DELETE /v1/queues/{queue}/dead/{id}", "Queue.deadDelete"],
  retry_dead_matching: ["POST /v1/queues/{queue}/dead/retry", "Queue.deadRetryMatching"],
  delete_dead_matching: ["POST /v1/queues/{queue}/dead/delete", "Queue.deadDeleteMatching"],
  list_schedules: ["GET /v1/queues/{queue}/schedules", "Queue.schedulesPage"],
  get_schedule: ["GET /v1/queues/{queue}/schedules/{name}", "Queue.schedule"],
  set_schedule: ["PUT /v1/queues/{queue}/schedules/{name}", "Queue.setSchedule"],
  delete_schedule: ["DELETE /v1/queues/{queue}/schedules/{name}", "Queue.deleteSchedule"],
  pause_schedule: ["POST /v1/queues/{queue}/schedules/{name}/pause", "Queue.pauseSchedule"],
  resume_schedule: ["POST /v1/queues/{queue}/schedules/{name}/resume", "Queue.resumeSchedule"],
  trigger_schedule: ["POST /v1/queues/{queue}/schedules/{name}/trigger", "Queue.triggerSchedule"],
  backfill_schedule: ["POST /v1/queues/{queue}/schedules/{name}/backfill", "Queue.backfillSchedule"],
  get_webhook: ["GET /v1/queues/{queue}/webhook", "Queue.webhook"],
  set_webhook: ["PUT /v1/queues/{queue}/webhook", "Queue.setWebhook"],
  delete_webhook: ["DELETE /v1/queues/{queue}/webhook", "Queue.deleteWebhook"],
};
