'use strict';
// activate() and the commands against the hand-written `vscode` stub and a
// scripted language client (see support/). Run with `npm test`.
const { test, beforeEach, afterEach } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');

const vscode = require('vscode');
const { LanguageClient } = require('vscode-languageclient/node');
const extension = require('../out/extension.js');

const ROOT = path.join(__dirname, '..');
const pkg = require('../package.json');
const stub = vscode.__stub;

const CORRECT = {
    uri: 'file:///ws/kernels/k.py',
    task: 'gelu',
    summary: '2.31x vs reference · correct · cpu · just now',
    stale: false,
    result: { status: 'correct', correct: true, speedup: 2.314, backend: 'cpu', task: 'gelu' },
};

let context;
let responses;

function editor(fsPath = '/ws/kernels/k.py', line = 12) {
    return { document: { uri: vscode.Uri.file(fsPath), languageId: 'python' }, selection: { active: { line, character: 0 } } };
}

function serverCommands() {
    return LanguageClient.instances.at(-1).requests
        .filter((r) => r.method === 'workspace/executeCommand')
        .map((r) => [r.params.command, r.params.arguments]);
}

async function activate() {
    context = { extensionPath: ROOT, subscriptions: [] };
    await extension.activate(context);
}

beforeEach(() => {
    stub.reset();
    LanguageClient.instances.length = 0;
    LanguageClient.mode = 'scripted';
    LanguageClient.failStart = undefined;
    responses = { 'sage.lastResult': null };
    LanguageClient.respond = async (method, params) => {
        assert.equal(method, 'workspace/executeCommand');
        const answer = responses[params.command];
        if (answer instanceof Error) throw answer;
        return typeof answer === 'function' ? answer(params.arguments) : answer;
    };
    stub.state.workspaceFolders = [{ uri: vscode.Uri.file('/ws'), name: 'ws' }];
    stub.state.configuration = {
        'sage.pythonPath': '/opt/venv/bin/python',
        'sage.databasePath': '${workspaceFolder}/.sage/memory.db',
        'sage.backend': 'triton',
        'sage.chip': '',
    };
});

afterEach(async () => {
    for (const d of context?.subscriptions ?? []) d.dispose();
    await extension.deactivate();
});

test('activation registers every palette command in package.json and nothing else', async () => {
    await activate();
    const declared = pkg.contributes.commands.map((c) => c.command).sort();
    assert.deepEqual([...stub.registeredCommands.keys()].sort(), declared);
    assert.equal(declared.length, 10);
});

test('the language server runs the configured interpreter with the module named in package.json', async () => {
    await activate();
    const client = LanguageClient.instances.at(-1);
    assert.ok(client.started);
    assert.equal(client.serverOptions.command, '/opt/venv/bin/python');
    assert.deepEqual(client.serverOptions.args, ['-m', pkg.serverInfo.module]);
    assert.equal(client.serverOptions.options.env.SAGE_DB, '/ws/.sage/memory.db');
    assert.equal(client.serverOptions.options.env.SAGE_BACKEND, 'triton');
    assert.equal(client.serverOptions.options.env.SAGE_CHIP, undefined);
    assert.equal(client.serverOptions.options.cwd, '/ws');
    const languages = client.clientOptions.documentSelector.map((s) => s.language);
    assert.ok(languages.includes('python') && languages.includes('cpp'));
});

test('the MCP server definition runs sage_mcp.mcp on the same database', async () => {
    stub.state.configuration['sage.chip'] = 'Ascend910B4';
    await activate();
    const [contributed] = pkg.contributes.mcpServerDefinitionProviders;
    const provider = stub.state.mcpProviders.get(contributed.id);
    assert.ok(provider, `provider ${contributed.id} registered`);
    const [definition] = await provider.provideMcpServerDefinitions({});
    assert.ok(definition instanceof vscode.McpStdioServerDefinition);
    assert.equal(definition.command, '/opt/venv/bin/python');
    assert.deepEqual(definition.args, ['-m', 'sage_mcp.mcp']);
    assert.deepEqual(definition.env, { SAGE_DB: '/ws/.sage/memory.db', SAGE_BACKEND: 'triton', SAGE_CHIP: 'Ascend910B4' });
    assert.equal(definition.version, pkg.version);
});

