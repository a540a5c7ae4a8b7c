'use strict';
// The packaged extension in a real VS Code: code-server (VS Code 1.117 in a
// browser, installed by e2e/install.sh) serves a workspace on 127.0.0.1, the
// .vsix is installed into it as a user would, and Debian's Chromium, driven
// by playwright-core, clicks through it as a person does: set a kernel
// file's task, benchmark it, read the lens and the status bar, open the
// profile and find the roofline, break the kernel and find the diagnostic,
// open the memory view, start the MCP server and count its tools.
//
// Needs: SAGE_VSCODE_E2E_DIR (install.sh's output), SAGE_PYTHON (Python with
// SAGE), SAGE_VSIX (the packaged extension). Screenshots of a failing step go
// to SAGE_E2E_ARTIFACTS (default: dist/e2e).
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn, execFileSync } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

const E2E = process.env.SAGE_VSCODE_E2E_DIR;
const PYTHON = process.env.SAGE_PYTHON;
const VSIX = process.env.SAGE_VSIX;
const REQUIRED = (process.env.SAGE_TEST_REQUIRE ?? '').split(',').includes('vscode');
const missing = [!E2E && 'SAGE_VSCODE_E2E_DIR', !PYTHON && 'SAGE_PYTHON', !VSIX && 'SAGE_VSIX'].filter(Boolean);
if (missing.length && REQUIRED) {
    throw new Error(`the VS Code end-to-end test is required but ${missing.join(', ')} is not set (run scripts/test)`);
}
const SKIP = missing.length ? `no real VS Code here (${missing.join(', ')} unset; vscode-extension/scripts/ci.sh sets them)` : false;
const ARTIFACTS = process.env.SAGE_E2E_ARTIFACTS ?? path.join(__dirname, '..', 'dist', 'e2e');

// A correct leaky ReLU written for the CPU, and the same file broken: the
// negative slope applied everywhere.
const KERNEL = `import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x >= 0, x, x * self.negative_slope)
`;
const BROKEN = KERNEL.replace('torch.where(x >= 0, x, x * self.negative_slope)', 'x * self.negative_slope');

let dir;
let server;
let browser;
let page;
let serverLog = '';

function freePort() {
    return new Promise((resolve, reject) => {
        const probe = net.createServer();
        probe.once('error', reject);
        probe.listen(0, '127.0.0.1', () => {
            const { port } = probe.address();
            probe.close(() => resolve(port));
        });
    });
}

function codeServer(args, options = {}) {
    const node = path.join(E2E, 'node_modules', 'node', 'bin', 'node');
    const entry = path.join(E2E, 'node_modules', 'code-server', 'out', 'node', 'entry.js');
    return [node, [entry, ...args], options];
}

