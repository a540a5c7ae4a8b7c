'use strict';
// activate() end to end: the `vscode` module is the stub, but the language
// client really spawns `python -m sage_mcp.lsp` (Python from $SAGE_PYTHON or
// ../.venv) and the benchmark command runs the real harness on a tiny task.
const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const vscode = require('vscode');
const { LanguageClient } = require('vscode-languageclient/node');
const extension = require('../out/extension.js');
const { sagePython } = require('./support/python.js');

const TASK = `import torch
import torch.nn as nn

batch_size = 8
dim = 256


class Model(nn.Module):
    def forward(self, x):
        return x * 2 + 1


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
`;

const CANDIDATE = `# sage: task=../double.py
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.add(x + x, 1)
`;

const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'sage-ext-')));
after(() => fs.rmSync(dir, { recursive: true, force: true }));

test('activate starts the real server and "Benchmark file" puts the speedup in the status bar', { timeout: 180_000 }, async () => {
    fs.writeFileSync(path.join(dir, 'double.py'), TASK);
    fs.mkdirSync(path.join(dir, 'kernels'));
    const file = path.join(dir, 'kernels', 'good.py');
    fs.writeFileSync(file, CANDIDATE);
    // The flow is under test, not the timing: keep the evaluation short.
    Object.assign(process.env, { SAGE_CORRECTNESS_TRIALS: '1', SAGE_TIMING_BUDGET_S: '0.05', SAGE_TIMING_MIN_REPS: '3',
        SAGE_CACHE_DIR: path.join(dir, '.cache') });

    const stub = vscode.__stub;
    stub.reset();
    LanguageClient.mode = 'stdio';
    stub.state.workspaceFolders = [{ uri: vscode.Uri.file(dir), name: 'ws' }];
    stub.state.configuration = { 'sage.pythonPath': sagePython(), 'sage.databasePath': '${workspaceFolder}/memory.db' };
    stub.state.activeTextEditor = { document: { uri: vscode.Uri.file(file), languageId: 'python' }, selection: { active: { line: 5 } } };
    const context = { extensionPath: path.join(__dirname, '..'), subscriptions: [] };
    try {
        await extension.activate(context);
        const client = LanguageClient.instances.at(-1);
        assert.ok(client.connection, `server did not start:\n${client.stderr}`);
        assert.equal(stub.state.statusBarItem.text, '$(beaker) SAGE');

        await vscode.commands.executeCommand('sage.benchmarkFile');
        assert.match(stub.state.statusBarItem.text, /^\$\(check\) SAGE \d+\.\d\dx$/, client.stderr);
        // The summary, then where the time went, as the real profile words it.
        assert.match(stub.state.statusBarItem.tooltip, /x vs reference · correct · cpu · just now\nWhere the time goes: (memory|compute|launch\/latency)-bound/);
        assert.ok(fs.existsSync(path.join(dir, 'memory.db')), 'the database setting reached the server');
        const diagnostics = client.notifications.filter((n) => n.method === 'textDocument/publishDiagnostics');
        assert.deepEqual(diagnostics.at(-1).params.diagnostics, []);

        await vscode.commands.executeCommand('sage.showMemory');
        assert.match(stub.state.panels.at(-1).webview.html, /No items yet/);

        await vscode.commands.executeCommand('sage.showProfile');
        assert.match(stub.state.panels.at(-1).webview.html, /<h2>Kernels \(cpu-ops\)<\/h2>/);
        assert.match(stub.state.panels.at(-1).webview.html, /share of measured bandwidth/);
    } finally {
        for (const d of context.subscriptions) d.dispose();
        await extension.deactivate();
    }
});
