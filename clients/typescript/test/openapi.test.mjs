// The served OpenAPI document turns into TypeScript types (openapi-typescript) that compile
// (tsc --noEmit, strict), and the dead-letter list gets its own type, not the queue list's.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { startServer } from "./server.mjs";

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
