// Tools for the Vercel AI SDK (`ai`, an optional peer dependency loaded only here).
import type { JSONSchema7, JSONValue, Tool, ToolSet } from "ai";
import { PNG, splitImages } from "./images.js";
import type { Session } from "./session.js";

// What a tool's toModelOutput returns (the `ai` package does not export its name).
type ToolResultOutput = Awaited<ReturnType<NonNullable<Tool["toModelOutput"]>>>;

interface NeutralTool {
  name: string;
  description: string;
  parameters: JSONSchema7;
}

/**
 * The session's tool catalog as the `tools` of `generateText`/`streamText`:
 * toolrt's JSON Schemas, each `execute` running the call in the session and
 * returning `{ok, output, error}` (a failed tool is a result the model reads,
 * not an exception). Figures (the python tool's PNG outputs) reach the model
 * as image parts after the JSON, which holds a note in place of each.
 */
export async function toolrtTools(session: Session): Promise<ToolSet> {
  const { jsonSchema, tool } = await import("ai");
  const catalog = (await session.listTools("neutral")) as NeutralTool[];
  const tools: ToolSet = {};
  for (const entry of catalog) {
    tools[entry.name] = tool({
      description: entry.description,
      inputSchema: jsonSchema<Record<string, unknown>>(entry.parameters),
      execute: async (input, { toolCallId, abortSignal }) => {
        const result = await session.call(entry.name, input, { callId: toolCallId, signal: abortSignal });
        return { ok: result.ok, output: result.output, error: result.error };
      },
      toModelOutput: ({ output }) => modelOutput(output as Record<string, unknown>),
    });
  }
  return tools;
}

/** JSON as it is, or text and image parts when the result carries figures. */
export function modelOutput(payload: Record<string, unknown>): ToolResultOutput {
  const { payload: shown, images } = splitImages(payload);
  if (images.length === 0) return { type: "json", value: payload as JSONValue };
  return {
    type: "content",
    value: [
      { type: "text", text: JSON.stringify(shown) },
      ...images.map((data) => ({ type: "image-data" as const, data, mediaType: PNG })),
    ],
  };
}
