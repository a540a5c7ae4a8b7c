"""`sage serve`: the MCP server over streamable HTTP, behind bearer tokens.

Loopback only unless the caller opts in; every request must carry
`Authorization: Bearer <token>`. Alone, the server generates one token, keeps
it in a 0600 file next to the memory database and prints it on stderr; its
holder acts as the user who started the server. For a team, `--tokens FILE`
maps one token per person to a name (`NAME TOKEN` lines, mode 0600; a
third column `admin` gives that person the admin role), and every item,
episode and adoption records that name. A tokens file naming two or more
people makes the memory a team's (docs/memory.md, "Threat model").
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import os
import re
import secrets
import socket
import sys
from pathlib import Path
from typing import Any, Awaitable, Callable, MutableMapping

from sage_engine.config import Config
from sage_engine.engine import Engine
from sage_engine.errors import InvalidInput

log = logging.getLogger(__name__)

# The ASGI spec's shapes, as Starlette types them.
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MCP_PATH = "/mcp"


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@+\-]{0,63}$")


def default_token_path(config: Config) -> Path:
    if config.db_url:  # no file to sit beside: keep it with the user's SAGE settings
        from platformdirs import user_config_dir

        return Path(user_config_dir("sage", appauthor=False)) / "http.mcp-token"
    return config.db_path.with_name(config.db_path.stem + ".mcp-token")


def load_tokens(path: Path) -> dict[str, str]:
    """token -> name, from `NAME TOKEN [admin]` lines (blank lines and # comments skipped)."""
    return load_token_file(path)[0]


def load_token_file(path: Path) -> tuple[dict[str, str], frozenset[str]]:
    """token -> name, and the names holding the admin role."""
    path = Path(path).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"cannot read tokens file {path}: {exc.strerror}") from exc
    _check_private(path)
    tokens: dict[str, str] = {}
    admins: set[str] = set()
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] != "admin"):
            raise InvalidInput(f"{path}:{n}: expected 'NAME TOKEN' or 'NAME TOKEN admin', got {len(parts)} fields")
        name, token = parts[:2]
        if len(parts) == 3:
            admins.add(name)
        if not _NAME.match(name):
            raise InvalidInput(f"{path}:{n}: name {name!r} must be 1-64 letters, digits or _ . @ + -")
        if len(token) < 16:
            raise InvalidInput(f"{path}:{n}: the token for {name} is shorter than 16 characters")
        if token in tokens:
            raise InvalidInput(f"{path}:{n}: the token for {name} is also {tokens[token]}'s; give each person their own")
        tokens[token] = name
    if not tokens:
        raise InvalidInput(f"tokens file {path} names nobody; add 'NAME TOKEN' lines")
    return tokens, frozenset(admins)


def _check_private(path: Path) -> None:
    if os.name == "posix" and path.stat().st_mode & 0o077:
        raise InvalidInput(f"{path} is readable by other users; run `chmod 600 {path}`")


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
    _check_private(path)
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
    """ASGI middleware: refuse any HTTP or websocket request without a known
    bearer token, and tell the app who is calling through the `x-sage-user`
    header (and `x-sage-role: admin` for the names in `admins`); lifespan
    events pass so the app can start and stop."""

    def __init__(self, app: ASGIApp, tokens: dict[str, str], admins: frozenset[str] = frozenset()):
        self.app = app
        self._tokens = [(t.encode(), name.encode()) for t, name in tokens.items()]
        self._admins = {name.encode() for name in admins}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        user = self._user(scope)
        if user is not None:
            # Defense in depth: a client must not name itself; only the token does.
            headers = [(k, v) for k, v in scope.get("headers", ()) if k not in (USER_HEADER, ROLE_HEADER)]
            headers.append((USER_HEADER, user))
            if user in self._admins:
                headers.append((ROLE_HEADER, b"admin"))
            await self.app({**scope, "headers": headers}, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps(
            {"error": "unauthorized", "message": "send 'Authorization: Bearer <token>'; `sage serve` prints the token"}
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b'Bearer realm="sage"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    def _user(self, scope: Scope) -> bytes | None:
        values = [v for k, v in scope.get("headers", ()) if k == b"authorization"]
        if len(values) != 1:
            return None
        scheme, _, given = values[0].strip().partition(b" ")
        if scheme.lower() != b"bearer":
            return None
        given = given.strip()
        found = None
        # Constant-time compares, all of them, so timing leaks neither a
        # token's prefix nor which one matched.
        for token, name in self._tokens:
            if hmac.compare_digest(given, token):
                found = name
        return found


# The header the MCP tools read the caller's name from (tools.USER_HEADER).
USER_HEADER = b"x-sage-user"
ROLE_HEADER = b"x-sage-role"  # "admin" where the tokens file gives that role (tools.ROLE_HEADER)


def build_app(config: Config, tokens: dict[str, str], host: str, admins: frozenset[str] = frozenset()) -> ASGIApp:
    from sage_mcp.mcp.server import create_server

    server = create_server(config)
    return BearerAuth(server.streamable_http_app(streamable_http_path=MCP_PATH, host=host), tokens, admins)


def listen_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket. IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY
    on accepted connections only for sockets that say they are TCP; without
    it every small response waits for the client's delayed ACK (~40 ms per
    call on a keep-alive connection)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise InvalidInput(f"cannot listen on {host}:{port}: {exc.strerror}; choose another --port") from exc
    sock.listen(128)
    return sock


# Seconds a SIGTERM leaves requests in flight before cancelling them.
SHUTDOWN_GRACE_S = 5


def serve(
    config: Config,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    allow_remote: bool = False,
    token_file: str | Path | None = None,
    tokens_file: str | Path | None = None,
) -> None:
    """Bind, print how to connect on stderr, and serve until interrupted."""
    import uvicorn

    if not is_loopback(host) and not allow_remote:
        raise InvalidInput(
            f"--host {host} is reachable from other machines; pass --allow-remote to serve there "
            "(every request still needs the token), or keep the default 127.0.0.1"
        )
    if tokens_file:
        tokens, admins = load_token_file(Path(tokens_file))
        people = sorted(set(tokens.values()))
        who = f"tokens ({tokens_file}): {', '.join(people)}" + (f"; admin: {', '.join(sorted(admins))}" if admins else "")
        token = "<your token>"
        if len(people) > 1:
            config = config.replace(team=True)  # recorded in the memory when the engine opens
            who += "; team memory"
    else:
        token_path = Path(token_file) if token_file else default_token_path(config)
        token = load_or_create_token(token_path)
        tokens = {token: config.user}
        admins = frozenset({config.user})  # the one token stands for whoever started the server
        who = f"token ({token_path}, acts as {config.user}): {token}"
    # Bind before announcing, so whoever reads the URL can connect at once
    # (and --port 0 reports the port the OS chose).
    sock = listen_socket(host, port)
    bound = sock.getsockname()[1]
    url = f"http://{host if ':' not in host else f'[{host}]'}:{bound}{MCP_PATH}"
    print(
        f"sage serve: memory {Engine.redact(config.database)} (backend {config.backend})\n"
        f"listening on {url}\n"
        f"{who}\n"
        f'connect: claude mcp add --transport http sage {url} --header "Authorization: Bearer {token}"',
        file=sys.stderr,
        flush=True,
    )
    app = build_app(config, tokens, host, admins)
    # On SIGTERM, requests still running (a call waiting out an evaluation)
    # get this long before they are cancelled, their evaluations with them:
    # uvicorn's default waits for them however long they take.
    uv = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=SHUTDOWN_GRACE_S)
    )
    try:
        uv.run(sockets=[sock])
    finally:
        sock.close()
