"""The interpreter's fidelity patches install once per module, however many
hooks ask: a second install would wrap its own wrappers."""

from __future__ import annotations

import types

import pytest

from sage_engine.evaluation.child.fidelity import once_per_module


def test_a_patch_installs_once_per_module_and_again_on_another():
    applied: list[str] = []

    @once_per_module
    def install(module: types.ModuleType) -> None:
        applied.append(module.__name__)

    first, second = types.ModuleType("first"), types.ModuleType("second")
    install(first)
    install(first)
    install(second)
    assert applied == ["first", "second"]


def test_two_patches_of_one_module_each_install():
    applied: list[str] = []

    @once_per_module
    def bf16(module: types.ModuleType) -> None:
        applied.append("bf16")

    @once_per_module
    def logic(module: types.ModuleType) -> None:
        applied.append("logic")

    module = types.ModuleType("interpreter")
    for install in (bf16, logic, bf16, logic):
        install(module)
    assert applied == ["bf16", "logic"]


def test_a_patch_that_failed_halfway_is_not_applied_over_its_own_half():
    calls = []

    @once_per_module
    def install(module: types.ModuleType) -> None:
        calls.append(1)
        raise RuntimeError("halfway")

    module = types.ModuleType("interpreter")
    with pytest.raises(RuntimeError):
        install(module)
    install(module)
    assert calls == [1]
