"""Kernel evaluation, laid out by the process each part runs in:

- `host/`: the process that asks (server, CLI, a Ray worker on an evaluation
  host): the worker pool, the sandbox, the timing turn, the build cache;
- `worker/`: the sandboxed worker process that runs one evaluation at a
  time: its children, their limits, the correctness and timing phases;
- `child/`: the reference and candidate processes (and backends' child routines);
- `backends/`: what each backend (cpu, triton, ascend-compile, npu, cuda)
  asks of them; `harness.py`, `executor.py`, `ray_executor.py`: the entry points;
- shared by all: `protocol.py` (what crosses every pipe), `wire.py` (its
  bytes), `processes.py`, `cgroups.py`, `timing.py`, `diagnostics.py`;
  host-side data: `tasks.py`, `results.py`, `static_checks.py`.

Names are imported lazily: the worker and children import the pure modules
of this package under interpreters that may lack pydantic.
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
