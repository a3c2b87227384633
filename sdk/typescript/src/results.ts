// What a tool call returns, as plain typed objects rather than wire messages.
import type { ExecuteEvent, ToolResult } from "./gen/toolruntime/v1/runtime_pb.js";

/** Why a call failed: UNKNOWN_TOOL, INVALID_ARGUMENTS, PATH_DENIED, NOT_FOUND, TIMEOUT, ... */
export interface ToolCallError {
  code: string;
  message: string;
  retryable: boolean;
}

interface ResultFields {
  callId: string;
  /** The tool's output: always a JSON object ({} when nothing ran). */
  output: Record<string, unknown>;
  durationMs: number;
}

/** One call's result: `ok` exactly when `error` is null. */
export type Result =
  | (ResultFields & { ok: true; error: null })
  | (ResultFields & { ok: false; error: ToolCallError });

/** What `stream` yields: output as it arrives, then exactly one result. */
export type StreamEvent =
  | { type: "stdout"; data: Uint8Array }
  | { type: "stderr"; data: Uint8Array }
  | { type: "result"; result: Result };

export function resultFrom(message: ToolResult): Result {
  const fields: ResultFields = {
    callId: message.callId,
    output: JSON.parse(message.outputJson || "{}") as Record<string, unknown>,
    durationMs: Number(message.durationMs),
  };
  if (message.ok) return { ...fields, ok: true, error: null };
  const error = message.error;
  return {
    ...fields,
    ok: false,
    error: { code: error?.code ?? "", message: error?.message ?? "", retryable: error?.retryable ?? false },
  };
}

export function eventFrom(message: ExecuteEvent): StreamEvent | undefined {
  const event = message.event;
  switch (event.case) {
    case "stdout":
    case "stderr":
      return { type: event.case, data: event.value };
    case "result":
      return { type: "result", result: resultFrom(event.value) };
    default:
      return undefined;
  }
}
