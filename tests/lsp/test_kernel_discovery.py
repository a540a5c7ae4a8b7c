"""Kernel discovery and the task-association convention (pure functions)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sage_engine.errors import InvalidInput
from sage_engine.kernels import (
    find_kernels,
    find_task,
    glob_match,
    header_insert_line,
    header_line,
    header_task,
    kernel_at,
    write_project_mapping,
)

TRITON_CANDIDATE = """# sage: task=softmax
import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[triton.Config({"BLOCK": 128})],
    key=["n"],
)
@triton.jit
def softmax_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pass


def helper(x):
    return x


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return x
"""

ASCEND_C = """#include "kernel_operator.h"
// sage: task=add
extern "C" __global__ __aicore__ void add_custom(GM_ADDR x, GM_ADDR y,
                                                 GM_ADDR z)
{
}

__aicore__ inline void helper() {}
"""


def test_triton_kernels_and_model_are_found_with_decorator_lines():
    found = find_kernels(TRITON_CANDIDATE)
    assert [(k.name, k.kind) for k in found] == [("softmax_kernel", "triton"), ("ModelNew", "model")]
    triton_kernel = found[0]
    assert TRITON_CANDIDATE.splitlines()[triton_kernel.start_line].startswith("@triton.autotune")
    assert TRITON_CANDIDATE.splitlines()[triton_kernel.line].startswith("def softmax_kernel")


def test_kernels_are_still_found_while_the_file_does_not_parse():
    broken = TRITON_CANDIDATE.replace("return x\n\n\nclass", "return (x\n\n\nclass")
    found = find_kernels(broken)
    assert [(k.name, k.kind) for k in found] == [("softmax_kernel", "triton"), ("ModelNew", "model")]


def test_plain_functions_and_other_decorators_are_not_kernels():
    source = "import functools\n\n@functools.cache\ndef f():\n    pass\n\nclass Model:\n    pass\n"
    assert find_kernels(source) == []


def test_ascend_c_entry_points_are_found_in_cpp_and_in_python_strings():
    found = find_kernels(ASCEND_C, "cpp")
    assert [(k.name, k.kind, k.start_line, k.line) for k in found] == [("add_custom", "ascend_c", 2, 2)]
    python = 'SRC = """\n' + ASCEND_C + '"""\nclass ModelNew:\n    pass\n'
    assert {k.name for k in find_kernels(python)} == {"add_custom", "ModelNew"}


def test_kernel_at_picks_the_enclosing_kernel():
    found = find_kernels(TRITON_CANDIDATE)
    assert kernel_at(found, 13).name == "softmax_kernel"
    assert kernel_at(found, 22).name == "ModelNew"
    assert kernel_at(found, 0) is None


def test_header_in_python_and_cpp_comment_syntax():
    assert header_task(TRITON_CANDIDATE) == ("softmax", 0)
    assert header_task(ASCEND_C) == ("add", 1)
    assert header_task("x = 1\n" * 30 + "# sage: task=late\n") is None


def test_header_names_a_path_relative_to_the_file(tmp_path: Path):
    ref = tmp_path / "refs" / "softmax.py"
    ref.parent.mkdir()
    ref.write_text("class Model: pass\n")
    cand = tmp_path / "kernels" / "mine.py"
    cand.parent.mkdir()
    link = find_task(cand, "# sage: task=../refs/softmax.py\nclass ModelNew: pass\n")
    assert link is not None and link.source == "header" and link.line == 0
    assert link.task == str(ref.resolve())


def test_project_file_maps_globs_first_match_wins(tmp_path: Path):
    (tmp_path / ".sage").mkdir()
    (tmp_path / ".sage" / "tasks.json").write_text(
        json.dumps(
            {
                "tasks": {
                    "kernels/gelu_*.py": "gelu",
                    "kernels/**/*.py": "silu",
                }
            }
        )
    )
    (tmp_path / "kernels" / "deep").mkdir(parents=True)
    gelu = tmp_path / "kernels" / "gelu_fast.py"
    deep = tmp_path / "kernels" / "deep" / "x.py"
    link = find_task(gelu, "class ModelNew: pass\n", stop_at=tmp_path)
    assert (link.task, link.source) == ("gelu", "project")
    assert find_task(deep, "class ModelNew: pass\n", stop_at=tmp_path).task == "silu"
    assert find_task(tmp_path / "other.py", "", stop_at=tmp_path) is None


def test_header_wins_over_project_file(tmp_path: Path):
    (tmp_path / ".sage").mkdir()
    (tmp_path / ".sage" / "tasks.json").write_text(json.dumps({"tasks": {"*.py": "gelu"}}))
    assert find_task(tmp_path / "a.py", "# sage: task=silu\n").task == "silu"


def test_a_malformed_project_file_says_what_it_should_look_like(tmp_path: Path):
    (tmp_path / ".sage").mkdir()
    (tmp_path / ".sage" / "tasks.json").write_text(json.dumps({"*.py": "gelu"}))
    with pytest.raises(InvalidInput, match='"tasks"'):
        find_task(tmp_path / "a.py", "")


def test_suite_layout_links_solutions_to_their_task_folder(tmp_path: Path):
    task = tmp_path / "softmax"
    (task / "solutions").mkdir(parents=True)
    (task / "reference.py").write_text("class Model: pass\n")
    link = find_task(task / "solutions" / "cpu_fast.py", "class ModelNew: pass\n")
    assert (link.task, link.source) == (str(task.resolve()), "layout")


def test_writing_a_mapping_keeps_other_entries_and_puts_the_exact_path_first(tmp_path: Path):
    (tmp_path / ".sage").mkdir()
    (tmp_path / ".sage" / "tasks.json").write_text(json.dumps({"tasks": {"*.py": "gelu"}}))
    write_project_mapping(tmp_path, "k/a.py", "silu")
    data = json.loads((tmp_path / ".sage" / "tasks.json").read_text())
    assert list(data["tasks"].items()) == [("k/a.py", "silu"), ("*.py", "gelu")]


def test_glob_star_stays_in_one_folder():
    assert glob_match("k/*.py", "k/a.py")
    assert not glob_match("k/*.py", "k/sub/a.py")
    assert glob_match("**/*.py", "a.py") and glob_match("**/*.py", "k/sub/a.py")


def test_header_goes_below_a_shebang_and_uses_the_language_comment():
    assert header_insert_line("#!/usr/bin/env python\n# -*- coding: utf-8 -*-\nx = 1\n") == 2
    assert header_insert_line("x = 1\n") == 0
    assert header_line("gelu", "cpp") == "// sage: task=gelu"
    with pytest.raises(InvalidInput):
        header_line("a\nb")
