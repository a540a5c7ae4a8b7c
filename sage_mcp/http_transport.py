"""`sage serve`: the MCP server over streamable HTTP, behind a bearer token.

Loopback only unless the caller opts in; every request must carry
`Authorization: Bearer <token>`. The token is generated once, kept in a
0600 file next to the memory database, and printed on stderr at start so
the user can paste it into a client.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import os
import secrets
import socket
import sys
from pathlib import Path
from typing import Any, Awaitable, Callable

from sage_engine.config import Config
from sage_engine.errors import InvalidInput

log = logging.getLogger(__name__)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MCP_PATH = "/mcp"


def default_token_path(config: Config) -> Path:
    return config.db_path.with_name(config.db_path.stem + ".mcp-token")


def load_or_create_token(path: Path) -> str:
    """The token in `path`, created (0600) on first use. Two servers starting
    at once agree on one token: the file appears atomically via link()."""
    path = path.expanduser()
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(32) + "\n")
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another server created it first; use theirs
        finally:
            tmp.unlink()
    if os.name == "posix" and path.stat().st_mode & 0o077:
        raise InvalidInput(f"token file {path} is readable by other users; run `chmod 600 {path}`")
    token = path.read_text(encoding="utf-8").strip()
    if len(token) < 16:
        raise InvalidInput(f"token file {path} holds no usable token (16+ characters); delete it to get a new one")
    return token


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class BearerAuth:
    """ASGI middleware: refuse any HTTP or websocket request without the right
    bearer token; lifespan events pass so the app can start and stop."""

    def __init__(self, app: ASGIApp, token: str):
        self.app = app
        self._token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan" or self._authorized(scope):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps({"error": "unauthorized",
                           "message": "send 'Authorization: Bearer <token>'; `sage serve` prints the token"}).encode()
        await send({"type": "http.response.start", "status": 401, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (b"www-authenticate", b'Bearer realm="sage"'),
        ]})
        await send({"type": "http.response.body", "body": body})

    def _authorized(self, scope: Scope) -> bool:
        values = [v for k, v in scope.get("headers", ()) if k == b"authorization"]
        if len(values) != 1:
            return False
        scheme, _, given = values[0].strip().partition(b" ")
        # Constant-time compare so response timing does not leak the token prefix.
        return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self._token)


def build_app(config: Config, token: str, host: str) -> ASGIApp:
    from sage_mcp.server import create_server

    server = create_server(config)
    return BearerAuth(server.streamable_http_app(streamable_http_path=MCP_PATH, host=host), token)


def serve(config: Config, *, host: str = "127.0.0.1", port: int = 8765, allow_remote: bool = False,
          token_file: str | Path | None = None) -> None:
    """Bind, print how to connect on stderr, and serve until interrupted."""
    import uvicorn

    if not is_loopback(host) and not allow_remote:
        raise InvalidInput(
            f"--host {host} is reachable from other machines; pass --allow-remote to serve there "
            "(every request still needs the token), or keep the default 127.0.0.1"
        )
    token_path = Path(token_file) if token_file else default_token_path(config)
    token = load_or_create_token(token_path)
    # Bind before announcing, so whoever reads the URL can connect at once
    # (and --port 0 reports the port the OS chose).
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise InvalidInput(f"cannot listen on {host}:{port}: {exc.strerror}; choose another --port") from exc
    sock.listen(128)
    bound = sock.getsockname()[1]
    url = f"http://{host if ':' not in host else f'[{host}]'}:{bound}{MCP_PATH}"
    print(
        f"sage serve: memory {config.db_path} (backend {config.backend})\n"
        f"listening on {url}\n"
        f"token ({token_path}): {token}\n"
        f"connect: claude mcp add --transport http sage {url} --header \"Authorization: Bearer {token}\"",
        file=sys.stderr, flush=True,
    )
    app = build_app(config, token, host)
    uv = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
    try:
        uv.run(sockets=[sock])
    finally:
        sock.close()
