// A sandbox backend for Deep Agents JS (`deepagents`, an optional peer
// dependency; this module is its own entry point, `@toolrt/sdk/deepagents`,
// so the SDK's main entry never loads it). BaseSandbox builds ls, read, grep,
// glob, edit and delete on the three operations given here: execute over the
// exec RPC, uploads and downloads over WriteFile and ReadFile.
import {
  BaseSandbox,
  type ExecuteResponse,
  type FileDownloadResponse,
  type FileOperationError,
  type FileUploadResponse,
} from "deepagents";
import {
  FileNotFoundError,
  InvalidArgumentError,
  IsADirectoryError,
  NotADirectoryError,
  PermissionDeniedError,
} from "./errors.js";
import type { Session } from "./session.js";

export interface ToolrtSandboxOptions {
  /** Seconds before a command's process tree is killed (0: the session's call_timeout_s). */
  timeoutS?: number;
  /** Bytes of stdout and of stderr a command returns; past it `truncated` (default 1 MiB: a model reads it). */
  outputCapBytes?: number;
}

const DEFAULT_OUTPUT_CAP_BYTES = 1024 * 1024;

/** The refusals of the file RPCs an agent can cause, as Deep Agents names them. */
function operationError(error: unknown): FileOperationError {
  if (error instanceof FileNotFoundError) return "file_not_found";
  if (error instanceof IsADirectoryError) return "is_directory";
  if (error instanceof PermissionDeniedError) return "permission_denied";
  if (error instanceof InvalidArgumentError || error instanceof NotADirectoryError) return "invalid_path";
  throw error;
}

/**
 * A toolrt session as a Deep Agents sandbox: `createDeepAgent({ backend: new
 * ToolrtSandbox(session) })`. Commands run under /bin/sh -c in /workspace;
 * relative paths are under /workspace. Closing the session is the caller's.
 */
export class ToolrtSandbox extends BaseSandbox {
  readonly id: string;

  constructor(
    readonly session: Session,
    private readonly options: ToolrtSandboxOptions = {},
  ) {
    super();
    this.id = session.id;
  }

  /** stdout then stderr as one text; `truncated` when either passed the exec output cap. */
  async execute(command: string): Promise<ExecuteResponse> {
    const run = await this.session.exec({ command }, {
      timeoutS: this.options.timeoutS,
      outputCapBytes: this.options.outputCapBytes ?? DEFAULT_OUTPUT_CAP_BYTES,
    });
    let output = Buffer.concat([run.stdout, run.stderr]).toString();
    if (run.timedOut) output += `\n[killed: the command ran past its timeout]`;
    const truncated = run.droppedBytes.stdout > 0 || run.droppedBytes.stderr > 0;
    return { output, exitCode: run.exitCode, truncated };
  }

  /** Writes each file (making its parents); a refused path is that file's error, not the batch's. */
  async uploadFiles(files: Array<[string, Uint8Array]>): Promise<FileUploadResponse[]> {
    const responses: FileUploadResponse[] = [];
    for (const [path, content] of files) {
      try {
        await this.session.writeFile(path, content, { makeParents: true });
        responses.push({ path, error: null });
      } catch (error) {
        responses.push({ path, error: operationError(error) });
      }
    }
    return responses;
  }

  /** Reads each file whole; a refused path is that file's error, not the batch's. */
  async downloadFiles(paths: string[]): Promise<FileDownloadResponse[]> {
    const responses: FileDownloadResponse[] = [];
    for (const path of paths) {
      try {
        const content = new Uint8Array(await this.session.readFile(path));
        responses.push({ path, content, error: null });
      } catch (error) {
        responses.push({ path, content: null, error: operationError(error) });
      }
    }
    return responses;
  }
}
