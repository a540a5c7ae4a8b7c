"""Every deliberately cheating candidate in cheats/ is caught."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.evaluation.support import CHEATS, fixture_task, held_to_cpu

CHEAT_FILES = sorted(CHEATS.glob("*.py"))
# The most a "no gain" cheat may be credited: a kernel as fast as the
# reference reads 0.8-1.2x on a loaded two-core machine.
NO_GAIN = 1.25


def _header(path: Path) -> tuple[str, str]:
    text = path.read_text()
    task = re.search(r"^task: (\S+)$", text, re.MULTILINE)
    expect = re.search(r"^expect: (rejected|incorrect|no gain)$", text, re.MULTILINE)
    assert task and expect, f"{path.name} must say 'task:' and 'expect:' in its docstring"
    return task.group(1), expect.group(1)


def test_the_cheat_folder_covers_the_known_tricks():
    assert len(CHEAT_FILES) >= 8


@pytest.mark.parametrize("path", CHEAT_FILES, ids=lambda p: p.stem)
def test_cheating_candidate_is_caught(harness, path: Path):
    task_id, expected = _header(path)
    result = harness.evaluate(fixture_task(task_id), path.read_text())
    # What timing measured comes with a failure: a cheat that escapes on a loaded machine says how.
    why = (result.status, result.message, result.speedup, result.compile_info.checks, result.phases)
    if expected == "no gain" and result.status == "correct":
        # Defeated without a verdict: credited about the reference's speed (it recomputes everything on new
        # inputs), within what two equally fast kernels read on a loaded machine.
        assert result.speedup is not None and result.speedup < NO_GAIN, why
        return
    if expected == "rejected" and held_to_cpu(result):
        return
    assert result.status == ("rejected" if expected == "no gain" else expected), why
    assert not result.correct and result.speedup is None
    if expected == "rejected":
        assert any(d.category == "cheat" for d in result.diagnostics), result.diagnostics
