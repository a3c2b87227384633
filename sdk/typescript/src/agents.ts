// Function tools for the OpenAI Agents SDK for JavaScript (`@openai/agents`,
// an optional peer dependency loaded only here). Its tools differ from the AI
// SDK's: an array of named tools with OpenAI's (strict) JSON Schemas, whose
// results are a string or text and image items.
import type { FunctionTool } from "@openai/agents";
import { PNG, splitImages } from "./images.js";
import type { Session } from "./session.js";

interface OpenAITool {
  name: string;
  description: string;
  parameters: Record<string, unknown>;
  strict: boolean;
}

// What the Agents SDK tells a tool's execute of its call.
interface CallDetails {
  toolCall?: { callId: string };
  signal?: AbortSignal;
}

/** What a function tool's `execute` returns: text, or text then images. */
export type AgentToolOutput =
  | string
  | ({ type: "text"; text: string } | { type: "image"; image: { data: string; mediaType: string } })[];

/**
 * The session's tool catalog as the `tools` of an Agents SDK `Agent`: the
 * "openai-responses" dialect's schemas (strict where the schema allows), each
 * `execute` running the call in the session (the call id is the model's, the
 * run's abort signal cancels it) and returning `{ok, output, error}` as JSON
 * (a failed tool is a result the model reads, not an exception); figures
 * follow as image items, capped like the dialects.
 */
export async function toolrtAgentTools(session: Session): Promise<FunctionTool[]> {
  const { tool } = await import("@openai/agents");
  const catalog = (await session.listTools("openai-responses")) as OpenAITool[];
  return catalog.map(
    (entry) =>
      tool({
        name: entry.name,
        description: entry.description,
        // The daemon validates arguments against the full model; this schema is what the model is shown.
        parameters: entry.parameters as never,
        // The overloads want a literal; the runtime takes the dialect's either way.
        strict: entry.strict as false,
        execute: async (input: unknown, _context?: unknown, details?: CallDetails) => {
          const result = await session.call(entry.name, input as Record<string, unknown>, {
            callId: details?.toolCall?.callId,
            signal: details?.signal,
          });
          return agentOutput({ ok: result.ok, output: result.output, error: result.error });
        },
      }) as FunctionTool,
  );
}

/** The payload as JSON text, then its figures as image items. */
export function agentOutput(payload: Record<string, unknown>): AgentToolOutput {
  const { payload: shown, images } = splitImages(payload);
  if (images.length === 0) return JSON.stringify(payload);
  return [
    { type: "text", text: JSON.stringify(shown) },
    ...images.map((data) => ({ type: "image" as const, image: { data, mediaType: PNG } })),
  ];
}
