import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { Readable } from "node:stream";
import { after, test } from "node:test";
import { CancelledError, ExecStream, FileNotFoundError, type ExecStreamEvent } from "../src/index.js";
import { plainClient } from "./env.js";

const client = plainClient();
after(() => client.close());

const sha256 = (data: Uint8Array) => createHash("sha256").update(data).digest("hex");

// Waits (untimed) until the program has printed `marker`, so a signal finds it running.
async function untilPrinted(events: AsyncIterator<ExecStreamEvent>, marker: string): Promise<void> {
  let seen = "";
  while (!seen.includes(marker)) {
    const step = await events.next();
    if (step.done) assert.fail(`the program ended before printing ${marker}: ${seen}`);
    if (step.value.kind === "stdout") seen += Buffer.from(step.value.data).toString();
  }
}

test("stdin bytes round-trip through sha256sum, given whole or as chunks", async () => {
  await using session = await client.session();
  const data = randomBytes(3 * (1 << 20) + 17); // more than one message, every byte value
  const whole = await session.exec(["sha256sum"], { stdin: data });
  assert.equal(whole.exitCode, 0);
  assert.equal(whole.stdout.toString(), `${sha256(data)}  -\n`);
  assert.ok(whole.pid > 0 && whole.execId !== "");

  const chunks = Readable.from([data.subarray(0, 1000), data.subarray(1000)]);
  const streamed = await session.exec({ command: "sha256sum | cut -c1-64" }, { stdin: chunks });
  assert.equal(streamed.stdout.toString(), `${sha256(data)}\n`);
  assert.equal((await session.exec(["cat"], { stdin: "text é" })).stdout.toString(), "text é");
});

test("exec reports the exit code, stderr, cwd, env, a timeout and the bytes past the cap", async () => {
  await using session = await client.session();
  const failed = await session.exec({ command: "echo out; echo err >&2; exit 3" });
  assert.deepEqual(
    [failed.exitCode, failed.signal, failed.timedOut, failed.stdout.toString(), failed.stderr.toString()],
    [3, "", false, "out\n", "err\n"],
  );
  const where = await session.exec({ command: 'pwd; echo "$GREETING"' }, { cwd: "/usr/bin", env: { GREETING: "hi" } });
  assert.equal(where.stdout.toString(), "/usr/bin\nhi\n");
  const slow = await session.exec(["sleep", "30"], { timeoutS: 1 });
  assert.equal(slow.timedOut, true);
  const capped = await session.exec(["head", "-c", "5000", "/dev/zero"], { outputCapBytes: 1000 });
  assert.equal(capped.stdout.length, 1000);
  assert.deepEqual(capped.droppedBytes, { stdout: 4000, stderr: 0 });
  await assert.rejects(session.exec(["/nonexistent/program"]), (error) => {
    assert.ok(error instanceof FileNotFoundError, String(error));
    return true;
  });
});

test("execStream: stdin as it goes, output as events, then the exit", async () => {
  await using session = await client.session();
  await using program = session.execStream({ command: "while read line; do echo \"got $line\"; done; exit 7" });
  const kinds: string[] = [];
  let stdout = "";
  program.write("one\n");
  program.write(Buffer.from("two\n"));
  program.closeStdin();
  for await (const event of program) {
    kinds.push(event.kind);
    if (event.kind === "stdout") stdout += Buffer.from(event.data).toString();
  }
  assert.equal(kinds[0], "started");
  assert.equal(kinds.at(-1), "exit");
  assert.equal(stdout, "got one\ngot two\n");
  assert.equal((await program.exit).exitCode, 7);
});

test("sendSignal kills a running program; its exit names the signal", async () => {
  await using session = await client.session();
  const program = session.execStream({ command: "echo ready; exec sleep 300" });
  await untilPrinted(program[Symbol.asyncIterator](), "ready");
  program.sendSignal("KILL");
  const exit = await program.wait();
  assert.deepEqual([exit.exitCode, exit.signal, exit.timedOut], [137, "KILL", false]);
  assert.ok(program instanceof ExecStream);
});

test("an AbortSignal ends exec with CancelledError and kills the program's tree", async () => {
  await using session = await client.session();
  const controller = new AbortController();
  const program = session.execStream({ command: "echo ready; sleep 300 & sleep 301; wait" }, { signal: controller.signal });
  await untilPrinted(program[Symbol.asyncIterator](), "ready");
  controller.abort();
  await assert.rejects(program.exit, (error) => error instanceof CancelledError);
  await assert.rejects(program.wait(), (error) => error instanceof CancelledError);

  // Also for exec run to its end (aborted once the program has started).
  const second = new AbortController();
  const whole = session.exec({ command: "touch started; sleep 302" }, { signal: second.signal });
  await session.exec({ command: "until [ -e started ]; do sleep 0.05; done" });
  second.abort();
  await assert.rejects(whole, (error) => error instanceof CancelledError);

  // Gone from the sandbox (waited for there, at most 10 s, not timed).
  const gone = await session.exec({
    command: "for i in $(seq 100); do pgrep sleep >/dev/null || exit 0; sleep 0.1; done; exit 1",
  });
  assert.equal(gone.exitCode, 0, gone.stdout.toString());
});
