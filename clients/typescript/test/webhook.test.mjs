import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, test } from "node:test";
import { Webhook } from "standardwebhooks";
import { Client, signWebhook, verifyWebhook } from "../dist/index.js";
import { fresh, startServer, waitUntil } from "./server.mjs";

const KEY = Buffer.from("0123456789abcdef01234567");
const SECRET = "whsec_" + KEY.toString("base64");
const BODY = '{"order":42}';
const ID = "q:000000000001";
const TS = 1_700_000_000;
// the vector of crates/dueq-server/src/push/deliver.rs
const SIGNATURE = "v1,pL9loRcmkWmcPkURAea0vfCiOLha5XW5WiUsTHSxQn8=";
const HEADERS = { "webhook-id": ID, "webhook-timestamp": String(TS), "webhook-signature": SIGNATURE };

let server;
before(async () => {
  server = await startServer();
});
after(async () => {
  await server?.stop();
});

test("known vector", () => {
  assert.equal(signWebhook(SECRET, ID, TS, BODY), SIGNATURE);
  assert.equal(signWebhook(KEY, ID, TS, Buffer.from(BODY)), SIGNATURE);
  assert.ok(verifyWebhook(SECRET, HEADERS, BODY, { nowS: TS }));
  assert.ok(verifyWebhook(KEY, new Headers(HEADERS), Buffer.from(BODY), { nowS: TS + 100 }));
  // header names in any case
  const upper = Object.fromEntries(Object.entries(HEADERS).map(([k, v]) => [k.toUpperCase(), v]));
  assert.ok(verifyWebhook(SECRET, upper, BODY, { nowS: TS }));
});

test("refusals", () => {
  const other = "whsec_" + Buffer.alloc(24, 7).toString("base64");
  assert.ok(!verifyWebhook(SECRET, HEADERS, BODY + " ", { nowS: TS }));
  assert.ok(!verifyWebhook(other, HEADERS, BODY, { nowS: TS }));
  assert.ok(!verifyWebhook(SECRET, HEADERS, BODY, { nowS: TS + 301 }));
  assert.ok(!verifyWebhook(SECRET, {}, BODY, { nowS: TS }));
  assert.ok(!verifyWebhook(SECRET, { ...HEADERS, "webhook-timestamp": "abc" }, BODY, { nowS: TS }));
  // the id is signed: a swapped id does not verify
  assert.ok(!verifyWebhook(SECRET, { ...HEADERS, "webhook-id": "q:000000000002" }, BODY, { nowS: TS }));
});

test("rotation: either secret, either signature", () => {
  const other = "whsec_" + Buffer.alloc(32, 9).toString("base64");
  assert.ok(verifyWebhook([other, SECRET], HEADERS, BODY, { nowS: TS }));
  const two = { ...HEADERS, "webhook-signature": `${signWebhook(other, ID, TS, BODY)} ${SIGNATURE}` };
  assert.ok(verifyWebhook(SECRET, two, BODY, { nowS: TS }));
  assert.ok(verifyWebhook(other, two, BODY, { nowS: TS }));
});

test("a real delivery verifies with the standardwebhooks package and with verifyWebhook", async () => {
  const got = [];
  const srv = createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      got.push({ headers: req.headers, body: Buffer.concat(chunks) });
      res.statusCode = 204;
      res.end();
    });
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  try {
    const q = new Client(server.url, { token: server.token }).queue(fresh());
    const put = await fetch(`${server.url}/v1/queues/${q.name}/webhook`, {
      method: "PUT",
      headers: { authorization: `Bearer ${server.token}`, "content-type": "application/json" },
      body: JSON.stringify({ url: `http://127.0.0.1:${srv.address().port}/hook` }),
    });
    assert.equal(put.status, 200);
    const { secret } = await put.json();
    const e = await q.enqueue({ order: 42 }, { key: "order:42:cancel" });
    await waitUntil(() => got.length > 0, 10_000, "the delivery");
    const { headers, body } = got[0];
    assert.deepEqual(JSON.parse(body.toString()), { order: 42 });
    assert.equal(headers["webhook-id"], `${q.name}:${e.id}`);
    new Webhook(secret).verify(body.toString(), headers);
    assert.ok(verifyWebhook(secret, headers, body));
    assert.throws(() => new Webhook(secret).verify(body.toString() + " ", headers));
  } finally {
    srv.close();
  }
});
