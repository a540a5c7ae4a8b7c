'use strict';
// The memory view as a browser draws it: headless Chromium loads the HTML that
// renderMemoryHtml produced, runs its script, and we read back the DOM.
// Needs Debian's `chromium` (apt-get install -y chromium); skipped without it.
const { test } = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const { renderMemoryHtml } = require('../out/memoryView.js');

function findChromium() {
    for (const name of ['chromium', 'chromium-browser', 'google-chrome']) {
        const found = spawnSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' });
        if (found.status === 0 && found.stdout.trim()) return found.stdout.trim();
    }
    return undefined;
}

const CHROMIUM = findChromium();
const SKIP = CHROMIUM ? false : 'chromium is not installed (apt-get install -y chromium)';

function chromium(args, dir) {
    return execFileSync(CHROMIUM, [
        '--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run',
        '--disable-dev-shm-usage', `--user-data-dir=${path.join(dir, 'profile')}`, '--virtual-time-budget=3000', ...args,
    ], { encoding: 'utf8', timeout: 60_000, stdio: ['ignore', 'pipe', 'pipe'] });
}

function item(id, title, utility, extra = {}) {
    return {
        id, kind: 'experience', status: 'active', title, content: `How: ${title}.`, code: null, scope: 'global',
        operator: 'softmax', family: 'softmax', backend: 'ascend-compile', hardware: 'Ascend910B3', tags: [],
        utility, n_retrieved: 10, n_adopted: 4, n_credited: 4, adoption_rate: 0.4, operators_adopted: ['softmax', 'gelu'],
        source_episode: 3, source_attempt: 8, derived_from: [], tokens: 30, created_at: 0, updated_at: 0, ...extra,
    };
}

const RULES = [item(21, 'Keep each tile under the 192 KB unified buffer', 0.57, { kind: 'rule', status: 'resident', derived_from: [4, 6] })];
const ITEMS = [item(4, 'Split long rows into 8 KB chunks', 0.33), item(6, 'Avoid float16 accumulation in reductions', -0.12)];

// Stands in for VS Code's webview host: records what the page posts and
// clicks the first quarantine button once the page has loaded.
const HOST = `
window.acquireVsCodeApi = () => ({ postMessage: (m) => document.body.setAttribute('data-posted', JSON.stringify(m)) });
window.addEventListener('load', () => document.querySelector('button[data-action="quarantine"]').click());`;

test('headless Chromium shows rule titles, utilities and quarantine buttons', { skip: SKIP }, () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sage-view-'));
    try {
        const html = renderMemoryHtml(ITEMS, RULES, { nonce: 'testnonce', cspSource: "'self'" })
            .replace('<script nonce="testnonce">', `<script nonce="testnonce">${HOST}</script>\n<script nonce="testnonce">`);
        const page = path.join(dir, 'memory.html');
        fs.writeFileSync(page, html);
        const dom = chromium(['--dump-dom', `file://${page}`], dir);

        assert.match(dom, /Keep each tile under the 192 KB unified buffer/);
        assert.match(dom, /Split long rows into 8 KB chunks/);
        assert.match(dom, /<td class="num utility pos">\+0\.57<\/td>/);
        assert.match(dom, /<td class="num utility neg">-0\.12<\/td>/);
        const quarantine = dom.match(/<button data-action="quarantine" data-id="(\d+)"[^>]*>Quarantine<\/button>/g) || [];
        assert.equal(quarantine.length, 3);
        // The page's own script ran under its CSP and posted the click to the host.
        assert.match(dom, /data-posted="\{&quot;command&quot;:&quot;quarantine&quot;,&quot;id&quot;:21\}"/);

        const png = path.join(dir, 'memory.png');
        chromium(['--window-size=1100,700', `--screenshot=${png}`, `file://${page}`], dir);
        const header = fs.readFileSync(png).subarray(0, 8);
        assert.deepEqual([...header], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
        if (process.env.SAGE_KEEP_SCREENSHOT) fs.copyFileSync(png, process.env.SAGE_KEEP_SCREENSHOT);
    } finally {
        fs.rmSync(dir, { recursive: true, force: true });
    }
});

// Measures every action button once laid out: inside the window, and its label not cut.
const MEASURE = `
window.addEventListener('load', () => {
    const width = document.documentElement.clientWidth;
    const cut = [...document.querySelectorAll('button[data-action]')]
        .filter((b) => b.getBoundingClientRect().right > width || b.scrollWidth > b.clientWidth)
        .map((b) => b.dataset.action + b.dataset.id);
    document.body.setAttribute('data-cut', cut.join(' ') || 'none');
});`;

test('in a narrow panel with long items every Quarantine and Delete button is whole and inside it', { skip: SKIP }, () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sage-view-'));
    try {
        const long = item(9, 'Fuse_the_row_maximum_and_the_exponential_into_one_pass_over_unified_buffer_tiles', 0.2, {
            content: 'x'.repeat(400),
            operators_adopted: ['softmax', 'log_softmax', 'cross_entropy', 'layer_norm'],
        });
        const html = renderMemoryHtml([long, ...ITEMS], RULES, { nonce: 'testnonce', cspSource: "'self'" })
            .replace('<script nonce="testnonce">', `<script nonce="testnonce">${MEASURE}</script>\n<script nonce="testnonce">`);
        const page = path.join(dir, 'memory.html');
        fs.writeFileSync(page, html);
        const dom = chromium(['--window-size=520,700', '--dump-dom', `file://${page}`], dir);
        assert.match(dom, /data-cut="none"/);
    } finally {
        fs.rmSync(dir, { recursive: true, force: true });
    }
});
