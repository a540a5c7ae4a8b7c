"""Backend virtualenvs: built once, reused, rebuilt when the package set changes.

These use a recipe with no packages so they build a real venv in well under a
second; the ascend-compile recipe itself is exercised by test_ascend_compile.
"""

from __future__ import annotations

import json

import pytest

from sage_engine.config import Config
from sage_engine.errors import BackendUnavailable, InvalidInput
from sage_engine.evaluation.backends import venv


@pytest.fixture
def tiny(monkeypatch, tmp_path):
    monkeypatch.setitem(venv.RECIPES, "tiny", venv.Recipe(packages=(), probe="print('probe ok')"))
    return Config(db_path=tmp_path / "m.db", cache_dir=tmp_path / "cache")


def test_env_is_built_under_the_cache_dir_with_a_marker(tiny):
    logs: list[str] = []
    path = venv.ensure_backend_env("tiny", tiny, log=logs.append)
    assert path == tiny.cache_dir / "backends" / "tiny"
    assert venv.env_python(path).exists()
    marker = json.loads((path / venv.MARKER).read_text())
    assert marker["packages"] == [] and marker["backend"] == "tiny"
    assert venv.env_is_current("tiny", tiny)
    assert any("env ready" in line for line in logs)


def test_second_call_reuses_the_env_without_rebuilding(tiny):
    path = venv.ensure_backend_env("tiny", tiny, log=lambda _m: None)
    created = venv.read_marker(path)["created"]
    logs: list[str] = []
    again = venv.ensure_backend_env("tiny", tiny, log=logs.append)
    assert again == path
    assert venv.read_marker(path)["created"] == created and logs == []  # the same env: nothing run, nothing made


def test_changed_package_set_rebuilds_the_env(tiny):
    path = venv.ensure_backend_env("tiny", tiny, log=lambda _m: None)
    (path / "stale-file").write_text("from the old env")
    # An env built with another package list (an older SAGE's pins) is stale.
    marker = venv.read_marker(path)
    marker["packages"] = ["somepkg==1.0"]
    (path / venv.MARKER).write_text(json.dumps(marker))
    assert not venv.env_is_current("tiny", tiny)
    logs: list[str] = []
    venv.ensure_backend_env("tiny", tiny, log=logs.append)
    assert not (path / "stale-file").exists()
    assert venv.read_marker(path)["packages"] == []
    assert any("rebuilding" in line for line in logs)


def test_interrupted_setup_without_marker_is_not_current_and_gets_rebuilt(tiny):
    path = venv.env_dir("tiny", tiny)
    path.mkdir(parents=True)
    (path / "half-installed").write_text("")
    assert not venv.env_is_current("tiny", tiny)
    venv.ensure_backend_env("tiny", tiny, log=lambda _m: None)
    assert venv.env_is_current("tiny", tiny)
    assert not (path / "half-installed").exists()


def test_failing_probe_leaves_no_marker_and_says_what_failed(tiny, monkeypatch):
    monkeypatch.setitem(venv.RECIPES, "tiny", venv.Recipe(packages=(), probe="import module_that_is_not_there"))
    with pytest.raises(BackendUnavailable, match="module_that_is_not_there"):
        venv.ensure_backend_env("tiny", tiny, log=lambda _m: None)
    assert not venv.env_is_current("tiny", tiny)


def test_unknown_backend_env_is_refused():
    with pytest.raises(InvalidInput, match="no virtualenv recipe"):
        venv.env_dir("no-such-backend", Config())


def test_ascend_recipe_pins_a_cpu_torch_and_numpy_below_two():
    packages = venv.RECIPES["ascend-compile"].packages
    assert "torch==2.13.0" in packages
    assert "numpy<2" in packages
    assert any(p.startswith("triton-ascend==") for p in packages)
    assert any(p.startswith("ascendnpu-ir==") for p in packages)
