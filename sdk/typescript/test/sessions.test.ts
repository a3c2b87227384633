import assert from "node:assert/strict";
import { after, test } from "node:test";
import { InvalidArgumentError, NotFoundError, PermissionDeniedError, ToolrtRpcError, type Result } from "../src/index.js";
import { makeTar, need, plainClient, text } from "./env.js";

const client = plainClient();
after(() => client.close());

function output(result: Result): Record<string, unknown> {
  assert.ok(result.ok, JSON.stringify(result.error));
  return result.output;
}

test("a session created with every field says so, and runs under it", async () => {
  const session = await client.session({
    image: "toolrt-sandbox:default",
    limits: {
      memoryBytes: 256 << 20,
      cpus: 0.5,
      pids: 64,
      workspaceBytes: 32 << 20,
      tmpBytes: 16 << 20,
      callTimeoutS: 20,
      maxCalls: 50,
      outputCapBytes: 64 << 10,
    },
    allowlist: { readRoots: ["/workspace", "/tmp"], writeRoots: ["/workspace"], denyGlobs: ["**/*.key"] },
    env: { GREETING: "hello from ts" },
    ttlSeconds: 600,
    idleSeconds: 300,
    labels: { suite: "typescript" },
    workspaceTar: makeTar({ "seed/readme.txt": "seeded" }),
    secrets: ["TS_SECRET"],
    network: { allow: ["pypi.org"], maxBytes: 1 << 20, maxConnections: 4 },
    runtime: "",
  });
  try {
    const info = await session.describe();
    assert.equal(info.id, session.id);
    assert.equal(info.state, "ready");
    assert.equal(info.limits?.memoryBytes, BigInt(256 << 20));
    assert.equal(info.limits?.pids, 64n);
    assert.equal(info.limits?.maxCalls, 50n);
    assert.deepEqual(info.allowlist?.denyGlobs, ["**/*.key"]);
    assert.equal(info.labels.suite, "typescript");
    assert.equal(info.ttlSeconds, 600);
    assert.equal(info.idleSeconds, 300);
    assert.deepEqual(info.secrets, ["TS_SECRET"]);
    assert.deepEqual(info.network?.allow, ["pypi.org"]);
    assert.equal(info.network?.maxConnections, 4n);

    const shell = output(await session.shell("echo $GREETING; cat seed/readme.txt"));
    assert.equal(shell.stdout, "hello from ts\nseeded");
    // The secret reaches commands; its value never comes back.
    const secret = await session.shell('printf %s "$TS_SECRET" | wc -c; echo "$TS_SECRET"');
    assert.match(String(secret.output.stdout), /^32\n/);
    assert.ok(!JSON.stringify(secret).includes(need("TOOLRT_TEST_SECRET")));
    const listed = await client.listSessions();
    assert.ok(listed.some((s) => s.id === session.id));
  } finally {
    await session.close();
  }
  assert.equal((await client.getSession(session.id)).state, "closed");
  // Closing again is fine.
  await session.close();
});

test("await using closes the session when the block ends", async () => {
  let id = "";
  {
    await using session = await client.session();
    id = session.id;
    assert.equal((await client.getSession(id)).state, "ready");
  }
  assert.equal((await client.getSession(id)).state, "closed");
});

test("call and callBatch return typed results, a failed tool is a result", async () => {
  await using session = await client.session();
  const wrote = await session.call("write_file", { path: "notes.txt", content: "one\ntwo\n" }, { callId: "w1" });
  assert.equal(wrote.callId, "w1");
  assert.ok(wrote.ok);

  const missing = await session.call("read_file", { path: "nope.txt" });
  assert.equal(missing.ok, false);
  if (!missing.ok) {
    assert.equal(missing.error.code, "NOT_FOUND");
    assert.match(missing.error.message, /nope\.txt/);
  }
  const unknown = await session.call("no_such_tool", "{}");
  assert.equal(unknown.error?.code, "UNKNOWN_TOOL");

  const results = await session.callBatch([
    { tool: "read_file", args: { path: "notes.txt" }, callId: "a" },
    { tool: "shell", args: { command: "wc -l < notes.txt" }, callId: "b" },
    { tool: "shell", args: '{"command": "exit 3"}', callId: "c" },
  ]);
  assert.deepEqual(results.map((r) => r.callId), ["a", "b", "c"]);
  assert.match(String(output(results[0]!).content), /one/);
  assert.equal(output(results[1]!).stdout, "2\n");
  assert.equal(output(results[2]!).exit_code, 3);
});

test("stream yields stdout and stderr as they come, then one result", async () => {
  await using session = await client.session();
  const events = [];
  for await (const event of session.stream("shell", { command: "echo out; echo err >&2; echo more" })) {
    events.push(event);
  }
  const last = events.at(-1);
  assert.equal(last?.type, "result");
  assert.equal(events.filter((e) => e.type === "result").length, 1);
  const stdout = events.flatMap((e) => (e.type === "stdout" ? [text(e.data)] : [])).join("");
  const stderr = events.flatMap((e) => (e.type === "stderr" ? [text(e.data)] : [])).join("");
  assert.equal(stdout, "out\nmore\n");
  assert.equal(stderr, "err\n");
});

test("listTools speaks every dialect", async () => {
  await using session = await client.session();
  const neutral = (await client.listTools()) as { name: string }[];
  assert.ok(neutral.some((t) => t.name === "shell"));
  const mcp = (await session.listTools("mcp")) as { name: string; inputSchema: object }[];
  assert.ok(mcp.every((t) => typeof t.inputSchema === "object"));
  const openai = (await client.listTools("openai")) as { type: string }[];
  assert.ok(openai.every((t) => t.type === "function"));
});

test("executeMessage runs a provider message", async () => {
  await using session = await client.session();
  const message = [{ id: "m1", name: "shell", arguments: { command: "echo hi" } }];
  const reply = await session.client.executeMessage(session.id, "neutral", message);
  assert.equal(reply.results[0]?.callId, "m1");
  assert.equal(output(reply.results[0]).stdout, "hi\n");
});

test("RPC failures are classes a caller can instanceof", async () => {
  await assert.rejects(client.getSession("sess_does_not_exist"), (error) => {
    assert.ok(error instanceof NotFoundError);
    assert.ok(error instanceof ToolrtRpcError);
    assert.equal(error.code, "NOT_FOUND");
    return true;
  });
  await assert.rejects(client.session({ network: { allow: ["example.com"] } }), PermissionDeniedError);
  await assert.rejects(client.listTools("klingon"), (error) => {
    assert.ok(error instanceof InvalidArgumentError);
    assert.equal(error.code, "INVALID_ARGUMENT");
    return true;
  });
});
