import assert from "node:assert/strict";
import { after, test } from "node:test";
import { generateText, stepCountIs } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import type { LanguageModelV3CallOptions, LanguageModelV3GenerateResult } from "@ai-sdk/provider";
import { toolrtTools } from "../src/index.js";
import { modelOutput } from "../src/ai.js";
import { MAX_IMAGE_BYTES, MAX_IMAGES } from "../src/images.js";
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

// A scripted model that asks for a python cell drawing a figure, then reads
// the tool result it is sent on the next step.
function plottingModel(): MockLanguageModelV3 {
  const code = "import matplotlib.pyplot as plt\nplt.figure(figsize=(2, 1), dpi=50)\nplt.plot([1, 2, 3])";
  return new MockLanguageModelV3({
    doGenerate: (options: LanguageModelV3CallOptions): Promise<LanguageModelV3GenerateResult> => {
      const done = options.prompt.at(-1)?.role === "tool";
      return Promise.resolve({
        content: done
          ? [{ type: "text", text: "A line." }]
          : [{ type: "tool-call", toolCallId: "py-1", toolName: "python", input: JSON.stringify({ code }) }],
        finishReason: done ? { unified: "stop", raw: "stop" } : { unified: "tool-calls", raw: "tool_calls" },
        usage,
        warnings: [],
      });
    },
  });
}

test("the python tool's figure reaches the model as an image part after the JSON", async () => {
  await using session = await client.session();
  const model = plottingModel();
  const { text } = await generateText({
    model,
    tools: await toolrtTools(session),
    prompt: "Plot 1, 2, 3.",
    stopWhen: stepCountIs(3),
  });
  assert.equal(text, "A line.");

  const last = model.doGenerateCalls[1]?.prompt.at(-1);
  assert.equal(last?.role, "tool");
  const part = last.role === "tool" ? last.content[0] : undefined;
  assert.ok(part?.type === "tool-result", JSON.stringify(part));
  assert.equal(part.output.type, "content", JSON.stringify(part.output).slice(0, 500));
  const [json, image, ...rest] = part.output.type === "content" ? part.output.value : [];
  assert.equal(rest.length, 0);
  // The JSON names the image instead of carrying its base64.
  assert.ok(json?.type === "text");
  const shown = JSON.parse(json.text) as { ok: boolean; output: { outputs: { type: string; data: string }[] } };
  assert.equal(shown.ok, true);
  assert.match(shown.output.outputs[0]?.data ?? "", /^\[PNG image, \d+ bytes: attached as image 1\]$/);
  // The image part is the PNG itself.
  assert.ok(image?.type === "image-data", JSON.stringify(image).slice(0, 200));
  assert.equal(image.mediaType, "image/png");
  assert.deepEqual([...Buffer.from(image.data, "base64").subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47]);
});

test("past 8 images or 3.75 MB an image stays a note in the JSON", () => {
  const png = (bytes: number) => ({ type: "image/png", data: Buffer.alloc(bytes, 1).toString("base64") });
  const outputs = [png(MAX_IMAGE_BYTES + 3), ...Array.from({ length: MAX_IMAGES + 1 }, () => png(30))];
  const shown = modelOutput({ ok: true, output: { outputs }, error: null });
  assert.equal(shown.type, "content");
  const parts = shown.type === "content" ? shown.value : [];
  assert.deepEqual(
    parts.map((p) => p.type),
    ["text", ...Array<string>(MAX_IMAGES).fill("image-data")],
  );
  const text = parts[0]?.type === "text" ? parts[0].text : "{}";
  const notes = (JSON.parse(text) as { output: { outputs: typeof outputs } }).output.outputs.map((o) => o.data);
  assert.match(notes[0] ?? "", /^\[PNG image, 3750003 bytes: not attached, past the cap of 8 images/);
  assert.equal(notes[1], "[PNG image, 30 bytes: attached as image 1]");
  assert.match(notes[MAX_IMAGES + 1] ?? "", /^\[PNG image, 30 bytes: not attached/);
  // A result without figures is JSON as before.
  assert.deepEqual(modelOutput({ ok: true, output: { stdout: "" }, error: null }), {
    type: "json",
    value: { ok: true, output: { stdout: "" }, error: null },
  });
});
