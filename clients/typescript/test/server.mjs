// A live `dueq serve` for a test file: a free port on 127.0.0.1, a bearer token, its own
// embedded redis-server in a temporary directory (never the shared 6379). The binary:
// $DUEQ_BIN, else the one cargo built ($CARGO_TARGET_DIR or the workspace's target).
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { randomBytes, randomUUID } from "node:crypto";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const workspace = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");

export function binary() {
  if (process.env.DUEQ_BIN) return process.env.DUEQ_BIN;
  const target = process.env.CARGO_TARGET_DIR ?? join(workspace, "target");
  for (const profile of ["debug", "release"]) {
    const p = join(target, profile, "dueq");
    if (existsSync(p)) return p;
  }
  throw new Error(`no dueq binary under ${target} (cargo build -p dueq-cli, or set DUEQ_BIN)`);
}

export async function startServer(...extra) {
  const dir = mkdtempSync(join(tmpdir(), "dueq-node-"));
  const token = "t-" + randomBytes(12).toString("hex");
  const env = { ...process.env, DUEQ_TOKENS: token };
  delete env.DUEQ_REDIS_URL;
  const proc = spawn(binary(), ["serve", "--listen", "127.0.0.1:0", "--data-dir", join(dir, "data"), ...extra], {
    cwd: dir,
    env,
    stdio: ["ignore", "ignore", "pipe"],
  });
  let log = "";
  proc.stderr.on("data", (d) => (log += d));
  const deadline = Date.now() + 60_000;
  let url;
  for (;;) {
    if (proc.exitCode !== null) throw new Error("dueq serve exited early:\n" + log);
    if (Date.now() > deadline) throw new Error("dueq serve not ready in 60 s:\n" + log);
    url ??= /listening on (http:\/\/[0-9.:]+)/.exec(log)?.[1];
    if (url) {
      try {
        if ((await fetch(url + "/readyz")).ok) break;
      } catch {}
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    url,
    token,
    /** The Redis URL of its embedded redis-server, for the `dueq` commands of a test. */
    redisUrl: () => readFileSync(join(dir, "data", "redis.url"), "utf8").split("\n")[0],
    async stop() {
      if (proc.exitCode === null) {
        const exited = new Promise((r) => proc.once("exit", r));
        proc.kill("SIGTERM");
        const t = setTimeout(() => proc.kill("SIGKILL"), 30_000);
        await exited;
        clearTimeout(t);
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A queue name of its own for each test. */
export const fresh = () => "ts-" + randomUUID().slice(0, 12);

/** Polls `cond` until it returns a truthy value (returned) or `timeoutMs` passes. */
export async function waitUntil(cond, timeoutMs = 10_000, what = "condition") {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The server's `/metrics` text. */
export async function scrape(server) {
  const r = await fetch(server.url + "/metrics", { headers: { authorization: `Bearer ${server.token}` } });
  if (!r.ok) throw new Error(`GET /metrics: ${r.status}`);
  return r.text();
}

/** The value of the one sample of `name` in `text` (Prometheus text format) whose labels
 * are exactly `labels`. */
export function metric(text, name, labels) {
  const found = [];
  for (const line of text.split("\n")) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: -?\d+)?$/.exec(line);
    if (!m || m[1] !== name) continue;
    const got = Object.fromEntries([...(m[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)].map((l) => [l[1], l[2]]));
    const want = Object.entries(labels);
    if (Object.keys(got).length === want.length && want.every(([k, v]) => got[k] === v)) found.push(Number(m[3]));
  }
  if (found.length !== 1) throw new Error(`${name}${JSON.stringify(labels)}: ${found.length} samples in /metrics`);
  return found[0];
}
