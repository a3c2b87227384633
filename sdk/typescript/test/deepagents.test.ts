// The Deep Agents JS backend, operation by operation, against a real session.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { BaseChatModel } from "@langchain/core/language_models/chat_models";
import { AIMessage, type BaseMessage, ToolMessage } from "@langchain/core/messages";
import type { ChatResult } from "@langchain/core/outputs";
import { createDeepAgent, isSandboxBackend } from "deepagents";
import { ToolrtSandbox } from "../src/deepagents.js";
import { plainClient } from "./env.js";

const client = plainClient();
after(() => client.close());

test("execute runs a shell command in the session: output, exit code, truncation", async () => {
  await using session = await client.session();
  const sandbox = new ToolrtSandbox(session);
  assert.ok(isSandboxBackend(sandbox));
  assert.equal(sandbox.id, session.id);

  assert.deepEqual(await sandbox.execute("pwd; echo oops >&2; exit 3"), {
    output: "/workspace\noops\n",
    exitCode: 3,
    truncated: false,
  });
  const capped = new ToolrtSandbox(session, { outputCapBytes: 1000 });
  const big = await capped.execute("seq 100000");
  assert.deepEqual([big.output.length, big.truncated, big.exitCode], [1000, true, 0]);
});

test("write, read, readRaw, edit and delete go through the session's files", async () => {
  await using session = await client.session();
  const sandbox = new ToolrtSandbox(session);

  assert.equal((await sandbox.write("/workspace/src/notes.txt", "alpha\nbeta\ngamma\n")).error, undefined);
  assert.equal((await session.readFile("src/notes.txt")).toString(), "alpha\nbeta\ngamma\n");

  const page = await sandbox.read("/workspace/src/notes.txt", 1, 1);
  assert.equal(page.error, undefined);
  assert.match(String(page.content), /beta/);
  assert.doesNotMatch(String(page.content), /alpha|gamma/);

  const raw = await sandbox.readRaw("/workspace/src/notes.txt");
  assert.ok(raw.data && "mimeType" in raw.data, JSON.stringify(raw));
  assert.equal(raw.data.content, "alpha\nbeta\ngamma\n");

  const edited = await sandbox.edit("/workspace/src/notes.txt", "beta", "BETA");
  assert.deepEqual([edited.error, edited.occurrences], [undefined, 1]);
  assert.equal((await session.readFile("src/notes.txt")).toString(), "alpha\nBETA\ngamma\n");
  assert.match((await sandbox.edit("/workspace/src/notes.txt", "delta", "x")).error ?? "", /not found/);

  assert.equal((await sandbox.delete("/workspace/src")).error, undefined);
  assert.equal((await session.stat("src")).exists, false);
  assert.match((await sandbox.read("/workspace/src/notes.txt")).error ?? "", /not found/);
});

test("ls, glob and grep see the session's tree", async () => {
  await using session = await client.session();
  const sandbox = new ToolrtSandbox(session);
  await sandbox.uploadFiles([
    ["/workspace/pkg/a.py", new TextEncoder().encode("import os\nprint('needle')\n")],
    ["/workspace/pkg/sub/b.py", new TextEncoder().encode("needle = 1\n")],
    ["/workspace/pkg/c.txt", new TextEncoder().encode("a needle too\n")],
  ]);

  const listing = await sandbox.ls("/workspace/pkg");
  assert.equal(listing.error, undefined);
  const entries = (listing.files ?? []).map((f) => `${f.path}${f.is_dir ? " dir" : ""}`).sort();
  assert.deepEqual(entries, ["/workspace/pkg/a.py", "/workspace/pkg/c.txt", "/workspace/pkg/sub/ dir"]);

  const globbed = await sandbox.glob("**/*.py", "/workspace/pkg");
  assert.deepEqual((globbed.files ?? []).map((f) => f.path).sort(), ["a.py", "sub/b.py"]);

  const found = await sandbox.grep("needle", "/workspace/pkg", "*.py");
  assert.deepEqual(
    (found.matches ?? []).map((m) => `${m.path}:${m.line}:${m.text}`).sort(),
    ["/workspace/pkg/a.py:2:print('needle')", "/workspace/pkg/sub/b.py:1:needle = 1"],
  );
});

test("uploads and downloads answer per file, with Deep Agents' error names", async () => {
  await using session = await client.session();
  const sandbox = new ToolrtSandbox(session);
  const bytes = new Uint8Array([0, 1, 2, 255]);
  assert.deepEqual(
    await sandbox.uploadFiles([
      ["/workspace/bin/blob", bytes],
      ["/etc/passwd", bytes],
      ["/workspace/bin", bytes],
    ]),
    [
      { path: "/workspace/bin/blob", error: null },
      { path: "/etc/passwd", error: "permission_denied" },
      { path: "/workspace/bin", error: "is_directory" },
    ],
  );
  assert.deepEqual(await sandbox.downloadFiles(["/workspace/bin/blob", "/workspace/missing", "/workspace/bin"]), [
    { path: "/workspace/bin/blob", content: bytes, error: null },
    { path: "/workspace/missing", content: null, error: "file_not_found" },
    { path: "/workspace/bin", content: null, error: "is_directory" },
  ]);
});

// A scripted chat model: it asks for one execute call, then answers with the
// tool message it got back.
class ScriptedChatModel extends BaseChatModel {
  _llmType(): string {
    return "scripted";
  }

  bindTools(): this {
    return this;
  }

  _generate(messages: BaseMessage[]): Promise<ChatResult> {
    const last = messages.at(-1);
    const message = ToolMessage.isInstance(last)
      ? new AIMessage(`The sandbox said: ${last.text.trim()}`)
      : new AIMessage({
          content: "",
          tool_calls: [{ id: "exec-1", name: "execute", args: { command: "echo $((6 * 7)) | tee answer.txt" } }],
        });
    return Promise.resolve({ generations: [{ text: message.text, message }] });
  }
}

test("a Deep Agents agent's execute tool runs in the session", async () => {
  await using session = await client.session();
  const agent = createDeepAgent({ model: new ScriptedChatModel({}), backend: new ToolrtSandbox(session) });
  const state = await agent.invoke({ messages: [{ role: "user", content: "What is six times seven?" }] });
  const answer = state.messages.at(-1);
  assert.match(answer?.text ?? "", /^The sandbox said: 42/);
  assert.equal((await session.readFile("answer.txt")).toString(), "42\n");
});
