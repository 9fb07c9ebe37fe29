import assert from "node:assert/strict";
import { createServer } from "node:http";
import { test } from "node:test";
import { sign, verifySignature, verifyWebhook } from "../dist/index.js";

const SECRET = "whsec_test_secret_1";
const BODY = '{"order":42}';
// the vector of crates/dueq-server/src/push/deliver.rs
const HEADER = "t=1700000000000,v1=a8c00e10d5a7c6eb178a1b1327642952af1f418c7162d73683c2b72b1fddcecb";
const NOW = 1_700_000_000_000;

test("known vector", () => {
  assert.equal(sign(SECRET, NOW, BODY), HEADER);
  assert.ok(verifySignature(SECRET, HEADER, BODY, { nowMs: NOW }));
  assert.ok(verifySignature(Buffer.from(SECRET), HEADER, Buffer.from(BODY), { nowMs: NOW + 100_000 }));
});

test("refusals", () => {
  assert.ok(!verifySignature(SECRET, HEADER, BODY + " ", { nowMs: NOW }));
  assert.ok(!verifySignature("another-secret-16", HEADER, BODY, { nowMs: NOW }));
  assert.ok(!verifySignature(SECRET, HEADER, BODY, { nowMs: NOW + 300_001 }));
  assert.ok(!verifySignature(SECRET, undefined, BODY, { nowMs: NOW }));
  assert.ok(!verifySignature(SECRET, "t=abc,v1=00", BODY, { nowMs: NOW }));
  assert.ok(!verifySignature(SECRET, HEADER.replace("v1=a8", "v1=b8"), BODY, { nowMs: NOW }));
  assert.ok(verifySignature(["new-secret-000000", SECRET], HEADER, BODY, { nowMs: NOW }));
});

test("verifyWebhook in a Node request handler (Express style: headers + raw body)", async () => {
  const secret = "s".repeat(32);
  const srv = createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      res.statusCode = verifyWebhook(secret, req.headers, Buffer.concat(chunks)) ? 200 : 401;
      res.end();
    });
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${srv.address().port}/`;
  try {
    const body = '{"order":7}';
    const good = await fetch(url, { method: "POST", body, headers: { "Dueq-Signature": sign(secret, Date.now(), body) } });
    assert.equal(good.status, 200);
    const bad = await fetch(url, { method: "POST", body, headers: { "Dueq-Signature": sign("x".repeat(32), Date.now(), body) } });
    assert.equal(bad.status, 401);
    assert.ok(verifyWebhook(secret, new Headers({ "dueq-signature": sign(secret, Date.now(), body) }), body));
  } finally {
    srv.close();
  }
});
