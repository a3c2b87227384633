// The client: one connection to a daemon, every RPC as a method.
import { randomUUID } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { createClient, type Client as RpcClient } from "@connectrpc/connect";
import {
  ToolRuntime,
  type RestoreSessionResponse,
  type Session as SessionInfo,
  type Snapshot,
  type UploadFilesRequest,
  UploadFilesRequestSchema,
} from "./gen/toolruntime/v1/runtime_pb.js";
import { rpc, streamed } from "./errors.js";
import { createSessionRequest, type CallOptions, type SessionOptions } from "./options.js";
import { eventFrom, resultFrom, type Result, type StreamEvent } from "./results.js";
import * as programs from "./programs.js";
import { Session } from "./session.js";
import { connect, type ClientOptions, type Connection } from "./transport.js";

// Snapshot ids start with it; session ids never do.
const SNAPSHOT_PREFIX = "snap_";
// Upload messages carry at most this much of the archive each.
const UPLOAD_CHUNK = 1 << 20;

/** Tool arguments: an object, or its JSON text exactly as a model wrote it. */
export type Arguments = Record<string, unknown> | string;

/** One call of a batch. */
export interface BatchCall {
  tool: string;
  args: Arguments;
  callId?: string;
}

/** A tar archive as bytes, or as chunks (a Node Readable is one). */
export type TarSource = Uint8Array | Iterable<Uint8Array> | AsyncIterable<Uint8Array>;

function toolCall(tool: string, args: Arguments, callId?: string) {
  const argumentsJson = typeof args === "string" ? args : JSON.stringify(args);
  return { id: callId || randomUUID(), name: tool, argumentsJson };
}

async function* tarChunks(tar: TarSource): AsyncGenerator<Uint8Array> {
  const parts = tar instanceof Uint8Array ? [tar] : tar;
  for await (const part of parts) {
    for (let start = 0; start < part.length; start += UPLOAD_CHUNK) {
      yield part.subarray(start, start + UPLOAD_CHUNK);
    }
  }
}

// The session and path go in the first message only.
async function* uploadRequests(sessionId: string, path: string, tar: TarSource): AsyncGenerator<UploadFilesRequest> {
  let first = true;
  for await (const chunk of tarChunks(tar)) {
    yield create(UploadFilesRequestSchema, first ? { sessionId, path, tar: chunk } : { tar: chunk });
    first = false;
  }
  // An empty archive still has to name its session.
  if (first) yield create(UploadFilesRequestSchema, { sessionId, path });
}

export class Client {
  readonly rpc: RpcClient<typeof ToolRuntime>;
  private readonly connection: Connection;

  constructor(options: ClientOptions = {}) {
    this.connection = connect(options);
    this.rpc = createClient(ToolRuntime, this.connection.transport);
  }

  /** Ends the connection; calls still running fail. */
  close(): void {
    this.connection.close();
  }

  [Symbol.asyncDispose](): Promise<void> {
    this.close();
    return Promise.resolve();
  }

  // -- sessions ---------------------------------------------------------------

  /** A new sandbox session; close it (or `await using` it) when done. */
  async session(options: SessionOptions = {}, call: CallOptions = {}): Promise<Session> {
    return new Session(this, await this.createSession(options, call));
  }

  createSession(options: SessionOptions = {}, call: CallOptions = {}): Promise<SessionInfo> {
    return rpc(call, (o) => this.rpc.createSession(createSessionRequest(options), o));
  }

  getSession(sessionId: string, call: CallOptions = {}): Promise<SessionInfo> {
    return rpc(call, (o) => this.rpc.getSession({ sessionId }, o));
  }

  async listSessions(call: CallOptions = {}): Promise<SessionInfo[]> {
    return (await rpc(call, (o) => this.rpc.listSessions({}, o))).sessions;
  }

  /** Idempotent: the sandbox and its workspace are gone when it resolves; its state. */
  async closeSession(sessionId: string, call: CallOptions = {}): Promise<string> {
    return (await rpc(call, (o) => this.rpc.closeSession({ sessionId }, o))).state;
  }

  // -- tools ------------------------------------------------------------------

  /**
   * The tool catalog in a dialect ("" or "neutral", "openai", "openai-responses",
   * "anthropic", "gemini", "mcp"): what a loop passes as the provider's tools.
   * With a session id, descriptions say that session's network.
   */
  async listTools(dialect = "", options: CallOptions & { sessionId?: string } = {}): Promise<unknown[]> {
    const { sessionId = "", ...call } = options;
    const reply = await rpc(call, (o) => this.rpc.listTools({ dialect, sessionId }, o));
    return JSON.parse(reply.toolsJson) as unknown[];
  }

  /** One tool call. A tool that fails resolves with ok=false; only RPC failures reject. */
  async call(
    sessionId: string,
    tool: string,
    args: Arguments,
    options: CallOptions & { callId?: string } = {},
  ): Promise<Result> {
    const { callId, ...call } = options;
    const request = { sessionId, call: toolCall(tool, args, callId) };
    return resultFrom(await rpc(call, (o) => this.rpc.execute(request, o)));
  }

  /** The parallel calls of one model turn; results in call order. */
  async callBatch(sessionId: string, calls: BatchCall[], options: CallOptions = {}): Promise<Result[]> {
    const request = { sessionId, calls: calls.map((c) => toolCall(c.tool, c.args, c.callId)) };
    const reply = await rpc(options, (o) => this.rpc.executeBatch(request, o));
    return reply.results.map(resultFrom);
  }

