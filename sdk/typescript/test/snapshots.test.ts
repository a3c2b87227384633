import assert from "node:assert/strict";
import { after, test } from "node:test";
import { NotFoundError } from "../src/index.js";
import { plainClient } from "./env.js";

const client = plainClient();
after(() => client.close());

test("snapshot, restore, fork and a session from a snapshot", async () => {
  await using session = await client.session();
  await session.shell("echo v1 > state.txt; mkdir -p sub; cd sub");
  const snapshot = await session.snapshot({ label: "before", includeTmp: true });
  assert.match(snapshot.id, /^snap_/);
  assert.equal(snapshot.label, "before");
  assert.ok((await client.listSnapshots()).some((s) => s.id === snapshot.id));

  await session.shell("echo v2 > /workspace/state.txt; cd /workspace");
  await session.restore(snapshot.id);
  assert.equal((await session.shell("cat /workspace/state.txt; pwd")).output.stdout, "v1\n/workspace/sub\n");

  const forks = await session.fork(2);
  try {
    assert.equal(forks.length, 2);
    for (const fork of forks) {
      assert.notEqual(fork.id, session.id);
      assert.equal((await fork.shell("cat /workspace/state.txt")).output.stdout, "v1\n");
    }
  } finally {
    await Promise.all(forks.map((f) => f.close()));
  }
  const [fromSnapshot] = await client.fork(snapshot.id);
  await using restored = fromSnapshot!;
  assert.equal((await restored.shell("cat /workspace/state.txt")).output.stdout, "v1\n");

  await using started = await client.session({ fromSnapshot: snapshot.id });
  assert.equal((await started.shell("cat /workspace/state.txt")).output.stdout, "v1\n");

  await client.deleteSnapshot(snapshot.id);
  await assert.rejects(session.restore(snapshot.id), NotFoundError);
});
