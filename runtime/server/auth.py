"""Authentication at the gRPC edge: every RPC but health gets a principal, or UNAUTHENTICATED.

`AuthInterceptor` reads the call's credentials (the `authorization`
metadata, a verified client certificate, the peer), asks the
`runtime.auth` rules for a principal, checks it may call the method, and
hands the servicer a context that carries it (`principal_of`). Refusals are
counted per peer and minute for the audit log. Health checks stay open;
reflection needs the same credentials as the service.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from runtime.audit import AuditLog
from runtime.auth.credentials import Authenticator, Credentials, peer_host
from runtime.auth.principals import Principal
from runtime.errors import Unauthenticated
from runtime.server.interceptor import HandlerInterceptor, Wrapper

HEALTH_SERVICE = "grpc.health.v1.Health"


class AuthedContext:
    """The servicer context of an authenticated call: the real one, plus its principal."""

    def __init__(self, context: grpc.aio.ServicerContext, principal: Principal) -> None:
        self._context = context
        self.principal = principal

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


def principal_of(context: Any) -> Principal:
    """The principal of a call that went through `AuthInterceptor`."""
    if not isinstance(context, AuthedContext):
        msg = "this RPC did not go through authentication"
        raise TypeError(msg)
    return context.principal


def _text(values: list[bytes] | None) -> list[str]:
    return [v.decode("utf-8", "replace") for v in values or []]


def credentials_of(context: grpc.aio.ServicerContext) -> Credentials:
    """What the call presents: metadata, the verified certificate's names, the peer."""
    authorization = [
        value if isinstance(value, str) else value.decode("latin-1")
        for key, value in context.invocation_metadata() or ()
        if key == "authorization"
    ]
    if authorization:
        # A token, when sent, names the principal whatever certificate
        # comes with it: no need to read the certificate's names.
        return Credentials(authorization=authorization, peer=context.peer() or "")
    auth = context.auth_context()
    subject = _text(auth.get("x509_subject"))
    common_name = _text(auth.get("x509_common_name"))
    return Credentials(
        authorization=authorization,
        peer=context.peer() or "",
        cert_subject=subject[0] if subject else "",
        cert_common_name=common_name[0] if common_name else "",
        cert_uris=_text(auth.get("peer_uri")),
    )


class AuthInterceptor(HandlerInterceptor):
    def __init__(self, authenticator: Authenticator, audit: AuditLog) -> None:
        self._authenticator = authenticator
        self._audit = audit

    def _authenticate(self, context: Any, service: str, method: str) -> AuthedContext:
        creds = credentials_of(context)
        try:
            principal = self._authenticator.authenticate(creds)
        except Unauthenticated as exc:
            self._audit.denied(peer_host(creds.peer), exc.reason, str(exc))
            raise
        principal.authorize(service, method)
        return AuthedContext(context, principal)

    def wrappers(self, method: str) -> tuple[Wrapper, Wrapper] | None:
        service, _, name = method.lstrip("/").rpartition("/")
        if service == HEALTH_SERVICE:
            return None

        def unary(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
            async def authenticated(request: Any, context: Any) -> Any:
                return await fn(request, self._authenticate(context, service, name))

            return authenticated

        def stream(fn: Callable[..., AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
            async def authenticated(request: Any, context: Any) -> AsyncIterator[Any]:
                authed = self._authenticate(context, service, name)
                async for item in fn(request, authed):
                    yield item

            return authenticated

        return unary, stream
