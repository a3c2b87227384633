// RPC failures as classes a caller can `instanceof`. A tool that ran and
// failed is not one of these: its Result has ok=false and an error code.
import { Code, ConnectError } from "@connectrpc/connect";
import { BinaryReader } from "@bufbuild/protobuf/wire";
import type { CallOptions } from "./options.js";

/**
 * An RPC failed with a gRPC status; `code` is its name, e.g. "NOT_FOUND", and
 * `reason` the daemon's google.rpc.ErrorInfo reason, e.g. "FILE_NOT_FOUND"
 * ("" when it gave none).
 */
export class ToolrtRpcError extends Error {
  readonly code: string;
  readonly details: string;
  readonly reason: string;

  constructor(code: string, details: string, options?: { cause?: unknown; reason?: string }) {
    super(`${code}: ${details}`, options);
    this.name = new.target.name;
    this.code = code;
    this.details = details;
    this.reason = options?.reason ?? "";
  }
}

/** A malformed request (bad field, unknown dialect, bad tar). */
export class InvalidArgumentError extends ToolrtRpcError {}
/** No such session or snapshot for this tenant (or it is closed). */
export class NotFoundError extends ToolrtRpcError {}
/** Authenticated, but the tenant may not do this (image, runtime, secret, network). */
export class PermissionDeniedError extends ToolrtRpcError {}
/** No token, a wrong one, or no client certificate where one is required. */
export class UnauthenticatedError extends ToolrtRpcError {}
/** A quota is full (sessions, snapshots, rate). */
export class ResourceExhaustedError extends ToolrtRpcError {}
/** The session or snapshot is not in a state that allows this. */
export class FailedPreconditionError extends ToolrtRpcError {}
/** The daemon or its sandbox engine does not answer; retry later. */
export class UnavailableError extends ToolrtRpcError {}
/** The call's deadline (`timeoutMs`) passed. */
export class DeadlineExceededError extends ToolrtRpcError {}
/** The caller aborted the call (its AbortSignal fired). */
export class CancelledError extends ToolrtRpcError {}


// The refusals of exec and the file RPCs, by their ErrorInfo reason; each
// is also the class of its status code.
/** FILE_NOT_FOUND: the path, or a parent of a file to write, does not exist. */
export class FileNotFoundError extends NotFoundError {}
/** SESSION_NOT_FOUND: no such open session for this tenant. */
export class SessionNotFoundError extends NotFoundError {}
/** IS_A_DIRECTORY: a file operation on a directory. */
export class IsADirectoryError extends FailedPreconditionError {}
/** NOT_A_DIRECTORY: a part of the path is a file. */
export class NotADirectoryError extends FailedPreconditionError {}
/** USER_NOT_ALLOWED: only the sandbox user ("") may run programs and touch files. */
export class UserNotAllowedError extends PermissionDeniedError {}
/** FILE_TOO_LARGE: more than maxBytes to read (a file is never cut). */
export class FileTooLargeError extends ToolrtRpcError {}
/** FILE_EXISTS: writeFile with ifExists "fail" found a file. */
export class FileExistsError extends ToolrtRpcError {}
/** NO_SPACE: the filesystem (workspace or /tmp quota) is full. */
export class NoSpaceError extends ResourceExhaustedError {}
/** QUOTA_EXCEEDED: the session's calls or the tenant's rate are spent. */
export class QuotaExceededError extends ResourceExhaustedError {}
/** TIMEOUT: the sandbox did not finish the operation in time. */
export class TimeoutError extends DeadlineExceededError {}
/** SANDBOX_LOST: the session's sandbox is gone; the session is closed. */
export class SandboxLostError extends FailedPreconditionError {}

type ErrorClass = new (code: string, details: string, options?: { cause?: unknown; reason?: string }) => ToolrtRpcError;

