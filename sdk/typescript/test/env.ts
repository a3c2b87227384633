// What scripts/typescript_daemons.py tells the tests: the daemons and credentials.
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { Client, type ClientOptions } from "../src/index.js";

export function need(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run the tests with make test-typescript`);
  return value;
}

export const plainTarget = () => need("TOOLRT_TEST_TARGET");

export function plainClient(options: ClientOptions = {}): Client {
  return new Client({ target: plainTarget(), token: "", ...options });
}

/** A tar archive of the given files (path → text), made by the system's tar. */
export function makeTar(files: Record<string, string>): Buffer {
  const root = mkdtempSync(join(tmpdir(), "toolrt-tar-"));
  try {
    for (const [path, text] of Object.entries(files)) {
      mkdirSync(dirname(join(root, path)), { recursive: true });
      writeFileSync(join(root, path), text);
    }
    return execFileSync("tar", ["-c", "-C", root, ...Object.keys(files)]);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

/** The member names of a tar archive, listed by the system's tar. */
export function tarNames(tar: Uint8Array): string[] {
  return execFileSync("tar", ["-t"], { input: tar }).toString().split("\n").filter(Boolean);
}

export const text = (data: Uint8Array) => Buffer.from(data).toString();
