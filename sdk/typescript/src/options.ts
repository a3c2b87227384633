// A new session's settings with plain numbers, and their wire form.
import { create } from "@bufbuild/protobuf";
import { CreateSessionRequestSchema, type CreateSessionRequest } from "./gen/toolruntime/v1/runtime_pb.js";

/** Per-call options: a deadline and cancellation. */
export interface CallOptions {
  /** Abort the call: the daemon stops it, and the promise rejects with CancelledError. */
  signal?: AbortSignal;
  /** Deadline in milliseconds (else the client's `timeoutMs`); DeadlineExceededError after it. */
  timeoutMs?: number;
}

/** Every field is optional: the daemon fills defaults from its config and clamps to its maxima. */
export interface SessionOptions {
  image?: string;
  limits?: {
    memoryBytes?: number;
    cpus?: number;
    pids?: number;
    workspaceBytes?: number;
    tmpBytes?: number;
    callTimeoutS?: number;
    maxCalls?: number;
    outputCapBytes?: number;
  };
  allowlist?: { readRoots?: string[]; writeRoots?: string[]; denyGlobs?: string[] };
  env?: Record<string, string>;
  ttlSeconds?: number;
  idleSeconds?: number;
  labels?: Record<string, string>;
  /** A tar archive unpacked into /workspace before the first call. */
  workspaceTar?: Uint8Array;
  /** Names from the daemon's secrets_file (values never come back). */
  secrets?: string[];
  /** Hosts the session may reach through the daemon's proxy (none: no network). */
  network?: { allow?: string[]; maxBytes?: number; maxConnections?: number };
  /** OCI runtime, e.g. "runc" or "runsc" (gVisor); "" for the daemon's. */
  runtime?: string;
  /** Start from a snapshot ("snap_…") of this tenant. */
  fromSnapshot?: string;
}

const big = (value: number | undefined) => (value === undefined ? undefined : BigInt(value));

export function createSessionRequest(options: SessionOptions): CreateSessionRequest {
  const { limits, network, ttlSeconds, idleSeconds, ...rest } = options;
  return create(CreateSessionRequestSchema, {
    ...rest,
    ttlSeconds: big(ttlSeconds),
    idleSeconds: big(idleSeconds),
    limits: limits && {
      ...limits,
      memoryBytes: big(limits.memoryBytes),
      pids: big(limits.pids),
      workspaceBytes: big(limits.workspaceBytes),
      tmpBytes: big(limits.tmpBytes),
      maxCalls: big(limits.maxCalls),
      outputCapBytes: big(limits.outputCapBytes),
    },
    network: network && {
      allow: network.allow,
      maxBytes: big(network.maxBytes),
      maxConnections: big(network.maxConnections),
    },
  });
}
