// toolrtAgentTools: an OpenAI Agents SDK run whose tool calls run in toolrt.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { Agent, type Model, type ModelRequest, type ModelResponse, Runner, Usage } from "@openai/agents";
import { toolrtAgentTools } from "../src/index.js";
import { plainClient } from "./env.js";

const client = plainClient();
after(() => client.close());

const plot = "import matplotlib.pyplot as plt\nplt.figure(figsize=(2, 1), dpi=50)\nplt.plot([1, 2, 3])";

// A scripted model: first a shell call and a python call drawing a figure,
// then an answer; it keeps every request it was sent.
class ScriptedModel implements Model {
  readonly requests: ModelRequest[] = [];

  getResponse(request: ModelRequest): Promise<ModelResponse> {
    this.requests.push(request);
    const answered = Array.isArray(request.input) && request.input.some((i) => i.type === "function_call_result");
    const output: ModelResponse["output"] = answered
      ? [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "Done." }] }]
      : [
          { type: "function_call", callId: "sh-1", name: "shell", status: "completed", arguments: JSON.stringify({ command: "echo $((6 * 7))" }) },
          { type: "function_call", callId: "py-1", name: "python", status: "completed", arguments: JSON.stringify({ code: plot }) },
        ];
    return Promise.resolve({ usage: new Usage(), output });
  }

  getStreamedResponse(): AsyncIterable<never> {
    throw new Error("not streamed");
  }
}

test("an Agents SDK run calls toolrt's tools, and a figure reaches the model as an image", async () => {
  await using session = await client.session();
  const tools = await toolrtAgentTools(session);
  const shell = tools.find((t) => t.name === "shell");
  assert.ok(shell && "command" in ((shell.parameters as { properties?: object }).properties ?? {}));

  const model = new ScriptedModel();
  const agent = new Agent({ name: "sandboxed", instructions: "Use the sandbox.", model, tools });
  const result = await new Runner({ tracingDisabled: true }).run(agent, "Compute, then plot.");
  assert.equal(result.finalOutput, "Done.");

  // The second request carries both results, as the model reads them.
  const input = model.requests[1]?.input;
  assert.ok(Array.isArray(input));
  const results = new Map(input.flatMap((i) => (i.type === "function_call_result" ? [[i.callId, i.output]] : [])));
  const shellOut = results.get("sh-1");
  assert.ok(shellOut && typeof shellOut === "object" && "type" in shellOut && shellOut.type === "text", JSON.stringify(shellOut));
  const shown = JSON.parse(shellOut.text) as { ok: boolean; output: { stdout: string } };
  assert.deepEqual([shown.ok, shown.output.stdout], [true, "42\n"]);

  const pyOut = results.get("py-1");
  assert.ok(Array.isArray(pyOut), JSON.stringify(pyOut).slice(0, 300));
  const [text, image, ...rest] = pyOut;
  assert.equal(rest.length, 0);
  assert.ok(text?.type === "input_text" && /attached as image 1/.test(text.text), JSON.stringify(text));
  assert.ok(image?.type === "input_image", JSON.stringify(image).slice(0, 300));
  const data = JSON.stringify(image);
  assert.match(data, /iVBORw0KGgo/); // a PNG's first bytes in base64
});

test("a tool that fails is a result the model reads, not an exception", async () => {
  await using session = await client.session();
  const read = (await toolrtAgentTools(session)).find((t) => t.name === "read_file");
  assert.ok(read);
  const output = await read.invoke(undefined as never, JSON.stringify({ path: "missing.txt" }));
  const result = JSON.parse(String(output)) as { ok: boolean; error: { code: string } };
  assert.deepEqual([result.ok, result.error.code], [false, "NOT_FOUND"]);
});
