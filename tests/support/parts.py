"""Real parts a test may need that a machine can lack (PostgreSQL,
bubblewrap, neovim, ...): a test without one is skipped with the reason,
unless SAGE_TEST_REQUIRE names that part (CI sets it): then it fails."""

from __future__ import annotations

import os

import pytest


def require(part: str, reason: str) -> None:
    """Skip for a missing real part, or fail where CI says it must be there."""
    required = {p.strip() for p in os.environ.get("SAGE_TEST_REQUIRE", "").split(",") if p.strip()}
    if part in required or "all" in required:
        pytest.fail(f"{part} is required here (SAGE_TEST_REQUIRE) but unavailable: {reason}")
    pytest.skip(reason)
