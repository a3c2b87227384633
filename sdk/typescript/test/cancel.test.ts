import assert from "node:assert/strict";
import { after, test } from "node:test";
import { CancelledError, DeadlineExceededError, ToolrtRpcError } from "../src/index.js";
import { plainClient } from "./env.js";

const client = plainClient();
after(() => client.close());

test("an AbortSignal cancels a call: the daemon stops it and the session keeps serving", async () => {
  await using session = await client.session();
  const controller = new AbortController();
  const call = session.shell("sleep 30; echo never", {}, { signal: controller.signal });
  setTimeout(() => controller.abort(), 300);
  await assert.rejects(call, (error) => error instanceof CancelledError && error.code === "CANCELLED");
  // Gone from the sandbox (waited for there, at most 10 s, not timed).
  const gone = await session.shell("for i in $(seq 100); do pgrep -x sleep >/dev/null || exit 0; sleep 0.1; done; exit 1");
  assert.equal(gone.output.exit_code, 0);
  assert.equal((await session.shell("echo still here")).output.stdout, "still here\n");
});

test("an abort with a reason of the caller's own is a CancelledError that carries it", async () => {
  await using session = await client.session();
  const controller = new AbortController();
  const reason = new Error("the user closed the tab");
  setTimeout(() => controller.abort(reason), 300);
  await assert.rejects(session.shell("sleep 30", {}, { signal: controller.signal }), (error) => {
    assert.ok(error instanceof CancelledError);
    assert.equal(error.cause, reason);
    return true;
  });
});

test("a deadline ends a call with DeadlineExceededError", async () => {
  await using session = await client.session();
  await assert.rejects(
    session.shell("sleep 30", {}, { timeoutMs: 500 }),
    (error) => error instanceof DeadlineExceededError && error instanceof ToolrtRpcError,
  );
  assert.equal((await session.shell("echo ok")).output.stdout, "ok\n");
});

test("leaving a stream early cancels it", async () => {
  await using session = await client.session();
  for await (const event of session.stream("shell", { command: "echo first; sleep 30; echo never" })) {
    assert.equal(event.type, "stdout");
    break;
  }
  assert.equal((await session.shell("echo after")).output.stdout, "after\n");
});

test("an aborted stream rejects with CancelledError", async () => {
  await using session = await client.session();
  const controller = new AbortController();
  const seen: string[] = [];
  await assert.rejects(async () => {
    for await (const event of session.stream("shell", { command: "echo one; sleep 30" }, { signal: controller.signal })) {
      seen.push(event.type);
      controller.abort();
    }
  }, CancelledError);
  assert.deepEqual(seen, ["stdout"]);
});
