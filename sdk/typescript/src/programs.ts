// Programs in a session: Exec (run to the end, or talk to it as it runs) and
// the file RPCs. Bytes in and out, any size, any path the sandbox user may
// reach; relative paths are under /workspace.
import { create } from "@bufbuild/protobuf";
import type { Client as RpcClient } from "@connectrpc/connect";
import {
  type ExecEvent,
  type ExecExit,
  type ExecRequest,
  ExecRequestSchema,
  type ToolRuntime,
  type WriteFileRequest,
  WriteFileRequestSchema,
} from "./gen/toolruntime/v1/runtime_pb.js";
import { rpc, streamed, toToolrtError } from "./errors.js";
import type { CallOptions } from "./options.js";

type Rpc = RpcClient<typeof ToolRuntime>;

// Bytes per message of stdin or of a file sent.
const SEND_CHUNK = 1 << 20;

/** Bytes, text (sent as UTF-8) or chunks of either (a Node Readable is one). */
export type ByteSource = Uint8Array | string | Iterable<Uint8Array | string> | AsyncIterable<Uint8Array | string>;

/** What to run: argv (argv[0] looked up in PATH), or a command line for /bin/sh -c. */
export type Program = string[] | { command: string };

export interface ExecOptions extends CallOptions {
  /** Default /workspace; relative paths are under it. */
  cwd?: string;
  /** On top of the session's environment, secrets and proxy variables. */
  env?: Record<string, string>;
  /** Seconds before the whole process tree is killed (0: the session's call_timeout_s). */
  timeoutS?: number;
  /** Per stream; bytes past it are counted, not sent (0: the daemon's exec_output_cap_bytes). */
  outputCapBytes?: number;
  /** Names the exec (default: one the daemon makes up). */
  execId?: string;
  /** "" (the sandbox user); others are refused with UserNotAllowedError. */
  user?: string;
  /**
   * A pseudo-terminal as the program's controlling terminal, stdin, stdout and
   * stderr: all its output arrives as "stdout" (with a terminal's "\r\n"),
   * stdin is open, bytes written are typed ("\x03" is ^C), `closeStdin()`
   * types ^D and `sendSignal` reaches the terminal's foreground job.
   */
  tty?: boolean;
  /** The terminal's window (with `tty`; default: the daemon's). */
  size?: TerminalSize;
}

/** A terminal's window, in characters. */
export interface TerminalSize {
  rows: number;
  cols: number;
}

/** How a program ended. */
export interface ExecExitInfo {
  /** 128 + n for a process ended by signal n. */
  exitCode: number;
  /** The signal's name ("KILL", "TERM", ...) when a signal ended it, else "". */
  signal: string;
  /** Killed at timeoutS. */
  timedOut: boolean;
  /** Output past outputCapBytes, counted and not sent. */
  droppedBytes: { stdout: number; stderr: number };
}

/** A program's whole run: how it ended and all it printed (up to its cap). */
export interface ExecResult extends ExecExitInfo {
  execId: string;
  pid: number;
  stdout: Buffer;
  stderr: Buffer;
}

/** One event of a running program; "exit" comes last. */
export type ExecStreamEvent =
  | { kind: "started"; execId: string; pid: number }
  | { kind: "stdout" | "stderr"; data: Uint8Array }
  | { kind: "exit"; exit: ExecExitInfo };

/** What is at a path (a final symlink is not followed). */
export interface PathInfo {
  exists: boolean;
  /** "file", "directory", "symlink", "other" ("" when it does not exist). */
  type: string;
  size: number;
  /** Permission bits with the set-id and sticky bits. */
  mode: number;
  /** Unix seconds. */
  mtime: number;
  linkTarget: string;
}

export interface ReadFileOptions extends CallOptions {
  offset?: number;
  /** More than this is FileTooLargeError, never a cut (0: the daemon's file_max_bytes). */
  maxBytes?: number;
  user?: string;
}

export interface WriteFileOptions extends CallOptions {
  /** Permission bits of a file this creates (default 0o644); an existing file keeps its own. */
  mode?: number;
  makeParents?: boolean;
  /** "replace" (default), "fail" (FileExistsError) or "append". */
  ifExists?: "replace" | "fail" | "append";
  user?: string;
}

const encoder = new TextEncoder();

/** `source` as pieces of at most SEND_CHUNK bytes, one per message. */
async function* pieces(source: ByteSource): AsyncGenerator<Uint8Array> {
  const parts = typeof source === "string" || source instanceof Uint8Array ? [source] : source;
  for await (const part of parts) {
    const bytes = typeof part === "string" ? encoder.encode(part) : part;
    for (let start = 0; start < bytes.length; start += SEND_CHUNK) {
      yield bytes.subarray(start, start + SEND_CHUNK);
    }
  }
}

