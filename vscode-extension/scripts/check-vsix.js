'use strict';
// Opens a packaged .vsix and loads its extension the way VS Code would,
// with a load-only `vscode` module built from @types/vscode's export names:
// proves every runtime dependency is inside the package.
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const Module = require('node:module');
const os = require('node:os');
const path = require('node:path');

const vsix = process.argv[2];
assert.ok(vsix && fs.existsSync(vsix), `usage: check-vsix.js <file.vsix> (got ${vsix})`);
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sage-vsix-'));
try {
    execFileSync('python3', ['-m', 'zipfile', '-e', vsix, dir]);
    const root = path.join(dir, 'extension');
    const pkg = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));
    assert.equal(pkg.engines.vscode, '^1.101.0');
    assert.ok(pkg.contributes.mcpServerDefinitionProviders.length === 1);

    const dts = fs.readFileSync(path.join(__dirname, '..', 'node_modules', '@types', 'vscode', 'index.d.ts'), 'utf8');
    const dummy = () => new Proxy(class {}, { get: (t, k) => (k in t ? t[k] : dummy()) });
    const api = {};
    for (const m of dts.matchAll(/^\t(?:export )?(?:class|enum|namespace|const|function) (\w+)/gm)) api[m[1]] = dummy();
    const stubPath = path.join(dir, 'vscode-load-stub.js');
    fs.writeFileSync(stubPath, 'module.exports = globalThis.__vscodeLoadStub;');
    globalThis.__vscodeLoadStub = api;
    const resolve = Module._resolveFilename;
    Module._resolveFilename = function (request, parent, ...rest) {
        if (request === 'vscode') return stubPath;
        const found = resolve.call(this, request, parent, ...rest);
        if (parent && parent.filename && parent.filename.startsWith(root) && !found.startsWith(root) && !Module.isBuiltin(request)) {
            throw new Error(`${request} resolved outside the package (${found}): it is missing from the .vsix`);
        }
        return found;
    };
    const ext = require(path.join(root, pkg.main));
    assert.equal(typeof ext.activate, 'function');
    assert.equal(typeof ext.deactivate, 'function');
    console.log(`${path.basename(vsix)}: ${pkg.name} ${pkg.version} loads with its bundled dependencies`);
} finally {
    fs.rmSync(dir, { recursive: true, force: true });
}
