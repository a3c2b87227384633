import assert from "node:assert/strict";
import { after, test } from "node:test";
import { generateText, stepCountIs } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import type { LanguageModelV3CallOptions, LanguageModelV3GenerateResult } from "@ai-sdk/provider";
import { toolrtTools } from "../src/index.js";
import { plainClient } from "./env.js";

const client = plainClient();
after(() => client.close());

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 5, text: 5, reasoning: undefined },
};

// A scripted model: first it asks for a shell call, then it answers with
// what the tool result (read back from the prompt) says.
function scriptedModel(): MockLanguageModelV3 {
  return new MockLanguageModelV3({
    doGenerate: (options: LanguageModelV3CallOptions): Promise<LanguageModelV3GenerateResult> => {
      const last = options.prompt.at(-1);
      if (last?.role !== "tool") {
        return Promise.resolve({
          content: [
            {
              type: "tool-call",
              toolCallId: "call-1",
              toolName: "shell",
              input: JSON.stringify({ command: "echo $((6 * 7)) > answer.txt && cat answer.txt" }),
            },
          ],
          finishReason: { unified: "tool-calls", raw: "tool_calls" },
          usage,
          warnings: [],
        });
      }
      const part = last.content[0];
      assert.equal(part?.type, "tool-result");
      const output = part.type === "tool-result" ? part.output : undefined;
      assert.equal(output?.type, "json");
      const value = output?.type === "json" ? (output.value as { ok: boolean; output: { stdout: string } }) : undefined;
      assert.equal(value?.ok, true);
      return Promise.resolve({
        content: [{ type: "text", text: `The answer is ${value?.output.stdout.trim()}.` }],
        finishReason: { unified: "stop", raw: "stop" },
        usage,
        warnings: [],
      });
    },
  });
}

test("toolrtTools gives generateText the catalog, and its tool calls run in the session", async () => {
  await using session = await client.session();
  const tools = await toolrtTools(session);
  assert.ok("shell" in tools && "read_file" in tools, Object.keys(tools).join(","));

  const model = scriptedModel();
  const { text, steps } = await generateText({
    model,
    tools,
    prompt: "What is six times seven? Use the sandbox.",
    stopWhen: stepCountIs(3),
  });
  assert.equal(text, "The answer is 42.");
  assert.equal(steps.length, 2);

  // The model saw toolrt's JSON Schemas.
  const offered = model.doGenerateCalls[0]?.tools ?? [];
  const shell = offered.find((t) => t.name === "shell");
  assert.ok(shell && shell.type === "function");
  assert.ok("command" in ((shell.inputSchema.properties as object | undefined) ?? {}));

  // The call really ran in the session.
  assert.equal((await session.shell("cat answer.txt")).output.stdout, "42\n");
});

test("a tool that fails is a result the model reads, not an exception", async () => {
  await using session = await client.session();
  const tools = await toolrtTools(session);
  const execute = tools.read_file?.execute;
  assert.ok(execute);
  const result = (await execute({ path: "missing.txt" }, { toolCallId: "r1", messages: [] })) as {
    ok: boolean;
    error: { code: string };
  };
  assert.equal(result.ok, false);
  assert.equal(result.error.code, "NOT_FOUND");
});
