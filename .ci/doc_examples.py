#!/usr/bin/env python3
"""Run the code blocks of the README and the user guide against a live `dueq serve`.

Each page runs in a temporary directory of its own, with its own `dueq serve` (embedded
redis-server, data in ./dueq-data there, a free port on 127.0.0.1). `localhost:7878` and
`127.0.0.1:7878` in a block are replaced by that server's address, and DUEQ_LISTEN is set to
it, so `dueq serve` written without flags listens there. Blocks of a page run in order; the
first failure ends the page and fails the run, showing the block and its output.

Fence info strings (the words after the opening ```):

    sh / bash / shell      run with bash -e -o pipefail; must exit 0
    sh,exit=N              must exit with status N
    sh,retry=S             run again until it exits 0, for up to S seconds
    sh,background          start it and leave it running until the page ends (a block that
                           runs `dueq serve` is waited for until /readyz answers 200)
    sh,norun               not run (installs, commands that need another system)
    python                 compiled, then run (PYTHONPATH: clients/python/src)
    python,compile         compiled only (workers that run until stopped, placeholders)
    ts / typescript        type-checked with tsc --strict against clients/typescript;
                           run with node unless marked compile
    rust                   only {{#include .../examples/X.rs:anchor}}: a test runs the program
    any other language     not run (text, json, toml, yaml, sql, ini)

A check the reader does not need to see goes in an HTML comment, run like a sh block:

    <!-- check retry=60
    dueq stats orders --json | grep -q '"succeeded_total":1'
    -->

The last line is `docs: N passed, N failed, N skipped`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHELL_LANGS = {"sh", "bash", "shell"}
PY_LANGS = {"python", "py"}
TS_LANGS = {"ts", "typescript"}
# Languages shown for reading, never run; a fence without a language fails the run, so every
# block says what it is.
# a Rust block is an mdBook include of an example program that `cargo test` builds and runs
RUST_INCLUDE = re.compile(r"\{\{#include \S+/examples/\S+\.rs(:\w+)?\}\}")
READ_ONLY_LANGS = {"rust", "text", "json", "toml", "yaml", "sql", "ini", "promql", "http"}
DEFAULT_ADDRS = ("localhost:7878", "127.0.0.1:7878")
FENCE = re.compile(r"^(```+|~~~+)(.*)$")
CHECK_OPEN = re.compile(r"^<!--\s*check\b(.*)$")


@dataclass
class Block:
    path: Path
    line: int
    lang: str
    attrs: dict[str, str]
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


@dataclass
class Tally:
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)

    def count(self, kind: str) -> None:
        self.by_kind[kind] = self.by_kind.get(kind, 0) + 1


def parse_info(info: str) -> tuple[str, dict[str, str]]:
    parts = [p for p in re.split(r"[,\s]+", info.strip()) if p]
    if not parts:
        return "", {}
    attrs: dict[str, str] = {}
    for p in parts[1:]:
        k, _, v = p.partition("=")
        attrs[k] = v
    return parts[0].lower(), attrs


def blocks_of(path: Path) -> list[Block]:
    out: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        c = CHECK_OPEN.match(lines[i])
        if m:
            fence, info = m.group(1), m.group(2)
            lang, attrs = parse_info(info)
            start = i + 1
            body = []
            i += 1
            while i < len(lines) and not lines[i].startswith(fence):
                body.append(lines[i])
                i += 1
            if i == len(lines):
                raise SystemExit(f"{path}:{start}: unclosed code fence")
            out.append(Block(path, start, lang, attrs, "\n".join(body) + "\n"))
        elif c:
            _, attrs = parse_info("check " + c.group(1))
            start = i + 1
            body = []
            i += 1
            while i < len(lines) and lines[i].strip() != "-->":
                body.append(lines[i])
                i += 1
            out.append(Block(path, start, "check", attrs, "\n".join(body) + "\n"))
        i += 1
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except Exception:
        return False


def show_failure(block: Block, text: str, output: str, why: str) -> None:
    bar = "-" * 72
    print(f"\nFAILED {block.where} ({block.lang}): {why}", flush=True)
    print(bar)
    print(block.text.rstrip())
    if text != block.text:
        print(f"{bar}\nas run:\n{text.rstrip()}")
    print(f"{bar}\noutput:\n{output.rstrip()[-6000:]}\n{bar}", flush=True)


class Page:
    """One page's temporary directory, server and background processes."""

    def __init__(self, path: Path, env: dict[str, str], tally: Tally, ts: "TsChecker") -> None:
        self.path = path
        self.tally = tally
        self.ts = ts
        self.dir = Path(tempfile.mkdtemp(prefix="dueq-doc-"))
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.env = dict(env)
        self.env["DUEQ_LISTEN"] = self.addr
        self.env["DUEQ_URL"] = f"http://{self.addr}"
        self.bg: list[tuple[Block, subprocess.Popen[bytes], Path]] = []

    def subst(self, text: str) -> str:
        for a in DEFAULT_ADDRS:
            text = text.replace(a, self.addr)
        return text

    def start_server(self) -> bool:
        log = self.dir / "serve.log"
        fake = Block(self.path, 0, "sh", {"background": ""}, "dueq serve\n")
        return self.background(fake, "dueq serve\n", log)

    def background(self, block: Block, text: str, log: Path | None = None) -> bool:
        log = log or self.dir / f"bg-{block.line}.log"
        fh = open(log, "wb")
        p = subprocess.Popen(
            ["bash", "-e", "-o", "pipefail", "-c", text],
            cwd=self.dir, env=self.env, stdout=fh, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
        self.bg.append((block, p, log))
        if "dueq serve" in text:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if http_ok(f"http://{self.addr}/readyz"):
                    return True
                if p.poll() is not None:
                    break
                time.sleep(0.2)
            show_failure(block, text, log.read_text(errors="replace"), "server not ready")
            return False
        time.sleep(1.0)
        if p.poll() is not None:
            show_failure(block, text, log.read_text(errors="replace"),
                         f"background command ended at once (status {p.returncode})")
            return False
        return True

    def run_shell(self, block: Block) -> bool:
        text = self.subst(block.text)
        if "background" in block.attrs:
            return self.background(block, text)
        want = int(block.attrs.get("exit", "0") or 0)
        retry_s = float(block.attrs.get("retry", "0") or 0)
        deadline = time.monotonic() + retry_s
        while True:
            try:
                r = subprocess.run(
                    ["bash", "-e", "-o", "pipefail", "-c", text], cwd=self.dir, env=self.env,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    timeout=120,
                )
                out, code = r.stdout.decode(errors="replace"), r.returncode
            except subprocess.TimeoutExpired as e:
                out, code = (e.stdout or b"").decode(errors="replace") + "\n(timed out)", -1
            if code == want:
                return True
            if time.monotonic() >= deadline:
                why = f"exit status {code}, expected {want}"
                if retry_s:
                    why += f" (retried for {retry_s:g} s)"
                show_failure(block, text, out + self.bg_logs(), why)
                return False
            time.sleep(1.0)

    def run_python(self, block: Block) -> bool:
        text = self.subst(block.text)
        src = self.dir / f"block_{block.line}.py"
        src.write_text(text)
        r = subprocess.run([sys.executable, "-m", "py_compile", str(src)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            show_failure(block, text, r.stdout.decode(errors="replace"), "does not compile")
            return False
        if "compile" in block.attrs:
            return True
        env = dict(self.env)
        env["PYTHONPATH"] = str(ROOT / "clients" / "python" / "src")
        try:
            r = subprocess.run([sys.executable, str(src)], cwd=self.dir, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
            out, code = r.stdout.decode(errors="replace"), r.returncode
        except subprocess.TimeoutExpired as e:
            out, code = (e.stdout or b"").decode(errors="replace") + "\n(timed out)", -1
        if code != 0:
            show_failure(block, text, out, f"exit status {code}")
            return False
        return True

    def run_ts(self, block: Block) -> bool:
        text = self.subst(block.text)
        ok, out = self.ts.check_and_run(block, text, self.env, run="compile" not in block.attrs)
        if not ok:
            show_failure(block, text, out, "TypeScript check or run failed")
        return ok

    def bg_logs(self) -> str:
        parts = []
        for b, _, log in self.bg:
            parts.append(f"\n[background {b.text.strip()[:60]!r}, last lines]\n"
                         + "\n".join(log.read_text(errors="replace").splitlines()[-15:]))
        return "".join(parts)

    def close(self) -> None:
        # last started, first stopped: workers before the server they use
        for _, p, _ in reversed(self.bg):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    p.wait(timeout=40)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def run(self, blocks: list[Block]) -> bool:
        runnable = [b for b in blocks if self.kind(b) in ("run",)]
        if not runnable:
            for b in blocks:
                self.skip(b)
            return True
        own_serve = any("background" in b.attrs and "dueq serve" in b.text for b in runnable)
        if not own_serve and not self.start_server():
            self.tally.failed += 1
            return False
        for i, b in enumerate(blocks):
            if self.kind(b) != "run":
                self.skip(b)
                continue
            if b.lang in SHELL_LANGS or b.lang == "check":
                ok = self.run_shell(b)
            elif b.lang in PY_LANGS:
                ok = self.run_python(b)
            else:
                ok = self.run_ts(b)
            self.tally.count(b.lang if b.lang != "bash" else "sh")
            if ok:
                self.tally.passed += 1
            else:
                self.tally.failed += 1
                rest = [x for x in blocks[i + 1:] if self.kind(x) == "run"]
                self.tally.skipped += len(rest)
                print(f"  ({len(rest)} later block(s) of this page not run)")
                return False
        return True

    def kind(self, b: Block) -> str:
        if "norun" in b.attrs:
            return "norun"
        if b.lang in SHELL_LANGS or b.lang == "check" or b.lang in PY_LANGS or b.lang in TS_LANGS:
            return "run"
        if b.lang == "rust" and not all(
            RUST_INCLUDE.fullmatch(line.strip()) for line in b.text.strip().splitlines()
        ):
            raise SystemExit(f"{b.where}: a Rust block shows part of a program under examples/ "
                             "with {{#include path:anchor}}, which the Rust tests compile and "
                             "run; it holds no code of its own")
        if b.lang in READ_ONLY_LANGS:
            return "read"
        raise SystemExit(f"{b.where}: fence language {b.lang!r} is not one the runner knows; "
                         "give it one (sh, python, ts, rust, text, ...) or add ,norun")

    def skip(self, b: Block) -> None:
        self.tally.skipped += 1
        if b.lang == "rust":
            self.tally.count("rust (examples/, run by cargo test)")
        else:
            self.tally.count(f"{b.lang or 'none'} (not run)")


class TsChecker:
    """Type-checks (tsc --strict) and runs TypeScript blocks against clients/typescript."""

    def __init__(self) -> None:
        self.client = ROOT / "clients" / "typescript"
        self.tsc = self.client / "node_modules" / ".bin" / "tsc"
        self.dir: Path | None = None

    def ready(self) -> str | None:
        if not self.tsc.exists():
            return "clients/typescript has no node_modules: run `npm ci` there"
        if not (self.client / "dist" / "index.js").exists():
            return "clients/typescript is not built: run `npm run build` there"
        return None

    def project(self) -> Path:
        if self.dir is None:
            self.dir = Path(tempfile.mkdtemp(prefix="dueq-doc-ts-"))
            (self.dir / "node_modules").mkdir()
            (self.dir / "node_modules" / "dueq").symlink_to(self.client)
            types = self.client / "node_modules" / "@types"
            (self.dir / "node_modules" / "@types").symlink_to(types)
            (self.dir / "package.json").write_text('{"type": "module"}\n')
        return self.dir

    def check_and_run(self, block: Block, text: str, env: dict[str, str],
                      run: bool) -> tuple[bool, str]:
        why = self.ready()
        if why:
            return False, why
        d = self.project()
        name = f"block_{block.path.stem}_{block.line}"
        (d / f"{name}.ts").write_text(text)
        (d / "tsconfig.json").write_text(json.dumps({
            "compilerOptions": {
                "target": "es2022", "module": "nodenext", "moduleResolution": "nodenext",
                "strict": True, "outDir": "out", "types": ["node"], "skipLibCheck": True,
            },
            "files": [f"{name}.ts"],
        }))
        r = subprocess.run([str(self.tsc), "-p", str(d)], cwd=d, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
        if r.returncode != 0:
            return False, r.stdout.decode(errors="replace")
        if not run:
            return True, ""
        try:
            r = subprocess.run(["node", str(d / "out" / f"{name}.js")], cwd=d, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        except subprocess.TimeoutExpired as e:
            return False, (e.stdout or b"").decode(errors="replace") + "\n(timed out)"
        return r.returncode == 0, r.stdout.decode(errors="replace")

    def close(self) -> None:
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)


def pages(args: argparse.Namespace) -> list[Path]:
    if args.files:
        return [Path(f).resolve() for f in args.files]
    guide = sorted((ROOT / "docs" / "guide" / "src").rglob("*.md"))
    return [ROOT / "README.md", *guide]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*", help="pages to run (default: README.md and the guide)")
    ap.add_argument("--dueq", help="the dueq binary (default: target/debug/dueq, else PATH)")
    args = ap.parse_args()

    dueq = args.dueq or os.environ.get("DUEQ_BIN") or str(ROOT / "target" / "debug" / "dueq")
    if not Path(dueq).exists():
        dueq = shutil.which("dueq") or ""
    if not dueq:
        print("no dueq binary: build it (cargo build -p dueq-cli) or pass --dueq", flush=True)
        return 2
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DUEQ_")}   # no Redis URL, data dir or token leaks in
    env["PATH"] = f"{Path(dueq).resolve().parent}:{env.get('PATH', '')}"
    env["DUEQ_LOG"] = "warn"
    print(f"docs: dueq is {dueq}", flush=True)

    tally = Tally()
    ts = TsChecker()
    try:
        for path in pages(args):
            blocks = blocks_of(path)
            if not blocks:
                continue
            page = Page(path, env, tally, ts)
            t0 = time.monotonic()
            try:
                ok = page.run(blocks)
            finally:
                page.close()
            rel = path.relative_to(ROOT)
            print(f"{'ok  ' if ok else 'FAIL'} {rel} ({len(blocks)} blocks, "
                  f"{time.monotonic() - t0:.1f} s)", flush=True)
    finally:
        ts.close()
    kinds = ", ".join(f"{k}: {v}" for k, v in sorted(tally.by_kind.items()))
    print(f"docs: by kind: {kinds}")
    print(f"docs: {tally.passed} passed, {tally.failed} failed, {tally.skipped} skipped")
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
