// The HTTP/2 connection to the daemon: plaintext or TLS (mutual with a client
// certificate), and a bearer token on every call.
import { readFileSync } from "node:fs";
import type * as http2 from "node:http2";
import type { Interceptor, Transport } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";

export const DEFAULT_TARGET = "127.0.0.1:50051";
// The daemon's own limit on a message; tar chunks stay far below it.
const MAX_MESSAGE_BYTES = 64 << 20;

/** TLS to the daemon: which CA to trust and, for mutual TLS, this client's certificate. */
export interface TlsOptions {
  /** PEM file of the CA that signed the daemon's certificate (default: the system's CAs). */
  caFile?: string;
  /** PEM certificate and key of this client (mutual TLS; both or neither). */
  certFile?: string;
  keyFile?: string;
  /** The name to check the daemon's certificate against, when not the target's host. */
  serverName?: string;
}

export interface ClientOptions {
  /** host:port of the daemon (default TOOLRT_TARGET, else 127.0.0.1:50051). */
  target?: string;
  /** Bearer token (default TOOLRT_TOKEN, else none). */
  token?: string;
  /** true: TLS with the system's CAs; an object: your CA and client certificate. */
  tls?: boolean | TlsOptions;
  /** Deadline of every call that is given none, in milliseconds. */
  timeoutMs?: number;
}

export interface Connection {
  transport: Transport;
  close(): void;
}

function tlsSessionOptions(tls: true | TlsOptions): http2.SecureClientSessionOptions {
  if (tls === true) return {};
  const read = (path?: string) => (path ? readFileSync(path) : undefined);
  if (Boolean(tls.certFile) !== Boolean(tls.keyFile)) {
    throw new TypeError("tls.certFile and tls.keyFile go together (mutual TLS)");
  }
  return {
    ca: read(tls.caFile),
    cert: read(tls.certFile),
    key: read(tls.keyFile),
    servername: tls.serverName,
  };
}

function bearer(token: string): Interceptor {
  return (next) => (request) => {
    request.header.set("authorization", `Bearer ${token}`);
    return next(request);
  };
}

export function connect(options: ClientOptions): Connection {
  const target = options.target || process.env.TOOLRT_TARGET || DEFAULT_TARGET;
  const token = options.token ?? process.env.TOOLRT_TOKEN ?? "";
  const tls = options.tls ?? false;
  const baseUrl = `${tls === false ? "http" : "https"}://${target}`;
  const nodeOptions = tls === false ? {} : tlsSessionOptions(tls);
  // Our own session manager, so that close() can end the connection.
  const sessionManager = new Http2SessionManager(baseUrl, {}, nodeOptions);
  const transport = createGrpcTransport({
    baseUrl,
    sessionManager,
    nodeOptions,
    interceptors: token ? [bearer(token)] : [],
    readMaxBytes: MAX_MESSAGE_BYTES,
    writeMaxBytes: MAX_MESSAGE_BYTES,
    defaultTimeoutMs: options.timeoutMs,
  });
  return { transport, close: () => sessionManager.abort() };
}
