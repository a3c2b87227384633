// The published tarball installs into an empty project and runs the docs' examples.
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

/** The first js block under a heading (## or ###) of docs/typescript.md. */
function example(heading: string): string {
  const page = readFileSync(docs, "utf8");
  const section = page.split(`## ${heading}\n`)[1] ?? "";
  const block = /```js\n([\s\S]*?)```/.exec(section);
  assert.ok(block?.[1], `docs/typescript.md has a js block under ${heading}`);
  return block[1];
}

test("npm pack's tarball installs into an empty project and runs the docs' examples", { timeout: 240_000 }, () => {
  const project = mkdtempSync(join(tmpdir(), "toolrt-pack-"));
  try {
    execFileSync("npm", ["pack", "--silent", "--pack-destination", project], { cwd: packageDir, stdio: "pipe" });
    const tarball = readdirSync(project).find((name) => name.endsWith(".tgz"));
    assert.ok(tarball, "npm pack made a tarball");
    writeFileSync(join(project, "package.json"), JSON.stringify({ name: "empty", private: true, type: "module" }));
    execFileSync("npm", ["install", "--no-audit", "--no-fund", "--silent", `./${tarball}`], { cwd: project, stdio: "pipe" });
    const run = (heading: string) => {
      writeFileSync(join(project, "example.mjs"), example(heading));
      const env = { ...process.env, TOOLRT_TARGET: plainTarget(), TOOLRT_TOKEN: "" };
      return execFileSync(process.execPath, ["example.mjs"], { cwd: project, env }).toString();
    };
    assert.equal(run("Quick start"), "true hello from the sandbox\n");
    assert.equal(run("Programs: exec and files"), "0 5891b5b522d5\nping\n0\nwritten 8\nFILE_NOT_FOUND\n");
    assert.equal(run("Terminals"), '"24 80\\r\\nname? ada\\r\\nhi ada\\r\\n" 0\n');
  } finally {
    rmSync(project, { recursive: true, force: true });
  }
});
