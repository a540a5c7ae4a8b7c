"""Fixtures for the device and extra-environment backends.

The ascend-compile tests need the backend's virtualenv (~1.6 GB). They use the
env in the configured cache dir (SAGE_CACHE_DIR, else the user cache dir) and
skip when it is not set up, unless SAGE_SETUP_ASCEND=1 asks this session to
build it first (about a minute with PyPI reachable).
"""

from __future__ import annotations

import os
import sys
import time

import pytest

from sage_engine.config import Config
from sage_engine.evaluation.backends import venv

from backend_support import ascend_config


@pytest.fixture(scope="session")
def ascend_env(tmp_path_factory) -> Config:
    config = ascend_config(tmp_path_factory.mktemp("ascend"))
    if not venv.env_is_current("ascend-compile", config):
        if os.environ.get("SAGE_SETUP_ASCEND") != "1":
            pytest.skip(
                f"the ascend-compile virtualenv is not set up under {config.cache_dir}; run "
                "`sage backends setup ascend-compile` or set SAGE_SETUP_ASCEND=1"
            )
        start = time.monotonic()
        venv.ensure_backend_env("ascend-compile", config)
        print(f"ascend-compile env built in {time.monotonic() - start:.0f} s", file=sys.stderr)
    return config


@pytest.fixture(scope="session")
def ascend_backend(ascend_env: Config):
    from sage_engine.evaluation.backends.ascend_compile import AscendCompileBackend

    backend = AscendCompileBackend(ascend_env)
    yield backend
    backend.close()
