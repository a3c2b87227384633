"""Network egress: the hosts a session may reach, through a proxy the daemon owns.

Sandboxes keep `network none`. A session given `network.allow` gets an
HTTP proxy of its own in the daemon (`proxy.py`), listening on a unix
socket in a directory bind-mounted into its container (`paths.py`); the
in-sandbox agent relays 127.0.0.1:3128 to it (`runtime/agent/relay.py`).

    policy.py     host patterns, ceilings, a session's effective policy (pure)
    addresses.py  IP literals in every spelling, and the ranges never dialled (pure)
    http.py       a proxy request's head, the answers, a TLS ClientHello's SNI (pure)
    proxy.py      one session's proxy: CONNECT and absolute-URI HTTP, caps, timeouts
    service.py    every session's proxy, the socket directories, hooks for audit
"""
