export { Client } from "./client.js";
export type { Arguments, BatchCall, TarSource } from "./client.js";
export { Session } from "./session.js";
export type { ClientOptions, TlsOptions } from "./transport.js";
export type { CallOptions, SessionOptions } from "./options.js";
export type { Result, StreamEvent, ToolCallError } from "./results.js";
export type {
  RestoreSessionResponse,
  Session as SessionInfo,
  Snapshot,
} from "./gen/toolruntime/v1/runtime_pb.js";
export {
  CancelledError,
  DeadlineExceededError,
  FailedPreconditionError,
  InvalidArgumentError,
  NotFoundError,
  PermissionDeniedError,
  ResourceExhaustedError,
  ToolrtRpcError,
  UnauthenticatedError,
  UnavailableError,
} from "./errors.js";
export { toolrtTools } from "./ai.js";
