'use strict';
// The "Where the time goes" panel as a browser draws it: SAGE's own renderer
// (the Python engine, $SAGE_PYTHON) draws the roofline of a real result
// (fixtures/leaky_relu_result.json, from `sage bench --profile --json` on the
// bundled leaky_relu example), the panel places it inline under the webview's
// unchanged content security policy, and headless Chromium loads the page:
// the chart's points are in the DOM, the policy blocked nothing, and the PNG
// is drawn. Needs Debian's `chromium`; skipped without it.
const { test } = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const { renderProfileHtml } = require('../out/profileView.js');

function findChromium() {
    for (const name of ['chromium', 'chromium-browser', 'google-chrome']) {
        const found = spawnSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' });
        if (found.status === 0 && found.stdout.trim()) return found.stdout.trim();
    }
    return undefined;
}

const CHROMIUM = findChromium();
const PYTHON = process.env.SAGE_PYTHON || path.join(__dirname, '..', '..', '.venv', 'bin', 'python');
const SKIP = !CHROMIUM ? 'chromium is not installed (apt-get install -y chromium)'
    : !fs.existsSync(PYTHON) ? `no Python with SAGE at ${PYTHON} (set SAGE_PYTHON)` : false;
const RESULT = path.join(__dirname, 'fixtures', 'leaky_relu_result.json');

function roofline(resultJson) {
    const script = 'import sys\nfrom sage_engine.models import EvalResult\nfrom sage_engine.report import roofline_svg\n'
        + 'print(roofline_svg(EvalResult.model_validate_json(sys.stdin.read()), standalone=False))';
    return execFileSync(PYTHON, ['-c', script], { input: resultJson, encoding: 'utf8', timeout: 120_000 });
}

function chromium(args, dir) {
    return spawnSync(CHROMIUM, [
        '--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run',
        '--disable-dev-shm-usage', `--user-data-dir=${path.join(dir, 'profile')}`, '--enable-logging=stderr', '--v=0',
        ...args,
    ], { encoding: 'utf8', timeout: 120_000 });
}

test('the panel draws the roofline inline, and its content security policy blocks none of it', { skip: SKIP }, () => {
    const json = fs.readFileSync(RESULT, 'utf8');
    const svg = roofline(json);
    const html = renderProfileHtml('file:///ws/leaky_relu.py', JSON.parse(json), { nonce: 'testnonce', cspSource: "'self'", roofline: svg });
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sage-profile-'));
    try {
        const page = path.join(dir, 'profile.html');
        fs.writeFileSync(page, html);
        const dom = chromium(['--dump-dom', `file://${page}`], dir);
        assert.equal(dom.status, 0, dom.stderr);
        assert.match(dom.stdout, /<div class="chart"><svg[^>]*class="roofline"/);
        assert.match(dom.stdout, /<circle class="point reference"/);
        assert.match(dom.stdout, /<circle class="point candidate"/);
        assert.ok(dom.stdout.indexOf('class="roofline"') < dom.stdout.indexOf('<table>'), 'the chart sits above the tables');
        assert.doesNotMatch(dom.stderr, /Content Security Policy/, 'the page\'s policy refused part of it');

        const png = path.join(dir, 'profile.png');
        const shot = chromium(['--hide-scrollbars', '--window-size=900,1150', `--screenshot=${png}`, `file://${page}`], dir);
        assert.equal(shot.status, 0, shot.stderr);
        const data = fs.readFileSync(png);
        assert.deepEqual([...data.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
        assert.ok(data.length > 30_000, 'a drawn page, not a blank one');
        if (process.env.SAGE_KEEP_PROFILE_SCREENSHOT) fs.copyFileSync(png, process.env.SAGE_KEEP_PROFILE_SCREENSHOT);
    } finally {
        fs.rmSync(dir, { recursive: true, force: true });
    }
});