test('benchmark file sends sage.benchmark for the active document and shows the result in the status bar', async () => {
    stub.setActiveEditor(editor());
    await activate();
    responses['sage.benchmark'] = CORRECT;
    await vscode.commands.executeCommand('sage.benchmarkFile');
    assert.deepEqual(serverCommands().at(-1), ['sage.benchmark', ['file:///ws/kernels/k.py']]);
    assert.equal(stub.state.statusBarItem.text, '$(check) SAGE 2.31x');
    assert.equal(stub.state.statusBarItem.tooltip, CORRECT.summary);
    assert.equal(stub.state.statusBarItem.command, 'sage.benchmarkFile');
});

test('while a benchmark runs the status bar says so, and its click cancels it on the server', async () => {
    stub.setActiveEditor(editor());
    await activate();
    let finish;
    responses['sage.benchmark'] = () => new Promise((resolve) => (finish = resolve));
    responses['sage.cancelBenchmark'] = { cancelled: true, attempt_id: 7, message: 'cancelling the benchmark of k.py' };
    const running = vscode.commands.executeCommand('sage.benchmarkFile');
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(stub.state.statusBarItem.text, '$(sync~spin) SAGE: benchmarking…');
    assert.equal(stub.state.statusBarItem.command, 'sage.cancelBenchmarkFile');
    responses['sage.lastResult'] = { ...CORRECT, result: null, running: true };
    await vscode.commands.executeCommand(stub.state.statusBarItem.command);
    assert.deepEqual(serverCommands().find((c) => c[0] === 'sage.cancelBenchmark'), ['sage.cancelBenchmark', ['file:///ws/kernels/k.py']]);
    const told = stub.calls.filter((c) => c.name === 'window.showInformationMessage').map((c) => c.args[0]);
    assert.deepEqual(told, ['SAGE: cancelling the benchmark of k.py']);
    finish(CORRECT);
    await running;
    assert.equal(stub.state.statusBarItem.text, '$(check) SAGE 2.31x');
    assert.equal(stub.state.statusBarItem.command, 'sage.benchmarkFile');
});

test('a window opened while an evaluation runs shows it running (after a reload)', async () => {
    stub.setActiveEditor(editor());
    responses['sage.lastResult'] = { ...CORRECT, result: null, running: true };
    await activate();
    assert.equal(stub.state.statusBarItem.text, '$(sync~spin) SAGE: benchmarking…');
    assert.equal(stub.state.statusBarItem.command, 'sage.cancelBenchmarkFile');
});

test('the server is started detached, so a reload or restart does not kill an evaluation in flight', async () => {
    await activate();
    assert.equal(LanguageClient.instances.at(-1).serverOptions.options.detached, true);
});

test('benchmark kernel under cursor passes the cursor line', async () => {
    stub.setActiveEditor(editor('/ws/kernels/k.py', 7));
    await activate();
    responses['sage.benchmark'] = { ...CORRECT, result: { ...CORRECT.result, status: 'incorrect', correct: false } };
    await vscode.commands.executeCommand('sage.benchmarkKernel');
    assert.deepEqual(serverCommands().at(-1), ['sage.benchmark', ['file:///ws/kernels/k.py', 7]]);
    assert.equal(stub.state.statusBarItem.text, '$(error) SAGE incorrect');
});

test('a server error becomes an error message, not an exception', async () => {
    stub.setActiveEditor(editor());
    await activate();
    responses['sage.benchmark'] = new Error("no task set for k.py: add '# sage: task=<task id or path>'");
    await vscode.commands.executeCommand('sage.benchmarkFile');
    const shown = stub.calls.filter((c) => c.name === 'window.showErrorMessage').map((c) => c.args[0]);
    assert.deepEqual(shown, ["SAGE: no task set for k.py: add '# sage: task=<task id or path>'"]);
});

test('the status bar follows the active editor with its last result', async () => {
    await activate();
    responses['sage.lastResult'] = (args) => ({ ...CORRECT, uri: args[0], stale: true });
    stub.setActiveEditor(editor('/ws/other.py'));
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(serverCommands().at(-1), ['sage.lastResult', ['file:///ws/other.py']]);
    assert.equal(stub.state.statusBarItem.text, '$(check) SAGE 2.31x $(history)');
});