function exitInfo(exit: ExecExit | undefined): ExecExitInfo {
  return {
    exitCode: exit?.exitCode ?? 0,
    signal: exit?.signal ?? "",
    timedOut: exit?.timedOut ?? false,
    droppedBytes: { stdout: Number(exit?.stdoutDroppedBytes ?? 0), stderr: Number(exit?.stderrDroppedBytes ?? 0) },
  };
}

function streamEvent(event: ExecEvent): ExecStreamEvent | undefined {
  const { kind } = event;
  switch (kind.case) {
    case "started":
      return { kind: "started", execId: kind.value.execId, pid: Number(kind.value.pid) };
    case "stdout":
    case "stderr":
      return { kind: kind.case, data: kind.value };
    case "exit":
      return { kind: "exit", exit: exitInfo(kind.value) };
    default:
      return undefined;
  }
}

function execStart(sessionId: string, program: Program, options: ExecOptions, stdinOpen: boolean): ExecRequest {
  const { cwd, env, timeoutS, outputCapBytes, execId, user, tty, size } = options;
  const what = Array.isArray(program) ? { argv: program } : { command: program.command };
  return create(ExecRequestSchema, {
    kind: {
      case: "start",
      value: {
        sessionId,
        ...what,
        cwd,
        env,
        user,
        timeoutS,
        execId,
        stdinOpen,
        tty,
        size,
        outputCapBytes: outputCapBytes === undefined ? undefined : BigInt(outputCapBytes),
      },
    },
  });
}

const stdinMessage = (data: Uint8Array) => create(ExecRequestSchema, { kind: { case: "stdin", value: data } });
const STDIN_EOF = create(ExecRequestSchema, { kind: { case: "stdinEof", value: true } });

function callOptions(options: CallOptions): CallOptions {
  return { signal: options.signal, timeoutMs: options.timeoutMs };
}

/** Run a program to its end; `stdin` is sent whole (any size, under flow control). */
export async function exec(
  rpcClient: Rpc,
  sessionId: string,
  program: Program,
  options: ExecOptions & { stdin?: ByteSource } = {},
): Promise<ExecResult> {
  const { stdin } = options;
  async function* requests(): AsyncGenerator<ExecRequest> {
    yield execStart(sessionId, program, options, stdin !== undefined);
    if (stdin === undefined) return;
    for await (const piece of pieces(stdin)) yield stdinMessage(piece);
    yield STDIN_EOF;
  }
  const result: ExecResult = { execId: "", pid: 0, stdout: Buffer.alloc(0), stderr: Buffer.alloc(0), ...exitInfo(undefined) };
  const out: Record<"stdout" | "stderr", Uint8Array[]> = { stdout: [], stderr: [] };
  for await (const message of streamed(callOptions(options), (o) => rpcClient.exec(requests(), o))) {
    const event = streamEvent(message);
    if (event?.kind === "started") Object.assign(result, { execId: event.execId, pid: event.pid });
    else if (event?.kind === "stdout" || event?.kind === "stderr") out[event.kind].push(event.data);
    else if (event?.kind === "exit") Object.assign(result, event.exit);
  }
  return { ...result, stdout: Buffer.concat(out.stdout), stderr: Buffer.concat(out.stderr) };
}

/** Messages a caller sends a running program, queued until the RPC takes them. */
class Outbox implements AsyncIterable<ExecRequest> {
  private readonly queued: ExecRequest[] = [];
  private wake: (() => void) | undefined;
  private ended = false;

  push(message: ExecRequest): void {
    if (this.ended) throw new Error("the program's input is closed");
    this.queued.push(message);
    this.wake?.();
  }

  end(): void {
    this.ended = true;
    this.wake?.();
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<ExecRequest> {
    for (;;) {
      const next = this.queued.shift();
      if (next) yield next;
      else if (this.ended) return;
      else await new Promise<void>((resolve) => (this.wake = resolve));
    }
  }
}

/**
 * A running program: write its stdin, send it signals, iterate its events
 * (started, stdout, stderr, then exit). `exit` resolves once the events have
 * been read to the end (iterate them, or call `wait()`). `cancel()`, the
 * caller's signal or leaving the iteration early kills its whole tree.
 */
export class ExecStream implements AsyncIterable<ExecStreamEvent> {
  /** How the program ended; rejects with the RPC's error. */
  readonly exit: Promise<ExecExitInfo>;
  private readonly outbox = new Outbox();
  private readonly controller = new AbortController();
  private readonly events: AsyncGenerator<ExecStreamEvent>;
  private settle!: { resolve: (exit: ExecExitInfo) => void; reject: (error: unknown) => void };

