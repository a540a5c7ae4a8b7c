"""Who may do what on a shared memory (docs/memory.md, "Threat model").

An episode, its attempts and their resources belong to the person who opened
it; destructive changes to what everyone sees need the `admin` role (a
tokens file's third column, or the CLI on the server's host). Whether the
memory is a team's is recorded in the memory itself, so every process on it
(servers, the CLI, the language server) decides the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from sage_engine.config import Config
from sage_engine.errors import Forbidden
from sage_engine.memory.store import Store

MODE_KEY = "mode"


@dataclass(frozen=True)
class Caller:
    """Who is asking: a name (an HTTP token's, or the OS user's) and whether
    they hold the admin role."""

    user: str | None
    admin: bool = False


def is_team(store: Store, config: Config) -> bool:
    """Team mode: the config says so, or the memory recorded it (`sage serve
    --tokens` naming two or more people; `sage memory mode`)."""
    return config.team or store.audit.meta(MODE_KEY) == "team"


def set_mode(store: Store, team: bool) -> None:
    store.audit.set_meta(MODE_KEY, "team" if team else "solo")


def check_owner(author: str | None, caller: Caller, what: str, hint: str) -> None:
    """Refuse another person's episode or attempt; rows recorded before
    owners were recorded (no author) stay open to everyone."""
    if author is None or caller.admin or author == caller.user:
        return
    raise Forbidden(f"{what} belongs to another person; {hint}")


def check_admin(caller: Caller, action: str) -> None:
    if not caller.admin:
        raise Forbidden(
            f"{action} changes what everyone on this memory sees: it needs the admin role "
            "(a third column `admin` in the server's tokens file) or the `sage` CLI on the server's host"
        )