test('a lens click on "Set task…" asks for the task, then sets it', async () => {
    await activate();
    responses['sage.listTasks'] = [{ id: 'gelu', name: 'GELU', operator: 'gelu', level: 1 }];
    responses['sage.setTask'] = (args) => ({ uri: args[0], task: args[1], via: 'header' });
    stub.state.quickPickAnswers.push((items) => items.find((i) => i.id === 'gelu'));
    const middleware = LanguageClient.instances.at(-1).clientOptions.middleware;
    const next = () => assert.fail('the server must not get sage.setTask without a task');
    const out = await middleware.executeCommand('sage.setTask', ['file:///ws/k.py'], next);
    assert.deepEqual(out, { uri: 'file:///ws/k.py', task: 'gelu', via: 'header' });
    const sent = serverCommands().filter((c) => c[0] !== 'sage.lastResult');
    assert.deepEqual(sent, [['sage.listTasks', []], ['sage.setTask', ['file:///ws/k.py', 'gelu']]]);
});

test('a lens click on a result re-runs the benchmark and updates the status bar', async () => {
    await activate();
    const middleware = LanguageClient.instances.at(-1).clientOptions.middleware;
    const out = await middleware.executeCommand('sage.benchmark', ['file:///ws/k.py', 3], async (command, args) => {
        assert.deepEqual([command, args], ['sage.benchmark', ['file:///ws/k.py', 3]]);
        return CORRECT;
    });
    assert.equal(out, CORRECT);
    assert.equal(stub.state.statusBarItem.text, '$(check) SAGE 2.31x');
});

test('show memory renders a webview; quarantine and confirmed delete go to the server and re-render', async () => {
    await activate();
    const item = (id, title, status = 'active', kind = 'experience') => ({
        id, kind, status, title, content: 'c', scope: 'global', tags: [], utility: 0.25, n_retrieved: 4, n_adopted: 2,
        n_credited: 2, adoption_rate: 0.5, operators_adopted: ['gelu'], derived_from: [], tokens: 12, created_at: 0, updated_at: 0,
    });
    let items = [item(1, 'Tile rows to fit UB'), item(2, 'Prefer vector ops')];
    responses['sage.memory'] = () => ({ rules: [item(9, 'Resident: fuse elementwise', 'resident', 'rule')], items });
    responses['sage.quarantine'] = (args) => {
        items = items.filter((i) => i.id !== args[0]);
        return { id: args[0], status: 'quarantined' };
    };
    responses['sage.delete'] = (args) => {
        items = items.filter((i) => i.id !== args[0]);
        return { id: args[0], status: 'deleted' };
    };
    await vscode.commands.executeCommand('sage.showMemory');
    const [panel] = stub.state.panels;
    assert.match(panel.webview.html, /Tile rows to fit UB/);
    assert.match(panel.webview.html, /Resident: fuse elementwise/);

    await panel.webview.simulateMessage({ command: 'quarantine', id: 1 });
    assert.deepEqual(serverCommands().filter((c) => c[0] === 'sage.quarantine'), [['sage.quarantine', [1]]]);
    assert.doesNotMatch(panel.webview.html, /Tile rows to fit UB/);

    stub.state.warningAnswers.push(undefined); // the user cancels
    await panel.webview.simulateMessage({ command: 'delete', id: 2 });
    assert.equal(serverCommands().filter((c) => c[0] === 'sage.delete').length, 0);
    stub.state.warningAnswers.push('Delete');
    await panel.webview.simulateMessage({ command: 'delete', id: 2 });
    assert.deepEqual(serverCommands().filter((c) => c[0] === 'sage.delete'), [['sage.delete', [2]]]);
    assert.doesNotMatch(panel.webview.html, /Prefer vector ops/);
    assert.equal(stub.state.panels.length, 1, 'the memory view is reused, not stacked');
});

