"""The base of every model (unknown fields are refused, so a typo is an
error), and the one progress callback every long call takes."""

from __future__ import annotations

from typing import Callable

from pydantic import BaseModel, ConfigDict

# progress(done, total or None, message): evaluations, consolidation, suite
# imports and checks report through it; the surfaces turn it into MCP
# progress notifications, LSP work-done progress or a progress bar.
ProgressCallback = Callable[[float, "float | None", str], None]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")
