"""Kernel evaluation: `harness.py` is the one way in; the folders are the
layers, each laid out by the process it runs in, lowest first (a module
imports only from its own layer or a lower one: `tests/test_layout.py`):

- `protocol/` (what crosses every pipe, and `wire.py`, its bytes) and
  `common/` (processes, cgroups, timing, diagnostics): shared by every process;
- `child/`: the reference and candidate processes (and backends' child routines);
- `worker/`: the sandboxed worker process that runs one evaluation at a
  time: its children, their limits, the correctness, timing and profile phases;
- `host/`: the process that asks (server, CLI, a Ray worker on an evaluation
  host): the worker pool, the sandbox, the timing turn, the build cache, and
  the host-side data (tasks, shape variants, static checks, results);
- `backends/`: what each backend (cpu, triton, ascend-compile, npu, cuda)
  asks of them;
- `cluster/`: evaluations on a Ray cluster's hosts.

Names are imported lazily: the worker and children import the pure modules
of this package under interpreters that may lack pydantic.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Harness", "Task", "list_backends", "get_backend", "list_suite", "load_task", "task_summary"]

_LAZY = {
    "Harness": "sage_engine.evaluation.harness",
    "Task": "sage_engine.evaluation.host.tasks",
    "load_task": "sage_engine.evaluation.host.tasks",
    "list_suite": "sage_engine.evaluation.host.tasks",
    "task_summary": "sage_engine.evaluation.host.tasks",
    "get_backend": "sage_engine.evaluation.backends.base",
    "list_backends": "sage_engine.evaluation.backends.base",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'sage_engine.evaluation' has no attribute {name!r}")
