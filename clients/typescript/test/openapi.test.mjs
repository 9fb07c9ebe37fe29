// The served OpenAPI document turns into TypeScript types (openapi-typescript) that compile
// (tsc --noEmit, strict), and the dead-letter list gets its own type, not the queue list's.
// The client's own types (src/types.ts) match those generated ones, field for field.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { startServer } from "./server.mjs";

const dist = fileURLToPath(new URL("../dist/index.js", import.meta.url));
const tsc = (file) =>
  execFileSync(
    bin("tsc"),
    ["--noEmit", "--strict", "--module", "nodenext", "--moduleResolution", "nodenext", "--skipLibCheck", "false", "--lib", "es2022,dom", "--types", "node", file],
    { stdio: "pipe", encoding: "utf8", cwd: fileURLToPath(new URL("..", import.meta.url)) },
  );
const bin = (name) => fileURLToPath(new URL(`../node_modules/.bin/${name}`, import.meta.url));
let server, dir;
before(async () => {
  server = await startServer();
  dir = mkdtempSync(join(tmpdir(), "dueq-openapi-ts-"));
});
after(async () => {
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("openapi-typescript types of the served document compile", () => {
  const types = join(dir, "api.d.ts");
  execFileSync(bin("openapi-typescript"), [server.url + "/openapi.json", "-o", types], { stdio: "pipe" });
  writeFileSync(
    join(dir, "use.ts"),
    `import type { operations } from "./api.js";
type Dead = operations["list_dead"]["responses"][200]["content"]["application/json"];
type Queues = operations["list_queues"]["responses"][200]["content"]["application/json"];
const d: Dead = { total: 0, tasks: [] };
const q: Queues = { queues: [], total: 0, next: null };
type Outcome = operations["cancel_task"]["responses"][200]["content"]["application/json"]["outcome"];
const o: Outcome = "cancelled";
export { d, q, o };
`,
  );
  const out = execFileSync(
    bin("tsc"),
    ["--noEmit", "--strict", "--module", "nodenext", "--moduleResolution", "nodenext", "--skipLibCheck", "false", join(dir, "use.ts")],
    { stdio: "pipe", encoding: "utf8" },
  );
  assert.equal(out, "");
  // an outcome outside the enum does not compile
  writeFileSync(join(dir, "bad.ts"), `import type { operations } from "./api.js";\nconst o: operations["cancel_task"]["responses"][200]["content"]["application/json"]["outcome"] = "canceled";\nexport { o };\n`);
  assert.throws(() => execFileSync(bin("tsc"), ["--noEmit", "--strict", "--module", "nodenext", "--moduleResolution", "nodenext", join(dir, "bad.ts")], { stdio: "pipe" }));
});

// Answers: the client's type and the generated one have the same fields with the same types
// (optional or not: the server sends every field, `null` when empty). Requests: the client
// offers every field, and what it may send the schema accepts.
const ANSWERS = {
  Task: "TaskResponse",
  DeadTask: "DeadTaskResponse",
  BrowsedTask: "BrowsedTask",
  TaskPage: "TaskPageResponse",
  DeadPage: "DeadListResponse",
  QueueStats: "StatsResponse",
  QueuesPage: "QueuesResponse",
  ClaimedTask: "ClaimedTaskResponse",
  Enqueued: "EnqueueResponse",
  WorkerInfo: "WorkerResponse",
  Schedule: "ScheduleResponse",
  SchedulesPage: "ScheduleList",
  Triggered: "TriggerResponse",
  Backfilled: "BackfillResponse",
  QueueSettings: "SettingsBody",
  Webhook: "WebhookResponse",
  DeadBulkResult: "DeadBulkResponse",
  PurgeResult: "PurgeResponse",
  Health: "Health",
  Readiness: "Ready",
  ClockReading: "ClockResponse",
};
const REQUESTS = {
  TaskSpec: "EnqueueRequest",
  ClaimOptions: "ClaimRequest",
  WorkerBeat: "BeatRequest",
  ScheduleSpec: "ScheduleRequest",
  SettingsChanges: "SettingsBody",
  WebhookSpec: "WebhookRequest",
  DeadFilter: "DeadBulkRequest",
  BackfillRange: "BackfillRequest",
};

test("the client's types match the served schemas", () => {
  const types = join(dir, "api.d.ts");
  execFileSync(bin("openapi-typescript"), [server.url + "/openapi.json", "-o", types], { stdio: "pipe" });
  const lines = [
    `import type { components } from "./api.js";`,
    `import type * as C from ${JSON.stringify(dist)};`,
    `type S = components["schemas"];`,
    `type Deep<T> = T extends readonly (infer U)[] ? Deep<U>[] : T extends object ? { [K in keyof T]-?: Deep<Exclude<T[K], undefined>> } : T;`,
    `type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;`,
    `type NoneMissing<Of, In> = [Exclude<keyof Of, keyof In>] extends [never] ? true : false;`,
  ];
  let n = 0;
  for (const [mine, theirs] of Object.entries(ANSWERS)) {
    lines.push(`const a${n++}: Same<Deep<C.${mine}>, Deep<S["${theirs}"]>> = true; // ${mine}`);
  }
  for (const [mine, theirs] of Object.entries(REQUESTS)) {
    lines.push(`const r${n++}: NoneMissing<S["${theirs}"], C.${mine}> = true; // ${mine}: every field`);
    lines.push(`const s${n++}: Same<Deep<C.${mine}> extends Deep<S["${theirs}"]> ? 1 : 0, 1> = true; // ${mine}: accepted`);
  }
  lines.push(`export {};`);
  writeFileSync(join(dir, "same.ts"), lines.join("\n") + "\n");
  try {
    tsc(join(dir, "same.ts"));
  } catch (e) {
    const bad = [...String(e.stdout).matchAll(/same\.ts\((\d+),/g)].map((m) => lines[Number(m[1]) - 1]);
    assert.fail(`the client's types differ from the served schemas:\n${bad.join("\n") || e.stdout}`);
  }
  // a field the schema lacks is caught
  writeFileSync(join(dir, "differ.ts"), lines.slice(0, 6).join("\n") + `\nconst x: Same<Deep<C.Task & { extra: 1 }>, Deep<S["TaskResponse"]>> = true;\nexport { x };\n`);
  assert.throws(() => tsc(join(dir, "differ.ts")));
});
