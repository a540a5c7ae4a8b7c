'use strict';
// Pure pieces: HTML rendering, settings, interpreter choice, status text.
const { test } = require('node:test');
const assert = require('node:assert/strict');

const { renderMemoryHtml } = require('../out/memoryView.js');
const { renderRetrievalHtml } = require('../out/retrievalView.js');
const { escapeHtml } = require('../out/html.js');
const { expandVariables, serverEnvironment } = require('../out/settings.js');
const { chooseInterpreter } = require('../out/python.js');
const { statusText } = require('../out/statusBar.js');

function item(overrides = {}) {
    return {
        id: 3, kind: 'experience', status: 'active', title: 'Tile rows to fit UB', content: 'Split rows into 32 KB tiles.',
        code: null, scope: 'global', operator: 'softmax', family: 'softmax', backend: 'ascend-compile', hardware: 'Ascend910B3',
        tags: [], utility: 0.31, n_retrieved: 9, n_adopted: 4, n_credited: 4, adoption_rate: 0.44,
        operators_adopted: ['softmax', 'layernorm'], source_episode: 12, source_attempt: 40, derived_from: [],
        tokens: 25, created_at: 0, updated_at: 0, ...overrides,
    };
}

test('memory view lists rules and items with utility, adoptions, provenance and buttons', () => {
    const rule = item({ id: 9, kind: 'rule', status: 'resident', title: 'Keep tiles under 192 KB', utility: 0.52, derived_from: [3, 4] });
    const html = renderMemoryHtml([item()], [rule], { nonce: 'n0nce', cspSource: 'vscode-webview://x' });
    assert.match(html, /1 resident rule \(25 tokens\) · 1 retrievable item</);
    assert.match(html, /<td class="num utility pos">\+0\.52<\/td>/);
    assert.match(html, /<td class="num adoptions">4 \/ 9 <span class="muted">\(softmax, layernorm\)<\/span><\/td>/);
    assert.match(html, /episode 12<br>attempt 40/);
    assert.match(html, /from items 3, 4/);
    assert.equal((html.match(/data-action="quarantine"/g) || []).length, 2);
    assert.equal((html.match(/data-action="delete"/g) || []).length, 2);
    assert.match(html, /script-src 'nonce-n0nce'/);
    assert.match(html, /<script nonce="n0nce">/);
});

test('memory view escapes what agents wrote', () => {
    const html = renderMemoryHtml([item({ title: '<img src=x onerror=alert(1)>', content: '"quoted" & <b>' })], []);
    assert.doesNotMatch(html, /<img src=x/);
    assert.match(html, /&lt;img src=x onerror=alert\(1\)&gt;/);
    assert.match(html, /&quot;quoted&quot; &amp; &lt;b&gt;/);
});

test('empty memory says how it fills', () => {
    const html = renderMemoryHtml([], []);
    assert.match(html, /No resident rules yet/);
    assert.match(html, /No items yet/);
});

test('negative utility is marked as such', () => {
    assert.match(renderMemoryHtml([item({ utility: -0.2 })], []), /<td class="num utility neg">-0\.20<\/td>/);
});

test('retrieval view shows the episode and each item with its numbers', () => {
    const scored = { id: 2, kind: 'experience', title: 'Fuse <ops>', content: 'c', tags: [], utility: 0.1, n_adopted: 3,
        adoption_rate: 0.2, similarity: 0.81, exploration: 0.05, score: 0.93, rank: 1 };
    const html = renderRetrievalHtml('gelu', { episode_id: 7, resident_rules: [], items: [scored], filtered_out: { backend: 2 }, tokens: 120 });
    assert.match(html, /episode 7 · 120 tokens · filtered out: 2 backend/);
    assert.match(html, /Fuse &lt;ops&gt;/);
    assert.match(html, /utility \+0\.10 · adopted 3× · similarity 0\.81 · score 0\.93/);
});

test('escapeHtml covers the five characters', () => {
    assert.equal(escapeHtml(`<a href="x">'&'</a>`), '&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;');
});

test('settings expand workspaceFolder, userHome and ~', () => {
    assert.equal(expandVariables('${workspaceFolder}/m.db', '/ws', '/home/u'), '/ws/m.db');
    assert.equal(expandVariables('~/m.db', undefined, '/home/u'), '/home/u/m.db');
    assert.equal(expandVariables('${userHome}/m.db', undefined, '/home/u'), '/home/u/m.db');
});