test('record adoption offers what retrieval showed and sends the picked ids and lesson', async () => {
    stub.setActiveEditor(editor());
    await activate();
    await vscode.commands.executeCommand('sage.adopt');
    assert.match(stub.calls.find((c) => c.name === 'window.showErrorMessage').args[0], /Retrieve rules for this task/);

    const scored = (id, title) => ({ id, kind: 'experience', title, content: 'c', tags: [], utility: 0.1, n_adopted: 0,
        adoption_rate: 0, similarity: 0.5, exploration: 0, score: 0.6, rank: 1 });
    responses['sage.retrieveRules'] = { uri: 'file:///ws/kernels/k.py', task: 'gelu',
        retrieval: { episode_id: 5, resident_rules: [scored(1, 'Rule one')], items: [scored(2, 'Item two')], filtered_out: {}, tokens: 80 } };
    await vscode.commands.executeCommand('sage.showRules');
    const rulesPanel = stub.state.panels.at(-1);
    assert.equal(rulesPanel.viewType, 'sage.rules');
    assert.match(rulesPanel.webview.html, /Rules for gelu/);

    responses['sage.recordAdoption'] = { episode_id: 5, reward: 0.4, updates: [{}, {}], closed: true };
    responses['sage.lastResult'] = { ...CORRECT, result: { ...CORRECT.result, episode_id: 5 } };
    stub.state.quickPickAnswers.push((items) => items.filter((i) => i.id === 2));
    stub.state.inputBoxAnswers.push('Use a 1-D grid');
    await vscode.commands.executeCommand('sage.adopt');
    assert.deepEqual(serverCommands().at(-1), ['sage.recordAdoption',
        ['file:///ws/kernels/k.py', [2], 5, { title: 'Use a 1-D grid', content: 'Use a 1-D grid' }]]);
    assert.match(stub.calls.filter((c) => c.name === 'window.showInformationMessage').at(-1).args[0], /reward 0.40, 2 utilities updated/);

    // An episode with no evaluation closes without credit, and says so rather than "reward pending".
    await vscode.commands.executeCommand('sage.showRules');
    responses['sage.recordAdoption'] = { episode_id: 5, reward: null, updates: [], closed: true, credited: false };
    responses['sage.lastResult'] = null;
    stub.state.warningAnswers.push('Record without credit');
    stub.state.quickPickAnswers.push((items) => items.filter((i) => i.id === 2));
    stub.state.inputBoxAnswers.push('');
    await vscode.commands.executeCommand('sage.adopt');
    const told = stub.calls.filter((c) => c.name === 'window.showInformationMessage').at(-1).args[0];
    assert.match(told, /episode 5 closed without credit: no kernel was evaluated in it/);
    assert.doesNotMatch(told, /pending/);
});

test('changing the database setting restarts the server and tells VS Code the MCP definition changed', async () => {
    await activate();
    const first = LanguageClient.instances.at(-1);
    stub.state.configuration['sage.databasePath'] = '/data/team.db';
    stub.changeConfiguration(['sage.databasePath']);
    await new Promise((resolve) => setImmediate(resolve));
    await new Promise((resolve) => setImmediate(resolve));
    const second = LanguageClient.instances.at(-1);
    assert.notEqual(first, second);
    assert.ok(first.stopped && second.started);
    assert.equal(second.serverOptions.options.env.SAGE_DB, '/data/team.db');
    const provider = stub.state.mcpProviders.get('sage.mcp');
    const [definition] = await provider.provideMcpServerDefinitions({});
    assert.equal(definition.env.SAGE_DB, '/data/team.db');
});

test('benchmark on save is off by default and reaches the server at start and on change, without a restart', async () => {
    assert.equal(pkg.contributes.configuration.properties['sage.benchmarkOnSave'].default, false);
    await activate();
    const client = LanguageClient.instances.at(-1);
    assert.deepEqual(client.clientOptions.initializationOptions, { benchmarkOnSave: false });
    stub.state.configuration['sage.benchmarkOnSave'] = true;
    stub.changeConfiguration(['sage.benchmarkOnSave']);
    assert.equal(LanguageClient.instances.length, 1, 'no restart');
    assert.deepEqual(client.sent, [{ method: 'workspace/didChangeConfiguration', params: { settings: { sage: { benchmarkOnSave: true } } } }]);
});

test('restart server stops the running client and starts a new one', async () => {
    await activate();
    const first = LanguageClient.instances.at(-1);
    await vscode.commands.executeCommand('sage.restartServer');
    assert.ok(first.stopped);
    assert.equal(LanguageClient.instances.length, 2);
});

