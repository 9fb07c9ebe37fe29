// Builds the package twice from src/: dist/ as ES modules (the `import` condition) and
// dist/cjs/ as CommonJS (the `require` condition), each with its declarations. The
// package.json in dist/cjs/ makes Node and TypeScript read that folder as CommonJS although
// the package says "type": "module".
import { execFileSync } from "node:child_process";
import { rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
rmSync(new URL("../dist", import.meta.url), { recursive: true, force: true });
for (const project of ["tsconfig.json", "tsconfig.cjs.json"]) {
  execFileSync(process.execPath, [tsc, "-p", project], { cwd: root, stdio: "inherit" });
}
writeFileSync(new URL("../dist/cjs/package.json", import.meta.url), '{ "type": "commonjs" }\n');
