import assert from "node:assert/strict";
import { test } from "node:test";
import { Client, ToolrtRpcError, UnauthenticatedError } from "../src/index.js";
import { need } from "./env.js";

const ca = () => need("TOOLRT_TEST_CA_FILE");

test("TLS with a bearer token: the token's tenant owns the session", async () => {
  await using client = new Client({ target: need("TOOLRT_TEST_TLS_TARGET"), token: need("TOOLRT_TEST_TOKEN"), tls: { caFile: ca() } });
  await using session = await client.session();
  assert.equal(session.info.tenant, "alice");
  assert.equal((await session.shell("echo secure")).output.stdout, "secure\n");
});

test("TLS without a token, or with a wrong one, is UnauthenticatedError", async () => {
  for (const token of ["", "trt_000000000000_wrong"]) {
    await using client = new Client({ target: need("TOOLRT_TEST_TLS_TARGET"), token, tls: { caFile: ca() } });
    await assert.rejects(client.listSessions(), UnauthenticatedError);
  }
});

test("a daemon whose certificate the client's CA did not sign is refused", async () => {
  await using client = new Client({ target: need("TOOLRT_TEST_TLS_TARGET"), token: need("TOOLRT_TEST_TOKEN"), tls: true });
  await assert.rejects(client.listSessions(), ToolrtRpcError);
});

test("serverName is the name the daemon's certificate is checked against", async () => {
  const target = need("TOOLRT_TEST_TLS_TARGET");
  const token = need("TOOLRT_TEST_TOKEN");
  {
    await using client = new Client({ target, token, tls: { caFile: ca(), serverName: "localhost" } });
    assert.ok(Array.isArray(await client.listSessions()));
  }
  await using wrong = new Client({ target, token, tls: { caFile: ca(), serverName: "elsewhere.example" } });
  await assert.rejects(wrong.listSessions(), ToolrtRpcError);
});

test("mutual TLS: the client certificate names the tenant; without one no call passes", async () => {
  const target = need("TOOLRT_TEST_MTLS_TARGET");
  {
    await using client = new Client({
      target,
      token: "",
      tls: { caFile: ca(), certFile: need("TOOLRT_TEST_CLIENT_CERT_FILE"), keyFile: need("TOOLRT_TEST_CLIENT_KEY_FILE") },
    });
    await using session = await client.session();
    assert.equal(session.info.tenant, "mtls");
  }
  await using anonymous = new Client({ target, token: "", tls: { caFile: ca() } });
  await assert.rejects(anonymous.listSessions(), ToolrtRpcError);
});
