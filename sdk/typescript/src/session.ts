// A handle on one session: the client's methods with the session id filled in.
import type { Arguments, BatchCall, Client, TarSource } from "./client.js";
import type { RestoreSessionResponse, Session as SessionInfo, Snapshot } from "./gen/toolruntime/v1/runtime_pb.js";
import type { CallOptions } from "./options.js";
import type {
  ByteSource,
  ExecOptions,
  ExecResult,
  ExecStream,
  PathInfo,
  Program,
  ReadFileOptions,
  WriteFileOptions,
} from "./programs.js";
import type { Result, StreamEvent } from "./results.js";

export class Session {
  readonly id: string;

  constructor(
    readonly client: Client,
    /** The session as the daemon described it when this handle was made. */
    readonly info: SessionInfo,
  ) {
    this.id = info.id;
  }

  /** Idempotent: closing a closed session is fine. */
  async close(options: CallOptions = {}): Promise<void> {
    await this.client.closeSession(this.id, options);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /** The session as the daemon describes it now. */
  describe(options: CallOptions = {}): Promise<SessionInfo> {
    return this.client.getSession(this.id, options);
  }

  call(tool: string, args: Arguments, options: CallOptions & { callId?: string } = {}): Promise<Result> {
    return this.client.call(this.id, tool, args, options);
  }

  callBatch(calls: BatchCall[], options: CallOptions = {}): Promise<Result[]> {
    return this.client.callBatch(this.id, calls, options);
  }

  /** The shell tool: `command` in the session's persistent shell, with its other arguments (e.g. timeout_s). */
  shell(command: string, args: Record<string, unknown> = {}, options: CallOptions = {}): Promise<Result> {
    return this.call("shell", { ...args, command }, options);
  }

  stream(tool: string, args: Arguments, options: CallOptions & { callId?: string } = {}): AsyncGenerator<StreamEvent> {
    return this.client.stream(this.id, tool, args, options);
  }

  /** The catalog with this session's network in its descriptions. */
  listTools(dialect = "", options: CallOptions = {}): Promise<unknown[]> {
    return this.client.listTools(dialect, { ...options, sessionId: this.id });
  }

  upload(tar: TarSource, options: CallOptions & { path?: string } = {}): Promise<{ files: number; bytes: number }> {
    return this.client.upload(this.id, tar, options);
  }

  download(paths: string[], options: CallOptions = {}): AsyncGenerator<Uint8Array> {
    return this.client.download(this.id, paths, options);
  }

  /** Run argv (or `{ command }` under /bin/sh -c) to its end; `stdin` is sent whole. */
  exec(program: Program, options: ExecOptions & { stdin?: ByteSource } = {}): Promise<ExecResult> {
    return this.client.exec(this.id, program, options);
  }

  /** Start a program to talk to: write stdin, send signals, iterate its events. */
  execStream(program: Program, options: ExecOptions = {}): ExecStream {
    return this.client.execStream(this.id, program, options);
  }

  /** The whole file (FileTooLargeError past maxBytes, never a cut). */
  readFile(path: string, options: ReadFileOptions = {}): Promise<Buffer> {
    return this.client.readFile(this.id, path, options);
  }

  /** The file chunk by chunk as it arrives. */
  readFileStream(path: string, options: ReadFileOptions = {}): AsyncGenerator<Uint8Array> {
    return this.client.readFileStream(this.id, path, options);
  }

  /** Write bytes, text or chunks as the sandbox user; the bytes written. */
  writeFile(path: string, data: ByteSource, options: WriteFileOptions = {}): Promise<number> {
    return this.client.writeFile(this.id, path, data, options);
  }

  stat(path: string, options: CallOptions & { user?: string } = {}): Promise<PathInfo> {
    return this.client.stat(this.id, path, options);
  }

  snapshot(options: CallOptions & { label?: string; includeTmp?: boolean } = {}): Promise<Snapshot> {
    return this.client.snapshot(this.id, options);
  }

  fork(count = 1, options: CallOptions = {}): Promise<Session[]> {
    return this.client.fork(this.id, count, options);
  }

  restore(snapshotId: string, options: CallOptions = {}): Promise<RestoreSessionResponse> {
    return this.client.restore(this.id, snapshotId, options);
  }
}
