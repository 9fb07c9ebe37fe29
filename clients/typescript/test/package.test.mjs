// The package as users get it: `npm pack`, then installed from the tarball into a fresh
// project outside the repository, where a CommonJS script (`require`) and an ES module
// (`import`) call a live server and TypeScript (strict) compiles against its types under both
// module systems. publint (pinned) checks the tarball; the README links only to absolute URLs.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { fresh, startServer } from "./server.mjs";

const pkgDir = fileURLToPath(new URL("..", import.meta.url));
const bin = (name) => join(pkgDir, "node_modules", ".bin", name);
const npm = (args, cwd) => execFileSync("npm", [...args, "--no-audit", "--no-fund", "--loglevel=error"], { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });

let server, dir, tarball, files;
before(async () => {
  server = await startServer();
  dir = mkdtempSync(join(tmpdir(), "dueq-pack-"));
  // dist/ is fresh: `npm test` built it
  const [packed] = JSON.parse(npm(["pack", "--ignore-scripts", "--json", "--pack-destination", dir], pkgDir));
  tarball = join(dir, packed.filename);
  files = packed.files.map((f) => f.path).sort();
  const app = join(dir, "app");
  execFileSync("mkdir", [app]);
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", private: true }));
  // no dependencies: nothing to fetch
  npm(["install", "--offline", tarball], app);
});
after(async () => {
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const app = () => join(dir, "app");
const node = (file, ...args) => JSON.parse(execFileSync(process.execPath, [join(app(), file), ...args], { cwd: app(), encoding: "utf8" }));

test("the tarball holds both builds, the licenses and the README, nothing else", () => {
  for (const f of ["LICENSE-MIT", "LICENSE-APACHE", "README.md", "package.json", "dist/index.js", "dist/index.d.ts", "dist/cjs/index.js", "dist/cjs/index.d.ts", "dist/cjs/package.json"]) {
    assert.ok(files.includes(f), `${f} missing from the tarball`);
  }
  assert.deepEqual(files.filter((f) => !/^(dist\/|LICENSE-|README\.md$|package\.json$)/.test(f)), []);
  const pkg = JSON.parse(readFileSync(join(pkgDir, "package.json"), "utf8"));
  assert.equal(pkg.repository.url, "git+https://github.com/dueq/dueq.git");
  assert.equal(pkg.repository.directory, "clients/typescript");
  assert.match(pkg.homepage, /^https:\/\/github\.com\/dueq\/dueq\//);
  assert.match(pkg.bugs.url, /^https:\/\/github\.com\/dueq\/dueq\/issues$/);
});

test("require('dueq') loads the CommonJS build and works against a live server", () => {
  writeFileSync(
    join(app(), "main.cjs"),
    `const { Client, DueqError, NotFoundError, VERSION } = require("dueq");
const [url, token, queue] = process.argv.slice(2);
(async () => {
  const q = new Client(url, { token }).queue(queue);
  const e = await q.enqueue({ from: "cjs" }, { key: "cjs" });
  const t = await q.get({ key: "cjs" });
  const notFound = await q.pauseSchedule("none").then(() => false, (err) => err instanceof NotFoundError && err instanceof DueqError);
  console.log(JSON.stringify({ same: t.id === e.id, payload: t.payload, notFound, VERSION, resolved: require.resolve("dueq") }));
})().catch((err) => { console.error(err); process.exit(1); });
`,
  );
  const out = node("main.cjs", server.url, server.token, fresh());
  assert.deepEqual([out.same, out.payload, out.notFound], [true, { from: "cjs" }, true]);
  assert.ok(out.resolved.startsWith(join(app(), "node_modules", "dueq")), out.resolved);
  assert.ok(out.resolved.endsWith(join("dist", "cjs", "index.js")), out.resolved);
  assert.match(out.VERSION, /^\d+\.\d+\.\d+/);
});

test("import 'dueq' loads the ES module build and works against a live server", () => {
  writeFileSync(
    join(app(), "main.mjs"),
    `import * as dueq from "dueq";
import { Client, Worker } from "dueq";
const [url, token, queue] = process.argv.slice(2);
const q = new Client(url, { token }).queue(queue);
await q.enqueue({ from: "esm" }, { headers: { k: "v" } });
let seen;
const w = new Worker(new Client(url, { token }), queue, (task, { signal }) => { seen = [task.payload, signal.aborted, task.headers]; w.stop(); }, { pollMs: 200, handleSignals: false });
const stats = await w.run();
// the optional @opentelemetry/api is not installed here: enqueue and worker run without it
const otel = await import("@opentelemetry/api").then(() => true, () => false);
// a CommonJS module imported from ESM would show its module.exports as \`default\`
console.log(JSON.stringify({ seen, acked: stats.acked, hasDefault: "default" in dueq, otel }));
`,
  );
  const out = node("main.mjs", server.url, server.token, fresh());
  assert.deepEqual(out, { seen: [{ from: "esm" }, false, { k: "v" }], acked: 1, hasDefault: false, otel: false });
});

test("TypeScript --strict compiles against the types under import, require and node10", () => {
  const use = `import { Client, TaskAbortedError, type Task, type HandlerContext } from "dueq";
const q = new Client("http://127.0.0.1:7878", { retries: 1 }).queue("orders");
export const t: Promise<Task | null> = q.get({ key: "order:1" });
export const s = q.setSchedule("nightly", { cron: "0 3 * * *", payload: null, headers: { source: "cron" } });
export const e = q.enqueue(null, { headers: { tenant: "acme" } });
export const c = q.claim().then((ts) => ts.map((t) => [t.headers["tenant"], t.continues_trace]));
export const h = (_: unknown, ctx: HandlerContext) => ctx.signal.reason instanceof TaskAbortedError && ctx.signal.reason.kind;
`;
  writeFileSync(join(app(), "use.mts"), use);
  writeFileSync(join(app(), "use.cts"), use);
  writeFileSync(join(app(), "old.ts"), use);
  const tsc = (args) => {
    try {
      return execFileSync(bin("tsc"), ["--noEmit", "--strict", "--target", "es2022", "--lib", "es2022,dom", "--skipLibCheck", "false", ...args], { cwd: app(), encoding: "utf8" });
    } catch (e) {
      throw new Error(`tsc ${args.join(" ")}:\n${e.stdout}`);
    }
  };
  const listed = tsc(["--module", "nodenext", "--moduleResolution", "nodenext", "--listFiles", "use.mts", "use.cts"]);
  assert.ok(listed.includes(join("node_modules", "dueq", "dist", "index.d.ts")), "import: dist/index.d.ts");
  assert.ok(listed.includes(join("node_modules", "dueq", "dist", "cjs", "index.d.ts")), "require: dist/cjs/index.d.ts");
  tsc(["--module", "commonjs", "--moduleResolution", "node10", "old.ts"]);
  // the types are real: a misuse does not compile
  writeFileSync(join(app(), "bad.mts"), `import { Client } from "dueq";\nexport const n: number = new Client().queue("q").name;\n`);
  assert.throws(() => tsc(["--module", "nodenext", "--moduleResolution", "nodenext", "bad.mts"]), /TS2322/);
});

test("publint finds nothing to say about the tarball", () => {
  const out = execFileSync(bin("publint"), ["run", tarball, "--strict", "--level", "suggestion"], { encoding: "utf8" });
  assert.match(out, /All good!/);
});

test("the README links only to absolute URLs (it is shown on the registry too)", () => {
  const readme = readFileSync(join(pkgDir, "README.md"), "utf8");
  const links = [...readme.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]);
  assert.deepEqual(links.filter((l) => !/^https:\/\//.test(l)), []);
});
