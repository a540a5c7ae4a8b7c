"""SAGE's exception hierarchy.

Every error a caller can fix is a `SageError` whose message says what to fix.
Surfaces (MCP, LSP, CLI) convert these to their own error shapes at the
boundary; a failing candidate kernel is never an error, it is an `EvalResult`.
"""

from __future__ import annotations


class SageError(Exception):
    """Base class for every error SAGE raises on purpose."""


class InvalidInput(SageError, ValueError):
    """An argument is malformed: empty, oversized, wrong scope, bad path."""


class NotFound(SageError, LookupError):
    """An id (item, episode, attempt, task, consolidation) does not exist."""


class Conflict(SageError):
    """The request is valid but the stored state does not allow it
    (adopting an item the episode never showed, closing a closed episode)."""


class BackendUnavailable(SageError):
    """The chosen evaluation backend cannot run on this machine; the message
    says how to set it up."""


class StoreError(SageError):
    """The memory database is unusable (wrong schema version, not a SAGE db)."""
