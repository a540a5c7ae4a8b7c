"""SAGE's exception hierarchy.

Every error a caller can fix is a `SageError` whose message says what to fix.
Surfaces (MCP, LSP, CLI) convert these to their own error shapes at the
boundary; a failing candidate kernel is never an error, it is an `EvalResult`.
"""

from __future__ import annotations


class SageError(Exception):
    """Base class for every error SAGE raises on purpose. `kind` names the
    meaning on every surface (MCP error text, LSP error data, CLI message);
    `exit_code` is the CLI's."""

    kind = "error"
    exit_code = 1


class InvalidInput(SageError, ValueError):
    """An argument is malformed: empty, oversized, wrong scope, bad path."""

    kind, exit_code = "invalid_input", 2


class NotFound(SageError, LookupError):
    """An id (item, episode, attempt, task, consolidation) does not exist."""

    kind, exit_code = "not_found", 3


class Conflict(SageError):
    """The request is valid but the stored state does not allow it (a closed
    episode, a consolidation that was already reverted)."""

    kind, exit_code = "conflict", 4


class Forbidden(SageError):
    """The caller may not do this: the episode or attempt is another person's,
    or the change (a demoting budget, a revert, deleting another's item)
    needs the `admin` role a tokens file gives, or the CLI on the server's host."""

    kind, exit_code = "forbidden", 9


class BackendUnavailable(SageError):
    """The chosen evaluation backend cannot run on this machine; the message
    says how to set it up."""

    kind, exit_code = "backend_unavailable", 5


class StoreError(SageError):
    """The memory database is unusable (wrong schema version, not a SAGE db)
    or unreachable (the PostgreSQL server went away)."""

    kind, exit_code = "store_error", 6


class Busy(SageError):
    """Too many evaluations are already waiting for a worker: refused at once,
    with the queue's length and when to try again (back-pressure, not a hang)."""

    kind, exit_code = "busy", 8

    def __init__(self, message: str, retry_after_s: float):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Cancelled(SageError):
    """The caller cancelled an evaluation; its processes were killed and nothing was recorded."""

    kind, exit_code = "cancelled", 130


class LLMError(SageError):
    """The model provider failed (auth, bad request, network after retries).
    A run stops on it; the task it interrupted is resumed later."""

    kind, exit_code = "llm_error", 7
