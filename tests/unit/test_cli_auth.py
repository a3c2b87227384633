"""`toolrt tokens` and the client flags and variables, as a user runs them."""

from __future__ import annotations

from tests.helpers import toolrt


def test_tokens_create_list_revoke(secured):
    path = str(secured.tokens_file)
    created = toolrt("tokens", "create", "--tenant", "carol", "--tokens-file", path)
    assert created.returncode == 0, created.stderr
    token = created.stdout.splitlines()[-1]
    assert token.startswith("trt_") and len(token) == 60
    token_id = token[4:16]
    # The file named by the configuration, through the environment.
    listed = toolrt("tokens", "list", TOOLRT_AUTH__TOKENS_FILE=path)
    rows = [line.split("\t") for line in listed.stdout.splitlines()]
    assert [token_id, "carol"] == rows[-1][:2] and token not in listed.stdout
    assert ["ops"] == [r[1] for r in rows if r[-1] == "admin"]
    bad = toolrt("tokens", "create", "--tenant", "../x", "--tokens-file", path)
    assert bad.returncode == 2 and "not a tenant name" in bad.stderr
    assert toolrt("tokens", "revoke", token_id, "--tokens-file", path).returncode == 0
    again = toolrt("tokens", "revoke", token_id, "--tokens-file", path)
    assert again.returncode == 1 and f"no token '{token_id}'" in again.stderr
    assert toolrt("tokens", "list").returncode != 0  # no file named anywhere


def test_the_cli_takes_a_token_and_tls(secured):
    env = {"TOOLRT_TARGET": secured.daemon.target, "TOOLRT_TLS_CA": secured.pki.cert_file}
    created = toolrt("sessions", "create", TOOLRT_TOKEN=secured.tokens["alice"], **env)
    assert created.returncode == 0, created.stderr
    session_id = created.stdout.strip()
    listed = toolrt("sessions", "list", "--token", secured.tokens["alice"], **env)
    assert listed.stdout.startswith(f"{session_id}\tready\ttenant=alice\t")
    # The flag wins over the variable; bob sees nothing of alice's.
    other = toolrt("sessions", "list", "--token", secured.tokens["bob"], TOOLRT_TOKEN="x", **env)
    assert other.returncode == 0 and other.stdout == ""
    anonymous = toolrt("sessions", "list", **env)
    assert anonymous.returncode == 2 and "UNAUTHENTICATED: no credentials" in anonymous.stderr
    called = toolrt(
        "call", session_id, "shell", '{"command": "true"}',
        "--target", secured.daemon.target, "--tls-ca", secured.pki.cert_file,
        "--token", secured.tokens["alice"],
    )  # fmt: skip
    assert called.returncode == 0, called.stderr
