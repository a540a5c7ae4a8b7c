"""A real local Ray cluster for the executor tests: a head node and two
worker nodes labelled with the resource `NPU` (a scheduling label here, not
a device), started once for the module and stopped after it.

Ray reads its authentication settings when it is first imported, so they are
set here, before any test imports it: the cluster runs with token
authentication, as a team cluster should.
"""

from __future__ import annotations

import os
import secrets

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from tests.support.parts import require

LABEL = {"NPU": 1}  # a resource label the scheduler matches; no NPU is involved


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/ray/" in str(item.fspath):
            item.add_marker(pytest.mark.ray)


@pytest.fixture(scope="module")
def ray_cluster():
    try:
        import ray
    except ImportError:
        require("ray", "Ray is not installed (pip install 'sage-npu[ray]')")
    from tests.support.ray_cluster import start_cluster

    try:
        cluster = start_cluster()
    except RuntimeError as exc:
        require("ray", f"cannot start a local Ray cluster: {exc}")
    try:
        cluster.add_worker("a", LABEL)
        cluster.add_worker("b", LABEL)
        ray.init(address=cluster.address, namespace="sage", log_to_driver=False)
        cluster.wait_for_nodes()
        yield cluster
    finally:
        ray.shutdown()
        cluster.stop()
