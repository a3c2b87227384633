"""Who is calling: principals, tokens, and the checks that turn credentials into one.

- principals.py  `Principal` (tenant, admin flag, what it may call) and certificate names
- tokens.py      the tokens file: hashed tokens, create/list/revoke, a store that re-reads it
- credentials.py the rules: a call's credentials → a principal, or UNAUTHENTICATED saying why

The gRPC edge (`server.auth`) hands these the call's metadata, certificate and peer.
"""

from runtime.auth.credentials import Authenticator, Credentials, startup_problem
from runtime.auth.principals import Principal
from runtime.auth.tokens import TokenRecord, TokenStore

__all__ = [
    "Authenticator",
    "Credentials",
    "Principal",
    "TokenRecord",
    "TokenStore",
    "startup_problem",
]
