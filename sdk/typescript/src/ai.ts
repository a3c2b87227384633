// Tools for the Vercel AI SDK (`ai`, an optional peer dependency loaded only here).
import type { JSONSchema7, ToolSet } from "ai";
import type { Session } from "./session.js";

interface NeutralTool {
  name: string;
  description: string;
  parameters: JSONSchema7;
}

/**
 * The session's tool catalog as the `tools` of `generateText`/`streamText`:
 * toolrt's JSON Schemas, each `execute` running the call in the session and
 * returning `{ok, output, error}` (a failed tool is a result the model reads,
 * not an exception).
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
    });
  }
  return tools;
}
