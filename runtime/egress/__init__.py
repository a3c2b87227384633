"""Network egress: the hosts a session may reach, through a proxy the daemon owns.

Sandboxes keep `network none`. A session given `network.allow` gets an
HTTP proxy of its own in the daemon (`proxy.py`), listening on a unix
socket in a directory bind-mounted into its container (made with the
container: `runtime/sandbox/relay_dirs.py`); the
in-sandbox agent relays 127.0.0.1:3128 to it (`static-agent/relay.go`).
What a session may reach is pure policy, on the ground floor with the config
that names it: `runtime/policy/hosts.py` (host patterns, ceilings, a
session's effective policy) and `runtime/policy/addresses.py` (IP literals
in every spelling, and the ranges never dialled).

    http.py       a proxy request's head, the answers, a TLS ClientHello's SNI (pure)
    proxy.py      one session's proxy: CONNECT and absolute-URI HTTP, caps, timeouts
    service.py    every session's proxy, the socket directories, hooks for audit
"""