test('server environment carries only the settings that are set', () => {
    assert.deepEqual(serverEnvironment({ pythonPath: '', databasePath: '', backend: '', chip: '' }), {});
    assert.deepEqual(serverEnvironment({ pythonPath: 'p', databasePath: '/d.db', backend: 'cpu', chip: 'Ascend910B3' }),
        { SAGE_DB: '/d.db', SAGE_BACKEND: 'cpu', SAGE_CHIP: 'Ascend910B3' });
});

test('interpreter: setting, then Python extension, then workspace .venv, then python3', () => {
    const base = { configured: '', workspaceFolders: ['/ws'], platform: 'linux', exists: () => false };
    assert.equal(chooseInterpreter({ ...base, configured: '/c/python' , fromPythonExtension: '/e/python' }), '/c/python');
    assert.equal(chooseInterpreter({ ...base, fromPythonExtension: '/e/python' }), '/e/python');
    assert.equal(chooseInterpreter({ ...base, exists: (f) => f === '/ws/.venv/bin/python' }), '/ws/.venv/bin/python');
    assert.equal(chooseInterpreter(base), 'python3');
    assert.equal(chooseInterpreter({ ...base, platform: 'win32' }), 'python');
});

test('status text: nothing yet, speedup, failure, stale', () => {
    assert.equal(statusText(null).text, '$(beaker) SAGE');
    const summary = { uri: 'u', task: 't', summary: 's', stale: false, result: { status: 'correct', correct: true, speedup: 1.5 } };
    assert.equal(statusText(summary).text, '$(check) SAGE 1.50x');
    assert.equal(statusText({ ...summary, result: { status: 'compile_error', correct: false } }).text, '$(error) SAGE compile error');
    assert.equal(statusText({ ...summary, stale: true }).text, '$(check) SAGE 1.50x $(history)');
    const unverified = { ...summary, result: { ...summary.result, speedup: 52.5, speedup_trusted: false } };
    assert.equal(statusText(unverified).text, '$(check) SAGE 52.50x (unverified)');
    // Running says so over whatever result there was, and how to cancel.
    const running = statusText({ ...summary, running: true });
    assert.equal(running.text, '$(sync~spin) SAGE: benchmarking…');
    assert.match(running.tooltip, /Click to cancel it/);
});

const { renderProfileHtml } = require('../out/profileView.js');

function profiled(overrides = {}) {
    const side = (name, share) => ({
        kernels: [{ name, launches: 1, time_us: 812.5 }], launches: 1, kernel_us: 812.5, wall_us: 830,
        achieved_gbps: 20.61, achieved_flops: null, bandwidth_share: share, compute_share: null, bound: 'memory', note: '',
    });
    return {
        status: 'correct', message: '', task: 'leaky_relu', backend: 'cpu', hardware: 'x86_64-avx2', candidate_hash: 'h',
        correct: true, speedup: 0.63, reference_timing: { median_ms: 0.8, iqr_ms: 0.01, reps: 10 },
        candidate_timing: { median_ms: 1.27, iqr_ms: 0.02, reps: 10 },
        profile: {
            source: 'cpu-ops', bytes: 16777216, flops: null, reference: side('aten::leaky_relu', 0.6),
            candidate: side('aten::clamp<T>', 0.38), peak_gbps: 52.7, peak_flops: null, bound: 'memory',
            summary: 'memory-bound at 38% of measured bandwidth; the reference launches 1 torch op a call, the candidate 1: nothing was fused',
            impossible: null, own_kernels: null, calibration: 'cpu on x86_64-avx2, 1 thread', notes: ['candidate: a <note>'],
        },
        ...overrides,
    };
}

test('profile view shows the sentence, both sides against the limits, and their kernels, escaped', () => {
    const html = renderProfileHtml('file:///k.py', profiled(), { nonce: 'n0nce', cspSource: 'vscode-webview://x' });
    assert.match(html, /<strong>memory-bound<\/strong> · memory-bound at 38% of measured bandwidth; the reference launches 1 torch op a call/);
    assert.match(html, /<th>share of measured bandwidth<\/th><td class="num">60%<\/td><td class="num">38%<\/td>/);
    assert.match(html, /<th>torch ops a call<\/th>/);
    assert.match(html, /<code>aten::clamp&lt;T&gt;<\/code><\/td><td class="num">1\.0<\/td><td class="num">812\.5<\/td>/);
    assert.match(html, /A call moves at least 16\.0 MiB \(inputs plus outputs\); measured on this machine: 52\.7 GB\/s/);
    assert.match(html, /<li>candidate: a &lt;note&gt;<\/li>/);
    assert.doesNotMatch(html, /Physically impossible/);
});

