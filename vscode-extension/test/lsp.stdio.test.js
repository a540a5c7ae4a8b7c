'use strict';
// The real `sage-lsp` over stdio, driven with vscode-languageserver-protocol
// (the library VS Code's language client is built on): initialize, open a
// document, get its code lenses. Python from $SAGE_PYTHON or ../.venv.
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { pathToFileURL } = require('node:url');
const { createProtocolConnection, StreamMessageReader, StreamMessageWriter } = require('vscode-languageserver-protocol/node');

const { ServerCommand } = require('../out/constants.js');
const { sagePython } = require('./support/python.js');

const KERNEL = `# sage: task=gelu
import torch
import triton
import triton.language as tl


@triton.jit
def gelu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pass


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return x
`;

let dir;
let proc;
let connection;
let initializeResult;
let stderr = '';

function open(name, text) {
    const file = path.join(dir, name);
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fs.writeFileSync(file, text);
    const uri = pathToFileURL(file).toString();
    connection.sendNotification('textDocument/didOpen', { textDocument: { uri, languageId: 'python', version: 1, text } });
    return uri;
}

before(async () => {
    dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'sage-lsp-')));
    proc = spawn(sagePython(), ['-m', 'sage_mcp.lsp', '--db', path.join(dir, 'memory.db'), '--poll-seconds', '0'], {
        cwd: dir,
        stdio: ['pipe', 'pipe', 'pipe'],
    });
    proc.stderr.on('data', (d) => (stderr += d.toString()));
    connection = createProtocolConnection(new StreamMessageReader(proc.stdout), new StreamMessageWriter(proc.stdin));
    connection.listen();
    initializeResult = await connection.sendRequest('initialize', {
        processId: process.pid,
        rootUri: pathToFileURL(dir).toString(),
        workspaceFolders: [{ uri: pathToFileURL(dir).toString(), name: 'ws' }],
        capabilities: { textDocument: { codeLens: {}, hover: { contentFormat: ['markdown'] } }, window: { workDoneProgress: true } },
    });
    await connection.sendNotification('initialized', {});
});

after(async () => {
    if (connection) {
        await connection.sendRequest('shutdown');
        const exited = new Promise((resolve) => proc.on('exit', resolve));
        await connection.sendNotification('exit');
        const code = await exited;
        connection.dispose();
        assert.equal(code, 0, `sage-lsp exited with ${code}:\n${stderr}`);
    }
    fs.rmSync(dir, { recursive: true, force: true });
});

test('the server offers every command the extension sends', () => {
    const offered = initializeResult.capabilities.executeCommandProvider.commands;
    for (const command of Object.values(ServerCommand)) {
        assert.ok(offered.includes(command), `${command} missing from ${offered}`);
    }
    assert.equal(initializeResult.serverInfo.name, 'sage-lsp');
    assert.ok(initializeResult.capabilities.codeLensProvider && initializeResult.capabilities.hoverProvider);
});

test('an opened kernel file gets a lens over each kernel that benchmarks it', async () => {
    const uri = open('kernels/gelu_fast.py', KERNEL);
    const lenses = await connection.sendRequest('textDocument/codeLens', { textDocument: { uri } });
    assert.deepEqual(
        lenses.map((l) => [l.range.start.line, l.command.title, l.command.command, l.command.arguments]),
        [
            [6, 'SAGE: benchmark vs gelu', 'sage.benchmark', [uri, 7]],
            [11, 'SAGE: benchmark vs gelu', 'sage.benchmark', [uri, 11]],
        ],
    );
    const last = await connection.sendRequest('workspace/executeCommand', { command: 'sage.lastResult', arguments: [uri] });
    assert.deepEqual([last.task, last.summary, last.result], ['gelu', 'not evaluated yet', null]);
});

test('a file without a task gets a "Set task…" lens', async () => {
    const uri = open('kernels/untracked.py', KERNEL.replace('# sage: task=gelu\n', ''));
    const lenses = await connection.sendRequest('textDocument/codeLens', { textDocument: { uri } });
    assert.deepEqual(lenses.map((l) => [l.command.title, l.command.command]), [['SAGE: Set task…', 'sage.setTask']]);
});

test('hover on a Triton kernel shows the SAGE panel in markdown', async () => {
    const uri = open('kernels/hover.py', KERNEL);
    const hover = await connection.sendRequest('textDocument/hover', { textDocument: { uri }, position: { line: 7, character: 6 } });
    assert.equal(hover.contents.kind, 'markdown');
    assert.match(hover.contents.value, /`gelu_kernel` \(Triton kernel\) · task `gelu`/);
    assert.match(hover.contents.value, /\*\*Resident rules\*\*/);
});

test('a bad argument comes back as a request error that says what to fix', async () => {
    await assert.rejects(
        connection.sendRequest('workspace/executeCommand', { command: 'sage.quarantine', arguments: ['seven'] }),
        /argument 1 \(item_id\) must be int, got str/,
    );
});