// A reason not listed here (INVALID_REQUEST, PERMISSION_DENIED) gets its code's class.
const REASONS: Record<string, ErrorClass> = {
  FILE_NOT_FOUND: FileNotFoundError,
  SESSION_NOT_FOUND: SessionNotFoundError,
  IS_A_DIRECTORY: IsADirectoryError,
  NOT_A_DIRECTORY: NotADirectoryError,
  USER_NOT_ALLOWED: UserNotAllowedError,
  FILE_TOO_LARGE: FileTooLargeError,
  FILE_EXISTS: FileExistsError,
  NO_SPACE: NoSpaceError,
  QUOTA_EXCEEDED: QuotaExceededError,
  TIMEOUT: TimeoutError,
  SANDBOX_LOST: SandboxLostError,
};

const CLASSES: Partial<Record<Code, ErrorClass>> = {
  [Code.InvalidArgument]: InvalidArgumentError,
  [Code.NotFound]: NotFoundError,
  [Code.PermissionDenied]: PermissionDeniedError,
  [Code.Unauthenticated]: UnauthenticatedError,
  [Code.ResourceExhausted]: ResourceExhaustedError,
  [Code.FailedPrecondition]: FailedPreconditionError,
  [Code.Unavailable]: UnavailableError,
  [Code.DeadlineExceeded]: DeadlineExceededError,
  [Code.Canceled]: CancelledError,
};

// Code.Canceled is spelled CANCELLED on the wire and in every other gRPC library.
function statusName(code: Code): string {
  if (code === Code.Canceled) return "CANCELLED";
  return Code[code].replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
}

const ERROR_INFO = "google.rpc.ErrorInfo";
const ERROR_DOMAIN = "toolrt";

// google.rpc.ErrorInfo is {1: reason, 2: domain, 3: metadata}; read by hand
// from the wire because proto/ does not carry the googleapis types.
function errorInfo(bytes: Uint8Array): { reason: string; domain: string } {
  const reader = new BinaryReader(bytes);
  const info = { reason: "", domain: "" };
  while (reader.pos < reader.len) {
    const [field, wireType] = reader.tag();
    if (field === 1) info.reason = reader.string();
    else if (field === 2) info.domain = reader.string();
    else reader.skip(wireType);
  }
  return info;
}

/** The ErrorInfo reason toolrt put in a failed call's status details ("" if none). */
function reasonOf(error: ConnectError): string {
  for (const detail of error.details) {
    if ("desc" in detail || detail.type !== ERROR_INFO) continue;
    try {
      const info = errorInfo(detail.value);
      if (info.domain === ERROR_DOMAIN) return info.reason;
    } catch {
      // A detail that does not decode names no reason.
    }
  }
  return "";
}

/**
 * The error to throw for whatever a Connect call threw: CancelledError when
 * the caller's signal aborted it (whatever its reason), else the class of the
 * call's status.
 */
export function toToolrtError(error: unknown, signal?: AbortSignal): unknown {
  if (error instanceof ToolrtRpcError) return error;
  if (signal?.aborted) {
    const reason: unknown = signal.reason;
    const details = reason instanceof Error ? reason.message : String(reason);
    return new CancelledError("CANCELLED", details, { cause: reason });
  }
  const connect = ConnectError.from(error);
  const reason = reasonOf(connect);
  const Class = REASONS[reason] ?? CLASSES[connect.code] ?? ToolrtRpcError;
  return new Class(statusName(connect.code), connect.rawMessage, { cause: error, reason });
}

/** Runs an RPC with the caller's options, translating its failure into a ToolrtRpcError. */
export async function rpc<T>(options: CallOptions, call: (options: CallOptions) => Promise<T>): Promise<T> {
  try {
    return await call(options);
  } catch (error) {
    throw toToolrtError(error, options.signal);
  }
}

/**
 * A server stream as an async iterator whose early exit (break, throw)
 * cancels the call, and whose failures are ToolrtRpcErrors.
 */
export async function* streamed<T>(
  options: CallOptions,
  open: (options: CallOptions) => AsyncIterable<T>,
): AsyncGenerator<T> {
  const controller = new AbortController();
  const signals = [controller.signal, ...(options.signal ? [options.signal] : [])];
  try {
    for await (const item of open({ ...options, signal: AbortSignal.any(signals) })) yield item;
  } catch (error) {
    throw toToolrtError(error, options.signal);
  } finally {
    controller.abort();
  }
}
