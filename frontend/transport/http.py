"""``tether serve --http``: the MCP server over the SDK's streamable HTTP transport
(docs/security.md#principals).

Everything HTTP is the MCP SDK's: the streamable HTTP app (endpoint ``/mcp``), bearer
authentication through a :class:`TokenVerifier` (a missing or wrong token is 401 before
any MCP message is read), and Host/Origin validation against DNS rebinding
(``TransportSecuritySettings``). Tether adds the principals (who each token is), and binds
loopback unless told otherwise.
"""

from __future__ import annotations

import ipaddress
import socket
import sys
from dataclasses import dataclass
from typing import Any

import uvicorn
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.types import ASGIApp, Receive, Scope, Send

from tether.frontend.policy.authority import Caller
from tether.frontend.policy.principals import Principals
from tether.frontend.transport.mcp_server import CallerResolver, build_server
from tether.protocol.errors import ErrorCode, TetherError
from tether.shared.config import Config

MCP_PATH = "/mcp"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
#: What the SDK keeps of a bearer token after checking it: never the token itself.
_REDACTED = "(redacted)"


class PrincipalTokens:
    """The SDK's ``TokenVerifier`` over a principals file."""

    def __init__(self, principals: Principals) -> None:
        self._principals = principals

    async def verify_token(self, token: str) -> AccessToken | None:
        principal = self._principals.by_token(token)
        if principal is None:
            return None
        return AccessToken(token=_REDACTED, client_id=principal.id, scopes=[],
                           claims={"principal": principal.caller.principal})


@dataclass(frozen=True)
class HttpOptions:
    """Where to listen, and which other Host/Origin names clients may use."""

    host: str = "127.0.0.1"
    port: int = 8765
    allow_remote: bool = False
    allowed_hosts: tuple[str, ...] = ()


def caller_resolver(principals: Principals) -> CallerResolver:
    """Name the caller of a request from the user the bearer middleware authenticated."""
    callers: dict[str, Caller] = principals.callers()

    def resolve(ctx: Any) -> Caller:
        request = getattr(ctx, "request", None)
        user = request.scope.get("user") if request is not None else None
        caller = callers.get(user.access_token.client_id) if isinstance(
            user, AuthenticatedUser) else None
        if caller is None:  # fail closed: an HTTP request is never "local"
            raise TetherError(ErrorCode.UNAUTHORIZED, "no authenticated principal")
        return caller

    return resolve


def build_app(config: Config, principals: Principals, options: HttpOptions) -> Starlette:
    """The ASGI app: authenticated, Host/Origin-checked streamable HTTP on ``/mcp``."""
    server = build_server(config, callers=caller_resolver(principals))
    port = options.port
    # Host and Origin must name this server: a web page on another origin that rebinds its
    # DNS name to 127.0.0.1 is refused (421/403) before any MCP message is read.
    names = {*LOOPBACK_NAMES, _url_host(options.host), *options.allowed_hosts}
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=sorted(f"{name}:{port}" for name in names),
        allowed_origins=sorted(f"{scheme}://{name}:{port}" for name in names
                               for scheme in ("http", "https")),
    )
    # The SDK wants an issuer for its auth settings; there is no OAuth server here (tokens
    # come from the principals file), so the issuer is this server itself.
    auth = AuthSettings(issuer_url=f"http://{_url_host(options.host)}:{port}",  # type: ignore[arg-type]
                        resource_server_url=None)
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        transport_security=security,
        host=options.host,
        auth=auth,
        token_verifier=PrincipalTokens(principals),
    )
    # Outermost of the app's own middleware: before authentication reads Authorization and
    # the transport reads Host, Origin, Mcp-Session-Id, MCP-Protocol-Version and Mcp-Name.
    app.add_middleware(TrimmedHeaders)
    return app


#: What may surround a header value and is not part of it (RFC 9110 docs/tools.md#records.5: OWS is SP /
#: HTAB).
_OWS = b" \t"


class TrimmedHeaders:
    """ASGI middleware: every request header's value without the spaces and tabs around it.

    RFC 9110 docs/tools.md#records.5 says whitespace around a field value is not part of it, and h11 strips
    it; uvicorn's httptools parser strips only the leading side, so ``Mcp-Session-Id:
    abc  `` named no session (404) and a bearer token with a trailing tab was a wrong
    token (401). Trimmed here, once, for every header any layer reads."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            headers = scope["headers"]
            if any(value[:1] in (b" ", b"\t") or value[-1:] in (b" ", b"\t")
                   for _, value in headers):
                scope = {**scope, "headers": [(name, value.strip(_OWS))
                                              for name, value in headers]}
        await self.app(scope, receive, send)


def bind(options: HttpOptions) -> socket.socket:
    """A listening socket on host:port (port 0: a free one); refuses a non-loopback host
    unless ``allow_remote``."""
    infos = socket.getaddrinfo(options.host, options.port, type=socket.SOCK_STREAM)
    if not infos:
        raise TetherError(ErrorCode.CONFIG_INVALID, f"cannot resolve --host {options.host}")
    family, kind, proto, _, address = infos[0]
    if not ipaddress.ip_address(address[0]).is_loopback and not options.allow_remote:
        raise TetherError(
            ErrorCode.CONFIG_INVALID,
            f"--host {options.host} is not a loopback address: other machines could reach "
            "this server. Add --allow-remote to mean it (and put TLS in front of it).",
        )
    # proto must be IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted connections only
    # then, and without it every response waits ~40 ms on Nagle + delayed ACK.
    sock = socket.socket(family, kind, proto or socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise TetherError(ErrorCode.CONFIG_INVALID,
                          f"cannot listen on {options.host}:{options.port}: {exc.strerror}") from None
    return sock


def serve(config: Config, principals: Principals, options: HttpOptions, log_level: str) -> None:
    """Run until SIGINT/SIGTERM. Prints the endpoint (with the real port) on stderr."""
    sock = bind(options)
    port = sock.getsockname()[1]
    options = HttpOptions(options.host, port, options.allow_remote, options.allowed_hosts)
    app = build_app(config, principals, options)
    if not ipaddress.ip_address(sock.getsockname()[0]).is_loopback:
        print(f"tether serve: WARNING: listening on {options.host}:{port}, reachable from other "
              "machines (--allow-remote); bearer tokens cross the network in clear text "
              "unless TLS fronts this server", file=sys.stderr, flush=True)
    print(f"tether serve: MCP over streamable HTTP at "
          f"http://{_url_host(options.host)}:{port}{MCP_PATH} ({len(principals)} principals)",
          file=sys.stderr, flush=True)
    # http="httptools": the C parser costs ~0.5 ms less per request than pure-Python h11.
    server = uvicorn.Server(uvicorn.Config(
        app, http="httptools", log_level=log_level.lower(), access_log=False,
        timeout_graceful_shutdown=2, server_header=False,
    ))
    server.run(sockets=[sock])


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