  /** stdout/stderr chunks as they arrive, then the result; leaving the loop early stops the call. */
  async *stream(
    sessionId: string,
    tool: string,
    args: Arguments,
    options: CallOptions & { callId?: string } = {},
  ): AsyncGenerator<StreamEvent> {
    const { callId, ...call } = options;
    const request = { sessionId, call: toolCall(tool, args, callId) };
    for await (const message of streamed(call, (o) => this.rpc.executeStream(request, o))) {
      const event = eventFrom(message);
      if (event) yield event;
    }
  }

  /** Every tool call of a provider's assistant message; the provider-shaped results and the neutral ones. */
  async executeMessage(
    sessionId: string,
    dialect: string,
    message: unknown,
    options: CallOptions = {},
  ): Promise<{ message: unknown; results: Result[] }> {
    const messageJson = typeof message === "string" ? message : JSON.stringify(message);
    const reply = await rpc(options, (o) => this.rpc.executeMessage({ sessionId, dialect, messageJson }, o));
    return { message: JSON.parse(reply.resultsJson) as unknown, results: reply.results.map(resultFrom) };
  }

  // -- files ------------------------------------------------------------------

  /** Unpack a tar archive (bytes or a stream of chunks) below `path` (default /workspace). */
  async upload(
    sessionId: string,
    tar: TarSource,
    options: CallOptions & { path?: string } = {},
  ): Promise<{ files: number; bytes: number }> {
    const { path = "", ...call } = options;
    // A source that fails (a file that cannot be read) fails the upload with its own error.
    let failure: unknown;
    async function* requests() {
      try {
        yield* uploadRequests(sessionId, path, tar);
      } catch (error) {
        failure = error;
        throw error;
      }
    }
    try {
      const reply = await rpc(call, (o) => this.rpc.uploadFiles(requests(), o));
      return { files: Number(reply.files), bytes: Number(reply.bytes) };
    } catch (error) {
      throw failure ?? error;
    }
  }

  /** A tar archive of sandbox `paths` (each under its base name), as a stream of chunks. */
  async *download(sessionId: string, paths: string[], options: CallOptions = {}): AsyncGenerator<Uint8Array> {
    for await (const chunk of streamed(options, (o) => this.rpc.downloadFiles({ sessionId, paths }, o))) {
      yield chunk.tar;
    }
  }

  // -- programs: exec and files (relative paths are under /workspace) --------

  /** Run `program` to its end: how it ended and all it printed (up to its cap). */
  exec(
    sessionId: string,
    program: programs.Program,
    options: programs.ExecOptions & { stdin?: programs.ByteSource } = {},
  ): Promise<programs.ExecResult> {
    return programs.exec(this.rpc, sessionId, program, options);
  }

  /** Start `program` and talk to it: stdin, signals, its events as they come. */
  execStream(sessionId: string, program: programs.Program, options: programs.ExecOptions = {}): programs.ExecStream {
    return new programs.ExecStream(this.rpc, sessionId, program, options);
  }

  readFile(sessionId: string, path: string, options: programs.ReadFileOptions = {}): Promise<Buffer> {
    return programs.readFile(this.rpc, sessionId, path, options);
  }

  readFileStream(sessionId: string, path: string, options: programs.ReadFileOptions = {}): AsyncGenerator<Uint8Array> {
    return programs.readFileStream(this.rpc, sessionId, path, options);
  }

  writeFile(
    sessionId: string,
    path: string,
    data: programs.ByteSource,
    options: programs.WriteFileOptions = {},
  ): Promise<number> {
    return programs.writeFile(this.rpc, sessionId, path, data, options);
  }

  stat(sessionId: string, path: string, options: CallOptions & { user?: string } = {}): Promise<programs.PathInfo> {
    return programs.stat(this.rpc, sessionId, path, options);
  }

  // -- snapshots (files and shell state, never processes) ---------------------

  snapshot(
    sessionId: string,
    options: CallOptions & { label?: string; includeTmp?: boolean } = {},
  ): Promise<Snapshot> {
    const { label = "", includeTmp = false, ...call } = options;
    return rpc(call, (o) => this.rpc.snapshotSession({ sessionId, label, includeTmp }, o));
  }

  /** `count` (1-16) new sessions from a live session or a snapshot ("snap_…"), all or none. */
  async fork(source: string, count = 1, options: CallOptions = {}): Promise<Session[]> {
    const from = source.startsWith(SNAPSHOT_PREFIX) ? { snapshotId: source } : { sessionId: source };
    const reply = await rpc(options, (o) => this.rpc.forkSession({ ...from, count }, o));
    return reply.sessions.map((info) => new Session(this, info));
  }

  /** Roll a session back to a snapshot in place; its background processes stop. */
  restore(sessionId: string, snapshotId: string, options: CallOptions = {}): Promise<RestoreSessionResponse> {
    return rpc(options, (o) => this.rpc.restoreSession({ sessionId, snapshotId }, o));
  }

  async listSnapshots(options: CallOptions = {}): Promise<Snapshot[]> {
    return (await rpc(options, (o) => this.rpc.listSnapshots({}, o))).snapshots;
  }

  async deleteSnapshot(snapshotId: string, options: CallOptions = {}): Promise<void> {
    await rpc(options, (o) => this.rpc.deleteSnapshot({ snapshotId }, o));
  }
}
