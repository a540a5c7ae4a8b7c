"""Kernel evaluation: tasks, the sandboxed harness, correctness, timing,
anti-cheat checks and backends.

Names are imported lazily: the sandbox child imports the pure modules of this
package under interpreters that may lack pydantic.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Harness", "Task", "list_backends", "get_backend", "list_suite", "load_task", "task_summary"]

_LAZY = {
    "Harness": "sage_engine.evaluation.harness",
    "Task": "sage_engine.evaluation.tasks",
    "load_task": "sage_engine.evaluation.tasks",
    "list_suite": "sage_engine.evaluation.tasks",
    "task_summary": "sage_engine.evaluation.tasks",
    "get_backend": "sage_engine.evaluation.backends.base",
    "list_backends": "sage_engine.evaluation.backends.base",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'sage_engine.evaluation' has no attribute {name!r}")
