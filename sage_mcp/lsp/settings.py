"""Editor settings of `sage-lsp`, the same in every client.

A client passes them in any of the ways clients do: `initializationOptions`
at start, `workspace/didChangeConfiguration` later, or (when the client
supports it) answers to `workspace/configuration` for the section `sage`.
Each may hold the settings flat (`{"benchmarkOnSave": true}`) or under
`sage` (`{"sage": {"benchmarkOnSave": true}}`, VS Code's shape).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

SECTION = "sage"


@dataclass(frozen=True)
class EditorSettings:
    # Evaluate a candidate each time it is saved. Off by default: an
    # evaluation takes seconds of CPU (minutes on some backends), and a save is
    # not a request for one.
    benchmark_on_save: bool = False

    def updated(self, raw: Any) -> tuple["EditorSettings", list[str]]:
        """These settings with the known keys of `raw` applied, and a message
        for each value of the wrong type (that key keeps its old value)."""
        section = _section(raw)
        if section is None:
            return self, []
        problems = []
        value = section.get("benchmarkOnSave")
        out = self
        if value is not None:
            if isinstance(value, bool):
                out = replace(out, benchmark_on_save=value)
            else:
                problems.append(f"setting sage.benchmarkOnSave must be true or false, got {value!r}; "
                                f"keeping {str(self.benchmark_on_save).lower()}")
        return out, problems


def _section(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, dict):
        return None
    inner = raw.get(SECTION)
    return inner if isinstance(inner, dict) else raw
