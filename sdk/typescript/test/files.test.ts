import assert from "node:assert/strict";
import { createReadStream, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { open } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { makeTar, plainClient, tarNames } from "./env.js";

const client = plainClient();
after(() => client.close());
const MiB = 1 << 20;

test("upload unpacks a tar given as bytes or as a stream; download returns one", async () => {
  await using session = await client.session();
  const bytes = await session.upload(makeTar({ "a.txt": "alpha", "dir/b.txt": "beta" }));
  assert.equal(bytes.files, 2);

  const scratch = mkdtempSync(join(tmpdir(), "toolrt-upload-"));
  try {
    writeFileSync(join(scratch, "c.tar"), makeTar({ "c.txt": "gamma".repeat(1000) }));
    const streamed = await session.upload(createReadStream(join(scratch, "c.tar")), { path: "/workspace/sub" });
    assert.equal(streamed.files, 1);
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
  const listing = await session.shell("cat a.txt dir/b.txt; wc -c < sub/c.txt");
  assert.equal(listing.output.stdout, "alphabeta5000\n");

  const chunks = [];
  for await (const chunk of session.download(["/workspace/dir", "/workspace/a.txt"])) chunks.push(chunk);
  const names = tarNames(Buffer.concat(chunks));
  assert.ok(names.includes("a.txt"), names.join(","));
  assert.ok(names.some((n) => n.startsWith("dir/b.txt")), names.join(","));
});

test("an upload whose source cannot be read fails with the source's error", async () => {
  await using session = await client.session();
  await assert.rejects(session.upload(createReadStream("/nonexistent/archive.tar")), { code: "ENOENT" });
  assert.equal((await session.shell("echo fine")).output.stdout, "fine\n");
});

test("a 100 MiB download streams to disk with flat memory", async () => {
  await using session = await client.session({ limits: { workspaceBytes: 160 * MiB, memoryBytes: 512 * MiB } });
  const made = await session.shell("head -c 100M /dev/urandom > big && stat -c %s big", { timeout_s: 60 });
  assert.equal(made.output.stdout, `${100 * MiB}\n`);

  const scratch = mkdtempSync(join(tmpdir(), "toolrt-download-"));
  const file = await open(join(scratch, "big.tar"), "w");
  try {
    // Buffers alive at once (received, not yet collected): a client that held
    // the archive would need more than all of it.
    const before = process.memoryUsage();
    let peakBuffers = 0;
    let peakResident = 0;
    let chunks = 0;
    for await (const chunk of session.download(["/workspace/big"])) {
      await file.write(chunk);
      chunks += 1;
      const now = process.memoryUsage();
      peakBuffers = Math.max(peakBuffers, now.arrayBuffers - before.arrayBuffers);
      peakResident = Math.max(peakResident, now.rss - before.rss);
    }
    const size = (await file.stat()).size;
    // The archive: the file, a header and padding.
    assert.ok(size > 100 * MiB && size < 101 * MiB, `${size} bytes`);
    assert.ok(chunks > 10, `${chunks} chunks`);
    console.log(
      `100 MiB download in ${chunks} chunks: buffers peaked ${(peakBuffers / MiB).toFixed(1)} MiB, ` +
        `resident memory ${(peakResident / MiB).toFixed(1)} MiB above the start`,
    );
    assert.ok(peakBuffers < 64 * MiB, `buffers peaked ${peakBuffers} bytes`);
  } finally {
    await file.close();
    rmSync(scratch, { recursive: true, force: true });
  }
});
