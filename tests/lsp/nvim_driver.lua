-- Drives the real sage-lsp from a real headless neovim, configured by the
-- snippet from docs/editor.md (SAGE_NVIM_SNIPPET), as a user would: open a
-- candidate, read its lens, run it, watch lenses and diagnostics change,
-- hover, let the CLI store a result, set a task from the offered list.
-- Every wait is bounded (vim.wait); what was seen goes to SAGE_NVIM_OUT as
-- JSON, and neovim quits whatever happens.

local root = assert(os.getenv("SAGE_NVIM_ROOT"))
local out_path = assert(os.getenv("SAGE_NVIM_OUT"))
local bound = tonumber(os.getenv("SAGE_NVIM_BOUND_MS"))
local out = { version = vim.version(), steps = {} }

local function wait(what, ms, cond)
  if not vim.wait(ms, cond, 20) then
    error(string.format("timed out after %d ms waiting for %s", ms, what))
  end
  table.insert(out.steps, what)
end

local function clients(buf)
  if vim.lsp.get_clients then -- 0.10 and later
    return vim.lsp.get_clients({ bufnr = buf, name = "sage" })
  end
  return vim.tbl_values(vim.lsp.buf_get_clients(buf))
end

local function titles(buf)
  local found = {}
  for _, lens in ipairs(vim.lsp.codelens.get(buf)) do
    table.insert(found, lens.command and lens.command.title or "")
  end
  return found
end

local function title(buf)
  return titles(buf)[1] or ""
end

local function open(relative)
  vim.cmd("edit " .. vim.fn.fnameescape(root .. "/" .. relative))
  local buf = vim.api.nvim_get_current_buf()
  wait("attach to " .. relative, 30000, function() return #clients(buf) > 0 end)
  wait("a lens on " .. relative, 30000, function() return #titles(buf) > 0 end)
  return buf
end

local function run_lens(buf)
  local lens = vim.lsp.codelens.get(buf)[1]
  vim.api.nvim_win_set_cursor(0, { lens.range.start.line + 1, 0 })
  vim.lsp.codelens.run()
end

-- The user's answer to the task list: whatever neovim uses to ask
-- (inputlist in 0.7, vim.ui.select in 0.11), pick the softmax task.
local function pick(label)
  return label:find("^softmax · ") ~= nil
end
vim.fn.inputlist = function(lines)
  out.picker = { prompt = lines[1], first = lines[3] }
  for _, line in ipairs(lines) do
    local n, label = line:match("^(%d+)%. (.*)$")
    if n and pick(label) then return tonumber(n) end
  end
  return 0
end
vim.ui.select = function(items, opts, on_choice)
  local labels = vim.tbl_map(opts.format_item or tostring, items)
  out.picker = { prompt = opts.prompt, first = labels[1] }
  for i, label in ipairs(labels) do
    if pick(label) then return on_choice(items[i], i) end
  end
  on_choice(nil, nil)
end

local function scenario()
  dofile(assert(os.getenv("SAGE_NVIM_SNIPPET")))

  -- A correct kernel: the lens offers a benchmark; running it updates the lens.
  local good = open("kernels/good.py")
  out.good_lens_before = title(good)
  run_lens(good)
  wait("the lens to show the benchmark", bound, function() return title(good):find("x vs reference · correct", 1, true) end)
  out.good_lens_after = title(good)

  -- Hover over class ModelNew: the last result and the rules for the task.
  local params = { textDocument = { uri = vim.uri_from_bufnr(good) }, position = { line = 5, character = 8 } }
  for _, response in pairs(vim.lsp.buf_request_sync(good, "textDocument/hover", params, 10000) or {}) do
    if response.result then out.hover = response.result.contents.value end
  end

  -- A failing kernel: a diagnostic that quotes the lens, whole text beside it.
  local wrong = open("kernels/wrong.py")
  run_lens(wrong)
  wait("a diagnostic on the failing kernel", bound, function() return #vim.diagnostic.get(wrong) > 0 end)
  wait("the lens to show the failure", bound, function() return title(wrong):find("SAGE: incorrect", 1, true) end)
  local d = vim.diagnostic.get(wrong)[1]
  local lsp = d.user_data and d.user_data.lsp or {}
  out.wrong = {
    lens = title(wrong), message = d.message, line = d.lnum, source = d.source,
    related = lsp.relatedInformation and lsp.relatedInformation[1] and lsp.relatedInformation[1].message,
  }

  -- The CLI stores a result in the same memory: the next lens request shows it
  -- (neovim cannot be asked to refresh lenses).
  local other = open("kernels/other.py")
  out.other_lens_before = title(other)
  vim.fn.system({ os.getenv("SAGE_NVIM_SAGE") or "sage", "bench", root .. "/kernels/other.py", "--task", root .. "/double.py" })
  out.cli_exit = vim.v.shell_error
  vim.cmd("doautocmd CursorHold")
  wait("the lens to show the CLI's result", 30000, function()
    return title(other):find("x vs reference · correct", 1, true)
  end)
  out.other_lens_after = title(other)

  -- No task yet: "Set task…" offers the list, the pick lands in the buffer.
  local untracked = open("kernels/softmax_try.py")
  out.untracked_lens = title(untracked)
  run_lens(untracked)
  wait("the task header in the buffer", 30000, function()
    return vim.api.nvim_buf_get_lines(untracked, 0, 1, false)[1] == "# sage: task=softmax"
  end)
  vim.cmd("doautocmd CursorHold")
  wait("the lens to name the task", 30000, function() return title(untracked) == "SAGE: benchmark vs softmax" end)
  out.untracked_lens_after = title(untracked)
end

local ok, err = xpcall(scenario, debug.traceback)
if not ok then
  out.error = err
end
local file = assert(io.open(out_path, "w"))
file:write(vim.fn.json_encode(out))
file:close()
vim.cmd("qa!")