test('profile view marks an impossible time and says when there is no profile yet', () => {
    const impossible = profiled();
    impossible.profile.impossible = 'its time implies 900 GB/s';
    assert.match(renderProfileHtml('file:///k.py', impossible), /<strong>Physically impossible time:<\/strong> its time implies 900 GB\/s/);
    assert.match(renderProfileHtml('file:///k.py', null), /No profile for file:\/\/\/k\.py yet/);
    assert.match(renderProfileHtml('file:///k.py', profiled({ profile: null })), /only a correct, timed candidate is profiled/);
});

test('profile view draws the roofline above the tables, inline under the unchanged policy', () => {
    const svg = '<svg xmlns="http://www.w3.org/2000/svg" class="roofline" width="800" height="400"><circle class="point candidate" cx="1" cy="2" r="5"/></svg>';
    const html = renderProfileHtml('file:///k.py', profiled(), { nonce: 'n0nce', cspSource: 'vscode-webview://x', roofline: svg });
    assert.ok(html.indexOf('<div class="chart"><svg') < html.indexOf('<table>'), 'the chart comes before the tables');
    assert.match(html, /content="default-src 'none'; style-src vscode-webview:\/\/x 'nonce-n0nce'; script-src 'nonce-n0nce'"/);
    assert.doesNotMatch(html, /<script/);
    // Markup that could run or fetch anything is refused whole: the tables alone.
    for (const bad of [
        '<svg><script>alert(1)</script></svg>', '<svg onload="alert(1)"></svg>', '<svg><image href="http://x/y.png"/></svg>',
        '<svg><foreignObject><p>x</p></foreignObject></svg>', '<div>not svg</div>',
    ]) {
        const page = renderProfileHtml('file:///k.py', profiled(), { roofline: bad });
        assert.doesNotMatch(page, /class="chart"/, bad);
    }
    assert.doesNotMatch(renderProfileHtml('file:///k.py', profiled()), /class="chart"/);
});

test('profile view says how far each side\'s kernels are from its timed median', () => {
    const result = profiled();
    result.profile.reference.agreement = 0.97;
    result.profile.candidate.agreement = 2.86;
    result.profile.candidate.agreement_note = 'its kernel times add up to 6.84 ms a call, 186% more than its timed median (2.39 ms): the machine was busier then';
    const html = renderProfileHtml('file:///k.py', result);
    assert.match(html, /<th>torch ops' time over the timed median<\/th><td class="num">97%<\/td><td class="num"><span class="neg" title="its kernel times add up to 6\.84 ms a call, 186% more than its timed median \(2\.39 ms\): the machine was busier then">286%<\/span><\/td>/);
});

test('status bar tooltip carries where the time goes', () => {
    const summary = { uri: 'file:///k.py', task: 'leaky_relu', summary: '0.63x vs reference · correct · cpu', stale: false, result: profiled() };
    const { tooltip } = statusText(summary);
    assert.equal(tooltip, '0.63x vs reference · correct · cpu\nWhere the time goes: memory-bound at 38% of measured bandwidth; the reference launches 1 torch op a call, the candidate 1: nothing was fused');
});

test('server log lines reach the output channel at the level they were logged at, tracebacks with theirs', () => {
    const { ServerLog } = require('../out/server.js');
    const seen = [];
    const channel = Object.fromEntries(['debug', 'info', 'warn', 'error'].map((level) => [level, (line) => seen.push([level, line])]));
    const log = new ServerLog();
    for (const line of [
        '2026-12-07 02:10:01,123 sage.lsp INFO opening memory /ws/memory.db (backend cpu)',
        '2026-12-07 02:10:02,456 sage.lsp WARNING no last result for file:///ws/k.py: gone',
        '2026-12-07 02:10:03,789 pygls.protocol ERROR Failed to handle request',
        'Traceback (most recent call last):',
        'sage-lsp: error: unrecognized arguments: --pipe=x',
    ]) {
        log.write(line, channel);
    }
    assert.deepEqual(seen.map(([level]) => level), ['info', 'warn', 'error', 'error', 'error']);
    assert.equal(log.tail(1), 'sage-lsp: error: unrecognized arguments: --pipe=x');
});
