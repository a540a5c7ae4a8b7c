"""Python source parsed from any thread.

CPython 3.11 counts how deep the AST it is building goes in state the whole
interpreter shares. When a thread switch lands inside one thread's parse (a
finalizer run by the garbage collector is enough) and another thread parses
meanwhile, the count one of them finds at its end is not the one it started
from, and `ast.parse` fails with "SystemError: AST constructor recursion
depth mismatch" on source that is fine. SAGE parses from threads (a suite
check with several jobs, the MCP and language servers evaluating side by
side), so every parse in the engine goes through here, one at a time; a parse
takes milliseconds, so nothing waits long.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse`, one thread at a time. Raises SyntaxError (and ValueError
    for a null byte) as `ast.parse` does."""
    with _LOCK:
        return ast.parse(source, filename=filename)


def literal_eval(node_or_text: str | ast.AST) -> Any:
    """`ast.literal_eval` (which parses a string it is given), one thread at a time."""
    with _LOCK:
        return ast.literal_eval(node_or_text)