test('a server that fails to start leaves the extension active with a clear message', async () => {
    LanguageClient.failStart = 'spawn /opt/venv/bin/python ENOENT';
    stub.setActiveEditor(editor());
    await activate();
    await vscode.commands.executeCommand('sage.benchmarkFile');
    const shown = stub.calls.filter((c) => c.name === 'window.showErrorMessage').map((c) => c.args[0]);
    assert.match(shown[0], /language server \(\/opt\/venv\/bin\/python -m sage_mcp.lsp\) did not start:\n.*ENOENT/);
    assert.match(shown[1], /language server is not running.*Restart server/);
    // The status bar says the server is down, not "no evaluation yet", and a click restarts it.
    assert.equal(stub.state.statusBarItem.text, '$(debug-disconnect) SAGE: server not running');
    assert.equal(stub.state.statusBarItem.command, 'sage.restartServer');
    assert.match(stub.state.statusBarItem.tooltip, /ENOENT/);
});

test('a correct kernel slower than the reference gets no check mark', async () => {
    stub.setActiveEditor(editor());
    await activate();
    responses['sage.benchmark'] = { ...CORRECT, result: { ...CORRECT.result, speedup: 0.48 } };
    await vscode.commands.executeCommand('sage.benchmarkFile');
    assert.equal(stub.state.statusBarItem.text, '$(arrow-down) SAGE 0.48x');
});

test('focusing a panel or the Output view keeps the kernel file\'s result in the status bar and asks nothing about them', async () => {
    stub.setActiveEditor(editor());
    responses['sage.lastResult'] = (args) => ({ ...CORRECT, uri: args[0] });
    await activate();
    assert.equal(stub.state.statusBarItem.text, '$(check) SAGE 2.31x');
    const asked = serverCommands().length;
    stub.setActiveEditor(undefined); // a webview panel took focus
    stub.setActiveEditor({ document: { uri: new vscode.Uri('output', 'extension-output-sage-npu.sage-kernels-#1-SAGE'), languageId: 'log' } });
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(serverCommands().length, asked, 'no request for a non-file document');
    assert.equal(stub.state.statusBarItem.text, '$(check) SAGE 2.31x');
});

test('the status bar is read again whenever the active file\'s lenses are, so it always shows the lens\'s evaluation', async () => {
    stub.setActiveEditor(editor());
    await activate();
    responses['sage.lastResult'] = (args) => ({ ...CORRECT, uri: args[0], stale: true });
    const middleware = LanguageClient.instances.at(-1).clientOptions.middleware;
    const document = stub.state.activeTextEditor.document;
    const lenses = await middleware.provideCodeLenses(document, {}, async () => ['lens']);
    assert.deepEqual(lenses, ['lens']);
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(stub.state.statusBarItem.text, '$(check) SAGE 2.31x $(history)');
    // Lenses of a file in another editor leave the status bar alone.
    const asked = serverCommands().length;
    await middleware.provideCodeLenses({ uri: vscode.Uri.file('/ws/other.py') }, {}, async () => []);
    assert.equal(serverCommands().length, asked);
});

test('a setting event that changes no value restarts nothing; a real change says so', async () => {
    await activate();
    stub.changeConfiguration(['sage.databasePath', 'sage.pythonPath']);
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(LanguageClient.instances.length, 1, 'no restart when the values did not move');
    stub.state.configuration['sage.databasePath'] = '/data/team.db';
    stub.changeConfiguration(['sage.databasePath']);
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(LanguageClient.instances.length, 2);
    const told = stub.calls.filter((c) => c.name === 'window.showInformationMessage').map((c) => c.args[0]);
    assert.deepEqual(told, ['SAGE: restarting the language server: sage.databasePath changed.']);
});

test('the task picker lists the task the file is named after first', async () => {
    stub.setActiveEditor(editor('/ws/kernels/softmax_fast.py'));
    await activate();
    responses['sage.listTasks'] = ['conv2d', 'gelu', 'log_softmax', 'softmax'].map((id) => ({ id, name: id, level: 1 }));
    let offered;
    stub.state.quickPickAnswers.push((items) => {
        offered = items.map((i) => i.id);
        return undefined;
    });
    await vscode.commands.executeCommand('sage.pickTask');
    assert.deepEqual(offered, ['softmax', 'conv2d', 'gelu', 'log_softmax', '']);
});

