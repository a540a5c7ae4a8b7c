"""How editors launch `sage-lsp`: the command of this environment and the
configuration neovim and helix read (`sage lsp config`).

The printed configuration names this installation's `sage-lsp` by its
absolute path, so the editor needs no activated virtualenv: with only
`"sage-lsp"`, an editor started outside the virtualenv cannot find it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Sequence

from sage_mcp.mcp.clients import server_args

EDITORS = ("neovim", "helix")
POLL_SECONDS = "3"  # helix and neovim cannot be asked to refresh lenses: the server checks the memory this often


def lsp_command(db: str | Path | None = None, backend: str | None = None) -> list[str]:
    """The absolute command that starts the language server from this
    environment, with a pinned database and backend when given."""
    script = Path(sys.executable).parent / ("sage-lsp.exe" if os.name == "nt" else "sage-lsp")
    base = [str(script)] if script.is_file() else [sys.executable, "-m", "sage_mcp.lsp"]
    return base + server_args(db, backend)


def editor_config(editor: str, command: Sequence[str]) -> str:
    if editor == "neovim":
        return neovim_config(command)
    if editor == "helix":
        return helix_config(command)
    raise ValueError(f"unknown editor {editor!r}; choose one of {', '.join(EDITORS)}")


def where(editor: str) -> str:
    """Where the printed configuration goes."""
    return {
        "neovim": "append to your init.lua (~/.config/nvim/init.lua)",
        "helix": "add to .helix/languages.toml in the project, or ~/.config/helix/languages.toml",
    }[editor]


def neovim_config(command: Sequence[str]) -> str:
    """One init.lua snippet for every neovim from 0.7: `vim.lsp.config`
    where it exists (0.11 on), else an autocmd that starts the client and
    attaches it only when it did start."""
    cmd = ", ".join(_lua(part) for part in command)
    return f"""\
-- sage-lsp for neovim 0.7 and later, printed by `sage lsp config --editor neovim`
local sage_cmd = {{ {cmd} }}
local function sage_on_attach(client, bufnr)
  -- Neovim draws lenses as end-of-line text and asks for them only when told:
  -- ask again where a result may have changed (a benchmark, a save, an agent).
  local group = vim.api.nvim_create_augroup("sage_lenses_" .. bufnr, {{ clear = true }})
  vim.api.nvim_create_autocmd({{ "BufEnter", "CursorHold", "InsertLeave", "BufWritePost" }}, {{
    group = group, buffer = bufnr, callback = function() vim.lsp.codelens.refresh({{ bufnr = bufnr }}) end,
  }})
  vim.keymap.set("n", "<leader>sl", vim.lsp.codelens.run, {{ buffer = bufnr, desc = "SAGE: run the lens on this line" }})
  vim.lsp.codelens.refresh({{ bufnr = bufnr }})
end
local sage_settings = {{ sage = {{ benchmarkOnSave = false }} }}
if vim.fn.executable(sage_cmd[1]) ~= 1 then
  vim.notify("SAGE: " .. sage_cmd[1] .. " is not there any more; run `sage lsp config --editor neovim` again",
    vim.log.levels.ERROR)
elseif vim.lsp.config then -- 0.11 and later
  vim.lsp.config("sage", {{
    cmd = sage_cmd,
    filetypes = {{ "python", "cpp", "c" }},
    root_markers = {{ ".sage", ".git" }}, -- the workspace: task paths must lie inside it
    settings = sage_settings,
    on_attach = sage_on_attach,
  }})
  vim.lsp.enable("sage")
else -- 0.7 to 0.10
  local sage = {{ name = "sage", cmd = sage_cmd, settings = sage_settings, on_attach = sage_on_attach }}
  local sage_client
  vim.api.nvim_create_autocmd("FileType", {{
    pattern = {{ "python", "cpp", "c" }},
    callback = function(args)
      sage.root_dir = vim.fn.getcwd() -- task paths must lie inside it (or SAGE_CANDIDATE_ROOTS)
      if vim.lsp.start then
        vim.lsp.start(sage)
        return
      end
      if not (sage_client and vim.lsp.get_client_by_id(sage_client)) then
        sage_client = vim.lsp.start_client(sage)
      end
      if sage_client then -- start_client returns nil when the server cannot start
        vim.lsp.buf_attach_client(args.buf, sage_client)
      else
        vim.notify_once("SAGE: cannot start " .. sage_cmd[1], vim.log.levels.ERROR)
      end
    end,
  }})
end
"""


def helix_config(command: Sequence[str]) -> str:
    program, *args = command
    args = [*args, "--poll-seconds", POLL_SECONDS]
    return f"""\
# sage-lsp for helix (23.10 and later), printed by `sage lsp config --editor helix`
[language-server.sage]
command = {_toml(program)}
args = [{", ".join(_toml(a) for a in args)}]
config = {{ benchmarkOnSave = false }}

# Listing language servers replaces helix's defaults for the language: keep yours in the list.
[[language]]
name = "python"
language-servers = ["pylsp", "sage"]

[[language]]
name = "cpp"
language-servers = ["clangd", "sage"]
"""


def _lua(text: str) -> str:
    # A Lua double-quoted string: JSON's escapes for quotes, backslashes and
    # \n \t are Lua's too; non-ASCII stays UTF-8 (Lua 5.1 has no \u escape).
    return json.dumps(text, ensure_ascii=False)


def _toml(text: str) -> str:
    # A TOML basic string: JSON's escapes, \uXXXX included, are TOML's.
    return json.dumps(text)
