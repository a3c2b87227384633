// RPC failures as classes a caller can `instanceof`. A tool that ran and
// failed is not one of these: its Result has ok=false and an error code.
import { Code, ConnectError } from "@connectrpc/connect";
import type { CallOptions } from "./options.js";

/** An RPC failed with a gRPC status; `code` is its name, e.g. "NOT_FOUND". */
export class ToolrtRpcError extends Error {
  readonly code: string;
  readonly details: string;

  constructor(code: string, details: string, options?: { cause?: unknown }) {
    super(`${code}: ${details}`, options);
    this.name = new.target.name;
    this.code = code;
    this.details = details;
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

type ErrorClass = new (code: string, details: string, options?: { cause?: unknown }) => ToolrtRpcError;

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
  const Class = CLASSES[connect.code] ?? ToolrtRpcError;
  return new Class(statusName(connect.code), connect.rawMessage, { cause: error });
}

/** Runs an RPC with the caller's options, translating its failure into a ToolrtRpcError. */
export async function rpc<T>(options: CallOptions, call: (options: CallOptions) => Promise<T>): Promise<T> {
  try {
    return await call(options);
  } catch (error) {
    throw toToolrtError(error, options.signal);
  }
}
