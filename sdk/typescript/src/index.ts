export { Client } from "./client.js";
export type { Arguments, BatchCall, TarSource } from "./client.js";
export { Session } from "./session.js";
export { ExecStream } from "./programs.js";
export type {
  ByteSource,
  ExecExitInfo,
  ExecOptions,
  ExecResult,
  ExecStreamEvent,
  PathInfo,
  Program,
  ReadFileOptions,
  TerminalSize,
  WriteFileOptions,
} from "./programs.js";
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
  FileExistsError,
  FileNotFoundError,
  FileTooLargeError,
  InvalidArgumentError,
  IsADirectoryError,
  NoSpaceError,
  NotADirectoryError,
  NotFoundError,
  PermissionDeniedError,
  QuotaExceededError,
  ResourceExhaustedError,
  SandboxLostError,
  SessionNotFoundError,
  TimeoutError,
  ToolrtRpcError,
  UserNotAllowedError,
  UnauthenticatedError,
  UnavailableError,
} from "./errors.js";
export { toolrtTools } from "./ai.js";
export { toolrtAgentTools } from "./agents.js";
export type { AgentToolOutput } from "./agents.js";
