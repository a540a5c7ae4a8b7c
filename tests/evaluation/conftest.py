"""Fixtures for the evaluation tests: a session cache and harnesses shared
per session so the warm worker starts once. Helpers are in support.py."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from sage_engine.evaluation.harness import Harness
from tests.evaluation.support import fast_config


@pytest.fixture(scope="session")
def eval_cache(tmp_path_factory) -> Path:
    """One cache for the session. Its C++ builds live in a folder kept across
    runs and shared by parallel test workers (SAGE_TEST_BUILD_CACHE, default
    under the temp dir): a build costs 20-30 s of CPU, and the cache is keyed
    by source and toolchain, so a kept build is exactly what SAGE would load."""
    cache = tmp_path_factory.mktemp("sage-eval-cache")
    builds = Path(os.environ.get("SAGE_TEST_BUILD_CACHE") or Path(tempfile.gettempdir()) / "sage-test-builds")
    builds.mkdir(parents=True, exist_ok=True)
    (cache / "torch_extensions").symlink_to(builds, target_is_directory=True)
    return cache


@pytest.fixture(scope="session")
def harness(eval_cache: Path):
    with Harness(fast_config(eval_cache)) as h:
        yield h