  constructor(rpcClient: Rpc, sessionId: string, program: Program, options: ExecOptions = {}) {
    this.exit = new Promise((resolve, reject) => (this.settle = { resolve, reject }));
    // Awaited by whoever wants it; an error nobody asked for is not an unhandled rejection.
    this.exit.catch(() => undefined);
    this.outbox.push(execStart(sessionId, program, options, true));
    const signals = [this.controller.signal, ...(options.signal ? [options.signal] : [])];
    const call = { ...callOptions(options), signal: AbortSignal.any(signals) };
    // Cancelled between reads, the events stand still: `exit` says so at once.
    call.signal.addEventListener("abort", () => this.settle.reject(toToolrtError(call.signal.reason, call.signal)), {
      once: true,
    });
    this.events = this.read(rpcClient.exec(this.outbox, call), options.signal);
  }

  private async *read(messages: AsyncIterable<ExecEvent>, signal?: AbortSignal): AsyncGenerator<ExecStreamEvent> {
    try {
      for await (const message of messages) {
        const event = streamEvent(message);
        if (event?.kind === "exit") this.settle.resolve(event.exit);
        if (event) yield event;
      }
      this.settle.reject(new Error("the program's stream ended without its exit"));
    } catch (error) {
      const failure = toToolrtError(error, signal);
      this.settle.reject(failure);
      throw failure;
    } finally {
      this.outbox.end();
      this.controller.abort();
    }
  }

  [Symbol.asyncIterator](): AsyncGenerator<ExecStreamEvent> {
    return this.events;
  }

  /** Send bytes (or UTF-8 text) to the program's stdin. */
  write(data: Uint8Array | string): void {
    const bytes = typeof data === "string" ? encoder.encode(data) : data;
    for (let start = 0; start < bytes.length; start += SEND_CHUNK) {
      this.outbox.push(stdinMessage(bytes.subarray(start, start + SEND_CHUNK)));
    }
  }

  /** End of stdin: the program reads EOF (under a `tty`, ^D is typed). */
  closeStdin(): void {
    this.outbox.push(STDIN_EOF);
  }

  /**
   * INT, TERM, KILL, HUP, QUIT, USR1, USR2, STOP, CONT or TSTP, to its process
   * group (under a `tty`, to the terminal's foreground group).
   */
  sendSignal(name: string): void {
    this.outbox.push(create(ExecRequestSchema, { kind: { case: "signal", value: name } }));
  }

  /** The terminal's new window (a `tty` program gets SIGWINCH). */
  resize(rows: number, cols: number): void {
    this.outbox.push(create(ExecRequestSchema, { kind: { case: "resize", value: { rows, cols } } }));
  }

  /** Read the remaining events (discarding them) to how the program ended. */
  async wait(): Promise<ExecExitInfo> {
    for await (const event of this.events) void event;
    return this.exit;
  }

  /** Stop the call: the daemon kills the program's tree. */
  cancel(): void {
    this.controller.abort();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.cancel();
    await this.events.return(undefined);
  }
}

/** The file's bytes from `offset`, chunk by chunk as they arrive. */
export async function* readFileStream(
  rpcClient: Rpc,
  sessionId: string,
  path: string,
  options: ReadFileOptions = {},
): AsyncGenerator<Uint8Array> {
  const { offset = 0, maxBytes = 0, user = "" } = options;
  const request = { sessionId, path, user, offset: BigInt(offset), maxBytes: BigInt(maxBytes) };
  for await (const chunk of streamed(callOptions(options), (o) => rpcClient.readFile(request, o))) {
    yield chunk.data;
  }
}

/** The whole file; more than `maxBytes` is FileTooLargeError, never a cut. */
export async function readFile(rpcClient: Rpc, sessionId: string, path: string, options: ReadFileOptions = {}): Promise<Buffer> {
  const chunks = [];
  for await (const chunk of readFileStream(rpcClient, sessionId, path, options)) chunks.push(chunk);
  return Buffer.concat(chunks);
}

/** Write `data` as the sandbox user; the bytes written. */
export async function writeFile(
  rpcClient: Rpc,
  sessionId: string,
  path: string,
  data: ByteSource,
  options: WriteFileOptions = {},
): Promise<number> {
  const { mode = 0, makeParents = false, ifExists = "replace", user = "" } = options;
  async function* requests(): AsyncGenerator<WriteFileRequest> {
    const start = { sessionId, path, user, mode, makeParents, ifExists };
    yield create(WriteFileRequestSchema, { kind: { case: "start", value: start } });
    for await (const piece of pieces(data)) yield create(WriteFileRequestSchema, { kind: { case: "data", value: piece } });
  }
  const reply = await rpc(callOptions(options), (o) => rpcClient.writeFile(requests(), o));
  return Number(reply.bytes);
}

/** What is at `path` (a final symlink not followed); `exists` false when nothing is. */
export async function stat(rpcClient: Rpc, sessionId: string, path: string, options: CallOptions & { user?: string } = {}): Promise<PathInfo> {
  const { user = "" } = options;
  const info = await rpc(callOptions(options), (o) => rpcClient.statPath({ sessionId, path, user }, o));
  const { exists, type, mode, mtime, linkTarget } = info;
  return { exists, type, size: Number(info.size), mode, mtime, linkTarget };
}
