import assert from "node:assert/strict";
import { after, test } from "node:test";
import {
  FileExistsError,
  FileNotFoundError,
  FileTooLargeError,
  InvalidArgumentError,
  IsADirectoryError,
  NoSpaceError,
  NotADirectoryError,
  NotFoundError,
  PermissionDeniedError,
  ResourceExhaustedError,
  SessionNotFoundError,
  ToolrtRpcError,
  UserNotAllowedError,
} from "../src/index.js";
import { plainClient } from "./env.js";

const client = plainClient();
after(() => client.close());
const MiB = 1 << 20;

// An assertion that the promise rejects with `Class`, its status code and reason.
const refused = (Class: new (...args: never[]) => ToolrtRpcError, code: string, reason: string) => (error: unknown) => {
  assert.ok(error instanceof Class, String(error));
  assert.deepEqual([error.code, error.reason], [code, reason]);
  return true;
};

test("writeFile and readFile carry bytes both ways; stat says what is there", async () => {
  await using session = await client.session();
  const bytes = Uint8Array.from({ length: 256 }, (_, i) => i);
  assert.equal(await session.writeFile("/tmp/deep/data", bytes, { makeParents: true, mode: 0o600 }), 256);
  assert.deepEqual(new Uint8Array(await session.readFile("/tmp/deep/data")), bytes);
  assert.deepEqual(new Uint8Array(await session.readFile("/tmp/deep/data", { offset: 250 })), bytes.subarray(250));

  await session.writeFile("log", "one\n");
  await session.writeFile("log", ["two", "\n"], { ifExists: "append" });
  const chunks = [];
  for await (const chunk of session.readFileStream("log")) chunks.push(chunk);
  assert.equal(Buffer.concat(chunks).toString(), "one\ntwo\n");

  const info = await session.stat("/tmp/deep/data");
  assert.deepEqual([info.exists, info.type, info.size, info.mode], [true, "file", 256, 0o600]);
  assert.ok(info.mtime > 0);
  await session.exec(["ln", "-s", "log", "/workspace/link"]);
  const link = await session.stat("link");
  assert.deepEqual([link.type, link.linkTarget], ["symlink", "log"]);
  assert.equal((await session.stat("/etc")).type, "directory");
  assert.equal((await session.stat("/nope")).exists, false);
});

test("every file error is a class of its reason and its status", async () => {
  await using session = await client.session({ limits: { tmpBytes: 16 * MiB } });
  await assert.rejects(session.readFile("missing"), refused(FileNotFoundError, "NOT_FOUND", "FILE_NOT_FOUND"));
  await assert.rejects(session.readFile("missing"), (error) => error instanceof NotFoundError);
  await assert.rejects(
    session.writeFile("/workspace/no/parent", "x"),
    refused(FileNotFoundError, "NOT_FOUND", "FILE_NOT_FOUND"),
  );
  await assert.rejects(session.readFile("/etc"), refused(IsADirectoryError, "FAILED_PRECONDITION", "IS_A_DIRECTORY"));
  await assert.rejects(session.writeFile("/workspace", "x"), refused(IsADirectoryError, "FAILED_PRECONDITION", "IS_A_DIRECTORY"));
  await assert.rejects(
    session.readFile("/etc/passwd/x"),
    refused(NotADirectoryError, "FAILED_PRECONDITION", "NOT_A_DIRECTORY"),
  );
  await assert.rejects(
    session.readFile("/etc/shadow"),
    refused(PermissionDeniedError, "PERMISSION_DENIED", "PERMISSION_DENIED"),
  );
  // The root filesystem is read-only.
  await assert.rejects(session.writeFile("/etc/new-file", "x"), refused(PermissionDeniedError, "PERMISSION_DENIED", "PERMISSION_DENIED"));
  await session.writeFile("once", "1");
  await assert.rejects(session.writeFile("once", "2", { ifExists: "fail" }), refused(FileExistsError, "ALREADY_EXISTS", "FILE_EXISTS"));
  await assert.rejects(
    session.readFile("/etc/passwd", { maxBytes: 10 }),
    refused(FileTooLargeError, "OUT_OF_RANGE", "FILE_TOO_LARGE"),
  );
  await assert.rejects(session.readFile("/dev/zero", { maxBytes: MiB }), refused(FileTooLargeError, "OUT_OF_RANGE", "FILE_TOO_LARGE"));
  function* tooMuch() {
    for (let i = 0; i < 32; i++) yield new Uint8Array(MiB);
  }
  await assert.rejects(session.writeFile("/tmp/huge", tooMuch()), (error) => {
    assert.ok(error instanceof NoSpaceError && error instanceof ResourceExhaustedError, String(error));
    assert.equal(error.reason, "NO_SPACE");
    return true;
  });
  await assert.rejects(
    session.writeFile("x", "", { ifExists: "sometimes" as "fail" }),
    refused(InvalidArgumentError, "INVALID_ARGUMENT", "INVALID_REQUEST"),
  );
  await assert.rejects(session.stat("/", { user: "root" }), refused(UserNotAllowedError, "PERMISSION_DENIED", "USER_NOT_ALLOWED"));
  await assert.rejects(session.exec(["true"], { user: "root" }), refused(UserNotAllowedError, "PERMISSION_DENIED", "USER_NOT_ALLOWED"));

  await session.close();
  await assert.rejects(session.stat("/"), refused(SessionNotFoundError, "NOT_FOUND", "SESSION_NOT_FOUND"));
});

test("a read-only file refuses writeFile, replaced or appended to, and keeps its bytes", async () => {
  await using session = await client.session();
  await session.writeFile("ro", "original", { mode: 0o444 });
  await assert.rejects(session.writeFile("ro", "changed"), (error) => error instanceof PermissionDeniedError);
  await assert.rejects(session.writeFile("ro", "more", { ifExists: "append" }), (error) => error instanceof PermissionDeniedError);
  assert.equal((await session.readFile("ro")).toString(), "original");
  assert.equal((await session.stat("ro")).mode, 0o444);
});
