// The published tarball installs into an empty project and runs the docs' quick start.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { plainTarget } from "./env.js";

const packageDir = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const docs = join(packageDir, "..", "..", "docs", "typescript.md");

function quickStart(): string {
  const page = readFileSync(docs, "utf8");
  const section = page.split("## Quick start")[1] ?? "";
  const block = /```js\n([\s\S]*?)```/.exec(section);
  assert.ok(block?.[1], "docs/typescript.md has a js block under Quick start");
  return block[1];
}

test("npm pack's tarball installs into an empty project and runs the quick start", { timeout: 240_000 }, () => {
  const project = mkdtempSync(join(tmpdir(), "toolrt-pack-"));
  try {
    execFileSync("npm", ["pack", "--silent", "--pack-destination", project], { cwd: packageDir, stdio: "pipe" });
    const tarball = readdirSync(project).find((name) => name.endsWith(".tgz"));
    assert.ok(tarball, "npm pack made a tarball");
    writeFileSync(join(project, "package.json"), JSON.stringify({ name: "empty", private: true, type: "module" }));
    execFileSync("npm", ["install", "--no-audit", "--no-fund", "--silent", `./${tarball}`], { cwd: project, stdio: "pipe" });
    writeFileSync(join(project, "quickstart.mjs"), quickStart());
    const printed = execFileSync(process.execPath, ["quickstart.mjs"], {
      cwd: project,
      env: { ...process.env, TOOLRT_TARGET: plainTarget(), TOOLRT_TOKEN: "" },
    }).toString();
    assert.equal(printed, "true hello from the sandbox\n");
  } finally {
    rmSync(project, { recursive: true, force: true });
  }
});