async function waitFor(what, probe, timeoutMs) {
    const deadline = Date.now() + timeoutMs;
    let last;
    while (Date.now() < deadline) {
        try {
            const value = await probe();
            if (value) return value;
        } catch (err) {
            last = err;
        }
        await new Promise((resolve) => setTimeout(resolve, 250));
    }
    throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ''}`);
}

/** Runs one step; a failing step leaves a screenshot and the server's log tail behind. */
async function step(name, fn) {
    try {
        return await fn();
    } catch (err) {
        fs.mkdirSync(ARTIFACTS, { recursive: true });
        const shot = path.join(ARTIFACTS, `${name.replace(/\W+/g, '-')}.png`);
        await page?.screenshot({ path: shot }).catch(() => undefined);
        err.message += `\n(step "${name}"; screenshot ${shot}; code-server log tail:\n${serverLog.slice(-3000)})`;
        throw err;
    }
}

async function palette(command, { pick } = {}) {
    await page.keyboard.press('F1');
    const input = page.locator('.quick-input-widget input');
    await input.waitFor({ state: 'visible', timeout: 15_000 });
    await input.fill(`>${command}`);
    const row = page.locator('.quick-input-list .monaco-list-row', { hasText: command }).first();
    await row.waitFor({ timeout: 15_000 });
    await input.press('Enter');
    if (pick) {
        await choose(pick);
    }
}

/** Picks the quick-pick row whose label is `label` (typed to filter, then Enter). */
async function choose(label) {
    const input = page.locator('.quick-input-widget input');
    await input.waitFor({ state: 'visible', timeout: 30_000 });
    await page.locator('.quick-input-list .monaco-list-row').first().waitFor({ timeout: 30_000 });
    await input.fill(label);
    await page.locator('.quick-input-list .monaco-list-row.focused', { hasText: label }).first().waitFor({ timeout: 15_000 });
    await input.press('Enter');
}

/** Attempts stored in the memory, read with the Python the extension runs. */
function attempts() {
    const count = execFileSync(PYTHON, ['-c', 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT COUNT(*) FROM attempts").fetchone()[0])',
        path.join(dir, 'memory.db')], { encoding: 'utf8' });
    return Number(count.trim());
}

function statusBar() {
    return page.locator('#sage-npu\\.sage-kernels\\.sage\\.status, .statusbar-item[id$="sage.status"]').first();
}

/** The frame of the webview whose document shows `selector`. */
async function webviewFrame(selector, timeoutMs = 60_000) {
    return waitFor(`a webview with ${selector}`, async () => {
        for (const frame of page.frames()) {
            if (await frame.locator(selector).count().catch(() => 0)) return frame;
        }
        return undefined;
    }, timeoutMs);
}

before(async () => {
    if (SKIP) return;
    const { chromium } = require(path.join(E2E, 'node_modules', 'playwright-core'));
    dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'sage-vscode-')));
    const workspace = path.join(dir, 'workspace');
    const userData = path.join(dir, 'user-data');
    const extensions = path.join(dir, 'extensions');
    fs.mkdirSync(workspace);
    fs.mkdirSync(path.join(userData, 'User'), { recursive: true });
    fs.writeFileSync(path.join(workspace, 'leaky_relu.py'), KERNEL);
    // The settings a user sets (docs/editor.md), plus a quiet start page.
    fs.writeFileSync(path.join(userData, 'User', 'settings.json'), JSON.stringify({
        'sage.pythonPath': PYTHON,
        'sage.databasePath': path.join(dir, 'memory.db'),
        'workbench.startupEditor': 'none',
        'security.workspace.trust.enabled': false,
        'extensions.autoCheckUpdates': false,
        'extensions.autoUpdate': false,
        'telemetry.telemetryLevel': 'off',
        'editor.codeLens': true,
        'chat.mcp.autostart': 'never',
        'workbench.secondarySideBar.defaultVisibility': 'hidden',
    }, null, 2));
    const common = ['--user-data-dir', userData, '--extensions-dir', extensions];
    const [node, install] = codeServer([...common, '--install-extension', VSIX]);
    execFileSync(node, install, { stdio: 'pipe', timeout: 120_000 });

    const port = await freePort();
    // Fast evaluations: the flow is under test here, not the timing.
    const env = { ...process.env, SAGE_CORRECTNESS_TRIALS: '1', SAGE_TIMING_BUDGET_S: '0.05', SAGE_TIMING_MIN_REPS: '3',
        SAGE_CACHE_DIR: path.join(dir, 'cache') };
    const [cmd, args] = codeServer([...common, '--bind-addr', `127.0.0.1:${port}`, '--auth', 'none', '--disable-telemetry',
        '--disable-update-check', '--disable-workspace-trust', '--disable-getting-started-override', workspace]);
    server = spawn(cmd, args, { env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    server.stdout.on('data', (d) => (serverLog += d));
    server.stderr.on('data', (d) => (serverLog += d));
    await waitFor('code-server to listen', () => /HTTP server listening/.test(serverLog), 120_000);

    browser = await chromium.launch({ executablePath: process.env.SAGE_CHROMIUM ?? '/usr/bin/chromium', args: ['--no-sandbox'] });
    const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
    await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: `http://127.0.0.1:${port}` });
    page = await context.newPage();
    await page.goto(`http://127.0.0.1:${port}/?folder=${encodeURIComponent(workspace)}`);
    await page.locator('.monaco-workbench').waitFor({ timeout: 120_000 });
});