test('record adoption after a benchmark outside the episode offers to benchmark inside it, then refreshes the memory view', async () => {
    stub.setActiveEditor(editor());
    await activate();
    responses['sage.memory'] = { rules: [], items: [] };
    await vscode.commands.executeCommand('sage.showMemory');
    const scored = (id, title) => ({ id, kind: 'experience', title, content: 'c', tags: [], utility: 0.1, n_adopted: 0,
        adoption_rate: 0, similarity: 0.5, exploration: 0, score: 0.6, rank: 1 });
    responses['sage.retrieveRules'] = { uri: 'file:///ws/kernels/k.py', task: 'gelu',
        retrieval: { episode_id: 7, resident_rules: [], items: [scored(3, 'Item three')], filtered_out: {}, tokens: 40 } };
    await vscode.commands.executeCommand('sage.showRules');
    // The file's last benchmark ran before the retrieval: in no episode.
    responses['sage.lastResult'] = { ...CORRECT, result: { ...CORRECT.result, episode_id: null } };
    responses['sage.benchmark'] = { ...CORRECT, result: { ...CORRECT.result, episode_id: 7 } };
    responses['sage.recordAdoption'] = { episode_id: 7, reward: 0.3, updates: [{}], closed: true, credited: true };
    stub.state.warningAnswers.push('Benchmark, then record');
    stub.state.quickPickAnswers.push((items) => items);
    stub.state.inputBoxAnswers.push('');
    await vscode.commands.executeCommand('sage.adopt');
    const warned = stub.calls.filter((c) => c.name === 'window.showWarningMessage').at(-1).args[0];
    assert.match(warned, /last benchmark ran before the rules were retrieved, outside episode 7/);
    const sent = serverCommands().map((c) => c[0]);
    assert.deepEqual(sent.slice(-4), ['sage.lastResult', 'sage.benchmark', 'sage.recordAdoption', 'sage.memory']);
    assert.equal(sent.filter((c) => c === 'sage.memory').length, 2, 'the open memory view was re-rendered');
});

test('SAGE\'s panels open as tabs of one group, not each in a new column', async () => {
    stub.setActiveEditor(editor());
    await activate();
    responses['sage.memory'] = { rules: [], items: [] };
    responses['sage.lastResult'] = CORRECT;
    await vscode.commands.executeCommand('sage.showMemory');
    await vscode.commands.executeCommand('sage.showProfile');
    const columns = stub.calls.filter((c) => c.name === 'window.createWebviewPanel').map((c) => c.args[2]);
    assert.deepEqual(columns, [vscode.ViewColumn.Beside, 2]);
});

test('show where the time goes asks the server for the file\'s last result and renders its profile in one panel', async () => {
    stub.setActiveEditor(editor());
    await activate();
    const profile = { source: 'cpu-ops', bytes: 1024, reference: null, candidate: null, bound: 'latency',
        summary: 'launch/latency-bound: tiny', notes: [] };
    responses['sage.lastResult'] = { ...CORRECT, result: { ...CORRECT.result, profile } };
    responses['sage.roofline'] = '<svg xmlns="http://www.w3.org/2000/svg" class="roofline"><circle class="point reference"/></svg>';
    await vscode.commands.executeCommand('sage.showProfile');
    assert.deepEqual(serverCommands().slice(-2), [['sage.lastResult', ['file:///ws/kernels/k.py']],
        ['sage.roofline', ['file:///ws/kernels/k.py']]]);
    const [panel] = stub.state.panels;
    assert.match(panel.webview.html, /<strong>launch\/latency-bound<\/strong> · launch\/latency-bound: tiny/);
    assert.match(panel.webview.html, /<div class="chart"><svg xmlns="http:\/\/www\.w3\.org\/2000\/svg" class="roofline">/);
    // A server without the command: the tables alone, no error.
    responses['sage.roofline'] = new Error('unknown command sage.roofline');
    await vscode.commands.executeCommand('sage.showProfile');
    assert.equal(stub.state.panels.length, 1, 'the profile view is reused, not stacked');
    assert.doesNotMatch(panel.webview.html, /class="chart"/);
    assert.match(panel.webview.html, /launch\/latency-bound: tiny/);
    assert.equal(stub.calls.filter((c) => c.name === 'window.showErrorMessage').length, 0);
});