after(async () => {
    await browser?.close().catch(() => undefined);
    if (server?.pid) {
        try {
            process.kill(-server.pid, 'SIGTERM');
        } catch {
            // already gone
        }
        await new Promise((resolve) => (server.exitCode !== null ? resolve() : server.once('exit', resolve)));
    }
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

test('the packaged extension works in a real VS Code: task, benchmark, lens, status bar, profile, diagnostic, memory, MCP', { skip: SKIP, timeout: 600_000 }, async () => {
    await step('open the kernel file', async () => {
        await page.keyboard.press('Control+P');
        const input = page.locator('.quick-input-widget input');
        await input.fill('leaky_relu.py');
        await page.locator('.quick-input-list .monaco-list-row', { hasText: 'leaky_relu.py' }).first().waitFor({ timeout: 30_000 });
        await input.press('Enter');
        await page.locator('.monaco-editor .view-lines', { hasText: 'class ModelNew' }).first().waitFor({ timeout: 30_000 });
    });

    await step('the language server starts and offers a lens', async () => {
        // Before any task: "Set task…" over the kernel, from the running server.
        await page.locator('.codelens-decoration', { hasText: 'SAGE' }).first().waitFor({ timeout: 120_000 });
        const text = await statusBar().innerText();
        assert.doesNotMatch(text, /not running/);
    });

    await step('set the task from the palette, named after the file first', async () => {
        await palette('SAGE: Set task for this file');
        const first = page.locator('.quick-input-list .monaco-list-row').first();
        await first.waitFor({ timeout: 30_000 });
        assert.match(await first.innerText(), /^leaky_relu/);
        await page.locator('.quick-input-widget input').press('Enter');
        await page.locator('.monaco-editor .view-lines', { hasText: 'sage: task=leaky_relu' }).first().waitFor({ timeout: 30_000 });
        await page.keyboard.press('Control+S');
    });

    await step('benchmark: the status bar and the lens show the same evaluation', async () => {
        await palette('SAGE: Benchmark file');
        const status = await waitFor('a speedup in the status bar', async () => {
            const text = await statusBar().innerText();
            return /SAGE \d+\.\d\dx/.test(text) ? text : undefined;
        }, 240_000);
        const speedup = status.match(/(\d+\.\d\d)x/)[1];
        const lens = page.locator('.codelens-decoration', { hasText: 'vs reference' }).first();
        await lens.waitFor({ timeout: 30_000 });
        const lensText = await lens.innerText();
        assert.match(lensText, new RegExp(`SAGE: ${speedup}x vs reference · correct · cpu`));
    });

    await step('the profile panel draws the roofline', async () => {
        await palette('SAGE: Show where the time goes');
        const frame = await webviewFrame('svg.roofline');
        assert.ok(await frame.locator('svg.roofline').isVisible());
    });

    await step('a broken kernel is a diagnostic on its class line', async () => {
        await page.locator('.monaco-editor .view-lines', { hasText: 'class ModelNew' }).first().click();
        await page.evaluate((text) => navigator.clipboard.writeText(text), `# sage: task=leaky_relu\n${BROKEN}`);
        await page.keyboard.press('Control+A');
        await page.keyboard.press('Control+V');
        await page.keyboard.press('Control+S');
        await palette('SAGE: Benchmark file');
        await waitFor('"incorrect" in the status bar', async () => /SAGE incorrect/.test(await statusBar().innerText()), 240_000);
        // The lens shows that same evaluation, not the earlier one gone stale.
        await page.locator('.codelens-decoration', { hasText: 'SAGE: incorrect' }).first().waitFor({ timeout: 30_000 });
        await palette('View: Focus Problems (Errors, Warnings, Infos)');
        const problem = page.locator('.markers-panel .monaco-list-row', { hasText: /exceed tolerance|incorrect/i }).first();
        await problem.waitFor({ timeout: 30_000 });
        assert.match(await problem.innerText(), /sage/);
    });

    await step('a window reloaded while a benchmark runs shows it running and gets its result, evaluated once', async () => {
        const before = attempts();
        await page.locator('.monaco-editor .view-lines', { hasText: 'class ModelNew' }).first().click();
        // Loading this module takes 10 s: time to reload the window while it is evaluated.
        await page.evaluate((text) => navigator.clipboard.writeText(text), `# sage: task=leaky_relu\nimport time\ntime.sleep(10)\n${KERNEL}`);
        await page.keyboard.press('Control+A');
        await page.keyboard.press('Control+V');
        await page.keyboard.press('Control+S');
        await palette('SAGE: Benchmark file');
        await waitFor('"benchmarking" in the status bar', async () => /benchmarking/.test(await statusBar().innerText()), 60_000);
        await palette('Developer: Reload Window');
        await page.locator('.monaco-workbench').waitFor({ timeout: 120_000 });
        await waitFor('the reloaded window to show the evaluation running', async () => /benchmarking/.test(await statusBar().innerText()), 120_000);
        await waitFor('its result in the status bar', async () => /SAGE \d+\.\d\dx/.test(await statusBar().innerText()), 240_000);
        assert.equal(attempts(), before + 1);
    });

    await step('clicking the status bar while a benchmark runs cancels it, and nothing is stored', async () => {
        const before = attempts();
        await palette('SAGE: Benchmark file');
        await waitFor('"benchmarking" in the status bar', async () => /benchmarking/.test(await statusBar().innerText()), 60_000);
        await statusBar().click();
        await waitFor('the last result back in the status bar', async () => /SAGE \d+\.\d\dx/.test(await statusBar().innerText()), 120_000);
        assert.equal(attempts(), before);
    });

    await step('the memory view opens', async () => {
        await palette('SAGE: Show memory');
        const frame = await webviewFrame('h1:text("SAGE memory")');
        assert.match(await frame.locator('body').innerText(), /resident rule/);
    });

    await step('the MCP server starts and lists its tools', async () => {
        await palette('MCP: List Servers');
        await choose('SAGE kernel memory');
        await choose('Start Server');
        // Starting shows the server's output channel, where VS Code counts the tools it found.
        const text = await waitFor('the MCP server to report its tools', async () => {
            // The output is a Monaco editor: its spaces render as no-break spaces, which \s matches.
            const shown = await page.locator('.part.panel .view-lines').first().innerText();
            return /Discovered\s\d+\stools/.test(shown) ? shown : undefined;
        }, 120_000);
        const tools = Number(text.match(/Discovered\s(\d+)\stools/)[1]);
        assert.ok(tools >= 12, `the SAGE MCP server lists ${tools} tools`);
    });
});
